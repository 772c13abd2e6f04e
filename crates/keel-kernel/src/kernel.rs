//! `AgentKernel`: the assembled runtime that creates runs, and its builder.
//!
//! The top layer of the crate: it depends on the run handle (`run`) and the
//! run parts (`parts`), and nothing in the crate depends on it.

use std::path::Path;
use std::sync::Arc;

use keel_protocol::{CompactionTrigger, RunError};
use keel_provider::Provider;
use keel_session::{MemoryStore, NewSession, SessionError, SessionStore, WriterLease};
use keel_tools::changes::Baseline;
use keel_tools::changes::record::RecordLimits;
use keel_tools::outputs::OutputStore;
use keel_tools::sandbox::{HolderPool, SandboxConfig};
use keel_tools::{Tool, ToolRegistry, Workspace};

use crate::checkpoint::CompactionSettings;
use crate::compaction::{ContextBudget, Interrupted, Seams};
use crate::emitter::Emitter;
pub use crate::error::KernelError;
use crate::ids::new_id;
use crate::parts::{KernelParts, RunSpec};
use crate::policy::{MatrixPolicy, PermissionPolicy};
use crate::project::Instructions;
use crate::run::AgentRun;
use crate::session_writer::SessionWriter;
use crate::user_rules::UserRules;
use keel_provider::retry::RetryPolicy;

/// A configured kernel: provider, tools, store, workspace and policy.
///
/// Cheap to clone; every run created from it shares these parts.
#[derive(Clone)]
pub struct AgentKernel {
    pub(crate) inner: Arc<KernelParts>,
}

/// The model context a run on a session would start from
/// ([`AgentKernel::preview_request`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RequestPreview {
    /// The request, exactly as the pipeline builds it, before the run's
    /// prompt is added.
    pub request: keel_provider::ModelRequest,
    /// Its estimated size and the window.
    pub context: keel_protocol::ContextUsage,
}

/// A session's model context, read through the pipeline
/// ([`AgentKernel::context_view`]).
pub struct ContextView {
    writer: SessionWriter,
    frame: crate::pipeline::Frame,
    budget: ContextBudget,
}

impl ContextView {
    /// The request the next turn would send (before a run's prompt), and
    /// its estimate.
    pub async fn request(&mut self) -> RequestPreview {
        let context = self.budget.usage(&self.writer).await;
        let request = self.frame.request(self.writer.project_context().await);
        RequestPreview { request, context }
    }
}

/// What a manual compaction ([`AgentKernel::compact`]) wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionReport {
    /// The checkpoint entry, now on the session's active branch.
    pub checkpoint_id: String,
    /// Estimated tokens of the model context before.
    pub tokens_before: u64,
    /// Estimated tokens after.
    pub tokens_after: u64,
    /// Entries the checkpoint covers.
    pub covered_entries: usize,
}

impl AgentKernel {
    /// Starts assembling a kernel.
    pub fn builder() -> AgentKernelBuilder {
        AgentKernelBuilder::default()
    }

