//! The request body: a [`ModelRequest`] as Chat Completions JSON.
//!
//! The mapping is total: every message becomes valid chat messages, whatever
//! it holds. Two rules come from what the API refuses rather than from the
//! model context: `tool` messages must follow their assistant message without
//! a user message in between, so images from a run of tool results go into
//! one user message after the whole run; and an assistant message needs
//! either content or tool calls, so one with neither sends empty text.

use keel_protocol::{
    AssistantMessage, ContentBlock, ImageContent, Message, ToolCall, ToolResultMessage, ToolSpec,
    UserContent, UserMessage,
};
use serde_json::{Map, Value, json};

use super::ChatOptions;
use crate::ModelRequest;
use crate::http::body::{JsonBody, WireItems};

/// The JSON body for `POST /chat/completions`.
pub(super) fn body(request: ModelRequest, options: &ChatOptions) -> JsonBody<ChatItems> {
    let mut head = Map::new();
    head.insert("model".into(), json!(request.model));
    head.insert("stream".into(), json!(true));
    head.insert("stream_options".into(), json!({ "include_usage": true }));
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(tool).collect();
        head.insert("tools".into(), Value::Array(tools));
    }
    if let Some(limit) = request.max_output_tokens {
        head.insert(options.max_tokens_field.into(), json!(limit));
    }
    let items = ChatItems {
        options: *options,
        pending_images: Vec::new(),
    };
    JsonBody::new(request, head, "messages", items)
}

/// The chat messages: the system prompt, then the history.
#[derive(Clone)]
pub(super) struct ChatItems {
    options: ChatOptions,
    /// Images of the current run of tool results, sent once the run ends.
    pending_images: Vec<Value>,
}

impl WireItems for ChatItems {
    fn start(&mut self, request: &ModelRequest, out: &mut Vec<Value>) {
        if !request.system_prompt.is_empty() {
            out.push(json!({ "role": "system", "content": request.system_prompt }));
        }
    }

    fn step(&mut self, message: Option<&Message>, out: &mut Vec<Value>) {
        let Some(message) = message else {
            flush_images(out, &mut self.pending_images);
            return;
        };
        if !matches!(message, Message::ToolResult(_)) {
            flush_images(out, &mut self.pending_images);
        }
        match message {
            Message::User(user) => out.push(user_message(user)),
            Message::Assistant(assistant) => out.push(assistant_message(assistant, &self.options)),
            Message::ToolResult(result) => {
                out.push(tool_message(result));
                self.pending_images.extend(tool_result_images(result));
            }
        }
    }
}

fn flush_images(out: &mut Vec<Value>, pending: &mut Vec<Value>) {
    if !pending.is_empty() {
        let parts = std::mem::take(pending);
        out.push(json!({ "role": "user", "content": parts }));
    }
}

/// A user message: a plain string when text-only, content parts otherwise.
fn user_message(user: &UserMessage) -> Value {
    let has_image = user
        .content
        .iter()
        .any(|block| matches!(block, UserContent::Image(_)));
    if !has_image {
        let texts: Vec<&str> = user
            .content
            .iter()
            .filter_map(|block| match block {
                UserContent::Text { text } => Some(text.as_str()),
                UserContent::Image(_) => None,
            })
            .collect();
        return json!({ "role": "user", "content": texts.join("\n") });
    }
    let parts: Vec<Value> = user.content.iter().map(content_part).collect();
    json!({ "role": "user", "content": parts })
}

fn content_part(block: &UserContent) -> Value {
    match block {
        UserContent::Text { text } => json!({ "type": "text", "text": text }),
        UserContent::Image(image) => image_part(image),
    }
}

fn image_part(image: &ImageContent) -> Value {
    let url = format!("data:{};base64,{}", image.mime_type, image.data);
    json!({ "type": "image_url", "image_url": { "url": url } })
}

/// An assistant message: text (or `null` beside tool calls), tool calls, and
/// reasoning only when the options say the API takes it back.
fn assistant_message(assistant: &AssistantMessage, options: &ChatOptions) -> Value {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for block in &assistant.content {
        match block {
            ContentBlock::Text { text: part } => text.push_str(part),
            ContentBlock::Thinking { thinking, .. } => reasoning.push_str(thinking),
            ContentBlock::ToolCall(call) => calls.push(tool_call(call)),
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let content = if text.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    message.insert("content".into(), content);
    if options.send_reasoning_back && !reasoning.is_empty() {
        message.insert("reasoning_content".into(), Value::String(reasoning));
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(message)
}

/// A tool call; arguments the model sent as non-JSON text go back verbatim.
fn tool_call(call: &ToolCall) -> Value {
    let arguments = match &call.arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    json!({
        "id": call.id,
        "type": "function",
        "function": { "name": call.name, "arguments": arguments },
    })
}

/// A tool result's text as a `tool` message.
fn tool_message(result: &ToolResultMessage) -> Value {
    let mut text = result.text();
    let has_image = result
        .content
        .iter()
        .any(|block| matches!(block, UserContent::Image(_)));
    if text.is_empty() && has_image {
        text = "(the result is the image attached below)".into();
    }
    json!({ "role": "tool", "tool_call_id": result.call_id, "content": text })
}

/// The image parts of a tool result, introduced by a text part naming it.
fn tool_result_images(result: &ToolResultMessage) -> impl Iterator<Item = Value> + '_ {
    let images: Vec<Value> = result
        .content
        .iter()
        .filter_map(|block| match block {
            UserContent::Image(image) => Some(image_part(image)),
            UserContent::Text { .. } => None,
        })
        .collect();
    let intro = (!images.is_empty()).then(|| {
        let text = format!("Image(s) from the result of tool call {}:", result.call_id);
        json!({ "type": "text", "text": text })
    });
    intro.into_iter().chain(images)
}

fn tool(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    })
}
