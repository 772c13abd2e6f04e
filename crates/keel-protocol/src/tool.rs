//! Tool specs and the typed parts of tool results.
//!
//! A [`ToolSpec`] is what the model is told about a tool; [`ToolStatus`] and
//! [`ToolResultError`] are what a host and the model learn about its outcome.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the model is told about a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolSpec {
    /// Unique tool name.
    pub name: String,
    /// What the tool does and when to use it.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

impl ToolSpec {
    /// The tool `name`, described to the model, taking `parameters` (a JSON Schema).
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// How a tool may be scheduled within a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExecutionMode {
    /// May run concurrently with other parallel calls.
    Parallel,
    /// Forces its whole batch to run one call at a time, in order.
    Sequential,
}

/// The outcome class of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// The tool did what was asked.
    Success,
    /// The tool failed, or never ran (see the error code).
    Error,
    /// The run was cancelled while the call was pending or running.
    Cancelled,
}

/// A typed tool failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolResultError {
    /// Machine-readable code.
    pub code: ToolErrorCode,
    /// Human-readable explanation, also shown to the model.
    pub message: String,
}

impl ToolResultError {
    /// A tool error of kind `code`.
    pub fn new(code: ToolErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Why a tool call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorCode {
    /// No tool of that name is registered.
    UnknownTool,
    /// The arguments are not JSON or do not match the schema.
    InvalidArguments,
    /// The path escapes the workspace or is otherwise not allowed.
    PathOutsideWorkspace,
    /// The file or directory does not exist.
    NotFound,
    /// The file is binary or not valid UTF-8.
    BinaryFile,
    /// An edit's old text was not found.
    EditNotFound,
    /// An edit's old text was found more than once.
    EditAmbiguous,
    /// Two edits overlap.
    EditOverlap,
    /// The edits would leave the file unchanged.
    EditNoChange,
    /// A process exited with a non-zero status.
    ProcessFailed,
    /// The call ran past its timeout.
    Timeout,
    /// The run was cancelled.
    Cancelled,
    /// The permission policy or the host refused the call.
    PermissionDenied,
    /// The OS sandbox the call needs cannot be enforced here; nothing ran.
    SandboxUnavailable,
    /// An I/O error.
    Io,
    /// A crash cut the call short and its outcome cannot be known (docs/recovery.md).
    Interrupted,
    /// After a crash, the call's target held neither its pre- nor its
    /// post-image, so it was not run again (docs/recovery.md).
    EffectConflict,
    /// An extension's hook blocked the call (its message says why).
    Blocked,
    /// The MCP server the tool belongs to is not running (it failed to
    /// start, died, or was stopped).
    ServerUnavailable,
    /// Any other tool failure.
    ToolError,
}

impl ToolErrorCode {
    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownTool => "unknown_tool",
            Self::InvalidArguments => "invalid_arguments",
            Self::PathOutsideWorkspace => "path_outside_workspace",
            Self::NotFound => "not_found",
            Self::BinaryFile => "binary_file",
            Self::EditNotFound => "edit_not_found",
            Self::EditAmbiguous => "edit_ambiguous",
            Self::EditOverlap => "edit_overlap",
            Self::EditNoChange => "edit_no_change",
            Self::ProcessFailed => "process_failed",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::PermissionDenied => "permission_denied",
            Self::SandboxUnavailable => "sandbox_unavailable",
            Self::Io => "io",
            Self::Interrupted => "interrupted",
            Self::EffectConflict => "effect_conflict",
            Self::Blocked => "blocked",
            Self::ServerUnavailable => "server_unavailable",
            Self::ToolError => "tool_error",
        }
    }
}
