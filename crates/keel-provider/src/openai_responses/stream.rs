//! Parsing the Responses SSE stream into provider events.
//!
//! Every SSE event's data is a JSON object whose `type` names the event. Output
//! items (`message`, `reasoning`, `function_call`) arrive one after another,
//! addressed by `output_index`; text parts of a message are further addressed
//! by `content_index`. Each (output, part) slot gets the next block index the
//! first time it is seen, so indices follow the order of appearance.
//!
//! The parser tolerates servers that skip the incremental events: an item
//! that arrives whole in `response.output_item.done` is emitted as a complete
//! start / delta / end triple. Blocks still open at the terminal event are
//! closed before `usage` and `done`, so the grammar always holds.

use std::borrow::Cow;

use keel_protocol::{ProviderError, ProviderEvent, StopReason};
use serde_json::Value;

use super::wire::{
    WireDelta, failed, is_delta_event, output_index, reasoning_text, stream_error, usage,
};
use crate::http::WireFormat;
use crate::json::typed::JsonStr;
use crate::json::{protocol, str_field, str_or_empty, u64_field};

/// Where a block lives in the response: its output item, and for message text
/// its content part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Slot {
    output: u64,
    part: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
    ToolCall,
}

/// One block seen so far.
#[derive(Debug)]
struct Block {
    index: usize,
    kind: Kind,
    /// Whether any delta was emitted for it.
    has_delta: bool,
    /// The last reasoning summary / content part a delta came from.
    last_part: Option<u64>,
    ended: bool,
}

type Blocks = crate::blocks::Blocks<Slot, Block>;

/// The Responses API stream parser: one per request.
#[derive(Debug, Default)]
pub struct ResponsesFormat {
    started: bool,
    blocks: Blocks,
    next_index: usize,
    saw_tool_call: bool,
}

impl ResponsesFormat {
    /// A parser for one new response stream.
    pub fn new() -> Self {
        Self::default()
    }
}

impl WireFormat for ResponsesFormat {
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<ProviderEvent>, ProviderError> {
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(Vec::new());
        }
        if is_delta_event(event)
            && let Some(produced) = self.fast_delta(event, data)
        {
            return produced;
        }
        let value: Value = serde_json::from_str(data).map_err(|error| {
            protocol(format!(
                "malformed JSON in a Responses stream event: {error}"
            ))
        })?;
        let kind = str_field(&value, "type").unwrap_or(event);
        let mut out = Vec::new();
        self.dispatch(kind, &value, &mut out)?;
        Ok(out)
    }
}

impl ResponsesFormat {
    /// The hot path: a text, reasoning or argument delta decoded into typed,
    /// borrowed fields. `None` when `data` is any other event, or anything
    /// the generic path would treat differently (missing or odd fields,
    /// duplicate keys, malformed JSON): that path then decides, errors
    /// included.
    fn fast_delta(
        &mut self,
        event: &str,
        data: &str,
    ) -> Option<Result<Vec<ProviderEvent>, ProviderError>> {
        let wire: WireDelta<'_> = serde_json::from_str(data).ok()?;
        let kind = wire.kind.as_ref().map_or(event, JsonStr::as_str);
        let output = wire.output_index?;
        let delta = wire.delta.map_or(Cow::Borrowed(""), |delta| delta.0);
        let mut out = Vec::with_capacity(1);
        let done = match kind {
            "response.function_call_arguments.delta" => {
                let slot = Slot { output, part: None };
                self.plain_delta(slot, Kind::ToolCall, delta, &mut out)
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let slot = Slot { output, part: None };
                let part = wire.summary_index.unwrap_or(wire.content_index);
                self.thinking_delta_at(slot, part, delta, &mut out)
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let part = Some(wire.content_index.unwrap_or(0));
                self.plain_delta(Slot { output, part }, Kind::Text, delta, &mut out)
            }
            _ => return None,
        };
        Some(done.map(|()| out))
    }

