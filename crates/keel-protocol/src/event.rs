//! The `RunEvent` stream: everything a host observes about a run.
//!
//! Every event carries a `type`, a `seq` that increases by one per event of the
//! run, the `run_id`, the `session_id` and a timestamp. Exactly one terminal
//! event (`run_settled`, `run_cancelled` or `run_failed`) is emitted, last.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TimestampMs;
use crate::context::{CompactionTrigger, ContextUsage, InstructionFile};
use crate::error::RunError;
use crate::extension::{ExtensionRecord, HookOutcomeKind, HookPoint};
use crate::message::{AssistantMessage, Message, ToolResultMessage};
use crate::permission::{DecisionSource, OperationIntent, PermissionMode, PermissionResolution};
use crate::provider_event::{ProviderError, ProviderEvent};

/// One event of a run, as serialised on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunEvent {
    /// Position in the run's stream, starting at 0.
    pub seq: u64,
    /// The run.
    pub run_id: String,
    /// The session the run writes to.
    pub session_id: String,
    /// When the event was emitted.
    pub timestamp: TimestampMs,
    /// What happened.
    #[serde(flatten)]
    pub kind: RunEventKind,
}

impl RunEvent {
    /// Event number `seq` of run `run_id` in session `session_id`.
    pub fn new(
        seq: u64,
        run_id: impl Into<String>,
        session_id: impl Into<String>,
        timestamp: TimestampMs,
        kind: RunEventKind,
    ) -> Self {
        Self {
            seq,
            run_id: run_id.into(),
            session_id: session_id.into(),
            timestamp,
            kind,
        }
    }

    /// The event's `type` name.
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }
}

/// Whether a tool batch runs concurrently or one call at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchMode {
    /// All calls run concurrently.
    Parallel,
    /// Calls run one at a time, in order.
    Sequential,
}

/// Which queue a host message went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QueueKind {
    /// Injected after the current tool batch.
    Steer,
    /// Injected only when the run would otherwise settle.
    FollowUp,
}

/// A host message waiting in a run's queue, not yet injected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct QueuedMessage {
    /// Which queue holds it.
    pub kind: QueueKind,
    /// The message text.
    pub text: String,
}

impl QueuedMessage {
    /// A message waiting in the `kind` queue.
    pub fn new(kind: QueueKind, text: impl Into<String>) -> Self {
        Self {
            kind,
            text: text.into(),
        }
    }
}

/// Streamed output of a running tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolProgress {
    /// Which stream, e.g. `stdout` or `stderr`.
    pub stream: String,
    /// The new output (lossily decoded as UTF-8).
    pub data: String,
}

impl ToolProgress {
    /// New output `data` on `stream`.
    pub fn new(stream: impl Into<String>, data: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            data: data.into(),
        }
    }
}

