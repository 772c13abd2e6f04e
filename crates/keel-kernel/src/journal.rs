//! The effect journal (docs/recovery.md): the records a run writes before a side
//! effect, and the pure recovery decision a resumed run takes from them.
//!
//! Before a batch runs, [`Overlay`] turns each side-effecting call into an
//! [`EffectStarted`] record: the hash of its final arguments, its
//! idempotency class and, for file tools, each target's content hash before
//! the call and the one the call will leave. The overlay replays the batch's
//! own planned writes in call order, so the second edit of a file in one
//! batch is recorded against the first edit's result, not the stale disk.
//!
//! After a crash, [`plan`] reads the tail of a branch, the workspace's
//! current hashes and the state of each command's receipt
//! ([`keel_tools::receipt`]) and decides, per call left without a result, what a
//! resumed run does ([`decide`] is the table). It is pure: the same branch
//! and the same hashes give the same plan. Invariant: only a call that is
//! known not to have acted, or whose effect is idempotent and not yet
//! visible, is ever run again; an unknown outcome is reported, never redone.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use keel_protocol::{
    EffectStarted, Entry, EntryPayload, FileEvidence, Idempotency, Message, PathKind,
    RecoveryAction, ToolCall,
};
use keel_tools::evidence::{PathState, current_content, path_state};
use keel_tools::receipt::ReceiptDamage;
use keel_tools::{Tool, Workspace};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::permission::sha256_hex;

/// The SHA-256 of `bytes` as lowercase hex.
pub fn content_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// What a command's receipt in the session's journal directory shows
/// (looked up by the id of the call's `effect_started` entry, never by its
/// call id: a receipt of another call never decides a recovery).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReceiptState {
    /// No receipt (or none is kept): nothing is known.
    #[default]
    Absent,
    /// The command started; no complete exit receipt.
    Started,
    /// A complete exit receipt: the command ended before the crash.
    Exited,
    /// The journal or the call's receipts cannot be trusted (torn, garbage,
    /// output lost, wrong type, untrusted or missing directory): the call
    /// is interrupted, and the cause is reported.
    Damaged(ReceiptDamage),
}

/// The planned content of files a batch writes, layered over the workspace.
pub(crate) struct Overlay<'a> {
    workspace: &'a Workspace,
    planned: HashMap<PathBuf, Option<Vec<u8>>>,
}

impl<'a> Overlay<'a> {
    pub(crate) fn new(workspace: &'a Workspace) -> Self {
        Self {
            workspace,
            planned: HashMap::new(),
        }
    }

    fn current(&self, abs: &Path) -> Option<Vec<u8>> {
        match self.planned.get(abs) {
            Some(planned) => planned.clone(),
            None => current_content(self.workspace, abs),
        }
    }

    /// What is at `abs` before the next call: the batch's own planned
    /// content, else the disk.
    fn state(&self, abs: &Path) -> PathState {
        match self.planned.get(abs) {
            Some(Some(planned)) => PathState::File(planned.clone()),
            Some(None) => PathState::Absent,
            None => path_state(self.workspace, abs),
        }
    }

    /// The journal record of one validated call, `None` for a read-only
    /// tool (re-running it is always safe, so it needs none).
    pub(crate) fn record(
        &mut self,
        call: &ToolCall,
        tool: &dyn Tool,
        arguments: &Value,
    ) -> Option<EffectStarted> {
        let idempotency = tool.idempotency();
        if idempotency == Idempotency::ReadOnly {
            return None;
        }
        let planned = tool.planned_files(arguments, self.workspace, &|abs| self.current(abs));
        let mut evidence = Vec::new();
        for file in planned {
            let before = self.state(&file.abs);
            evidence.push({
                let mut file_evidence = FileEvidence::new(self.workspace.display(&file.abs));
                file_evidence.before_sha256 = match &before {
                    PathState::File(bytes) => Some(content_sha256(bytes)),
                    _ => None,
                };
                file_evidence.after_sha256 = file.after.as_deref().map(content_sha256);
                file_evidence.before_kind = Some(before.kind());
                file_evidence
            });
            // An unknown post-image is planned as "absent": a later call of
            // the batch on this file then records a pre-image that cannot
            // match, so recovery reports it as a conflict, never re-runs it.
            self.planned.insert(file.abs, file.after);
        }
        Some({
            let mut effect_started = EffectStarted::new(
                call.id.clone(),
                call.name.clone(),
                sha256_hex(arguments),
                idempotency,
            );
            effect_started.evidence = evidence;
            effect_started
        })
    }
}

