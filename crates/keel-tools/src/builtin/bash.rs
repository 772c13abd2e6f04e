//! The `bash` tool: runs a shell command in the workspace.
//!
//! The command runs as `shell -c command` in the workspace root, with a
//! scrubbed environment ([`crate::env`]), no stdin, and in its own process
//! group so that a timeout or a cancellation kills everything it started,
//! grandchildren included. After a normal exit the group is killed too, so
//! background stragglers do not outlive the call.
//!
//! Output from stdout and stderr is streamed as progress and collected in
//! arrival order with bounded memory (see [`super::output`]): once it passes
//! [`MAX_BYTES`](crate::truncate::MAX_BYTES) it is
//! spilled to a log file and only a rolling tail stays in memory. The result
//! shows the tail (at most 2000 lines / 50 KB) and, when
//! truncated, names the log file holding the full output.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use keel_protocol::{ExecutionMode, IntentKind, IntentScope, OperationIntent, ToolErrorCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::output::{Collected, Collector};
use super::process::{GroupKiller, Pipes};
use super::{arguments_schema, parse_arguments};
use crate::env::scrubbed_env;
use crate::sandbox::{Confinement, confine};
use crate::shell;

/// Where the analysis takes `$TMPDIR` to point (see [`BashTool::intent`]).
const TMPDIR_STAND_IN: &str = "/keel-private-tmp";
use crate::tool::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::workspace::Workspace;

/// How long pipes may stay open after the command has ended.
const PIPE_GRACE: Duration = Duration::from_millis(200);

/// How the `bash` tool runs commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BashOptions {
    /// Timeout when the call gives none.
    pub default_timeout: Duration,
    /// The shell, run as `shell -c command`.
    pub shell: PathBuf,
    /// Secret-looking environment variables the child may still see.
    pub env_passthrough: Vec<String>,
}

impl Default for BashOptions {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(120),
            shell: PathBuf::from("/bin/bash"),
            env_passthrough: Vec::new(),
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

/// The arguments of a `bash` call; its schema is the tool's parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct BashArguments {
    /// The bash command to run.
    command: String,
    /// Timeout in seconds; the command and everything it started is killed when it passes.
    #[schemars(range(min = 1, max = 86400))]
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
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA
            .get_or_init(arguments_schema::<BashArguments>)
            .clone()
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Sequential
    }

    fn intent(&self, arguments: &Value, workspace: &Workspace) -> OperationIntent {
        self.classify(arguments, workspace).0
    }

    fn classify(&self, arguments: &Value, workspace: &Workspace) -> (OperationIntent, Vec<String>) {
        let Some(command) = arguments.get("command").and_then(Value::as_str) else {
            let intent = OperationIntent::new(IntentKind::Unknown, IntentScope::Unknown);
            return (intent, vec!["the call has no command".to_owned()]);
        };
        // The private temp dir does not exist yet; any stand-in outside the
        // workspace lets the analysis tell `$TMPDIR` paths from others, and
        // the sandbox confines them to the real one.
        let analysis = shell::analyze(command, workspace.root(), Some(Path::new(TMPDIR_STAND_IN)));
        let intent = OperationIntent {
            kind: analysis.kind,
            scope: analysis.scope,
            targets: analysis.targets,
        };
        (intent, analysis.reasons)
    }

    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(async move {
            let arguments: BashArguments = parse_arguments(self.name(), arguments)?;
            let timeout = arguments
                .timeout
                .map_or(self.options.default_timeout, Duration::from_secs);
            let root = context.workspace.root();
            let confinement = confine(&context.sandbox, root).map_err(|error| {
                ToolError::new(ToolErrorCode::SandboxUnavailable, error.to_string())
            })?;
            let mut child = self.spawn(&arguments.command, root, &confinement)?;
            let mut group = GroupKiller::of(&child);
            let mut pipes = Pipes {
                stdout: child.stdout.take(),
                stderr: child.stderr.take(),
            };
            let mut collector = Collector::new(context.progress.clone());
            let ending = run(
                &mut child,
                &mut pipes,
                &mut collector,
                &context.cancel,
                timeout,
            )
            .await;
            group.kill();
            let ending = match ending {
                Ending::Exited(status) => Ending::Exited(status),
                other => {
                    // The group is dead; reap the shell so it is no zombie.
                    let _ = child.wait().await;
                    other
                }
            };
            drain(&mut pipes, &mut collector).await;
            let collected = collector.finish().await;
            outcome(ending, collected, timeout)
        })
    }
}

impl BashTool {
    fn spawn(
        &self,
        command: &str,
        root: &Path,
        confinement: &Confinement,
    ) -> Result<Child, ToolError> {
        let shell = &self.options.shell;
        let mut spawner = Command::new(shell);
        spawner
            .arg("-c")
            .arg(command)
            .current_dir(root)
            .env_clear()
            .envs(scrubbed_env(&self.options.env_passthrough))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        confinement.apply(spawner.as_std_mut());
        spawner.spawn().map_err(|error| {
            ToolError::new(
                ToolErrorCode::Io,
                format!("Failed to start shell `{}`: {error}", shell.display()),
            )
        })
    }
}

