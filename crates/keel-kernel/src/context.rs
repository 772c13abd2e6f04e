//! Projects the active branch into the messages of a model request.
//!
//! Only the active branch is visible: the latest checkpoint's summary stands
//! in for everything it covers, then come the kept entries after it. Queued
//! messages and partial output never appear here because they are never
//! entries.
//!
//! The branch is kept as [`BranchEntry`] values whose messages are shared
//! ([`Arc`]): a projection hands the request the same `Arc`s, so each turn
//! copies pointers, never the history's text, and a resumed session costs
//! one copy of its branch however many turns run (docs/benchmarks.md).
//! Each message is adapted for the run's model once, as it enters the
//! branch (`keel_provider::transform::adapt_message` moves another model's
//! thinking into text), so the per-request `adapt_history` finds nothing to
//! copy in it. Invariant: nothing here clones a [`Message`] of the branch.

use std::sync::Arc;

use keel_protocol::{Entry, EntryPayload, Message, UserMessage};
use keel_provider::transform::adapt_message;

/// One entry of the context branch as a run keeps it.
pub(crate) struct BranchEntry {
    /// The entry's id.
    pub(crate) id: String,
    payload: Payload,
}

enum Payload {
    /// A message, shared with every request that carries it.
    Message(Arc<Message>),
    /// Any other payload (configuration, checkpoint, decision, …).
    Other(EntryPayload),
}

/// The model a run's requests go to: what its messages are adapted for.
pub(crate) struct Target<'a> {
    /// The provider's name.
    pub(crate) provider: &'a str,
    /// The model id.
    pub(crate) model: &'a str,
}

impl BranchEntry {
    /// The entry as the branch keeps it: its message adapted for `target`
    /// and moved behind an `Arc`; its text is not copied.
    pub(crate) fn new(entry: Entry, target: &Target<'_>) -> Self {
        let payload = match entry.payload {
            EntryPayload::Message { message } => Payload::Message(Arc::new(adapt_message(
                message,
                target.provider,
                target.model,
            ))),
            other => Payload::Other(other),
        };
        Self {
            id: entry.id,
            payload,
        }
    }

    fn message(&self) -> Option<&Arc<Message>> {
        match &self.payload {
            Payload::Message(message) => Some(message),
            Payload::Other(_) => None,
        }
    }

    fn other(&self) -> Option<&EntryPayload> {
        match &self.payload {
            Payload::Message(_) => None,
            Payload::Other(payload) => Some(payload),
        }
    }
}

/// The messages a request carries for this branch.
pub(crate) fn project(branch: &[BranchEntry]) -> Vec<Arc<Message>> {
    let mut messages = Vec::new();
    let mut start = 0;
    if let Some((position, summary, first_kept)) = latest_checkpoint(branch) {
        messages.push(Arc::new(Message::User(UserMessage::text(format!(
            "The conversation history before this point was compacted into the following summary:\n\n<summary>\n{summary}\n</summary>"
        )))));
        start = branch
            .iter()
            .position(|entry| entry.id == first_kept)
            .unwrap_or(position + 1);
    }
    messages.extend(
        branch
            .iter()
            .skip(start)
            .filter_map(|entry| entry.message().cloned()),
    );
    messages
}

/// The branch from the latest checkpoint on: the first kept entry (or the
/// checkpoint itself) and everything after it. The same rule as
/// `keel_session::from_latest_checkpoint`, which the store applies when the
/// branch is read; the writer applies it here when it appends a checkpoint.
pub(crate) fn from_latest_checkpoint(mut branch: Vec<BranchEntry>) -> Vec<BranchEntry> {
    let Some((checkpoint_at, _, first_kept)) = latest_checkpoint(&branch) else {
        return branch;
    };
    let start = branch
        .iter()
        .position(|entry| entry.id == first_kept)
        .unwrap_or(checkpoint_at)
        .min(checkpoint_at);
    branch.split_off(start)
}

/// The latest checkpoint: its position, summary and first kept entry id.
fn latest_checkpoint(branch: &[BranchEntry]) -> Option<(usize, &str, &str)> {
    branch
        .iter()
        .enumerate()
        .rev()
        .find_map(|(position, entry)| match entry.other() {
            Some(EntryPayload::Checkpoint {
                summary,
                first_kept_entry_id,
            }) => Some((position, summary.as_str(), first_kept_entry_id.as_str())),
            _ => None,
        })
}

/// The last configuration on the branch, as `(provider, model, mode, tools)`.
pub(crate) fn last_configuration(branch: &[BranchEntry]) -> Option<&EntryPayload> {
    branch
        .iter()
        .rev()
        .filter_map(BranchEntry::other)
        .find(|payload| matches!(payload, EntryPayload::Configuration { .. }))
}
