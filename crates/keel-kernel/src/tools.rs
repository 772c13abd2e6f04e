//! Runs one batch of tool calls through the fixed pipeline.
//!
//! Before anything runs, every call is looked up, validated, classified into
//! its Operation Intent and put to the policy; the policy's decisions are
//! recorded as one group, so a batch costs one durable append however many
//! calls it has. Then, per call: `tool_execution_start` → host approval when
//! the policy asked (that decision recorded on its own) → execute with
//! streamed progress, inside the OS sandbox level the decision carries →
//! `tool_execution_end`. A call whose intent writes git's or Keel's
//! metadata (scope `metadata`) and was allowed or approved runs with that
//! metadata writable; every other call sees it read-only. Where the policy
//! would ask, a session rule the host made earlier (an answer with scope
//! `always`, see `rules`) decides instead. Rules are consulted just before
//! the call would run, after the earlier calls of its batch ran, and only
//! hold while the call's target resolves to what the host approved (its
//! binding): so a rule made for one call of a batch already decides the
//! later calls of that batch, and a call whose symlink an earlier call
//! re-pointed is asked about again. An approval whose target changed while
//! the host was deciding is not run.
//!
//! Classifying a batch up front is sound because an intent only chooses
//! between allow, deny and ask: every tool re-resolves its paths inside the
//! workspace when it executes, and every process runs in the sandbox, so a
//! call that an earlier call of the batch changed the meaning of still
//! cannot act beyond what its decision allowed. Failures at any step become
//! error ToolResults; only a session store failure aborts the batch, because
//! then nothing more can be recorded truthfully.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use keel_protocol::{
    BatchMode, DecisionSource, EffectStarted, EntryPayload, GitCodeChange, GitCodeChangeKind,
    HookPoint, Idempotency, IntentKind, IntentScope, OperationIntent, PermissionAnswer,
    PermissionDecision, PermissionMode, PermissionResolution, PermissionRule, PermissionScope,
    RunEventKind, ToolCall, ToolErrorCode, ToolResultError, ToolResultMessage, ToolStatus,
    UserContent,
};
use keel_session::SessionError;
use keel_tools::changes::gitcode::GitCodeSnapshot;
use keel_tools::changes::quarantine::{self, Quarantine};
use keel_tools::sandbox::{Sandbox, SandboxLevel};
use keel_tools::scheduler;
use keel_tools::{
    CallReceipt, PreparedCall, ProgressSink, ShellExecution, ToolContext, ToolError, ToolOutput,
    ToolRegistry,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::hooks::{Blocked, Dispatched, HookScope, Subject};
use crate::ids::new_id;
use crate::journal::Overlay;
use crate::parts::KernelParts;
use crate::permission::{binding, sha256_hex};
use crate::policy::{PolicyDecision, sandbox_decides};
use crate::rules::{RuleMatch, SessionRules, binding_sha256, rule_for};
use crate::session_writer::SessionWriter;
use crate::shared::RunShared;
use crate::trace::{OTHER, bounded, wire_name};
use crate::user_rules::{CallFacts, Matrix, RuleEffect};

pub(crate) struct ToolRunner<'a> {
    pub(crate) parts: &'a KernelParts,
    pub(crate) shared: &'a RunShared,
    pub(crate) writer: &'a SessionWriter,
    pub(crate) mode: PermissionMode,
    pub(crate) requests: &'a AtomicU64,
    pub(crate) rules: &'a SessionRules,
    /// The receipt keys (`effect_started` entry ids) of the commands this
    /// runner journaled: their receipts are moot once the results are durable.
    pub(crate) receipt_keys: Mutex<Vec<String>>,
    /// Where hook handlers' entries wait for the turn loop.
    pub(crate) hook_entries: &'a Mutex<Vec<EntryPayload>>,
    /// The tools that joined this run late (`crate::late_tools`), looked
    /// up after the kernel's own.
    pub(crate) late: &'a ToolRegistry,
}

/// What the policy made of one call before the batch runs.
enum Verdict {
    /// It must not run: the error becomes its result.
    Refused(ToolError),
    /// It runs, its processes confined at this level (metadata writable
    /// when the first flag says so; watched for planted git code when the
    /// second does), its receipts keyed by its `effect_started` entry's id
    /// when it has one.
    Run(PreparedCall, SandboxLevel, bool, bool, Option<String>),
    /// The host decides.
    Ask {
        prepared: PreparedCall,
        intent: OperationIntent,
        reason: String,
        /// The call's journal record and the id its entry will have.
        effect: Option<(String, EffectStarted)>,
    },
}

