//! From a resolved configuration to a running adapter.
//!
//! [`connect`] builds the adapter for the provider's wire format, with the
//! provider's progress timeouts (`Resolved::waits`), and wraps it in
//! [`Priced`], which fills in the cost of each `usage` event from the
//! model's configured prices.

use std::sync::Arc;

use futures::StreamExt;
use keel_protocol::ProviderEvent;
use tokio_util::sync::CancellationToken;

use crate::anthropic::{Anthropic, AnthropicOptions};
use crate::config::{Api, ModelInfo, Resolved};
use crate::http::HttpTimeouts;
use crate::openai_chat::{ChatOptions, OpenAiChat};
use crate::openai_responses::{OpenAiResponses, ResponsesOptions};
use crate::{Endpoint, ModelRequest, Provider, ProviderStream};

/// The adapter for `resolved`, with costs on its usage events.
pub fn connect(resolved: &Resolved) -> Arc<dyn Provider> {
    let endpoint = Endpoint::new(
        resolved.name.clone(),
        resolved.base_url.clone(),
        resolved.api_key.clone(),
    )
    .with_timeouts(HttpTimeouts::from(resolved.waits));
    let adapter: Arc<dyn Provider> = match resolved.api {
        Api::OpenaiChat => Arc::new(OpenAiChat::new(
            endpoint,
            ChatOptions {
                reasoning_field: true,
                send_reasoning_back: false,
                ..ChatOptions::default()
            },
        )),
        Api::Anthropic => Arc::new(Anthropic::new(
            endpoint,
            AnthropicOptions {
                max_tokens: resolved.info.max_output.unwrap_or(8_192).min(32_000),
                ..AnthropicOptions::default()
            },
        )),
        Api::OpenaiResponses => {
            Arc::new(OpenAiResponses::new(endpoint, ResponsesOptions::default()))
        }
    };
    Arc::new(Priced {
        inner: adapter,
        info: resolved.info,
    })
}

/// A provider whose usage events carry their cost in USD.
pub struct Priced {
    inner: Arc<dyn Provider>,
    info: ModelInfo,
}

impl Priced {
    /// Wraps `inner`, pricing its usage with `info`.
    pub fn new(inner: Arc<dyn Provider>, info: ModelInfo) -> Self {
        Self { inner, info }
    }
}

impl Provider for Priced {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> ProviderStream {
        let info = self.info;
        self.inner
            .stream(request, cancel)
            .map(move |event| match event {
                ProviderEvent::Usage { mut usage } => {
                    usage.cost_usd = info.cost(&usage);
                    ProviderEvent::Usage { usage }
                }
                other => other,
            })
            .boxed()
    }
}
