//! Replaying a recorded session through the kernel (`keel replay`).
//!
//! [`replay`] reads a session's active branch, drives a fresh run through
//! an [`keel_kernel::AgentKernel`] assembled as every host assembles one
//! ([`HostConfig`]) for each run recorded there, in order, and compares
//! the entries the replay wrote with the recorded ones.
//!
//! - The model is the replay provider ([`keel_provider::ReplayProvider`]):
//!   each run's recorded assistant messages answer its turn requests and
//!   its checkpoints' summaries its summary requests; a checkpoint written
//!   after a context overflow also stands for the refused request before
//!   it, which the replay refuses again as too long.
//! - Tools are the recorded run's tools by name. By default each is wrapped
//!   ([`RecordedTool`]): the kernel sees the real tool's name, spec, intent
//!   and binding, so permission decisions come out as in a normal run, but
//!   a call that runs returns the result recorded for that call id (after
//!   checking that the recorded call has the same tool and arguments; if
//!   not, the call fails with a `replay divergence` error, which then shows
//!   in the comparison). With [`ReplayOptions::live_tools`] the real tools
//!   run.
//! - The workspace is a temporary directory holding the recorded run-start
//!   snapshot of the first run (empty when the session recorded none;
//!   `live_tools` then refuses), deleted afterwards, beside a session
//!   store of the replay's own. The recorded session and workspace are
//!   only read.
//! - Each run gets its recorded prompt (the run's first user message), its
//!   recorded mode and configuration (provider and model names, tools,
//!   permission rules), the context window its checkpoints recorded, and
//!   the host answers its permission decisions recorded (`deny` for a
//!   request the recording did not answer); later user messages of the run
//!   are queued as follow-ups at its start.
//!
//! What is compared ([`compare`]): the two active branches entry by entry,
//! each entry as its JSON without `id`, `parent_id` and `timestamp`, with
//! every entry id it mentions replaced by the entry's position among the
//! compared entries and every run id by the run's position, and without
//! the call ids providers gave (`wire_id`: the replay streams the
//! session's own call ids), and without a checkpoint's token estimates
//! (`tokens_before`, `tokens_after`: they count the system prompt, which
//! names the workspace directory and the date, both the replay's own).
//! `label` entries and workspace snapshots other
//! than a run's start and end are left out; of a snapshot, the workspace
//! path and `new_bytes` (what the store already held) are left out. When
//! tools are served from the record the workspace never changes, so
//! workspace snapshots and the file evidence of `effect_started` entries
//! (hashes of the files before the call) are left out too.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use keel_kernel::RunSpec;
use keel_protocol::{
    AssistantMessage, CompactionTrigger, ContentBlock, DecisionSource, Entry, EntryPayload,
    Message, PermissionAnswer, PermissionMode, PermissionResolution, PermissionRuleLists,
    PermissionScope, ProviderError, ProviderErrorKind, RunEventKind, RunState, SnapshotReason,
    ToolErrorCode, ToolResultMessage, ToolStatus, UserContent,
};
use keel_provider::{Answer, Recording};
use keel_session::{JsonlStore, SessionStore};
use keel_tools::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use serde_json::{Map, Value, json};

use crate::{HostConfig, HostError, ProviderChoice};

/// How to replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// Re-execute the real tools in a fresh copy of the recorded run-start
    /// workspace instead of serving the recorded results.
    pub live_tools: bool,
}

/// Why a replay could not be made (a divergence is not an error: see
/// [`ReplayReport::divergence`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// Assembling the kernel or reading the session failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The session's active branch holds no run.
    #[error("session {session_id} records no run to replay")]
    NoRuns {
        /// The session.
        session_id: String,
    },
    /// `live_tools` needs the workspace the first run started in.
    #[error(
        "session {session_id} recorded no workspace snapshot at its first run's start, so \
         --live-tools has no workspace to run the tools in"
    )]
    NoStartSnapshot {
        /// The session.
        session_id: String,
    },
    /// The temporary workspace could not be made.
    #[error("cannot prepare the replay workspace: {0}")]
    Workspace(String),
    /// A replayed run could not be driven.
    #[error("cannot drive the replayed run: {0}")]
    Run(String),
}

