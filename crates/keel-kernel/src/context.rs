//! The context branch as a run holds it, and its projection into the
//! messages of a model request.
//!
//! Only the active branch is visible: the latest checkpoint's summary stands
//! in for everything it covers, then come the kept entries after it. Queued
//! messages and partial output never appear here because they are never
//! entries. This is one stage of the request pipeline (`pipeline.rs`).
//!
//! The branch is kept as [`BranchEntry`] values whose payloads are shared
//! ([`Arc`]): a projection hands the request the same `Arc`s, and the
//! accounting, compaction and session rules read the entries in place, so
//! each turn copies pointers, never the history's text, and a resumed
//! session costs one copy of its branch however many turns run
//! (docs/benchmarks.md). Each message is adapted for the run's model once,
//! as it enters the branch (`keel_provider::transform::adapt_message` turns
//! another model's thinking into text), and kept only in that form, so the
//! per-request `adapt_history` finds nothing to copy. What the adaptation
//! changed is remembered beside it (which text blocks were thinking, and
//! the empty thinking it dropped), so the readers that must see the message
//! as stored — token accounting, the compaction transcript — get it back
//! exactly ([`BranchEntry::stored`]), signatures aside, which none of them
//! reads. Invariant: nothing here keeps a second copy of a [`Message`] of
//! the branch.

use std::borrow::Cow;
use std::sync::Arc;

use keel_protocol::{AssistantMessage, ContentBlock, Entry, EntryPayload, Message, UserMessage};
use keel_provider::transform::adapt_message;

/// One entry of the context branch as a run keeps it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BranchEntry {
    /// The entry's id.
    pub(crate) id: String,
    payload: Payload,
}

#[derive(Debug, Clone, PartialEq)]
enum Payload {
    /// A message as requests carry it, shared with them; `origins` is set
    /// when adapting it changed it: what became of each stored block.
    Message {
        message: Arc<Message>,
        origins: Option<Arc<[Origin]>>,
    },
    /// Any other payload (configuration, checkpoint, decision, …).
    Other(Arc<EntryPayload>),
}

/// What became of one content block of a stored assistant message when it
/// was adapted for the run's model.
#[derive(Debug, Clone, PartialEq)]
enum Origin {
    /// Kept as it is: the next block of the adapted message.
    Kept,
    /// Another model's thinking: the next block, now text.
    Thinking,
    /// Another model's blank thinking, dropped; its text.
    Dropped(String),
}

impl BranchEntry {
    /// The entry as the branch keeps it, its message adapted for `model`
    /// of `provider`: a message that needs no change is moved, not copied;
    /// one that does is kept only adapted.
    pub(crate) fn new(entry: Entry, provider: &str, model: &str) -> Self {
        let payload = match entry.payload {
            EntryPayload::Message { message } => match adapt_message(&message, provider, model) {
                None => Payload::Message {
                    message: Arc::new(message),
                    origins: None,
                },
                Some(adapted) => Payload::Message {
                    origins: Some(origins(&message)),
                    message: Arc::new(adapted),
                },
            },
            other => Payload::Other(Arc::new(other)),
        };
        Self {
            id: entry.id,
            payload,
        }
    }

    /// The entry's message as a request carries it (`None` for any other
    /// entry): as stored, except that another model's thinking is text.
    /// Its tool calls and results are the stored ones.
    pub(crate) fn message(&self) -> Option<&Message> {
        self.sent().map(AsRef::as_ref)
    }

