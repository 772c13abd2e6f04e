//! Making a history fit the model it is sent to.
//!
//! A session may start on one provider and continue on another. Before a
//! request, [`adapt_history`] makes the messages valid for the target:
//! thinking written by another model becomes plain text (its signature means
//! nothing elsewhere) or is dropped when empty; tool-call ids are normalised
//! to what every API accepts (`[A-Za-z0-9_-]`, at most 64 characters),
//! consistently in calls and results; a tool call without a result gets an
//! error result, and a result without its call is dropped. Histories that
//! are already valid for the target come back unchanged.
//!
//! Messages are shared ([`Arc`]): a message that needs no change is passed
//! on as the same `Arc`, and only a changed one is copied, so adapting a
//! long history copies pointers and the few messages that differ, never the
//! whole history.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use keel_protocol::{
    AssistantMessage, ContentBlock, Message, ToolErrorCode, ToolResultError, ToolResultMessage,
    ToolStatus, UserContent,
};

/// The history adapted for `target_model` of `target_provider`.
pub fn adapt_history(
    messages: Vec<Arc<Message>>,
    target_provider: &str,
    target_model: &str,
) -> Vec<Arc<Message>> {
    let mut ids = IdMap {
        // Most histories need no renaming: then ids are passed through
        // without the bookkeeping (a request of 10,000 messages is built
        // for every turn).
        identity: messages.iter().all(|message| ids_are_valid(message)),
        ..IdMap::default()
    };
    let mut out: Vec<Arc<Message>> = Vec::with_capacity(messages.len());
    let mut open_calls: Vec<(String, String)> = Vec::new();
    for message in messages {
        let adapted = match message.as_ref() {
            Message::Assistant(assistant) => {
                close_orphans(&mut out, &mut open_calls);
                let same = same_source(assistant, target_provider, target_model);
                let adapted = adapt_assistant(assistant, same, &mut ids).map(Message::Assistant);
                let calls = match &adapted {
                    Some(Message::Assistant(changed)) => changed,
                    _ => assistant,
                };
                open_calls = calls
                    .tool_calls()
                    .map(|call| (call.id.clone(), call.name.clone()))
                    .collect();
                adapted
            }
            Message::ToolResult(result) => {
                let id = ids.get(&result.call_id);
                let Some(position) = open_calls.iter().position(|(call, _)| *call == id) else {
                    continue;
                };
                open_calls.remove(position);
                (id != result.call_id).then(|| {
                    Message::ToolResult({
                        let mut tool_result_message = result.clone();
                        tool_result_message.call_id = id;
                        tool_result_message
                    })
                })
            }
            Message::User(_) => {
                close_orphans(&mut out, &mut open_calls);
                None
            }
        };
        out.push(adapted.map_or(message, Arc::new));
    }
    close_orphans(&mut out, &mut open_calls);
    out
}

/// Whether `assistant` was written by the target provider and model. A
/// provider may answer with a dated name (`gpt-5-2025-08-07` for `gpt-5`),
/// so the answered name only has to start with the requested one.
fn same_source(assistant: &AssistantMessage, target_provider: &str, target_model: &str) -> bool {
    let provider_matches = assistant
        .provider
        .as_deref()
        .is_none_or(|provider| provider == target_provider);
    let model_matches = assistant
        .model
        .as_deref()
        .is_some_and(|model| model.starts_with(target_model));
    provider_matches && model_matches
}

/// The message adapted for the target, or `None` when it is valid as it is
/// (then it is not copied).
fn adapt_assistant(
    assistant: &AssistantMessage,
    same_model: bool,
    ids: &mut IdMap,
) -> Option<AssistantMessage> {
    // With every id valid nothing is renamed: no id is looked at.
    let call_ids: Vec<String> = if ids.identity {
        Vec::new()
    } else {
        assistant
            .tool_calls()
            .map(|call| ids.get(&call.id))
            .collect()
    };
    let renamed = assistant
        .tool_calls()
        .zip(&call_ids)
        .any(|(call, id)| call.id != *id);
    let foreign_thinking = !same_model && has_thinking(assistant);
    if !renamed && !foreign_thinking {
        return None;
    }
    let mut adapted = assistant.clone();
    if foreign_thinking {
        thinking_as_text(&mut adapted);
    }
    let calls = adapted.content.iter_mut().filter_map(|block| match block {
        ContentBlock::ToolCall(call) => Some(call),
        _ => None,
    });
    for (call, id) in calls.zip(call_ids) {
        call.id = id;
    }
    Some(adapted)
}

