//! `keel run`: one prompt, one run, printed as `--output-format` says.
//!
//! Its defaults come from `config.toml` in layers (keel-host's `settings`);
//! the flags override them. Warnings about the configuration (a project
//! layer that tried to widen, a model outside the catalog) go to stderr
//! before the run.
//!
//! When the policy asks, this host asks its user (see `ask`): one key on a
//! terminal, one decision line on stdin otherwise. With `--input-format
//! stream-json`, stdin carries host-control messages instead
//! (`stream_input`).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use keel_host::sessions::Resume;
use keel_host::{Choices, RunSetup, Settings, sessions};
use keel_kernel::{AgentRun, RunSpec};
use keel_protocol::{PermissionMode, RunEvent};

use crate::args::{InputFormat, OutputArgs, ResumeArgs, RunArgs};
use crate::ask::{self, Answers};
use crate::host;
use crate::images;
use crate::output::Output;
use crate::picker;
use crate::session_cmd;
use crate::signals;
use crate::startup::StartupError;
use crate::stream_input::{self, FirstRun};

pub async fn run(args: RunArgs) -> Result<ExitCode, StartupError> {
    check_combinations(&args)?;
    check_last_message_file(&args.output)?;
    let images = images::read_all(&args.images)?;
    let setup = run_setup(&args)?;
    for warning in &setup.warnings {
        eprintln!(
            "keel: warning: {}",
            crate::escape::one_line(&warning.message)
        );
    }
    let store = Arc::new(sessions::open_store(args.store.session_dir.as_deref())?);
    let workspace = match &args.workspace {
        Some(given) if args.session.is_some() || args.continue_latest => {
            Some(sessions::workspace_root(Some(given))?)
        }
        _ => None,
    };
    let resume = {
        let mut resume = Resume::default();
        resume.session = args.session.as_deref();
        resume.fork = args.fork.as_deref();
        resume.latest = args.continue_latest;
        resume.workspace = workspace.as_deref();
        resume.workspace_given = args.workspace.is_some();
        resume
    };
    let continued = sessions::continued_session(&store, resume).await?;
    if let Some(repair) = &continued.repair {
        eprintln!("keel: {}", session_cmd::repaired(repair));
    }
    check_budget(args.max_budget_usd)?;
    if args.input_format == InputFormat::StreamJson {
        let (broker, runs) = stream_broker(&args, setup.mode, &store)?;
        let first = match args.prompt.as_deref() {
            Some(argument) => FirstRun::Prompt(prompt(Some(argument))?),
            None => FirstRun::Wait,
        };
        let output = Output::new(&args.output, false);
        let session = continued.session_id;
        return stream_input::run(&broker, &store, output, first, session, runs).await;
    }
    let kernel = host_config(&args, setup.config).kernel(store.clone())?;
    let spec = spec_for(&args, setup.mode);
    let prompt_from_stdin = match args.prompt.as_deref() {
        Some(argument) => argument == "-",
        None => !std::io::stdin().is_terminal(),
    };
    let text = prompt(args.prompt.as_deref())?;
    if !images.is_empty() && text.trim().is_empty() {
        return Err(StartupError::new(
            "no_prompt",
            "--image needs a text prompt beside the images",
        ));
    }
    let spec = images
        .into_iter()
        .fold(spec(text, continued.session_id), RunSpec::image);
    let (spec, nobody) = warn_if_nobody_to_ask(spec, setup.mode, prompt_from_stdin);
    let received = signals::Received::install();
    let run = kernel.create_run(spec).await?;
    let code = drive(run, &store, &args.output, &received, nobody).await;
    apply_retention(&store, setup.retention).await;
    code
}

