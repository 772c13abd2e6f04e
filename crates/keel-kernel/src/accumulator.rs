//! Builds one assistant message from a stream of provider events.
//!
//! Blocks are addressed by the provider's `index`; the message keeps them in
//! the order they started. Tool-call arguments arrive as JSON fragments and
//! are decoded at `tool_call_end`: text that is not a JSON object is kept as a
//! string so the call fails validation visibly instead of being dropped.

use std::collections::HashMap;

use keel_protocol::{
    AssistantMessage, ContentBlock, ProviderError, ProviderErrorKind, ProviderEvent, StopReason,
    ToolCall, Usage,
};
use serde_json::Value;

/// What a finished stream produced.
pub(crate) enum Finished {
    /// `done`: the message is complete.
    Message(AssistantMessage),
    /// `error`: nothing is authoritative.
    Error(ProviderError),
}

#[derive(Default)]
pub(crate) struct Accumulator {
    blocks: Vec<Partial>,
    by_index: HashMap<usize, usize>,
    usage: Usage,
    model: Option<String>,
    response_id: Option<String>,
    provider: Option<String>,
}

enum Partial {
    Text(String),
    Thinking {
        text: String,
        signature: Option<String>,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
}

impl Accumulator {
    /// An accumulator for a response from `provider`.
    pub(crate) fn for_provider(provider: &str) -> Self {
        Self {
            provider: Some(provider.to_owned()),
            ..Self::default()
        }
    }

    /// Applies one event; returns the outcome when the stream is finished.
    pub(crate) fn apply(
        &mut self,
        event: &ProviderEvent,
    ) -> Result<Option<Finished>, ProviderError> {
        match event {
            ProviderEvent::Start { model, response_id } => {
                self.model.clone_from(model);
                self.response_id.clone_from(response_id);
            }
            ProviderEvent::TextStart { index } => {
                self.open(*index, Partial::Text(String::new()))?
            }
            ProviderEvent::ThinkingStart { index } => self.open(
                *index,
                Partial::Thinking {
                    text: String::new(),
                    signature: None,
                },
            )?,
            ProviderEvent::ToolCallStart { index, id, name } => self.open(
                *index,
                Partial::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                },
            )?,
            ProviderEvent::TextDelta { index, delta } => match self.block(*index)? {
                Partial::Text(text) => text.push_str(delta),
                _ => return Err(mismatch(*index, "text_delta")),
            },
            ProviderEvent::ThinkingDelta { index, delta } => match self.block(*index)? {
                Partial::Thinking { text, .. } => text.push_str(delta),
                _ => return Err(mismatch(*index, "thinking_delta")),
            },
            ProviderEvent::ThinkingEnd {
                index,
                signature: end_signature,
            } => match self.block(*index)? {
                Partial::Thinking { signature, .. } => signature.clone_from(end_signature),
                _ => return Err(mismatch(*index, "thinking_end")),
            },
            ProviderEvent::ToolCallDelta { index, delta } => match self.block(*index)? {
                Partial::ToolCall { arguments, .. } => arguments.push_str(delta),
                _ => return Err(mismatch(*index, "tool_call_delta")),
            },
            ProviderEvent::TextEnd { index } | ProviderEvent::ToolCallEnd { index } => {
                self.block(*index)?;
            }
            ProviderEvent::Usage { usage } => self.usage = *usage,
            ProviderEvent::Done { stop_reason } => {
                return Ok(Some(Finished::Message(self.finish(*stop_reason))));
            }
            ProviderEvent::Error { error } => return Ok(Some(Finished::Error(error.clone()))),
        }
        Ok(None)
    }

    fn open(&mut self, index: usize, partial: Partial) -> Result<(), ProviderError> {
        if self.by_index.contains_key(&index) {
            return Err(ProviderError::new(
                ProviderErrorKind::Protocol,
                format!("provider started content block {index} twice"),
            ));
        }
        self.by_index.insert(index, self.blocks.len());
        self.blocks.push(partial);
        Ok(())
    }

    fn block(&mut self, index: usize) -> Result<&mut Partial, ProviderError> {
        self.by_index
            .get(&index)
            .and_then(|&position| self.blocks.get_mut(position))
            .ok_or_else(|| {
                ProviderError::new(
                    ProviderErrorKind::Protocol,
                    format!("provider sent an event for content block {index} before starting it"),
                )
            })
    }

    fn finish(&mut self, stop_reason: StopReason) -> AssistantMessage {
        let content = std::mem::take(&mut self.blocks)
            .into_iter()
            .map(|partial| match partial {
                Partial::Text(text) => ContentBlock::Text { text },
                Partial::Thinking { text, signature } => ContentBlock::Thinking {
                    thinking: text,
                    signature,
                },
                Partial::ToolCall {
                    id,
                    name,
                    arguments,
                } => ContentBlock::ToolCall(ToolCall::new(id, name, decode_arguments(arguments))),
            })
            .collect();
        let mut message = AssistantMessage::default();
        message.content = content;
        message.stop_reason = stop_reason;
        message.usage = self.usage;
        message.model = self.model.take();
        message.provider = self.provider.take();
        message.response_id = self.response_id.take();
        message
    }
}

fn mismatch(index: usize, event: &str) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::Protocol,
        format!("provider sent {event} for content block {index} of another type"),
    )
}

/// Decodes argument text; anything but a JSON object stays a string.
fn decode_arguments(raw: String) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    match serde_json::from_str::<Value>(&raw) {
        Ok(value @ Value::Object(_)) => value,
        _ => Value::String(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulates_split_tool_arguments_and_keeps_bad_json_as_text() {
        let mut acc = Accumulator::default();
        let events = [
            ProviderEvent::Start {
                model: None,
                response_id: None,
            },
            ProviderEvent::ToolCallStart {
                index: 0,
                id: "a".into(),
                name: "read".into(),
            },
            ProviderEvent::ToolCallDelta {
                index: 0,
                delta: "{\"pa".into(),
            },
            ProviderEvent::ToolCallDelta {
                index: 0,
                delta: "th\":\"x\"}".into(),
            },
            ProviderEvent::ToolCallEnd { index: 0 },
            ProviderEvent::ToolCallStart {
                index: 1,
                id: "b".into(),
                name: "read".into(),
            },
            ProviderEvent::ToolCallDelta {
                index: 1,
                delta: "{oops".into(),
            },
            ProviderEvent::ToolCallEnd { index: 1 },
        ];
        for event in &events {
            assert!(acc.apply(event).unwrap().is_none());
        }
        let Some(Finished::Message(message)) = acc
            .apply(&ProviderEvent::Done {
                stop_reason: StopReason::ToolUse,
            })
            .unwrap()
        else {
            panic!("expected a message");
        };
        let calls: Vec<_> = message.tool_calls().collect();
        assert_eq!(calls[0].arguments, serde_json::json!({"path": "x"}));
        assert_eq!(calls[1].arguments, Value::String("{oops".into()));
    }

    #[test]
    fn delta_for_unknown_block_is_a_protocol_error() {
        let mut acc = Accumulator::default();
        let error = acc
            .apply(&ProviderEvent::TextDelta {
                index: 3,
                delta: "x".into(),
            })
            .err()
            .unwrap();
        assert_eq!(error.kind, ProviderErrorKind::Protocol);
    }
}