    fn dispatch(
        &mut self,
        kind: &str,
        value: &Value,
        out: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        match kind {
            "response.created" => {
                let model = value.pointer("/response/model").and_then(Value::as_str);
                let id = value.pointer("/response/id").and_then(Value::as_str);
                self.start_with(model, id, out);
            }
            "response.output_item.added" => self.item_added(value, out)?,
            "response.output_text.delta" | "response.refusal.delta" => {
                self.text_delta(value, out)?
            }
            "response.output_text.done" | "response.refusal.done" => self.text_done(value, out)?,
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.thinking_delta(value, out)?
            }
            "response.function_call_arguments.delta" => self.arguments_delta(value, out)?,
            "response.output_item.done" => self.item_done(value, out)?,
            "response.completed" => self.finish(value, None, out),
            "response.incomplete" => self.finish(value, Some(StopReason::Length), out),
            "response.failed" => return Err(failed(value)),
            "error" => return Err(stream_error(value)),
            _ => {}
        }
        Ok(())
    }

    /// Emits `start` once, before anything else.
    fn start(&mut self, model: Option<&str>, out: &mut Vec<ProviderEvent>) {
        self.start_with(model, None, out);
    }

    /// [`Self::start`] with the response's id, which `response.created` gives.
    fn start_with(&mut self, model: Option<&str>, id: Option<&str>, out: &mut Vec<ProviderEvent>) {
        if !self.started {
            self.started = true;
            out.push(ProviderEvent::Start {
                model: model.map(str::to_owned),
                response_id: id.map(str::to_owned),
            });
        }
    }

    /// Opens a block at `slot`; returns its index.
    fn open(&mut self, slot: Slot, kind: Kind, out: &mut Vec<ProviderEvent>) -> usize {
        self.start(None, out);
        let index = self.next_index;
        self.next_index += 1;
        self.blocks.insert(
            slot,
            Block {
                index,
                kind,
                has_delta: false,
                last_part: None,
                ended: false,
            },
        );
        index
    }

    fn open_tool_call(&mut self, slot: Slot, item: &Value, out: &mut Vec<ProviderEvent>) {
        let index = self.open(slot, Kind::ToolCall, out);
        self.saw_tool_call = true;
        out.push(ProviderEvent::ToolCallStart {
            index,
            id: str_or_empty(item, "call_id").to_owned(),
            name: str_or_empty(item, "name").to_owned(),
        });
    }

    fn open_thinking(&mut self, slot: Slot, out: &mut Vec<ProviderEvent>) {
        let index = self.open(slot, Kind::Thinking, out);
        out.push(ProviderEvent::ThinkingStart { index });
    }

    fn open_text(&mut self, slot: Slot, out: &mut Vec<ProviderEvent>) {
        let index = self.open(slot, Kind::Text, out);
        out.push(ProviderEvent::TextStart { index });
    }

    fn item_added(
        &mut self,
        value: &Value,
        out: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        let slot = item_slot(value)?;
        let item = value.get("item").unwrap_or(&Value::Null);
        if self.blocks.contains(slot) {
            return Err(protocol(format!(
                "output item {} was added twice",
                slot.output
            )));
        }
        match str_or_empty(item, "type") {
            "reasoning" => self.open_thinking(slot, out),
            "function_call" => self.open_tool_call(slot, item, out),
            _ => self.start(None, out),
        }
        Ok(())
    }

    /// Applies a delta of `kind` to the open block at `slot`; text and
    /// thinking blocks are opened on their first delta when no item
    /// announced them.
    fn delta_block(
        &mut self,
        slot: Slot,
        kind: Kind,
        out: &mut Vec<ProviderEvent>,
        apply: impl FnOnce(&mut Block, &mut Vec<ProviderEvent>),
    ) -> Result<(), ProviderError> {
        // One lookup for the usual case, a block that is already open.
        if let Some(block) = self.blocks.get_mut(slot) {
            check_delta(block, slot, kind)?;
            apply(block, out);
            return Ok(());
        }
        match kind {
            Kind::Text => self.open_text(slot, out),
            Kind::Thinking => self.open_thinking(slot, out),
            Kind::ToolCall => {
                return Err(protocol(format!(
                    "function call arguments for output item {} before the item",
                    slot.output
                )));
            }
        }
        let block = self
            .blocks
            .get_mut(slot)
            .ok_or_else(|| protocol("a content block vanished"))?;
        check_delta(block, slot, kind)?;
        apply(block, out);
        Ok(())
    }

    fn text_delta(
        &mut self,
        value: &Value,
        out: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        let slot = part_slot(value)?;
        self.plain_delta(slot, Kind::Text, str_or_empty(value, "delta").into(), out)
    }

    fn arguments_delta(
        &mut self,
        value: &Value,
        out: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        let slot = item_slot(value)?;
        self.plain_delta(
            slot,
            Kind::ToolCall,
            str_or_empty(value, "delta").into(),
            out,
        )
    }

    /// A text or argument delta: appended as is.
    fn plain_delta(
        &mut self,
        slot: Slot,
        kind: Kind,
        delta: Cow<'_, str>,
        out: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        self.delta_block(slot, kind, out, |block, out| {
            if !delta.is_empty() {
                block.has_delta = true;
                out.push(delta_event(kind, block.index, delta.into_owned()));
            }
        })
    }

    fn thinking_delta(
        &mut self,
        value: &Value,
        out: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        let slot = item_slot(value)?;
        let part = value
            .get("summary_index")
            .or_else(|| value.get("content_index"))
            .and_then(Value::as_u64);
        let delta = str_or_empty(value, "delta");
        self.thinking_delta_at(slot, part, delta.into(), out)
    }

    /// A reasoning delta from content or summary part `part`.
    fn thinking_delta_at(
        &mut self,
        slot: Slot,
        part: Option<u64>,
        delta: Cow<'_, str>,
        out: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        self.delta_block(slot, Kind::Thinking, out, |block, out| {
            if delta.is_empty() {
                return;
            }
            // Summary parts are separate paragraphs of one thinking block.
            if block.has_delta && part.is_some() && block.last_part != part {
                out.push(delta_event(Kind::Thinking, block.index, "\n\n".to_owned()));
            }
            block.has_delta = true;
            block.last_part = part;
            out.push(delta_event(Kind::Thinking, block.index, delta.into_owned()));
        })
    }

    fn text_done(
        &mut self,
        value: &Value,
        out: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        let slot = part_slot(value)?;
        let text = value
            .get("text")
            .or_else(|| value.get("refusal"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.finish_text(slot, text, out);
        Ok(())
    }

    /// Ends the text block at `slot`; a part that had no deltas is emitted
    /// whole from its final `text`.
    fn finish_text(&mut self, slot: Slot, text: &str, out: &mut Vec<ProviderEvent>) {
        if !self.blocks.contains(slot) {
            if text.is_empty() {
                return;
            }
            self.open_text(slot, out);
        }
        self.end_block(slot, Some(text), None, out);
    }

    fn item_done(
        &mut self,
        value: &Value,
        out: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        let slot = item_slot(value)?;
        let item = value.get("item").unwrap_or(&Value::Null);
        match str_or_empty(item, "type") {
            "message" => self.message_done(slot.output, item, out),
            "reasoning" => {
                if !self.blocks.contains(slot) {
                    self.open_thinking(slot, out);
                }
                let signature = str_field(item, "encrypted_content");
                self.end_block(slot, Some(&reasoning_text(item)), signature, out);
            }
            "function_call" => {
                if !self.blocks.contains(slot) {
                    self.open_tool_call(slot, item, out);
                }
                self.end_block(slot, Some(str_or_empty(item, "arguments")), None, out);
            }
            _ => {}
        }
        Ok(())
    }

    fn message_done(&mut self, output: u64, item: &Value, out: &mut Vec<ProviderEvent>) {
        let parts = item.get("content").and_then(Value::as_array);
        for (part, content) in parts.into_iter().flatten().enumerate() {
            let text = match str_or_empty(content, "type") {
                "output_text" => str_or_empty(content, "text"),
                "refusal" => str_or_empty(content, "refusal"),
                _ => continue,
            };
            let slot = Slot {
                output,
                part: Some(part as u64),
            };
            self.finish_text(slot, text, out);
        }
    }

    /// Emits the end of the block at `slot` once; `whole` is the block's full
    /// content, emitted as one delta when no delta was streamed.
    fn end_block(
        &mut self,
        slot: Slot,
        whole: Option<&str>,
        signature: Option<&str>,
        out: &mut Vec<ProviderEvent>,
    ) {
        let Some(block) = self.blocks.get_mut(slot) else {
            return;
        };
        if block.ended {
            return;
        }
        block.ended = true;
        let index = block.index;
        let missing = whole.filter(|whole| !block.has_delta && !whole.is_empty());
        if let Some(delta) = missing {
            out.push(delta_event(block.kind, index, delta.to_owned()));
        }
        out.push(end_event(block.kind, index, signature));
    }

    /// `usage` and `done` (after closing any block left open).
    fn finish(&mut self, value: &Value, forced: Option<StopReason>, out: &mut Vec<ProviderEvent>) {
        self.start(None, out);
        let mut open: Vec<&mut Block> = self.blocks.iter_mut().filter(|b| !b.ended).collect();
        open.sort_by_key(|block| block.index);
        for block in open {
            block.ended = true;
            out.push(end_event(block.kind, block.index, None));
        }
        let response = value.get("response").unwrap_or(&Value::Null);
        if let Some(usage) = usage(response) {
            out.push(ProviderEvent::Usage { usage });
        }
        let stop_reason = forced.unwrap_or_else(|| self.stop_reason(response));
        out.push(ProviderEvent::Done { stop_reason });
    }

    fn stop_reason(&self, response: &Value) -> StopReason {
        let incomplete = response
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str);
        if self.saw_tool_call {
            StopReason::ToolUse
        } else if incomplete == Some("max_output_tokens") {
            StopReason::Length
        } else {
            StopReason::Stop
        }
    }
}

