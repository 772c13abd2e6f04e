//! `keel run`: one prompt, one run, printed as `--output-format` says.
//!
//! When the policy asks, this host asks its user (see `ask`): one key on a
//! terminal, one decision line on stdin otherwise.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use keel_host::{HostConfig, ProviderChoice, sessions};
use keel_kernel::{AgentRun, RunSpec};
use keel_protocol::{PermissionMode, RunEvent, SessionLine};
use keel_tools::sandbox::SandboxConfig;

use crate::args::RunArgs;
use crate::ask::Answers;
use crate::host;
use crate::output::Output;
use crate::session_cmd;
use crate::signals;
use crate::startup::StartupError;

pub async fn run(args: RunArgs) -> Result<ExitCode, StartupError> {
    let store = Arc::new(sessions::open_store(args.store.session_dir.as_deref())?);
    let continued =
        sessions::continued_session(&store, args.session.as_deref(), args.fork.as_deref()).await?;
    if let Some(repair) = &continued.repair {
        eprintln!("keel: {}", session_cmd::repaired(repair));
    }
    keel_tools::outputs::keep_after_runs(args.keep_outputs);
    if let Some(budget) = args.max_budget_usd
        && !(budget.is_finite() && budget >= 0.0)
    {
        return Err(StartupError::new(
            "usage",
            format!("--max-budget-usd must be a number of USD, 0 or more (got {budget})"),
        ));
    }
    let kernel = host_config(&args).kernel(store.clone())?;
    let prompt = prompt(args.prompt.as_deref())?;
    let spec = RunSpec::new(prompt)
        .session_opt(continued.session_id)
        .mode(PermissionMode::from(args.mode))
        .max_turns(args.max_turns)
        .max_cost_usd(args.max_budget_usd);
    let run = kernel
        .create_run(spec)
        .await
        .map_err(|error| StartupError::new(error.code(), error.to_string()))?;
    let output = Output::new(&args.output, Answers::on_terminal());
    let received = signals::Received::default();
    let mut answers = Answers::new(received.cancelled());
    let driven = host::drive(&run, &output, async |event: &RunEvent, run: &AgentRun| {
        answers.answer(event, run, &output).await;
    });
    let (result, changes) = tokio::select! {
        result = driven => result,
        never = signals::cancel_on_signal(&run, &received) => match never {},
    }
    .map_err(|error| StartupError::new("host", error.to_string()))?;
    let path = sessions::session_file(&store, &result.session_id)?;
    let session = SessionLine {
        id: result.session_id.clone(),
        path: path.display().to_string(),
    };
    host::finish(&output, &result, changes.as_ref(), Some(session))?;
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

/// The host configuration the arguments describe.
fn host_config(args: &RunArgs) -> HostConfig {
    let provider = ProviderChoice::named(
        &args.provider,
        args.model.clone(),
        args.base_url.clone(),
        args.config.clone(),
        args.script.clone(),
    );
    let mut config = HostConfig::new(provider);
    config.workspace = args.workspace.clone();
    config.tools = args.tools.clone();
    config.system_prompt = args.system_prompt.clone();
    config.sandbox = SandboxConfig {
        mode: args.sandbox.into(),
        ..SandboxConfig::default()
    };
    config
        .sandbox
        .readable
        .extend(args.sandbox_read.iter().cloned());
    config.sandbox.env.extend(args.sandbox_env.iter().cloned());
    config
}
