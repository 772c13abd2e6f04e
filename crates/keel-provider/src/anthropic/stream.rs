//! The Messages API event stream, parsed into provider events.
//!
//! Each event's `data` is a JSON object whose `type` names the event (the
//! SSE `event:` name is the fallback). Content blocks are tracked by their
//! Anthropic index from `content_block_start` to `content_block_stop`, so a
//! delta is only accepted for an open block of the matching kind; thinking
//! signatures (`signature_delta`) are collected and handed out with
//! `thinking_end`. Usage arrives in `message_start` and `message_delta` and
//! is reported once, just before `done`, at `message_stop`.

use std::collections::HashMap;

use keel_protocol::{ProviderError, ProviderErrorKind, ProviderEvent, StopReason, Usage};
use serde_json::Value;

use super::REDACTED_THINKING_PREFIX;
use crate::errors::classify_stream_error;
use crate::http::WireFormat;

/// The state of one content block, by index.
#[derive(Debug)]
enum Block {
    Text,
    Thinking {
        signature: String,
    },
    ToolUse,
    /// A block type this adapter does not map (e.g. server tools): its
    /// deltas and stop are ignored.
    Other,
    /// Stopped: no delta or stop may follow.
    Closed,
}

/// The Messages API stream parser; one per response.
#[derive(Debug, Default)]
pub struct AnthropicFormat {
    started: bool,
    blocks: HashMap<usize, Block>,
    usage: Usage,
    stop_reason: StopReason,
}

impl AnthropicFormat {
    /// A parser for one response.
    pub fn new() -> Self {
        Self::default()
    }

    /// `start`, unless it was already emitted.
    fn start(&mut self, model: Option<String>) -> Vec<ProviderEvent> {
        if std::mem::replace(&mut self.started, true) {
            Vec::new()
        } else {
            vec![ProviderEvent::Start { model }]
        }
    }

