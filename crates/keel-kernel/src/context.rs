//! Projects the active branch into the messages of a model request.
//!
//! Only the active branch is visible: the latest checkpoint's summary stands
//! in for everything it covers, then come the kept entries after it. Queued
//! messages and partial output never appear here because they are never
//! entries.

use keel_protocol::{Entry, EntryPayload, Message, UserMessage};

/// The messages a request carries for this branch.
pub(crate) fn project(branch: &[Entry]) -> Vec<Message> {
    let checkpoint = branch
        .iter()
        .enumerate()
        .rev()
        .find_map(|(position, entry)| match &entry.payload {
            EntryPayload::Checkpoint {
                summary,
                first_kept_entry_id,
            } => Some((position, summary, first_kept_entry_id)),
            _ => None,
        });
    let mut messages = Vec::new();
    let mut start = 0;
    if let Some((position, summary, first_kept)) = checkpoint {
        messages.push(Message::User(UserMessage::text(format!(
            "The conversation history before this point was compacted into the following summary:\n\n<summary>\n{summary}\n</summary>"
        ))));
        start = branch
            .iter()
            .position(|entry| &entry.id == first_kept)
            .unwrap_or(position + 1);
    }
    for entry in branch.iter().skip(start) {
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