/// Prunes the store by the configured retention once a day
/// (keel-host's `prune`), after the run so that it never delays one; a
/// failure is only logged.
async fn apply_retention(store: &keel_session::JsonlStore, retention: Option<std::time::Duration>) {
    let Some(retention) = retention else {
        return;
    };
    match keel_host::prune::prune_if_due(store, retention, keel_protocol::now_ms()).await {
        Ok(Some(report)) if !report.removed.is_empty() => tracing::info!(
            removed = report.removed.len(),
            freed_bytes = report.freed(),
            "pruned sessions past their retention"
        ),
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "could not prune sessions past their retention"),
    }
}

/// `keel chat`: the same settings, session selection and broker as
/// `run --input-format stream-json`, driven by a person at a terminal
/// (`chat`).
pub async fn chat(args: RunArgs) -> Result<ExitCode, StartupError> {
    check_combinations(&args)?;
    crate::chat::check_args(&args)?;
    let first = match args.prompt.as_deref() {
        Some("-") => {
            return Err(StartupError::new(
                "usage",
                "keel chat reads its prompts from the terminal: `-` does not apply",
            ));
        }
        Some(argument) => Some(prompt(Some(argument))?),
        None => None,
    };
    let setup = run_setup(&args)?;
    for warning in &setup.warnings {
        eprintln!(
            "keel: warning: {}",
            crate::escape::one_line(&warning.message)
        );
    }
    let store = Arc::new(sessions::open_store(args.store.session_dir.as_deref())?);
    let workspace = sessions::workspace_root(args.workspace.as_deref())?;
    let continued = sessions::continued_session(&store, {
        let mut resume = Resume::default();
        resume.session = args.session.as_deref();
        resume.fork = args.fork.as_deref();
        resume.latest = args.continue_latest;
        resume.workspace = Some(&workspace);
        resume.workspace_given = args.workspace.is_some();
        resume
    })
    .await?;
    if let Some(repair) = &continued.repair {
        eprintln!("keel: {}", session_cmd::repaired(repair));
    }
    check_budget(args.max_budget_usd)?;
    let (broker, runs) = stream_broker(&args, setup.mode, &store)?;
    crate::chat::run(crate::chat::Setup {
        broker,
        store,
        runs,
        session: continued.session_id,
        first,
        args,
        workspace,
    })
    .await
}

/// Warns (stderr, and a `warning` event of the run) when nobody at a
/// terminal can answer the run's permission requests ([`ask::nobody_to_ask`]);
/// whether nobody at all can.
fn warn_if_nobody_to_ask(
    spec: RunSpec,
    mode: PermissionMode,
    prompt_from_stdin: bool,
) -> (RunSpec, bool) {
    match ask::nobody_to_ask(mode, prompt_from_stdin) {
        Some((code, message)) => {
            eprintln!("keel: warning: {}", crate::escape::one_line(&message));
            let nobody = code == "nobody_to_ask";
            (spec.warning(code, message), nobody)
        }
        None => (spec, false),
    }
}

