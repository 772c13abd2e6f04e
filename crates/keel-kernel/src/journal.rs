//! The effect journal (SPEC §8): the records a run writes before a side
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
    EffectStarted, Entry, EntryPayload, FileEvidence, Idempotency, Message, RecoveryAction,
    ToolCall,
};
use keel_tools::evidence::current_content;
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
            let before = self.current(&file.abs);
            evidence.push(FileEvidence {
                path: self.workspace.display(&file.abs),
                before_sha256: before.as_deref().map(content_sha256),
                after_sha256: file.after.as_deref().map(content_sha256),
            });
            // An unknown post-image is planned as "absent": a later call of
            // the batch on this file then records a pre-image that cannot
            // match, so recovery reports it as a conflict, never re-runs it.
            self.planned.insert(file.abs, file.after);
        }
        Some(EffectStarted {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            arguments_sha256: sha256_hex(arguments),
            idempotency,
            evidence,
        })
    }
}

/// What a resumed run does about one call of the interrupted batch.
#[derive(Debug, Clone, PartialEq)]
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
/// `current_sha256(path)` is the workspace's content hash of an evidence
/// path now (`None`: absent), `receipt(key)` the state of a command's
/// receipts keyed by its `effect_started` entry's id.
pub fn plan(
    branch: &[Entry],
    current_sha256: &dyn Fn(&str) -> Option<String>,
    receipt: &dyn Fn(&str) -> ReceiptState,
) -> Interruption {
    plan_records(branch.iter().map(Record::of), current_sha256, receipt)
}

/// [`plan`] over the branch's records, however the branch holds them.
pub(crate) fn plan_records<'a>(
    branch: impl Iterator<Item = Record<'a>>,
    current_sha256: &dyn Fn(&str) -> Option<String>,
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
    let calls = last_calls
        .into_iter()
        .filter(|call| !answered.contains(call.id.as_str()))
        .map(|call| {
            let (key, effect) = match effects.get(call.id.as_str()) {
                Some((key, effect)) => (*key, Some(*effect)),
                None => (None, None),
            };
            // Receipts are read only for commands, by their entry's key.
            let state = match (key, effect) {
                (Some(key), Some(effect)) if effect.idempotency == Idempotency::Command => {
                    receipt(key)
                }
                _ => ReceiptState::Absent,
            };
            let damage = match &state {
                ReceiptState::Damaged(damage) => Some(damage.clone()),
                _ => None,
            };
            let (action, reason) = decide(effect, current_sha256, state);
            CallRecovery {
                call: call.clone(),
                action,
                reason,
                effect_entry_id: key.map(str::to_owned),
                damage,
            }
        })
        .collect();
    Interruption {
        run_open: open_run.is_some(),
        calls,
    }
}

/// The recovery table for one call left without a result (`receipt`: its
/// command receipt, read only for commands).
pub fn decide(
    effect: Option<&EffectStarted>,
    current_sha256: &dyn Fn(&str) -> Option<String>,
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
        Idempotency::WriteFile => {
            let applied = !effect.evidence.is_empty()
                && effect.evidence.iter().all(|file| {
                    file.after_sha256.is_some() && current_sha256(&file.path) == file.after_sha256
                });
            if applied {
                (
                    RecoveryAction::AlreadyApplied,
                    "the write was applied before the interruption: its target holds the new content"
                        .into(),
                )
            } else {
                (
                    RecoveryAction::Rerun,
                    "the write had not been applied: it is written again".into(),
                )
            }
        }
        Idempotency::EditFile => decide_edit(&effect.evidence, current_sha256),
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

fn decide_edit(
    evidence: &[FileEvidence],
    current_sha256: &dyn Fn(&str) -> Option<String>,
) -> (RecoveryAction, String) {
    let Some(file) = evidence.first() else {
        return (
            RecoveryAction::Conflict,
            "the edit recorded no evidence of its target, so it was not run again".into(),
        );
    };
    let now = current_sha256(&file.path);
    if file.after_sha256.is_some() && now == file.after_sha256 {
        (
            RecoveryAction::AlreadyApplied,
            format!(
                "the edit of {} was applied before the interruption",
                file.path
            ),
        )
    } else if now == file.before_sha256 {
        (
            RecoveryAction::Rerun,
            format!(
                "{} still holds its content from before the edit: it is applied now",
                file.path
            ),
        )
    } else {
        (
            RecoveryAction::Conflict,
            format!(
                "{} changed since the edit was planned and holds neither the content before \
                 nor the content after it; the edit was not applied — read the file and redo it \
                 if it is still needed",
                file.path
            ),
        )
    }
}

/// The current content hash of an evidence path in `workspace`.
pub fn workspace_sha256(workspace: &Workspace, path: &str) -> Option<String> {
    let abs = workspace.resolve(path).ok()?;
    current_content(workspace, &abs).map(|bytes| content_sha256(&bytes))
}