impl ReplayError {
    /// A stable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Host(error) => error.code(),
            Self::NoRuns { .. } => "no_runs",
            Self::NoStartSnapshot { .. } => "no_snapshot",
            Self::Workspace(_) => "workspace",
            Self::Run(_) => "replay_run",
        }
    }
}

impl From<keel_session::SessionError> for ReplayError {
    fn from(error: keel_session::SessionError) -> Self {
        Self::Host(HostError::from(error))
    }
}

impl From<keel_kernel::KernelError> for ReplayError {
    fn from(error: keel_kernel::KernelError) -> Self {
        Self::Host(HostError::from(error))
    }
}

/// The first place where the replay and the recording differ.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Divergence {
    /// The position among the compared entries, from 1.
    pub position: usize,
    /// The recorded entry's id (`None`: the recording ends before it).
    pub recorded_entry_id: Option<String>,
    /// The tool call the entry concerns, with its tool's name.
    pub call: Option<(String, String)>,
    /// Where inside the entry the two first differ (a JSON pointer; empty
    /// for the whole entry).
    pub pointer: String,
    /// The recorded entry as compared (`None`: the recording ends first).
    pub recorded: Option<Value>,
    /// The replayed entry as compared (`None`: the replay ends first).
    pub replayed: Option<Value>,
}

/// One replayed run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReplayedRun {
    /// How it ended.
    pub state: RunState,
    /// Its error, when it failed.
    pub error: Option<String>,
    /// Its workspace changes as a unified diff (empty when none or when
    /// tools were served from the record).
    pub patch: String,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReplayReport {
    /// The recorded session.
    pub session_id: String,
    /// Whether the real tools ran.
    pub live_tools: bool,
    /// The replayed runs, in order.
    pub runs: Vec<ReplayedRun>,
    /// How many entries were compared on the recorded side.
    pub compared: usize,
    /// The first divergence (`None`: identical).
    pub divergence: Option<Divergence>,
    /// What the served tools noticed: calls whose recorded tool or
    /// arguments differ, or that the recording has no result for.
    pub tool_notes: Vec<String>,
}

/// One recorded run: where it starts and what it was given.
struct RecordedRun {
    mode: PermissionMode,
    configuration: Option<Configuration>,
    prompt: Vec<UserContent>,
    follow_ups: Vec<String>,
    recording: Recording,
}

#[derive(Clone)]
struct Configuration {
    provider: String,
    model: String,
    tools: Vec<String>,
    permissions: PermissionRuleLists,
}

/// A recorded tool call and its result.
struct RecordedCall {
    name: String,
    arguments: Value,
    result: Option<ToolResultMessage>,
    served: bool,
}

/// The recorded calls by id, shared by the wrapped tools of every run.
#[derive(Default)]
struct CallRecord {
    calls: Mutex<HashMap<String, RecordedCall>>,
    notes: Mutex<Vec<String>>,
}

impl CallRecord {
    fn note(&self, note: String) {
        self.notes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(note);
    }