/// One message made valid for the target on its own, or `None` when it
/// already is (then nothing is copied): thinking written by another model
/// becomes text, or is dropped when empty. A caller that keeps a history
/// for one target (the kernel's context branch) adapts each message once,
/// as it enters the history; [`adapt_history`] then finds nothing more to
/// rewrite in it. Tool-call ids and calls without results depend on the
/// whole history, so only [`adapt_history`] handles them.
pub fn adapt_message(
    message: &Message,
    target_provider: &str,
    target_model: &str,
) -> Option<Message> {
    match message {
        Message::Assistant(assistant)
            if has_thinking(assistant)
                && !same_source(assistant, target_provider, target_model) =>
        {
            let mut adapted = assistant.clone();
            thinking_as_text(&mut adapted);
            Some(Message::Assistant(adapted))
        }
        _ => None,
    }
}

fn has_thinking(assistant: &AssistantMessage) -> bool {
    assistant
        .content
        .iter()
        .any(|block| matches!(block, ContentBlock::Thinking { .. }))
}

/// Another model's thinking as text (its signature means nothing here),
/// dropped when empty; the text is moved, not copied.
fn thinking_as_text(assistant: &mut AssistantMessage) {
    if !has_thinking(assistant) {
        return;
    }
    assistant.content = std::mem::take(&mut assistant.content)
        .into_iter()
        .filter_map(|block| match block {
            ContentBlock::Thinking { thinking, .. } => {
                (!thinking.trim().is_empty()).then_some(ContentBlock::Text { text: thinking })
            }
            other => Some(other),
        })
        .collect();
}

/// Adds an error result for every call still without one.
fn close_orphans(out: &mut Vec<Arc<Message>>, open_calls: &mut Vec<(String, String)>) {
    for (call_id, tool_name) in open_calls.drain(..) {
        let message = "No result provided: the call was interrupted before it returned".to_owned();
        out.push(Arc::new(Message::ToolResult({
            let mut tool_result_message = ToolResultMessage::new(
                call_id,
                tool_name,
                ToolStatus::Error,
                vec![UserContent::Text {
                    text: message.clone(),
                }],
            );
            tool_result_message.error =
                Some(ToolResultError::new(ToolErrorCode::ToolError, message));
            tool_result_message.details = None;
            tool_result_message
        })));
    }
}

/// Whether every tool-call id of `message` is one every API accepts.
fn ids_are_valid(message: &Message) -> bool {
    match message {
        Message::Assistant(assistant) => assistant.tool_calls().all(|call| valid_id(&call.id)),
        Message::ToolResult(result) => valid_id(&result.call_id),
        Message::User(_) => true,
    }
}

/// `[A-Za-z0-9_-]`, 1 to 64 characters.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Consistent renaming of tool-call ids that some API would refuse.
#[derive(Default)]
struct IdMap {
    /// Every id of the history is valid: nothing is renamed.
    identity: bool,
    renamed: HashMap<String, String>,
    used: HashSet<String>,
}

impl IdMap {
    fn get(&mut self, id: &str) -> String {
        if self.identity {
            return id.to_owned();
        }
        if let Some(renamed) = self.renamed.get(id) {
            return renamed.clone();
        }
        let valid = valid_id(id);
        let mut candidate = if valid {
            id.to_owned()
        } else {
            let cleaned: String = id
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .take(56)
                .collect();
            if cleaned.is_empty() {
                "call".to_owned()
            } else {
                cleaned
            }
        };
        let mut suffix = 1;
        while self.used.contains(&candidate) && !valid {
            candidate = format!(
                "{}_{suffix}",
                candidate.trim_end_matches(|c: char| c.is_ascii_digit() || c == '_')
            );
            suffix += 1;
        }
        self.used.insert(candidate.clone());
        self.renamed.insert(id.to_owned(), candidate.clone());
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_protocol::{StopReason, ToolCall, Usage, UserMessage};
    use serde_json::json;

    fn assistant(model: &str, content: Vec<ContentBlock>) -> Message {
        Message::Assistant({
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = content;
            assistant_message.stop_reason = StopReason::ToolUse;
            assistant_message.usage = Usage::default();
            assistant_message.model = Some(model.into());
            assistant_message.provider = None;
            assistant_message
        })
    }

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolCall(ToolCall::new(id, "read", json!({})))
    }

