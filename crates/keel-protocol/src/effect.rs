//! The effect journal's vocabulary (docs/recovery.md): what a session records before
//! a side effect starts, and what recovery decided about it after a crash.
//!
//! An [`EffectStarted`] record is acknowledged before its tool runs, so a
//! call that has one but no ToolResult may or may not have acted; its
//! [`Idempotency`] class and [`FileEvidence`] say how recovery can tell.
//! A call without a record never started.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a tool's call may be recovered when a crash cut it short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Idempotency {
    /// No side effect: always safe to run again (not journaled).
    ReadOnly,
    /// Replaces a file's whole content: complete when the target holds the
    /// new content, otherwise safe to run again.
    WriteFile,
    /// Changes part of a file: applied again only when the target still
    /// holds its pre-image, complete when it holds the post-image.
    EditFile,
    /// Runs a command: never run again; its receipt tells what happened.
    Command,
    /// Not declared by the tool: never run again.
    Undeclared,
}

impl Idempotency {
    /// The class name as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only",
            Self::WriteFile => "write_file",
            Self::EditFile => "edit_file",
            Self::Command => "command",
            Self::Undeclared => "undeclared",
        }
    }
}

/// A file an effect changes: its content hash before and, where the tool
/// knows it, after (`None`: the file does not exist, or the post-image is
/// not known).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct FileEvidence {
    /// The target, relative to the workspace root where it is inside.
    pub path: String,
    /// SHA-256 of the content before the change; `None` if it was not a
    /// regular file (see `before_kind`).
    pub before_sha256: Option<String>,
    /// SHA-256 of the intended content after the change, where known.
    pub after_sha256: Option<String>,
    /// What was at the path before the change. `None` in records written
    /// before Keel kept it: then `before_sha256` being `None` is read as
    /// "absent".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_kind: Option<PathKind>,
}

impl FileEvidence {
    /// The file at `path`, with nothing known of it yet.
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            before_sha256: None,
            after_sha256: None,
            before_kind: None,
        }
    }
}

/// What is at a path, as the effect journal records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PathKind {
    /// Nothing.
    Absent,
    /// A regular file (its content hash is recorded beside).
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// Anything else: a FIFO, a socket, a device, or a file Keel cannot
    /// read whole (unreadable, or too large to compare).
    Other,
}

impl PathKind {
    /// The kind as words, e.g. "a directory".
    pub fn describe(self) -> &'static str {
        match self {
            Self::Absent => "nothing",
            Self::File => "a regular file",
            Self::Directory => "a directory",
            Self::Symlink => "a symbolic link",
            Self::Other => "a special, unreadable or oversized file",
        }
    }
}

/// The journal record acknowledged before a side-effecting call starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct EffectStarted {
    /// The tool call.
    pub call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// SHA-256 of the call's final (canonical) arguments.
    pub arguments_sha256: String,
    /// How the call may be recovered.
    pub idempotency: Idempotency,
    /// The evidence recovery compares the workspace with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<FileEvidence>,
}

impl EffectStarted {
    /// Call `call_id` to `tool_name` with arguments digested as
    /// `arguments_sha256` is about to take effect; no file evidence yet.
    pub fn new(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        arguments_sha256: impl Into<String>,
        idempotency: Idempotency,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            arguments_sha256: arguments_sha256.into(),
            idempotency,
            evidence: Vec::new(),
        }
    }
}

/// What recovery did about one call found without a result after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecoveryAction {
    /// No effect record: the call never started and runs normally.
    NotStarted,
    /// The call is safe to run again (read-only, or a write or edit whose
    /// target still holds its pre-image), so it was.
    Rerun,
    /// The evidence shows the effect was applied: reported as complete.
    AlreadyApplied,
    /// The target holds neither the pre- nor the post-image: reported to the
    /// model as a conflict, not run again.
    Conflict,
    /// The outcome cannot be known (a command, an undeclared tool): reported
    /// to the model as interrupted, never run again.
    Interrupted,
    /// A command whose exit receipt shows it finished before the crash:
    /// reported complete from the receipt (exit status and output), not
    /// run again.
    RecoveredFromReceipt,
}

impl RecoveryAction {
    /// The action name as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotStarted => "not_started",
            Self::Rerun => "rerun",
            Self::AlreadyApplied => "already_applied",
            Self::Conflict => "conflict",
            Self::Interrupted => "interrupted",
            Self::RecoveredFromReceipt => "recovered_from_receipt",
        }
    }

    /// Whether the call is executed (again) by the resumed run.
    pub fn runs(self) -> bool {
        matches!(self, Self::NotStarted | Self::Rerun)
    }
}

/// How a run ended, as its `run_end` entry records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunEndState {
    /// The run settled.
    Settled,
    /// The host cancelled it.
    Cancelled,
    /// It failed.
    Failed,
}
