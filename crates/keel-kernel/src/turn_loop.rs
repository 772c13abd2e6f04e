//! The turn loop (docs/contract.md, "A run"): stream, persist, run tools, inject, repeat.
//!
//! One call of [`run`] drives a run from `run_started` to an [`Outcome`]; the
//! supervisor in `run.rs` turns the outcome into the terminal event. The loop
//! persists an assistant message only after its stream finished with `done`,
//! writes tool results in call order, drains steering after every turn and
//! takes follow-ups only when it would otherwise settle.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use futures::StreamExt;
use keel_protocol::{
    AssistantMessage, EntryPayload, ErrorSource, HookPoint, Message, PermissionMode, ProviderError,
    ProviderErrorKind, QueueKind, RunEndState, RunError, RunErrorCode, RunEventKind,
    SnapshotReason, StopReason, ToolCall, UserContent, UserMessage, WorkspaceMove,
};
use keel_provider::ModelRequest;
use keel_provider::retry::Attempts;
use keel_session::{Repair, SessionError};
use keel_tools::sandbox::SandboxMode;
use tracing::Instrument;

use crate::accumulator::{Accumulator, Finished};
use crate::compaction::{ContextBudget, Interrupted, Seams};
use crate::hooks::{Blocked, HookScope, Subject};
use crate::ids::ResponseIds;
use crate::late_tools::LateTools;
use crate::parts::{KernelParts, RunSpec};
use crate::pipeline::Frame;
use crate::recovery;
use crate::rules::SessionRules;
use crate::session_writer::SessionWriter;
use crate::shared::{Outcome, RunShared};
use crate::tools::ToolRunner;
use crate::trace::{bounded, wire_name};

/// What a compaction works with, borrowed field by field from a
/// `TurnLoop` so that its `budget` stays mutable.
macro_rules! seams {
    ($run:expr) => {
        Seams {
            parts: $run.parts,
            frame: &$run.frame,
            writer: &$run.writer,
            emitter: &$run.shared.emitter,
            cancel: &$run.shared.cancel,
        }
    };
}

/// Why a step stopped the loop early.
enum Stop {
    Cancelled,
    Failed(RunError),
}

impl Stop {
    /// The failure's code; `None` for a cancel.
    fn clone_code(&self) -> Option<RunErrorCode> {
        match self {
            Stop::Cancelled => None,
            Stop::Failed(error) => Some(error.code),
        }
    }
}

impl From<Interrupted> for Stop {
    fn from(interrupted: Interrupted) -> Self {
        match interrupted {
            Interrupted::Cancelled => Stop::Cancelled,
            Interrupted::Failed(error) => Stop::Failed(error),
        }
    }
}

impl From<SessionError> for Stop {
    fn from(error: SessionError) -> Self {
        Stop::Failed(RunError::new(
            ErrorSource::Kernel,
            RunErrorCode::SessionStore,
            error.to_string(),
        ))
    }
}

/// Records a run's terminal state (`settled`, `failed`, `cancelled`) on
/// its `invoke_agent` span, with the error's code as `error.type`.
fn record_outcome(span: &tracing::Span, result: &Result<(), Option<RunErrorCode>>) {
    let outcome = match result {
        Ok(()) => "settled",
        Err(None) => "cancelled",
        Err(Some(code)) => {
            span.record("error.type", code.as_str());
            span.record("otel.status_code", "ERROR");
            "failed"
        }
    };
    span.record("keel.run.outcome", outcome);
}

