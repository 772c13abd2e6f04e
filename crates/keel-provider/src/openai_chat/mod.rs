//! The OpenAI-compatible Chat Completions adapter: DeepSeek, vLLM, llama.cpp
//! server, Ollama, OpenRouter and OpenAI itself.
//!
//! Why one adapter: these servers share `POST {base_url}/chat/completions`
//! with `stream: true`, and differ only in small ways that [`ChatOptions`]
//! names (the reasoning field, whether reasoning may be sent back, the name
//! of the output limit). The request is built in `request`, the stream is
//! parsed by [`ChatFormat`], and [`crate::http::drive`] owns timeouts,
//! cancellation and status classification.
//!
//! Invariants: the body always asks for `stream_options.include_usage`, so
//! usage arrives in a last chunk before `[DONE]`; reasoning is never sent
//! back unless [`ChatOptions::send_reasoning_back`] says the API accepts it
//! (DeepSeek answers 400 to `reasoning_content` in input messages); the
//! parser never panics on what the wire sends, and a stream always ends with
//! exactly one `done` or `error`.

mod request;
mod stream;

pub use stream::ChatFormat;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::http;
use crate::{Endpoint, ModelRequest, Provider, ProviderStream};

/// How one server deviates from the common Chat Completions dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChatOptions {
    /// Parse DeepSeek-style `reasoning_content` (and OpenRouter's
    /// `reasoning`) deltas into thinking blocks. Default: true.
    pub reasoning_field: bool,
    /// Send earlier thinking back as the assistant message's
    /// `reasoning_content`. Default: false; DeepSeek refuses it.
    pub send_reasoning_back: bool,
    /// The body field for the output limit: `max_tokens` (default) or
    /// `max_completion_tokens`.
    pub max_tokens_field: &'static str,
}

impl Default for ChatOptions {
    fn default() -> Self {
        Self {
            reasoning_field: true,
            send_reasoning_back: false,
            max_tokens_field: "max_tokens",
        }
    }
}

/// A provider speaking the Chat Completions API at one endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiChat {
    endpoint: Endpoint,
    options: ChatOptions,
}

impl OpenAiChat {
    /// An adapter for `endpoint` with the server's `options`.
    pub fn new(endpoint: Endpoint, options: ChatOptions) -> Self {
        Self { endpoint, options }
    }

    /// The JSON body this adapter sends for `request`.
    pub fn request_body(&self, request: &ModelRequest) -> Value {
        request::body(request.clone(), &self.options).to_value()
    }
}

impl Provider for OpenAiChat {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> ProviderStream {
        let mut builder = self.endpoint.post("/chat/completions");
        if let Some(key) = self.endpoint.api_key() {
            builder = builder.bearer_auth(key);
        }
        let builder = request::body(request, &self.options).attach(builder);
        let format = ChatFormat::new().with_reasoning(self.options.reasoning_field);
        http::drive(builder, format, self.endpoint.timeouts, cancel)
    }
}
