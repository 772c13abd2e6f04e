//! Typed errors that end a run, with the component they came from.
//!
//! A [`RunError`] is what `run_failed` and a failed `RunResult` carry. Its
//! `source` tells the host whose fault it was, so that a host can retry a
//! provider failure but report a kernel failure as a bug.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The component an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
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

/// A typed error that ended a run: a stable machine code plus a human message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunError {
    /// Stable snake_case code, e.g. `rate_limited` or `session_store`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
    /// Which component failed.
    pub source: ErrorSource,
}

impl RunError {
    /// Builds an error from its parts.
    pub fn new(source: ErrorSource, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
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