    fn message_start(&mut self, value: &Value) -> Vec<ProviderEvent> {
        let message = value.get("message");
        if let Some(usage) = message.and_then(|message| message.get("usage")) {
            self.read_usage(usage);
        }
        let model = message
            .and_then(|message| message.get("model"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.start(model)
    }

    fn block_start(&mut self, value: &Value) -> Result<Vec<ProviderEvent>, ProviderError> {
        let index = index(value)?;
        let block = value
            .get("content_block")
            .ok_or_else(|| protocol("content_block_start without a content_block"))?;
        if self.blocks.contains_key(&index) {
            return Err(protocol(format!("content block {index} started twice")));
        }
        let mut out = self.start(None);
        let (state, events) = open_block(index, block)?;
        self.blocks.insert(index, state);
        out.extend(events);
        Ok(out)
    }

    fn block_delta(&mut self, value: &Value) -> Result<Vec<ProviderEvent>, ProviderError> {
        let index = index(value)?;
        let delta = value
            .get("delta")
            .ok_or_else(|| protocol("content_block_delta without a delta"))?;
        let block = self.blocks.get_mut(&index).ok_or_else(|| {
            protocol(format!(
                "a delta for content block {index}, which never started"
            ))
        })?;
        let delta_type = str_field(delta, "type").unwrap_or_default();
        let event = match (block, delta_type) {
            (Block::Text, "text_delta") => ProviderEvent::TextDelta {
                index,
                delta: string_field(delta, "text")?,
            },
            (Block::Thinking { .. }, "thinking_delta") => ProviderEvent::ThinkingDelta {
                index,
                delta: string_field(delta, "thinking")?,
            },
            (Block::Thinking { signature }, "signature_delta") => {
                signature.push_str(&string_field(delta, "signature")?);
                return Ok(Vec::new());
            }
            (Block::ToolUse, "input_json_delta") => ProviderEvent::ToolCallDelta {
                index,
                delta: string_field(delta, "partial_json")?,
            },
            (Block::Other, _) => return Ok(Vec::new()),
            (block, "text_delta" | "thinking_delta" | "signature_delta" | "input_json_delta") => {
                return Err(protocol(format!(
                    "a {delta_type} for content block {index}, which is {block:?}"
                )));
            }
            // Deltas this adapter does not map (e.g. citations).
            _ => return Ok(Vec::new()),
        };
        Ok(non_empty(event).into_iter().collect())
    }

    fn block_stop(&mut self, value: &Value) -> Result<Vec<ProviderEvent>, ProviderError> {
        let index = index(value)?;
        let block = match self.blocks.get_mut(&index) {
            Some(block) => std::mem::replace(block, Block::Closed),
            None => {
                return Err(protocol(format!(
                    "content block {index} stopped, never started"
                )));
            }
        };
        let event = match block {
            Block::Text => ProviderEvent::TextEnd { index },
            Block::Thinking { signature } => ProviderEvent::ThinkingEnd {
                index,
                signature: (!signature.is_empty()).then_some(signature),
            },
            Block::ToolUse => ProviderEvent::ToolCallEnd { index },
            Block::Other => return Ok(Vec::new()),
            Block::Closed => return Err(protocol(format!("content block {index} stopped twice"))),
        };
        Ok(vec![event])
    }

    fn message_delta(&mut self, value: &Value) {
        let reason = value
            .get("delta")
            .and_then(|delta| str_field(delta, "stop_reason"));
        if let Some(reason) = reason {
            self.stop_reason = stop_reason(reason);
        }
        if let Some(usage) = value.get("usage") {
            self.read_usage(usage);
        }
    }

    fn message_stop(&mut self) -> Vec<ProviderEvent> {
        let mut out = self.start(None);
        out.push(ProviderEvent::Usage { usage: self.usage });
        out.push(ProviderEvent::Done {
            stop_reason: self.stop_reason,
        });
        out
    }

    /// Takes every usage figure present; later events override earlier ones.
    fn read_usage(&mut self, usage: &Value) {
        let read = |name: &str| usage.get(name).and_then(Value::as_u64);
        let fields = [
            ("input_tokens", &mut self.usage.input_tokens),
            ("output_tokens", &mut self.usage.output_tokens),
            ("cache_read_input_tokens", &mut self.usage.cache_read_tokens),
            (
                "cache_creation_input_tokens",
                &mut self.usage.cache_write_tokens,
            ),
        ];
        for (name, slot) in fields {
            if let Some(value) = read(name) {
                *slot = value;
            }
        }
    }
}

impl WireFormat for AnthropicFormat {
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<ProviderEvent>, ProviderError> {
        if event == "ping" {
            return Ok(Vec::new());
        }
        let value: Value = serde_json::from_str(data)
            .map_err(|error| protocol(format!("malformed `{event}` event data: {error}")))?;
        match str_field(&value, "type").unwrap_or(event) {
            "message_start" => Ok(self.message_start(&value)),
            "content_block_start" => self.block_start(&value),
            "content_block_delta" => self.block_delta(&value),
            "content_block_stop" => self.block_stop(&value),
            "message_delta" => {
                self.message_delta(&value);
                Ok(Vec::new())
            }
            "message_stop" => Ok(self.message_stop()),
            "error" => Err(stream_error(&value)),
            // `ping` and event types added after this adapter was written.
            _ => Ok(Vec::new()),
        }
    }
}

/// The state and events for a `content_block_start`'s `content_block`.
fn open_block(index: usize, block: &Value) -> Result<(Block, Vec<ProviderEvent>), ProviderError> {
    let opened = match str_field(block, "type").unwrap_or_default() {
        "text" => (
            Block::Text,
            vec![
                ProviderEvent::TextStart { index },
                ProviderEvent::TextDelta {
                    index,
                    delta: str_field(block, "text").unwrap_or_default().to_owned(),
                },
            ],
        ),
        "thinking" => (
            Block::Thinking {
                signature: str_field(block, "signature").unwrap_or_default().to_owned(),
            },
            vec![
                ProviderEvent::ThinkingStart { index },
                ProviderEvent::ThinkingDelta {
                    index,
                    delta: str_field(block, "thinking").unwrap_or_default().to_owned(),
                },
            ],
        ),
        "redacted_thinking" => {
            let data = string_field(block, "data")?;
            let signature = format!("{REDACTED_THINKING_PREFIX}{data}");
            (
                Block::Thinking { signature },
                vec![ProviderEvent::ThinkingStart { index }],
            )
        }
        "tool_use" => (Block::ToolUse, tool_use_start(index, block)?),
        _ => (Block::Other, Vec::new()),
    };
    let (state, events) = opened;
    Ok((state, events.into_iter().filter_map(non_empty).collect()))
}

fn tool_use_start(index: usize, block: &Value) -> Result<Vec<ProviderEvent>, ProviderError> {
    let mut events = vec![ProviderEvent::ToolCallStart {
        index,
        id: string_field(block, "id")?,
        name: string_field(block, "name")?,
    }];
    // The API starts with `"input": {}` and streams the arguments; a server
    // that sends them whole here gets them forwarded as one delta.
    if let Some(input) = block.get("input").and_then(Value::as_object)
        && !input.is_empty()
    {
        events.push(ProviderEvent::ToolCallDelta {
            index,
            delta: Value::Object(input.clone()).to_string(),
        });
    }
    Ok(events)
}

/// Drops deltas that carry nothing.
fn non_empty(event: ProviderEvent) -> Option<ProviderEvent> {
    match &event {
        ProviderEvent::TextDelta { delta, .. }
        | ProviderEvent::ThinkingDelta { delta, .. }
        | ProviderEvent::ToolCallDelta { delta, .. }
            if delta.is_empty() =>
        {
            None
        }
        _ => Some(event),
    }
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => StopReason::Length,
        "tool_use" => StopReason::ToolUse,
        // end_turn, stop_sequence, pause_turn, refusal and anything newer.
        _ => StopReason::Stop,
    }
}

fn stream_error(value: &Value) -> ProviderError {
    let error = value.get("error");
    let field = |name| error.and_then(|error| str_field(error, name));
    classify_stream_error(
        field("type").unwrap_or("error"),
        field("message").unwrap_or_default(),
    )
}

fn index(value: &Value) -> Result<usize, ProviderError> {
    value
        .get("index")
        .and_then(Value::as_u64)
        .and_then(|index| usize::try_from(index).ok())
        .ok_or_else(|| protocol("a content block event without a valid index"))
}

fn str_field<'a>(value: &'a Value, name: &str) -> Option<&'a str> {
    value.get(name).and_then(Value::as_str)
}

fn string_field(value: &Value, name: &str) -> Result<String, ProviderError> {
    str_field(value, name)
        .map(str::to_owned)
        .ok_or_else(|| protocol(format!("missing string field `{name}`")))
}

fn protocol(message: impl Into<String>) -> ProviderError {
    ProviderError::new(ProviderErrorKind::Protocol, message)
}
