//! What a host sends to a run: steering, follow-ups, cancellation and
//! answers to permission requests.
//!
//! These are the control calls of `AgentRun` (and `create_run`, for a user
//! message between runs) as data, so that every host surface (the CLI's
//! `--input-format stream-json`, a JSON-RPC server, an editor adapter)
//! speaks the same messages and their schema is checked in
//! (`schema/host_control.json`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::PermissionResolution;

/// How long a host's permission answer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PermissionScope {
    /// This request only.
    #[default]
    Once,
    /// This request and every later one like it on this branch of the
    /// session: the kernel records a `permission_rule` entry and decides
    /// matching calls by it without asking (see [`crate::PermissionRule`]).
    Always,
}

/// A host's answer to one `permission_requested` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct PermissionAnswer {
    /// Whether the call may run.
    pub resolution: PermissionResolution,
    /// How long the answer holds.
    #[serde(default)]
    pub scope: PermissionScope,
}

impl PermissionAnswer {
    /// `resolution`, for this request only or for the rest of the session (`scope`).
    pub fn new(resolution: PermissionResolution, scope: PermissionScope) -> Self {
        Self { resolution, scope }
    }

    /// An answer for this request only.
    pub fn once(resolution: PermissionResolution) -> Self {
        Self {
            resolution,
            scope: PermissionScope::Once,
        }
    }
}

impl From<PermissionResolution> for PermissionAnswer {
    fn from(resolution: PermissionResolution) -> Self {
        Self::once(resolution)
    }
}

/// The decision word in a host's answer, as a person or a script types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HostDecision {
    /// Let the call run.
    #[serde(alias = "approved", alias = "yes", alias = "y", alias = "a")]
    Approve,
    /// Refuse the call.
    #[serde(alias = "denied", alias = "no", alias = "n")]
    Deny,
}

impl From<HostDecision> for PermissionResolution {
    fn from(decision: HostDecision) -> Self {
        match decision {
            HostDecision::Approve => Self::Approved,
            HostDecision::Deny => Self::Denied,
        }
    }
}

/// One control message from a host to a run, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum HostControl {
    /// A user message: with no run active it starts the next run (in the
    /// same session); while a run is active it is queued as a follow-up.
    UserMessage {
        /// The message.
        text: String,
    },
    /// Queue a steering message, injected after the current tool batch.
    Steer {
        /// The message.
        text: String,
    },
    /// Queue a follow-up message, injected when the run would settle.
    FollowUp {
        /// The message.
        text: String,
    },
    /// Cancel the run.
    Cancel,
    /// Answer a `permission_requested` event.
    PermissionAnswer {
        /// The request's id, from the event.
        request_id: String,
        /// Approve or deny.
        decision: HostDecision,
        /// How long the answer holds (default: once).
        #[serde(default)]
        scope: PermissionScope,
    },
}

impl HostControl {
    /// The permission answer this message carries, if it is one.
    pub fn permission_answer(&self) -> Option<(&str, PermissionAnswer)> {
        match self {
            Self::PermissionAnswer {
                request_id,
                decision,
                scope,
            } => Some((
                request_id,
                PermissionAnswer {
                    resolution: (*decision).into(),
                    scope: *scope,
                },
            )),
            _ => None,
        }
    }
}
