//! The `bash` tool: runs a shell command in the workspace.
//!
//! The command runs as `shell -c command` in the workspace root, with an
//! allowlisted environment ([`crate::env`]) taken from the host's snapshot
//! in the sandbox settings (`SandboxConfig::host_env`, never the process
//! environment), and no stdin. A sandboxed
//! command is started by the namespaces the sandbox holds for the run
//! ([`crate::sandbox::spawn`]), in PID, mount and IPC namespaces of its own:
//! when its shell exits, every process it left behind dies with its PID
//! namespace, whatever session or process group it moved to, and a timeout
//! or a cancellation kills the namespace. An unsandboxed command runs in its
//! own process group, killed on a timeout, a cancellation, and after a
//! normal exit too, so background stragglers do not outlive the call.
//!
//! The timeout is capped ([`BashOptions::max_timeout`]); output is bounded
//! (see [`super::output`]): a flood is killed, the log and the progress
//! stream stop at their caps.
//!
//! Output from stdout and stderr is streamed as progress and collected in
//! arrival order with bounded memory (see [`super::output`]): once it passes
//! [`MAX_BYTES`](crate::truncate::MAX_BYTES) it is
//! spilled to a log file and only a rolling tail stays in memory. The result
//! shows the tail (at most 2000 lines / 50 KB) and, when
//! truncated, names the log file holding the full output.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use keel_protocol::{ExecutionMode, IntentKind, IntentScope, OperationIntent, ToolErrorCode};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::unix::pipe;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::output::{Collected, Collector, Limits};
use super::parse_arguments;
use super::process::{Confined, Exit, GroupKiller, Pipes, Process, Reader};
use crate::ShellExecution;
use crate::env::{HostEnv, child_env};
use crate::sandbox::{CallSpec, HolderPool, SANDBOX_TMPDIR, Sandbox, SandboxLevel};
use crate::shell;
use receipt::{Recorder, Sink};

/// Where the analysis takes `$TMPDIR` to point (see [`BashTool::intent`]).
const TMPDIR_STAND_IN: &str = "/keel-private-tmp";
use crate::tool::{Classification, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::workspace::Workspace;

/// How long pipes may stay open after the command has ended.
const PIPE_GRACE: Duration = Duration::from_millis(200);

/// How the `bash` tool runs commands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BashOptions {
    /// Timeout when the call gives none.
    pub default_timeout: Duration,
    /// The longest timeout a call may ask for; longer ones are cut to it.
    pub max_timeout: Duration,
    /// The shell, run as `shell -c command`.
    pub shell: PathBuf,
    /// Environment variables the child receives besides the allowlist
    /// (`PATH`, `HOME`, locale, …) and the sandbox configuration's.
    pub env_passthrough: Vec<String>,
    /// Bytes of a command's output the full log keeps at most.
    pub log_limit: u64,
    /// Bytes of a command's output streamed as progress at most.
    pub progress_limit: u64,
    /// Output bytes per second above which a second counts as flooded.
    pub flood_rate: u64,
    /// Consecutive flooded seconds after which the command is killed.
    pub flood_seconds: u32,
    /// Where commands run: on this machine (the default), or in a
    /// container through its client's `exec`.
    pub executor: Executor,
}

/// Where the `bash` tool runs its commands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Executor {
    /// On this machine: `shell -c command` in the workspace root, in the OS
    /// sandbox when the call's level asks for it and it is enforced.
    #[default]
    Host,
    /// In a running container (e.g. a SWE-bench instance's), whose workdir
    /// is the workspace bind-mounted: the container is the isolation, so the
    /// OS sandbox is not applied; the command runs through a strict argv
    /// ([`ContainerExec::argv`]), never a host shell.
    Container(ContainerExec),
}

/// A container's `exec`: `CLIENT exec --workdir WORKDIR CONTAINER SHELL -lc
/// COMMAND`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContainerExec {
    /// The container client (`docker`), by path or found on `PATH`.
    pub client: PathBuf,
    /// The container's id or name.
    pub container: String,
    /// The working directory inside it (where the workspace is mounted).
    pub workdir: String,
    /// The shell inside it.
    pub shell: String,
}

