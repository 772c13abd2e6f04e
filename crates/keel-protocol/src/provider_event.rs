//! Provider events: the normalised stream every provider adapter produces.
//!
//! Whatever the wire format, an adapter emits `start`, then content blocks as
//! `*_start` / `*_delta` / `*_end` triples addressed by `index`, optionally
//! `usage`, and finally exactly one of `done` or `error`. The kernel relies on
//! that grammar to accumulate one [`crate::AssistantMessage`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::message::{StopReason, Usage};

/// One event of a provider stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
// Deliberately exhaustive: the kernel's accumulator must handle every event,
// so a new kind must fail to compile there rather than be ignored.
pub enum ProviderEvent {
    /// The response started.
    Start {
        /// The model that answers, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// The provider's id of this response (`gen_ai.response.id`), when
        /// it gives one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
    },
    /// A text block starts at `index`.
    TextStart {
        /// Block index within the message.
        index: usize,
    },
    /// More text for the block at `index`.
    TextDelta {
        /// Block index within the message.
        index: usize,
        /// The new text.
        delta: String,
    },
    /// The text block at `index` is complete.
    TextEnd {
        /// Block index within the message.
        index: usize,
    },
    /// A thinking block starts at `index`.
    ThinkingStart {
        /// Block index within the message.
        index: usize,
    },
    /// More reasoning for the block at `index`.
    ThinkingDelta {
        /// Block index within the message.
        index: usize,
        /// The new reasoning text.
        delta: String,
    },
    /// The thinking block at `index` is complete.
    ThinkingEnd {
        /// Block index within the message.
        index: usize,
        /// Signature to send back unchanged, when the provider gives one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A tool call starts at `index`.
    ToolCallStart {
        /// Block index within the message.
        index: usize,
        /// Provider-assigned call id; empty when the provider sent none.
        /// In a run's `message_update` events it is already the call's id
        /// as the kernel made it: unique in the session.
        id: String,
        /// Tool name.
        name: String,
    },
    /// More argument text (a fragment of JSON) for the call at `index`.
    ToolCallDelta {
        /// Block index within the message.
        index: usize,
        /// The next fragment of the JSON arguments.
        delta: String,
    },
    /// The tool call at `index` is complete.
    ToolCallEnd {
        /// Block index within the message.
        index: usize,
    },
    /// Token usage for the request.
    Usage {
        /// The usage figures.
        usage: Usage,
    },
    /// The response finished.
    Done {
        /// Why the model stopped.
        stop_reason: StopReason,
    },
    /// The response failed; nothing of it is authoritative.
    Error {
        /// The classified failure.
        error: ProviderError,
    },
}

/// A classified provider failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{kind:?}: {message}")]
#[non_exhaustive]
pub struct ProviderError {
    /// The class of failure.
    pub kind: ProviderErrorKind,
    /// Human-readable explanation (never contains credentials).
    pub message: String,
    /// Server-requested delay before retrying, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The most times this failure may be retried, whatever the retry policy
    /// allows (e.g. 1 for a refused connection or a DNS or TLS failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
}

impl ProviderError {
    /// Builds an error without a retry-after hint.
    pub fn new(kind: ProviderErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry_after_ms: None,
            max_retries: None,
        }
    }

    /// The same error, retried at most `retries` times.
    pub fn with_max_retries(mut self, retries: u32) -> Self {
        self.max_retries = Some(retries);
        self
    }

    /// Whether the kernel should retry the same request.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

/// The one error taxonomy all providers map onto.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProviderErrorKind {
    /// Missing or invalid credentials.
    Auth,
    /// Credentials valid but not allowed.
    Permission,
    /// The request was malformed or unacceptable.
    InvalidRequest,
    /// The model context is larger than the model accepts.
    ContextOverflow,
    /// Too many requests; retry later.
    RateLimited,
    /// The provider is overloaded; retry later.
    Overloaded,
    /// A 5xx from the provider.
    ServerError,
    /// No response or an idle stream past the timeout.
    Timeout,
    /// The stream ended before `done`.
    StreamDropped,
    /// The request was cancelled by the kernel.
    Cancelled,
    /// The response broke the provider protocol (or a script's expectation).
    Protocol,
}

impl ProviderErrorKind {
    /// Whether this class of failure is retried with backoff.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::RateLimited
                | Self::Overloaded
                | Self::ServerError
                | Self::Timeout
                | Self::StreamDropped
        )
    }

    /// The snake_case code used in `RunError::code`.
    pub fn code(self) -> &'static str {
        crate::RunErrorCode::from(self).as_str()
    }
}
