//! The Messages API event stream, parsed into provider events.
//!
//! Each event's `data` is a JSON object whose `type` names the event (the
//! SSE `event:` name is the fallback). Content blocks are tracked by their
//! Anthropic index from `content_block_start` to `content_block_stop`, so a
//! delta is only accepted for an open block of the matching kind; thinking
//! signatures (`signature_delta`) are collected and handed out with
//! `thinking_end`. Usage arrives in `message_start` and `message_delta` and
//! is reported once, just before `done`, at `message_stop`.

use keel_protocol::{ProviderError, ProviderEvent, StopReason, Usage};
use serde_json::Value;

use super::REDACTED_THINKING_PREFIX;
use crate::errors::classify_stream_error;
use crate::http::WireFormat;
use crate::json::typed::{JsonStr, typed_object};
use crate::json::{missing_field, protocol, str_field, str_or_empty, string_field, u64_field};

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

type Blocks = crate::blocks::Blocks<usize, Block>;

/// The Messages API stream parser; one per response.
#[derive(Debug, Default)]
pub struct AnthropicFormat {
    started: bool,
    blocks: Blocks,
    usage: Usage,
    stop_reason: StopReason,
}

impl AnthropicFormat {
    /// A parser for one response.
    pub fn new() -> Self {
        Self::default()
    }

    /// `start`, unless it was already emitted.
    fn start(&mut self, model: Option<String>, response_id: Option<String>) -> Vec<ProviderEvent> {
        if std::mem::replace(&mut self.started, true) {
            Vec::new()
        } else {
            vec![ProviderEvent::Start { model, response_id }]
        }
    }

    fn message_start(&mut self, value: &Value) -> Vec<ProviderEvent> {
        let message = value.get("message");
        if let Some(usage) = message.and_then(|message| message.get("usage")) {
            self.read_usage(usage);
        }
        let model = message
            .and_then(|message| str_field(message, "model"))
            .map(str::to_owned);
        let id = message
            .and_then(|message| str_field(message, "id"))
            .map(str::to_owned);
        self.start(model, id)
    }

    fn block_start(&mut self, value: &Value) -> Result<Vec<ProviderEvent>, ProviderError> {
        let index = index(value)?;
        let block = value
            .get("content_block")
            .ok_or_else(|| protocol("content_block_start without a content_block"))?;
        if self.blocks.contains(index) {
            return Err(protocol(format!("content block {index} started twice")));
        }
        let mut out = self.start(None, None);
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
        let delta_type = str_or_empty(delta, "type");
        self.apply_delta(index, delta_type, |name| string_field(delta, name))
    }