impl ContainerExec {
    /// `client exec` into `container` at `workdir`, with `/bin/bash`.
    pub fn new(
        client: impl Into<PathBuf>,
        container: impl Into<String>,
        workdir: impl Into<String>,
    ) -> Self {
        Self {
            client: client.into(),
            container: container.into(),
            workdir: workdir.into(),
            shell: "/bin/bash".to_owned(),
        }
    }

    /// The argv that runs `command`: each part one argument, nothing read
    /// by a shell on this machine. The client's standard input is not
    /// attached (no `-i`), and no terminal is allocated.
    pub fn argv(&self, command: &str) -> Vec<OsString> {
        vec![
            self.client.clone().into_os_string(),
            "exec".into(),
            "--workdir".into(),
            self.workdir.clone().into(),
            self.container.clone().into(),
            self.shell.clone().into(),
            "-lc".into(),
            command.into(),
        ]
    }
}

/// Variables of the host's snapshot a container client needs to reach its
/// engine, passed to it besides the allowlist.
pub const CONTAINER_CLIENT_ENV: &[&str] = &[
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
];

impl Default for BashOptions {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(60 * 60),
            shell: PathBuf::from("/bin/bash"),
            env_passthrough: Vec::new(),
            log_limit: 32 << 20,
            progress_limit: 4 << 20,
            flood_rate: 8 << 20,
            flood_seconds: 3,
            executor: Executor::Host,
        }
    }
}

impl BashOptions {
    fn limits(&self) -> Limits {
        Limits {
            log_bytes: self.log_limit,
            progress_bytes: self.progress_limit,
            flood_rate: self.flood_rate,
            flood_windows: self.flood_seconds.max(1),
        }
    }
}

/// Runs shell commands in the workspace root.
#[derive(Debug, Clone, Default)]
pub struct BashTool {
    options: BashOptions,
}

