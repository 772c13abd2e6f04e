//! The OpenAI Responses API adapter: `POST {base_url}/responses`, streamed.
//!
//! Why a separate adapter: the Responses API is OpenAI's stateful-by-default
//! successor to Chat Completions, and the only one that returns reasoning
//! (summaries plus an encrypted blob) for its reasoning models. Keel runs it
//! *statelessly*: every request carries `store: false` and the whole model
//! context as `input` items, so sessions, forks and retries stay Keel's.
//!
//! Invariants:
//! - Reasoning survives across requests only through the opaque
//!   `encrypted_content`, which this adapter stores as the thinking block's
//!   signature and sends back verbatim in a `reasoning` input item. A thinking
//!   block without a signature, or whose signature is not an OpenAI encrypted
//!   reasoning token (i.e. it came from another provider), is not sent: a
//!   foreign blob would make the API reject the whole request.
//! - Tool calls keep the model's `call_id` as their id, and tool results answer
//!   it in `function_call_output` items; images a tool returned follow the run
//!   of tool results as one user message (outputs must stay text).
//! - The stream parser ([`ResponsesFormat`]) numbers blocks in the order they
//!   appear, keyed by `output_index` (plus `content_index` for text parts),
//!   emits every `*_start` before its deltas and every `*_end` exactly once,
//!   and ends with `usage` + `done` or with a classified `error`. What the wire
//!   sends never panics it: malformed JSON is a `protocol` error.

mod request;
mod stream;
mod wire;

use tokio_util::sync::CancellationToken;

use crate::endpoint::Endpoint;
use crate::http;
use crate::{ModelRequest, Provider, ProviderStream};

pub use stream::ResponsesFormat;

/// Request options specific to the Responses API.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ResponsesOptions {
    /// Reasoning effort for reasoning models: `"low"`, `"medium"` or `"high"`.
    /// When set, the request asks for automatic reasoning summaries and for
    /// the encrypted reasoning content, so reasoning can be sent back on the
    /// next request; when unset, the model's default applies and no reasoning
    /// is requested.
    pub reasoning_effort: Option<String>,
}

/// A provider speaking the OpenAI Responses API over SSE.
#[derive(Debug, Clone)]
pub struct OpenAiResponses {
    endpoint: Endpoint,
    options: ResponsesOptions,
}

impl OpenAiResponses {
    /// An adapter for `endpoint` (base URL such as `https://api.openai.com/v1`).
    pub fn new(endpoint: Endpoint, options: ResponsesOptions) -> Self {
        Self { endpoint, options }
    }

    /// The JSON body this adapter sends for `request`.
    pub fn request_body(&self, request: &ModelRequest) -> serde_json::Value {
        request::body(request.clone(), &self.options).to_value()
    }
}

impl Provider for OpenAiResponses {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> ProviderStream {
        let mut builder = self
            .endpoint
            .post("/responses")
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(key) = self.endpoint.api_key() {
            builder = builder.bearer_auth(key);
        }
        let builder = request::body(request, &self.options).attach(builder);
        http::drive(
            builder,
            ResponsesFormat::new(),
            self.endpoint.timeouts,
            cancel,
        )
    }
}
