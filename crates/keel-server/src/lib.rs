//! Keel's host protocol over two transports: `keel rpc` (one JSON-RPC 2.0
//! object per line on stdio) and `keel serve` (one per WebSocket text
//! message, with `GET /health` and `GET /metrics` beside it).
//!
//! The transports only frame: every request goes to the broker
//! (`keel_host::broker`) through a [`Connection`](keel_host::broker::Connection),
//! whose answers and notifications they write back. What is here is
//! framing, limits and authentication:
//!
//! - [`stdio`]: lines in, lines out; stdin closed cancels this client's
//!   runs, answers nothing more and returns once they have settled.
//! - [`http`]: the WebSocket server, safe by default (loopback unless a
//!   token is configured, bearer tokens in the `Authorization` header only,
//!   compared in constant time, an `Origin` allowlist, size limits).
//! - [`auth`]: tokens by name; a token's name is its tenant.
//! - [`config`]: `[server]` settings and flags resolved into a
//!   [`ServeConfig`].
//!
//! Invariants:
//! - A token is never logged, echoed in an error, or kept: only its SHA-256
//!   digest is held, and a tenant is named by the token's name.
//! - Nothing a client sends is held without bound: a frame over the limit
//!   is refused with `message_too_large` (a stdio line is skipped without
//!   being read into memory whole), requests in flight per connection are
//!   bounded (reading waits), and notifications come from the broker's
//!   bounded buffer through a bounded writer queue.
//! - Every write to a client goes through one writer (task or loop), so
//!   frames never interleave.
//! - This crate reads no environment variable and no current directory;
//!   the host (keel-cli) passes them in.

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

pub mod auth;
pub mod config;
mod dispatch;
mod error;
mod frames;
pub mod http;
pub mod metrics;
pub mod stdio;

pub use auth::Tokens;
pub use config::{ServeConfig, ServeFlags, ServePlan};
pub use error::ServerError;

/// The largest JSON-RPC message a client may send by default (4 MiB).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Requests one connection may have in flight before reading waits.
pub const MAX_IN_FLIGHT: usize = 256;
