//! The kernel: `AgentKernel` builds runs, `AgentRun` is the host's handle.
//!
//! A host assembles an [`AgentKernel`] from a provider, tools, a session store,
//! a workspace and a permission policy, then calls
//! [`AgentKernel::create_run`] for each prompt. The returned [`AgentRun`]
//! streams [`keel_protocol::RunEvent`]s to exactly one consumer, takes control
//! calls (`steer`, `follow_up`, `cancel`, `resolve_permission`) and yields one
//! [`keel_protocol::RunResult`].
//!
//! Invariants: exactly one terminal event, always last; nothing of an assistant
//! message is persisted before its `message_end`; ToolResults go back to the
//! model in call order; every permission decision is recorded; every fact is
//! in the session before it is reported.

// Layers, lowest first; a module uses only modules above it in this list.
// Ids and the clock; pure data and rules.
mod accumulator;
mod context;
mod ids;
mod permission;
pub mod policy;
mod retry;
// The parts of a run, and the state its handle, loop and supervisor share.
mod emitter;
mod parts;
mod shared;
// The session writer, then the tool pipeline, then the turn loop.
mod session_writer;
mod tools;
mod turn_loop;
// The host's handle and supervisor, then the builder.
mod kernel;
mod run;

pub use kernel::{AgentKernel, AgentKernelBuilder, KernelError};
pub use parts::RunSpec;
pub use policy::{MatrixPolicy, PermissionPolicy, PolicyDecision};
pub use retry::RetryPolicy;
pub use run::{AgentRun, EventStream};
pub use shared::ControlError;