/// Whether a delta of `kind` may go to `block`.
fn check_delta(block: &Block, slot: Slot, kind: Kind) -> Result<(), ProviderError> {
    if block.kind != kind || block.ended {
        return Err(protocol(format!(
            "unexpected delta for output item {}",
            slot.output
        )));
    }
    Ok(())
}

fn delta_event(kind: Kind, index: usize, delta: String) -> ProviderEvent {
    match kind {
        Kind::Text => ProviderEvent::TextDelta { index, delta },
        Kind::Thinking => ProviderEvent::ThinkingDelta { index, delta },
        Kind::ToolCall => ProviderEvent::ToolCallDelta { index, delta },
    }
}

fn end_event(kind: Kind, index: usize, signature: Option<&str>) -> ProviderEvent {
    match kind {
        Kind::Text => ProviderEvent::TextEnd { index },
        Kind::Thinking => ProviderEvent::ThinkingEnd {
            index,
            signature: signature.map(str::to_owned),
        },
        Kind::ToolCall => ProviderEvent::ToolCallEnd { index },
    }
}

/// The slot of an output item (`output_index`).
fn item_slot(value: &Value) -> Result<Slot, ProviderError> {
    Ok(Slot {
        output: output_index(value)?,
        part: None,
    })
}

/// The slot of a message content part (`output_index`, `content_index`).
fn part_slot(value: &Value) -> Result<Slot, ProviderError> {
    Ok(Slot {
        output: output_index(value)?,
        part: Some(u64_field(value, "content_index").unwrap_or(0)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_protocol::ProviderErrorKind;

    const EVENT: &str = "response.output_text.delta";

    #[test]
    fn the_typed_path_matches_the_generic_one() {
        let opened = [
            ProviderEvent::Start {
                model: None,
                response_id: None,
            },
            ProviderEvent::TextStart { index: 0 },
        ];
        let text = |delta: &str| ProviderEvent::TextDelta {
            index: 0,
            delta: delta.into(),
        };
        let cases = [
            (
                r#"{"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":"a\nb"}"#,
                Ok(vec![opened[0].clone(), opened[1].clone(), text("a\nb")]),
            ),
            // Duplicate keys: the last one wins, as in a `Value`.
            (
                r#"{"type":"response.output_text.delta","output_index":3,"output_index":0,"delta":"x"}"#,
                Ok(vec![opened[0].clone(), opened[1].clone(), text("x")]),
            ),
            (
                r#"{"type":"response.output_text.delta","delta":"x"}"#,
                Err(protocol(
                    "a response.output_text.delta event without an output_index",
                )),
            ),
        ];
        for (data, expected) in cases {
            assert_eq!(
                ResponsesFormat::new().on_event(EVENT, data),
                expected,
                "{data}"
            );
        }
        for data in [
            r#"["response.output_text.delta",0,0,"x"]"#,
            r#"{"type":"response.output_text.delta","output_index":0,"delta":"x","n":1e400}"#,
        ] {
            let error = ResponsesFormat::new().on_event(EVENT, data);
            assert!(matches!(error, Err(error) if error.kind == ProviderErrorKind::Protocol));
        }
    }

    #[test]
    fn a_null_summary_index_is_not_a_content_index() {
        let mut format = ResponsesFormat::new();
        let delta = |summary: &str, content: u64| {
            format!(
                r#"{{"type":"response.reasoning_summary_text.delta","output_index":0,{summary}"content_index":{content},"delta":"t"}}"#
            )
        };
        let first = format
            .on_event("message", &delta("", 0))
            .map(|out| out.len());
        assert_eq!(first, Ok(3));
        // `summary_index: null` means no part, so no paragraph break.
        let second = format.on_event("message", &delta(r#""summary_index":null,"#, 1));
        let second = second.map(|out| out.len());
        assert_eq!(second, Ok(1));
    }
}
