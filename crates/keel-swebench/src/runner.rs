//! The batch: instances through their stages, `workers` at a time, each
//! run driven through one broker connection.
//!
//! An instance goes `configuration` → `environment_preparation` (the
//! checkout) → `agent` (its runs) → `prediction` (the patch) → `complete`
//! (its line in the predictions file), and its manifest is rewritten at
//! each step, so a batch killed at any point is resumed by running it again
//! with the same output directory:
//!
//! - `complete`: skipped, never redone (`--redo` starts it afresh);
//! - `environment_preparation` (or before): the half-made workspace is
//!   removed and made again — no run has touched it;
//! - `agent`: its session (recorded in the manifest, or found by its
//!   workspace when the crash came before it was recorded) is continued:
//!   `session/resume` when a run was interrupted, else a new run in the
//!   same session told to continue. The workspace keeps every edit, and
//!   the patch is taken against `base_commit`, so the first run's edits are
//!   in it;
//! - `prediction`: the patch is read again.
//!
//! A stop (Ctrl-C: the `stop` token) cancels the active runs and starts no
//! more; their instances stay at `agent`, status `cancelled`, and resume
//! the next time.
//!
//! Permission requests are denied at once: there is no one to ask.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use keel_host::broker::{Broker, BrokerConfig, Caller, Connection, Tenant};
use keel_host::sessions;
use keel_protocol::rpc::RpcError;
use keel_protocol::rpc::methods::{
    EVENTS_LAGGED, EventsLaggedNotification, RUN_EVENT, RunEventNotification, RunStartParams,
    RunStartResponse, SessionResumeParams,
};
use keel_protocol::{Message, PermissionMode, RunErrorCode, RunEventKind, RunResult, RunState};
use keel_session::JsonlStore;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::dataset::{self, Instance, Selection};
use crate::docker::{self, Docker};
use crate::manifest::{
    self, Budget, EVENTS, Manifest, PATCH, RunRecord, SESSIONS, SessionRef, Stage, Status, Totals,
    WORKSPACE,
};
use crate::{SwebenchError, git, prompt};
use keel_tools::builtin::{ContainerExec, Executor};

/// Where instances run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Environment {
    /// A checkout on this machine, sandboxed like any `auto` run.
    Local {
        /// A directory of `<owner>__<name>` repositories.
        mirrors: Option<PathBuf>,
        /// One repository for every instance.
        repo: Option<PathBuf>,
    },
    /// The instance's SWE-bench image, one container per instance with no
    /// network ([`crate::docker`]); needs a Docker engine and the images.
    Docker {
        /// The Docker client.
        client: PathBuf,
    },
}

impl Environment {
    /// The name recorded in manifests.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Local { .. } => "local",
            Self::Docker { .. } => "docker",
        }
    }

    /// The repository an instance is checked out from.
    fn source(&self, instance: &Instance) -> Result<PathBuf, String> {
        match self {
            Self::Local {
                repo: Some(repo), ..
            } => Ok(repo.clone()),
            Self::Local {
                mirrors: Some(mirrors),
                ..
            } => Ok(mirrors.join(instance.mirror_name())),
            Self::Local { .. } => {
                Err("no repository: give --repo-mirrors DIR or --repo PATH".into())
            }
            Self::Docker { .. } => Err("the docker environment copies the image's /testbed".into()),
        }
    }
}

/// What `keel swebench run` was asked.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunOptions {
    /// The dataset file (`.json` or `.jsonl`).
    pub dataset: PathBuf,
    /// Which of its instances.
    pub selection: Selection,
    /// Where they run.
    pub environment: Environment,
    /// The output directory.
    pub output: PathBuf,
    /// Instances at once (at least 1).
    pub workers: usize,
    /// Each instance's budget.
    pub budget: Budget,
    /// The predictions' `model_name_or_path` (default `keel`, or
    /// `keel-<model>` with a model given).
    pub model_name: Option<String>,
    /// Start every selected instance afresh.
    pub redo: bool,
    /// Leave files the agent added under test directories out of patches.
    pub exclude_tests: bool,
    /// The runs' permission mode.
    pub mode: PermissionMode,
    /// The runs' tools (`None`: the default ones).
    pub tools: Option<Vec<String>>,
    /// How long each of the evaluator's git commands may take before it
    /// is killed (the instance then fails, naming the command).
    pub git_timeout: Duration,
    /// How the broker builds kernels (provider, model, script, sandbox);
    /// its session directory is set to `OUTPUT/sessions`.
    pub broker: BrokerConfig,
}

