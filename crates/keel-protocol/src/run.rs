//! Run states and the final result a host receives.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RunError;
use crate::message::AssistantMessage;

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Still running.
    Active,
    /// Finished normally: the model answered and nothing was queued.
    Settled,
    /// Stopped by the host.
    Cancelled,
    /// Stopped by an error.
    Failed,
}

impl RunState {
    /// Whether this is one of the three terminal states.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Active)
    }
}

/// The final outcome of a run; the same as its terminal event says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunResult {
    /// The run's id.
    pub run_id: String,
    /// The session the run wrote to.
    pub session_id: String,
    /// The terminal state.
    pub state: RunState,
    /// The last assistant message (always present when settled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<AssistantMessage>,
    /// The error, when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
}

impl RunResult {
    /// Run `run_id` of session `session_id` ended in `state`, with no final
    /// message and no error yet.
    pub fn new(run_id: impl Into<String>, session_id: impl Into<String>, state: RunState) -> Self {
        Self {
            run_id: run_id.into(),
            session_id: session_id.into(),
            state,
            message: None,
            error: None,
        }
    }
}