impl ToolRunner<'_> {
    /// Runs the batch and returns the results in call order.
    pub(crate) async fn run_batch(
        &self,
        calls: &[ToolCall],
    ) -> Result<Vec<ToolResultMessage>, SessionError> {
        let mode = match (
            self.parts.tools.batch_mode(calls),
            self.late.batch_mode(calls),
        ) {
            (BatchMode::Parallel, BatchMode::Parallel) => BatchMode::Parallel,
            _ => BatchMode::Sequential,
        };
        let verdicts = self.decide_batch(calls).await?;
        let verdicts: Vec<Mutex<Option<Verdict>>> =
            verdicts.into_iter().map(|v| Mutex::new(Some(v))).collect();
        let outcome = scheduler::run_batch(calls.len(), mode, |index| {
            let verdict = verdicts
                .get(index)
                .and_then(|slot| slot.lock().ok()?.take());
            async move {
                match (calls.get(index), verdict) {
                    (Some(call), Some(verdict)) => {
                        // A later call of a sequential batch runs after the
                        // earlier ones changed the workspace: its hooks look
                        // again just before it runs.
                        let recheck = mode == BatchMode::Sequential && index > 0;
                        self.run_one(call, verdict, mode, recheck).await
                    }
                    _ => Err(SessionError::Unavailable(
                        "tool batch index out of range".into(),
                    )),
                }
            }
        })
        .await;
        outcome.results.into_iter().collect()
    }

    /// Puts every call of the batch to the policy and records its decisions
    /// as one group.
    async fn decide_batch(&self, calls: &[ToolCall]) -> Result<Vec<Verdict>, SessionError> {
        let mut decisions = Vec::new();
        let mut overlay = Overlay::new(&self.parts.workspace);
        let mut prepared = Vec::with_capacity(calls.len());
        for call in calls {
            prepared.push(self.prepare(call).await);
        }
        let verdicts = calls
            .iter()
            .zip(prepared)
            .map(|(call, prepared)| {
                let (mut verdict, decision) = self.decide(call, prepared, &mut overlay);
                decisions.extend(
                    decision
                        .map(|decision| (new_id(), EntryPayload::PermissionDecision { decision })),
                );
                // The effect journal rides in the decisions' group: one
                // durable append for the batch.
                if let Verdict::Run(prepared, _, _, _, key) = &mut verdict {
                    let effect = overlay.record(call, prepared.tool.as_ref(), &prepared.arguments);
                    if let Some(effect) = effect {
                        let id = new_id();
                        *key = Some(id.clone());
                        decisions.push((id, EntryPayload::EffectStarted { effect }));
                    }
                }
                verdict
            })
            .collect();
        if !decisions.is_empty() {
            let journaled = decisions
                .iter()
                .any(|(_, payload)| matches!(payload, EntryPayload::EffectStarted { .. }));
            self.prepare_journal(&decisions);
            self.writer
                .append_identified(&self.shared.emitter, decisions)
                .await?;
            if journaled {
                keel_failpoint::hit(keel_failpoint::AFTER_EFFECT_STARTED);
            }
        }
        Ok(verdicts)
    }

    /// The policy's verdict on one call, and the decision to record if the
    /// policy (not the host) decided.
    fn decide(
        &self,
        call: &ToolCall,
        prepared: Result<PreparedCall, ToolError>,
        overlay: &mut Overlay<'_>,
    ) -> (Verdict, Option<PermissionDecision>) {
        if self.shared.cancel.is_cancelled() {
            let error = ToolError::new(ToolErrorCode::Cancelled, "Not run: the run was cancelled");
            return (Verdict::Refused(error), None);
        }
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(error) => return (Verdict::Refused(error), None),
        };
        let classification = prepared
            .tool
            .classification(&prepared.arguments, &self.parts.workspace);
        let (intent, findings) = (classification.intent, classification.reasons);
        // Probed only for a call that could be left to the sandbox.
        let confined = classification.confinable
            && self.mode == PermissionMode::Auto
            && self.parts.sandbox_enforced();
        let matrix = self
            .parts
            .policy
            .evaluate_call(self.mode, &call.name, &intent, confined);
        // The user's rules, after the mode's matrix: deny rules win, ask
        // rules make an allow a question, allow rules answer a question.
        let facts = self.rule_facts(call, &prepared.arguments);
        // An allow rule is not applied here but just before the call runs
        // (`authorize_by_host`), against its target as it resolves then:
        // an earlier call of this batch may have re-pointed it.
        let policy = match self.parts.user_rules.effect(matrix_of(&matrix), &facts) {
            None | Some(RuleEffect::Allow(_)) => matrix,
            Some(RuleEffect::Deny(reason)) => PolicyDecision::Deny(reason),
            Some(RuleEffect::Ask(reason)) => PolicyDecision::Ask(reason),
        };
        let record = |resolution, reason: String| {
            Some(self.decision(
                call,
                &prepared.arguments,
                intent.clone(),
                resolution,
                DecisionSource::Policy,
                reason,
            ))
        };
        match policy {
            PolicyDecision::Allow(level) => {
                let reason = match sandbox_decides(self.mode, &intent, confined) {
                    true => confined_reason(level, &findings),
                    false => allowed_reason(self.mode, &intent, level),
                };
                let decision = record(PermissionResolution::Approved, reason);
                let metadata = writes_metadata(&intent);
                let watched = runs_programs(&intent);
                (
                    Verdict::Run(prepared, level, metadata, watched, None),
                    decision,
                )
            }
            PolicyDecision::Deny(reason) => {
                let error = denied(format!("Permission denied: {reason}"));
                let decision = record(PermissionResolution::Denied, reason);
                (Verdict::Refused(error), decision)
            }
            PolicyDecision::Ask(reason) => {
                // Session rules are consulted just before the call would
                // run (`authorize_by_host`), against its target as it
                // resolves then: an earlier call of this batch may have
                // re-pointed it.
                let effect = overlay
                    .record(call, prepared.tool.as_ref(), &prepared.arguments)
                    .map(|effect| (new_id(), effect));
                let verdict = Verdict::Ask {
                    prepared,
                    intent,
                    reason: with_findings(reason, &findings),
                    effect,
                };
                (verdict, None)
            }
        }
    }

    /// The registry that holds the call's tool: the kernel's, or the late
    /// tools' when only they have it (an unknown tool then fails there).
    fn registry(&self, call: &ToolCall) -> &ToolRegistry {
        match self.parts.tools.get(&call.name) {
            Some(_) => &self.parts.tools,
            None if self.late.get(&call.name).is_some() => self.late,
            None => &self.parts.tools,
        }
    }

    /// The run's view of the kernel's hooks.
    fn hooks(&self) -> HookScope<'_> {
        HookScope {
            hooks: &self.parts.hooks,
            emitter: &self.shared.emitter,
            cancel: &self.shared.cancel,
            run_id: &self.shared.run_id,
            session_id: &self.shared.session_id,
            entries: self.hook_entries,
        }
    }

    /// Looks the call's tool up and validates its arguments, then gives it
    /// to the `tool_call` hooks: the arguments a handler transforms are
    /// validated again (and, by `decide`, classified again); a handler may
    /// block the call.
    async fn prepare(&self, call: &ToolCall) -> Result<PreparedCall, ToolError> {
        let prepared = self.registry(call).prepare(call)?;
        let hooks = self.hooks();
        if !hooks.handles(HookPoint::ToolCall) {
            return Ok(prepared);
        }
        let with_arguments = |arguments: &Value| {
            let mut changed = call.clone();
            changed.arguments = arguments.clone();
            changed
        };
        // The error names the tool, never the value: schema errors quote
        // what they refuse, and a handler's value may hold anything.
        let check = |arguments: &Value| {
            self.registry(call)
                .prepare(&with_arguments(arguments))
                .map(|_| ())
                .map_err(|_| format!("they do not fit the schema of `{}`", call.name))
        };
        let dispatched = self
            .dispatch_tool_call(call, &prepared.arguments, false, &check)
            .await;
        if let Some(blocked) = dispatched.blocked {
            return Err(blocked_error(&blocked));
        }
        match dispatched.transformed {
            Some(arguments) => self.registry(call).prepare(&with_arguments(&arguments)),
            None => Ok(prepared),
        }
    }

    /// Gives a later call of a sequential batch to the `tool_call` hooks
    /// again just before it runs, with the workspace as the earlier calls
    /// left it (`recheck: true`): a handler may block it now (a path an
    /// earlier call re-pointed); a transform is not applied — the call was
    /// decided on its arguments.
    async fn recheck(&self, call: &ToolCall, prepared: &PreparedCall) -> Result<(), ToolError> {
        let hooks = self.hooks();
        if !hooks.handles(HookPoint::ToolCall) {
            return Ok(());
        }
        // A transform here is not applied: the call was decided on its
        // arguments, and a handler that transforms (say, appends a line)
        // would only do it again. Only a block counts.
        let dispatched = self
            .dispatch_tool_call(call, &prepared.arguments, true, &|_| Ok(()))
            .await;
        match dispatched.blocked {
            Some(blocked) => Err(blocked_error(&blocked)),
            None => Ok(()),
        }
    }

    /// Dispatches `tool_call` for `call` with `arguments`: in the first
    /// pass (a transform is checked by `check` and refuses the call when
    /// it fails) or at the recheck (`recheck`: a transform is never
    /// applied, so it cannot fail and refuse anything).
    async fn dispatch_tool_call(
        &self,
        call: &ToolCall,
        arguments: &Value,
        recheck: bool,
        check: &(dyn Fn(&Value) -> Result<(), String> + Sync),
    ) -> Dispatched {
        let payload = serde_json::json!({
            "tool_name": call.name,
            "call_id": call.id,
            "arguments": arguments,
            "workspace": self.parts.workspace.root(),
            "recheck": recheck,
        });
        let subject = Subject {
            key: "arguments",
            check,
            strict: !recheck,
        };
        self.hooks()
            .dispatch(
                HookPoint::ToolCall,
                Some((&call.name, &call.id)),
                payload,
                Some(subject),
            )
            .await
    }

    /// Gives a call's result to the `tool_result` hooks: a handler may
    /// replace its content (content blocks, checked) or block it (the
    /// result becomes a `blocked` error).
    async fn hook_result(
        &self,
        call: &ToolCall,
        arguments: &Value,
        mut result: ToolResultMessage,
    ) -> ToolResultMessage {
        let hooks = self.hooks();
        if !hooks.handles(HookPoint::ToolResult) {
            return result;
        }
        let payload = serde_json::json!({
            "tool_name": call.name,
            "call_id": call.id,
            "arguments": arguments,
            "workspace": self.parts.workspace.root(),
            "status": result.status,
            "content": result.content,
            "error": result.error,
        });
        // The error never quotes the value: it may hold anything.
        let check = |content: &Value| {
            serde_json::from_value::<Vec<UserContent>>(content.clone())
                .map(|_| ())
                .map_err(|_| "it is not a list of content blocks".to_owned())
        };
        let subject = Subject {
            key: "content",
            check: &check,
            strict: false,
        };
        let dispatched = hooks
            .dispatch(
                HookPoint::ToolResult,
                Some((&call.name, &call.id)),
                payload,
                Some(subject),
            )
            .await;
        if let Some(blocked) = dispatched.blocked {
            return to_result(call, Err(blocked_error(&blocked)));
        }
        if let Some(content) = dispatched
            .transformed
            .and_then(|content| serde_json::from_value(content).ok())
        {
            result.content = content;
        }
        result
    }

    /// A session rule's decision on a call the policy would ask about: the
    /// level to run at (or why not), and the decision to record.
    fn by_rule(
        &self,
        call: &ToolCall,
        arguments: &Value,
        intent: OperationIntent,
        rule: &PermissionRule,
    ) -> (Result<SandboxLevel, ToolError>, PermissionDecision) {
        let (allowed, reason) = match rule.resolution {
            PermissionResolution::Approved => (
                Ok(self.parts.policy.approved_level(self.mode, &intent)),
                format!(
                    "allowed by the session rule made when the host answered call {} with always",
                    rule.call_id
                ),
            ),
            PermissionResolution::Denied => {
                let reason = format!(
                    "denied by the session rule made when the host answered call {} with always",
                    rule.call_id
                );
                (Err(denied(format!("Permission {reason}"))), reason)
            }
        };
        let decision = self.decision(
            call,
            arguments,
            intent,
            rule.resolution,
            DecisionSource::SessionRule,
            reason,
        );
        (allowed, decision)
    }

    fn decision(
        &self,
        call: &ToolCall,
        arguments: &Value,
        intent: OperationIntent,
        resolution: PermissionResolution,
        source: DecisionSource,
        reason: String,
    ) -> PermissionDecision {
        // A permission decision is a moment, not an operation: its span
        // is opened and closed here, under the run's or the call's span.
        tracing::info_span!(
            "keel.permission",
            otel.name = "permission",
            gen_ai.tool.name = self.traced_name(call),
            gen_ai.tool.call.id = bounded(&call.id),
            keel.run.id = %self.shared.run_id,
            keel.permission.mode = self.mode.as_str(),
            keel.permission.resolution = wire_name(&resolution).as_str(),
            keel.permission.source = wire_name(&source).as_str(),
            keel.intent = wire_name(&intent.kind).as_str(),
        )
        .in_scope(|| {});
        {
            let mut permission_decision = PermissionDecision::new(
                call.id.clone(),
                call.name.clone(),
                self.mode,
                resolution,
                source,
                intent,
            );
            permission_decision.arguments_sha256 = sha256_hex(arguments);
            permission_decision.reason = reason;
            permission_decision
        }
    }

    /// The tool name spans (and the metrics derived from them) carry: the
    /// call's when it names a registered tool, else `_OTHER`. The model
    /// chooses the name, and an unregistered one could carry anything — file
    /// contents under prompt injection — at any length, with content
    /// capture off.
    fn traced_name<'c>(&self, call: &'c ToolCall) -> &'c str {
        if self.registry(call).get(&call.name).is_some() {
            &call.name
        } else {
            OTHER
        }
    }

    async fn run_one(
        &self,
        call: &ToolCall,
        verdict: Verdict,
        batch_mode: BatchMode,
        recheck: bool,
    ) -> Result<ToolResultMessage, SessionError> {
        let tool_name = self.traced_name(call);
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = format!("execute_tool {tool_name}"),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = tool_name,
            gen_ai.tool.call.id = bounded(&call.id),
            gen_ai.tool.type = "function",
            keel.run.id = %self.shared.run_id,
            keel.tool.status = tracing::field::Empty,
            gen_ai.tool.call.arguments = tracing::field::Empty,
            gen_ai.tool.call.result = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        if self.parts.capture_content {
            span.record(
                "gen_ai.tool.call.arguments",
                serde_json::to_string(&call.arguments).unwrap_or_default(),
            );
        }
        let traced = span.clone();
        async {
            self.shared.emitter.emit(RunEventKind::ToolExecutionStart {
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
                arguments: call.arguments.clone(),
                batch_mode,
            });
            // What the result hooks see: the arguments that ran.
            let arguments = match &verdict {
                Verdict::Run(prepared, ..) | Verdict::Ask { prepared, .. } => {
                    prepared.arguments.clone()
                }
                Verdict::Refused(_) => call.arguments.clone(),
            };
            let result = to_result(call, self.settle(call, verdict, recheck).await?);
            let result = self.hook_result(call, &arguments, result).await;
            traced.record("keel.tool.status", wire_name(&result.status).as_str());
            if let Some(error) = &result.error {
                traced.record("error.type", error.code.as_str());
                traced.record("otel.status_code", "ERROR");
            }
            if self.parts.capture_content {
                traced.record(
                    "gen_ai.tool.call.result",
                    serde_json::to_string(&result.content).unwrap_or_default(),
                );
            }
            self.shared.emitter.emit(RunEventKind::ToolExecutionEnd {
                result: result.clone(),
            });
            Ok(result)
        }
        .instrument(span)
        .await
    }

    /// Asks the host when the policy asked, then executes what may run.
    async fn settle(
        &self,
        call: &ToolCall,
        verdict: Verdict,
        recheck: bool,
    ) -> Result<Result<ToolOutput, ToolError>, SessionError> {
        let (prepared, level, metadata, watched, key) = match verdict {
            Verdict::Refused(error) => return Ok(Err(error)),
            Verdict::Run(prepared, level, metadata, watched, key) => {
                (prepared, level, metadata, watched, key)
            }
            Verdict::Ask {
                prepared,
                intent,
                reason,
                effect,
            } => {
                let metadata = writes_metadata(&intent);
                let watched = runs_programs(&intent);
                let key = effect.as_ref().map(|(id, _)| id.clone());
                match self
                    .authorize_by_host(call, &prepared, intent, reason, effect)
                    .await?
                {
                    Ok(level) => (prepared, level, metadata, watched, key),
                    Err(error) => return Ok(Err(error)),
                }
            }
        };
        if self.shared.cancel.is_cancelled() {
            let error = ToolError::new(ToolErrorCode::Cancelled, "Not run: the run was cancelled");
            return Ok(Err(error));
        }
        if recheck && let Err(error) = self.recheck(call, &prepared).await {
            return Ok(Err(error));
        }
        if !watched {
            let sandbox = self.sandbox(level, metadata, Vec::new());
            return Ok(self.execute(call, prepared, sandbox, key).await);
        }
        // One walk before the command: what it finds is both the baseline
        // of planted code and the nested repositories the sandbox keeps
        // read-only for this command.
        let before = self.git_code_snapshot().await;
        let root = self.parts.workspace.root();
        let nested = before
            .as_ref()
            .map(|before| {
                let paths = before.git_paths().into_iter();
                paths.map(|path| root.join(path)).collect()
            })
            .unwrap_or_default();
        let sandbox = self.sandbox(level, metadata, nested);
        let mut outcome = self.execute(call, prepared, sandbox, key).await;
        if let Some(before) = before
            && let Some(after) = self.git_code_snapshot().await
        {
            // A call approved to write `.git` made what it was approved
            // for; one that ran unconfined (`full`, or approved outside the
            // workspace) could have run the code itself.
            let quarantines = match !metadata && level != SandboxLevel::Unsandboxed {
                true => self.quarantine(call, &before, &after).await,
                false => Vec::new(),
            };
            let mut changes = after.changes_since(&before, &call.id);
            quarantine::mark(&mut changes, &quarantines);
            self.report_git_code(call, changes, &quarantines);
            tell_quarantined(&mut outcome, &quarantines);
        }
        Ok(outcome)
    }

    /// The sandbox of one call at `level`: git's metadata writable when
    /// `metadata`, else read-only along with the `nested` git directories.
    fn sandbox(&self, level: SandboxLevel, metadata: bool, nested: Vec<PathBuf>) -> Sandbox {
        Sandbox::new(level)
            .with_config(self.parts.sandbox.clone())
            .with_metadata_writable(metadata)
            .with_nested_git(nested)
    }

    /// Moves aside each new entrance to a repository the call planted code
    /// in (`changes::quarantine`).
    async fn quarantine(
        &self,
        call: &ToolCall,
        before: &GitCodeSnapshot,
        after: &GitCodeSnapshot,
    ) -> Vec<Quarantine> {
        if after.new_entrances_to_code(before).is_empty() {
            return Vec::new();
        }
        let root = self.parts.workspace.root().to_path_buf();
        let (before, after, id) = (before.clone(), after.clone(), call.id.clone());
        tokio::task::spawn_blocking(move || quarantine::quarantine(&root, &before, &after, &id))
            .await
            .unwrap_or_default()
    }

    /// The repository code in the workspace now (`None` if the snapshot
    /// could not be taken at all).
    async fn git_code_snapshot(&self) -> Option<GitCodeSnapshot> {
        let root = self.parts.workspace.root().to_path_buf();
        tokio::task::spawn_blocking(move || GitCodeSnapshot::capture(&root))
            .await
            .ok()
    }

    /// Names each piece of repository code a call planted in a `warning`
    /// event, and keeps it for the run's `workspace_changes`.
    fn report_git_code(
        &self,
        call: &ToolCall,
        changes: Vec<GitCodeChange>,
        quarantines: &[Quarantine],
    ) {
        if changes.is_empty() {
            return;
        }
        let mut by_repository: Vec<(String, Vec<String>)> = Vec::new();
        for change in &changes {
            let kind = match change.change {
                GitCodeChangeKind::Added => "new",
                _ => "changed",
            };
            let item = format!("`{}` ({kind})", change.item);
            match by_repository
                .iter_mut()
                .find(|(repository, _)| *repository == change.repository)
            {
                Some((_, items)) => items.push(item),
                None => by_repository.push((change.repository.clone(), vec![item])),
            }
        }
        let listed: Vec<String> = by_repository
            .iter()
            .map(|(repository, items)| format!("in `{repository}`: {}", items.join(", ")))
            .collect();
        let mut message = format!(
            "`{}` call {} left repository code that git runs at the next git command there; review it before running git: {}",
            call.name,
            call.id,
            listed.join("; ")
        );
        for quarantine in quarantines {
            let entrance = quarantine.shown_entrance();
            match (&quarantine.moved_to, quarantine.shown_moved_to()) {
                (Ok(_), Some(moved)) => message.push_str(&format!(
                    "; quarantined: the call made `{entrance}`, now moved to `{moved}` so that git no longer finds it"
                )),
                (Err(error), _) => message.push_str(&format!(
                    "; NOT quarantined: the call made `{entrance}`, which could not be moved aside ({error})"
                )),
                (Ok(_), None) => {}
            }
        }
        tracing::warn!(call_id = %call.id, count = changes.len(), quarantined = quarantines.len(), "call left repository code");
        self.shared.emitter.emit(RunEventKind::Warning {
            code: "git_code".to_owned(),
            message,
        });
        self.shared.add_git_code(changes);
    }

    /// What the user's rules look at in `call` (`~` being the `HOME` of the
    /// host's environment snapshot).
    fn rule_facts<'a>(&'a self, call: &'a ToolCall, arguments: &'a Value) -> CallFacts<'a> {
        CallFacts::new(
            &call.name,
            arguments,
            &self.parts.workspace,
            self.parts
                .sandbox
                .host_env
                .get("HOME")
                .map(std::path::PathBuf::from),
        )
    }

    /// Appends a decision made without asking the host (by a rule), with
    /// the journal record of the effect it lets start, as one group.
    async fn record_decision(
        &self,
        decision: PermissionDecision,
        effect: Option<(String, EffectStarted)>,
    ) -> Result<(), SessionError> {
        let mut group = vec![(new_id(), EntryPayload::PermissionDecision { decision })];
        group.extend(effect.map(|(id, effect)| (id, EntryPayload::EffectStarted { effect })));
        self.prepare_journal(&group);
        self.writer
            .append_identified(&self.shared.emitter, group)
            .await?;
        Ok(())
    }

    /// Decides by a session rule whose binding still holds, else asks the
    /// host and records its decision; the level to run at, or why not.
    async fn authorize_by_host(
        &self,
        call: &ToolCall,
        prepared: &PreparedCall,
        intent: OperationIntent,
        mut reason: String,
        effect: Option<(String, EffectStarted)>,
    ) -> Result<Result<SandboxLevel, ToolError>, SessionError> {
        let journal =
            |(id, effect): (String, EffectStarted)| (id, EntryPayload::EffectStarted { effect });
        let arguments = &prepared.arguments;
        let bind = || {
            binding_sha256(prepared.tool.approval_binding(
                arguments,
                &self.parts.workspace,
                &self.parts.sandbox.host_env,
            ))
        };
        // The user's rules, against the call's target as it resolves now.
        let facts = self.rule_facts(call, arguments);
        let by_user_rule = match self.parts.user_rules.effect(Matrix::Ask, &facts) {
            Some(RuleEffect::Allow(rule)) => {
                let level = self.parts.policy.approved_level(self.mode, &intent);
                let reason = format!("{rule} (sandbox: {})", level.as_str());
                Some((PermissionResolution::Approved, reason, Ok(level)))
            }
            Some(RuleEffect::Deny(rule)) => {
                let error = denied(format!("Permission denied: {rule}"));
                Some((PermissionResolution::Denied, rule, Err(error)))
            }
            Some(RuleEffect::Ask(_)) | None => None,
        };
        if let Some((resolution, reason, outcome)) = by_user_rule {
            let decision = self.decision(
                call,
                arguments,
                intent,
                resolution,
                DecisionSource::Policy,
                reason,
            );
            self.record_decision(decision, outcome.is_ok().then_some(effect).flatten())
                .await?;
            return Ok(outcome);
        }
        // Computed now, just before the call would run: what the host is
        // asked about, and what a rule must have been made for.
        let binding = bind();
        match self
            .rules
            .matching(call, arguments, &intent, || binding.clone())
        {
            RuleMatch::Matches(rule) => {
                let (allowed, decision) = self.by_rule(call, arguments, intent, &rule);
                self.record_decision(decision, allowed.is_ok().then_some(effect).flatten())
                    .await?;
                return Ok(allowed);
            }
            RuleMatch::Stale(rule) => {
                reason.push_str(&format!(
                    "; asked again: the session rule made when the host answered call {} with always was for what this call's target resolved to then, and it resolves differently now",
                    rule.call_id
                ));
            }
            RuleMatch::None => {}
        }
        let (answer, source) = self.ask_host(call, arguments, &intent, &reason).await;
        let mut resolution = answer.resolution;
        // The target changed while the host was deciding: what was
        // approved is not what would run.
        let moved = resolution == PermissionResolution::Approved && bind() != binding;
        if moved {
            resolution = PermissionResolution::Denied;
            reason.push_str("; not run: its target resolved differently after the host answered");
        }
        let level = self.parts.policy.approved_level(self.mode, &intent);
        let rule =
            (source == DecisionSource::Host && answer.scope == PermissionScope::Always && !moved)
                .then(|| rule_for(call, arguments, &intent, resolution, binding));
        let decision = self.decision(call, arguments, intent, resolution, source, reason);
        let mut group = vec![(new_id(), EntryPayload::PermissionDecision { decision })];
        group.extend(
            rule.clone()
                .map(|rule| (new_id(), EntryPayload::PermissionRule { rule })),
        );
        if resolution == PermissionResolution::Approved {
            group.extend(effect.map(journal));
        }
        let journaled = group
            .iter()
            .any(|(_, payload)| matches!(payload, EntryPayload::EffectStarted { .. }));
        self.prepare_journal(&group);
        self.writer
            .append_identified(&self.shared.emitter, group)
            .await?;
        if journaled {
            keel_failpoint::hit(keel_failpoint::AFTER_EFFECT_STARTED);
        }
        if let Some(rule) = rule {
            self.rules.add(rule);
        }
        Ok(match (resolution, source) {
            (PermissionResolution::Approved, _) => Ok(level),
            (PermissionResolution::Denied, DecisionSource::Kernel)
                if self.shared.cancel.is_cancelled() =>
            {
                Err(ToolError::new(
                    ToolErrorCode::Cancelled,
                    "Not run: the run was cancelled while waiting for permission",
                ))
            }
            (PermissionResolution::Denied, DecisionSource::Kernel) => Err(denied(
                "Permission denied: the host stopped listening, so nobody could approve it".into(),
            )),
            (PermissionResolution::Denied, _) if moved => Err(denied(
                "Permission denied: the call's target resolved differently after the host approved it"
                    .into(),
            )),
            (PermissionResolution::Denied, _) => {
                Err(denied("Permission denied by the host".into()))
            }
        })
    }

    async fn ask_host(
        &self,
        call: &ToolCall,
        arguments: &Value,
        intent: &OperationIntent,
        reason: &str,
    ) -> (PermissionAnswer, DecisionSource) {
        let number = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let bound = binding(&call.id, &call.name, arguments, intent);
        let request_id = format!("perm-{number}-{}", bound.get(..16).unwrap_or(&bound));
        let answer = self.shared.register_permission(request_id.clone());
        self.shared.emitter.emit(RunEventKind::PermissionRequested {
            request_id: request_id.clone(),
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            arguments: arguments.clone(),
            intent: intent.clone(),
            reason: reason.to_owned(),
        });
        let kernel_denies = (
            PermissionAnswer::once(PermissionResolution::Denied),
            DecisionSource::Kernel,
        );
        let (answer, source) = if self.shared.host_listening() {
            tokio::select! {
                answer = answer => match answer {
                    Ok(answer) => (answer, DecisionSource::Host),
                    Err(_) => kernel_denies,
                },
                () = self.shared.cancel.cancelled() => kernel_denies,
            }
        } else {
            kernel_denies
        };
        self.shared.forget_permission(&request_id);
        self.shared.emitter.emit(RunEventKind::PermissionResolved {
            request_id,
            resolution: answer.resolution,
            source,
        });
        (answer, source)
    }

    /// Executes the tool, forwarding its progress before its end event.
    async fn execute(
        &self,
        call: &ToolCall,
        prepared: PreparedCall,
        sandbox: Sandbox,
        receipt_key: Option<String>,
    ) -> Result<ToolOutput, ToolError> {
        let level = sandbox.level;
        let (sender, mut progress) = mpsc::unbounded_channel();
        let context = {
            let mut tool_context = ToolContext::new(
                call.id.clone(),
                if level == SandboxLevel::Unsandboxed {
                    Arc::new(self.parts.workspace.allowing_outside())
                } else {
                    self.parts.workspace.clone()
                },
            );
            tool_context.cancel = self.shared.cancel.child_token();
            tool_context.progress = ProgressSink::new(call.id.clone(), sender);
            tool_context.outputs = self.parts.outputs.clone();
            // What only `bash` understands: the sandbox at the decision's
            // level, the kernel's namespace holders, the call's receipts.
            let receipts = self
                .writer
                .receipts()
                .zip(receipt_key)
                .map(|(receipts, key)| CallReceipt::new(receipts, key));
            tool_context.extensions.insert(
                ShellExecution::new(sandbox.clone())
                    .holders(self.parts.holders.clone())
                    .receipts(receipts),
            );
            tool_context
        };
        let execution = prepared.tool.execute(prepared.arguments, context);
        tokio::pin!(execution);
        let outcome = loop {
            tokio::select! {
                biased;
                Some((call_id, progress)) = progress.recv() => {
                    self.shared.emitter.emit(RunEventKind::ToolExecutionUpdate { call_id, progress });
                }
                outcome = &mut execution => break outcome,
            }
        };
        while let Ok((call_id, progress)) = progress.try_recv() {
            self.shared
                .emitter
                .emit(RunEventKind::ToolExecutionUpdate { call_id, progress });
        }
        outcome
    }
}

