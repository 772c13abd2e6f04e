//! The Messages API request body for one [`ModelRequest`].
//!
//! Roles alternate on the wire: blocks of consecutive same-role messages are
//! merged into one message. Empty text blocks are left out (the API refuses
//! them), and so are messages left with no blocks.

use keel_protocol::{
    AssistantMessage, ContentBlock, ImageContent, Message, ToolCall, ToolResultMessage, ToolSpec,
    ToolStatus, UserContent,
};
use serde_json::{Map, Value, json};

use super::{AnthropicOptions, REDACTED_THINKING_PREFIX};
use crate::ModelRequest;
use crate::http::body::{JsonBody, WireItems};

/// The JSON body for `request`.
pub(super) fn body(request: ModelRequest, options: &AnthropicOptions) -> JsonBody<Turns> {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    let max_tokens = request.max_output_tokens.unwrap_or(options.max_tokens);
    body.insert("max_tokens".into(), json!(max_tokens));
    body.insert("stream".into(), json!(true));
    if !request.system_prompt.is_empty() {
        let mut block = json!({"type": "text", "text": request.system_prompt});
        if options.cache {
            mark_cached(&mut block);
        }
        body.insert("system".into(), json!([block]));
    }
    if !request.tools.is_empty() {
        body.insert("tools".into(), tools(&request.tools, options.cache));
    }
    if let Some(budget) = options.thinking_budget {
        let thinking = json!({"type": "enabled", "budget_tokens": budget});
        body.insert("thinking".into(), thinking);
    }
    let turns = Turns {
        cached: options.cache.then(|| last_user_message(&request)).flatten(),
        position: 0,
        turn: None,
    };
    JsonBody::new(request, body, "messages", turns)
}

/// Makes `block` a prompt-cache breakpoint.
fn mark_cached(block: &mut Value) {
    if let Some(object) = block.as_object_mut() {
        object.insert("cache_control".into(), json!({"type": "ephemeral"}));
    }
}

/// The wire messages: runs of same-role messages merged into one turn.
#[derive(Clone)]
pub(super) struct Turns {
    /// The position of the message whose last block is the cache breakpoint.
    cached: Option<usize>,
    /// The position of the next message.
    position: usize,
    /// The turn being assembled.
    turn: Option<Turn>,
}

/// One wire message being assembled.
#[derive(Clone)]
struct Turn {
    role: &'static str,
    content: Vec<Value>,
}

impl WireItems for Turns {
    fn step(&mut self, message: Option<&Message>, out: &mut Vec<Value>) {
        let Some(message) = message else {
            out.extend(self.turn.take().map(Turn::into_json));
            return;
        };
        let position = self.position;
        self.position += 1;
        let (role, mut content) = blocks(message);
        if content.is_empty() {
            return;
        }
        if self.cached == Some(position)
            && let Some(block) = content.last_mut()
        {
            mark_cached(block);
        }
        match &mut self.turn {
            Some(turn) if turn.role == role => turn.content.extend(content),
            _ => out.extend(
                self.turn
                    .replace(Turn { role, content })
                    .map(Turn::into_json),
            ),
        }
    }
}

impl Turn {
    fn into_json(self) -> Value {
        json!({"role": self.role, "content": self.content})
    }
}

/// A message's role on the wire and its blocks.
fn blocks(message: &Message) -> (&'static str, Vec<Value>) {
    match message {
        Message::User(user) => ("user", user_blocks(&user.content)),
        Message::Assistant(assistant) => ("assistant", assistant_blocks(assistant)),
        Message::ToolResult(result) => ("user", vec![tool_result(result)]),
    }
}

/// The position of the last message that sends user blocks: its last block
/// is the last block of the last user turn, the cache breakpoint that lets
/// the next request reuse this one's prefix.
fn last_user_message(request: &ModelRequest) -> Option<usize> {
    request.messages.iter().rposition(|message| {
        let (role, content) = blocks(message);
        role == "user" && !content.is_empty()
    })
}

fn user_blocks(content: &[UserContent]) -> Vec<Value> {
    content
        .iter()
        .filter_map(|block| match block {
            UserContent::Text { text } => text_block(text),
            UserContent::Image(image) => Some(image_block(image)),
        })
        .collect()
}

fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

fn image_block(image: &ImageContent) -> Value {
    json!({
        "type": "image",
        "source": {"type": "base64", "media_type": image.mime_type, "data": image.data},
    })
}

fn assistant_blocks(message: &AssistantMessage) -> Vec<Value> {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => text_block(text),
            ContentBlock::Thinking {
                thinking,
                signature,
            } => thinking_block(thinking, signature.as_deref()),
            ContentBlock::ToolCall(call) => Some(tool_use(call)),
        })
        .collect()
}

/// Signed thinking goes back unchanged; unsigned thinking came from another
/// model and goes back as text.
fn thinking_block(thinking: &str, signature: Option<&str>) -> Option<Value> {
    let Some(signature) = signature.filter(|signature| !signature.is_empty()) else {
        return text_block(thinking);
    };
    if let Some(data) = signature.strip_prefix(REDACTED_THINKING_PREFIX) {
        return Some(json!({"type": "redacted_thinking", "data": data}));
    }
    Some(json!({"type": "thinking", "thinking": thinking, "signature": signature}))
}

/// A tool call; arguments that are not an object (text the model sent that
/// did not parse) go as `{}`, since the API requires an object.
fn tool_use(call: &ToolCall) -> Value {
    let input = match &call.arguments {
        Value::Object(_) => call.arguments.clone(),
        _ => json!({}),
    };
    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
}

fn tool_result(result: &ToolResultMessage) -> Value {
    json!({
        "type": "tool_result",
        "tool_use_id": result.call_id,
        "content": user_blocks(&result.content),
        "is_error": result.status != ToolStatus::Success,
    })
}

fn tools(specs: &[ToolSpec], cache: bool) -> Value {
    let mut tools: Vec<Value> = specs
        .iter()
        .map(|spec| {
            json!({
                "name": spec.name,
                "description": spec.description,
                "input_schema": spec.parameters,
            })
        })
        .collect();
    if cache && let Some(last) = tools.last_mut() {
        mark_cached(last);
    }
    Value::Array(tools)
}