    /// The recorded outcome of `call_id` to `name` with `arguments`.
    fn serve(&self, call_id: &str, name: &str, arguments: &Value) -> Result<ToolOutput, ToolError> {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let diverged = |what: String| {
            ToolError::new(
                ToolErrorCode::ToolError,
                format!("replay divergence: {what}"),
            )
        };
        let Some(call) = calls.get_mut(call_id) else {
            let what = format!("the recording has no call {call_id} ({name})");
            self.note(what.clone());
            return Err(diverged(what));
        };
        let mismatch = if call.name != name {
            Some(format!(
                "call {call_id} was recorded to `{}`, the replay calls `{name}`",
                call.name
            ))
        } else if &call.arguments != arguments {
            Some(format!(
                "call {call_id} ({name}) was recorded with arguments {}, the replay has {}",
                call.arguments, arguments
            ))
        } else if call.served {
            Some(format!("call {call_id} ({name}) ran twice in the replay"))
        } else {
            None
        };
        if let Some(what) = mismatch {
            self.note(what.clone());
            return Err(diverged(what));
        }
        call.served = true;
        let Some(result) = call.result.clone() else {
            let what = format!("the recording has no result for call {call_id} ({name})");
            self.note(what.clone());
            return Err(diverged(what));
        };
        match result.status {
            ToolStatus::Success => {
                let mut output = ToolOutput::new(result.content);
                output.details = result.details;
                Ok(output)
            }
            status => {
                let (code, message) = match result.error {
                    Some(error) => (error.code, error.message),
                    None if status == ToolStatus::Cancelled => {
                        let cancelled = ToolError::cancelled();
                        (cancelled.code, cancelled.message)
                    }
                    None => (ToolErrorCode::ToolError, String::new()),
                };
                let mut error = ToolError::new(code, message);
                error.content = result.content;
                error.details = result.details;
                Err(error)
            }
        }
    }
}

/// A real tool whose calls return the recorded results: the kernel sees
/// the real tool in everything but execution, so it classifies, asks and
/// journals the calls as it did in the recorded run.
struct RecordedTool {
    inner: Arc<dyn Tool>,
    record: Arc<CallRecord>,
}

impl Tool for RecordedTool {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn parameters(&self) -> Value {
        self.inner.parameters()
    }

    fn execution_mode(&self) -> keel_protocol::ExecutionMode {
        self.inner.execution_mode()
    }

    fn intent(
        &self,
        arguments: &Value,
        workspace: &keel_tools::Workspace,
    ) -> keel_protocol::OperationIntent {
        self.inner.intent(arguments, workspace)
    }

    fn classify(
        &self,
        arguments: &Value,
        workspace: &keel_tools::Workspace,
    ) -> (keel_protocol::OperationIntent, Vec<String>) {
        self.inner.classify(arguments, workspace)
    }

    fn classification(
        &self,
        arguments: &Value,
        workspace: &keel_tools::Workspace,
    ) -> keel_tools::Classification {
        self.inner.classification(arguments, workspace)
    }

    fn approval_binding(
        &self,
        arguments: &Value,
        workspace: &keel_tools::Workspace,
        env: &keel_tools::env::HostEnv,
    ) -> Option<Value> {
        self.inner.approval_binding(arguments, workspace, env)
    }

    fn idempotency(&self) -> keel_protocol::Idempotency {
        self.inner.idempotency()
    }

    fn planned_files(
        &self,
        arguments: &Value,
        workspace: &keel_tools::Workspace,
        current: &dyn Fn(&Path) -> Option<Vec<u8>>,
    ) -> Vec<keel_tools::evidence::PlannedFile> {
        self.inner.planned_files(arguments, workspace, current)
    }

    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        let outcome = self
            .record
            .serve(&context.call_id, self.inner.name(), &arguments);
        Box::pin(async move { outcome })
    }
}