/// What an evidence path holds now, as recovery compares it with the
/// journal's record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnDisk {
    /// Nothing is there.
    Absent,
    /// A regular file with this content hash.
    File {
        /// SHA-256 of the content, lowercase hex.
        sha256: String,
    },
    /// Something that is not a regular file (or cannot be read).
    Other(PathKind),
}

impl OnDisk {
    /// A regular file with content hash `sha256`.
    pub fn file(sha256: impl Into<String>) -> Self {
        Self::File {
            sha256: sha256.into(),
        }
    }

    fn holds(&self, sha256: Option<&str>) -> bool {
        matches!((self, sha256), (Self::File { sha256: now }, Some(hash)) if now == hash)
    }
}

/// What a resumed run does about one call of the interrupted batch.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CallRecovery {
    /// The call, as the assistant message holds it.
    pub call: ToolCall,
    /// What to do.
    pub action: RecoveryAction,
    /// Why, in one sentence (told to the model for reported calls).
    pub reason: String,
    /// The id of the call's `effect_started` entry: its receipts' key.
    pub effect_entry_id: Option<String>,
    /// What was wrong with a command's receipts, when that decided it.
    pub damage: Option<ReceiptDamage>,
}

/// How a branch ends, as far as recovery is concerned.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Interruption {
    /// A `run_start` has no `run_end` after it.
    pub run_open: bool,
    /// The calls of the last assistant message that have no result, with
    /// what to do about each, in call order.
    pub calls: Vec<CallRecovery>,
}

impl Interruption {
    /// Whether the branch ends in an interrupted run.
    pub fn is_interrupted(&self) -> bool {
        self.run_open || !self.calls.is_empty()
    }
}

