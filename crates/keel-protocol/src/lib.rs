//! Keel's vocabulary as data.
//!
//! Everything a host, a provider, a tool or a session store exchanges with the
//! kernel is defined here: messages and content blocks, usage, provider events,
//! run events, session entries, tool specs and results, permission and sandbox
//! types and typed errors. The crate does no I/O and needs no async runtime, so that every
//! other crate (and every host) can depend on it cheaply.
//!
//! The JSON produced by these types is Keel's public wire format: every enum is
//! tagged with a `type` (or `role`) field, and the JSON Schemas generated from
//! these types are checked into `schema/` (see [`schema::all`]).

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

pub mod context;
pub mod control;
pub mod effect;
pub mod error;
pub mod event;
pub mod extension;
pub mod message;
pub mod output;
pub mod permission;
pub mod provider_event;
pub mod rpc;
pub mod run;
pub mod sandbox;
pub mod schema;
pub mod session;
pub mod snapshot;
pub mod tool;

pub use context::{
    CheckpointEvidence, CheckpointMetrics, CommandEvidence, CompactionTrigger, ContextUsage,
    InstructionFile, InstructionScope, ToolErrorEvidence,
};
pub use control::{HostControl, HostDecision, PermissionAnswer, PermissionScope};
pub use effect::{EffectStarted, FileEvidence, Idempotency, PathKind, RecoveryAction, RunEndState};
pub use error::{ErrorSource, RunError, RunErrorCode};
pub use event::{BatchMode, QueueKind, QueuedMessage, RunEvent, RunEventKind, ToolProgress};
pub use extension::{ExtensionRecord, HookOutcomeKind, HookPoint};
pub use message::{
    AssistantMessage, ContentBlock, ImageContent, Message, StopReason, ToolCall, ToolResultMessage,
    Usage, UserContent, UserMessage,
};
pub use output::{
    CompactionFailedLine, CompactionLine, GitCodeChange, GitCodeChangeKind, HostLine, ResultLine,
    RunTotals, SessionLine, StartupErrorLine, WorkspaceChangesLine,
};
pub use permission::{
    DecisionSource, IntentKind, IntentScope, OperationIntent, PermissionDecision, PermissionMode,
    PermissionResolution, PermissionRule, PermissionRuleLists,
};
pub use provider_event::{ProviderError, ProviderErrorKind, ProviderEvent};
pub use run::{RunResult, RunState};
pub use sandbox::{SandboxLevel, SandboxMode};
pub use session::{Entry, EntryPayload, WorkspaceMove};
pub use snapshot::{ExclusionReason, SnapshotExclusion, SnapshotReason, WorkspaceSnapshot};
pub use tool::{ExecutionMode, ToolErrorCode, ToolResultError, ToolSpec, ToolStatus};

/// Milliseconds since the Unix epoch, the one timestamp unit on the wire.
pub type TimestampMs = u64;

/// The current time as a [`TimestampMs`] (0 if the clock is before 1970).
///
/// The one clock reading every crate uses for entry and event timestamps; it
/// reads the system clock and does no other I/O.
pub fn now_ms() -> TimestampMs {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}