/// `keel resume [SESSION | --last] [PROMPT]`: continues a session. A run a
/// crash interrupted is recovered first (docs/recovery.md) under the mode
/// the flags and configuration give now, and PROMPT follows it as a
/// follow-up of that run; otherwise PROMPT starts the session's next run.
/// With stream-json input, standard input drives the runs
/// (`stream_input`).
pub async fn resume(args: ResumeArgs) -> Result<ExitCode, StartupError> {
    let ResumeArgs {
        last,
        run: mut args,
        then,
    } = args;
    args.continue_latest |= last;
    // The first positional is the session unless another flag names it.
    let then = if args.session.is_some() || args.continue_latest {
        if then.is_some() {
            return Err(StartupError::new(
                "usage",
                "keel resume with --last, --session or --continue takes only the prompt",
            ));
        }
        args.prompt.take()
    } else {
        args.session = args.prompt.take();
        then
    };
    if args.fork.is_some() {
        return Err(StartupError::new(
            "usage",
            "keel resume continues a session in place: --fork does not apply \
             (keel run --session ID --fork ENTRY continues a fork)",
        ));
    }
    if !args.images.is_empty() {
        return Err(StartupError::new(
            "usage",
            "keel resume takes no --image; keel run --session ID --image FILE sends one",
        ));
    }
    if args.input_format == InputFormat::StreamJson && then.is_some() {
        return Err(StartupError::new(
            "usage",
            "with --input-format stream-json the prompts come from standard input, not PROMPT",
        ));
    }
    check_last_message_file(&args.output)?;
    let setup = run_setup(&args)?;
    for warning in &setup.warnings {
        eprintln!(
            "keel: warning: {}",
            crate::escape::one_line(&warning.message)
        );
    }
    let store = Arc::new(sessions::open_store(args.store.session_dir.as_deref())?);
    let workspace = match &args.workspace {
        Some(given) => Some(sessions::workspace_root(Some(given))?),
        None => None,
    };
    if args.session.is_none() && !args.continue_latest {
        args.session = Some(pick_session(&store, workspace.as_deref()).await?);
    }
    let continued = sessions::continued_session(&store, {
        let mut resume = Resume::default();
        resume.session = args.session.as_deref();
        resume.fork = None;
        resume.latest = args.continue_latest;
        resume.workspace = workspace.as_deref();
        resume.workspace_given = args.workspace.is_some();
        resume
    })
    .await?;
    if let Some(repair) = &continued.repair {
        eprintln!("keel: {}", session_cmd::repaired(repair));
    }
    let Some(session_id) = continued.session_id else {
        return Err(StartupError::new(
            "usage",
            "this workspace has no session to resume (keel session list --all lists every one)",
        ));
    };
    let interrupted = keel_kernel::session_interrupted(store.as_ref(), &session_id).await?;
    // Another workspace than the session's only when named explicitly
    // (`continued_session` refused it otherwise): warn, and record it.
    let moved_from = match &workspace {
        Some(workspace) if interrupted => {
            sessions::resume_workspace(&store, &session_id, workspace).await?
        }
        _ => None,
    };
    if let (Some(from), Some(to)) = (&moved_from, &workspace) {
        eprintln!(
            "keel: warning: resuming session {session_id} in workspace {}, not in its own \
             workspace {}: the interrupted calls are judged against the files in {}",
            crate::escape::visible(&to.display().to_string()),
            crate::escape::visible(from),
            crate::escape::visible(&to.display().to_string())
        );
    }
    check_budget(args.max_budget_usd)?;
    if args.input_format == InputFormat::StreamJson {
        // The broker records the move of workspace itself (`session/resume`).
        let (broker, runs) = stream_broker(&args, setup.mode, &store)?;
        let output = Output::new(&args.output, false);
        let first = if interrupted {
            FirstRun::Resume
        } else {
            FirstRun::Wait
        };
        let session = Some(session_id);
        return stream_input::run(&broker, &store, output, first, session, runs).await;
    }
    let prompt_from_stdin = then.as_deref() == Some("-");
    let then = match then.as_deref() {
        Some(argument) => Some(prompt(Some(argument))?),
        None => None,
    };
    if !interrupted && then.is_none() && crate::chat::on_terminal() {
        // Nothing to recover and nothing said: on a terminal, the chat
        // goes on in the session, as peers' `resume` does.
        args.session = Some(session_id);
        args.continue_latest = false;
        return Box::pin(chat(args)).await;
    }
    if !interrupted && then.is_none() {
        let short = sessions::short_id(&store, &session_id);
        return Err(StartupError::new(
            "nothing_to_resume",
            format!(
                "session {short} has no interrupted run; give a prompt to continue it: \
                 keel resume {short} \"…\""
            ),
        ));
    }
    let kernel = host_config(&args, setup.config).kernel(store.clone())?;
    let spec = spec_for(&args, setup.mode);
    let received = signals::Received::install();
    let run = if interrupted {
        let spec = spec(String::new(), Some(session_id));
        let spec = match moved_from {
            Some(from) => spec.moved_from_workspace(from),
            None => spec,
        };
        let (spec, nobody) = warn_if_nobody_to_ask(spec, setup.mode, prompt_from_stdin);
        let run = kernel.resume_with(spec).await?;
        if let Some(text) = then {
            // Delivered when the recovered run would settle: one run, one result.
            run.follow_up(text)
                .map_err(|error| StartupError::new("host", error.to_string()))?;
        }
        (run, nobody)
    } else {
        let text = then.unwrap_or_default();
        let spec = spec(text, Some(session_id));
        let (spec, nobody) = warn_if_nobody_to_ask(spec, setup.mode, prompt_from_stdin);
        (kernel.create_run(spec).await?, nobody)
    };
    let (run, nobody) = run;
    let code = drive(run, &store, &args.output, &received, nobody).await;
    apply_retention(&store, setup.retention).await;
    code
}