/// One branch entry as [`plan_records`] reads it: a message (as stored, or
/// as a request carries it: the tool calls and results are the same), or
/// any other payload.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Record<'a> {
    /// A message entry.
    Message(&'a Message),
    /// An `effect_started` entry, with its entry id.
    Effect(&'a str, &'a EffectStarted),
    /// Any other entry.
    Other(&'a EntryPayload),
}

impl<'a> Record<'a> {
    /// The record of a stored entry.
    fn of(entry: &'a Entry) -> Self {
        match &entry.payload {
            EntryPayload::Message { message } => Self::Message(message),
            EntryPayload::EffectStarted { effect } => Self::Effect(&entry.id, effect),
            other => Self::Other(other),
        }
    }
}

/// Reads how `branch` ends and decides each dangling call;
/// `current(path)` is what an evidence path of the workspace holds now,
/// `receipt(key)` the state of a command's receipts keyed by its
/// `effect_started` entry's id.
///
/// The calls are decided in call order as the resumed run will carry them
/// out: a file that an earlier call of the batch is run again on is
/// expected to hold that call's planned content when a later call is
/// decided (two writes of one file, both cut short, are both run again).
pub fn plan(
    branch: &[Entry],
    current: &dyn Fn(&str) -> OnDisk,
    receipt: &dyn Fn(&str) -> ReceiptState,
) -> Interruption {
    plan_records(branch.iter().map(Record::of), current, receipt)
}

/// [`plan`] over the branch's records, however the branch holds them.
pub(crate) fn plan_records<'a>(
    branch: impl Iterator<Item = Record<'a>>,
    current: &dyn Fn(&str) -> OnDisk,
    receipt: &dyn Fn(&str) -> ReceiptState,
) -> Interruption {
    let mut open_run: Option<&str> = None;
    let mut last_calls: Vec<&ToolCall> = Vec::new();
    let mut answered: HashSet<&str> = HashSet::new();
    let mut effects: HashMap<&str, (Option<&str>, &EffectStarted)> = HashMap::new();
    for record in branch {
        match record {
            Record::Other(EntryPayload::RunStart { run_id, .. }) => open_run = Some(run_id),
            Record::Other(EntryPayload::RunEnd { run_id, .. })
                if open_run == Some(run_id.as_str()) =>
            {
                open_run = None;
            }
            Record::Message(Message::Assistant(message)) => {
                last_calls = message.tool_calls().collect();
                answered.clear();
                effects.clear();
            }
            Record::Message(Message::ToolResult(result)) => {
                answered.insert(&result.call_id);
            }
            Record::Effect(entry_id, effect) => {
                effects.insert(&effect.call_id, (Some(entry_id), effect));
            }
            Record::Other(EntryPayload::EffectStarted { effect }) => {
                effects.insert(&effect.call_id, (None, effect));
            }
            _ => {}
        }
    }
    // What the files hold once the calls decided so far are carried out.
    let mut expected: HashMap<&str, OnDisk> = HashMap::new();
    let mut calls = Vec::new();
    for call in last_calls {
        if answered.contains(call.id.as_str()) {
            continue;
        }
        let (key, effect) = match effects.get(call.id.as_str()) {
            Some((key, effect)) => (*key, Some(*effect)),
            None => (None, None),
        };
        // Receipts are read only for commands, by their entry's key.
        let state = match (key, effect) {
            (Some(key), Some(effect)) if effect.idempotency == Idempotency::Command => receipt(key),
            _ => ReceiptState::Absent,
        };
        let damage = match &state {
            ReceiptState::Damaged(damage) => Some(damage.clone()),
            _ => None,
        };
        let now = |path: &str| expected.get(path).cloned().unwrap_or_else(|| current(path));
        let (action, reason) = decide(effect, &now, state);
        if action == RecoveryAction::Rerun
            && let Some(effect) = effect
        {
            for file in &effect.evidence {
                let after = match &file.after_sha256 {
                    Some(sha256) => OnDisk::file(sha256.as_str()),
                    // Unknown content: no later call can match it.
                    None => OnDisk::Other(PathKind::Other),
                };
                expected.insert(file.path.as_str(), after);
            }
        }
        calls.push(CallRecovery {
            call: call.clone(),
            action,
            reason,
            effect_entry_id: key.map(str::to_owned),
            damage,
        });
    }
    Interruption {
        run_open: open_run.is_some(),
        calls,
    }
}

/// The recovery table for one call left without a result (`current`: what
/// an evidence path holds now; `receipt`: its command receipt, read only
/// for commands).
pub fn decide(
    effect: Option<&EffectStarted>,
    current: &dyn Fn(&str) -> OnDisk,
    receipt: ReceiptState,
) -> (RecoveryAction, String) {
    let Some(effect) = effect else {
        return (
            RecoveryAction::NotStarted,
            "no effect record: the call never started".into(),
        );
    };
    match effect.idempotency {
        Idempotency::ReadOnly => (RecoveryAction::Rerun, "read-only: safe to run again".into()),
        Idempotency::WriteFile | Idempotency::EditFile => decide_files(effect, current),
        Idempotency::Command => match receipt {
            ReceiptState::Exited => (
                RecoveryAction::RecoveredFromReceipt,
                "the command had finished before the crash: its exit status and output are \
                 recovered from its receipt; it was not run again"
                    .into(),
            ),
            ReceiptState::Damaged(damage) => (
                RecoveryAction::Interrupted,
                format!(
                    "the command journal is damaged ({damage}), so whether the command \
                     finished, and what it did, is unknown; it was not run again"
                ),
            ),
            _ => (
                RecoveryAction::Interrupted,
                "the command was interrupted by a crash; whether it finished, and what it did, \
                 is unknown, so it was not run again"
                    .into(),
            ),
        },
        Idempotency::Undeclared | _ => (
            RecoveryAction::Interrupted,
            "the call was interrupted by a crash and the tool declares no safe way to \
             recover it, so it was not run again; its outcome is unknown"
                .into(),
        ),
    }
}