impl RunOptions {
    /// Options with defaults: one worker, no budget, mode `auto`.
    pub fn new(
        dataset: PathBuf,
        output: PathBuf,
        environment: Environment,
        broker: BrokerConfig,
    ) -> Self {
        Self {
            dataset,
            selection: Selection::default(),
            environment,
            output,
            workers: 1,
            budget: Budget::default(),
            model_name: None,
            redo: false,
            exclude_tests: false,
            mode: PermissionMode::Auto,
            tools: None,
            git_timeout: git::DEFAULT_TIMEOUT,
            broker,
        }
    }

    fn model_name(&self) -> String {
        match (&self.model_name, &self.broker.model) {
            (Some(name), _) => name.clone(),
            (None, Some(model)) => format!("keel-{model}"),
            (None, None) => "keel".to_owned(),
        }
    }
}

/// The batch's counts so far.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Counts {
    /// Instances selected.
    pub total: usize,
    /// Complete (this time or before).
    pub done: usize,
    /// Complete before this batch started (skipped).
    pub skipped: usize,
    /// Running now.
    pub running: usize,
    /// Complete with a failure status.
    pub failed: usize,
    /// Stopped by Ctrl-C, to resume.
    pub interrupted: usize,
    /// Tokens used by this batch's runs.
    pub tokens: u64,
    /// Cost of this batch's runs in USD (where known).
    pub cost_usd: f64,
}

/// One step of the batch, for a progress display.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Report {
    /// An instance was already complete.
    Skipped {
        /// The instance.
        instance_id: String,
    },
    /// An instance started (or resumed).
    Started {
        /// The instance.
        instance_id: String,
        /// Whether it continues an earlier batch's work.
        resumed: bool,
    },
    /// An instance is complete.
    Finished {
        /// The instance.
        instance_id: String,
        /// How it ended.
        status: Status,
    },
    /// An instance was stopped (Ctrl-C) and will resume.
    Interrupted {
        /// The instance.
        instance_id: String,
    },
    /// Tokens or cost changed.
    Usage,
}

/// Shows the batch's progress (a bar on a terminal, lines when piped).
pub trait Progress: Send + Sync {
    /// One step and the counts after it.
    fn report(&self, report: &Report, counts: &Counts);
}

/// How the batch ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Summary {
    /// The final counts.
    pub counts: Counts,
    /// Lines in the predictions file.
    pub predictions: usize,
    /// Whether a stop cut the batch short.
    pub stopped: bool,
    /// Instances whose processing failed outside any status (an output
    /// file that could not be written), with why.
    pub errors: Vec<(String, String)>,
}

/// Runs the batch (see the module docs); `stop` cancels it cleanly.
pub async fn run(
    options: RunOptions,
    progress: Arc<dyn Progress>,
    stop: CancellationToken,
) -> Result<Summary, SwebenchError> {
    let all = dataset::load(&options.dataset)?;
    let selected = options.selection.apply(all)?;
    if let Environment::Local {
        mirrors: None,
        repo: None,
    } = &options.environment
    {
        return Err(SwebenchError::Usage(
            "environment local needs --repo-mirrors DIR or --repo PATH".to_owned(),
        ));
    }
    std::fs::create_dir_all(&options.output).map_err(|error| SwebenchError::Io {
        path: options.output.display().to_string(),
        source: error,
    })?;
    let output = std::fs::canonicalize(&options.output).map_err(|error| SwebenchError::Io {
        path: options.output.display().to_string(),
        source: error,
    })?;
    write_config(&output, &options)?;
    let store = Arc::new(sessions::open_store(Some(&output.join(SESSIONS)))?);
    let mut config = options.broker.clone();
    config.session_dir = Some(output.join(SESSIONS));
    // One client that reads every event of every run it starts. No stall
    // watchdog, as for `keel run`: a project's quiet test suite may run
    // longer than it, and --timeout-sec bounds a run when asked.
    config.stall_timeout = None;
    config.max_runs = config.max_runs.max(options.workers.max(1));
    config.notification_buffer = 1 << 16;
    config.ring_events = 1 << 16;
    config.ring_bytes = 64 << 20;
    let broker = Broker::with_store(config, Arc::clone(&store));
    let connection = broker.connect(Tenant::local());
    connection
        .call("initialize", Some(json!({"client_name": "keel-swebench"})))
        .await
        .map_err(|error| host_error(&error))?;
    let router = Arc::new(Router::default());
    let caller = connection.caller();
    let dispatcher = tokio::spawn(dispatch(connection, Arc::clone(&router)));
    let context = Arc::new(Context {
        model_name: options.model_name(),
        counts: Mutex::new(Counts {
            total: selected.len(),
            ..Counts::default()
        }),
        options,
        output: output.clone(),
        caller,
        router,
        store,
        stop: stop.clone(),
        progress,
        predictions: tokio::sync::Mutex::new(()),
        errors: Mutex::new(Vec::new()),
    });
    let workers = context.options.workers.max(1);
    futures::stream::iter(selected)
        .for_each_concurrent(workers, |instance| {
            let context = Arc::clone(&context);
            async move {
                if context.stop.is_cancelled() {
                    return;
                }
                let id = instance.instance_id.clone();
                if let Err(error) = instance_task(&context, &instance).await {
                    context.update(|counts| counts.running = counts.running.saturating_sub(1));
                    lock(&context.errors).push((id, error.to_string()));
                }
            }
        })
        .await;
    dispatcher.abort();
    let predictions = manifest::write_predictions(&output)?;
    let counts = lock(&context.counts).clone();
    let errors = lock(&context.errors).clone();
    Ok(Summary {
        counts,
        predictions,
        stopped: stop.is_cancelled(),
        errors,
    })
}

