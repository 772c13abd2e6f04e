//! `keel run`: one prompt, one run, events on stdout.
//!
//! When the policy asks, this host asks its user: on a terminal with a
//! prompt on stderr, otherwise by reading one decision line from stdin
//! (`{"request_id": …, "decision": "approve"|"deny"}` or a bare word). End of
//! input, or anything not clearly an approval of that request, denies.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use keel_kernel::{AgentKernel, AgentRun, RunSpec};
use keel_protocol::{PermissionMode, PermissionResolution, RunEvent, RunEventKind};
use keel_provider::config::{Config, ConfigError};
use keel_provider::connect::connect;
use keel_provider::{Provider, Script, ScriptedProvider};
use keel_session::{JsonlStore, SessionStore};
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, all_tools, default_tools};
use keel_tools::sandbox::SandboxConfig;
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};

use crate::args::RunArgs;
use crate::host;
use crate::output::Output;
use crate::session_cmd;
use crate::startup::StartupError;

pub async fn run(args: RunArgs) -> Result<ExitCode, StartupError> {
    let store = Arc::new(session_cmd::open_store(&args.store)?);
    let session_id = continued_session(&store, &args).await?;
    let kernel = build_kernel(&args, store.clone())?;
    let spec = RunSpec {
        prompt: args.prompt.clone(),
        session_id,
        mode: PermissionMode::from(args.mode),
        max_turns: args.max_turns,
    };
    let run = kernel
        .create_run(spec)
        .await
        .map_err(|error| StartupError::new(error.code(), error.to_string()))?;
    let output = Output::detect();
    let mut answers = Answers::new();
    let result = host::drive(&run, &output, async |event: &RunEvent, run: &AgentRun| {
        answers.answer(event, run).await;
    })
    .await
    .map_err(|error| StartupError::new("host", error.to_string()))?;
    let path = store.dir().join(format!("{}.jsonl", result.session_id));
    output.session(&result.session_id, &path);
    Ok(host::exit_code(&result))
}

/// The session to continue: `--session`, or a fork of it at `--fork`.
async fn continued_session(
    store: &JsonlStore,
    args: &RunArgs,
) -> Result<Option<String>, StartupError> {
    let Some(wanted) = &args.session else {
        return Ok(None);
    };
    let id = session_cmd::resolve_session(store, wanted)?;
    let Some(entry) = &args.fork else {
        return Ok(Some(id));
    };
    let snapshot = store.snapshot(&id).map_err(session_cmd::session_error)?;
    let entry = session_cmd::resolve_entry(&snapshot, entry)?;
    let fork = store
        .fork(&id, &entry)
        .await
        .map_err(session_cmd::session_error)?;
    Ok(Some(fork))
}

fn build_kernel(args: &RunArgs, store: Arc<JsonlStore>) -> Result<AgentKernel, StartupError> {
    let (provider, model) = provider(args)?;
    let root = match &args.workspace {
        Some(root) => root.clone(),
        None => std::env::current_dir()
            .map_err(|error| StartupError::new("workspace", error.to_string()))?,
    };
    let workspace =
        Workspace::new(&root).map_err(|error| StartupError::new("workspace", error.to_string()))?;
    let mut sandbox = SandboxConfig {
        mode: args.sandbox.into(),
        ..SandboxConfig::default()
    };
    sandbox.readable.extend(args.sandbox_read.iter().cloned());
    sandbox.env.extend(args.sandbox_env.iter().cloned());
    keel_tools::outputs::keep_after_runs(args.keep_outputs);
    let mut builder = AgentKernel::builder()
        .provider(provider)
        .sandbox(sandbox)
        .workspace(workspace)
        .store(store)
        .tools(chosen_tools(args.tools.as_deref())?);
    if let Some(model) = model {
        builder = builder.model(model);
    }
    if let Some(prompt) = &args.system_prompt {
        builder = builder.system_prompt(prompt.clone());
    }
    builder
        .build()
        .map_err(|error| StartupError::new(error.code(), error.to_string()))
}

/// The provider and model for the run: the scripted provider with its
/// script, or a configured provider (whose key must be in its variable).
fn provider(args: &RunArgs) -> Result<(Arc<dyn Provider>, Option<String>), StartupError> {
    if args.provider == "scripted" {
        let path = args.script.as_ref().ok_or_else(|| {
            StartupError::new(
                "script_required",
                "the scripted provider needs --script FILE",
            )
        })?;
        let script = Script::from_file(path)
            .map_err(|error| StartupError::new("invalid_script", error.to_string()))?;
        return Ok((Arc::new(ScriptedProvider::new(script)), args.model.clone()));
    }
    let config_error = |error: ConfigError| StartupError::new(error.code(), error.to_string());
    let config = Config::load(args.config.as_deref()).map_err(config_error)?;
    let resolved = config
        .resolve(
            &args.provider,
            args.model.as_deref(),
            args.base_url.as_deref(),
            &|variable| std::env::var(variable).ok(),
        )
        .map_err(config_error)?;
    Ok((connect(&resolved), Some(resolved.model)))
}

/// The built-in tools named by `--tools`, in the order given.
fn chosen_tools(names: Option<&[String]>) -> Result<Vec<Arc<dyn keel_tools::Tool>>, StartupError> {
    let Some(names) = names else {
        return Ok(default_tools(BashOptions::default()));
    };
    let available = all_tools(BashOptions::default());
    names
        .iter()
        .map(|name| {
            available
                .iter()
                .find(|tool| tool.name() == name.trim())
                .cloned()
                .ok_or_else(|| {
                    let known: Vec<&str> = available.iter().map(|tool| tool.name()).collect();
                    StartupError::new(
                        "unknown_tool",
                        format!("no tool `{name}`; available: {}", known.join(", ")),
                    )
                })
        })
        .collect()
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
        let resolution = decide(line.as_deref(), request_id);
        // A stale id means the run already moved on (e.g. it was cancelled).
        let _ = run.resolve_permission(request_id, resolution);
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

/// Only an explicit approval of this request approves.
fn decide(line: Option<&str>, request_id: &str) -> PermissionResolution {
    let Some(line) = line.map(str::trim) else {
        return PermissionResolution::Denied;
    };
    let approved = if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
        let id_matches = value.get("request_id").and_then(|id| id.as_str()) == Some(request_id);
        let decision = value
            .get("decision")
            .and_then(|d| d.as_str())
            .unwrap_or_default();
        id_matches && is_approval(decision)
    } else {
        is_approval(line)
    };
    if approved {
        PermissionResolution::Approved
    } else {
        PermissionResolution::Denied
    }
}

fn is_approval(word: &str) -> bool {
    matches!(
        word.to_ascii_lowercase().as_str(),
        "approve" | "approved" | "a" | "y" | "yes"
    )
}
