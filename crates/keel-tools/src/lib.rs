//! Tools: what the model can do in a workspace.
//!
//! The Tool API — [`Tool`], [`ToolContext`], [`ToolOutput`], [`ToolError`],
//! [`ProgressSink`], [`ToolRegistry`] with argument validation, and the
//! rooted [`Workspace`] — is the `keel-tool-api` crate, re-exported here
//! under its old paths ([`tool`], [`registry`], [`outputs`], [`evidence`],
//! [`workspace`]). A crate that only implements a tool (an extension, the
//! MCP client) depends on `keel-tool-api` and builds nothing of the sandbox.
//!
//! This crate implements the built-in coding tools on that API: `read`,
//! `write`, `edit` and `bash` (and `grep`, `find`, `ls`); schedules a batch
//! of calls ([`scheduler`]); keeps the run's workspace snapshots
//! ([`changes`]) and the command receipts ([`receipt`]).
//!
//! It is also a facade over two engine crates, re-exported under their old
//! paths so that users of the crate need to know only this one:
//!
//! - [`sandbox`] is `keel-sandbox`: the OS sandbox (Landlock, seccomp, the
//!   private temp dir, the machine probe); [`env`](mod@env) is its scrubbed child
//!   environment;
//! - [`shell`] is `keel-shell`: the static analysis of a `bash` command into
//!   an Operation Intent.
//!
//! Only `bash` is given the sandbox: the kernel puts a [`ShellExecution`]
//! (the sandbox, the namespace holders, the call's receipts) into each
//! call's [`ToolContext::extensions`], and `bash` takes it out.
//!
//! Tools never see the permission policy: the kernel classifies and decides
//! before it calls [`Tool::execute`]. A tool only has to do what it is asked,
//! report failures as typed [`ToolError`]s and honour cancellation. This
//! crate holds no `unsafe` code: whatever a child process needs between fork
//! and exec is done by [`sandbox::Confinement::apply`].
//!
//! # Layers
//!
//! The modules form layers; each uses only modules of the layers above it,
//! so there is no import cycle (`tests/layers.rs` reads every `crate::`,
//! `super::` and `self::` path in `src/` and fails on an edge that points
//! sideways or up). The Tool API and the engine crates are below them all.
//!
//! 0. `truncate` — the shared output budget; `scheduler` — a batch's
//!    schedule; `untrusted` — reading files a command could have planted;
//!    `binding` — what an "always" answer about a command binds to.
//! 1. `receipt` — the receipts of a session's commands; `changes` — the
//!    run's workspace snapshots, git code and quarantine.
//! 2. `execution` — what `bash` is given besides the Tool API's context.
//! 3. `builtin` — the built-in tools.

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

pub mod binding;
pub mod builtin;
pub mod changes;
pub mod execution;
pub mod receipt;
pub mod scheduler;
pub mod truncate;
pub mod untrusted;

/// Opening beneath a directory handle (the Tool API's `beneath`).
pub(crate) use keel_tool_api::beneath;
pub use keel_tool_api::{evidence, outputs, registry, tool, workspace};

pub use keel_sandbox as sandbox;
pub use keel_sandbox::env;
pub use keel_shell as shell;

pub use execution::ShellExecution;
pub use receipt::{CallReceipt, Receipts};
pub use registry::{PreparedCall, ToolRegistry};
pub use tool::{
    Classification, ProgressSink, Tool, ToolContext, ToolError, ToolFuture, ToolOutput,
};
pub use workspace::{Workspace, WorkspaceError};