/// Drives one run to its outcome.
pub(crate) async fn run(
    parts: Arc<KernelParts>,
    shared: Arc<RunShared>,
    spec: RunSpec,
    repair: Option<Repair>,
) -> Outcome {
    let span = tracing::info_span!(
        "invoke_agent",
        otel.name = "invoke_agent keel",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = "keel",
        gen_ai.provider.name = %parts.provider.name(),
        gen_ai.request.model = %parts.model,
        gen_ai.conversation.id = %shared.session_id,
        keel.run.id = %shared.run_id,
        keel.run.resume = spec.resume,
        keel.run.outcome = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let mut run = match TurnLoop::open(&parts, &shared, &spec, repair)
        .instrument(span.clone())
        .await
    {
        Ok(run) => run,
        Err(stop) => {
            record_outcome(&span, &Err(stop.clone_code()));
            return stop.into_outcome(None);
        }
    };
    let result = if spec.resume {
        run.resume().instrument(span.clone()).await
    } else {
        run.drive(spec.prompt_blocks())
            .instrument(span.clone())
            .await
    };
    // A cancel the stall watchdog caused is recorded as the failure it is.
    let result = match (result, shared.stall_error()) {
        (Err(Stop::Cancelled), Some(error)) => Err(Stop::Failed(error)),
        (result, _) => result,
    };
    run.record_run_end(&result).await;
    record_outcome(
        &span,
        &result
            .as_ref()
            .map(|_| ())
            .map_err(|stop| stop.clone_code()),
    );
    match result {
        Ok(message) => Outcome::Settled(message),
        Err(stop) => {
            let last = run.last.take();
            stop.into_outcome(last)
        }
    }
}

impl Stop {
    fn into_outcome(self, last: Option<AssistantMessage>) -> Outcome {
        match self {
            Stop::Cancelled => Outcome::Cancelled {
                reason: "cancelled by the host".into(),
                last,
            },
            Stop::Failed(error) => Outcome::Failed { error, last },
        }
    }
}

struct TurnLoop<'a> {
    parts: &'a KernelParts,
    shared: &'a RunShared,
    writer: SessionWriter,
    /// What every request of the run carries (the pipeline's fixed part).
    frame: Frame,
    /// Token accounting and compaction triggers.
    budget: ContextBudget,
    mode: PermissionMode,
    max_turns: Option<u32>,
    max_cost_usd: Option<f64>,
    /// A resumed run's move from the session's workspace, if it moved.
    workspace_moved: Option<WorkspaceMove>,
    /// The cost of the run's responses so far, `None` once one was unknown.
    cost_usd: Option<f64>,
    turn: u32,
    permission_requests: AtomicU64,
    rules: SessionRules,
    last: Option<AssistantMessage>,
    /// Entries hook handlers gave, appended between groups.
    hook_entries: std::sync::Mutex<Vec<EntryPayload>>,
    /// Tools that join when their source is ready.
    late: LateTools,
    /// The extensions whose tools joined, as they joined.
    joined: Vec<keel_protocol::ExtensionRecord>,
}

impl<'a> TurnLoop<'a> {
    async fn open(
        parts: &'a KernelParts,
        shared: &'a RunShared,
        spec: &RunSpec,
        repair: Option<Repair>,
    ) -> Result<Self, Stop> {
        let (frame, instructions) = crate::pipeline::open(parts);
        shared.emitter.emit(RunEventKind::RunStarted {
            provider: parts.provider.name().to_owned(),
            model: parts.model.clone(),
            mode: spec.mode,
            instructions: instructions.files,
        });
        for message in instructions.refused {
            shared.emitter.emit(RunEventKind::Warning {
                code: crate::project::REFUSED_CODE.into(),
                message,
            });
        }
        if let Some(repair) = repair {
            shared.emitter.emit(RunEventKind::SessionRepaired {
                bytes_cut: repair.torn.bytes,
                line: repair.torn.line,
                reason: repair.torn.reason,
            });
        }
        if let Some(message) = unsandboxed_warning(spec.mode, parts.sandbox.mode) {
            shared.emitter.emit(RunEventKind::Warning {
                code: "unsandboxed".into(),
                message,
            });
        }
        for (code, message) in &spec.warnings {
            shared.emitter.emit(RunEventKind::Warning {
                code: code.clone(),
                message: message.clone(),
            });
        }
        let writer =
            SessionWriter::open(parts.store.clone(), shared.session_id.clone(), &frame).await?;
        let rules = writer.rules().await;
        let budget = ContextBudget::new(parts, &frame);
        let run = Self {
            parts,
            shared,
            writer,
            frame,
            budget,
            mode: spec.mode,
            max_turns: spec.max_turns,
            max_cost_usd: spec.max_cost_usd,
            workspace_moved: spec
                .moved_from
                .clone()
                .map(|from| WorkspaceMove::new(from, parts.workspace.root().display().to_string())),
            cost_usd: Some(0.0),
            turn: 0,
            permission_requests: AtomicU64::new(0),
            rules,
            last: None,
            hook_entries: std::sync::Mutex::default(),
            late: LateTools::new(parts),
            joined: Vec::new(),
        };
        run.record_configuration().await?;
        for extension in parts.hooks.records() {
            shared.emitter.emit(RunEventKind::ExtensionRegistered {
                extension: extension.clone(),
            });
        }
        Ok(run)
    }

    /// Announces a resumed session and records the configuration if it changed.
    /// Reads only the context branch, so resuming a long session stays cheap.
    async fn record_configuration(&self) -> Result<(), Stop> {
        let branch = self.writer.context_summary().await;
        if branch.length > 0 {
            self.shared.emitter.emit(RunEventKind::SessionResumed {
                leaf_id: branch.leaf_id,
                branch_length: branch.length,
            });
        }
        let configuration = self.configuration();
        if branch.configuration.as_ref() != Some(&configuration) {
            self.writer
                .append(&self.shared.emitter, vec![configuration])
                .await?;
        }
        Ok(())
    }