/// The rule of every file tool (`write`, `edit`, an extension's file
/// tool): applied when every target holds the planned content; run again
/// only when every target still holds what it held before the call (its
/// content, or nothing); anything else — a target changed, deleted, or
/// replaced by another kind of file — is a conflict, and the user's files
/// are left as they are.
fn decide_files(
    effect: &EffectStarted,
    current: &dyn Fn(&str) -> OnDisk,
) -> (RecoveryAction, String) {
    let what = match effect.idempotency {
        Idempotency::WriteFile => "write",
        Idempotency::EditFile => "edit",
        _ => "call",
    };
    if effect.evidence.is_empty() {
        return (
            RecoveryAction::Conflict,
            format!("the {what} recorded no evidence of its target, so it was not run again"),
        );
    }
    let states: Vec<(&FileEvidence, OnDisk)> = effect
        .evidence
        .iter()
        .map(|file| (file, current(&file.path)))
        .collect();
    let paths = || {
        states
            .iter()
            .map(|(file, _)| file.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if states
        .iter()
        .all(|(file, now)| now.holds(file.after_sha256.as_deref()))
    {
        let reason = match effect.idempotency {
            Idempotency::WriteFile => "the write was applied before the interruption: its \
                 target holds the new content"
                .to_owned(),
            _ => format!(
                "the {what} of {} was applied before the interruption",
                paths()
            ),
        };
        return (RecoveryAction::AlreadyApplied, reason);
    }
    if states.iter().all(|(file, now)| holds_before(file, now)) {
        return (
            RecoveryAction::Rerun,
            format!(
                "{} still holds what it held before the {what}: the {what} is applied now",
                paths()
            ),
        );
    }
    let changes: Vec<String> = states
        .iter()
        .filter(|(file, now)| !holds_before(file, now) && !now.holds(file.after_sha256.as_deref()))
        .map(|(file, now)| describe_change(file, now))
        .collect();
    let changes = if changes.is_empty() {
        // Each target holds its before or its after, but not all the same:
        // the call was partly applied.
        format!(
            "{} hold a mix of the content before and after the {what}",
            paths()
        )
    } else {
        changes.join("; ")
    };
    (
        RecoveryAction::Conflict,
        format!(
            "{changes} since the {what} was planned, so it was not applied and the file was \
             left as it is — read it and redo the change if it is still needed"
        ),
    )
}

/// Whether `now` is what the target held before the call.
fn holds_before(file: &FileEvidence, now: &OnDisk) -> bool {
    match (file.before_kind, file.before_sha256.as_deref()) {
        // Records written before the kind was kept: no hash means absent.
        (None | Some(PathKind::File), Some(before)) => now.holds(Some(before)),
        (None | Some(PathKind::Absent), None) => *now == OnDisk::Absent,
        // Another kind before the call: never run again on it.
        _ => false,
    }
}

/// How a target differs from both its before and its after, in words.
fn describe_change(file: &FileEvidence, now: &OnDisk) -> String {
    let path = &file.path;
    match now {
        OnDisk::Absent => format!("{path} was deleted"),
        OnDisk::Other(kind) if file.before_kind == Some(*kind) => {
            format!("{path} could not be compared (it is {})", kind.describe())
        }
        OnDisk::Other(kind) => format!("{path} was replaced by {}", kind.describe()),
        OnDisk::File { .. } if file.before_sha256.is_none() => {
            format!("{path} was created with other content")
        }
        OnDisk::File { .. } => format!("{path} was changed"),
    }
}

/// What an evidence path of `workspace` holds now. The path is taken as
/// recorded, not resolved: a symlink that now stands there is a symlink
/// (resolving would follow it); a path outside the workspace, recorded
/// for a call allowed there, is read where it is.
pub fn workspace_state(workspace: &Workspace, path: &str) -> OnDisk {
    let recorded = Path::new(path);
    let plain = recorded
        .components()
        .all(|component| matches!(component, std::path::Component::Normal(_)));
    let (workspace, abs) = if recorded.is_absolute() {
        (workspace.allowing_outside(), recorded.to_path_buf())
    } else if plain {
        (workspace.clone(), workspace.root().join(recorded))
    } else {
        return OnDisk::Other(PathKind::Other);
    };
    match path_state(&workspace, &abs) {
        PathState::Absent => OnDisk::Absent,
        PathState::File(bytes) => OnDisk::file(content_sha256(&bytes)),
        PathState::Other(kind) => OnDisk::Other(kind),
    }
}