    /// The entry's message as stored, rebuilt (a copy, for the moment it
    /// is read) when adapting it changed it; another model's thinking comes
    /// back without its signature.
    pub(crate) fn stored(&self) -> Option<Cow<'_, Message>> {
        let Payload::Message { message, origins } = &self.payload else {
            return None;
        };
        let (Some(origins), Message::Assistant(adapted)) = (origins, message.as_ref()) else {
            return Some(Cow::Borrowed(message));
        };
        let mut blocks = adapted.content.iter();
        let content = origins
            .iter()
            .filter_map(|origin| match origin {
                Origin::Kept => blocks.next().cloned(),
                Origin::Thinking => blocks.next().map(|block| match block {
                    ContentBlock::Text { text } => ContentBlock::Thinking {
                        thinking: text.clone(),
                        signature: None,
                    },
                    other => other.clone(),
                }),
                Origin::Dropped(thinking) => Some(ContentBlock::Thinking {
                    thinking: thinking.clone(),
                    signature: None,
                }),
            })
            .collect();
        Some(Cow::Owned(Message::Assistant({
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = content;
            assistant_message.stop_reason = adapted.stop_reason;
            assistant_message.usage = adapted.usage;
            assistant_message.model = adapted.model.clone();
            assistant_message.provider = adapted.provider.clone();
            assistant_message
        })))
    }

    /// The entry's message as a request carries it, shared.
    fn sent(&self) -> Option<&Arc<Message>> {
        match &self.payload {
            Payload::Message { message, .. } => Some(message),
            Payload::Other(_) => None,
        }
    }

    /// The entry's payload when it is not a message (see [`Self::message`]).
    pub(crate) fn payload(&self) -> Option<&EntryPayload> {
        match &self.payload {
            Payload::Message { .. } => None,
            Payload::Other(payload) => Some(payload),
        }
    }
}

/// What `adapt_message` makes of each block of a stored message: another
/// model's thinking becomes text, or is dropped when blank.
fn origins(message: &Message) -> Arc<[Origin]> {
    let Message::Assistant(assistant) = message else {
        return Arc::new([]);
    };
    assistant
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Thinking { thinking, .. } if thinking.trim().is_empty() => {
                Origin::Dropped(thinking.clone())
            }
            ContentBlock::Thinking { .. } => Origin::Thinking,
            _ => Origin::Kept,
        })
        .collect()
}

/// What of a context branch the model sees: the latest checkpoint (whose
/// summary stands first), and the entries from its first kept entry on
/// (the whole branch when there is no checkpoint).
pub(crate) fn visible(branch: &[BranchEntry]) -> (Option<&BranchEntry>, &[BranchEntry]) {
    let Some(position) = branch.iter().rposition(|entry| summary_of(entry).is_some()) else {
        return (None, branch);
    };
    let checkpoint = &branch[position];
    let start = match checkpoint.payload() {
        Some(EntryPayload::Checkpoint {
            first_kept_entry_id,
            ..
        }) => branch
            .iter()
            .position(|entry| &entry.id == first_kept_entry_id)
            .unwrap_or(position + 1),
        _ => position + 1,
    };
    (Some(checkpoint), branch.get(start..).unwrap_or_default())
}

/// The summary of a checkpoint entry (`None` for any other entry).
pub(crate) fn summary_of(entry: &BranchEntry) -> Option<&str> {
    match entry.payload() {
        Some(EntryPayload::Checkpoint { summary, .. }) => Some(summary),
        _ => None,
    }
}

/// The user message that stands in for what a checkpoint covers.
pub(crate) fn summary_message(summary: &str) -> Message {
    Message::User(UserMessage::text(format!(
        "The conversation history before this point was compacted into the following summary:\n\n<summary>\n{summary}\n</summary>"
    )))
}

/// The messages a request carries for this branch: the branch's own,
/// shared; only the summary is new.
pub(crate) fn project(branch: &[BranchEntry]) -> Vec<Arc<Message>> {
    let (checkpoint, entries) = visible(branch);
    let mut messages = Vec::with_capacity(entries.len() + 1);
    if let Some(summary) = checkpoint.and_then(summary_of) {
        messages.push(Arc::new(summary_message(summary)));
    }
    messages.extend(entries.iter().filter_map(BranchEntry::sent).cloned());
    messages
}

/// The branch from the latest checkpoint on: the first kept entry (or the
/// checkpoint itself) and everything after it. The same rule as
/// `keel_session::from_latest_checkpoint`, which the store applies when the
/// branch is read; the writer applies it here when it appends a checkpoint.
pub(crate) fn from_latest_checkpoint(mut branch: Vec<BranchEntry>) -> Vec<BranchEntry> {
    let Some(checkpoint_at) = branch.iter().rposition(|entry| summary_of(entry).is_some()) else {
        return branch;
    };
    let start = match branch[checkpoint_at].payload() {
        Some(EntryPayload::Checkpoint {
            first_kept_entry_id,
            ..
        }) => branch
            .iter()
            .position(|entry| &entry.id == first_kept_entry_id)
            .unwrap_or(checkpoint_at)
            .min(checkpoint_at),
        _ => checkpoint_at,
    };
    branch.split_off(start)
}

