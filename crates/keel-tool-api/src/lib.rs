//! The Tool API: what a tool is, what it is given and what it returns.
//!
//! Every tool implements [`Tool`] from this crate: keel-tools' built-ins,
//! an MCP client's tools, a host's own. The kernel validates a call's
//! arguments against the tool's JSON Schema ([`ToolRegistry`]), asks the
//! tool what the call would do ([`Tool::classification`]), lets the
//! permission policy decide, and only then runs it ([`Tool::execute`]) with
//! a [`ToolContext`]: the call's id, the rooted [`Workspace`] every path
//! resolves through, a cancellation token, a [`ProgressSink`] for streamed
//! output, the kernel's [`OutputStore`] of full outputs, and typed
//! [`Extensions`] that carry what only some tools understand (the OS
//! sandbox and command receipts that keel-tools' `bash` is given).
//!
//! Tools never see the permission policy: they do what they are asked
//! inside the rooted workspace, report failures as typed [`ToolError`]s and
//! honour cancellation.
//!
//! # Invariant: a small crate
//!
//! It depends on `keel-protocol` (the vocabulary), `jsonschema` (argument
//! validation), the sync part of `tokio` (the progress channel),
//! `tokio-util` (the cancellation token), `futures`, `serde_json`,
//! `thiserror`, `tracing`, `uuid` (output names) and `nix` (opening beneath
//! the workspace root with `openat2`) — and on nothing of the OS sandbox,
//! the shell analysis or the search engines (keel-sandbox, keel-shell,
//! Landlock, seccomp, grep, ignore, globset), so a crate that implements a
//! tool builds none of them (`tests/dependencies.rs` checks the manifest).
//! Those belong to keel-tools, which implements its built-ins on this API
//! and re-exports it under its old paths.
//!
//! Keel's own file operations open beneath the workspace root handle
//! ([`beneath`], [`Workspace::open_read`]/[`Workspace::write_file`]), never
//! check-then-open by name. This crate holds no `unsafe` code.

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

pub mod beneath;
pub mod binding;
pub mod env;
pub mod evidence;
pub mod extensions;
pub mod outputs;
pub mod paths;
pub mod registry;
pub mod tool;
pub mod workspace;

pub use env::HostEnv;
pub use extensions::Extensions;
pub use outputs::OutputStore;
pub use registry::{PreparedCall, RegistryError, ToolRegistry};
pub use tool::{
    Classification, ProgressSink, Tool, ToolContext, ToolError, ToolFuture, ToolOutput,
};
pub use workspace::{Workspace, WorkspaceError};
