//! The parts a run is made of: what the host assembled once per kernel
//! ([`KernelParts`]) and what it asks for once per run ([`RunSpec`]).
//!
//! Plain data below every other run module: the builder fills it, the turn
//! loop and the tool pipeline read it, nothing mutates it after `build()`.

use std::sync::Arc;
use std::time::Duration;

use keel_protocol::{ImageContent, PermissionMode, UserContent};
use keel_provider::Provider;
use keel_session::SessionStore;
use keel_tools::outputs::OutputStore;
use keel_tools::sandbox::{HolderPool, SandboxConfig};
use keel_tools::{ToolRegistry, Workspace};

use crate::checkpoint::CompactionSettings;
use crate::policy::PermissionPolicy;
use crate::project::Instructions;
use crate::user_rules::UserRules;
use keel_provider::retry::RetryPolicy;

/// Everything an [`crate::AgentKernel`] shares with each of its runs.
pub(crate) struct KernelParts {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) model: String,
    pub(crate) system_prompt: String,
    pub(crate) tools: ToolRegistry,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) workspace: Arc<Workspace>,
    pub(crate) policy: Arc<dyn PermissionPolicy>,
    /// The permission rules the user wrote, applied after the policy.
    pub(crate) user_rules: UserRules,
    pub(crate) sandbox: Arc<SandboxConfig>,
    pub(crate) retry: RetryPolicy,
    pub(crate) max_output_tokens: Option<u32>,
    /// Added after the system prompt, default or not.
    pub(crate) append_system_prompt: Option<String>,
    /// Where runs look for project instructions.
    pub(crate) instructions: Instructions,
    /// Whether requests state the environment.
    pub(crate) environment: bool,
    /// The model's context window, when known (from the catalog).
    pub(crate) context_window: Option<u64>,
    /// The most tokens the model may write in one response (from the catalog).
    pub(crate) output_limit: Option<u32>,
    /// When and how much runs compact.
    pub(crate) compaction: CompactionSettings,
    /// The user's shell the environment section names (the host's `SHELL`).
    pub(crate) shell: Option<String>,
    /// The kernel's store of full tool outputs (its own, never shared).
    pub(crate) outputs: OutputStore,
    /// The kernel's sandbox namespace holders (its own, never shared).
    pub(crate) holders: HolderPool,
    /// Where a run's start snapshot of a non-git workspace spills the
    /// contents it keeps (a private directory is made under it); in
    /// memory when `None`.
    pub(crate) snapshot_spill: Option<std::path::PathBuf>,
    /// The caps on the workspace snapshots each run records in the session
    /// (the `snapshots` module); `None`: none are recorded.
    pub(crate) workspace_snapshots: Option<keel_tools::changes::record::RecordLimits>,
    /// Whether trace spans carry prompt, output and argument content.
    pub(crate) capture_content: bool,
    /// Whether Keel's OS sandbox is enforceable on this machine, probed
    /// on first need.
    pub(crate) enforceable: std::sync::OnceLock<bool>,
    /// The extensions' hooks and entry kinds (`crate::hooks`).
    pub(crate) hooks: crate::extension::Hooks,
    /// The deferred tools' specs (`crate::tool_search`): in no request
    /// until a `tool_search` result loads them.
    pub(crate) deferred: Vec<keel_protocol::ToolSpec>,
    /// Sources of tools that join runs when ready, with their extension's
    /// name (`crate::late_tools`).
    pub(crate) sources: Vec<(String, bool, Arc<dyn crate::extension::ToolSource>)>,
    /// When deferrable tools are deferred (`crate::tool_search`): the
    /// tokens their specs may take in full, and what the kernel's own
    /// deferrable tools already take.
    pub(crate) deferral: (u64, u64),
}

impl KernelParts {
    /// Whether a command at `workspace_write` runs in Keel's own OS sandbox
    /// here: the host left enforcing it to Keel (not to an external
    /// container), and a confined `/bin/sh -c true` ran in this workspace
    /// both on its own and through a namespace holder, the path `bash`
    /// takes ([`keel_tools::sandbox::probe::try_level`], what `keel doctor`
    /// checks). Probed once per kernel, on first need.
    pub(crate) fn sandbox_enforced(&self) -> bool {
        use keel_tools::sandbox::{Sandbox, SandboxLevel, SandboxMode, probe};
        if self.sandbox.mode != SandboxMode::Os {
            return false;
        }
        *self.enforceable.get_or_init(|| {
            let mut sandbox = Sandbox::new(SandboxLevel::WorkspaceWrite);
            sandbox.config = self.sandbox.clone();
            probe::try_level(&sandbox, self.workspace.root())
                .inspect_err(
                    |reason| tracing::info!(%reason, "the OS sandbox is not enforced here"),
                )
                .is_ok()
        })
    }
}