/// The last configuration on the branch, as `(provider, model, mode, tools)`.
pub(crate) fn last_configuration(branch: &[BranchEntry]) -> Option<&EntryPayload> {
    branch
        .iter()
        .rev()
        .filter_map(BranchEntry::payload)
        .find(|payload| matches!(payload, EntryPayload::Configuration { .. }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn entry(id: &str, payload: EntryPayload) -> Entry {
        Entry::new(id, None, 0, payload)
    }

    fn thought(model: &str) -> Message {
        Message::Assistant({
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = vec![
                ContentBlock::Thinking {
                    thinking: "hmm".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::Text { text: "yes".into() },
                ContentBlock::Thinking {
                    thinking: " ".into(),
                    signature: None,
                },
            ];
            assistant_message.model = Some(model.into());
            assistant_message.provider = Some("p".into());
            assistant_message
        })
    }

    /// A request carries each message as the branch holds it, one `Arc`;
    /// another model's message is held only adapted, and the readers that
    /// need it as stored get it back.
    #[test]
    fn the_branch_holds_each_message_once_and_gives_back_the_stored_one() {
        let branch: Vec<BranchEntry> = [
            ("u", Message::User(UserMessage::text("go"))),
            ("own", thought("m")),
            ("foreign", thought("other")),
        ]
        .into_iter()
        .map(|(id, message)| {
            let payload = EntryPayload::Message { message };
            BranchEntry::new(entry(id, payload), "p", "m")
        })
        .collect();
        let sent = project(&branch);
        for (position, entry) in branch.iter().enumerate() {
            let held = entry.sent().unwrap();
            assert!(Arc::ptr_eq(held, &sent[position]), "{position} was copied");
        }
        assert_eq!(*sent[1], thought("m"), "the run's own thinking stays");
        assert_eq!(branch[1].stored().unwrap().as_ref(), &thought("m"));
        let Message::Assistant(foreign) = sent[2].as_ref() else {
            panic!("{:?}", sent[2]);
        };
        assert_eq!(
            foreign.content,
            [
                ContentBlock::Text { text: "hmm".into() },
                ContentBlock::Text { text: "yes".into() }
            ]
        );
        let Some(Cow::Owned(Message::Assistant(stored))) = branch[2].stored() else {
            panic!("rebuilt");
        };
        let Message::Assistant(mut original) = thought("other") else {
            panic!()
        };
        if let ContentBlock::Thinking { signature, .. } = &mut original.content[0] {
            *signature = None;
        }
        assert_eq!(stored, original, "as stored, the signature aside");
        let again = project(&branch);
        assert!(sent.iter().zip(&again).all(|(a, b)| Arc::ptr_eq(a, b)));
    }

    #[test]
    fn a_checkpoint_hides_what_it_covers_and_keeps_the_rest() {
        let message = |text: &str| EntryPayload::Message {
            message: Message::User(UserMessage::text(text)),
        };
        let branch: Vec<BranchEntry> = vec![
            entry("a", message("old")),
            entry("b", message("kept")),
            entry("c", EntryPayload::checkpoint("the summary", "b")),
            entry("d", message("new")),
        ]
        .into_iter()
        .map(|entry| BranchEntry::new(entry, "p", "m"))
        .collect();
        let (checkpoint, visible_entries) = visible(&branch);
        assert_eq!(checkpoint.and_then(summary_of), Some("the summary"));
        let ids: Vec<&str> = visible_entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["b", "c", "d"]);
        let texts: Vec<String> = project(&branch)
            .iter()
            .map(|message| match message.as_ref() {
                Message::User(user) => user.plain_text(),
                other => format!("{other:?}"),
            })
            .collect();
        assert!(texts[0].contains("<summary>\nthe summary\n</summary>"));
        assert_eq!(texts[1..], ["kept", "new"]);
        let rest = from_latest_checkpoint(branch);
        let ids: Vec<&str> = rest.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["b", "c", "d"]);
    }
}
