//! The `bash` tool's own cases: through [`Tool::execute`], sandboxed at
//! workspace-write (the test context's level) unless a case says otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use keel_protocol::ToolProgress;
use nix::sys::signal::kill;
use tokio::sync::mpsc;

use nix::unistd::Pid;

use super::*;
use crate::builtin::test_support::{setup, text_of};
use crate::env::is_allowed;
use crate::sandbox::{Sandbox, SandboxLevel};
use crate::tool::ProgressSink;

/// What the test context gives `bash` (a context from `setup` has one).
fn shell(context: &ToolContext) -> ShellExecution {
    context.extension::<ShellExecution>().unwrap().clone()
}

/// The same context, its [`ShellExecution`] changed by `change`.
fn with_shell(context: &ToolContext, change: impl FnOnce(&mut ShellExecution)) -> ToolContext {
    let mut execution = shell(context);
    change(&mut execution);
    context.clone().with_extension(execution)
}

/// The same context, running commands without the OS sandbox: its
/// process-group kill is what these cases check, by PID.
fn unsandboxed(context: &ToolContext) -> ToolContext {
    with_shell(context, |execution| {
        execution.sandbox = Sandbox::new(SandboxLevel::Unsandboxed);
    })
}

/// Waits `delay`, then asserts that nothing wrote `marker`: a process a
/// sandboxed command left behind would have.
async fn assert_no_survivor_wrote(marker: &Path, delay: Duration) {
    tokio::time::sleep(delay).await;
    assert!(!marker.exists(), "a process outlived its command");
}

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
    // A bound for a hang, not a timing claim: the kill is already sent.
    while pids.iter().any(|&pid| alive(pid)) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "processes survived: {pids:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Tool API's context names no sandbox: without the kernel's
/// [`ShellExecution`] a command has nowhere to be confined, so it is not run.
#[tokio::test]
async fn a_context_without_a_shell_execution_runs_nothing() {
    let (dir, context) = setup();
    let bare = ToolContext::new("call-1", context.workspace.clone());
    let marker = dir.path().join("ran");
    let error = bash(
        &bare,
        json!({"command": format!("touch {}", marker.display())}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, ToolErrorCode::SandboxUnavailable);
    assert!(!marker.exists());
    // The same command with the execution runs.
    bash(
        &context,
        json!({"command": format!("touch {}", marker.display())}),
    )
    .await
    .unwrap();
    assert!(marker.exists());
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
    for context in [context.clone(), unsandboxed(&context)] {
        let error = bash(&context, json!({"command": "kill -9 $$"}))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::ProcessFailed);
        assert_eq!(error.message, "Command was killed by signal 9");
    }
}