/// What the host asks for when it starts a run.
///
/// Built with [`RunSpec::new`] and its builder methods, so that fields added
/// later (budgets, instructions) do not break hosts.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RunSpec {
    /// The user's prompt: content blocks (text and images), in order.
    /// Blank text blocks are left out of the session's user message.
    pub prompt: Vec<UserContent>,
    /// Continue this session on its active leaf; a new session when `None`.
    pub session_id: Option<String>,
    /// The permission mode, fixed for the run.
    pub mode: PermissionMode,
    /// Fail the run after this many turns (no limit when `None`).
    pub max_turns: Option<u32>,
    /// Continue the session's interrupted run instead of sending `prompt`
    /// (set by [`crate::AgentKernel::resume`]).
    pub(crate) resume: bool,
    /// Fail the run before the next model request once the cost of its
    /// responses so far, in USD, passes this (no limit when `None`).
    pub max_cost_usd: Option<f64>,
    /// A resumed run in another workspace than the session's: the
    /// session's workspace (set by [`RunSpec::moved_from_workspace`]).
    pub(crate) moved_from: Option<String>,
    /// Fail the run (`run_stalled`) when it emits no event for this long
    /// while not waiting for a permission answer (no watchdog when `None`).
    pub stall_timeout: Option<Duration>,
    /// Warnings the host wants at the head of the run's event stream
    /// (code, message), set by [`RunSpec::warning`].
    pub(crate) warnings: Vec<(String, String)>,
}

impl RunSpec {
    /// A run of `prompt` (one text block) in a new session, in the default
    /// mode, without a turn limit.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            prompt: vec![UserContent::Text {
                text: prompt.into(),
            }],
            ..Self::default()
        }
    }

    /// Adds an image block after the prompt's blocks so far. Repeatable.
    pub fn image(mut self, image: ImageContent) -> Self {
        self.prompt.push(UserContent::Image(image));
        self
    }

    /// Replaces the prompt with these content blocks, in order.
    pub fn content(mut self, blocks: Vec<UserContent>) -> Self {
        self.prompt = blocks;
        self
    }

    /// Whether the prompt has something to send: a non-blank text block or
    /// an image.
    pub(crate) fn has_prompt(&self) -> bool {
        self.prompt.iter().any(|block| match block {
            UserContent::Text { text } => !text.trim().is_empty(),
            _ => true,
        })
    }

    /// The prompt's blocks as the session's user message holds them: in
    /// order, without blank text blocks (providers refuse empty text).
    pub(crate) fn prompt_blocks(&self) -> Vec<UserContent> {
        self.prompt
            .iter()
            .filter(|block| !matches!(block, UserContent::Text { text } if text.trim().is_empty()))
            .cloned()
            .collect()
    }

    /// Continues `session_id` on its active leaf instead of starting a new session.
    pub fn session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// Continues this session when `Some`, starts a new one when `None`.
    pub fn session_opt(mut self, session_id: Option<String>) -> Self {
        self.session_id = session_id;
        self
    }

    /// The permission mode, fixed for the run.
    pub fn mode(mut self, mode: PermissionMode) -> Self {
        self.mode = mode;
        self
    }

    /// Fails the run after `limit` turns (`None`: no limit).
    pub fn max_turns(mut self, limit: impl Into<Option<u32>>) -> Self {
        self.max_turns = limit.into();
        self
    }

    /// Fails the run (`budget_exceeded`) before the next model request once
    /// the cost of its responses so far passes `limit` USD (`None`: no
    /// limit). A response whose cost is unknown (the model has no prices)
    /// fails it too (`cost_unknown`): a budget that cannot be measured is
    /// not kept by guessing.
    pub fn max_cost_usd(mut self, limit: impl Into<Option<f64>>) -> Self {
        self.max_cost_usd = limit.into();
        self
    }

    /// Fails the run with `run_stalled` when it makes no progress for
    /// `timeout`: no event at all (no provider chunk, no tool output or
    /// end, nothing) while it waits on the provider or a tool. Time with a
    /// permission request pending does not count, since a human may take
    /// hours to answer. A stalled run's in-flight work is cancelled as a
    /// host cancel would (cut-short calls are recorded as cancelled), then
    /// it ends `failed` with a message naming what it was waiting on.
    /// Without it (the default) a run waits as long as its parts do.
    pub fn stall_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.stall_timeout = timeout.into();
        self
    }

    /// A `warning` event (`code`, `message`) the run emits right after
    /// `run_started`, beside its own: something the host must tell whoever
    /// reads the event stream before the run goes on (e.g. that nobody can
    /// answer its permission requests). Repeatable.
    pub fn warning(mut self, code: impl Into<String>, message: impl Into<String>) -> Self {
        self.warnings.push((code.into(), message.into()));
        self
    }

    /// For a resumed run whose host explicitly chose another workspace
    /// than the session's: `from` is the session's workspace. The run
    /// warns, naming both, and its `run_start` records the move (recovery
    /// judges the interrupted calls against the kernel's workspace).
    pub fn moved_from_workspace(mut self, from: impl Into<String>) -> Self {
        self.moved_from = Some(from.into());
        self
    }
}