/// Replays session `session_id` of `store` (which is only read) and
/// compares the replay with the recording.
pub async fn replay(
    store: &Arc<dyn SessionStore>,
    session_id: &str,
    options: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let branch = store.active_branch(session_id).await?;
    let runs = recorded_runs(&branch);
    if runs.is_empty() {
        return Err(ReplayError::NoRuns {
            session_id: session_id.to_owned(),
        });
    }
    // The window a compaction by threshold worked with; one after an
    // overflow states the window learned from the provider's error, which
    // the replay learns again from the recorded failure.
    let window = branch.iter().find_map(|entry| match &entry.payload {
        EntryPayload::Checkpoint {
            metrics: Some(metrics),
            ..
        } if metrics.trigger != CompactionTrigger::Overflow => metrics.window,
        _ => None,
    });
    let answers = host_answers(&branch);
    let record = Arc::new(call_record(&branch));

    let scratch = tempfile::Builder::new()
        .prefix("keel-replay-")
        .tempdir()
        .map_err(|error| ReplayError::Workspace(error.to_string()))?;
    let workspace = scratch.path().join("workspace");
    let start = branch.iter().find_map(|entry| match &entry.payload {
        EntryPayload::WorkspaceSnapshot { snapshot }
            if snapshot.reason == SnapshotReason::RunStart =>
        {
            Some(entry.id.clone())
        }
        _ => None,
    });
    match start {
        Some(at) => {
            keel_kernel::restore_snapshot(store, session_id, Some(&at), &workspace).await?;
        }
        None if options.live_tools => {
            return Err(ReplayError::NoStartSnapshot {
                session_id: session_id.to_owned(),
            });
        }
        None => std::fs::create_dir_all(&workspace)
            .map_err(|error| ReplayError::Workspace(error.to_string()))?,
    }

    // A store of its own in the scratch directory (a memory store records
    // no workspace snapshots), so the recorded session is only read.
    let replay_store: Arc<dyn SessionStore> = Arc::new(
        JsonlStore::new(scratch.path().join("sessions"))
            .map_err(|error| ReplayError::Workspace(error.to_string()))?,
    );
    let mut replay_session: Option<String> = None;
    let mut replayed = Vec::new();
    let mut configuration = None;
    for run in runs {
        configuration = run.configuration.clone().or(configuration);
        let mut config = HostConfig::new(ProviderChoice::Replay {
            name: configuration
                .as_ref()
                .map_or_else(|| "replay".to_owned(), |c| c.provider.clone()),
            recording: run.recording.clone(),
            model: configuration.as_ref().map(|c| c.model.clone()),
        })
        .workspace(&workspace);
        if let Some(configuration) = &configuration {
            config.tools = Some(configuration.tools.clone());
            config.permissions = configuration.permissions.clone();
        }
        config.context_window = window;
        let kernel = if options.live_tools {
            config.kernel(Arc::clone(&replay_store))?
        } else {
            let record = Arc::clone(&record);
            config.kernel_with(Arc::clone(&replay_store), move |tools| {
                tools
                    .into_iter()
                    .map(|inner| {
                        Arc::new(RecordedTool {
                            inner,
                            record: Arc::clone(&record),
                        }) as Arc<dyn Tool>
                    })
                    .collect()
            })?
        };
        let spec = RunSpec::new("")
            .content(run.prompt.clone())
            .mode(run.mode)
            .session_opt(replay_session.clone());
        let handle = kernel.create_run(spec).await?;
        for text in &run.follow_ups {
            handle
                .follow_up(text.clone())
                .map_err(|error| ReplayError::Run(error.to_string()))?;
        }
        let mut events = handle
            .events()
            .map_err(|error| ReplayError::Run(error.to_string()))?;
        while let Some(event) = events.next().await {
            if let RunEventKind::PermissionRequested {
                request_id,
                call_id,
                ..
            } = &event.kind
            {
                let answer = answers
                    .get(call_id)
                    .copied()
                    .unwrap_or(PermissionAnswer::once(PermissionResolution::Denied));
                // A stale request id only means the run moved on.
                let _ = handle.resolve_permission(request_id, answer);
            }
        }
        let result = handle.result().await;
        let patch = if options.live_tools {
            handle
                .workspace_changes()
                .await
                .map(|changes| changes.patch)
                .unwrap_or_default()
        } else {
            String::new()
        };
        replay_session = Some(result.session_id.clone());
        replayed.push(ReplayedRun {
            state: result.state,
            error: result.error.map(|error| error.message),
            patch,
        });
    }
    let replay_branch = match &replay_session {
        Some(id) => replay_store.active_branch(id).await?,
        None => Vec::new(),
    };
    let comparison = Comparison {
        workspace: options.live_tools,
    };
    let (compared, divergence) = comparison.compare(&branch, &replay_branch);
    let tool_notes = std::mem::take(
        &mut *record
            .notes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    );
    Ok(ReplayReport {
        session_id: session_id.to_owned(),
        live_tools: options.live_tools,
        runs: replayed,
        compared,
        divergence,
        tool_notes,
    })
}

