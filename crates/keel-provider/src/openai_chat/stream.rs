//! The stream parser: Chat Completions chunks in, provider events out.
//!
//! Each SSE `data:` line is one JSON chunk (or the `[DONE]` marker). The
//! parser keeps the block grammar of [`ProviderEvent`]: block indices are
//! assigned in order of appearance; at most one text or thinking block is
//! open at a time, and tool-call blocks stay open until other content or the
//! finish, so parallel calls whose fragments interleave still land in their
//! own blocks. Every open block is closed before `done`. Usage is kept (the
//! last report wins, for servers that report it on every chunk) and emitted
//! just before `done`.

use keel_protocol::{ProviderError, ProviderErrorKind, ProviderEvent, StopReason, Usage};
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::errors::classify_stream_error;
use crate::http::WireFormat;
use crate::json::typed::JsonStr;
use crate::json::{quote, scalar_text, str_field};

/// The Chat Completions stream parser, an [`http::WireFormat`](WireFormat).
///
/// Public so that fuzzing and benchmarks can drive it through
/// [`crate::http::replay`] without a server.
#[derive(Debug)]
pub struct ChatFormat {
    reasoning: bool,
    started: bool,
    next_block: usize,
    open: Option<Open>,
    calls: Vec<Call>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

/// The open text or thinking block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text(usize),
    Thinking(usize),
}

/// One tool call, keyed by its wire `index`.
#[derive(Debug)]
struct Call {
    key: u64,
    id: String,
    name: String,
    /// Argument text received before the call's name, not yet emitted.
    pending: String,
    state: CallState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallState {
    /// Waiting for its name; no event emitted yet.
    Unnamed,
    /// Started at this block index and still open.
    Open(usize),
    /// Ended.
    Closed,
}

impl Default for ChatFormat {
    fn default() -> Self {
        Self::new()
    }
}

impl ChatFormat {
    /// A parser for one response; reasoning deltas become thinking blocks.
    pub fn new() -> Self {
        Self {
            reasoning: true,
            started: false,
            next_block: 0,
            open: None,
            calls: Vec::new(),
            finish_reason: None,
            usage: None,
        }
    }

    /// The same parser, ignoring `reasoning_content` / `reasoning` deltas
    /// when `reasoning` is false.
    pub fn with_reasoning(mut self, reasoning: bool) -> Self {
        self.reasoning = reasoning;
        self
    }

    fn on_chunk(&mut self, chunk: Chunk<'_>) -> Result<Vec<ProviderEvent>, ProviderError> {
        if let Some(error) = chunk.error {
            return Err(stream_error(&error));
        }
        let mut events = Vec::new();
        if !self.started {
            let model = chunk.model.map(|model| model.0.into_owned());
            let id = chunk.id.map(|id| id.0.into_owned());
            self.ensure_started(model, id, &mut events);
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.normalised());
        }
        let Some(choice) = chunk.choices.and_then(|choices| choices.0) else {
            return Ok(events);
        };
        if let Some(delta) = choice.delta {
            self.on_delta(delta, &mut events)?;
        }
        if let Some(reason) = choice.finish_reason {
            if reason == "error" {
                return Err(classify_stream_error(
                    "error",
                    "the provider ended the response with finish_reason \"error\"",
                ));
            }
            self.finish_reason = Some(reason);
            self.close_all(&mut events);
        }
        Ok(events)
    }

    fn ensure_started(
        &mut self,
        model: Option<String>,
        response_id: Option<String>,
        events: &mut Vec<ProviderEvent>,
    ) {
        if !self.started {
            self.started = true;
            events.push(ProviderEvent::Start { model, response_id });
        }
    }

    fn on_delta(
        &mut self,
        delta: Delta,
        events: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        if self.reasoning {
            let reasoning = text_of(delta.reasoning_content).or_else(|| text_of(delta.reasoning));
            if let Some(text) = reasoning {
                self.thinking_delta(text, events);
            }
        }
        if let Some(text) = text_of(delta.content) {
            self.text_delta(text, events);
        }
        for fragment in delta.tool_calls.unwrap_or_default() {
            self.tool_call_fragment(fragment, events)?;
        }
        Ok(())
    }

    fn thinking_delta(&mut self, delta: String, events: &mut Vec<ProviderEvent>) {
        let index = match self.open {
            Some(Open::Thinking(index)) => index,
            _ => {
                self.close_all(events);
                let index = self.allocate();
                self.open = Some(Open::Thinking(index));
                events.push(ProviderEvent::ThinkingStart { index });
                index
            }
        };
        events.push(ProviderEvent::ThinkingDelta { index, delta });
    }