/// What happened, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunEventKind {
    /// The run began.
    RunStarted {
        /// Provider name.
        provider: String,
        /// Model id.
        model: String,
        /// Permission mode fixed for the run.
        mode: PermissionMode,
        /// The project instruction files the run loaded, in the order the
        /// model sees them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        instructions: Vec<InstructionFile>,
    },
    /// Something the host should show its user before the run goes on,
    /// e.g. that commands run without the OS sandbox.
    Warning {
        /// A stable snake_case code, e.g. `unsandboxed`.
        code: String,
        /// The warning, in words.
        message: String,
    },
    /// A turn began (1-based).
    TurnStart {
        /// Turn number within the run.
        turn: u32,
    },
    /// A turn ended.
    TurnEnd {
        /// Turn number within the run.
        turn: u32,
        /// How full the model context is now: the estimate of the next
        /// request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<ContextUsage>,
    },
    /// Terminal: the run finished normally.
    RunSettled {
        /// The final assistant message.
        message: AssistantMessage,
    },
    /// Terminal: the host cancelled the run.
    RunCancelled {
        /// Why, in words.
        reason: String,
    },
    /// Terminal: an error ended the run.
    RunFailed {
        /// The typed error.
        error: RunError,
    },
    /// A message began: a user or tool-result message (complete), or an
    /// assistant message whose content follows as `message_update`s.
    MessageStart {
        /// The message; an assistant message starts empty.
        message: Message,
    },
    /// One provider delta for the assistant message being streamed.
    MessageUpdate {
        /// The provider event.
        delta: ProviderEvent,
    },
    /// A message is complete and authoritative.
    MessageEnd {
        /// The final message.
        message: Message,
    },
    /// A retryable provider error; the same request is sent again.
    ProviderRetry {
        /// The attempt that failed (1-based).
        attempt: u32,
        /// Attempts allowed in total.
        max_attempts: u32,
        /// Delay before the next attempt.
        delay_ms: u64,
        /// The error.
        error: ProviderError,
    },
    /// A tool call is about to be prepared and run.
    ToolExecutionStart {
        /// The call id.
        call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The arguments as the model sent them.
        arguments: Value,
        /// How the batch is scheduled.
        batch_mode: BatchMode,
    },
    /// Streamed output of a running tool.
    ToolExecutionUpdate {
        /// The call id.
        call_id: String,
        /// The output.
        progress: ToolProgress,
    },
    /// A tool call finished (in completion order).
    ToolExecutionEnd {
        /// The authoritative result.
        result: ToolResultMessage,
    },
    /// The host queued a message.
    MessageQueued {
        /// Which queue.
        queue: QueueKind,
        /// The message text.
        text: String,
    },
    /// A queued message entered the conversation.
    MessageInjected {
        /// Which queue it came from.
        queue: QueueKind,
        /// The session entry that holds it.
        entry_id: String,
    },
    /// A queued message was discarded (the run ended first).
    MessageDropped {
        /// Which queue.
        queue: QueueKind,
        /// The message text.
        text: String,
        /// Why.
        reason: String,
    },
    /// The host cleared queued messages before they were injected; they
    /// will not be sent.
    QueueCleared {
        /// The queue that was cleared; both queues when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue: Option<QueueKind>,
        /// How many steering messages were removed.
        steer: usize,
        /// How many follow-ups were removed.
        follow_up: usize,
    },
    /// The host must decide whether a tool call may run.
    PermissionRequested {
        /// Answer with `AgentRun::resolve_permission(request_id, …)`.
        request_id: String,
        /// The call.
        call_id: String,
        /// The tool.
        tool_name: String,
        /// The final arguments the decision is bound to.
        arguments: Value,
        /// The classified intent.
        intent: OperationIntent,
        /// Why the policy asks.
        reason: String,
    },
    /// A permission request was decided.
    PermissionResolved {
        /// The request.
        request_id: String,
        /// The decision.
        resolution: PermissionResolution,
        /// Who decided.
        source: DecisionSource,
    },
    /// An entry was durably appended to the session.
    SessionEntry {
        /// The entry's id.
        entry_id: String,
        /// Its parent.
        parent_id: Option<String>,
        /// Its kind.
        kind: String,
    },
    /// The active leaf of the session moved.
    ActiveBranch {
        /// The new leaf.
        leaf_id: String,
    },
    /// The run continues an existing session.
    SessionResumed {
        /// The leaf the run continues from.
        leaf_id: Option<String>,
        /// Entries the run's context starts from: the active branch from its
        /// latest checkpoint (the whole branch when there is none).
        branch_length: usize,
    },
    /// Opening the run's session (the event's `session_id`) for writing cut
    /// off a torn tail: bytes after the last complete group that a crash
    /// left mid-write (never an acknowledged entry; any other damage is
    /// refused, not repaired).
    SessionRepaired {
        /// How many bytes were cut off the end of the file.
        bytes_cut: u64,
        /// The 1-based line of the file where the cut tail began.
        line: usize,
        /// Why the tail was a torn write.
        reason: String,
    },
    /// Compaction began: a summary of the oldest part of the context is
    /// being written.
    CompactionStarted {
        /// What started it.
        reason: CompactionTrigger,
        /// Estimated tokens of the model context before it.
        tokens_before: u64,
        /// The model's context window, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<u64>,
    },
    /// Compaction wrote a checkpoint.
    CompactionSucceeded {
        /// What started it.
        reason: CompactionTrigger,
        /// The checkpoint entry.
        entry_id: String,
        /// Estimated tokens of the model context before it.
        tokens_before: u64,
        /// Estimated tokens of the model context after it.
        tokens_after: u64,
        /// Entries the checkpoint covers.
        covered_entries: usize,
    },
    /// Compaction failed; nothing was written.
    CompactionFailed {
        /// What started it.
        reason: CompactionTrigger,
        /// The error (code `compaction_failed`), with the reason in its message.
        error: RunError,
    },
    /// An effect found in flight after a crash, and what was done about it.
    EffectRecovered {
        /// The interrupted call.
        call_id: String,
        /// What recovery did (`completed`, `rerun`, `reported_unknown`).
        action: String,
    },
    /// An extension the kernel was built with, announced as each run
    /// starts (in registration order).
    ExtensionRegistered {
        /// What it registered.
        extension: ExtensionRecord,
    },
    /// A hook handler answered and its outcome was applied.
    HookDispatched {
        /// The extension whose handler it was.
        extension: String,
        /// Where.
        point: HookPoint,
        /// The tool call, at `tool_call` and `tool_result`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// What the handler did.
        outcome: HookOutcomeKind,
    },
    /// A hook blocked what its point guards: a tool call or result (a
    /// `blocked` tool error the model sees) or the run (`blocked` error).
    HookBlocked {
        /// The extension whose handler it was.
        extension: String,
        /// Where.
        point: HookPoint,
        /// The tool call, at `tool_call` and `tool_result`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// The handler's code for the block.
        code: String,
        /// The handler's message, given to the model.
        message: String,
    },
    /// A handler gave an outcome its point does not allow, or a value that
    /// failed the point's checks; the outcome was not applied.
    HookOutcomeRejected {
        /// The extension whose handler it was.
        extension: String,
        /// Where.
        point: HookPoint,
        /// The tool call, at `tool_call` and `tool_result`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// The outcome given.
        outcome: HookOutcomeKind,
        /// Why it was rejected, in one sentence.
        reason: String,
    },
    /// A handler failed, panicked or ran past its time budget; its outcome
    /// was ignored or, for a fail-closed handler at a point that can
    /// block, what the point guards was blocked.
    HookFailed {
        /// The extension whose handler it was.
        extension: String,
        /// Where.
        point: HookPoint,
        /// The tool call, at `tool_call` and `tool_result`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// What went wrong, in one sentence.
        reason: String,
        /// Whether the action was blocked because of it.
        blocked: bool,
    },
}