impl BashTool {
    /// A bash tool with these options.
    pub fn new(options: BashOptions) -> Self {
        Self { options }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BashArguments {
    command: String,
    timeout: Option<u64>,
}

impl Tool for BashTool {
    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        "Run a bash command in the workspace root. Returns stdout and stderr combined; \
         long output keeps its last 2000 lines or 50 KB and the full output is saved to a log file. \
         Background processes are killed when the command ends."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The bash command to run."},
                "timeout": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.options.max_timeout.as_secs().max(1),
                    "description": "Timeout in seconds; the command and everything it started is killed when it passes."
                }
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    fn idempotency(&self) -> keel_protocol::Idempotency {
        keel_protocol::Idempotency::Command
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Sequential
    }

    fn intent(&self, arguments: &Value, workspace: &Workspace) -> OperationIntent {
        self.classify(arguments, workspace).0
    }

    fn classify(&self, arguments: &Value, workspace: &Workspace) -> (OperationIntent, Vec<String>) {
        let classification = self.classification(arguments, workspace);
        (classification.intent, classification.reasons)
    }

    fn classification(&self, arguments: &Value, workspace: &Workspace) -> Classification {
        let Some(command) = arguments.get("command").and_then(Value::as_str) else {
            let intent = OperationIntent::new(IntentKind::Unknown, IntentScope::Unknown);
            return Classification::new(intent, vec!["the call has no command".to_owned()]);
        };
        // The private temp dir does not exist yet; any stand-in outside the
        // workspace lets the analysis tell `$TMPDIR` paths from others, and
        // the sandbox confines them to the real one.
        let analysis = shell::analyze(command, workspace.root(), Some(Path::new(TMPDIR_STAND_IN)));
        let intent = {
            let mut operation_intent = OperationIntent::new(analysis.kind, analysis.scope);
            operation_intent.targets = analysis.targets;
            operation_intent
        };
        // In a container, Keel's sandbox does not confine the command.
        let in_sandbox = matches!(self.options.executor, Executor::Host);
        Classification::new(intent, analysis.reasons).confinable(in_sandbox && analysis.confinable)
    }

    fn approval_binding(
        &self,
        arguments: &Value,
        workspace: &Workspace,
        env: &HostEnv,
    ) -> Option<Value> {
        let command = arguments.get("command").and_then(Value::as_str)?;
        crate::binding::command(workspace, command, Some(Path::new(TMPDIR_STAND_IN)), env)
    }

    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(async move {
            let arguments: BashArguments = parse_arguments(self.name(), arguments)?;
            let timeout = arguments
                .timeout
                .map_or(self.options.default_timeout, Duration::from_secs)
                .min(self.options.max_timeout);
            let Some(execution) = context.extension::<ShellExecution>() else {
                return Err(ToolError::new(
                    ToolErrorCode::SandboxUnavailable,
                    "The host gave this call no sandbox to run a command in; nothing ran",
                ));
            };
            let root = context.workspace.root();
            let mut listed = self.options.env_passthrough.clone();
            listed.extend(execution.sandbox.config.env.iter().cloned());
            let (mut process, mut pipes) = self.spawn(
                &arguments.command,
                root,
                &execution.sandbox,
                &execution.holders,
                &listed,
            )?;
            let recorder = execution
                .receipts
                .as_ref()
                .and_then(|call| Recorder::start(call, &process, self.options.log_limit));
            keel_failpoint::hit(keel_failpoint::IN_BASH);
            let collector = Collector::new(
                context.progress.clone(),
                self.options.limits(),
                context.outputs.clone(),
            );
            let mut sink = Sink {
                collector,
                recorder,
            };
            let ending = run(
                &mut process,
                &mut pipes,
                &mut sink,
                &context.cancel,
                timeout,
            )
            .await;
            process.kill();
            let ending = match ending {
                Ending::Exited(status) => Ending::Exited(status),
                other => {
                    // Killed: wait until every process of it is gone.
                    process.reap().await;
                    other
                }
            };
            drain(&mut pipes, &mut sink).await;
            let Sink {
                collector,
                recorder,
            } = sink;
            let collected = collector.finish().await;
            let (ended, exit_code) = receipt::describe(&ending);
            let confined = execution
                .sandbox
                .is_enforced()
                .then_some(execution.sandbox.level);
            let result = outcome(
                ending,
                collected,
                timeout,
                self.options.flood_rate,
                confined,
            );
            if let Some(recorder) = recorder {
                recorder.finish(ended, exit_code, &result).await;
            }
            result
        })
    }
}

impl BashTool {
    /// Starts `shell -c command`: in the sandbox's held namespaces when it
    /// is enforced, else as a plain child in its own process group.
    fn spawn(
        &self,
        command: &str,
        root: &Path,
        sandbox: &Sandbox,
        holders: &HolderPool,
        listed: &[String],
    ) -> Result<(Process, Pipes), ToolError> {
        let shell = &self.options.shell;
        let start_failed = |error: &dyn std::fmt::Display| {
            ToolError::new(
                ToolErrorCode::Io,
                format!("Failed to start shell `{}`: {error}", shell.display()),
            )
        };
        if let Executor::Container(exec) = &self.options.executor {
            return spawn_in_container(exec, command, sandbox, listed);
        }
        if let Err(error) = std::fs::metadata(shell) {
            return Err(start_failed(&error));
        }
        if sandbox.is_enforced() {
            return spawn_confined(shell, command, root, sandbox, holders, listed);
        }
        let mut spawner = Command::new(shell);
        spawner
            .arg("-c")
            .arg(command)
            .current_dir(root)
            .env_clear()
            .envs(child_env(&sandbox.config.host_env, listed))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = spawner.spawn().map_err(|error| start_failed(&error))?;
        let pipes = Pipes {
            stdout: child.stdout.take().map(|out| Box::new(out) as Reader),
            stderr: child.stderr.take().map(|err| Box::new(err) as Reader),
        };
        let group = GroupKiller::of(&child);
        Ok((Process::Plain { child, group }, pipes))
    }
}