    fn text_delta(&mut self, delta: String, events: &mut Vec<ProviderEvent>) {
        let index = match self.open {
            Some(Open::Text(index)) => index,
            _ => {
                self.close_all(events);
                let index = self.allocate();
                self.open = Some(Open::Text(index));
                events.push(ProviderEvent::TextStart { index });
                index
            }
        };
        events.push(ProviderEvent::TextDelta { index, delta });
    }

    fn tool_call_fragment(
        &mut self,
        fragment: ToolCallDelta,
        events: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        self.close_open_block(events);
        let position = self.call_position(&fragment);
        let function = fragment.function.unwrap_or_default();
        let Some(call) = self.calls.get_mut(position) else {
            return Ok(());
        };
        if call.state == CallState::Closed {
            return Err(ProviderError::new(
                ProviderErrorKind::Protocol,
                format!(
                    "tool call {} continued after other content had started",
                    call.key
                ),
            ));
        }
        if call.id.is_empty()
            && call.state == CallState::Unnamed
            && let Some(id) = fragment.id.filter(|id| !id.is_empty())
        {
            call.id = id;
        }
        if let Some(name) = function.name.filter(|name| !name.is_empty())
            && call.state == CallState::Unnamed
        {
            call.name = name;
            let index = self.next_block;
            self.next_block += 1;
            start_call(call, index, events);
        }
        let arguments = function.arguments.unwrap_or_default();
        match call.state {
            _ if arguments.is_empty() => {}
            CallState::Open(index) => events.push(ProviderEvent::ToolCallDelta {
                index,
                delta: arguments,
            }),
            CallState::Unnamed => call.pending.push_str(&arguments),
            CallState::Closed => {}
        }
        Ok(())
    }

    /// The position in `calls` of the call a fragment belongs to, added
    /// (unnamed) when the fragment is its first.
    fn call_position(&mut self, fragment: &ToolCallDelta) -> usize {
        let key = self.call_key(fragment);
        if let Some(position) = self.calls.iter().position(|call| call.key == key) {
            return position;
        }
        // A server that sends no id gets none invented here: an empty id
        // tells the kernel to assign one unique in the session (a per-turn
        // `call_0` would name a call of every turn alike).
        let id = fragment.id.clone().unwrap_or_default();
        self.calls.push(Call {
            key,
            id,
            name: String::new(),
            pending: String::new(),
            state: CallState::Unnamed,
        });
        self.calls.len() - 1
    }

    /// The key of the call a fragment belongs to: its `index`, or (for
    /// servers that omit it) its `id`, or else the latest call.
    fn call_key(&self, fragment: &ToolCallDelta) -> u64 {
        if let Some(index) = fragment.index {
            return index;
        }
        let fresh = self
            .calls
            .iter()
            .map(|call| call.key.saturating_add(1))
            .max()
            .unwrap_or(0);
        match fragment.id.as_deref().filter(|id| !id.is_empty()) {
            Some(id) => self
                .calls
                .iter()
                .find(|call| call.id == id)
                .map_or(fresh, |call| call.key),
            None => self.calls.last().map_or(fresh, |call| call.key),
        }
    }

    fn allocate(&mut self) -> usize {
        let index = self.next_block;
        self.next_block += 1;
        index
    }

    /// Ends the open text or thinking block, if any.
    fn close_open_block(&mut self, events: &mut Vec<ProviderEvent>) {
        match self.open.take() {
            Some(Open::Text(index)) => events.push(ProviderEvent::TextEnd { index }),
            Some(Open::Thinking(index)) => events.push(ProviderEvent::ThinkingEnd {
                index,
                signature: None,
            }),
            None => {}
        }
    }

    /// Ends every open block; a call that never got a name starts (with an
    /// empty name, so the kernel reports it) and ends here.
    fn close_all(&mut self, events: &mut Vec<ProviderEvent>) {
        self.close_open_block(events);
        for call in &mut self.calls {
            if call.state == CallState::Unnamed {
                let index = self.next_block;
                self.next_block += 1;
                start_call(call, index, events);
            }
            if let CallState::Open(index) = call.state {
                events.push(ProviderEvent::ToolCallEnd { index });
                call.state = CallState::Closed;
            }
        }
    }

    /// The end of the response: close blocks, report usage, `done`.
    fn finish(&mut self) -> Vec<ProviderEvent> {
        let mut events = Vec::new();
        self.ensure_started(None, None, &mut events);
        self.close_all(&mut events);
        if let Some(usage) = self.usage.take() {
            events.push(ProviderEvent::Usage { usage });
        }
        events.push(ProviderEvent::Done {
            stop_reason: self.stop_reason(),
        });
        events
    }

    fn stop_reason(&self) -> StopReason {
        match self.finish_reason.as_deref() {
            Some("length") => StopReason::Length,
            Some("tool_calls" | "function_call") => StopReason::ToolUse,
            Some("content_filter") => StopReason::Stop,
            _ if !self.calls.is_empty() => StopReason::ToolUse,
            _ => StopReason::Stop,
        }
    }
}

