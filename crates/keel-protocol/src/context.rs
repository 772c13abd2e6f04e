//! Long runs on the wire: what a checkpoint records beyond its summary, how
//! full a run's model context is, and which project instructions it loaded.
//!
//! A checkpoint stands in for a covered prefix of the active
//! branch. Its summary is written by a model, so it can be wrong; its
//! [`CheckpointEvidence`] is not: the kernel gathers it mechanically from the
//! covered entries themselves (every file read or modified, every command
//! with its exit status, every tool error), so a host or a later reader can
//! check what the summary claims. [`CheckpointMetrics`] say why and at what
//! cost the checkpoint was written. All of it is optional on the wire: a
//! checkpoint written before these fields existed still reads.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::message::Usage;
use crate::tool::{ToolErrorCode, ToolStatus};

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompactionTrigger {
    /// The next request would pass the context window minus the reserve.
    Threshold,
    /// The provider refused a request as larger than its context window.
    Overflow,
    /// A host asked for it (`keel session compact`, `AgentKernel::compact`).
    Manual,
}

impl CompactionTrigger {
    /// The snake_case name as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Threshold => "threshold",
            Self::Overflow => "overflow",
            Self::Manual => "manual",
        }
    }
}

/// What the covered span of a checkpoint did, gathered from its entries.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct CheckpointEvidence {
    /// Paths the `read` tool read successfully, in first-read order, once each.
    #[serde(default)]
    pub files_read: Vec<String>,
    /// Paths `write` or `edit` changed successfully, in first-change order, once each.
    #[serde(default)]
    pub files_modified: Vec<String>,
    /// Every `bash` call, in call order, with how it ended.
    #[serde(default)]
    pub commands: Vec<CommandEvidence>,
    /// Every tool call that ended in an error, in call order.
    #[serde(default)]
    pub tool_errors: Vec<ToolErrorEvidence>,
}

impl CheckpointEvidence {
    /// Whether nothing was gathered.
    pub fn is_empty(&self) -> bool {
        self.files_read.is_empty()
            && self.files_modified.is_empty()
            && self.commands.is_empty()
            && self.tool_errors.is_empty()
    }
}

/// One command a checkpoint's span ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct CommandEvidence {
    /// The tool call.
    pub call_id: String,
    /// The command line as the model sent it.
    pub command: String,
    /// How the call ended.
    pub status: ToolStatus,
    /// The process's exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

impl CommandEvidence {
    /// Call `call_id` ran `command`, which ended `status` with `exit_code`.
    pub fn new(
        call_id: impl Into<String>,
        command: impl Into<String>,
        status: ToolStatus,
        exit_code: Option<i64>,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            command: command.into(),
            status,
            exit_code,
        }
    }
}

/// One failed tool call of a checkpoint's span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolErrorEvidence {
    /// The tool call.
    pub call_id: String,
    /// The tool.
    pub tool_name: String,
    /// The typed error.
    pub code: ToolErrorCode,
}

impl ToolErrorEvidence {
    /// Call `call_id` to `tool_name` failed with `code`.
    pub fn new(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        code: ToolErrorCode,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            code,
        }
    }
}

/// Why and at what cost a checkpoint was written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct CheckpointMetrics {
    /// What started the compaction.
    pub trigger: CompactionTrigger,
    /// Estimated tokens of the model context before the compaction.
    pub tokens_before: u64,
    /// Estimated tokens of the model context after it.
    pub tokens_after: u64,
    /// The model's context window, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// The provider that wrote the summary.
    pub provider: String,
    /// The model that wrote the summary.
    pub model: String,
    /// Entries the checkpoint covers.
    pub covered_entries: usize,
    /// Entries of the context kept after the summary (up to the checkpoint).
    pub kept_entries: usize,
    /// Summary requests made (more than one when the span was summarised in parts).
    pub summary_requests: u32,
    /// Token usage the summary requests reported, summed.
    #[serde(default)]
    pub summary_usage: Usage,
}

impl CheckpointMetrics {
    /// A compaction started by `trigger` and summarised by `provider`'s
    /// `model`; every count zero until set.
    pub fn new(
        trigger: CompactionTrigger,
        provider: impl Into<String>,
        model: impl Into<String>,
    ) -> Self {
        Self {
            trigger,
            tokens_before: 0,
            tokens_after: 0,
            window: None,
            provider: provider.into(),
            model: model.into(),
            covered_entries: 0,
            kept_entries: 0,
            summary_requests: 0,
            summary_usage: Usage::default(),
        }
    }
}

/// How full a run's model context is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ContextUsage {
    /// Estimated tokens of the next request (system prompt, tools and
    /// messages), calibrated by what the provider reported for this model.
    pub estimated_tokens: u64,
    /// The model's context window, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// Input tokens the provider reported for the last request, when it did
    /// (cached input included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_input_tokens: Option<u64>,
}

impl ContextUsage {
    /// `estimated_tokens` of context in a `window` (when known), with what
    /// the provider last reported as input.
    pub fn new(
        estimated_tokens: u64,
        window: Option<u64>,
        reported_input_tokens: Option<u64>,
    ) -> Self {
        Self {
            estimated_tokens,
            window,
            reported_input_tokens,
        }
    }
}

/// Where a project instruction file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InstructionScope {
    /// The user's configuration directory (`$XDG_CONFIG_HOME/keel`).
    Global,
    /// A directory from the repository root down to the workspace.
    Project,
}

/// A project instruction file (`AGENTS.md`, or `CLAUDE.md`) a run loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct InstructionFile {
    /// The file's path.
    pub path: String,
    /// Where it was found.
    pub scope: InstructionScope,
    /// Its size in bytes.
    pub bytes: u64,
    /// Whether it was cut to the size cap (the model sees a notice saying so).
    #[serde(default)]
    pub truncated: bool,
}

impl InstructionFile {
    /// The instruction file at `path` in `scope`: `bytes` long, `truncated` or not.
    pub fn new(
        path: impl Into<String>,
        scope: InstructionScope,
        bytes: u64,
        truncated: bool,
    ) -> Self {
        Self {
            path: path.into(),
            scope,
            bytes,
            truncated,
        }
    }
}