/// The runs of `branch`, in order, each with its prompt and its answers.
fn recorded_runs(branch: &[Entry]) -> Vec<RecordedRun> {
    let mut runs: Vec<RecordedRun> = Vec::new();
    let mut configuration = None;
    let mut in_run = false;
    for entry in branch {
        match &entry.payload {
            EntryPayload::Configuration {
                provider,
                model,
                tools,
                permissions,
                ..
            } => {
                configuration = Some(Configuration {
                    provider: provider.clone(),
                    model: model.clone(),
                    tools: tools.clone(),
                    permissions: permissions.clone(),
                });
            }
            EntryPayload::RunStart { mode, .. } => {
                in_run = true;
                runs.push(RecordedRun {
                    mode: *mode,
                    configuration: configuration.take(),
                    prompt: Vec::new(),
                    follow_ups: Vec::new(),
                    recording: Recording::default(),
                });
            }
            EntryPayload::RunEnd { .. } => in_run = false,
            EntryPayload::Message { message } if in_run => {
                let Some(run) = runs.last_mut() else { continue };
                match message {
                    Message::User(user) if run.prompt.is_empty() => {
                        run.prompt = user.content.clone();
                    }
                    Message::User(user) => run.follow_ups.push(user.plain_text()),
                    Message::Assistant(assistant) => {
                        run.recording.turns.push(assistant.clone().into());
                    }
                    Message::ToolResult(_) => {}
                }
            }
            EntryPayload::Checkpoint {
                summary, metrics, ..
            } if in_run => {
                let Some(run) = runs.last_mut() else { continue };
                // A compaction after an overflow: the turn request before
                // it was refused as too long, stating the window.
                if let Some(metrics) = metrics
                    && metrics.trigger == CompactionTrigger::Overflow
                {
                    let stated = metrics.window.map_or_else(String::new, |window| {
                        format!(": the maximum context length is {window} tokens")
                    });
                    run.recording.turns.push(Answer::Failure(ProviderError::new(
                        ProviderErrorKind::ContextOverflow,
                        format!("replay: the recorded request was refused as too long{stated}"),
                    )));
                }
                // The kernel keeps only the last answer of a compaction's
                // summary requests: each request gets the kept summary,
                // the first one the summed usage.
                let requests = metrics
                    .as_ref()
                    .map_or(1, |metrics| metrics.summary_requests.max(1));
                for request in 0..requests {
                    let mut answer = AssistantMessage::default();
                    answer.content = vec![ContentBlock::Text {
                        text: summary.clone(),
                    }];
                    if request == 0
                        && let Some(metrics) = metrics
                    {
                        answer.usage = metrics.summary_usage;
                    }
                    run.recording.summaries.push(answer.into());
                }
            }
            _ => {}
        }
    }
    runs
}

/// The host's recorded answers by call id (an `always` answer where a
/// session rule records one).
fn host_answers(branch: &[Entry]) -> HashMap<String, PermissionAnswer> {
    let mut answers = HashMap::new();
    for entry in branch {
        match &entry.payload {
            EntryPayload::PermissionDecision { decision }
                if decision.source == DecisionSource::Host =>
            {
                answers.insert(
                    decision.call_id.clone(),
                    PermissionAnswer::once(decision.resolution),
                );
            }
            EntryPayload::PermissionRule { rule } => {
                answers.insert(
                    rule.call_id.clone(),
                    PermissionAnswer::new(rule.resolution, PermissionScope::Always),
                );
            }
            _ => {}
        }
    }
    answers
}

