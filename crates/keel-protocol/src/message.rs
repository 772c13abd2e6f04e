//! Messages and content blocks: the conversation as the model sees it.
//!
//! A [`Message`] is user input, an assistant response (text, thinking and tool
//! calls) or the result of one tool call. Assistant messages are built by the
//! kernel from provider events and are immutable once `message_end` is emitted.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::{ToolResultError, ToolStatus};

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Input from the host's user.
    User(UserMessage),
    /// A model response.
    Assistant(AssistantMessage),
    /// The authoritative outcome of one tool call.
    ToolResult(ToolResultMessage),
}

/// Input from the user: text and images.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct UserMessage {
    /// The content blocks, in order.
    pub content: Vec<UserContent>,
}

impl UserMessage {
    /// A user message of `content` blocks.
    pub fn new(content: Vec<UserContent>) -> Self {
        Self { content }
    }

    /// A user message holding one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![UserContent::Text { text: text.into() }],
        }
    }

    /// The concatenated text blocks.
    pub fn plain_text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let UserContent::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }
}

/// A content block of user input or of a tool result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum UserContent {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image(ImageContent),
}

/// An image, base64-encoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ImageContent {
    /// MIME type, e.g. `image/png`.
    pub mime_type: String,
    /// Base64 of the image bytes.
    pub data: String,
}

impl ImageContent {
    /// An image of type `mime_type` whose bytes are `data` in base64.
    pub fn new(mime_type: impl Into<String>, data: impl Into<String>) -> Self {
        Self {
            mime_type: mime_type.into(),
            data: data.into(),
        }
    }
}

/// A model response, accumulated from provider events.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct AssistantMessage {
    /// Content blocks in the order the model produced them.
    pub content: Vec<ContentBlock>,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// Token usage of the request that produced this message.
    #[serde(default)]
    pub usage: Usage,
    /// The model that answered, when the provider said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The provider that answered (its configured name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The provider's id of the response, when it gave one: what a trace's
    /// `chat` span calls `gen_ai.response.id`, so a trace leads here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
}

impl AssistantMessage {
    /// The tool calls of this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolCall(call) => Some(call),
            _ => None,
        })
    }

    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }
}

/// One block of an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
// Deliberately exhaustive: every provider adapter must translate every block,
// so a new kind must fail to compile in each adapter rather than be dropped.
pub enum ContentBlock {
    /// Visible text.
    Text {
        /// The text.
        text: String,
    },
    /// Model reasoning.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// Provider signature that must be sent back unchanged, when present.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A request to run a tool.
    ToolCall(ToolCall),
}

/// A model's request to run a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolCall {
    /// The call's id, unique within its session; the ToolResult answers it.
    /// It is the provider's id unless the provider gave none or one the
    /// session already used: then Keel assigned it (see `wire_id`).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The decoded arguments. When the model sent text that is not a JSON
    /// object, this holds that text as a string and the call fails validation.
    pub arguments: Value,
    /// The id the provider gave this call, when Keel replaced it because
    /// the session already used it: requests send this id back to the
    /// provider (in the call and in its result), so the provider sees the
    /// ids it issued. `None` when `id` is the provider's own or the
    /// provider gave none (absent in sessions written before Keel kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_id: Option<String>,
}

impl ToolCall {
    /// A call with `id`, as the provider gave it (no `wire_id`).
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            wire_id: None,
        }
    }

    /// The id requests send to the provider for this call: `wire_id` when
    /// Keel replaced the provider's id, else `id`.
    pub fn wire_id(&self) -> &str {
        self.wire_id.as_deref().unwrap_or(&self.id)
    }
}

/// The authoritative outcome of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolResultMessage {
    /// The call this result answers.
    pub call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// Success, error or cancelled.
    pub status: ToolStatus,
    /// What the model sees.
    pub content: Vec<UserContent>,
    /// Typed error, when `status` is not success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolResultError>,
    /// Structured data for hosts (diffs, exit codes, paths); not sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl ToolResultMessage {
    /// The result of call `call_id` to `tool_name`, with no error and no details.
    pub fn new(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        status: ToolStatus,
        content: Vec<UserContent>,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            status,
            content,
            error: None,
            details: None,
        }
    }

    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let UserContent::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }
}

/// Why the model stopped producing output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model finished its answer.
    #[default]
    Stop,
    /// The output token limit was reached.
    Length,
    /// The model wants tool results.
    ToolUse,
}

/// Token usage of one provider request.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Usage {
    /// Input tokens not served from cache.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens (including reasoning).
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens read from the provider's cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// What the request cost in USD, when the model's prices are configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}