impl RunEventKind {
    /// The `type` name as written on the wire.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run_started",
            Self::Warning { .. } => "warning",
            Self::TurnStart { .. } => "turn_start",
            Self::TurnEnd { .. } => "turn_end",
            Self::RunSettled { .. } => "run_settled",
            Self::RunCancelled { .. } => "run_cancelled",
            Self::RunFailed { .. } => "run_failed",
            Self::MessageStart { .. } => "message_start",
            Self::MessageUpdate { .. } => "message_update",
            Self::MessageEnd { .. } => "message_end",
            Self::ProviderRetry { .. } => "provider_retry",
            Self::ToolExecutionStart { .. } => "tool_execution_start",
            Self::ToolExecutionUpdate { .. } => "tool_execution_update",
            Self::ToolExecutionEnd { .. } => "tool_execution_end",
            Self::MessageQueued { .. } => "message_queued",
            Self::MessageInjected { .. } => "message_injected",
            Self::MessageDropped { .. } => "message_dropped",
            Self::QueueCleared { .. } => "queue_cleared",
            Self::PermissionRequested { .. } => "permission_requested",
            Self::PermissionResolved { .. } => "permission_resolved",
            Self::SessionEntry { .. } => "session_entry",
            Self::ActiveBranch { .. } => "active_branch",
            Self::SessionResumed { .. } => "session_resumed",
            Self::SessionRepaired { .. } => "session_repaired",
            Self::CompactionStarted { .. } => "compaction_started",
            Self::CompactionSucceeded { .. } => "compaction_succeeded",
            Self::CompactionFailed { .. } => "compaction_failed",
            Self::EffectRecovered { .. } => "effect_recovered",
            Self::ExtensionRegistered { .. } => "extension_registered",
            Self::HookDispatched { .. } => "hook_dispatched",
            Self::HookBlocked { .. } => "hook_blocked",
            Self::HookOutcomeRejected { .. } => "hook_outcome_rejected",
            Self::HookFailed { .. } => "hook_failed",
        }
    }

    /// Whether this is one of the three terminal events.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::RunSettled { .. } | Self::RunCancelled { .. } | Self::RunFailed { .. }
        )
    }
}