/// The recorded calls of `branch` with their results.
fn call_record(branch: &[Entry]) -> CallRecord {
    let mut calls = HashMap::new();
    for entry in branch {
        let EntryPayload::Message { message } = &entry.payload else {
            continue;
        };
        match message {
            Message::Assistant(assistant) => {
                for call in assistant.tool_calls() {
                    calls.insert(
                        call.id.clone(),
                        RecordedCall {
                            name: call.name.clone(),
                            arguments: call.arguments.clone(),
                            result: None,
                            served: false,
                        },
                    );
                }
            }
            Message::ToolResult(result) => {
                if let Some(call) = calls.get_mut(&result.call_id) {
                    call.result = Some(result.clone());
                }
            }
            Message::User(_) => {}
        }
    }
    CallRecord {
        calls: Mutex::new(calls),
        notes: Mutex::new(Vec::new()),
    }
}

/// How two branches are compared (see the module documentation).
#[derive(Debug, Clone, Copy)]
struct Comparison {
    /// Whether the workspace was really changed (live tools): then
    /// snapshots and file evidence are compared.
    workspace: bool,
}

impl Comparison {
    /// How many recorded entries were compared, and the first divergence.
    fn compare(&self, recorded: &[Entry], replayed: &[Entry]) -> (usize, Option<Divergence>) {
        let recorded = self.normalise(recorded);
        let replayed = self.normalise(replayed);
        let compared = recorded.len();
        for position in 0..recorded.len().max(replayed.len()) {
            let left = recorded.get(position);
            let right = replayed.get(position);
            if let (Some((_, a)), Some((_, b))) = (left, right)
                && a == b
            {
                continue;
            }
            let pointer = match (left, right) {
                (Some((_, a)), Some((_, b))) => first_difference(a, b, String::new()),
                _ => String::new(),
            };
            let call = left
                .map(|(_, value)| value)
                .or(right.map(|(_, value)| value))
                .and_then(|value| concerned_call(value, &pointer));
            return (
                compared,
                Some(Divergence {
                    position: position + 1,
                    recorded_entry_id: left.map(|(id, _)| id.clone()),
                    call,
                    pointer,
                    recorded: left.map(|(_, value)| value.clone()),
                    replayed: right.map(|(_, value)| value.clone()),
                }),
            );
        }
        (compared, None)
    }

    /// The compared entries of `branch`: each with its id, as the JSON
    /// that is compared.
    fn normalise(&self, branch: &[Entry]) -> Vec<(String, Value)> {
        let mut names: HashMap<String, String> = HashMap::new();
        let mut kept = Vec::new();
        for entry in branch {
            if self.keeps(entry) {
                kept.push(entry);
                names.insert(entry.id.clone(), format!("<entry {}>", kept.len()));
            } else {
                // Named by the compared entry before it, so a mention of
                // it still compares.
                names.insert(
                    entry.id.clone(),
                    format!("<left-out entry after entry {}>", kept.len()),
                );
            }
        }
        let mut runs = 0;
        for entry in branch {
            if let EntryPayload::RunStart { run_id, .. } = &entry.payload {
                runs += 1;
                names.insert(run_id.clone(), format!("<run {runs}>"));
            }
        }
        kept.into_iter()
            .map(|entry| {
                let mut value = serde_json::to_value(entry).unwrap_or(Value::Null);
                if let Value::Object(object) = &mut value {
                    for field in ["id", "parent_id", "timestamp"] {
                        object.remove(field);
                    }
                    self.strip(object);
                }
                rename(&mut value, &names);
                (entry.id.clone(), value)
            })
            .collect()
    }

    /// Whether `entry` is compared at all.
    fn keeps(&self, entry: &Entry) -> bool {
        match &entry.payload {
            EntryPayload::Label { .. } => false,
            EntryPayload::WorkspaceSnapshot { snapshot } => {
                self.workspace
                    && matches!(
                        snapshot.reason,
                        SnapshotReason::RunStart | SnapshotReason::RunEnd
                    )
            }
            _ => true,
        }
    }