/// Tells the model, in one line after the call's output, which new
/// repositories holding code were moved aside and what writing one needs.
fn tell_quarantined(outcome: &mut Result<ToolOutput, ToolError>, quarantines: &[Quarantine]) {
    let moved: Vec<String> = quarantines
        .iter()
        .filter_map(|quarantine| {
            let to = quarantine.shown_moved_to()?;
            Some(format!("`{}` → `{to}`", quarantine.shown_entrance()))
        })
        .collect();
    if moved.is_empty() {
        return;
    }
    let line = keel_protocol::UserContent::Text {
        text: format!(
            "[Keel quarantined a new git repository holding hooks or code-bearing config ({}): creating one needs approval to write `.git`.]",
            moved.join(", ")
        ),
    };
    match outcome {
        Ok(output) => output.content.push(line),
        Err(error) if error.content.is_empty() => {
            let message = keel_protocol::UserContent::Text {
                text: error.message.clone(),
            };
            error.content = vec![message, line];
        }
        Err(error) => error.content.push(line),
    }
}

/// Whether a call runs programs Keel cannot see into (a command, an
/// extension tool, anything unclassified): such a call is watched for the
/// git code it may leave (`changes::gitcode`). File tools name what they
/// write, and writing into a `.git` is asked about.
fn runs_programs(intent: &OperationIntent) -> bool {
    !matches!(intent.kind, IntentKind::Read | IntentKind::Write)
}

