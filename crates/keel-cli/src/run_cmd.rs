//! `keel run`: one prompt, one run, events on stdout.
//!
//! When the policy asks, this host asks its user: on a terminal with a
//! prompt on stderr, otherwise by reading one decision line from stdin
//! (`{"request_id": …, "decision": "approve"|"deny"}` or a bare word). End of
//! input, or anything not clearly an approval of that request, denies.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use keel_host::{HostConfig, ProviderChoice, answers, sessions};
use keel_kernel::{AgentRun, ControlError, RunSpec};
use keel_protocol::{PermissionMode, PermissionResolution, RunEvent, RunEventKind};
use keel_tools::sandbox::SandboxConfig;
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};

use crate::args::RunArgs;
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
    let kernel = host_config(&args).kernel(store.clone())?;
    let prompt = prompt(args.prompt.as_deref())?;
    let spec = RunSpec::new(prompt)
        .session_opt(continued.session_id)
        .mode(PermissionMode::from(args.mode))
        .max_turns(args.max_turns);
    // Before the run starts: a signal may come as soon as its first
    // command runs.
    let handlers = signals::Handlers::install();
    let run = kernel
        .create_run(spec)
        .await
        .map_err(|error| StartupError::new(error.code(), error.to_string()))?;
    let output = Output::detect();
    let mut answers = Answers::new();
    let received = signals::Received::default();
    let driven = host::drive(&run, &output, async |event: &RunEvent, run: &AgentRun| {
        answers.answer(event, run).await;
    });
    let result = tokio::select! {
        result = driven => result,
        never = signals::cancel_on_signal(handlers, &run, &received) => match never {},
    }
    .map_err(|error| StartupError::new("host", error.to_string()))?;
    output.session(
        &result.session_id,
        &sessions::session_file(&store, &result.session_id)?,
    );
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

/// Answers permission requests from the terminal or from stdin.
struct Answers {
    stdin: Option<Lines<BufReader<Stdin>>>,
    terminal: bool,
}

impl Answers {
    fn new() -> Self {
        Self {
            stdin: Some(BufReader::new(tokio::io::stdin()).lines()),
            terminal: std::io::stdin().is_terminal(),
        }
    }

    async fn answer(&mut self, event: &RunEvent, run: &AgentRun) {
        let RunEventKind::PermissionRequested {
            request_id,
            tool_name,
            reason,
            arguments,
            ..
        } = &event.kind
        else {
            return;
        };
        if self.terminal {
            eprint!("Allow {tool_name} {arguments}? ({reason}) [y/N] ");
        }
        let line = self.read_line().await;
        let answer = answers::answer_line(line.as_deref(), request_id);
        // A stale id means the run already moved on (e.g. it was cancelled).
        if let Err(ControlError::UnsupportedScope(_)) = run.resolve_permission(request_id, answer) {
            eprintln!(
                "keel: answers that hold `always` are not supported yet; request {request_id} is denied"
            );
            let _ = run.resolve_permission(request_id, PermissionResolution::Denied);
        }
    }

    async fn read_line(&mut self) -> Option<String> {
        let lines = self.stdin.as_mut()?;
        match lines.next_line().await {
            Ok(Some(line)) => Some(line),
            _ => {
                self.stdin = None;
                None
            }
        }
    }
}