    /// The configuration in force: the kernel's tools and the run's own
    /// (`tool_search`, tools that joined), the extensions with what joined.
    fn configuration(&self) -> EntryPayload {
        let mut tools = self.parts.tools.names();
        tools.extend(self.late.registry().names());
        let extensions = self
            .parts
            .hooks
            .records()
            .iter()
            .map(|record| {
                self.joined
                    .iter()
                    .find(|joined| joined.name == record.name)
                    .map(|joined| {
                        let mut merged = record.clone();
                        merged.version.clone_from(&joined.version);
                        merged.tools.extend(joined.tools.iter().cloned());
                        merged
                    })
                    .unwrap_or_else(|| record.clone())
            })
            .collect();
        EntryPayload::Configuration {
            provider: self.parts.provider.name().to_owned(),
            model: self.parts.model.clone(),
            mode: self.mode,
            tools,
            permissions: self.parts.user_rules.lists().clone(),
            extensions,
        }
    }

    /// Records the configuration again once tools joined: it is in force
    /// from here on.
    async fn record_joined(&self, joined: bool) -> Result<(), Stop> {
        if joined {
            self.writer
                .append(&self.shared.emitter, vec![self.configuration()])
                .await?;
        }
        Ok(())
    }

    async fn drive(&mut self, prompt: Vec<UserContent>) -> Result<AssistantMessage, Stop> {
        self.await_required_tools().await?;
        let prompt = self.hook_input(prompt).await?;
        let snapshot = self.record_snapshot(SnapshotReason::RunStart).await;
        self.add_user_message(UserMessage::new(prompt.clone()), None, snapshot)
            .await?;
        self.hook_before_run(prompt).await?;
        self.continue_run().await
    }