    fn result(id: &str) -> Message {
        Message::ToolResult({
            let mut tool_result_message =
                ToolResultMessage::new(id, "read", ToolStatus::Success, vec![]);
            tool_result_message.error = None;
            tool_result_message.details = None;
            tool_result_message
        })
    }

    fn shared(history: Vec<Message>) -> Vec<Arc<Message>> {
        history.into_iter().map(Arc::new).collect()
    }

    #[test]
    fn foreign_thinking_becomes_text_and_own_thinking_stays() {
        let thinking = ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: Some("sig".into()),
        };
        let history = shared(vec![assistant("a", vec![thinking.clone()])]);
        let other = adapt_history(history.clone(), "p", "b");
        let Message::Assistant(message) = other[0].as_ref() else {
            panic!()
        };
        assert_eq!(
            message.content,
            vec![ContentBlock::Text { text: "hmm".into() }]
        );
        assert_eq!(adapt_history(history.clone(), "p", "a"), history);
    }

    #[test]
    fn ids_are_normalised_and_orphans_closed() {
        let history = shared(vec![
            Message::User(UserMessage::text("go")),
            assistant("a", vec![call("call|1:x"), call("ok_2")]),
            result("call|1:x"),
            result("stray"),
            Message::User(UserMessage::text("next")),
        ]);
        let adapted = adapt_history(history.clone(), "p", "b");
        let Message::Assistant(message) = adapted[1].as_ref() else {
            panic!()
        };
        let ids: Vec<&str> = message.tool_calls().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_1_x", "ok_2"]);
        let Message::ToolResult(first) = adapted[2].as_ref() else {
            panic!()
        };
        assert_eq!(first.call_id, "call_1_x");
        let Message::ToolResult(orphan) = adapted[3].as_ref() else {
            panic!()
        };
        assert_eq!(
            (orphan.call_id.as_str(), orphan.status),
            ("ok_2", ToolStatus::Error)
        );
        assert!(
            matches!(adapted[4].as_ref(), Message::User(_)),
            "the stray result is dropped"
        );
        assert_eq!(adapted.len(), 5);
    }

    /// Adapting copies only what changes: every message that is already
    /// valid for the target comes back as the same `Arc`.
    #[test]
    fn messages_that_need_no_change_are_shared_not_copied() {
        let thinking = ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: None,
        };
        let history = shared(vec![
            Message::User(UserMessage::text("go")),
            assistant("a", vec![thinking, call("ok_1")]),
            result("ok_1"),
            assistant("a", vec![call("bad|id")]),
            result("bad|id"),
            Message::User(UserMessage::text("next")),
        ]);
        let same = adapt_history(history.clone(), "p", "a");
        assert_eq!(same.len(), history.len());
        for (adapted, original) in same.iter().zip(&history).take(3) {
            assert!(Arc::ptr_eq(adapted, original), "{original:?} was copied");
        }
        assert!(
            !Arc::ptr_eq(&same[3], &history[3]),
            "a renamed call is a copy"
        );
        assert!(!Arc::ptr_eq(&same[4], &history[4]), "so is its result");
        assert!(Arc::ptr_eq(&same[5], &history[5]));
        let other = adapt_history(history.clone(), "p", "b");
        assert!(
            !Arc::ptr_eq(&other[1], &history[1]),
            "foreign thinking changes"
        );
        assert!(Arc::ptr_eq(&other[2], &history[2]));
    }

    #[test]
    fn adapting_one_message_moves_foreign_thinking_into_text() {
        let message = assistant(
            "a",
            vec![
                ContentBlock::Thinking {
                    thinking: "hmm".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::Thinking {
                    thinking: " ".into(),
                    signature: None,
                },
                call("ok_1"),
            ],
        );
        assert_eq!(
            adapt_message(&message, "p", "a"),
            None,
            "the target's own thinking stays"
        );
        let user = Message::User(UserMessage::text("go"));
        assert_eq!(
            adapt_message(&user, "p", "b"),
            None,
            "only thinking changes"
        );
        let Some(Message::Assistant(foreign)) = adapt_message(&message, "p", "b") else {
            panic!()
        };
        assert_eq!(
            foreign.content,
            vec![ContentBlock::Text { text: "hmm".into() }, call("ok_1")]
        );
        let adapted = shared(vec![Message::Assistant(foreign), result("ok_1")]);
        let again = adapt_history(adapted.clone(), "p", "b");
        assert!(
            again.iter().zip(&adapted).all(|(a, b)| Arc::ptr_eq(a, b)),
            "an adapted message needs no second copy"
        );
    }
}