/// The most sessions the picker lists.
const PICKER_SESSIONS: usize = 20;

/// `keel resume` with no session named: on a terminal, lists this
/// workspace's latest sessions (every workspace's when it has none) and
/// reads the user's choice; otherwise a usage error.
async fn pick_session(
    store: &keel_session::JsonlStore,
    workspace: Option<&std::path::Path>,
) -> Result<String, StartupError> {
    use std::io::IsTerminal as _;
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(StartupError::new(
            "usage",
            "keel resume needs the session to continue: SESSION, --last or --session ID \
             (on a terminal, a picker lists them)",
        ));
    }
    let here = match workspace {
        Some(root) => root.to_path_buf(),
        None => sessions::workspace_root(None)?,
    };
    let (mut listed, _) = sessions::sessions_of(store, Some(&here)).await?;
    if listed.is_empty() {
        listed = sessions::sessions_of(store, None).await?.0;
    }
    listed.truncate(PICKER_SESSIONS);
    let short = sessions::short_ids(store)?;
    let choices: Vec<picker::Choice> = listed
        .into_iter()
        .map(|info| picker::Choice {
            short_id: short
                .get(&info.id)
                .cloned()
                .unwrap_or_else(|| info.id.clone()),
            title: info.title.unwrap_or_default(),
            last_activity: info.last_activity,
            id: info.id,
        })
        .collect();
    let stdin = std::io::stdin();
    picker::pick(&choices, &mut stdin.lock(), &mut std::io::stderr())?
        .ok_or_else(|| StartupError::new("cancelled", "no session picked"))
}

/// The `RunSpec` of each run of this invocation, from its prompt and session:
/// the mode, turn limit and budget the flags and configuration give.
fn spec_for(args: &RunArgs, mode: PermissionMode) -> impl Fn(String, Option<String>) -> RunSpec {
    let (max_turns, budget) = (args.max_turns, args.max_budget_usd);
    move |prompt, session| {
        RunSpec::new(prompt)
            .session_opt(session)
            .mode(mode)
            .max_turns(max_turns)
            .max_cost_usd(budget)
    }
}

/// Refuses a `--max-budget-usd` that is not a number of USD, 0 or more.
fn check_budget(budget: Option<f64>) -> Result<(), StartupError> {
    match budget {
        Some(budget) if !(budget.is_finite() && budget >= 0.0) => Err(StartupError::new(
            "usage",
            format!("--max-budget-usd must be a number of USD, 0 or more (got {budget})"),
        )),
        _ => Ok(()),
    }
}

/// Drives a started run to its end, answering permission requests, and
/// prints where its session is.
async fn drive(
    run: AgentRun,
    store: &Arc<keel_session::JsonlStore>,
    output: &OutputArgs,
    received: &signals::Received,
    nobody: bool,
) -> Result<ExitCode, StartupError> {
    let output = Output::new(output, Answers::on_terminal());
    output.set_workspace(run.workspace_root().to_path_buf());
    let mut answers = Answers::new(received.cancelled(), nobody);
    let driven = host::drive(&run, &output, async |event: &RunEvent, run: &AgentRun| {
        answers.answer(event, run, &output).await;
    });
    let (result, changes) = tokio::select! {
        result = driven => result,
        never = signals::cancel_on_signal(&run, received) => match never {},
    }
    .map_err(|error| StartupError::new("host", error.to_string()))?;
    let stored = host::Stored::of(store, &result.session_id)?;
    host::finish(&output, &result, changes.as_ref(), Some(stored))?;
    Ok(match received.exit_code() {
        Some(code) => ExitCode::from(code),
        None => host::exit_code(&result),
    })
}