    /// The run's view of the kernel's hooks.
    fn hooks(&self) -> HookScope<'_> {
        HookScope {
            hooks: &self.parts.hooks,
            emitter: &self.shared.emitter,
            cancel: &self.shared.cancel,
            run_id: &self.shared.run_id,
            session_id: &self.shared.session_id,
            entries: &self.hook_entries,
        }
    }

    /// Dispatches an observe-only point (nothing is built without a handler).
    async fn observe(&self, point: HookPoint, payload: impl FnOnce() -> serde_json::Value) {
        let hooks = self.hooks();
        if hooks.handles(point) {
            hooks.dispatch(point, None, payload(), None).await;
        }
    }

    /// Appends the entries hook handlers gave since the last append.
    async fn append_hook_entries(&self) -> Result<(), Stop> {
        let entries = self.hooks().take_entries();
        if !entries.is_empty() {
            self.writer.append(&self.shared.emitter, entries).await?;
        }
        Ok(())
    }

    /// The `input` hooks on the prompt: transformed (to content blocks,
    /// checked), supplemented (text blocks added), or blocked (the run
    /// fails, nothing of the prompt stored).
    async fn hook_input(&self, prompt: Vec<UserContent>) -> Result<Vec<UserContent>, Stop> {
        let hooks = self.hooks();
        if !hooks.handles(HookPoint::Input) {
            return Ok(prompt);
        }
        let check = |content: &serde_json::Value| match serde_json::from_value::<Vec<UserContent>>(
            content.clone(),
        ) {
            Ok(blocks) if !blocks.is_empty() => Ok(()),
            Ok(_) => Err("it has no content block".to_owned()),
            // Never the value, nor serde's words about it.
            Err(_) => Err("it is not a list of content blocks".to_owned()),
        };
        let subject = Subject {
            key: "content",
            check: &check,
            strict: false,
        };
        let payload = serde_json::json!({ "content": prompt });
        let dispatched = hooks
            .dispatch(HookPoint::Input, None, payload, Some(subject))
            .await;
        blocked_run(HookPoint::Input, dispatched.blocked)?;
        let mut prompt = dispatched
            .transformed
            .and_then(|content| serde_json::from_value(content).ok())
            .unwrap_or(prompt);
        prompt.extend(
            dispatched
                .supplements
                .into_iter()
                .map(|(_, text)| UserContent::Text { text }),
        );
        Ok(prompt)
    }

    /// The `before_run` hooks, after the prompt is stored: a supplement is
    /// stored as a user message of context; a block fails the run.
    async fn hook_before_run(&self, prompt: Vec<UserContent>) -> Result<(), Stop> {
        let hooks = self.hooks();
        if !hooks.handles(HookPoint::BeforeRun) {
            return Ok(());
        }
        let payload = serde_json::json!({ "content": prompt, "mode": self.mode });
        let dispatched = hooks
            .dispatch(HookPoint::BeforeRun, None, payload, None)
            .await;
        self.append_hook_entries().await?;
        blocked_run(HookPoint::BeforeRun, dispatched.blocked)?;
        if dispatched.supplements.is_empty() {
            return Ok(());
        }
        let content = dispatched
            .supplements
            .into_iter()
            .map(|(extension, text)| UserContent::Text {
                text: format!("[context from extension {extension}]\n{text}"),
            })
            .collect();
        let message = Message::User(UserMessage::new(content));
        self.writer
            .append(
                &self.shared.emitter,
                vec![EntryPayload::Message {
                    message: message.clone(),
                }],
            )
            .await?;
        self.report_complete(message);
        Ok(())
    }

    /// Continues an interrupted run (docs/recovery.md): completes the batch the crash
    /// cut short, then goes on as the run would have.
    async fn resume(&mut self) -> Result<AssistantMessage, Stop> {
        if let Some(moved) = &self.workspace_moved {
            self.shared.emitter.emit(RunEventKind::Warning {
                code: "workspace_moved".into(),
                message: format!(
                    "resuming session {} in workspace {}, not in its own workspace {}: the \
                     interrupted calls are judged against the files in {}",
                    self.shared.session_id, moved.to, moved.from, moved.to
                ),
            });
        }
        let mut run_start = self.run_start();
        if let EntryPayload::RunStart {
            workspace_moved, ..
        } = &mut run_start
        {
            workspace_moved.clone_from(&self.workspace_moved);
        }
        let runner = self.tool_runner();
        let span = tracing::info_span!(
            "keel.recovery",
            otel.name = "recovery",
            keel.run.id = %self.shared.run_id,
            gen_ai.conversation.id = %self.shared.session_id,
            keel.recovery.results = tracing::field::Empty,
        );
        let recovered = recovery::recover(&runner, &self.writer, run_start)
            .instrument(span.clone())
            .await?;
        span.record("keel.recovery.results", recovered.results.len());
        for result in recovered.results {
            self.report_complete(Message::ToolResult(result));
        }
        match recovered.settled {
            Some(message) => Ok(message),
            None => self.continue_run().await,
        }
    }

    /// The `run_start` entry that makes an interrupted run recognisable.
    fn run_start(&self) -> EntryPayload {
        EntryPayload::RunStart {
            run_id: self.shared.run_id.clone(),
            mode: self.mode,
            workspace_moved: None,
        }
    }

    /// Records how the run ended; a failure to record is only logged, as
    /// the run's outcome is already decided (a later run sees it as
    /// interrupted, which is safe).
    async fn record_run_end(&self, result: &Result<AssistantMessage, Stop>) {
        let state = match result {
            Ok(_) => RunEndState::Settled,
            Err(Stop::Cancelled) => RunEndState::Cancelled,
            Err(Stop::Failed(_)) => RunEndState::Failed,
        };
        self.observe(HookPoint::RunEnd, || serde_json::json!({ "state": state }))
            .await;
        let end = EntryPayload::RunEnd {
            run_id: self.shared.run_id.clone(),
            state,
        };
        let mut group = self.hooks().take_entries();
        group.extend(self.record_snapshot(SnapshotReason::RunEnd).await);
        group.push(end);
        if let Err(error) = self.writer.append(&self.shared.emitter, group).await {
            tracing::warn!(%error, "the run's end could not be recorded");
        }
    }

    /// Records the workspace as it is now in the session's snapshots
    /// (`crate::snapshots`); a failure is a `snapshot_failed` warning, never
    /// the run's end.
    async fn record_snapshot(&self, reason: SnapshotReason) -> Option<EntryPayload> {
        let recorded = crate::snapshots::record_for_run(
            self.parts.store.as_ref(),
            &self.shared.session_id,
            self.parts.workspace.root(),
            self.parts.workspace_snapshots.as_ref(),
            reason,
        )
        .await;
        match recorded {
            Ok(payload) => payload,
            Err(error) => {
                tracing::warn!(%error, "no workspace snapshot was recorded");
                self.shared.emitter.emit(RunEventKind::Warning {
                    code: "snapshot_failed".into(),
                    message: format!("the workspace snapshot was not recorded: {error}"),
                });
                None
            }
        }
    }

    fn tool_runner(&self) -> ToolRunner<'_> {
        ToolRunner {
            parts: self.parts,
            shared: self.shared,
            writer: &self.writer,
            mode: self.mode,
            requests: &self.permission_requests,
            rules: &self.rules,
            receipt_keys: std::sync::Mutex::default(),
            hook_entries: &self.hook_entries,
            late: self.late.registry(),
        }
    }

    /// Waits (cancellably) for the sources a run requires; their tools
    /// join before the first request.
    async fn await_required_tools(&mut self) -> Result<(), Stop> {
        let waited = tokio::select! {
            waited = self.late.await_required(&self.parts.tools) => waited,
            () = self.shared.cancel.cancelled() => return Err(Stop::Cancelled),
        };
        match waited {
            Ok(joined) => {
                let any = self.announce_joined(joined);
                self.record_joined(any).await
            }
            Err(message) => Err(Stop::Failed(RunError::new(
                ErrorSource::Extension,
                RunErrorCode::ExtensionFailed,
                message,
            ))),
        }
    }

    /// Lets the tools whose sources became ready join, from this turn on,
    /// and records the configuration they make.
    async fn join_late_tools(&mut self) -> Result<(), Stop> {
        let joined = self.late.join(&self.parts.tools);
        let any = self.announce_joined(joined);
        self.record_joined(any).await
    }

    /// Offers what joined from now on, and says so; whether any tool did.
    fn announce_joined(&mut self, joined: Vec<crate::late_tools::Joined>) -> bool {
        let mut any = false;
        for joined in joined {
            if let Some(reason) = &joined.failed {
                self.shared.emitter.emit(RunEventKind::Warning {
                    code: "extension_failed".into(),
                    message: format!("extension `{}` has no tools: {reason}", joined.record.name),
                });
                continue;
            }
            if !joined.clashes.is_empty() {
                self.shared.emitter.emit(RunEventKind::Warning {
                    code: "tool_name_taken".into(),
                    message: format!(
                        "extension `{}`: tools {} were left out, their names are taken",
                        joined.record.name,
                        joined.clashes.join(", ")
                    ),
                });
            }
            self.frame.tools.extend(joined.specs);
            self.frame.tools.extend(joined.search);
            if !joined.deferred.is_empty() {
                let listing = crate::tool_search::listing(&joined.deferred);
                self.frame.system_prompt.push_str("\n\n");
                self.frame.system_prompt.push_str(&listing);
                self.frame.deferred.extend(joined.deferred);
            }
            any |= !joined.record.tools.is_empty();
            self.joined.push(joined.record.clone());
            self.shared.emitter.emit(RunEventKind::ExtensionRegistered {
                extension: joined.record,
            });
        }
        any
    }

    async fn continue_run(&mut self) -> Result<AssistantMessage, Stop> {
        loop {
            let settled = self.run_turns().await?;
            match self.shared.take_pending_or_close() {
                Some((queue, text)) => {
                    self.add_user_message(UserMessage::text(text), Some(queue), None)
                        .await?;
                }
                None => return Ok(settled),
            }
        }
    }

    /// Runs turns until the model answers without tool calls and no steering
    /// is queued; returns that final answer.
    async fn run_turns(&mut self) -> Result<AssistantMessage, Stop> {
        loop {
            self.check_turn_budget()?;
            self.turn += 1;
            self.shared
                .emitter
                .emit(RunEventKind::TurnStart { turn: self.turn });
            let turn = self.turn;
            self.join_late_tools().await?;
            self.observe(HookPoint::TurnStart, || serde_json::json!({ "turn": turn }))
                .await;
            let message = self.stream_with_retry().await?;
            self.cost_usd = self
                .cost_usd
                .and_then(|so_far| Some(so_far + message.usage.cost_usd?));
            self.last = Some(message.clone());
            let calls: Vec<ToolCall> = message.tool_calls().cloned().collect();
            if message.stop_reason == StopReason::Length {
                self.shared.emitter.emit(RunEventKind::Warning {
                    code: "reply_cut".into(),
                    message: cut_reply_text(&message, calls.len()),
                });
            }
            if !calls.is_empty() {
                self.run_tools(&calls).await?;
            }
            let context = self.budget.usage(&self.writer).await;
            self.shared.emitter.emit(RunEventKind::TurnEnd {
                turn: self.turn,
                context: Some(context),
            });
            self.observe(HookPoint::TurnEnd, || serde_json::json!({ "turn": turn }))
                .await;
            self.append_hook_entries().await?;
            if self.shared.cancel.is_cancelled() {
                return Err(Stop::Cancelled);
            }
            let steering = self.shared.take_steering();
            for text in &steering {
                self.add_user_message(UserMessage::text(text), Some(QueueKind::Steer), None)
                    .await?;
            }
            if calls.is_empty() && steering.is_empty() {
                return Ok(message);
            }
        }
    }

    /// Fails the run before the next request when a turn or cost limit is reached.
    fn check_turn_budget(&self) -> Result<(), Stop> {
        let fail = |code, message| {
            Err(Stop::Failed(RunError::new(
                ErrorSource::Kernel,
                code,
                message,
            )))
        };
        if let Some(limit) = self.max_turns
            && self.turn >= limit
        {
            return fail(
                RunErrorCode::TurnLimit,
                format!("the run reached its limit of {limit} turns"),
            );
        }
        match (self.max_cost_usd, self.cost_usd) {
            (Some(limit), Some(cost)) if cost > limit => fail(
                RunErrorCode::BudgetExceeded,
                format!("the run's responses cost ${cost:.4}, past its budget of ${limit:.4}"),
            ),
            (Some(limit), None) => fail(
                RunErrorCode::CostUnknown,
                format!(
                    "the cost of a response is unknown (the model has no prices), so the budget \
                     of ${limit:.4} cannot be kept; set the model's input_price and output_price \
                     in config.toml (0 for a free local model)"
                ),
            ),
            _ => Ok(()),
        }
    }

    /// Persists a user message (the prompt or an injected one) and reports it.
    /// The prompt (no queue) opens the run: the workspace snapshot the run
    /// starts from and its `run_start` go first in the same group.
    async fn add_user_message(
        &self,
        message: UserMessage,
        queue: Option<QueueKind>,
        snapshot: Option<EntryPayload>,
    ) -> Result<(), Stop> {
        let message = Message::User(message);
        let mut group = Vec::new();
        group.extend(snapshot);
        if queue.is_none() {
            group.push(self.run_start());
        }
        group.push(EntryPayload::Message {
            message: message.clone(),
        });
        let entries = self.writer.append(&self.shared.emitter, group).await?;
        if let (Some(queue), Some(entry)) = (queue, entries.last()) {
            self.shared.emitter.emit(RunEventKind::MessageInjected {
                queue,
                entry_id: entry.id.clone(),
            });
        }
        self.report_complete(message);
        Ok(())
    }

    /// Reports a message that is complete when it starts (user, tool result).
    fn report_complete(&self, message: Message) {
        let emitter = &self.shared.emitter;
        emitter.emit(RunEventKind::MessageStart {
            message: message.clone(),
        });
        emitter.emit(RunEventKind::MessageEnd { message });
    }

    /// Streams one response, retrying retryable errors, and persists it.
    /// Makes room in the context first; a context overflow compacts and
    /// retries once.
    async fn stream_with_retry(&mut self) -> Result<AssistantMessage, Stop> {
        self.budget.make_room(&seams!(self)).await?;
        let mut overflowed = false;
        let mut attempts = self.parts.retry.start();
        loop {
            // A retry rebuilds the request instead of keeping a copy: nothing
            // is stored between attempts, so it is the same request (unless
            // a compaction made room in between).
            let (request, estimate) = self.request().await;
            let error = match self.stream_once(request, &attempts).await? {
                Ok(message) => {
                    self.observe(
                        HookPoint::ProviderResponse,
                        || serde_json::json!({ "message": message }),
                    )
                    .await;
                    self.budget.observe(&estimate, &message.usage);
                    return self.persist_assistant(message).await;
                }
                Err(error) => error,
            };
            if self.shared.cancel.is_cancelled() || error.kind == ProviderErrorKind::Cancelled {
                return Err(Stop::Cancelled);
            }
            if error.kind == ProviderErrorKind::ContextOverflow {
                if overflowed {
                    return Err(Stop::Failed(still_too_long(error)));
                }
                overflowed = true;
                self.budget
                    .after_overflow(&seams!(self), &estimate, &error.message)
                    .await?;
                attempts = self.parts.retry.start();
                continue;
            }
            let Some(retry) = attempts.after_failure(&error) else {
                let error = attempts.give_up(error);
                return Err(Stop::Failed(provider_failure(error, attempts.attempt())));
            };
            self.shared.emitter.emit(RunEventKind::ProviderRetry {
                attempt: retry.attempt,
                max_attempts: retry.max_attempts,
                delay_ms: u64::try_from(retry.delay.as_millis()).unwrap_or(u64::MAX),
                error,
            });
            tokio::select! {
                () = self.shared.cancel.cancelled() => return Err(Stop::Cancelled),
                () = tokio::time::sleep(retry.delay) => {}
            }
        }
    }

    /// One provider request: `Ok(Ok(message))` on `done`, `Ok(Err(error))` on
    /// a provider failure.
    async fn stream_once(
        &self,
        request: ModelRequest,
        attempts: &Attempts,
    ) -> Result<Result<AssistantMessage, ProviderError>, Stop> {
        let span = tracing::info_span!(
            "chat",
            otel.name = format!("chat {}", request.model),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = %self.parts.provider.name(),
            gen_ai.request.model = %request.model,
            gen_ai.conversation.id = %self.shared.session_id,
            keel.run.id = %self.shared.run_id,
            keel.attempt = attempts.attempt(),
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.response.id = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
            keel.time_to_first_chunk_ms = tracing::field::Empty,
            gen_ai.input.messages = tracing::field::Empty,
            gen_ai.output.messages = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        if self.parts.capture_content {
            span.record(
                "gen_ai.input.messages",
                serde_json::to_string(
                    &request
                        .messages
                        .iter()
                        .map(|message| message.as_ref())
                        .collect::<Vec<&Message>>(),
                )
                .unwrap_or_default(),
            );
        }
        self.observe(HookPoint::ProviderRequest, || {
            request_payload(&request, attempts)
        })
        .await;
        let asked = std::time::Instant::now();
        let mut stream = attempts.bound(
            self.parts
                .provider
                .stream(request, self.shared.cancel.child_token()),
        );
        let mut accumulator = Accumulator::for_provider(self.parts.provider.name());
        let mut ids = ResponseIds::new(self.writer.used_call_ids().await);
        let mut started = false;
        let result = async {
            while let Some(event) = stream.next().await {
                // Call ids are made unique before anything sees them.
                let event = ids.assign(event);
                if !started && !matches!(event, keel_protocol::ProviderEvent::Error { .. }) {
                    started = true;
                    let waited = u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX);
                    tracing::Span::current().record("keel.time_to_first_chunk_ms", waited);
                    self.shared.emitter.emit(RunEventKind::MessageStart {
                        message: Message::Assistant(AssistantMessage::default()),
                    });
                }
                let finished = match accumulator.apply(&event) {
                    Ok(finished) => finished,
                    Err(error) => {
                        trace_failure(error.kind);
                        return Err(error);
                    }
                };
                if !matches!(event, keel_protocol::ProviderEvent::Error { .. }) {
                    self.shared
                        .emitter
                        .emit(RunEventKind::MessageUpdate { delta: event });
                }
                match finished {
                    Some(Finished::Message(mut message)) => {
                        ids.attach(&mut message);
                        self.trace_response(&message);
                        return Ok(message);
                    }
                    Some(Finished::Error(error)) => {
                        trace_failure(error.kind);
                        return Err(error);
                    }
                    None => {}
                }
            }
            trace_failure(ProviderErrorKind::StreamDropped);
            Err(ProviderError::new(
                ProviderErrorKind::StreamDropped,
                "the provider stream ended before `done`",
            ))
        }
        .instrument(span)
        .await;
        Ok(result)
    }

    /// Records a finished response on the current `chat` span.
    fn trace_response(&self, message: &AssistantMessage) {
        let span = tracing::Span::current();
        if let Some(model) = &message.model {
            span.record("gen_ai.response.model", bounded(model));
        }
        if let Some(id) = &message.response_id {
            span.record("gen_ai.response.id", bounded(id));
        }
        span.record(
            "gen_ai.response.finish_reasons",
            wire_name(&message.stop_reason).as_str(),
        );
        let usage = &message.usage;
        span.record("gen_ai.usage.input_tokens", usage.input_tokens);
        span.record("gen_ai.usage.output_tokens", usage.output_tokens);
        span.record(
            "gen_ai.usage.cache_read.input_tokens",
            usage.cache_read_tokens,
        );
        span.record(
            "gen_ai.usage.cache_creation.input_tokens",
            usage.cache_write_tokens,
        );
        if self.parts.capture_content {
            span.record(
                "gen_ai.output.messages",
                serde_json::to_string(&message.content).unwrap_or_default(),
            );
        }
    }

    async fn persist_assistant(&self, message: AssistantMessage) -> Result<AssistantMessage, Stop> {
        let wrapped = Message::Assistant(message.clone());
        self.writer
            .append(
                &self.shared.emitter,
                vec![EntryPayload::Message {
                    message: wrapped.clone(),
                }],
            )
            .await?;
        self.shared
            .emitter
            .emit(RunEventKind::MessageEnd { message: wrapped });
        keel_failpoint::hit(keel_failpoint::AFTER_MESSAGE_END);
        Ok(message)
    }

    /// The next request, built by the pipeline, and its estimate.
    async fn request(&mut self) -> (ModelRequest, crate::tokens::Estimate) {
        let estimate = self.budget.estimate(&self.writer).await;
        let mut request = self.frame.request(self.writer.project_context().await);
        self.hook_context(&mut request).await;
        (request, estimate)
    }

    /// The `context` hooks on a turn's assembled request: supplements are
    /// added to this request's system prompt only (not stored).
    async fn hook_context(&self, request: &mut ModelRequest) {
        let hooks = self.hooks();
        if !hooks.handles(HookPoint::Context) {
            return;
        }
        let payload = serde_json::json!({
            "system_prompt": request.system_prompt,
            "messages": request.messages.iter().map(|message| message.as_ref()).collect::<Vec<&Message>>(),
            "tools": request.tools.iter().map(|tool| tool.name.as_str()).collect::<Vec<&str>>(),
        });
        let dispatched = hooks
            .dispatch(HookPoint::Context, None, payload, None)
            .await;
        for (extension, text) in dispatched.supplements {
            request
                .system_prompt
                .push_str(&format!("\n\n[context from extension {extension}]\n{text}"));
        }
    }

    /// Runs the batch and persists its results, in call order, as one group.
    async fn run_tools(&self, calls: &[ToolCall]) -> Result<(), Stop> {
        let runner = self.tool_runner();
        let results = runner.run_batch(calls).await?;
        let payloads = results
            .iter()
            .map(|result| EntryPayload::Message {
                message: Message::ToolResult(result.clone()),
            })
            .collect();
        self.writer.append(&self.shared.emitter, payloads).await?;
        keel_failpoint::hit(keel_failpoint::AFTER_RESULT);
        if let Some(receipts) = self.writer.receipts() {
            // The results are durable: the commands' receipts are moot.
            for key in runner.take_receipt_keys() {
                receipts.remove(&key);
            }
        }
        for result in results {
            self.report_complete(Message::ToolResult(result));
        }
        Ok(())
    }
}