    /// Removes the fields of an entry's JSON that are not compared.
    fn strip(&self, entry: &mut Map<String, Value>) {
        if let Some(Value::Object(metrics)) = entry.get_mut("metrics") {
            metrics.remove("tokens_before");
            metrics.remove("tokens_after");
        }
        if let Some(Value::Object(snapshot)) = entry.get_mut("snapshot") {
            snapshot.remove("workspace");
            snapshot.remove("new_bytes");
        }
        if !self.workspace
            && let Some(Value::Object(effect)) = entry.get_mut("effect")
        {
            effect.remove("evidence");
        }
        if let Some(Value::Object(message)) = entry.get_mut("message")
            && let Some(Value::Array(blocks)) = message.get_mut("content")
        {
            for block in blocks {
                if let Value::Object(block) = block {
                    block.remove("wire_id");
                }
            }
        }
    }
}

/// Replaces, anywhere in `value`, each string that is a key of `names`.
fn rename(value: &mut Value, names: &HashMap<String, String>) {
    match value {
        Value::String(text) => {
            if let Some(name) = names.get(text.as_str()) {
                *text = name.clone();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| rename(item, names)),
        Value::Object(object) => object.values_mut().for_each(|item| rename(item, names)),
        _ => {}
    }
}

/// The JSON pointer of the first place where `a` and `b` differ.
fn first_difference(a: &Value, b: &Value, at: String) -> String {
    match (a, b) {
        (Value::Object(left), Value::Object(right)) => {
            let mut keys: Vec<&String> = left.keys().chain(right.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                match (left.get(key), right.get(key)) {
                    (Some(x), Some(y)) if x == y => {}
                    (Some(x), Some(y)) => return first_difference(x, y, format!("{at}/{key}")),
                    _ => return format!("{at}/{key}"),
                }
            }
            at
        }
        (Value::Array(left), Value::Array(right)) => {
            for (index, (x, y)) in left.iter().zip(right).enumerate() {
                if x != y {
                    return first_difference(x, y, format!("{at}/{index}"));
                }
            }
            if left.len() == right.len() {
                at
            } else {
                format!("{at}/{}", left.len().min(right.len()))
            }
        }
        _ => at,
    }
}

/// The tool call (id, tool) a compared entry concerns: a tool result's,
/// a decision's or a journal record's call, or the call of an assistant
/// message the difference lies in (its first call when it lies elsewhere).
fn concerned_call(entry: &Value, pointer: &str) -> Option<(String, String)> {
    let pair = |object: &Value, id: &str, name: &str| {
        Some((
            object.get(id)?.as_str()?.to_owned(),
            object.get(name)?.as_str()?.to_owned(),
        ))
    };
    if let Some(decision) = entry.get("decision") {
        return pair(decision, "call_id", "tool_name");
    }
    if let Some(effect) = entry.get("effect") {
        return pair(effect, "call_id", "tool_name");
    }
    if entry.get("kind").and_then(Value::as_str) == Some("effect_recovered") {
        return pair(entry, "call_id", "tool_name");
    }
    let message = entry.get("message")?;
    if message.get("role").and_then(Value::as_str) == Some("tool_result") {
        return pair(message, "call_id", "tool_name");
    }
    let blocks = message.get("content")?.as_array()?;
    let within = pointer
        .strip_prefix("/message/content/")
        .and_then(|rest| rest.split('/').next())
        .and_then(|index| index.parse::<usize>().ok())
        .and_then(|index| blocks.get(index))
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_call"));
    let block = within.or_else(|| {
        blocks
            .iter()
            .find(|block| block.get("type").and_then(Value::as_str) == Some("tool_call"))
    })?;
    pair(block, "id", "name")
}

impl Divergence {
    /// The divergence as one JSON object.
    pub fn to_json(&self) -> Value {
        json!({
            "position": self.position,
            "recorded_entry_id": self.recorded_entry_id,
            "call_id": self.call.as_ref().map(|(id, _)| id),
            "tool_name": self.call.as_ref().map(|(_, name)| name),
            "pointer": self.pointer,
            "recorded": self.recorded,
            "replayed": self.replayed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_of(arguments: Value, result: Option<ToolResultMessage>) -> CallRecord {
        let record = CallRecord::default();
        record.calls.lock().unwrap().insert(
            "c1".to_owned(),
            RecordedCall {
                name: "bash".to_owned(),
                arguments,
                result,
                served: false,
            },
        );
        record
    }

    fn failed(outcome: Result<ToolOutput, ToolError>) -> ToolError {
        match outcome {
            Ok(output) => panic!("expected a failure, got {output:?}"),
            Err(error) => error,
        }
    }

    #[test]
    fn a_served_call_returns_its_recorded_result_once() {
        let mut result = ToolResultMessage::new(
            "c1",
            "bash",
            ToolStatus::Error,
            vec![UserContent::Text {
                text: "out\n\nCommand exited with code 1".into(),
            }],
        );
        result.error = Some(keel_protocol::ToolResultError::new(
            ToolErrorCode::ProcessFailed,
            "Command exited with code 1",
        ));
        result.details = Some(json!({"exit_code": 1}));
        let arguments = json!({"command": "false"});
        let record = record_of(arguments.clone(), Some(result.clone()));
        let error = failed(record.serve("c1", "bash", &arguments));
        assert_eq!(error.code, ToolErrorCode::ProcessFailed);
        assert_eq!(error.message, "Command exited with code 1");
        assert_eq!(error.content, result.content);
        assert_eq!(error.details, result.details);
        assert!(record.notes.lock().unwrap().is_empty());
        let again = failed(record.serve("c1", "bash", &arguments));
        assert!(again.message.contains("ran twice"), "{}", again.message);
    }

    #[test]
    fn a_call_that_disagrees_with_the_record_fails_as_a_divergence_and_is_noted() {
        let arguments = json!({"command": "ls"});
        let result = ToolResultMessage::new("c1", "bash", ToolStatus::Success, Vec::new());
        let record = record_of(arguments.clone(), Some(result));
        let other = failed(record.serve("c1", "bash", &json!({"command": "ls -a"})));
        assert!(
            other
                .message
                .starts_with("replay divergence: call c1 (bash) was recorded with arguments")
        );
        let renamed = failed(record.serve("c1", "read", &arguments));
        assert!(
            renamed
                .message
                .contains("recorded to `bash`, the replay calls `read`")
        );
        let unknown = failed(record.serve("c9", "bash", &arguments));
        assert!(unknown.message.contains("has no call c9"));
        assert_eq!(record.notes.lock().unwrap().len(), 3);
        // The call still runs once, as recorded.
        assert!(record.serve("c1", "bash", &arguments).is_ok());
        let missing = record_of(arguments.clone(), None);
        let error = failed(missing.serve("c1", "bash", &arguments));
        assert!(error.message.contains("no result for call c1"));
    }

    #[test]
    fn the_first_difference_is_found_by_pointer() {
        let a = json!({"message": {"content": [{"text": "a"}, {"text": "b"}]}});
        let b = json!({"message": {"content": [{"text": "a"}, {"text": "c"}]}});
        assert_eq!(
            first_difference(&a, &b, String::new()),
            "/message/content/1/text"
        );
        let shorter = json!({"list": [1]});
        let longer = json!({"list": [1, 2]});
        assert_eq!(
            first_difference(&shorter, &longer, String::new()),
            "/list/1"
        );
    }

    #[test]
    fn a_divergence_in_an_assistant_message_names_the_call_it_lies_in() {
        let entry = json!({"kind": "message", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "x"},
            {"type": "tool_call", "id": "c1", "name": "read", "arguments": {}},
            {"type": "tool_call", "id": "c2", "name": "bash", "arguments": {}},
        ]}});
        assert_eq!(
            concerned_call(&entry, "/message/content/2/arguments/command"),
            Some(("c2".to_owned(), "bash".to_owned()))
        );
        assert_eq!(
            concerned_call(&entry, "/message/content/0/text"),
            Some(("c1".to_owned(), "read".to_owned()))
        );
    }
}
