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

use std::collections::{HashMap, HashSet};

use keel_protocol::{
    AssistantMessage, ContentBlock, Message, ToolErrorCode, ToolResultError, ToolResultMessage,
    ToolStatus, UserContent,
};

/// The history adapted for `target_model` of `target_provider`.
pub fn adapt_history(
    messages: Vec<Message>,
    target_provider: &str,
    target_model: &str,
) -> Vec<Message> {
    let mut ids = IdMap {
        // Most histories need no renaming: then ids are passed through
        // without the bookkeeping (a request of 10,000 messages is built
        // for every turn).
        identity: messages.iter().all(ids_are_valid),
        ..IdMap::default()
    };
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut open_calls: Vec<(String, String)> = Vec::new();
    for message in messages {
        match message {
            Message::Assistant(assistant) => {
                close_orphans(&mut out, &mut open_calls);
                let same = same_source(&assistant, target_provider, target_model);
                let adapted = adapt_assistant(assistant, same, &mut ids);
                open_calls = adapted
                    .tool_calls()
                    .map(|call| (call.id.clone(), call.name.clone()))
                    .collect();
                out.push(Message::Assistant(adapted));
            }
            Message::ToolResult(result) => {
                let id = ids.get(&result.call_id);
                if let Some(position) = open_calls.iter().position(|(call, _)| *call == id) {
                    open_calls.remove(position);
                    out.push(Message::ToolResult(ToolResultMessage {
                        call_id: id,
                        ..result
                    }));
                }
            }
            message @ Message::User(_) => {
                close_orphans(&mut out, &mut open_calls);
                out.push(message);
            }
        }
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

fn adapt_assistant(
    mut assistant: AssistantMessage,
    same_model: bool,
    ids: &mut IdMap,
) -> AssistantMessage {
    assistant.content = std::mem::take(&mut assistant.content)
        .into_iter()
        .filter_map(|block| match block {
            ContentBlock::Thinking { thinking, .. } if !same_model => {
                (!thinking.trim().is_empty()).then_some(ContentBlock::Text { text: thinking })
            }
            ContentBlock::ToolCall(mut call) => {
                call.id = ids.get(&call.id);
                Some(ContentBlock::ToolCall(call))
            }
            other => Some(other),
        })
        .collect();
    assistant
}

/// Adds an error result for every call still without one.
fn close_orphans(out: &mut Vec<Message>, open_calls: &mut Vec<(String, String)>) {
    for (call_id, tool_name) in open_calls.drain(..) {
        let message = "No result provided: the call was interrupted before it returned".to_owned();
        out.push(Message::ToolResult(ToolResultMessage {
            call_id,
            tool_name,
            status: ToolStatus::Error,
            content: vec![UserContent::Text {
                text: message.clone(),
            }],
            error: Some(ToolResultError {
                code: ToolErrorCode::ToolError,
                message,
            }),
            details: None,
        }));
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
        Message::Assistant(AssistantMessage {
            content,
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
            model: Some(model.into()),
            provider: None,
        })
    }

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolCall(ToolCall {
            id: id.into(),
            name: "read".into(),
            arguments: json!({}),
        })
    }

    fn result(id: &str) -> Message {
        Message::ToolResult(ToolResultMessage {
            call_id: id.into(),
            tool_name: "read".into(),
            status: ToolStatus::Success,
            content: vec![],
            error: None,
            details: None,
        })
    }

    #[test]
    fn foreign_thinking_becomes_text_and_own_thinking_stays() {
        let thinking = ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: Some("sig".into()),
        };
        let history = vec![assistant("a", vec![thinking.clone()])];
        let other = adapt_history(history.clone(), "p", "b");
        let Message::Assistant(message) = &other[0] else {
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
        let history = vec![
            Message::User(UserMessage::text("go")),
            assistant("a", vec![call("call|1:x"), call("ok_2")]),
            result("call|1:x"),
            result("stray"),
            Message::User(UserMessage::text("next")),
        ];
        let adapted = adapt_history(history.clone(), "p", "b");
        let Message::Assistant(message) = &adapted[1] else {
            panic!()
        };
        let ids: Vec<&str> = message.tool_calls().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_1_x", "ok_2"]);
        let Message::ToolResult(first) = &adapted[2] else {
            panic!()
        };
        assert_eq!(first.call_id, "call_1_x");
        let Message::ToolResult(orphan) = &adapted[3] else {
            panic!()
        };
        assert_eq!(
            (orphan.call_id.as_str(), orphan.status),
            ("ok_2", ToolStatus::Error)
        );
        assert!(
            matches!(adapted[4], Message::User(_)),
            "the stray result is dropped"
        );
        assert_eq!(adapted.len(), 5);
    }
}