impl ToolRunner<'_> {
    /// Before a group that journals commands is appended: makes sure the
    /// session's journal directory exists and can be trusted (so that at a
    /// resume, a missing or untrusted directory is damage, never "no
    /// receipt yet"), reports it when not, and remembers the commands'
    /// receipt keys.
    fn prepare_journal(&self, group: &[(String, EntryPayload)]) {
        let keys: Vec<&String> = group
            .iter()
            .filter_map(|(id, payload)| match payload {
                EntryPayload::EffectStarted { effect }
                    if effect.idempotency == Idempotency::Command =>
                {
                    Some(id)
                }
                _ => None,
            })
            .collect();
        if keys.is_empty() {
            return;
        }
        let Some(receipts) = self.writer.receipts() else {
            return;
        };
        if let Err(damage) = receipts.prepare() {
            tracing::warn!(%damage, "the command journal cannot be used");
            self.shared.emitter.emit(RunEventKind::Warning {
                code: "journal_untrusted".into(),
                message: format!(
                    "{damage}: commands run without receipts, so a crash leaves their \
                     outcome unknown"
                ),
            });
        }
        if let Ok(mut known) = self.receipt_keys.lock() {
            known.extend(keys.into_iter().cloned());
        }
    }

    /// The receipt keys of the commands this runner journaled.
    pub(crate) fn take_receipt_keys(&self) -> Vec<String> {
        self.receipt_keys
            .lock()
            .map(|mut keys| std::mem::take(&mut *keys))
            .unwrap_or_default()
    }
}