/// Starts `command` in the container through the client's `exec` (its
/// argv: [`ContainerExec::argv`]), as a plain child in its own process
/// group with the allowlisted environment and the client's variables.
fn spawn_in_container(
    exec: &ContainerExec,
    command: &str,
    sandbox: &Sandbox,
    listed: &[String],
) -> Result<(Process, Pipes), ToolError> {
    let argv = exec.argv(command);
    let mut listed = listed.to_vec();
    listed.extend(CONTAINER_CLIENT_ENV.iter().map(|name| (*name).to_owned()));
    let mut spawner = Command::new(&argv[0]);
    spawner
        .args(&argv[1..])
        .env_clear()
        .envs(child_env(&sandbox.config.host_env, &listed))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = spawner.spawn().map_err(|error| {
        ToolError::new(
            ToolErrorCode::Io,
            format!(
                "Failed to start the container client `{}`: {error}",
                exec.client.display()
            ),
        )
    })?;
    let pipes = Pipes {
        stdout: child.stdout.take().map(|out| Box::new(out) as Reader),
        stderr: child.stderr.take().map(|err| Box::new(err) as Reader),
    };
    let group = GroupKiller::of(&child);
    Ok((Process::Plain { child, group }, pipes))
}

/// Starts `shell -c command` in the namespaces `holders` (the kernel's
/// pool) keeps for the sandbox (cwd: the
/// workspace root, `TMPDIR`: the call's private `/tmp`). A sandbox that
/// cannot be enforced fails with `SandboxUnavailable`: nothing runs.
fn spawn_confined(
    shell: &Path,
    command: &str,
    root: &Path,
    sandbox: &Sandbox,
    holders: &HolderPool,
    listed: &[String],
) -> Result<(Process, Pipes), ToolError> {
    let failed = |error: io::Error| {
        ToolError::new(
            ToolErrorCode::Io,
            format!("Failed to start shell `{}`: {error}", shell.display()),
        )
    };
    let (stdout, stdout_write) = io::pipe().map_err(failed)?;
    let (stderr, stderr_write) = io::pipe().map_err(failed)?;
    let mut env: Vec<(OsString, OsString)> = child_env(&sandbox.config.host_env, listed)
        .into_iter()
        .filter(|(name, _)| name != "TMPDIR")
        .map(|(name, value)| (name.into(), value.into()))
        .collect();
    env.push(("TMPDIR".into(), SANDBOX_TMPDIR.into()));
    let spec = CallSpec::new(
        shell.to_path_buf(),
        vec![shell.into(), "-c".into(), command.into()],
        env,
        stdout_write.into(),
        stderr_write.into(),
    );
    let call = holders
        .spawn(sandbox, root, spec)
        .map_err(|error| ToolError::new(ToolErrorCode::SandboxUnavailable, error.to_string()))?;
    let reader = |read: io::PipeReader| -> io::Result<Reader> {
        Ok(Box::new(pipe::Receiver::from_owned_fd(OwnedFd::from(
            read,
        ))?))
    };
    let pipes = Pipes {
        stdout: Some(reader(stdout).map_err(failed)?),
        stderr: Some(reader(stderr).map_err(failed)?),
    };
    let process = Process::Confined(Box::new(Confined::new(call).map_err(failed)?));
    Ok((process, pipes))
}

/// Why the command stopped running.
enum Ending {
    Exited(ExitStatus),
    NotStarted(io::Error),
    WaitFailed(io::Error),
    TimedOut,
    Cancelled,
    Flooded,
}

/// Collects output until the command exits, times out or is cancelled.
async fn run(
    process: &mut Process,
    pipes: &mut Pipes,
    sink: &mut Sink,
    cancel: &CancellationToken,
    timeout: Duration,
) -> Ending {
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            Some((stream, bytes)) = pipes.next(), if pipes.is_open() => {
                sink.push(stream, &bytes).await;
                if sink.collector.flooded() {
                    return Ending::Flooded;
                }
            }
            status = process.wait() => {
                return match status {
                    Ok(Exit::Status(status)) => Ending::Exited(status),
                    Ok(Exit::NotStarted(error)) => Ending::NotStarted(error),
                    Err(error) => Ending::WaitFailed(error),
                };
            }
            () = cancel.cancelled() => return Ending::Cancelled,
            () = &mut deadline => return Ending::TimedOut,
        }
    }
}

