//! Session entries: the immutable nodes of a session tree.
//!
//! An [`Entry`] has an id, the id of its parent (none for the root), a
//! timestamp and a payload whose `kind` tags it. Stores persist entries; the
//! kernel projects the active branch of entries into the model context.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TimestampMs;
use crate::effect::{EffectStarted, RecoveryAction, RunEndState};
use crate::message::Message;
use crate::permission::{PermissionDecision, PermissionMode};

/// One immutable node of the session tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    },
    /// A conversation message.
    Message {
        /// The message.
        message: Message,
    },
    /// A compaction checkpoint that stands in for a covered prefix.
    Checkpoint {
        /// The summary the model sees instead of the covered entries.
        summary: String,
        /// The first entry kept after the summary.
        first_kept_entry_id: String,
    },
    /// A permission decision (hashes, not arguments).
    PermissionDecision {
        /// The decision.
        decision: PermissionDecision,
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
    /// A run began here (SPEC §8): until its `run_end`, the run is in flight,
    /// so a branch whose last `run_start` has no `run_end` was interrupted.
    RunStart {
        /// The run's id.
        run_id: String,
        /// The permission mode the host gave it.
        mode: PermissionMode,
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
    /// An extension's own entry kind, validated by that extension.
    Custom {
        /// The registered kind name.
        custom_kind: String,
        /// The extension's data.
        data: Value,
    },
}

impl EntryPayload {
    /// The kind name as written on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Configuration { .. } => "configuration",
            Self::Message { .. } => "message",
            Self::Checkpoint { .. } => "checkpoint",
            Self::PermissionDecision { .. } => "permission_decision",
            Self::BranchSummary { .. } => "branch_summary",
            Self::Label { .. } => "label",
            Self::RunStart { .. } => "run_start",
            Self::RunEnd { .. } => "run_end",
            Self::EffectStarted { .. } => "effect_started",
            Self::EffectRecovered { .. } => "effect_recovered",
            Self::Custom { .. } => "custom",
        }
    }
}