/// `OUTPUT/config.json`: what the last batch was asked (the dataset, for
/// `keel swebench eval`).
fn write_config(output: &Path, options: &RunOptions) -> Result<(), SwebenchError> {
    let dataset = std::fs::canonicalize(&options.dataset).unwrap_or(options.dataset.clone());
    let config = json!({
        "keel_version": env!("CARGO_PKG_VERSION"),
        "dataset": dataset.display().to_string(),
        "environment": options.environment.name(),
        "model_name_or_path": options.model_name(),
        "provider": options.broker.provider,
        "model": options.broker.model,
        "mode": options.mode,
        "budget": options.budget,
        "workers": options.workers,
        "exclude_tests": options.exclude_tests,
    });
    let mut text = serde_json::to_vec_pretty(&config).unwrap_or_default();
    text.push(b'\n');
    manifest::write_atomic(&output.join("config.json"), &text)
}

struct Context {
    options: RunOptions,
    model_name: String,
    output: PathBuf,
    caller: Caller,
    router: Arc<Router>,
    store: Arc<JsonlStore>,
    stop: CancellationToken,
    progress: Arc<dyn Progress>,
    counts: Mutex<Counts>,
    /// Held while the predictions file is rewritten.
    predictions: tokio::sync::Mutex<()>,
    errors: Mutex<Vec<(String, String)>>,
}

impl Context {
    fn update(&self, change: impl FnOnce(&mut Counts)) -> Counts {
        let mut counts = lock(&self.counts);
        change(&mut counts);
        counts.clone()
    }