/// The largest prompt read from a file or standard input.
const MAX_PROMPT_BYTES: u64 = 16 * 1024 * 1024;

/// The prompt: the argument, a file named `@FILE`, or standard input for `-`
/// or when no prompt is given and standard input is not a terminal.
fn prompt(argument: Option<&str>) -> Result<String, StartupError> {
    let from_stdin = match argument {
        Some("-") => true,
        None => !std::io::stdin().is_terminal(),
        Some(text) => {
            let Some(path) = text.strip_prefix('@') else {
                return Ok(text.to_owned());
            };
            let file = std::fs::File::open(path).map_err(|error| {
                StartupError::new(
                    "prompt_file",
                    format!("cannot read the prompt file {path}: {error}"),
                )
            })?;
            return read_prompt(file, &format!("the prompt file {path}"));
        }
    };
    if !from_stdin {
        return Err(StartupError::new(
            "no_prompt",
            "no prompt: give it as an argument, as @FILE, or on standard input (`-`)",
        ));
    }
    read_prompt(std::io::stdin().lock(), "standard input")
}

fn read_prompt(source: impl std::io::Read, what: &str) -> Result<String, StartupError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    source
        .take(MAX_PROMPT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| {
            StartupError::new("prompt_file", format!("cannot read {what}: {error}"))
        })?;
    if bytes.len() as u64 > MAX_PROMPT_BYTES {
        return Err(StartupError::new(
            "prompt_too_large",
            format!("{what} holds more than {MAX_PROMPT_BYTES} bytes"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| StartupError::new("prompt_not_utf8", format!("{what} is not valid UTF-8")))
}

/// Checks `-o FILE` before the run, so that no run's work ends in a final
/// message that cannot be written: the file is a writable non-directory,
/// or does not exist in a writable directory. Nothing is created; the file
/// is written when the run ends.
fn check_last_message_file(output: &OutputArgs) -> Result<(), StartupError> {
    use nix::unistd::{AccessFlags, access};
    let Some(path) = &output.output_last_message else {
        return Ok(());
    };
    let refused = |why: &dyn std::fmt::Display| {
        StartupError::new(
            "output_last_message",
            format!(
                "cannot write the final message to {}: {why}",
                path.display()
            ),
        )
    };
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_dir() => Err(refused(&"it is a directory")),
        Ok(_) => access(path, AccessFlags::W_OK).map_err(|errno| refused(&errno.desc())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let parent = path
                .parent()
                .filter(|parent| !parent.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            match std::fs::metadata(parent) {
                Ok(metadata) if metadata.is_dir() => {
                    access(parent, AccessFlags::W_OK | AccessFlags::X_OK)
                        .map_err(|errno| refused(&errno.desc()))
                }
                Ok(_) => Err(refused(&format!("{} is not a directory", parent.display()))),
                Err(error) => Err(refused(&format!("{}: {error}", parent.display()))),
            }
        }
        Err(error) => Err(refused(&error)),
    }
}

/// Flag combinations clap's attributes cannot express.
fn check_combinations(args: &RunArgs) -> Result<(), StartupError> {
    if args.fork.is_some() && args.session.is_none() && !args.continue_latest {
        return Err(StartupError::new(
            "usage",
            "--fork needs --session ID or --continue: it names an entry of that session",
        ));
    }
    if args.input_format == InputFormat::StreamJson && args.prompt.as_deref() == Some("-") {
        return Err(StartupError::new(
            "usage",
            "with --input-format stream-json, standard input carries control messages: \
             send the prompt as {\"type\": \"user_message\", \"text\": …} instead of `-`",
        ));
    }
    if args.input_format == InputFormat::StreamJson && !args.images.is_empty() {
        return Err(StartupError::new(
            "usage",
            "--image is not supported with --input-format stream-json",
        ));
    }
    Ok(())
}

/// The settings' layers (config.toml, --profile, -c, the project layer of
/// the workspace) resolved with the flags.
fn run_setup(args: &RunArgs) -> Result<RunSetup, StartupError> {
    let workspace = match &args.workspace {
        Some(workspace) => Some(workspace.clone()),
        None => std::env::current_dir().ok(),
    };
    let mut sources = args.settings.sources();
    sources.workspace = workspace;
    let settings = Settings::load(&sources)?;
    Ok(settings.resolve({
        let mut choices = Choices::default();
        choices.provider = args.provider.clone();
        choices.model = args.model.clone();
        choices.base_url = args.base_url.clone();
        choices.script = args.script.clone();
        choices.mode = args.mode.map(PermissionMode::from);
        choices.tools = args.tools.clone();
        choices.sandbox_read = args.sandbox_read.clone();
        choices.workspace = args.workspace.clone();
        choices
    })?)
}

/// The host configuration with the flags that have no configuration key
/// (applied by keel-host, as every host applies them).
fn host_config(args: &RunArgs, config: keel_host::HostConfig) -> keel_host::HostConfig {
    host_options(args).apply(config)
}

/// The flags that have no configuration key.
fn host_options(args: &RunArgs) -> keel_host::HostOptions {
    let mut options = keel_host::HostOptions::default();
    options.system_prompt = args.system_prompt.clone();
    options.append_system_prompt = args.append_system_prompt.clone();
    options.context_window = args.context_window;
    options.no_environment = args.no_environment;
    options.sandbox_mode = Some(args.sandbox.into());
    options.sandbox_env = args.sandbox_env.clone();
    options.keep_outputs = args.keep_outputs;
    options
}

/// The broker `--input-format stream-json` drives its runs through (the
/// same configuration layers and flags as a kernel of `keel run`), and
/// what each run asks of it; its kernel is built now, so a configuration
/// error is a startup error before any input is read.
fn stream_broker(
    args: &RunArgs,
    mode: PermissionMode,
    store: &Arc<keel_session::JsonlStore>,
) -> Result<(keel_host::broker::Broker, stream_input::Runs), StartupError> {
    let mut config = keel_host::broker::BrokerConfig::default();
    config.config_file = args.settings.config.clone();
    config.profile = args.settings.profile.clone();
    config.overrides = args.settings.overrides.clone();
    config.provider = args.provider.clone();
    config.model = args.model.clone();
    config.base_url = args.base_url.clone();
    config.script = args.script.clone();
    config.sandbox_read = args.sandbox_read.clone();
    config.host = host_options(args);
    // One client that prints every event: no watchdog (as `keel run`),
    // and room for a whole run's events.
    config.stall_timeout = None;
    config.notification_buffer = 1 << 16;
    config.ring_events = 1 << 16;
    config.ring_bytes = 64 << 20;
    let broker = keel_host::broker::Broker::with_store(config, Arc::clone(store));
    let workspace = sessions::workspace_root(args.workspace.as_deref())?;
    let template = {
        let mut run_start_params = keel_protocol::rpc::methods::RunStartParams::default();
        run_start_params.workspace = workspace.display().to_string();
        run_start_params.mode = Some(mode);
        run_start_params.tools = args.tools.clone();
        run_start_params.max_turns = args.max_turns;
        run_start_params.max_cost_usd = args.max_budget_usd;
        run_start_params
    };
    broker.prepare(&template)?;
    Ok((broker, stream_input::Runs { template }))
}
