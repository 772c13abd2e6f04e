//! Forking a session at any entry, tool batches included.
//!
//! A fork copies the path from the root to an entry into a new session
//! ([`SessionStore::fork`]). An entry inside a tool batch — the assistant
//! message that made the calls, a permission decision, an
//! `effect_started`, or one result of several — leaves calls without
//! results, and no run continues past calls without results (after a crash
//! only `resume` may, from the effect journal). In a fork nothing crashed:
//! the calls were cut off on purpose. So [`fork_session`] closes them at
//! once, in one group appended to the new session, each with a result the
//! model reads:
//!
//! - a call whose effect had not started on the copied path: not run
//!   (`cancelled`);
//! - a call whose `effect_started` is on the path: it may have run in the
//!   parent session, so its outcome is unknown here (`interrupted`): the
//!   model is told to check before relying on it. It is never run again.
//!
//! Invariants: the parent session is never written; a fork's branch never
//! ends in calls without results; the closing results are in call order,
//! after everything the path holds.

use keel_protocol::{
    Entry, EntryPayload, Message, ToolErrorCode, ToolResultError, ToolResultMessage, ToolStatus,
    UserContent,
};
use keel_session::{SessionError, SessionStore};

use crate::ids::{new_id, now_ms};
use crate::journal::{self, OnDisk, ReceiptState};

/// A new session forked from another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fork {
    /// The new session's id.
    pub session_id: String,
    /// Its leaf: the entry forked at, or the last closing result.
    pub leaf_id: String,
    /// The calls the fork point left without results, closed in the new
    /// session (their call ids, in call order).
    pub closed_calls: Vec<String>,
}

/// Starts a new session holding the path from the root of `session_id` to
/// `entry_id`, and closes the calls that path leaves without results (see
/// the module docs).
///
/// # Cancel safety
///
/// Not cancel safe: dropped between the copy and the closing group, the
/// new session exists and ends in calls without results, which a run
/// refuses (`session_interrupted`) and `resume` completes. The parent is
/// untouched either way.
pub async fn fork_session(
    store: &dyn SessionStore,
    session_id: &str,
    entry_id: &str,
) -> Result<Fork, SessionError> {
    let id = store.fork(session_id, entry_id).await?;
    let branch = store.context_branch(&id).await?;
    let dangling = journal::plan(&branch, &|_| OnDisk::Absent, &|_| ReceiptState::Absent).calls;
    let mut fork = Fork {
        session_id: id,
        leaf_id: entry_id.to_owned(),
        closed_calls: Vec::new(),
    };
    if dangling.is_empty() {
        return Ok(fork);
    }
    let started: std::collections::HashSet<&str> = branch
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::EffectStarted { effect } => Some(effect.call_id.as_str()),
            _ => None,
        })
        .collect();
    let mut parent = branch.last().map(|entry| entry.id.clone());
    let timestamp = now_ms();
    let mut group = Vec::new();
    for recovery in &dangling {
        let call = &recovery.call;
        let (status, code, text) = if started.contains(call.id.as_str()) {
            (
                ToolStatus::Error,
                ToolErrorCode::Interrupted,
                format!(
                    "Not run in this session: it was forked from session {session_id} after this \
                     call had started there, so the call may have changed the workspace. Check \
                     its effect before relying on it; it will not be run again."
                ),
            )
        } else {
            (
                ToolStatus::Cancelled,
                ToolErrorCode::Cancelled,
                format!(
                    "Not run: this session was forked from session {session_id} before this \
                     call ran. Call it again if it is still needed."
                ),
            )
        };
        let mut result = ToolResultMessage::new(
            call.id.clone(),
            call.name.clone(),
            status,
            vec![UserContent::Text { text: text.clone() }],
        );
        result.error = Some(ToolResultError::new(code, text));
        let entry_id = new_id();
        group.push(Entry::new(
            entry_id.clone(),
            parent.replace(entry_id),
            timestamp,
            EntryPayload::Message {
                message: Message::ToolResult(result),
            },
        ));
        fork.closed_calls.push(call.id.clone());
    }
    if let Some(last) = parent {
        fork.leaf_id = last;
    }
    let _lease = store.open_writer(&fork.session_id).await?;
    store.append(&fork.session_id, group).await?;
    Ok(fork)
}