    fn report(&self, report: Report, change: impl FnOnce(&mut Counts)) {
        let counts = self.update(change);
        self.progress.report(&report, &counts);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One instance, from wherever its manifest says it is to `complete` (or
/// to a stop).
async fn instance_task(context: &Context, instance: &Instance) -> Result<(), SwebenchError> {
    let id = &instance.instance_id;
    let dir = context.output.join(id);
    if context.options.redo && dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|error| io(&dir, error))?;
    }
    // Written atomically, a manifest is never torn: one that does not
    // parse was not written by this evaluator, and the instance starts afresh.
    let existing = Manifest::read(&dir).unwrap_or_default();
    if existing
        .as_ref()
        .is_some_and(|manifest| manifest.stage == Stage::Complete)
    {
        context.report(
            Report::Skipped {
                instance_id: id.clone(),
            },
            |counts| {
                counts.done += 1;
                counts.skipped += 1;
            },
        );
        return Ok(());
    }
    let resumed = existing.is_some();
    std::fs::create_dir_all(&dir).map_err(|error| io(&dir, error))?;
    let workspace = dir.join(WORKSPACE);
    let mut manifest = existing.unwrap_or_else(|| Manifest {
        instance_id: id.clone(),
        stage: Stage::Configuration,
        status: Status::Running,
        keel_version: env!("CARGO_PKG_VERSION").to_owned(),
        model_name_or_path: context.model_name.clone(),
        provider: None,
        model: None,
        environment: context.options.environment.name().to_owned(),
        base_commit: instance.base_commit.clone(),
        workspace: workspace.display().to_string(),
        prepared_at_ms: None,
        budget: context.options.budget.clone(),
        totals: Totals::default(),
        session: None,
        runs: Vec::new(),
        diagnostic: None,
        artifacts: Vec::new(),
    });
    manifest.status = Status::Running;
    manifest.diagnostic = None;
    context.report(
        Report::Started {
            instance_id: id.clone(),
            resumed,
        },
        |counts| counts.running += 1,
    );
    if manifest.stage <= Stage::EnvironmentPreparation {
        manifest.stage = Stage::EnvironmentPreparation;
        manifest.prepared_at_ms = Some(keel_protocol::now_ms());
        manifest.write(&dir)?;
        if let Err(problem) = prepare(context, instance, &workspace).await {
            manifest.status = Status::EnvironmentPreparationFailed;
            manifest.diagnostic = Some(problem);
            manifest::write_atomic(&dir.join(PATCH), b"")?;
            return complete(context, &dir, manifest).await;
        }
        manifest.stage = Stage::Agent;
        manifest.write(&dir)?;
    }
    if manifest.stage == Stage::Agent {
        if context.stop.is_cancelled() {
            return interrupted(context, &dir, manifest);
        }
        let container = match container_for(context, instance, &workspace).await {
            Ok(container) => container,
            Err(problem) => {
                manifest.status = Status::EnvironmentPreparationFailed;
                manifest.diagnostic = Some(problem);
                manifest::write_atomic(&dir.join(PATCH), b"")?;
                return complete(context, &dir, manifest).await;
            }
        };
        let ended = agent(context, instance, &dir, &workspace, &mut manifest).await;
        if let Some(container) = container {
            container.remove(context).await;
        }
        match ended? {
            Some(status) => manifest.status = status,
            None => return interrupted(context, &dir, manifest),
        }
        manifest.stage = Stage::Prediction;
        manifest.write(&dir)?;
    }
    // Prediction: the patch against base_commit itself.
    let base = instance.base_commit.clone();
    let exclude = context.options.exclude_tests;
    let from = workspace.clone();
    let timeout = context.options.git_timeout;
    let patch = tokio::task::spawn_blocking(move || git::patch(&from, &base, exclude, timeout))
        .await
        .unwrap_or_else(|error| {
            Err(SwebenchError::Git {
                what: "diff".to_owned(),
                message: error.to_string(),
            })
        });
    match patch {
        Ok(prediction) => {
            let patch = prediction.patch;
            manifest::write_atomic(&dir.join(PATCH), patch.as_bytes())?;
            if !prediction.nested.is_empty() {
                let note = format!(
                    "left out of the patch, holding a repository of their own: {}",
                    prediction.nested.join(", ")
                );
                manifest.diagnostic = Some(match manifest.diagnostic.take() {
                    Some(earlier) => format!("{earlier}; {note}"),
                    None => note,
                });
            }
            if manifest.status == Status::Success && patch.trim().is_empty() {
                manifest.status = Status::NoPatch;
            }
        }
        Err(error) => {
            manifest::write_atomic(&dir.join(PATCH), b"")?;
            manifest.status = Status::AgentFailed;
            manifest.diagnostic = Some(format!("no patch could be read: {error}"));
        }
    }
    complete(context, &dir, manifest).await
}

/// The workspace, afresh: a checkout at `base_commit` (`local`), or the
/// image's `/testbed`, which must be one (`docker`).
async fn prepare(context: &Context, instance: &Instance, workspace: &Path) -> Result<(), String> {
    if workspace.exists() {
        std::fs::remove_dir_all(workspace)
            .map_err(|error| format!("{}: {error}", workspace.display()))?;
    }
    if let Environment::Docker { client } = &context.options.environment {
        let docker = Docker::new(client);
        let image = docker::image_name(instance);
        let base = instance.base_commit.clone();
        let target = workspace.to_path_buf();
        let timeout = context.options.git_timeout;
        return tokio::task::spawn_blocking(move || {
            if !docker.image_present(&image) {
                return Err(format!(
                    "image {image} is not present; keel never pulls (`docker pull {image}` first)"
                ));
            }
            docker.copy_testbed(&image, &target)?;
            // The image's repository may hold commits after base_commit
            // (the fix, through tags, branches or reflogs): it is replaced
            // by one holding base_commit's history only, as a local
            // checkout is. Its configuration is read by upload-pack alone.
            let aside = target.with_file_name("testbed-git");
            git::rebuild(&target, &base, &aside, timeout)
                .map_err(|error| format!("{image}'s /testbed: {error}"))?;
            // Clean: nothing differs from base_commit, read as the patch is.
            let changes =
                git::patch(&target, &base, false, timeout).map_err(|error| error.to_string())?;
            if !changes.patch.is_empty() || !changes.nested.is_empty() {
                return Err(format!("{image}'s /testbed differs from {base}"));
            }
            Ok(())
        })
        .await
        .map_err(|error| error.to_string())?;
    }
    let source = context.options.environment.source(instance)?;
    let base = instance.base_commit.clone();
    let target = workspace.to_path_buf();
    let timeout = context.options.git_timeout;
    tokio::task::spawn_blocking(move || git::checkout(&source, &base, &target, timeout))
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| error.to_string())
}

