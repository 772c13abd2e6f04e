//! Typed errors that end a run, with the component they came from.
//!
//! A [`RunError`] is what `run_failed` and a failed `RunResult` carry. Its
//! `source` tells the host whose fault it was, so that a host can retry a
//! provider failure but report a kernel failure as a bug.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ProviderErrorKind;

/// The component an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorSource {
    /// The model provider (network, API, stream).
    Provider,
    /// The kernel itself (session store, invariants).
    Kernel,
    /// A tool.
    Tool,
    /// An extension.
    Extension,
    /// The host (bad input, disconnect).
    Host,
}

/// The stable machine code of a [`RunError`], serialized in snake_case.
///
/// Provider failures carry their [`ProviderErrorKind`]'s code; the rest name
/// what in the kernel or host stopped the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunErrorCode {
    /// Missing or invalid credentials.
    Auth,
    /// Credentials valid but not allowed.
    Permission,
    /// The provider refused the request as malformed.
    InvalidRequest,
    /// The model context is larger than the model accepts.
    ContextOverflow,
    /// Too many requests, after every retry.
    RateLimited,
    /// The provider was overloaded, after every retry.
    Overloaded,
    /// The provider failed with a 5xx, after every retry.
    ServerError,
    /// No response, or an idle stream, past the timeout.
    Timeout,
    /// The stream ended before the response was complete.
    StreamDropped,
    /// The provider request was cancelled.
    Cancelled,
    /// The provider broke its protocol.
    Protocol,
    /// The session store refused an append; nothing more can be recorded.
    SessionStore,
    /// The run reached its turn limit.
    TurnLimit,
    /// The cost of the run's responses passed the host's budget.
    BudgetExceeded,
    /// The host set a budget, but a response's cost is unknown (the model
    /// has no prices).
    CostUnknown,
    /// Compaction could not write a checkpoint (the summary request failed,
    /// the summary was unusable, or nothing could be compacted); nothing was
    /// written.
    CompactionFailed,
    /// The run's task ended abnormally (a bug).
    KernelPanic,
    /// The run ended without publishing a result (a bug).
    KernelLost,
    /// The run made no progress (emitted no event) for its stall timeout
    /// while waiting on the provider or a tool, so the kernel cancelled
    /// its in-flight work and failed it; the message names what it was
    /// waiting on. Time spent waiting for a permission answer never counts.
    RunStalled,
    /// An extension's hook blocked the run (at `input` or `before_run`),
    /// or a fail-closed handler there failed; the message names it.
    Blocked,
    /// A source of tools the run requires (a `required` MCP server) did
    /// not start; the message names it and says why.
    ExtensionFailed,
}

impl RunErrorCode {
    /// The snake_case code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auth => "auth",
            Self::Permission => "permission",
            Self::InvalidRequest => "invalid_request",
            Self::ContextOverflow => "context_overflow",
            Self::RateLimited => "rate_limited",
            Self::Overloaded => "overloaded",
            Self::ServerError => "server_error",
            Self::Timeout => "timeout",
            Self::StreamDropped => "stream_dropped",
            Self::Cancelled => "cancelled",
            Self::Protocol => "protocol",
            Self::SessionStore => "session_store",
            Self::TurnLimit => "turn_limit",
            Self::BudgetExceeded => "budget_exceeded",
            Self::CostUnknown => "cost_unknown",
            Self::CompactionFailed => "compaction_failed",
            Self::KernelPanic => "kernel_panic",
            Self::KernelLost => "kernel_lost",
            Self::RunStalled => "run_stalled",
            Self::Blocked => "blocked",
            Self::ExtensionFailed => "extension_failed",
        }
    }
}

impl From<ProviderErrorKind> for RunErrorCode {
    fn from(kind: ProviderErrorKind) -> Self {
        match kind {
            ProviderErrorKind::Auth => Self::Auth,
            ProviderErrorKind::Permission => Self::Permission,
            ProviderErrorKind::InvalidRequest => Self::InvalidRequest,
            ProviderErrorKind::ContextOverflow => Self::ContextOverflow,
            ProviderErrorKind::RateLimited => Self::RateLimited,
            ProviderErrorKind::Overloaded => Self::Overloaded,
            ProviderErrorKind::ServerError => Self::ServerError,
            ProviderErrorKind::Timeout => Self::Timeout,
            ProviderErrorKind::StreamDropped => Self::StreamDropped,
            ProviderErrorKind::Cancelled => Self::Cancelled,
            ProviderErrorKind::Protocol => Self::Protocol,
        }
    }
}

impl std::fmt::Display for RunErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for RunErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for RunErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A typed error that ended a run: a stable machine code plus a human message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunError {
    /// Stable code, e.g. `rate_limited` or `session_store`.
    pub code: RunErrorCode,
    /// Human-readable explanation.
    pub message: String,
    /// Which component failed.
    pub source: ErrorSource,
}

impl RunError {
    /// Builds an error from its parts.
    pub fn new(source: ErrorSource, code: RunErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            source,
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} error {}: {}", self.source, self.code, self.message)
    }
}

impl std::error::Error for RunError {}