/// Whether a call that runs may write git's and Keel's metadata: only when
/// its intent said it would, so that the allow or the host's approval was
/// of exactly that.
fn writes_metadata(intent: &OperationIntent) -> bool {
    intent.scope == IntentScope::Metadata
}

/// A policy decision as the user's rules see it.
fn matrix_of(decision: &PolicyDecision) -> Matrix {
    match decision {
        PolicyDecision::Allow(_) => Matrix::Allow,
        PolicyDecision::Ask(_) => Matrix::Ask,
        PolicyDecision::Deny(_) => Matrix::Deny,
    }
}

/// The recorded reason of a policy allow, naming the sandbox of commands.
fn allowed_reason(mode: PermissionMode, intent: &OperationIntent, level: SandboxLevel) -> String {
    let mode = mode.as_str();
    match intent.kind {
        IntentKind::Shell | IntentKind::Network | IntentKind::Unknown => {
            format!("allowed in {mode} mode (sandbox: {})", level.as_str())
        }
        _ => format!("allowed in {mode} mode"),
    }
}

/// The recorded reason of a call left to the sandbox in `auto`
/// ([`sandbox_decides`]), naming what the analysis could not resolve.
fn confined_reason(level: SandboxLevel, findings: &[String]) -> String {
    let mut reason = format!(
        "allowed in auto mode, confined by the OS sandbox ({}): nothing in it needs the \
         network, a path outside the workspace or `.git`/`.keel` writes",
        level.as_str()
    );
    if !findings.is_empty() {
        reason.push_str(&format!(
            ", and the rest is left to the sandbox ({})",
            findings.join("; ")
        ));
    }
    reason
}