/// An instance's running container (`docker`), and the workspace whose
/// `bash` runs in it.
struct Container {
    docker: Docker,
    id: String,
    workspace: PathBuf,
}

impl Container {
    async fn remove(self, context: &Context) {
        context
            .options
            .broker
            .host
            .executors
            .remove(&self.workspace);
        let Container { docker, id, .. } = self;
        let _ = tokio::task::spawn_blocking(move || docker.remove(&id)).await;
    }
}

/// With `docker`, the instance's container, started, its `bash` routed
/// into it (before the workspace's first run builds its kernel).
async fn container_for(
    context: &Context,
    instance: &Instance,
    workspace: &Path,
) -> Result<Option<Container>, String> {
    let Environment::Docker { client } = &context.options.environment else {
        return Ok(None);
    };
    let workspace = std::fs::canonicalize(workspace)
        .map_err(|error| format!("{}: {error}", workspace.display()))?;
    let docker = Docker::new(client);
    let image = docker::image_name(instance);
    let name = docker::container_name(&instance.instance_id);
    let starter = docker.clone();
    let mount = workspace.clone();
    let id = tokio::task::spawn_blocking(move || starter.start(&image, &name, &mount))
        .await
        .map_err(|error| error.to_string())??;
    let exec = ContainerExec::new(client, id.clone(), docker::TESTBED);
    context
        .options
        .broker
        .host
        .executors
        .set(workspace.clone(), Executor::Container(exec));
    Ok(Some(Container {
        docker,
        id,
        workspace,
    }))
}

/// Stage `complete`: totals and checksums, the manifest, the predictions.
async fn complete(
    context: &Context,
    dir: &Path,
    mut manifest: Manifest,
) -> Result<(), SwebenchError> {
    manifest.totals = Totals::of_events(&dir.join(EVENTS));
    let mut artifacts = Vec::new();
    for name in [EVENTS, PATCH] {
        let path = dir.join(name);
        if path.exists() {
            artifacts.push(manifest::artifact(&context.output, &path)?);
        }
    }
    if let Some(session) = &manifest.session {
        let path = Path::new(&session.path);
        if path.exists() {
            artifacts.push(manifest::artifact(&context.output, path)?);
        }
    }
    manifest.artifacts = artifacts;
    manifest.stage = Stage::Complete;
    manifest.write(dir)?;
    {
        let _held = context.predictions.lock().await;
        manifest::write_predictions(&context.output)?;
    }
    let status = manifest.status;
    context.report(
        Report::Finished {
            instance_id: manifest.instance_id.clone(),
            status,
        },
        |counts| {
            counts.running = counts.running.saturating_sub(1);
            counts.done += 1;
            if status.is_failure() {
                counts.failed += 1;
            }
        },
    );
    Ok(())
}

/// A stop: the instance stays at `agent`, to resume.
fn interrupted(context: &Context, dir: &Path, mut manifest: Manifest) -> Result<(), SwebenchError> {
    manifest.status = Status::Cancelled;
    manifest.totals = Totals::of_events(&dir.join(EVENTS));
    manifest.write(dir)?;
    context.report(
        Report::Interrupted {
            instance_id: manifest.instance_id.clone(),
        },
        |counts| {
            counts.running = counts.running.saturating_sub(1);
            counts.interrupted += 1;
        },
    );
    Ok(())
}