/// Why the command stopped running.
enum Ending {
    Exited(ExitStatus),
    WaitFailed(io::Error),
    TimedOut,
    Cancelled,
}

/// Collects output until the command exits, times out or is cancelled.
async fn run(
    child: &mut Child,
    pipes: &mut Pipes,
    collector: &mut Collector,
    cancel: &CancellationToken,
    timeout: Duration,
) -> Ending {
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            Some((stream, bytes)) = pipes.next(), if pipes.is_open() => collector.push(stream, &bytes).await,
            status = child.wait() => {
                return match status {
                    Ok(status) => Ending::Exited(status),
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
async fn drain(pipes: &mut Pipes, collector: &mut Collector) {
    let deadline = tokio::time::sleep(PIPE_GRACE);
    tokio::pin!(deadline);
    while pipes.is_open() {
        tokio::select! {
            chunk = pipes.next() => {
                if let Some((stream, bytes)) = chunk {
                    collector.push(stream, &bytes).await;
                }
            }
            () = &mut deadline => return,
        }
    }
}

/// Turns how the command ended and its output into the tool result.
fn outcome(
    ending: Ending,
    collected: Collected,
    timeout: Duration,
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
        Ending::WaitFailed(error) => (
            ToolErrorCode::Io,
            format!("Failed to wait for the command: {error}"),
        ),
        Ending::TimedOut => (
            ToolErrorCode::Timeout,
            format!("Command timed out after {} seconds", timeout.as_secs_f64()),
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
    Err(attach(error, &collected, Some(&message), exit_code))
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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use keel_protocol::ToolProgress;
    use nix::sys::signal::kill;
    use tokio::sync::mpsc;

    use nix::unistd::Pid;
    use serde_json::json;

    use super::*;
    use crate::builtin::test_support::{setup, text_of};
    use crate::env::is_secret_name;
    use crate::tool::ProgressSink;

    async fn bash(context: &ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        BashTool::default()
            .execute(arguments, context.clone())
            .await
    }

    /// Whether `pid` is a live (not zombie) process.
    fn alive(pid: i32) -> bool {
        if kill(Pid::from_raw(pid), None).is_err() {
            return false;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        !matches!(state, None | Some('Z' | 'X'))
    }

    async fn assert_all_dead(pid_file: &Path) {
        let pids: Vec<i32> = std::fs::read_to_string(pid_file)
            .unwrap()
            .split_whitespace()
            .map(|pid| pid.parse().unwrap())
            .collect();
        assert!(!pids.is_empty());
        let started = Instant::now();
        while pids.iter().any(|&pid| alive(pid)) {
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "processes survived: {pids:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn runs_in_the_workspace_root() {
        let (dir, context) = setup();
        std::fs::write(dir.path().join("marker"), "").unwrap();
        let output = bash(&context, json!({"command": "ls; echo err >&2"}))
            .await
            .unwrap();
        assert_eq!(text_of(&output.content), "marker\nerr");
        assert_eq!(
            output.details.unwrap(),
            json!({"exit_code": 0, "truncated": false})
        );
        let output = bash(&context, json!({"command": "true"})).await.unwrap();
        assert_eq!(text_of(&output.content), "(no output)");
    }

    #[tokio::test]
    async fn streams_progress() {
        let (_dir, mut context) = setup();
        let (sender, mut receiver) = mpsc::unbounded_channel::<(String, ToolProgress)>();
        context.progress = ProgressSink::new("call-1", sender);
        bash(&context, json!({"command": "echo hi; echo oops >&2"}))
            .await
            .unwrap();
        let mut streams = Vec::new();
        while let Ok((call_id, progress)) = receiver.try_recv() {
            assert_eq!(call_id, "call-1");
            streams.push((progress.stream, progress.data));
        }
        assert!(streams.contains(&("stdout".to_owned(), "hi\n".to_owned())));
        assert!(streams.contains(&("stderr".to_owned(), "oops\n".to_owned())));
    }

    #[tokio::test]
    async fn non_zero_exit_is_process_failed_with_output() {
        let (_dir, context) = setup();
        let error = bash(&context, json!({"command": "echo partial; exit 3"}))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::ProcessFailed);
        assert_eq!(error.message, "Command exited with code 3");
        assert_eq!(
            text_of(&error.content),
            "partial\n\nCommand exited with code 3"
        );
        assert_eq!(error.details.unwrap()["exit_code"], 3);
    }

    #[tokio::test]
    async fn death_by_signal_is_reported() {
        let (_dir, context) = setup();
        let error = bash(&context, json!({"command": "kill -9 $$"}))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::ProcessFailed);
        assert_eq!(error.message, "Command was killed by signal 9");
    }

    #[tokio::test]
    async fn timeout_kills_the_group() {
        let (dir, context) = setup();
        let command = "sleep 100 & echo $! > pids; echo started; sleep 100";
        let started = Instant::now();
        let error = bash(&context, json!({"command": command, "timeout": 1}))
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(error.code, ToolErrorCode::Timeout);
        assert_eq!(error.message, "Command timed out after 1 seconds");
        assert_eq!(
            text_of(&error.content),
            "started\n\nCommand timed out after 1 seconds"
        );
        assert_all_dead(&dir.path().join("pids")).await;
    }

    #[tokio::test]
    async fn cancel_kills_grandchildren() {
        let (dir, context) = setup();
        let command = "sleep 100 & echo $! > pids; (sleep 100 & echo $! >> pids; wait) & echo $! >> pids; sleep 100";
        let cancel = context.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let error = bash(&context, json!({"command": command}))
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(error.code, ToolErrorCode::Cancelled);
        assert_all_dead(&dir.path().join("pids")).await;
    }

    #[tokio::test]
    async fn background_stragglers_are_killed_after_exit() {
        let (dir, context) = setup();
        let started = Instant::now();
        let output = bash(
            &context,
            json!({"command": "sleep 100 & echo $! > pids; echo done"}),
        )
        .await
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(text_of(&output.content), "done");
        assert_all_dead(&dir.path().join("pids")).await;
    }

    #[tokio::test]
    async fn escaped_daemon_holding_the_pipe_does_not_block() {
        let (_dir, context) = setup();
        let started = Instant::now();
        let output = bash(&context, json!({"command": "setsid sleep 3 & echo done"}))
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(text_of(&output.content), "done");
    }

    #[tokio::test]
    async fn huge_output_is_tail_truncated_with_full_log() {
        let (_dir, context) = setup();
        let output = bash(&context, json!({"command": "seq 1 200000"}))
            .await
            .unwrap();
        let text = text_of(&output.content);
        let details = output.details.unwrap();
        assert_eq!(details["truncated"], true);
        let log = PathBuf::from(details["full_output_path"].as_str().unwrap());
        let (note, shown) = text.split_once('\n').unwrap();
        assert_eq!(
            note,
            format!(
                "[Output truncated: showing the last 2000 lines of 200000. Full output: read path `{}`]",
                details["full_output"].as_str().unwrap()
            )
        );
        assert!(shown.starts_with("198001\n") && shown.ends_with("\n200000"));
        let full: String = (1..=200_000).map(|n| format!("{n}\n")).collect();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), full);
        std::fs::remove_file(&log).unwrap();
    }

    #[tokio::test]
    async fn line_truncated_output_gets_a_log_from_memory() {
        let (_dir, context) = setup();
        let output = bash(&context, json!({"command": "seq 1 3000"}))
            .await
            .unwrap();
        let details = output.details.unwrap();
        let log = PathBuf::from(details["full_output_path"].as_str().unwrap());
        assert!(
            text_of(&output.content)
                .starts_with("[Output truncated: showing the last 2000 lines of 3000.")
        );
        let full: String = (1..=3000).map(|n| format!("{n}\n")).collect();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), full);
        std::fs::remove_file(&log).unwrap();
    }

    #[tokio::test]
    async fn invalid_utf8_is_decoded_lossily() {
        let (_dir, context) = setup();
        let output = bash(&context, json!({"command": "printf 'a\\377b'"}))
            .await
            .unwrap();
        assert_eq!(text_of(&output.content), "a\u{fffd}b");
    }

    #[tokio::test]
    async fn child_environment_is_scrubbed() {
        let (_dir, context) = setup();
        let output = bash(&context, json!({"command": "env"})).await.unwrap();
        let text = text_of(&output.content);
        for line in text.lines() {
            if let Some((name, _)) = line.split_once('=') {
                assert!(
                    !is_secret_name(name),
                    "{name} leaked into the child environment"
                );
            }
        }
    }

    #[tokio::test]
    async fn missing_shell_is_an_io_error() {
        let (_dir, context) = setup();
        let tool = BashTool::new(BashOptions {
            shell: PathBuf::from("/nonexistent/shell"),
            ..BashOptions::default()
        });
        let error = tool
            .execute(json!({"command": "true"}), context)
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::Io);
        assert!(error.message.contains("`/nonexistent/shell`"));
    }

    #[test]
    fn intent_comes_from_the_shell_analysis() {
        let (_dir, context) = setup();
        let intent = |command: &str| {
            let intent =
                BashTool::default().intent(&json!({ "command": command }), &context.workspace);
            (intent.kind, intent.scope)
        };
        assert_eq!(intent("ls"), (IntentKind::Shell, IntentScope::Workspace));
        assert_eq!(
            intent("echo x > $TMPDIR/x"),
            (IntentKind::Shell, IntentScope::Workspace)
        );
        assert_eq!(
            intent("cat /etc/passwd"),
            (IntentKind::Shell, IntentScope::Outside)
        );
        assert_eq!(
            intent("curl http://x"),
            (IntentKind::Network, IntentScope::Workspace)
        );
        assert_eq!(
            intent("echo 'x"),
            (IntentKind::Unknown, IntentScope::Unknown)
        );
        let missing = BashTool::default().intent(&json!({}), &context.workspace);
        assert_eq!(missing.kind, IntentKind::Unknown);
    }
}