/// The error of a request that overflowed again right after a compaction.
/// What `provider_request` handlers see of a request: everything but the
/// full history, which `context` handlers see (the number of messages).
fn request_payload(request: &ModelRequest, attempts: &Attempts) -> serde_json::Value {
    serde_json::json!({
        "model": request.model,
        "attempt": attempts.attempt(),
        "messages": request.messages.len(),
        "tools": request.tools.iter().map(|tool| tool.name.as_str()).collect::<Vec<&str>>(),
        "max_output_tokens": request.max_output_tokens,
    })
}

/// Fails the run when a hook at `point` blocked it.
fn blocked_run(point: HookPoint, blocked: Option<Blocked>) -> Result<(), Stop> {
    match blocked {
        None => Ok(()),
        Some(blocked) => Err(Stop::Failed(RunError::new(
            ErrorSource::Extension,
            RunErrorCode::Blocked,
            format!(
                "extension `{}` blocked the run at `{}` ({}): {}",
                blocked.extension,
                point.as_str(),
                blocked.code,
                blocked.message
            ),
        ))),
    }
}

fn still_too_long(error: ProviderError) -> RunError {
    RunError::new(
        ErrorSource::Provider,
        RunErrorCode::ContextOverflow,
        format!(
            "the request is still larger than the model's context window after compacting \
             (the provider said: {})",
            error.message
        ),
    )
}