/// Why the evaluator cancelled a run.
#[derive(Clone, Copy, PartialEq)]
enum Cancel {
    Tokens,
    Timeout,
    Stop,
}

/// The agent stage: one run (started, resumed or continued) to its end.
/// `Some(status)` when it ended (`success` meaning settled, before the
/// patch is known), `None` when a stop cancelled it.
async fn agent(
    context: &Context,
    instance: &Instance,
    dir: &Path,
    workspace: &Path,
    manifest: &mut Manifest,
) -> Result<Option<Status>, SwebenchError> {
    let workspace = std::fs::canonicalize(workspace).map_err(|error| io(workspace, error))?;
    let session = match &manifest.session {
        Some(session) => Some(session.id.clone()),
        // A crash between the start and its record: the session of this
        // workspace created since it was made (not one of an earlier
        // `--redo`'d attempt in the same directory).
        None => sessions::sessions_of(context.store.as_ref(), Some(&workspace))
            .await
            .ok()
            .and_then(|(found, _)| {
                found
                    .into_iter()
                    .filter(|info| {
                        manifest
                            .prepared_at_ms
                            .is_some_and(|prepared| info.created >= prepared)
                    })
                    .max_by_key(|info| info.last_activity)
                    .map(|info| info.id)
            }),
    };
    let (started, kind) = match start(context, instance, &workspace, session).await {
        Ok(started) => started,
        Err(error) => {
            manifest.diagnostic = Some(format!("no run started: {}", error.message));
            return Ok(Some(Status::AgentFailed));
        }
    };
    let path = sessions::session_file(&context.store, &started.session_id)
        .map(|path| path.display().to_string())
        .unwrap_or_default();
    manifest.session = Some(SessionRef {
        id: started.session_id.clone(),
        path,
    });
    manifest.runs.push(RunRecord {
        run_id: started.run_id.clone(),
        kind: kind.to_owned(),
        state: None,
        error: None,
    });
    manifest.write(dir)?;
    let events_path = dir.join(EVENTS);
    let mut events = open_events(&events_path)?;
    let mut routed = context.router.register(&started.run_id);
    let budget = &context.options.budget;
    let mut tokens = Totals::of_events(&events_path).tokens();
    let deadline = budget
        .timeout_sec
        .map(|seconds| tokio::time::Instant::now() + Duration::from_secs(seconds));
    let mut cancelled: Option<Cancel> = None;
    let run_id = started.run_id.clone();
    let result: RunResult = loop {
        let next = tokio::select! {
            next = routed.recv() => next,
            () = sleep_until(deadline), if cancelled.is_none() => {
                cancelled = Some(Cancel::Timeout);
                cancel(context, &run_id).await;
                continue;
            }
            () = context.stop.cancelled(), if cancelled.is_none() => {
                cancelled = Some(Cancel::Stop);
                cancel(context, &run_id).await;
                continue;
            }
        };
        let note = match next {
            Some(Routed::Event(note)) => note,
            Some(Routed::Lagged(last_seq)) => {
                let params = json!({"run_id": run_id, "after_seq": last_seq});
                if context
                    .caller
                    .call("run/subscribe", Some(params))
                    .await
                    .is_err()
                {
                    // The events are gone from the ring: the result is not.
                    break run_result(context, &run_id).await?;
                }
                continue;
            }
            None => break run_result(context, &run_id).await?,
        };
        let line = serde_json::to_string(&note.event).unwrap_or_default();
        events
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|error| io(&events_path, error))?;
        match &note.event.kind {
            RunEventKind::RunStarted {
                provider, model, ..
            } => {
                manifest.provider = Some(provider.clone());
                manifest.model = Some(model.clone());
            }
            RunEventKind::MessageEnd {
                message: Message::Assistant(message),
            } => {
                let mut usage = Totals::default();
                usage.add_usage(&message.usage);
                tokens += usage.tokens();
                context.report(Report::Usage, |counts| {
                    counts.tokens += usage.tokens();
                    counts.cost_usd += usage.cost_usd.unwrap_or(0.0);
                });
                if budget.max_tokens.is_some_and(|max| tokens > max) && cancelled.is_none() {
                    cancelled = Some(Cancel::Tokens);
                    cancel(context, &run_id).await;
                }
            }
            RunEventKind::PermissionRequested { request_id, .. } => {
                let params =
                    json!({"run_id": run_id, "request_id": request_id, "decision": "deny"});
                let _ = context
                    .caller
                    .call("permission/resolve", Some(params))
                    .await;
            }
            _ => {}
        }
        if let Some(result) = note.result {
            break result;
        }
    };
    context.router.forget(&run_id);
    let _ = events.flush();
    if let Some(record) = manifest.runs.last_mut() {
        record.state = Some(state_name(result.state).to_owned());
        record.error = result
            .error
            .as_ref()
            .map(|error| error.code.as_str().to_owned());
    }
    if let Some(error) = &result.error {
        manifest.diagnostic = Some(format!("{}: {}", error.code.as_str(), error.message));
    }
    let status = match (result.state, cancelled) {
        (RunState::Settled, _) => Status::Success,
        (RunState::Cancelled, Some(Cancel::Tokens)) => Status::BudgetExhausted,
        (RunState::Cancelled, Some(Cancel::Timeout)) => Status::TimedOut,
        // Cancelled by the stop, or by anyone else: resumable.
        (RunState::Cancelled, _) => return Ok(None),
        (RunState::Failed, _) => match result.error.as_ref().map(|error| error.code) {
            Some(
                RunErrorCode::TurnLimit | RunErrorCode::BudgetExceeded | RunErrorCode::CostUnknown,
            ) => Status::BudgetExhausted,
            _ => Status::AgentFailed,
        },
        (_, _) => Status::AgentFailed,
    };
    Ok(Some(status))
}

