//! Session entries: the immutable nodes of a session tree.
//!
//! An [`Entry`] has an id, the id of its parent (none for the root), a
//! timestamp and a payload whose `kind` tags it. Stores persist entries; the
//! kernel projects the active branch of entries into the model context.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TimestampMs;
use crate::context::{CheckpointEvidence, CheckpointMetrics};
use crate::effect::{EffectStarted, RecoveryAction, RunEndState};
use crate::extension::ExtensionRecord;
use crate::message::Message;
use crate::permission::{PermissionDecision, PermissionMode, PermissionRule, PermissionRuleLists};
use crate::snapshot::WorkspaceSnapshot;

/// One immutable node of the session tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Entry {
    /// Unique id within the session.
    pub id: String,
    /// The parent entry; `None` only for a root.
    pub parent_id: Option<String>,
    /// When the entry was created.
    pub timestamp: TimestampMs,
    /// What the entry records.
    #[serde(flatten)]
    pub payload: EntryPayload,
}

impl Entry {
    /// An entry `id` under `parent_id` (`None`: a root), stamped `timestamp`.
    pub fn new(
        id: impl Into<String>,
        parent_id: Option<String>,
        timestamp: TimestampMs,
        payload: EntryPayload,
    ) -> Self {
        Self {
            id: id.into(),
            parent_id,
            timestamp,
            payload,
        }
    }

    /// The payload's kind name.
    pub fn kind(&self) -> &'static str {
        self.payload.kind()
    }
}

/// The payload of an entry, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EntryPayload {
    /// The run configuration in force from here on.
    Configuration {
        /// Provider name.
        provider: String,
        /// Model id.
        model: String,
        /// Permission mode.
        mode: PermissionMode,
        /// Names of the active tools.
        tools: Vec<String>,
        /// The permission rules the user wrote, as written (absent when none).
        #[serde(default, skip_serializing_if = "PermissionRuleLists::is_empty")]
        permissions: PermissionRuleLists,
        /// The extensions (and MCP servers) the kernel was built with, in
        /// registration order (absent when none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        extensions: Vec<ExtensionRecord>,
    },
    /// A conversation message.
    Message {
        /// The message.
        message: Message,
    },
    /// A compaction checkpoint that stands in for a covered prefix.
    ///
    /// Appended at the leaf; the model then sees the summary, the kept
    /// entries from `first_kept_entry_id` up to this checkpoint, and what
    /// follows it. The fields after `first_kept_entry_id` are optional on the
    /// wire (checkpoints written before them still read).
    Checkpoint {
        /// The summary the model sees instead of the covered entries.
        summary: String,
        /// The first entry kept after the summary (this checkpoint's own id
        /// when nothing is kept).
        first_kept_entry_id: String,
        /// The entries the summary stands in for: the prefix of the context
        /// branch (the active branch from the previous checkpoint's first
        /// kept entry) that ends before `first_kept_entry_id`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        covered_entry_ids: Vec<String>,
        /// The checkpoint this one supersedes; its summary was folded into
        /// this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous_checkpoint_id: Option<String>,
        /// What the covered entries did, gathered from them, not from the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evidence: Option<Box<CheckpointEvidence>>,
        /// Why and at what cost the checkpoint was written.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metrics: Option<Box<CheckpointMetrics>>,
    },
    /// A permission decision (hashes, not arguments).
    PermissionDecision {
        /// The decision.
        decision: PermissionDecision,
    },
    /// A session rule: a host answer that holds for every later matching
    /// call on this branch of the session.
    PermissionRule {
        /// The rule.
        rule: PermissionRule,
    },
    /// A summary of a branch the conversation came back from.
    BranchSummary {
        /// The summary.
        summary: String,
        /// The leaf of the summarised branch.
        from_entry_id: String,
    },
    /// A human label on another entry.
    Label {
        /// The labelled entry.
        target_id: String,
        /// The label; empty removes it.
        label: String,
    },
    /// A run began here (docs/recovery.md): until its `run_end`, the run is in flight,
    /// so a branch whose last `run_start` has no `run_end` was interrupted.
    RunStart {
        /// The run's id.
        run_id: String,
        /// The permission mode the host gave it.
        mode: PermissionMode,
        /// A resumed run in another workspace than the session's (the host
        /// named it explicitly): where the session worked, and where
        /// recovery judged the interrupted calls. Absent otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace_moved: Option<WorkspaceMove>,
    },
    /// The run that began at the matching `run_start` ended.
    RunEnd {
        /// The run's id.
        run_id: String,
        /// How it ended.
        state: RunEndState,
    },
    /// Acknowledged before a side-effecting call starts (the effect journal).
    EffectStarted {
        /// The record.
        effect: EffectStarted,
    },
    /// What a resumed run decided about a call a crash left without result.
    EffectRecovered {
        /// The tool call.
        call_id: String,
        /// The tool's name.
        tool_name: String,
        /// What was done.
        action: RecoveryAction,
        /// Why, in one sentence.
        reason: String,
    },
    /// A snapshot of the workspace was recorded (format version 3): at a
    /// run's start and end, and around a rewind.
    WorkspaceSnapshot {
        /// The snapshot.
        snapshot: WorkspaceSnapshot,
    },
    /// An extension's own entry kind, validated by that extension.
    Custom {
        /// The registered kind name.
        custom_kind: String,
        /// The extension's data.
        data: Value,
    },
}

/// A resumed run's workspace, when it is not the session's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkspaceMove {
    /// The workspace the session records.
    pub from: String,
    /// The workspace the resumed run works in.
    pub to: String,
}

impl WorkspaceMove {
    /// The workspace moved from `from` to `to`.
    pub fn new(from: impl Into<String>, to: impl Into<String>) -> Self {
        Self {
            from: from.into(),
            to: to.into(),
        }
    }
}

impl EntryPayload {
    /// A checkpoint with only a summary and its first kept entry (the form
    /// written before evidence and metrics existed).
    pub fn checkpoint(summary: impl Into<String>, first_kept_entry_id: impl Into<String>) -> Self {
        Self::Checkpoint {
            summary: summary.into(),
            first_kept_entry_id: first_kept_entry_id.into(),
            covered_entry_ids: Vec::new(),
            previous_checkpoint_id: None,
            evidence: None,
            metrics: None,
        }
    }

    /// The kind name as written on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Configuration { .. } => "configuration",
            Self::Message { .. } => "message",
            Self::Checkpoint { .. } => "checkpoint",
            Self::PermissionDecision { .. } => "permission_decision",
            Self::PermissionRule { .. } => "permission_rule",
            Self::BranchSummary { .. } => "branch_summary",
            Self::Label { .. } => "label",
            Self::RunStart { .. } => "run_start",
            Self::RunEnd { .. } => "run_end",
            Self::EffectStarted { .. } => "effect_started",
            Self::EffectRecovered { .. } => "effect_recovered",
            Self::WorkspaceSnapshot { .. } => "workspace_snapshot",
            Self::Custom { .. } => "custom",
        }
    }
}