fn provider_failure(error: ProviderError, attempts: u32) -> RunError {
    let message = if attempts > 1 {
        format!("{} (after {attempts} attempts)", error.message)
    } else {
        error.message
    };
    RunError::new(ErrorSource::Provider, error.kind.into(), message)
}

/// The warning a run owes its host when commands will not run in Keel's sandbox.
fn unsandboxed_warning(mode: PermissionMode, sandbox: SandboxMode) -> Option<String> {
    match (mode, sandbox) {
        (PermissionMode::Full, _) => Some(
            "full mode: every tool call is allowed without asking and commands run without \
             the OS sandbox, with all of this user's authority"
                .into(),
        ),
        (_, SandboxMode::External) => Some(
            "the host declared an external sandbox: Keel applies no OS restrictions to \
             commands and relies on the host's isolation"
                .into(),
        ),
        _ => None,
    }
}

/// What a `reply_cut` warning says: the reply stopped at the model's output
/// limit, so its text is unfinished, or its tool calls' arguments may be.
fn cut_reply_text(message: &AssistantMessage, calls: usize) -> String {
    let what = match calls {
        0 => "its text is unfinished".to_owned(),
        _ => "the arguments of its tool calls may be incomplete".to_owned(),
    };
    format!(
        "the model's reply was cut at its output limit ({} output tokens): {what}",
        message.usage.output_tokens
    )
}

/// Records a provider failure on the current `chat` span.
fn trace_failure(kind: ProviderErrorKind) {
    let span = tracing::Span::current();
    span.record("error.type", wire_name(&kind).as_str());
    span.record("otel.status_code", "ERROR");
}