/// Reads what is left in the pipes, for at most [`PIPE_GRACE`]: a daemon
/// that left the process group may hold them open indefinitely.
async fn drain(pipes: &mut Pipes, sink: &mut Sink) {
    let deadline = tokio::time::sleep(PIPE_GRACE);
    tokio::pin!(deadline);
    while pipes.is_open() {
        tokio::select! {
            chunk = pipes.next() => {
                if let Some((stream, bytes)) = chunk {
                    sink.push(stream, &bytes).await;
                }
            }
            () = &mut deadline => return,
        }
    }
}

/// Turns how the command ended and its output into the tool result;
/// `confined`: the level of Keel's sandbox the command ran in, if any.
fn outcome(
    ending: Ending,
    collected: Collected,
    timeout: Duration,
    flood_rate: u64,
    confined: Option<SandboxLevel>,
) -> Result<ToolOutput, ToolError> {
    let (code, message) = match &ending {
        Ending::Exited(status) if status.success() => {
            let text = if collected.text.is_empty() {
                "(no output)"
            } else {
                &collected.text
            };
            return Ok(ToolOutput::text(text).with_details(collected.details(Some(0))));
        }
        Ending::Exited(status) => match (status.code(), status.signal()) {
            (Some(code), _) => (
                ToolErrorCode::ProcessFailed,
                format!("Command exited with code {code}"),
            ),
            (None, Some(signal)) => (
                ToolErrorCode::ProcessFailed,
                format!("Command was killed by signal {signal}"),
            ),
            (None, None) => (
                ToolErrorCode::ProcessFailed,
                "Command ended without an exit code".to_owned(),
            ),
        },
        Ending::NotStarted(error) => {
            return Err(ToolError::new(
                ToolErrorCode::SandboxUnavailable,
                format!(
                    "Setting up the OS sandbox of the command failed: {error}. Nothing was \
                     run. Run `keel doctor` to see what this machine supports; a host \
                     already inside an isolating container can pass `--sandbox external`."
                ),
            ));
        }
        Ending::WaitFailed(error) => (
            ToolErrorCode::Io,
            format!("Failed to wait for the command: {error}"),
        ),
        Ending::TimedOut => (
            ToolErrorCode::Timeout,
            format!("Command timed out after {} seconds", timeout.as_secs_f64()),
        ),
        Ending::Flooded => (
            ToolErrorCode::ProcessFailed,
            format!(
                "Command was killed: its output stayed above {flood_rate} bytes per second \
                 (a flood); write large output to a file and read parts of it"
            ),
        ),
        Ending::Cancelled => {
            let error = ToolError::cancelled();
            return Err(attach(error, &collected, None, None));
        }
    };
    let exit_code = match &ending {
        Ending::Exited(status) => status.code(),
        _ => None,
    };
    let error = ToolError::new(code, message.clone());
    let note = match refusal::hint(confined, &ending, &collected.text) {
        Some(hint) => format!("{message}\n\n{hint}"),
        None => message,
    };
    Err(attach(error, &collected, Some(&note), exit_code))
}

/// Attaches the collected output (and `note` after it) to an error.
fn attach(
    error: ToolError,
    collected: &Collected,
    note: Option<&str>,
    exit_code: Option<i32>,
) -> ToolError {
    let text = match note {
        Some(note) if collected.text.is_empty() => note.to_owned(),
        Some(note) => format!("{}\n\n{note}", collected.text),
        None if collected.text.is_empty() => return error,
        None => collected.text.clone(),
    };
    error.with_output(ToolOutput::text(text).with_details(collected.details(exit_code)))
}

mod receipt;
mod refusal;
#[cfg(test)]
mod tests;