    /// The session store runs write to.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.inner.store
    }

    /// The workspace tools act in.
    pub fn workspace(&self) -> &Arc<Workspace> {
        &self.inner.workspace
    }

    /// Compacts `session_id` now (a manual compaction): the run's own
    /// provider and model summarise the oldest part of its active branch
    /// into a checkpoint appended at the leaf, with `instructions` as
    /// additional focus for the summary. It holds the session's writer
    /// lease while it works: while a run writes the session it fails with
    /// [`KernelError::SessionBusy`], and a run started meanwhile does too.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it returns writes nothing unless the
    /// checkpoint was already being appended; a checkpoint is one append,
    /// so it is either in the session whole or not at all.
    pub async fn compact(
        &self,
        session_id: &str,
        instructions: Option<&str>,
    ) -> Result<CompactionReport, KernelError> {
        let store = &self.inner.store;
        // The compaction is the session's writer until it returns.
        let _lease = writer_lease(store, session_id).await?;
        let (frame, _) = crate::pipeline::open(&self.inner);
        let writer = SessionWriter::open(Arc::clone(store), session_id.to_owned(), &frame).await?;
        let mut budget = ContextBudget::new(&self.inner, &frame);
        // Nobody consumes these events; the report and the error say it all.
        let (events, _ignored) = tokio::sync::mpsc::unbounded_channel();
        let emitter = Emitter::new(new_id(), session_id.to_owned(), events);
        let cancel = tokio_util::sync::CancellationToken::new();
        let seams = Seams {
            parts: &self.inner,
            frame: &frame,
            writer: &writer,
            emitter: &emitter,
            cancel: &cancel,
        };
        match budget
            .compact(&seams, CompactionTrigger::Manual, instructions)
            .await
        {
            Ok(done) => Ok(CompactionReport {
                checkpoint_id: done.entry_id,
                tokens_before: done.tokens_before,
                tokens_after: done.tokens_after,
                covered_entries: done.covered_entries,
            }),
            Err(Interrupted::Failed(error)) => Err(KernelError::Compaction(error)),
            Err(Interrupted::Cancelled) => Err(KernelError::Compaction(RunError::new(
                keel_protocol::ErrorSource::Kernel,
                keel_protocol::RunErrorCode::CompactionFailed,
                "compaction failed: cancelled",
            ))),
        }
    }

    /// Writes the workspace snapshot in force at `at` into `into`
    /// ([`crate::restore_snapshot`], over this kernel's store).
    pub async fn restore_snapshot(
        &self,
        session_id: &str,
        at: Option<&str>,
        into: &Path,
    ) -> Result<crate::snapshots::Restored, KernelError> {
        crate::snapshots::restore_snapshot(&self.inner.store, session_id, at, into).await
    }

    /// Rewinds code and conversation together ([`crate::rewind`], over this
    /// kernel's store and workspace).
    pub async fn rewind(
        &self,
        session_id: &str,
        to: &str,
    ) -> Result<crate::snapshots::Rewound, KernelError> {
        let limits = self.inner.workspace_snapshots.clone().unwrap_or_default();
        let root = self.inner.workspace.root();
        crate::snapshots::rewind(&self.inner.store, root, &limits, session_id, to).await
    }

    /// The request the next turn of a run on `session_id` would send,
    /// before the run's prompt: the same pipeline (`pipeline.rs`) over the
    /// session's active branch from its latest checkpoint. Reads only; for
    /// hosts that show the model context, and for measuring the pipeline.
    pub async fn preview_request(&self, session_id: &str) -> Result<RequestPreview, KernelError> {
        Ok(self.context_view(session_id).await?.request().await)
    }

    /// A read-only view of `session_id`'s model context, opened once and
    /// asked for the next request as often as needed (as a run's turn loop
    /// does: its estimate then counts only what was appended since).
    pub async fn context_view(&self, session_id: &str) -> Result<ContextView, KernelError> {
        let (frame, _) = crate::pipeline::open(&self.inner);
        let writer =
            SessionWriter::open(Arc::clone(&self.inner.store), session_id.to_owned(), &frame)
                .await?;
        let budget = ContextBudget::new(&self.inner, &frame);
        Ok(ContextView {
            writer,
            frame,
            budget,
        })
    }

    /// Starts a run. Must be called inside a Tokio runtime; the run proceeds
    /// in the background whether or not the host consumes its events.
    ///
    /// # Cancel safety
    ///
    /// Not fully cancel safe: dropping the future before it returns starts no
    /// run and leaves the workspace untouched, but a new session that was
    /// already created stays in the store (with no entries beyond its
    /// header). The run is spawned only in the last, synchronous step, so it
    /// either starts and is returned, or does not start at all.
    pub async fn create_run(&self, spec: RunSpec) -> Result<AgentRun, KernelError> {
        if !spec.has_prompt() {
            return Err(KernelError::EmptyPrompt);
        }
        self.check_journal_private()?;
        let store = &self.inner.store;
        // The run holds its session's writer lease for its whole life.
        // Opening for writing is the one step that may cut a torn tail; the
        // run reports it as `session_repaired`.
        let lease = match &spec.session_id {
            Some(id) => {
                let lease = writer_lease(store, id).await?;
                if self.dangling_calls(id).await? {
                    return Err(KernelError::Interrupted(id.clone()));
                }
                lease
            }
            None => {
                let workspace = Some(self.inner.workspace.root().display().to_string());
                let id = store
                    .create({
                        let mut new_session = NewSession::default();
                        new_session.workspace = workspace;
                        new_session
                    })
                    .await?;
                writer_lease(store, &id).await?
            }
        };
        Ok(self.start(spec, lease).await)
    }

    /// Continues the run a crash interrupted in `session_id` (docs/recovery.md),
    /// under `mode` — which the host gives again; a resumed run never
    /// inherits the interrupted run's mode. Calls the crash left without a
    /// result are recovered from the effect journal: never-started and
    /// safe-to-repeat calls run (under `mode`'s policy), applied effects are
    /// reported complete, and unknown outcomes are reported to the model as
    /// interrupted, never run again. Fails with
    /// [`KernelError::NotInterrupted`] when there is nothing to resume.
    pub async fn resume(
        &self,
        session_id: &str,
        mode: keel_protocol::PermissionMode,
    ) -> Result<AgentRun, KernelError> {
        self.resume_with(RunSpec::new("").session(session_id).mode(mode))
            .await
    }

    /// [`resume`](Self::resume) with the rest of a host's limits: the
    /// resumed run takes `spec`'s session, mode, turn limit and cost budget
    /// (both counted afresh); its prompt is not used, since the run goes on
    /// from the interrupted one. Fails with [`KernelError::NotInterrupted`]
    /// when `spec` names no session or one with nothing to resume.
    pub async fn resume_with(&self, mut spec: RunSpec) -> Result<AgentRun, KernelError> {
        let Some(session_id) = spec.session_id.clone() else {
            return Err(KernelError::NotInterrupted("(none named)".into()));
        };
        self.check_journal_private()?;
        let lease = writer_lease(&self.inner.store, &session_id).await?;
        if !self.interrupted(&session_id).await? {
            return Err(KernelError::NotInterrupted(session_id));
        }
        spec.resume = true;
        Ok(self.start(spec, lease).await)
    }

    /// Refuses a store whose command journals lie inside a root that
    /// sandboxed commands may write (the workspace, or an extra writable
    /// directory of the sandbox): the journal is Keel's alone (issue 21).
    /// Links are resolved: a session directory reached through a link into
    /// the workspace is refused too.
    fn check_journal_private(&self) -> Result<(), KernelError> {
        // Where journals go: the parent of any session's journal directory.
        let Some(home) = self
            .inner
            .store
            .journal_dir("journal-check")
            .and_then(|dir| dir.parent().map(Path::to_path_buf))
            .map(|home| {
                if home.as_os_str().is_empty() {
                    std::path::PathBuf::from(".")
                } else {
                    home
                }
            })
        else {
            return Ok(());
        };
        // Fails closed: what cannot be resolved is compared by its path.
        let resolved = resolve_existing(&home).unwrap_or_else(|| home.clone());
        let roots = std::iter::once(self.inner.workspace.root().to_path_buf())
            .chain(self.inner.sandbox.writable.iter().cloned());
        for given in roots {
            let root = std::fs::canonicalize(&given).unwrap_or_else(|_| given.clone());
            if resolved.starts_with(&root) || home.starts_with(&given) {
                return Err(KernelError::JournalExposed {
                    journal: home,
                    root,
                });
            }
        }
        Ok(())
    }

    /// Whether `session_id`'s active branch ends in an interrupted run.
    pub async fn interrupted(&self, session_id: &str) -> Result<bool, KernelError> {
        session_interrupted(self.inner.store.as_ref(), session_id).await
    }

    /// Whether `session_id`'s active branch ends in tool calls without
    /// results: a new run must not continue past them (only `resume` may).
    async fn dangling_calls(&self, session_id: &str) -> Result<bool, KernelError> {
        let branch = self.inner.store.context_branch(session_id).await?;
        Ok(
            !crate::journal::plan(&branch, &|_| crate::journal::OnDisk::Absent, &|_| {
                crate::journal::ReceiptState::Absent
            })
            .calls
            .is_empty(),
        )
    }

    async fn start(&self, spec: RunSpec, lease: WriterLease) -> AgentRun {
        let root = self.inner.workspace.root().to_path_buf();
        let mut limits = keel_tools::changes::SnapshotLimits::default();
        limits.spill_under = self.inner.snapshot_spill.clone();
        // Git is found on the host's PATH, from its snapshot.
        limits.env = self.inner.sandbox.host_env.clone();
        let capture = move || Baseline::capture_with(&root, limits);
        let baseline = match tokio::task::spawn_blocking(capture).await {
            Ok(Ok(baseline)) => Ok(Arc::new(baseline)),
            Ok(Err(error)) => Err(error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        if let Err(reason) = &baseline {
            tracing::warn!(%reason, "workspace changes will not be available for this run");
        }
        AgentRun::start(Arc::clone(&self.inner), spec, baseline, lease)
    }
}

/// Takes `session_id`'s writer lease; a live writer in this process is
/// [`KernelError::SessionBusy`].
async fn writer_lease(
    store: &Arc<dyn SessionStore>,
    session_id: &str,
) -> Result<WriterLease, KernelError> {
    store
        .open_writer(session_id)
        .await
        .map_err(|error| match error {
            SessionError::SessionBusy(id) => KernelError::SessionBusy(id),
            other => KernelError::Session(other),
        })
}

/// `path` with links resolved: its nearest existing ancestor, canonical,
/// joined with the rest (`None` when nothing of it exists).
fn resolve_existing(path: &Path) -> Option<std::path::PathBuf> {
    let mut missing = Vec::new();
    let mut current = path;
    loop {
        if let Ok(resolved) = std::fs::canonicalize(current) {
            return Some(
                missing
                    .iter()
                    .rev()
                    .fold(resolved, |path, part| path.join(part)),
            );
        }
        missing.push(current.file_name()?.to_owned());
        current = current.parent()?;
    }
}

/// Assembles an [`AgentKernel`].
#[derive(Default)]
pub struct AgentKernelBuilder {
    provider: Option<Arc<dyn Provider>>,
    model: Option<String>,
    system_prompt: Option<String>,
    tools: Vec<Arc<dyn Tool>>,
    store: Option<Arc<dyn SessionStore>>,
    workspace: Option<Workspace>,
    policy: Option<Arc<dyn PermissionPolicy>>,
    user_rules: UserRules,
    sandbox: SandboxConfig,
    retry: RetryPolicy,
    max_output_tokens: Option<u32>,
    append_system_prompt: Option<String>,
    instructions: Option<Instructions>,
    no_environment: bool,
    context_window: Option<u64>,
    output_limit: Option<u32>,
    compaction: CompactionSettings,
    outputs: Option<OutputStore>,
    shell: Option<String>,
    snapshot_spill: Option<std::path::PathBuf>,
    workspace_snapshots: Option<Option<RecordLimits>>,
    capture_content: bool,
    extensions: Vec<crate::extension::Extension>,
    overrides: Vec<String>,
    tool_search_share: Option<f64>,
}

impl AgentKernelBuilder {
    /// Registers an extension: its tools, entry kinds and hooks
    /// ([`crate::extension`]). Extensions are fixed when the kernel is
    /// built; their names, tool names and entry kinds must be unique.
    pub fn extension(mut self, extension: crate::extension::Extension) -> Self {
        self.extensions.push(extension);
        self
    }

    /// The share of the context window (0 to 1; default
    /// [`crate::DEFAULT_TOOL_SEARCH_SHARE`]) the schemas of deferrable
    /// extensions' tools may take; past it they are deferred: listed by
    /// name in the system prompt and loaded through a `tool_search` tool.
    pub fn tool_search_share(mut self, share: f64) -> Self {
        self.tool_search_share = Some(share);
        self
    }

    /// Lets one extension's tool replace the tool already registered under
    /// `tool_name` (a built-in, say); without it such a clash is an error.
    pub fn allow_override(mut self, tool_name: impl Into<String>) -> Self {
        self.overrides.push(tool_name.into());
        self
    }

    /// The scratch directory of each run's start snapshot, normally the
    /// OS temp dir: a private directory (0700, removed when the run's
    /// handle drops) is made under `dir` for a git workspace's shadow
    /// repository, or for the file contents a non-git workspace's snapshot
    /// diffs against, so a run holds only paths, sizes and hashes in
    /// memory. Without it the shadow repository goes under `/tmp` and the
    /// contents stay in memory (up to 64 MiB per run).
    pub fn snapshot_spill_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.snapshot_spill = Some(dir.into());
        self
    }

    /// Whether the run's trace spans carry content: the request's messages
    /// and the response on each `chat` span (`gen_ai.input.messages`,
    /// `gen_ai.output.messages`), a call's arguments and result on each
    /// `execute_tool` span. Off by default: a trace then holds names,
    /// ids, sizes, tokens and times, never what the user or the model wrote.
    pub fn capture_content(mut self, capture: bool) -> Self {
        self.capture_content = capture;
        self
    }

    /// The caps on the workspace snapshot each run records in its session
    /// at its start and end (docs/session-format.md, "Workspace snapshots": the base of `rewind` and of restoring
    /// a run's workspace elsewhere); `None` records none. By default each
    /// snapshot keeps files up to 16 MiB, 512 MiB in all, and lists what it
    /// left out. Only stores with a [`SessionStore::snapshot_dir`] keep them.
    pub fn workspace_snapshots(mut self, limits: Option<RecordLimits>) -> Self {
        self.workspace_snapshots = Some(limits);
        self
    }

    /// The model provider (required).
    pub fn provider(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The model id sent with each request (default: the provider's name).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Replaces the default system prompt. Project instructions and the
    /// environment are still added after it.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Adds text after the system prompt (the default one or a replacement).
    pub fn append_system_prompt(mut self, text: impl Into<String>) -> Self {
        self.append_system_prompt = Some(text.into());
        self
    }

    /// Where runs look for `AGENTS.md` files (default:
    /// [`Instructions::default`]; [`Instructions::none`] turns them off).
    pub fn project_instructions(mut self, instructions: Instructions) -> Self {
        self.instructions = Some(instructions);
        self
    }

    /// The user's shell the environment section names (default: none,
    /// shown as unknown; hosts pass their `SHELL`).
    pub fn user_shell(mut self, shell: Option<String>) -> Self {
        self.shell = shell;
        self
    }

    /// Whether requests state the environment — date, working directory,
    /// OS, shell, git (default: yes). A very small local model may follow
    /// its instructions more reliably without it.
    pub fn environment(mut self, state_it: bool) -> Self {
        self.no_environment = !state_it;
        self
    }

    /// The model's context window in tokens (from the catalog); without it
    /// a run compacts only when the provider reports an overflow.
    pub fn context_window(mut self, tokens: u64) -> Self {
        self.context_window = Some(tokens);
        self
    }

    /// The most tokens the model may write in one response (from the
    /// catalog); caps what a summary request asks for.
    pub fn output_limit(mut self, tokens: u32) -> Self {
        self.output_limit = Some(tokens);
        self
    }

    /// When and how much runs compact (default: [`CompactionSettings::default`]).
    pub fn compaction(mut self, settings: CompactionSettings) -> Self {
        self.compaction = settings;
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds several tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// The session store (default: in memory).
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The workspace tools act in (required).
    pub fn workspace(mut self, workspace: Workspace) -> Self {
        self.workspace = Some(workspace);
        self
    }

    /// The permission policy (default: [`MatrixPolicy`], the permission matrix).
    pub fn policy(mut self, policy: Arc<dyn PermissionPolicy>) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The permission rules the user wrote (`[permissions]` in the
    /// configuration), applied after the policy's decision: deny rules
    /// win, ask rules turn an allow into a question, allow rules answer a
    /// question the mode would ask ([`crate::user_rules`]). Default: none.
    pub fn user_rules(mut self, rules: UserRules) -> Self {
        self.user_rules = rules;
        self
    }

    /// The OS sandbox settings for commands (default: enforced by Keel with
    /// Landlock and seccomp, system locations readable, and an empty
    /// environment snapshot — commands get only Keel's fixed defaults,
    /// never this process's environment; hosts pass theirs in
    /// `SandboxConfig::host_env`).
    pub fn sandbox(mut self, sandbox: SandboxConfig) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Where the kernel's tools save full outputs of cut results, for
    /// `read` (default: a fresh store beneath `/tmp`; hosts pass one
    /// beneath the system's temporary directory). Each kernel has its own:
    /// a run reads only its own kernel's outputs.
    pub fn outputs(mut self, outputs: OutputStore) -> Self {
        self.outputs = Some(outputs);
        self
    }

    /// How retryable provider errors are retried.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The output token limit for each request.
    pub fn max_output_tokens(mut self, limit: u32) -> Self {
        self.max_output_tokens = Some(limit);
        self
    }

    /// Checks the parts and builds the kernel.
    pub fn build(self) -> Result<AgentKernel, KernelError> {
        let provider = self.provider.ok_or(KernelError::Missing("provider"))?;
        // Keel's own configuration is protected from the file tools as it
        // is from sandboxed commands (`SandboxConfig::protected`).
        let workspace = Arc::new(
            self.workspace
                .ok_or(KernelError::Missing("workspace"))?
                .protecting(&self.sandbox.protected),
        );
        let hooks = crate::extension::Hooks::new(&self.extensions)?;
        let mut registered = self.tools;
        let mut overridden: Vec<String> = Vec::new();
        for extension in &self.extensions {
            for tool in &extension.tools {
                let name = tool.name();
                match registered.iter().position(|held| held.name() == name) {
                    None => registered.push(tool.clone()),
                    Some(at)
                        if self.overrides.iter().any(|allowed| allowed == name)
                            && !overridden.iter().any(|done| done == name) =>
                    {
                        overridden.push(name.to_owned());
                        registered[at] = tool.clone();
                    }
                    Some(_) => {
                        return Err(crate::extension::ExtensionError::new(format!(
                            "extension `{}` registers tool `{name}`, a name already taken; \
                             a host that means to replace it allows the override",
                            extension.name()
                        ))
                        .into());
                    }
                }
            }
        }
        let mut tools = ToolRegistry::new();
        for tool in registered {
            tools.register(tool)?;
        }
        let deferrable: Vec<keel_protocol::ToolSpec> = tools
            .specs()
            .into_iter()
            .filter(|spec| {
                self.extensions.iter().any(|extension| {
                    extension.deferrable
                        && extension.tools.iter().any(|tool| tool.name() == spec.name)
                })
            })
            .collect();
        let deferral = crate::tool_search::Deferral::new(
            self.context_window
                .unwrap_or(crate::tool_search::ASSUMED_WINDOW),
            self.tool_search_share
                .unwrap_or(crate::tool_search::DEFAULT_SHARE),
        );
        let deferred = deferral.defer(&deferrable);
        // `tool_search` is each run's own (`crate::late_tools`): tools that
        // join a run late may be deferred too. Its name is reserved.
        if tools.get(crate::tool_search::NAME).is_some() {
            return Err(crate::extension::ExtensionError::new(format!(
                "the tool name `{}` is Keel's own",
                crate::tool_search::NAME
            ))
            .into());
        }
        let model = self.model.unwrap_or_else(|| provider.name().to_owned());
        let system_prompt = self
            .system_prompt
            .unwrap_or_else(|| crate::system_prompt::default_prompt(&tools.names()));
        let inner = KernelParts {
            provider,
            model,
            system_prompt,
            tools,
            store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
            workspace,
            policy: self.policy.unwrap_or_else(|| Arc::new(MatrixPolicy)),
            user_rules: self.user_rules,
            sandbox: Arc::new(self.sandbox),
            retry: self.retry,
            max_output_tokens: self.max_output_tokens,
            append_system_prompt: self.append_system_prompt,
            instructions: self.instructions.unwrap_or_default(),
            environment: !self.no_environment,
            context_window: self.context_window,
            output_limit: self.output_limit,
            compaction: self.compaction,
            outputs: self.outputs.unwrap_or_default(),
            holders: HolderPool::new(),
            shell: self.shell,
            snapshot_spill: self.snapshot_spill,
            workspace_snapshots: self
                .workspace_snapshots
                .unwrap_or_else(|| Some(RecordLimits::default())),
            capture_content: self.capture_content,
            enforceable: std::sync::OnceLock::new(),
            hooks,
            deferred,
            deferral: deferral.counting(&deferrable).parts(),
            sources: self
                .extensions
                .iter()
                .flat_map(|extension| {
                    extension.sources.iter().map(|source| {
                        (
                            extension.name().to_owned(),
                            extension.deferrable,
                            source.clone(),
                        )
                    })
                })
                .collect(),
        };
        Ok(AgentKernel {
            inner: Arc::new(inner),
        })
    }
}

/// Whether `session_id`'s active branch in `store` ends in a run a crash
/// interrupted: what [`AgentKernel::resume`] would continue. Hosts ask it
/// without a kernel (to choose between resuming and starting a run, or to
/// keep an interrupted session from being pruned); it only reads.
pub async fn session_interrupted(
    store: &dyn SessionStore,
    session_id: &str,
) -> Result<bool, KernelError> {
    let branch = store.context_branch(session_id).await?;
    Ok(
        crate::journal::plan(&branch, &|_| crate::journal::OnDisk::Absent, &|_| {
            crate::journal::ReceiptState::Absent
        })
        .is_interrupted(),
    )
}
