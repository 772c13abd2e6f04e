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
//!
//! # Layers
//!
//! The modules form layers; each uses only modules of the layers above it,
//! so there is no import cycle (`tests/layers.rs` reads every `crate::`,
//! `super::` and `self::` path, `use` groups included, and fails on an
//! edge that points sideways or up):
//!
//! 0. `context` — the context branch as a run holds it (entries whose
//!    messages are shared with every request) and its projection; the
//!    modules that read the branch take it in this form; `trace` — what the
//!    trace spans say (names, attributes, what content is captured);
//!    `extension` — what a host registers (extensions, their tools, entry
//!    kinds and hooks) and what a hook handler is given and answers.
//! 1. `error` — [`KernelError`]; `ids` — run, entry and tool-call ids and the clock (the only place
//!    the kernel reads either); `accumulator`, `permission`, `policy` —
//!    pure data and rules over keel-protocol types; `tokens` (token
//!    accounting),
//!    `checkpoint` (the rules of compaction), `project` (project
//!    instructions and the environment), `system_prompt` (the default
//!    prompt, kept in `system_prompt.md`), `user_rules` (the permission
//!    rules the user writes, matched on parsed commands and canonical paths).
//! 2. `parts` (what a kernel shares with its runs, and [`RunSpec`]),
//!    `tool_search` (deferred tools: which, their listing, the search tool),
//!    `emitter` (the gapless event stream), `journal` (the effect journal's
//!    records and the pure recovery table), `rules` (session rules: host
//!    answers that hold for later matching calls).
//! 3. `shared` — the state a run's handle, loop and supervisor share, and
//!    the loop's outcome; `pipeline` — the context pipeline, the one place
//!    a provider request is built; `fork` — a fork at any entry, the calls
//!    it cuts off closed in the new session; `hooks` — dispatching hooks,
//!    their outcomes checked against what each point allows; `late_tools`
//!    — tools that join a run when their source is ready.
//! 4. `session_writer` — the run's appends and its in-memory context branch;
//!    `watchdog` — fails a run that makes no progress (`run_stalled`).
//! 5. `tools` — the tool pipeline: validate, classify, decide, execute;
//!    `compaction` — token budgets and checkpoints, driven; `snapshots` —
//!    the workspace snapshots recorded in the session, restore and rewind.
//! 6. `recovery` — completes the batch a crash interrupted, before a
//!    resumed run's next turn.
//! 7. `turn_loop` — stream, persist, run tools, inject, repeat.
//! 8. `run` — [`AgentRun`], [`EventStream`] and the supervisor task.
//! 9. `kernel` — [`AgentKernel`] and its builder.
//!
//! A new capability (compaction, the effect journal, hooks) is a module of
//! its own at the layer it needs, called from the turn loop or the tool
//! pipeline through a small seam — not another branch inside them.

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

mod accumulator;
mod checkpoint;
mod compaction;
mod context;
mod emitter;
mod error;
pub mod extension;
mod fork;
mod hooks;
mod ids;
pub mod journal;
mod kernel;
mod late_tools;
mod parts;
mod permission;
mod pipeline;
pub mod policy;
mod project;
mod recovery;
mod rules;
mod run;
mod session_writer;
mod shared;
mod snapshots;
mod system_prompt;
pub mod tokens;
mod tool_search;
mod tools;
mod trace;
mod turn_loop;
pub mod user_rules;
mod watchdog;

pub use checkpoint::CompactionSettings;
pub use extension::ExtensionError;
pub use extension::{Extension, Hook, HookEvent, HookHandler, HookOutcome, HookReply, ToolSource};
pub use fork::{Fork, fork_session};
pub use keel_protocol::HookPoint;
pub use keel_provider::retry::RetryPolicy;
pub use keel_tools::changes::record::RecordLimits;
pub use kernel::{
    AgentKernel, AgentKernelBuilder, CompactionReport, ContextView, KernelError, RequestPreview,
    session_interrupted,
};
pub use parts::RunSpec;
pub use policy::{MatrixPolicy, PermissionPolicy, PolicyDecision};
pub use project::{DEFAULT_INSTRUCTION_BYTES, Instructions};
pub use run::{AgentRun, EventStream};
pub use shared::ControlError;
pub use snapshots::{Restored, Rewound, SnapshotError, Written, restore_snapshot, rewind};
pub use tool_search::DEFAULT_SHARE as DEFAULT_TOOL_SEARCH_SHARE;
pub use user_rules::{RuleError, RuleList, UserRules};