/// The policy's reason to ask, followed by the tool's own findings (the
/// shell analysis's reasons), so the host sees why.
fn with_findings(reason: String, findings: &[String]) -> String {
    if findings.is_empty() {
        return reason;
    }
    format!("{reason} ({})", findings.join("; "))
}

/// The tool error a hook's block gives the model: `blocked`, or
/// `invalid_arguments` when a handler's transform failed the schema.
fn blocked_error(blocked: &Blocked) -> ToolError {
    let code = match blocked.invalid {
        true => ToolErrorCode::InvalidArguments,
        false => ToolErrorCode::Blocked,
    };
    let message = match blocked.invalid {
        true => blocked.message.clone(),
        false => format!(
            "Blocked by extension `{}` ({}): {}",
            blocked.extension, blocked.code, blocked.message
        ),
    };
    ToolError::new(code, message)
}

fn denied(message: String) -> ToolError {
    ToolError::new(ToolErrorCode::PermissionDenied, message)
}

/// Turns a tool outcome into the authoritative ToolResult.
pub(crate) fn to_result(
    call: &ToolCall,
    outcome: Result<ToolOutput, ToolError>,
) -> ToolResultMessage {
    match outcome {
        Ok(output) => {
            let mut tool_result_message = ToolResultMessage::new(
                call.id.clone(),
                call.name.clone(),
                ToolStatus::Success,
                output.content,
            );
            tool_result_message.error = None;
            tool_result_message.details = output.details;
            tool_result_message
        }
        Err(error) => {
            let status = if error.code == ToolErrorCode::Cancelled {
                ToolStatus::Cancelled
            } else {
                ToolStatus::Error
            };
            let mut content = error.content;
            if content.is_empty() {
                content.push(keel_protocol::UserContent::Text {
                    text: error.message.clone(),
                });
            }
            {
                let mut tool_result_message =
                    ToolResultMessage::new(call.id.clone(), call.name.clone(), status, content);
                tool_result_message.error = Some(ToolResultError::new(error.code, error.message));
                tool_result_message.details = error.details;
                tool_result_message
            }
        }
    }
}
