//! Test helpers for providers (feature `test-util`): a local server that
//! speaks like a provider, and what tests do with the events an adapter
//! streams.
//!
//! Why public: this crate's tests, the adapter conformance suite and other
//! crates' tests (keel-cli runs `keel run` against a [`TestServer`]) share
//! one server and one way to read events, instead of a copy each. Nothing
//! here is compiled into a build without the feature, and nothing here
//! reaches beyond 127.0.0.1.

mod events;
mod server;

#[cfg(feature = "http")]
pub use events::replay_now;
pub use events::{assemble, collect, last_error, rechunk};
pub use server::{RecordedRequest, Reply, TestServer};