/// Emits a call's start and any argument text that arrived before its name.
fn start_call(call: &mut Call, index: usize, events: &mut Vec<ProviderEvent>) {
    call.state = CallState::Open(index);
    events.push(ProviderEvent::ToolCallStart {
        index,
        id: call.id.clone(),
        name: call.name.clone(),
    });
    if !call.pending.is_empty() {
        events.push(ProviderEvent::ToolCallDelta {
            index,
            delta: std::mem::take(&mut call.pending),
        });
    }
}

impl WireFormat for ChatFormat {
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<ProviderEvent>, ProviderError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            return Ok(self.finish());
        }
        match serde_json::from_str::<Chunk<'_>>(data) {
            Ok(chunk) => self.on_chunk(chunk),
            Err(_) if event == "error" => Err(classify_stream_error("error", data)),
            Err(error) => Err(ProviderError::new(
                ProviderErrorKind::Protocol,
                format!(
                    "the provider sent a malformed stream chunk ({error}): {}",
                    quote(data)
                ),
            )),
        }
    }

    /// Some local servers close the stream after the finishing chunk without
    /// `[DONE]`; that response is complete. Without a finish it was dropped.
    fn on_end(&mut self) -> Result<Vec<ProviderEvent>, ProviderError> {
        if self.finish_reason.is_some() {
            return Ok(self.finish());
        }
        Err(ProviderError::new(
            ProviderErrorKind::StreamDropped,
            "the stream ended before the response was complete",
        ))
    }
}

/// An `{"error": …}` chunk, object or bare string, classified.
fn stream_error(error: &Value) -> ProviderError {
    if let Some(message) = error.as_str() {
        return classify_stream_error("error", message);
    }
    let error_type = scalar_text(error, "type")
        .or_else(|| scalar_text(error, "code"))
        .unwrap_or_else(|| "error".into());
    let message = scalar_text(error, "message").unwrap_or_else(|| error.to_string());
    classify_stream_error(&error_type, &message)
}

/// Text from a delta field: a string, or the text parts of an array (some
/// servers send content parts); `None` when there is no text.
fn text_of(value: Option<Text>) -> Option<String> {
    value?.0.filter(|text| !text.is_empty())
}

/// A delta field that carries text, read leniently: a string, or an array
/// whose parts' `text` strings are joined; anything else is no text. It
/// accepts exactly the JSON a `serde_json::Value` would.
#[derive(Debug)]
struct Text(Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Text, E> {
        Ok(Text(Some(text.to_owned())))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Text, E> {
        Ok(Text(Some(text)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut parts: A) -> Result<Text, A::Error> {
        let mut text = String::new();
        while let Some(part) = parts.next_element::<Value>()? {
            if let Some(part) = str_field(&part, "text") {
                text.push_str(part);
            }
        }
        Ok(Text(Some(text)))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Text, A::Error> {
        Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Text(None))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<Text, E> {
        Ok(Text(None))
    }
}

/// The first element of an array; the others are checked the same way and
/// dropped, without collecting them.
#[derive(Debug)]
struct First<T>(Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for First<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FirstVisitor<T>(std::marker::PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for FirstVisitor<T> {
            type Value = First<T>;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a sequence")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<First<T>, A::Error> {
                let first = items.next_element()?;
                while items.next_element::<T>()?.is_some() {}
                Ok(First(first))
            }
        }

        deserializer.deserialize_seq(FirstVisitor(std::marker::PhantomData))
    }
}

/// One streamed chunk; unknown fields are ignored.
#[derive(Debug, Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    id: Option<JsonStr<'a>>,
    #[serde(borrow, default)]
    model: Option<JsonStr<'a>>,
    #[serde(default)]
    choices: Option<First<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

/// Fields that carry text are read leniently: servers differ in their types.
#[derive(Debug, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<Text>,
    #[serde(default)]
    reasoning_content: Option<Text>,
    #[serde(default)]
    reasoning: Option<Text>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    /// DeepSeek's name for cached prompt tokens.
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl WireUsage {
    /// Usage with cached tokens split out of the prompt count.
    fn normalised(&self) -> Usage {
        let prompt = self.prompt_tokens.unwrap_or(0);
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|details| details.cached_tokens)
            .or(self.prompt_cache_hit_tokens)
            .unwrap_or(0);
        {
            let mut usage = Usage::default();
            usage.input_tokens = prompt.saturating_sub(cached);
            usage.output_tokens = self.completion_tokens.unwrap_or(0);
            usage.cache_read_tokens = cached;
            usage.cache_write_tokens = 0;
            usage.cost_usd = None;
            usage
        }
    }
}