#[tokio::test]
async fn timeout_kills_the_group() {
    let (dir, context) = setup();
    let context = unsandboxed(&context);
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
    let context = unsandboxed(&context);
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
    let context = unsandboxed(&context);
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
    let output = bash(&context, json!({"command": "setsid sleep 20 & echo done"}))
        .await
        .unwrap();
    // Well before the daemon ends: the call did not wait for it.
    assert!(started.elapsed() < Duration::from_secs(10));
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
async fn child_environment_is_allowlisted() {
    let (_dir, context) = setup();
    for context in [context.clone(), unsandboxed(&context)] {
        let output = bash(&context, json!({"command": "env"})).await.unwrap();
        let text = text_of(&output.content);
        for line in text.lines() {
            if let Some((name, _)) = line.split_once('=') {
                // bash itself sets a few of its own.
                let own = ["SHLVL", "_", "OLDPWD"].contains(&name);
                assert!(
                    own || is_allowed(name, &[]),
                    "{name} leaked into the child environment"
                );
            }
        }
    }
}

/// The same context with `host_env` as the host's environment snapshot.
fn with_host_env(context: &ToolContext, host_env: HostEnv) -> ToolContext {
    with_shell(context, |execution| {
        let mut config = (*execution.sandbox.config).clone();
        config.host_env = host_env;
        execution.sandbox.config = std::sync::Arc::new(config);
    })
}

#[tokio::test]
async fn the_child_environment_comes_from_the_hosts_snapshot_only() {
    let (_dir, context) = setup();
    let snapshot = HostEnv::new([
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/keel-snapshot-home"),
        ("KEEL_SNAPSHOT_SECRET", "not-allowed"),
    ]);
    let show = json!({"command": "echo \"${HOME-unset}|$PATH|${KEEL_SNAPSHOT_SECRET-unset}\""});
    for context in [context.clone(), unsandboxed(&context)] {
        let given = with_host_env(&context, snapshot.clone());
        let output = bash(&given, show.clone()).await.unwrap();
        assert_eq!(
            text_of(&output.content),
            "/keel-snapshot-home|/usr/bin:/bin|unset"
        );
        // Empty: only Keel's fixed defaults, whatever this process holds.
        let empty = with_host_env(&context, HostEnv::empty());
        let output = bash(&empty, show.clone()).await.unwrap();
        assert_eq!(
            text_of(&output.content),
            format!("unset|{}|unset", crate::env::DEFAULT_PATH)
        );
    }
}

#[tokio::test]
async fn sandboxed_survivors_die_with_the_command() {
    let (dir, context) = setup();
    let marker = dir.path().join("survivor");
    let command = format!(
        "setsid sh -c 'sleep 3; echo x > {0}' & (sh -c 'sleep 3; echo x > {0}' &) ; echo started",
        marker.display()
    );
    let started = Instant::now();
    let output = bash(&context, json!({ "command": command })).await.unwrap();
    assert_eq!(text_of(&output.content), "started");
    // Returned before the survivors would write (it did not wait for them),
    // then they never do.
    assert!(started.elapsed() < Duration::from_millis(2500));
    assert_no_survivor_wrote(&marker, Duration::from_secs(4)).await;
}

#[tokio::test]
async fn sandboxed_timeout_and_cancel_kill_everything() {
    let (dir, context) = setup();
    let marker = dir.path().join("survivor");
    let command = format!(
        "setsid sh -c 'sleep 2; echo x > {0}' & sleep 100",
        marker.display()
    );
    let error = bash(
        &context,
        json!({ "command": command.clone(), "timeout": 1 }),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, ToolErrorCode::Timeout);
    let cancel = context.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let error = bash(&context, json!({ "command": command }))
        .await
        .unwrap_err();
    assert_eq!(error.code, ToolErrorCode::Cancelled);
    assert_no_survivor_wrote(&marker, Duration::from_millis(2500)).await;
}

#[tokio::test]
async fn a_flood_is_killed_and_its_log_capped() {
    let (_dir, context) = setup();
    // The log lives in the context's store: keep it past the call.
    let _outputs = context.outputs.clone();
    let tool = BashTool::new(BashOptions {
        log_limit: 1 << 20,
        flood_rate: 1 << 20,
        flood_seconds: 1,
        ..BashOptions::default()
    });
    let started = Instant::now();
    let error = tool
        .execute(json!({"command": "yes"}), context)
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(error.code, ToolErrorCode::ProcessFailed);
    assert!(error.message.contains("a flood"), "{}", error.message);
    let details = error.details.unwrap();
    let log = PathBuf::from(details["full_output_path"].as_str().unwrap());
    let size = std::fs::metadata(&log).unwrap().len();
    std::fs::remove_file(&log).unwrap();
    assert!(size < (1 << 20) + 200, "the log grew to {size} bytes");
}

#[tokio::test]
async fn timeouts_are_capped() {
    let (_dir, context) = setup();
    let tool = BashTool::new(BashOptions {
        max_timeout: Duration::from_secs(1),
        ..BashOptions::default()
    });
    assert_eq!(tool.parameters()["properties"]["timeout"]["maximum"], 1);
    let error = tool
        .execute(json!({"command": "sleep 30", "timeout": 86400}), context)
        .await
        .unwrap_err();
    assert_eq!(error.message, "Command timed out after 1 seconds");
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
        let intent = BashTool::default().intent(&json!({ "command": command }), &context.workspace);
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

#[tokio::test]
async fn a_command_leaves_a_receipt_named_by_the_hash_of_its_key() {
    use crate::receipt::{CallReceipt, Receipts};
    let (dir, context) = setup();
    let journal = tempfile::tempdir().unwrap();
    let receipts = Receipts::new(journal.path().join("session"));
    for context in [context.clone(), unsandboxed(&context)] {
        let context = with_shell(&context, |execution| {
            execution.receipts = Some(CallReceipt::new(receipts.clone(), "../../evil call"));
        });
        let outcome = bash(
            &context,
            json!({"command": "echo out; echo err >&2; exit 4"}),
        )
        .await;
        let error = outcome.unwrap_err();
        assert_eq!(error.code, ToolErrorCode::ProcessFailed);

        let started = receipts.started("../../evil call").unwrap();
        assert_eq!(
            started.pid.is_some(),
            !shell(&context).sandbox.is_enforced()
        );
        let exit = receipts.exit("../../evil call").unwrap();
        assert_eq!((exit.ending.as_str(), exit.exit_code), ("exited", Some(4)));
        assert_eq!(exit.output_bytes, 8);
        let recovered = receipts
            .recovered_result("../../evil call")
            .unwrap()
            .unwrap();
        let recovered = recovered.unwrap_err();
        assert_eq!(recovered.code, ToolErrorCode::ProcessFailed);
        assert!(text_of(&recovered.content).starts_with("out\nerr\n\nCommand exited with code 4"));
    }
    let mut names: Vec<String> = std::fs::read_dir(receipts.dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "{names:?}");
    for name in &names {
        let (stem, _) = name.split_once('.').unwrap();
        assert_eq!(stem.len(), 64, "a sha256 hex name: {name}");
        assert!(stem.bytes().all(|byte| byte.is_ascii_hexdigit()));
        // A receipt holds the command's output: only Keel's user reads it.
        let mode = std::fs::metadata(receipts.dir().join(name))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600,
            "{name}"
        );
    }
    let mode = std::fs::metadata(receipts.dir()).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );
    drop(dir);
}

#[tokio::test]
async fn a_container_executor_runs_the_command_through_a_strict_exec_argv() {
    let (dir, context) = setup();
    // A stand-in client that prints its argv, one argument per line.
    let client = dir.path().join("stand-in-docker");
    std::fs::write(
        &client,
        "#!/bin/sh\nfor arg in \"$@\"; do printf '<%s>\\n' \"$arg\"; done\n",
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&client).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&client, permissions).unwrap();
    let tool = BashTool::new(BashOptions {
        executor: Executor::Container(ContainerExec::new(&client, "ctr-1", "/testbed")),
        ..BashOptions::default()
    });
    let command = "cd sub && echo \"$HOME\" ; rm -rf /";
    // Another test thread that forks while the script was being written
    // holds its write handle until it execs: `Text file busy` for a moment.
    let mut attempts = 0;
    let output = loop {
        match tool
            .execute(json!({ "command": command }), context.clone())
            .await
        {
            Err(error) if error.message.contains("Text file busy") && attempts < 20 => {
                attempts += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            other => break other.unwrap(),
        }
    };
    let text = text_of(&output.content);
    let expected =
        format!("<exec>\n<--workdir>\n</testbed>\n<ctr-1>\n</bin/bash>\n<-lc>\n<{command}>");
    assert_eq!(text, expected);
}
