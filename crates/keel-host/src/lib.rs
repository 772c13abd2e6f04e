//! Host assembly: from a resolved configuration to an [`keel_kernel::AgentKernel`].
//!
//! Every host — the `keel` CLI, a server, an editor adapter, an evaluator —
//! needs the same few things before it can drive the `AgentKernel` →
//! `AgentRun` seam: its defaults read from `config.toml` in layers
//! ([`settings`], with the narrowing [`project`] layer), a provider chosen
//! by name from the configuration, tools
//! chosen by name, the sandbox settings, a session store and the sessions in
//! it found by a short id, and the host-control messages (permission answers)
//! read from its user. This crate does exactly that, so that no host copies
//! it; hosts keep only their own argument parsing and rendering.
//!
//! Invariants:
//! - No printing and no terminal: errors are typed ([`HostError`], with a
//!   stable [`HostError::code`]) and rendering is the host's business.
//! - Nothing here decides authority: the permission mode comes from the host
//!   and is fixed per run by the kernel; this crate only describes what the
//!   kernel's policy does ([`modes`]).

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

pub mod answers;
mod assemble;
pub mod broker;
pub mod command_hooks;
mod error;
pub mod mcp;
pub mod modes;
mod overrides;
pub mod project;
pub mod prune;
pub mod replay;
pub mod server;
pub mod sessions;
pub mod settings;
pub mod stats;
pub mod telemetry;

pub use assemble::{
    Executors, HostConfig, HostOptions, ProviderChoice, host_sandbox, keel_config_dir,
    tools_by_name, user_config_path,
};
pub use error::HostError;
pub use settings::{Choices, Permissions, RunSetup, Settings, Sources};
