//! Tools: what the model can do in a workspace.
//!
//! This crate defines the [`Tool`] trait, validates arguments against each
//! tool's JSON Schema ([`ToolRegistry`]), schedules a batch of calls
//! ([`scheduler`]), roots every path in a [`Workspace`], and provides the
//! built-in coding tools `read`, `write`, `edit` and `bash`.
//!
//! Tools never see the permission policy: the kernel classifies and decides
//! before it calls [`Tool::execute`]. A tool only has to do what it is asked,
//! report failures as typed [`ToolError`]s and honour cancellation.

pub mod builtin;
pub mod changes;
pub mod env;
pub mod outputs;
pub mod registry;
pub mod sandbox;
pub mod scheduler;
pub mod shell;
pub mod tool;
pub mod truncate;
pub mod workspace;

pub use registry::{PreparedCall, ToolRegistry};
pub use tool::{ProgressSink, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
pub use workspace::{Workspace, WorkspaceError};
