//! Building the Responses request body from a [`ModelRequest`].
//!
//! Messages become `input` items in order. Assistant messages split into one
//! item per reasoning block and tool call, with consecutive text blocks merged
//! into one assistant `message`; tool results become `function_call_output`
//! items, and the images they carry follow the run of results as one user
//! message.

use keel_protocol::{
    AssistantMessage, ContentBlock, ImageContent, Message, ToolCall, ToolResultMessage, ToolSpec,
    UserContent,
};
use serde_json::{Map, Value, json};

use super::ResponsesOptions;
use crate::ModelRequest;
use crate::http::body::{JsonBody, WireItems};

/// The prefix of every OpenAI encrypted reasoning token (a Fernet token:
/// version byte `0x80` then a zero-padded timestamp, in URL-safe base64).
const ENCRYPTED_REASONING_PREFIX: &str = "gAAAAA";

/// The whole JSON body for `request`.
pub(super) fn body(request: ModelRequest, options: &ResponsesOptions) -> JsonBody<InputItems> {
    let mut head = Map::new();
    head.insert("model".into(), json!(request.model));
    if !request.system_prompt.is_empty() {
        head.insert("instructions".into(), json!(request.system_prompt));
    }
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(tool_json).collect();
        head.insert("tools".into(), Value::Array(tools));
    }
    if let Some(max) = request.max_output_tokens {
        head.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(effort) = &options.reasoning_effort {
        head.insert(
            "reasoning".into(),
            json!({ "effort": effort, "summary": "auto" }),
        );
        head.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    head.insert("stream".into(), Value::Bool(true));
    head.insert("store".into(), Value::Bool(false));
    JsonBody::new(request, head, "input", InputItems::default())
}

/// The `tools` entry for one tool spec.
fn tool_json(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": false,
    })
}

/// The `input` items for the conversation, oldest first.
#[derive(Clone, Default)]
pub(super) struct InputItems {
    /// Images from the current run of tool results, sent after the run.
    tool_images: Vec<Value>,
}

impl WireItems for InputItems {
    fn step(&mut self, message: Option<&Message>, items: &mut Vec<Value>) {
        match message {
            Some(Message::User(user)) => {
                flush_tool_images(items, &mut self.tool_images);
                if let Some(item) = user_item(&user.content) {
                    items.push(item);
                }
            }
            Some(Message::Assistant(assistant)) => {
                flush_tool_images(items, &mut self.tool_images);
                push_assistant(items, assistant);
            }
            Some(Message::ToolResult(result)) => {
                items.push(tool_output_item(result));
                self.tool_images
                    .extend(result.content.iter().filter_map(image_part));
            }
            None => flush_tool_images(items, &mut self.tool_images),
        }
    }
}

/// A user `message` item, or `None` when there is nothing to send.
fn user_item(content: &[UserContent]) -> Option<Value> {
    let parts: Vec<Value> = content
        .iter()
        .filter_map(|block| match block {
            UserContent::Text { text } if text.is_empty() => None,
            UserContent::Text { text } => Some(json!({ "type": "input_text", "text": text })),
            UserContent::Image(image) => Some(input_image(image)),
        })
        .collect();
    (!parts.is_empty()).then(|| message_item("user", parts))
}

fn message_item(role: &str, parts: Vec<Value>) -> Value {
    json!({ "type": "message", "role": role, "content": parts })
}

fn image_part(block: &UserContent) -> Option<Value> {
    match block {
        UserContent::Image(image) => Some(input_image(image)),
        UserContent::Text { .. } => None,
    }
}

fn input_image(image: &ImageContent) -> Value {
    json!({
        "type": "input_image",
        "image_url": format!("data:{};base64,{}", image.mime_type, image.data),
    })
}

fn flush_tool_images(items: &mut Vec<Value>, images: &mut Vec<Value>) {
    if !images.is_empty() {
        items.push(message_item("user", std::mem::take(images)));
    }
}

/// Pushes an assistant message's blocks as items, in order.
fn push_assistant(items: &mut Vec<Value>, message: &AssistantMessage) {
    let mut texts = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } => {
                if !text.is_empty() {
                    texts.push(json!({ "type": "output_text", "text": text }));
                }
            }
            ContentBlock::Thinking {
                thinking,
                signature,
            } => {
                flush_texts(items, &mut texts);
                if let Some(item) = reasoning_item(thinking, signature.as_deref()) {
                    items.push(item);
                }
            }
            ContentBlock::ToolCall(call) => {
                flush_texts(items, &mut texts);
                items.push(function_call_item(call));
            }
        }
    }
    flush_texts(items, &mut texts);
}

fn flush_texts(items: &mut Vec<Value>, texts: &mut Vec<Value>) {
    if !texts.is_empty() {
        items.push(message_item("assistant", std::mem::take(texts)));
    }
}

/// A `reasoning` item, when the block carries this provider's encrypted
/// reasoning; any other thinking block is dropped.
fn reasoning_item(thinking: &str, signature: Option<&str>) -> Option<Value> {
    let encrypted = signature.filter(|signature| is_encrypted_reasoning(signature))?;
    let summary = if thinking.is_empty() {
        Vec::new()
    } else {
        vec![json!({ "type": "summary_text", "text": thinking })]
    };
    Some(json!({
        "type": "reasoning",
        "summary": summary,
        "encrypted_content": encrypted,
    }))
}

/// Whether a thinking signature is an OpenAI encrypted reasoning token (and
/// not, say, an Anthropic or Gemini signature from an earlier provider).
fn is_encrypted_reasoning(signature: &str) -> bool {
    signature.starts_with(ENCRYPTED_REASONING_PREFIX)
}

fn function_call_item(call: &ToolCall) -> Value {
    // Arguments that were not a JSON object are kept as the model's raw text.
    let arguments = match &call.arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    json!({
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
    })
}

fn tool_output_item(result: &ToolResultMessage) -> Value {
    json!({
        "type": "function_call_output",
        "call_id": result.call_id,
        "output": result.text(),
    })
}
