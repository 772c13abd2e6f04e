//! Projects the active branch into the messages of a model request.
//!
//! Only the active branch is visible: the latest checkpoint's summary stands
//! in for everything it covers, then come the kept entries after it. Queued
//! messages and partial output never appear here because they are never
//! entries. This is one stage of the request pipeline (`pipeline.rs`).

use keel_protocol::{Entry, EntryPayload, Message, UserMessage};

/// What of a context branch the model sees: the latest checkpoint (whose
/// summary stands first), and the entries from its first kept entry on
/// (the whole branch when there is no checkpoint).
pub(crate) fn visible(branch: &[Entry]) -> (Option<&Entry>, &[Entry]) {
    let Some(position) = branch
        .iter()
        .rposition(|entry| matches!(entry.payload, EntryPayload::Checkpoint { .. }))
    else {
        return (None, branch);
    };
    let checkpoint = &branch[position];
    let start = match &checkpoint.payload {
        EntryPayload::Checkpoint {
            first_kept_entry_id,
            ..
        } => branch
            .iter()
            .position(|entry| &entry.id == first_kept_entry_id)
            .unwrap_or(position + 1),
        _ => position + 1,
    };
    (Some(checkpoint), branch.get(start..).unwrap_or_default())
}

/// The summary of a checkpoint entry (`None` for any other entry).
pub(crate) fn summary_of(entry: &Entry) -> Option<&str> {
    match &entry.payload {
        EntryPayload::Checkpoint { summary, .. } => Some(summary),
        _ => None,
    }
}

/// The user message that stands in for what a checkpoint covers.
pub(crate) fn summary_message(summary: &str) -> Message {
    Message::User(UserMessage::text(format!(
        "The conversation history before this point was compacted into the following summary:\n\n<summary>\n{summary}\n</summary>"
    )))
}

/// The messages a request carries for this branch.
pub(crate) fn project(branch: &[Entry]) -> Vec<Message> {
    let (checkpoint, entries) = visible(branch);
    let mut messages = Vec::with_capacity(entries.len() + 1);
    if let Some(summary) = checkpoint.and_then(summary_of) {
        messages.push(summary_message(summary));
    }
    for entry in entries {
        if let EntryPayload::Message { message } = &entry.payload {
            messages.push(message.clone());
        }
    }
    messages
}

/// The last configuration on the branch, as `(provider, model, mode, tools)`.
pub(crate) fn last_configuration(branch: &[Entry]) -> Option<&EntryPayload> {
    branch
        .iter()
        .rev()
        .map(|entry| &entry.payload)
        .find(|payload| matches!(payload, EntryPayload::Configuration { .. }))
}