fn state_name(state: RunState) -> &'static str {
    match state {
        RunState::Active => "active",
        RunState::Settled => "settled",
        RunState::Cancelled => "cancelled",
        RunState::Failed => "failed",
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

async fn cancel(context: &Context, run_id: &str) {
    let _ = context
        .caller
        .call("run/cancel", Some(json!({"run_id": run_id})))
        .await;
}

async fn run_result(context: &Context, run_id: &str) -> Result<RunResult, SwebenchError> {
    let value = context
        .caller
        .call("run/result", Some(json!({"run_id": run_id})))
        .await
        .map_err(|error| host_error(&error))?;
    value
        .get("result")
        .cloned()
        .and_then(|result| serde_json::from_value(result).ok())
        .ok_or_else(|| SwebenchError::Host {
            code: "host".to_owned(),
            message: "run/result returned no result".to_owned(),
        })
}

/// Starts the instance's run: a new session with the prompt, the
/// interrupted run of its session resumed, or a new run in its session.
async fn start(
    context: &Context,
    instance: &Instance,
    workspace: &Path,
    session: Option<String>,
) -> Result<(RunStartResponse, &'static str), RpcError> {
    let options = &context.options;
    let workspace = workspace.display().to_string();
    let run_start = |prompt: String, session_id: Option<String>| {
        let mut run_start_params = RunStartParams::default();
        run_start_params.prompt = prompt;
        run_start_params.workspace = workspace.clone();
        run_start_params.session_id = session_id;
        run_start_params.mode = Some(options.mode);
        run_start_params.tools = options.tools.clone();
        run_start_params.max_turns = options.budget.max_turns;
        run_start_params.max_cost_usd = options.budget.max_cost_usd;
        run_start_params.subscribe = Some(true);
        run_start_params
    };
    let Some(session) = session else {
        let mut text = prompt::prompt(
            &instance.repo,
            &instance.problem_statement,
            &instance.hints_text,
        );
        if let Environment::Docker { .. } = options.environment {
            text.push_str(prompt::CONTAINER);
        }
        let started = call(context, "run/start", &run_start(text, None)).await?;
        return Ok((started, "start"));
    };
    let resume = {
        let mut session_resume_params = SessionResumeParams::default();
        session_resume_params.session_id = session.clone();
        session_resume_params.workspace = Some(workspace.clone());
        session_resume_params.provider = None;
        session_resume_params.model = None;
        session_resume_params.mode = Some(options.mode);
        session_resume_params.tools = options.tools.clone();
        session_resume_params.max_turns = options.budget.max_turns;
        session_resume_params.max_cost_usd = options.budget.max_cost_usd;
        session_resume_params.subscribe = Some(true);
        session_resume_params
    };
    match call(context, "session/resume", &resume).await {
        Ok(started) => Ok((started, "resume")),
        Err(error) if code_of(&error) == Some("nothing_to_resume") => {
            let params = run_start(prompt::CONTINUE.to_owned(), Some(session));
            let started = call(context, "run/start", &params).await?;
            Ok((started, "continue"))
        }
        Err(error) => Err(error),
    }
}

async fn call<P: serde::Serialize>(
    context: &Context,
    method: &str,
    params: &P,
) -> Result<RunStartResponse, RpcError> {
    let params = serde_json::to_value(params).unwrap_or(Value::Null);
    let value = context.caller.call(method, Some(params)).await?;
    serde_json::from_value(value)
        .map_err(|error| RpcError::new(keel_protocol::rpc::ErrorKind::Internal, error.to_string()))
}

/// The kernel's or host's own code of a broker error, else its kind.
fn code_of(error: &RpcError) -> Option<&str> {
    let data = error.data.as_ref()?;
    ["kernel_code", "host_code", "code"]
        .iter()
        .find_map(|key| data.get(*key)?.as_str())
}

fn host_error(error: &RpcError) -> SwebenchError {
    SwebenchError::Host {
        code: code_of(error).unwrap_or("host").to_owned(),
        message: error.message.clone(),
    }
}

fn io(path: &Path, error: std::io::Error) -> SwebenchError {
    SwebenchError::Io {
        path: path.display().to_string(),
        source: error,
    }
}

/// The events file, opened to append; a line a crash cut short is ended
/// first, so the next event starts a line of its own.
fn open_events(path: &Path) -> Result<std::fs::File, SwebenchError> {
    use std::os::unix::fs::FileExt;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .map_err(|error| io(path, error))?;
    // Only the last byte tells: the file is not read again whole. A
    // file that cannot be read counts as ended, as before.
    let mut last = [b'\n'];
    if let Some(offset) = file
        .metadata()
        .ok()
        .and_then(|meta| meta.len().checked_sub(1))
        && file.read_exact_at(&mut last, offset).is_err()
    {
        last = [b'\n'];
    }
    if last[0] != b'\n' {
        file.write_all(b"\n").map_err(|error| io(path, error))?;
    }
    Ok(file)
}

/// What the dispatcher hands a run's task.
enum Routed {
    Event(Box<RunEventNotification>),
    /// The subscription lagged after this `seq`: subscribe again.
    Lagged(Option<u64>),
}

/// Notifications by run: events that arrive before their run's task
/// registers wait here.
#[derive(Default)]
struct Router {
    routes: Mutex<HashMap<String, Route>>,
}

enum Route {
    Waiting(Vec<Routed>),
    Live(mpsc::UnboundedSender<Routed>),
}

impl Router {
    fn deliver(&self, run_id: &str, routed: Routed) {
        let mut routes = lock(&self.routes);
        match routes.get_mut(run_id) {
            Some(Route::Live(sender)) => {
                if sender.send(routed).is_err() {
                    routes.remove(run_id);
                }
            }
            Some(Route::Waiting(waiting)) => waiting.push(routed),
            None => {
                routes.insert(run_id.to_owned(), Route::Waiting(vec![routed]));
            }
        }
    }

    fn register(&self, run_id: &str) -> mpsc::UnboundedReceiver<Routed> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut routes = lock(&self.routes);
        if let Some(Route::Waiting(waiting)) = routes.remove(run_id) {
            for routed in waiting {
                let _ = sender.send(routed);
            }
        }
        routes.insert(run_id.to_owned(), Route::Live(sender));
        receiver
    }

    fn forget(&self, run_id: &str) {
        lock(&self.routes).remove(run_id);
    }
}

/// Reads the connection's notifications and routes them by run.
async fn dispatch(mut connection: Connection, router: Arc<Router>) {
    while let Some(note) = connection.notification().await {
        match note.method.as_str() {
            RUN_EVENT => {
                if let Ok(event) = serde_json::from_value::<RunEventNotification>(note.params) {
                    let run_id = event.run_id.clone();
                    router.deliver(&run_id, Routed::Event(Box::new(event)));
                }
            }
            EVENTS_LAGGED => {
                if let Ok(lagged) = serde_json::from_value::<EventsLaggedNotification>(note.params)
                {
                    router.deliver(&lagged.run_id, Routed::Lagged(lagged.last_seq));
                }
            }
            _ => {}
        }
    }
}