    /// A `content_block_delta` of `delta_type` for block `index`; `field`
    /// reads one of the delta's string fields.
    fn apply_delta(
        &mut self,
        index: usize,
        delta_type: &str,
        field: impl FnOnce(&'static str) -> Result<String, ProviderError>,
    ) -> Result<Vec<ProviderEvent>, ProviderError> {
        let block = self.blocks.get_mut(index).ok_or_else(|| {
            protocol(format!(
                "a delta for content block {index}, which never started"
            ))
        })?;
        let event = match (block, delta_type) {
            (Block::Text, "text_delta") => ProviderEvent::TextDelta {
                index,
                delta: field("text")?,
            },
            (Block::Thinking { .. }, "thinking_delta") => ProviderEvent::ThinkingDelta {
                index,
                delta: field("thinking")?,
            },
            (Block::Thinking { signature }, "signature_delta") => {
                signature.push_str(&field("signature")?);
                return Ok(Vec::new());
            }
            (Block::ToolUse, "input_json_delta") => ProviderEvent::ToolCallDelta {
                index,
                delta: field("partial_json")?,
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
        Ok(non_empty(event).map_or_else(Vec::new, |event| vec![event]))
    }

    /// The hot path: a `content_block_delta` decoded into typed, borrowed
    /// fields. `None` when `data` is anything else, or anything the generic
    /// path would treat differently (missing or odd fields, duplicate keys,
    /// malformed JSON): that path then decides, errors included.
    fn fast_delta(
        &mut self,
        event: &str,
        data: &str,
    ) -> Option<Result<Vec<ProviderEvent>, ProviderError>> {
        let wire: WireDeltaEvent<'_> = serde_json::from_str(data).ok()?;
        if wire.kind.as_ref().map_or(event, JsonStr::as_str) != "content_block_delta" {
            return None;
        }
        let index = usize::try_from(wire.index?).ok()?;
        let WireDelta {
            kind,
            text,
            thinking,
            signature,
            partial_json,
        } = wire.delta?;
        let delta_type = kind.as_ref().map_or("", JsonStr::as_str);
        Some(self.apply_delta(index, delta_type, |name| {
            let value = match name {
                "text" => text,
                "thinking" => thinking,
                "signature" => signature,
                "partial_json" => partial_json,
                _ => None,
            };
            value
                .map(|value| value.0.into_owned())
                .ok_or_else(|| missing_field(name))
        }))
    }

    fn block_stop(&mut self, value: &Value) -> Result<Vec<ProviderEvent>, ProviderError> {
        let index = index(value)?;
        let block = match self.blocks.get_mut(index) {
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
        let mut out = self.start(None, None);
        out.push(ProviderEvent::Usage { usage: self.usage });
        out.push(ProviderEvent::Done {
            stop_reason: self.stop_reason,
        });
        out
    }

    /// Takes every usage figure present; later events override earlier ones.
    fn read_usage(&mut self, usage: &Value) {
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
            if let Some(value) = u64_field(usage, name) {
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
        // Servers name every event; `message` is the SSE default name.
        if matches!(event, "content_block_delta" | "message")
            && let Some(produced) = self.fast_delta(event, data)
        {
            return produced;
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
    let opened = match str_or_empty(block, "type") {
        "text" => (
            Block::Text,
            vec![
                ProviderEvent::TextStart { index },
                ProviderEvent::TextDelta {
                    index,
                    delta: str_or_empty(block, "text").to_owned(),
                },
            ],
        ),
        "thinking" => (
            Block::Thinking {
                signature: str_or_empty(block, "signature").to_owned(),
            },
            vec![
                ProviderEvent::ThinkingStart { index },
                ProviderEvent::ThinkingDelta {
                    index,
                    delta: str_or_empty(block, "thinking").to_owned(),
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
    u64_field(value, "index")
        .and_then(|index| usize::try_from(index).ok())
        .ok_or_else(|| protocol("a content block event without a valid index"))
}

/// A `content_block_delta` event's data, for the typed hot path. Every field
/// is optional so that an unusual event falls back to the generic path
/// instead of failing here.
#[derive(Default)]
struct WireDeltaEvent<'a> {
    kind: Option<JsonStr<'a>>,
    index: Option<u64>,
    delta: Option<WireDelta<'a>>,
}

typed_object!(WireDeltaEvent, "a content_block_delta object", {
    0: "type" => kind,
    1: "index" => index,
    2: "delta" => delta,
});

/// The `delta` of a `content_block_delta`.
#[derive(Default)]
struct WireDelta<'a> {
    kind: Option<JsonStr<'a>>,
    text: Option<JsonStr<'a>>,
    thinking: Option<JsonStr<'a>>,
    signature: Option<JsonStr<'a>>,
    partial_json: Option<JsonStr<'a>>,
}

typed_object!(WireDelta, "a delta object", {
    0: "type" => kind,
    1: "text" => text,
    2: "thinking" => thinking,
    3: "signature" => signature,
    4: "partial_json" => partial_json,
});

#[cfg(test)]
mod tests {
    use super::*;
    use keel_protocol::ProviderErrorKind;

    fn opened() -> AnthropicFormat {
        let mut format = AnthropicFormat::new();
        let start =
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#;
        assert!(format.on_event("content_block_start", start).is_ok());
        format
    }

    #[test]
    fn the_typed_path_matches_the_generic_one() {
        let text = |delta: &str| ProviderEvent::TextDelta {
            index: 0,
            delta: delta.into(),
        };
        let cases = [
            (
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\"b"}}"#,
                Ok(vec![text("a\"b")]),
            ),
            // No `type`: the event name decides.
            (
                r#"{"index":0,"delta":{"type":"text_delta","text":"x","extra":[1]}}"#,
                Ok(vec![text("x")]),
            ),
            // Duplicate keys: the last one wins, as in a `Value`.
            (
                r#"{"type":"content_block_delta","index":7,"index":0,"delta":{"type":"text_delta","text":"y"}}"#,
                Ok(vec![text("y")]),
            ),
            (
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta"}}"#,
                Err(missing_field("text")),
            ),
            (
                r#"["content_block_delta",0,{"type":"text_delta","text":"x"}]"#,
                Err(protocol("a content block event without a valid index")),
            ),
        ];
        for (data, expected) in cases {
            assert_eq!(
                opened().on_event("content_block_delta", data),
                expected,
                "{data}"
            );
        }
        let out_of_range = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"},"n":1e400}"#;
        let error = opened().on_event("content_block_delta", out_of_range);
        assert!(matches!(error, Err(error) if error.kind == ProviderErrorKind::Protocol));
    }
}
