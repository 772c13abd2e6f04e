//! Signals to `keel run` (issue 15): the first SIGINT or SIGTERM cancels the
//! run through `AgentRun::cancel`, so the running command's processes die,
//! nothing is written afterwards, the session records the cut-short call and
//! the exit code is 128 + the signal; a second SIGINT exits at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::wait_until;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A marker no other process on the machine has in its command line: the
/// tests of this file run at the same time, so each call gets its own.
fn marker() -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("31.{}{n}", std::process::id() % 1000 + 100)
}

fn script(dir: &Path, marker: &str) -> std::path::PathBuf {
    let command = format!("sleep {marker}; echo slept > slept.txt");
    let script = serde_json::json!({"turns": [
        {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": command}}]},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let path = dir.join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

/// Whether a process whose command line holds `sleep MARKER` exists.
fn sleeper_alive(marker: &str) -> bool {
    let wanted = format!("sleep\0{marker}");
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .map(|cmdline| String::from_utf8_lossy(&cmdline).starts_with(&wanted))
            .unwrap_or(false)
    })
}

struct Running {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    workspace: tempfile::TempDir,
    sessions: tempfile::TempDir,
    marker: String,
}

/// Starts `keel run` and waits until its bash command is sleeping.
fn start() -> Running {
    let workspace = tempfile::tempdir().unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let marker = marker();
    let script = script(scripts.path(), &marker);
    let mut child = common::keel_command()
        .args(["run", "--output-format", "stream-json", "--script"])
        .arg(&script)
        .arg("--workspace")
        .arg(workspace.path())
        .arg("--session-dir")
        .arg(sessions.path())
        .arg("sleep, then write")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if sender.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    assert!(
        wait_until(Duration::from_secs(20), || sleeper_alive(&marker)),
        "the bash call never started"
    );
    Running {
        child,
        lines,
        workspace,
        sessions,
        marker,
    }
}

fn send(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for the exit, then checks everything the cancellation promises.
fn check_cancelled(mut running: Running, expected_code: i32) {
    let start = Instant::now();
    let status = loop {
        if let Some(status) = running.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "keel did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(expected_code));
    assert!(
        wait_until(Duration::from_secs(2), || !sleeper_alive(&running.marker)),
        "a process of the cancelled call survived"
    );
    // Were the shell alive, it would write right after its sleep died.
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !running.workspace.path().join("slept.txt").exists(),
        "the workspace was written after the cancellation"
    );
    let lines: Vec<String> = running.lines.try_iter().collect();
    let result = lines
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|value| value["type"] == "result");
    if expected_code != 130 || result.is_some() {
        let result = result.expect("a result line");
        assert_eq!(result["state"], "cancelled", "{result}");
    }
    let session = std::fs::read_dir(running.sessions.path())
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .expect("a session file");
    let text = std::fs::read_to_string(session).unwrap();
    assert!(
        text.contains(r#""status":"cancelled""#),
        "the session does not record the cut-short call: {text}"
    );
}

#[test]
fn sigint_cancels_the_run_and_exits_130() {
    let running = start();
    send(&running.child, "INT");
    check_cancelled(running, 130);
}

#[test]
fn sigterm_cancels_the_run_and_exits_143() {
    let running = start();
    send(&running.child, "TERM");
    check_cancelled(running, 143);
}

#[test]
fn a_second_sigint_exits_at_once() {
    let running = start();
    send(&running.child, "INT");
    std::thread::sleep(Duration::from_millis(300));
    send(&running.child, "INT");
    check_cancelled(running, 130);
}

/// SIGINT while `ask` waits for an answer on a pipe that stays open: the
/// wait ends, the request is denied and the run ends cancelled, at once.
#[test]
fn a_signal_ends_the_wait_for_a_piped_answer() {
    let workspace = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let script = script(scripts.path(), &marker());
    let mut child = common::keel_command()
        .args([
            "run",
            "--output-format",
            "stream-json",
            "--mode",
            "ask",
            "--script",
        ])
        .arg(&script)
        .arg("--workspace")
        .arg(workspace.path())
        .arg("--session-dir")
        .arg(scripts.path().join("sessions"))
        .arg("ask first")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _open_stdin = child.stdin.take();
    let stdout = child.stdout.take().unwrap();
    let (sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if sender.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let line = lines.recv_timeout(Duration::from_secs(20)).unwrap();
        if line.contains("\"permission_requested\"") {
            break;
        }
        assert!(Instant::now() < deadline, "no permission request");
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let ended = wait_until(Duration::from_secs(10), || {
        child.try_wait().unwrap().is_some()
    });
    if !ended {
        child.kill().unwrap();
    }
    assert!(ended, "keel kept waiting for an answer after SIGINT");
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let rest: Vec<Value> = lines
        .try_iter()
        .filter_map(|line| serde_json::from_str(&line).ok())
        .collect();
    let result = rest.iter().find(|line| line["type"] == "result").unwrap();
    assert_eq!(result["state"], "cancelled", "{result}");
}
