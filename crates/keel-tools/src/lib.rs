//! Tools: what the model can do in a workspace.
//!
//! This crate defines the [`Tool`] trait, validates arguments against each
//! tool's JSON Schema ([`ToolRegistry`]), schedules a batch of calls
//! ([`scheduler`]), roots every path in a [`Workspace`], and provides the
//! built-in coding tools `read`, `write`, `edit` and `bash` (and `grep`,
//! `find`, `ls`).
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
//! Tools never see the permission policy: the kernel classifies and decides
//! before it calls [`Tool::execute`]. A tool only has to do what it is asked,
//! report failures as typed [`ToolError`]s and honour cancellation. This
//! crate holds no `unsafe` code: whatever a child process needs between fork
//! and exec is done by [`sandbox::Confinement::apply`].

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

mod beneath;
pub mod binding;
pub mod builtin;
pub mod changes;
pub mod evidence;
pub mod outputs;
pub mod receipt;
pub mod registry;
pub mod scheduler;
pub mod tool;
pub mod truncate;
pub mod untrusted;
pub mod workspace;

pub use keel_sandbox as sandbox;
pub use keel_sandbox::env;
pub use keel_shell as shell;

pub use receipt::{CallReceipt, Receipts};
pub use registry::{PreparedCall, ToolRegistry};
pub use tool::{
    Classification, ProgressSink, Tool, ToolContext, ToolError, ToolFuture, ToolOutput,
};
pub use workspace::{Workspace, WorkspaceError};
