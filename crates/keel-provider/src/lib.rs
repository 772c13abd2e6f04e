//! Providers: a model request in, a cancellable stream of provider events out.
//!
//! Every adapter implements [`Provider`]. The kernel relies only on the event
//! grammar documented on [`keel_protocol::ProviderEvent`]: a stream ends after
//! exactly one `done` or `error`; a stream that ends without either is treated
//! as dropped. Adapters never panic on what the wire sends them; they turn it
//! into a typed [`keel_protocol::ProviderError`].
//!
//! Adapters: the deterministic [`scripted::ScriptedProvider`], and HTTP
//! adapters built on `http::drive` (which owns timeouts, cancellation and
//! status and transport classification) with one `http::WireFormat` parser
//! per API. How failures are retried — which kinds, how often, within what
//! total budget — is [`retry`]; a base URL is checked before any request by
//! [`base_url`].
//!
//! Cargo features:
//! - `http` (default): the HTTP adapters (`openai_chat`, `anthropic`,
//!   `openai_responses`), their shared `http` driver, SSE decoder and
//!   `Endpoint`, and `connect`. Without it the crate builds neither reqwest
//!   nor rustls: a crate that needs only [`Provider`], [`ModelRequest`], the
//!   scripted provider, the catalog ([`config`]), [`retry`] and
//!   [`transform`] turns it off.
//! - `test-util`: `testing` (a local server that speaks like a provider)
//!   and, with `http`, `conformance` (the checks every HTTP adapter passes).

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

#[cfg(feature = "http")]
pub mod anthropic;
pub mod base_url;
#[cfg(feature = "http")]
mod blocks;
pub mod config;
#[cfg(all(feature = "test-util", feature = "http"))]
pub mod conformance;
#[cfg(feature = "http")]
pub mod connect;
#[cfg(feature = "http")]
pub mod endpoint;
pub mod errors;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "http")]
mod json;
#[cfg(feature = "http")]
pub mod openai_chat;
#[cfg(feature = "http")]
pub mod openai_responses;
pub mod replay;
pub mod retry;
pub mod scripted;
#[cfg(feature = "http")]
pub mod sse;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod transform;

use std::sync::Arc;

use futures::stream::BoxStream;
use keel_protocol::{Message, ProviderEvent, ToolSpec};
use tokio_util::sync::CancellationToken;

#[cfg(feature = "http")]
pub use endpoint::Endpoint;
pub use replay::{Answer, Recording, ReplayError, ReplayProvider};
pub use scripted::{Script, ScriptError, ScriptedProvider};

/// The stream of events a provider returns for one request.
pub type ProviderStream = BoxStream<'static, ProviderEvent>;

/// Exactly what one provider request contains: the model context.
///
/// The messages are shared, not owned: the kernel keeps each message of the
/// context branch once and a request holds the same [`Arc`]s, so building
/// a request for each turn copies pointers, never the history's text.
/// Adapters serialise straight from them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModelRequest {
    /// The model id.
    pub model: String,
    /// The system prompt.
    pub system_prompt: String,
    /// The active branch as messages, oldest first, shared with the kernel.
    pub messages: Vec<Arc<Message>>,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// The output token limit, when set.
    pub max_output_tokens: Option<u32>,
    /// What the request is for: a conversation turn (the default) or a
    /// compaction's summary. Adapters send both alike; a provider that
    /// answers from a record ([`replay`]) tells them apart by it.
    pub purpose: RequestPurpose,
}

/// What a [`ModelRequest`] is for, stated by the kernel that builds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RequestPurpose {
    /// A turn of the conversation: its answer becomes an assistant message.
    #[default]
    Turn,
    /// A compaction's summary request: its answer becomes a checkpoint's
    /// summary, not a message.
    Summary,
}

impl ModelRequest {
    /// A request to `model` with `system_prompt` and `messages`, no tools
    /// and the provider's own output limit.
    pub fn new(
        model: impl Into<String>,
        system_prompt: impl Into<String>,
        messages: Vec<Arc<Message>>,
    ) -> Self {
        Self {
            model: model.into(),
            system_prompt: system_prompt.into(),
            messages,
            tools: Vec::new(),
            max_output_tokens: None,
            purpose: RequestPurpose::Turn,
        }
    }
}

/// An adapter that streams a model's response.
pub trait Provider: Send + Sync {
    /// The provider's name, e.g. `scripted` or `deepseek`.
    fn name(&self) -> &str;

    /// Starts one request. The stream must end after one `done` or `error`
    /// event, and must end promptly (with a `cancelled` error) once `cancel`
    /// fires.
    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> ProviderStream;
}
