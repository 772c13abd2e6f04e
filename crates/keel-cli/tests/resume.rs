//! `keel resume` as a process (issue 17): a `keel run` killed with SIGKILL
//! while its batch runs leaves a session that `keel run --session` refuses
//! (naming `keel resume`) and `keel resume` continues without doing the
//! applied write again and without re-running the cut-short command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn keel() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin!("keel"))
}

/// The pids of processes whose command line is `sleep MARKER`.
fn sleepers(marker: &str) -> Vec<i32> {
    let wanted = format!("sleep\0{marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .map(|cmdline| String::from_utf8_lossy(&cmdline).starts_with(&wanted))
                .unwrap_or(false)
        })
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

fn write_script(path: &Path, turns: Value) {
    std::fs::write(path, json!({ "turns": turns }).to_string()).unwrap();
}

fn entries(sessions: &Path) -> (String, Vec<Value>) {
    let file = std::fs::read_dir(sessions)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .expect("a session file");
    let id = file.file_stem().unwrap().to_str().unwrap().to_owned();
    let text = std::fs::read_to_string(&file).unwrap();
    let entries = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|line| line.pointer("/r/entry").cloned())
        .collect();
    (id, entries)
}

#[test]
fn a_run_killed_mid_batch_is_refused_by_run_and_continued_by_resume() {
    let workspace = tempfile::tempdir().unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let marker = format!("41.{}", std::process::id() % 1000 + 100);
    let command = format!("echo x >> counter.txt && sleep {marker} && echo y >> counter.txt");
    let first = scripts.path().join("first.json");
    write_script(
        &first,
        json!([
            {"content": [
                {"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "A\n"}},
                {"type": "tool_call", "name": "bash", "arguments": {"command": command}}
            ]},
            {"content": [{"type": "text", "text": "done"}]}
        ]),
    );
    let mut child = keel()
        .args(["run", "--mode", "auto", "--script"])
        .arg(&first)
        .arg("--workspace")
        .arg(workspace.path())
        .arg("--session-dir")
        .arg(sessions.path())
        .arg("write, then count slowly")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || !sleepers(&marker).is_empty()),
        "the bash call never started"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // A sandboxed command lives in a PID namespace of Keel's namespace
    // holder, which dies with Keel: nothing of the dead run sleeps on.
    assert!(
        wait_until(Duration::from_secs(5), || sleepers(&marker).is_empty()),
        "the dead run's sandboxed command outlived it: {:?}",
        sleepers(&marker)
    );
    let (id, before) = entries(sessions.path());
    let kinds: Vec<&str> = before
        .iter()
        .filter_map(|entry| entry["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"run_start") && !kinds.contains(&"run_end"));
    assert_eq!(kinds.iter().filter(|k| **k == "effect_started").count(), 2);

    let refused = keel()
        .args(["run", "--script"])
        .arg(&first)
        .arg("--workspace")
        .arg(workspace.path())
        .arg("--session-dir")
        .arg(sessions.path())
        .args(["--session", &id, "again"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(said.contains("keel resume"), "{said}");
    assert!(said.contains("session_interrupted"), "{said}");
    let (_, unchanged) = entries(sessions.path());
    assert_eq!(unchanged, before, "the refused run appended nothing");

    let second = scripts.path().join("second.json");
    write_script(
        &second,
        json!([{"content": [{"type": "text", "text": "resumed"}]}]),
    );
    let resumed = keel()
        .args(["resume", &id, "--mode", "auto", "--script"])
        .arg(&second)
        .arg("--workspace")
        .arg(workspace.path())
        .arg("--session-dir")
        .arg(sessions.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let (_, after) = entries(sessions.path());
    let recovered: Vec<(String, String)> = after
        .iter()
        .filter(|entry| entry["kind"] == "effect_recovered")
        .map(|entry| {
            (
                entry["tool_name"].as_str().unwrap().to_owned(),
                entry["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        recovered,
        vec![
            ("write".to_owned(), "already_applied".to_owned()),
            ("bash".to_owned(), "interrupted".to_owned()),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("counter.txt")).unwrap(),
        "x\n",
        "the interrupted command was not run again"
    );
    assert_eq!(after.last().unwrap()["kind"], "run_end");
}

/// The effect_recovered entries of `entries`: (tool, action, reason).
fn recoveries(entries: &[Value]) -> Vec<(String, String, String)> {
    entries
        .iter()
        .filter(|entry| entry["kind"] == "effect_recovered")
        .map(|entry| {
            (
                entry["tool_name"].as_str().unwrap().to_owned(),
                entry["action"].as_str().unwrap().to_owned(),
                entry["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Issue 22: Keel (or a provider) may give two calls of a session the same
/// id — `call_0` in each turn of an OpenAI-compatible server that sends
/// none. The first `call_0` finished and its receipts outlived it (Keel
/// was killed after its result was durable, before the receipts were
/// removed); the second `call_0` is killed mid-command. Its recovery must
/// be `interrupted`, never the first call's success.
#[test]
fn a_reused_call_id_is_interrupted_not_recovered_from_an_earlier_calls_receipt() {
    const { assert!(keel_failpoint::ENABLED, "the test binary arms failpoints") };
    let workspace = tempfile::tempdir().unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let marker = format!("43.{}", std::process::id() % 1000 + 100);
    let second = format!("echo second >> log.txt; sleep {marker}");
    let script = scripts.path().join("script.json");
    std::fs::write(
        &script,
        json!({"by_history": true, "turns": [
            {"content": [{"type": "tool_call", "id": "call_0", "name": "bash",
                          "arguments": {"command": "echo first >> log.txt"}}]},
            {"content": [{"type": "tool_call", "id": "call_0", "name": "bash",
                          "arguments": {"command": second}}]},
            {"content": [{"type": "text", "text": "done"}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let keel_in = |args: &[&str]| {
        let mut command = keel();
        command
            .args(args)
            .args(["--mode", "auto", "--script"])
            .arg(&script)
            .arg("--workspace")
            .arg(workspace.path())
            .arg("--session-dir")
            .arg(sessions.path())
            .env_remove(keel_failpoint::ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    };
    // 1. The first call_0 runs; Keel dies right after its result is durable.
    let status = keel_in(&["run", "go"])
        .env(keel_failpoint::ENV, keel_failpoint::AFTER_RESULT)
        .status()
        .unwrap();
    assert!(!status.success(), "killed at the failpoint");
    let (id, _) = entries(sessions.path());
    let journal = sessions.path().join(format!("{id}.journal"));
    assert!(
        std::fs::read_dir(&journal)
            .unwrap()
            .flatten()
            .any(|entry| entry.path().extension().is_some_and(|ext| ext == "exit")),
        "the first call's .exit outlived it"
    );
    // 2. The resumed run's next turn reuses call_0; Keel is killed while it runs.
    let mut child = keel_in(&["resume", &id]).spawn().unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || !sleepers(&marker).is_empty()),
        "the second call_0 never started"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(wait_until(Duration::from_secs(10), || sleepers(&marker).is_empty()));
    // 3. Its recovery: interrupted, not the first call_0's exit 0.
    let resumed = keel_in(&["resume", &id])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let (_, after) = entries(sessions.path());
    let recovered = recoveries(&after);
    let (tool, action, _) = recovered.last().unwrap();
    assert_eq!(
        (tool.as_str(), action.as_str()),
        ("bash", "interrupted"),
        "{recovered:?}"
    );
    let result = after
        .iter()
        .rev()
        .find(|entry| entry.pointer("/message/role") == Some(&json!("tool_result")))
        .unwrap();
    assert_eq!(result["message"]["status"], "error", "{result}");
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("log.txt")).unwrap(),
        "first\nsecond\n",
        "each command ran once"
    );
}

/// Issue 21: SIGTERM and SIGINT end `keel resume` as they end `keel run`,
/// here while its recovery re-runs a command that never started (the dead
/// run was killed right after the model asked for it): the command is
/// killed and `keel resume` exits with 128 + the signal.
#[test]
fn sigterm_and_sigint_end_keel_resume_while_it_recovers() {
    const { assert!(keel_failpoint::ENABLED, "the test binary arms failpoints") };
    for (signal, number) in [("-TERM", 15), ("-INT", 2)] {
        let workspace = tempfile::tempdir().unwrap();
        let sessions = tempfile::tempdir().unwrap();
        let scripts = tempfile::tempdir().unwrap();
        let marker = format!("44.{}{number}", std::process::id() % 1000 + 100);
        let script = scripts.path().join("script.json");
        std::fs::write(
            &script,
            json!({"by_history": true, "turns": [
                {"content": [{"type": "tool_call", "name": "bash",
                              "arguments": {"command": format!("sleep {marker}")}}]},
                {"content": [{"type": "text", "text": "done"}]}
            ]})
            .to_string(),
        )
        .unwrap();
        let keel_in = |args: &[&str]| {
            let mut command = keel();
            command
                .args(args)
                .args(["--mode", "auto", "--script"])
                .arg(&script)
                .arg("--workspace")
                .arg(workspace.path())
                .arg("--session-dir")
                .arg(sessions.path())
                .env_remove(keel_failpoint::ENV)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            command
        };
        let status = keel_in(&["run", "go"])
            .env(keel_failpoint::ENV, keel_failpoint::AFTER_MESSAGE_END)
            .status()
            .unwrap();
        assert!(!status.success(), "killed at the failpoint");
        let (id, _) = entries(sessions.path());
        let mut child = keel_in(&["resume", &id]).spawn().unwrap();
        assert!(
            wait_until(Duration::from_secs(20), || !sleepers(&marker).is_empty()),
            "the recovered command never started"
        );
        let sent = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let ended = wait_until(Duration::from_secs(30), || {
            child.try_wait().unwrap().is_some()
        });
        if !ended {
            child.kill().unwrap();
        }
        let status = child.wait().unwrap();
        assert!(ended, "{signal}: keel resume did not end");
        assert_eq!(status.code(), Some(128 + number), "{signal}");
        assert!(
            wait_until(Duration::from_secs(10), || sleepers(&marker).is_empty()),
            "{signal}: the command outlived keel resume"
        );
    }
}
