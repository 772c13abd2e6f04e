//! The Anthropic Messages API adapter: `POST {base_url}/v1/messages`, streamed.
//!
//! Why a dedicated adapter: the Messages API is not OpenAI-shaped. It wants
//! a separate `system`, strictly alternating user/assistant turns, tool
//! results inside user turns, signed thinking blocks sent back verbatim and
//! explicit prompt-cache breakpoints; its stream addresses content blocks by
//! index with `content_block_start` / `_delta` / `_stop` events.
//!
//! Invariants:
//! - Requests alternate roles: consecutive messages of one role (tool results
//!   and any user text after them) are merged into one wire message.
//! - A thinking block with a signature goes back unchanged, signature and
//!   all; one without (another model's reasoning) goes back as plain text.
//!   Redacted thinking is kept as a thinking block with empty text whose
//!   signature is [`REDACTED_THINKING_PREFIX`] followed by the encrypted
//!   `data`, and goes back as a `redacted_thinking` block with that data.
//! - With caching on, three of the API's four cache breakpoints are used:
//!   the system block, the last tool, and the last block of the last user
//!   message, so each request reuses the previous request's prefix.
//! - Events carry Anthropic's own block indices; the stream ends with
//!   `usage` then `done` at `message_stop`, or with one classified `error`.
//! - Nothing the server sends can make the parser panic: malformed JSON or a
//!   delta for a block that never started is a `protocol` error.

mod request;
mod stream;

use reqwest::header::{ACCEPT, HeaderValue};
use tokio_util::sync::CancellationToken;

pub use stream::AnthropicFormat;

use crate::{Endpoint, ModelRequest, Provider, ProviderStream, http};

/// The `anthropic-version` header value this adapter speaks.
pub const API_VERSION: &str = "2023-06-01";

/// Prefix marking a thinking block's signature as redacted thinking: the
/// rest of the signature is the block's encrypted `data`.
pub const REDACTED_THINKING_PREFIX: &str = "redacted_thinking:";

/// Request options specific to the Messages API.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnthropicOptions {
    /// The output token limit sent when the request sets none (the API
    /// requires one). `ModelRequest::max_output_tokens` overrides it. With
    /// thinking on it must exceed `thinking_budget`.
    pub max_tokens: u32,
    /// When set, extended thinking is enabled with this token budget.
    pub thinking_budget: Option<u32>,
    /// Whether to place prompt-cache breakpoints.
    pub cache: bool,
}

impl Default for AnthropicOptions {
    fn default() -> Self {
        Self {
            max_tokens: 8192,
            thinking_budget: None,
            cache: true,
        }
    }
}

/// The Anthropic Messages API provider.
#[derive(Debug, Clone)]
pub struct Anthropic {
    endpoint: Endpoint,
    options: AnthropicOptions,
}

impl Anthropic {
    /// A provider sending requests to `endpoint` with `options`.
    pub fn new(endpoint: Endpoint, options: AnthropicOptions) -> Self {
        Self { endpoint, options }
    }

    fn http_request(&self, request: ModelRequest) -> reqwest::RequestBuilder {
        let mut builder = self
            .endpoint
            .post("/v1/messages")
            .header("anthropic-version", API_VERSION)
            .header(ACCEPT, "text/event-stream");
        // A key that is not a valid header value is not sent: the API then
        // answers 401, which classifies as `auth`.
        if let Some(Ok(mut key)) = self.endpoint.api_key().map(HeaderValue::from_str) {
            key.set_sensitive(true);
            builder = builder.header("x-api-key", key);
        }
        request::body(request, &self.options).attach(builder)
    }
}

impl Provider for Anthropic {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> ProviderStream {
        let builder = self.http_request(request);
        http::drive(
            builder,
            AnthropicFormat::new(),
            self.endpoint.timeouts,
            cancel,
        )
    }
}
