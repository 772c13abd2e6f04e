//! The MCP client: configured MCP servers started, their tools offered as
//! Keel [`Tool`](keel_tool_api::Tool)s, and stopped again.
//!
//! A server is configured as a `[mcp_servers.NAME]` table
//! ([`McpServerConfig`]): a stdio server (`command`, a child process) or a
//! streamable HTTP server (`url`). [`McpServer::start`] connects within the
//! startup timeout (initialize and tools/list); [`McpServer::tools`] gives
//! one tool per listed tool, named `mcp__<server>__<tool>`, with the
//! server's description and input schema; [`McpServer::tool_infos`] says
//! which the server marked read-only and which the user trusts
//! (`auto_approve`). A call is `tools/call`, bounded by `tool_timeout_sec`
//! and cancelled with the run; its result maps onto Keel's content blocks
//! ([`content`], at most [`MAX_TEXT_BYTES`] of text). [`list`] starts every
//! configured server once to report its state and tools.
//!
//! # Invariant
//!
//! This crate never reads the process environment: the caller gives its
//! environment ([`HostEnv`](keel_tool_api::HostEnv)), a stdio server gets
//! only the essentials of it ([`ESSENTIAL_ENV_VARS`] and `PATH`), the
//! variables its `env_vars` names and its `env`; a bearer token is read from
//! it and sent only in the `Authorization` header, never logged, never in
//! an error or URL. A stdio server runs in a process group of its own with
//! its stderr logged (never inherited), and the whole group is killed when
//! its [`McpServer`] is shut down or dropped. The crate depends on
//! keel-tool-api and keel-protocol only, of Keel's crates (rank 2 in
//! docs/architecture.md). It holds no `unsafe` code and does not panic on
//! what a server sends.

#![warn(unreachable_pub)]

pub mod config;
pub mod content;
pub mod error;
pub mod list;
pub mod server;
pub mod tool;

pub use config::{ConfigError, McpServerConfig, validate_name};
pub use content::MAX_TEXT_BYTES;
pub use error::{McpError, Redacted};
pub use list::{McpServerListing, list};
pub use server::{ESSENTIAL_ENV_VARS, McpServer, McpServerInfo, McpServerState};
pub use tool::{McpToolInfo, TOOL_PREFIX, tool_name};
