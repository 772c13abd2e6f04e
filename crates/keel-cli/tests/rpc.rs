//! `keel rpc` as a process: one JSON-RPC object per line each way, nothing
//! else on stdout; requests answered concurrently; an oversized line
//! refused and skipped; stdin closed → the runs are cancelled, settle, and
//! the process exits 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::ChildStdout;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use common::spawn_keel;
use keel_protocol::rpc::{Notification, Response};
use serde_json::{Value, json};

/// A run whose model turn takes long (cancellation interrupts the delay).
const SLOW: &str = r#"{"by_history": true, "turns": [
  {"delay_ms": 60000, "content": [{"type": "text", "text": "Too late."}]}
]}"#;

const PATIENCE: Duration = Duration::from_secs(60);

/// Every stdout line, parsed as a response or a notification (and nothing
/// else), as it comes.
fn lines(stdout: ChildStdout) -> Receiver<Value> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let value: Value = serde_json::from_str(&line).unwrap_or_else(|error| {
                panic!("stdout holds a line that is not JSON: {line:?}: {error}")
            });
            let response = serde_json::from_value::<Response>(value.clone()).is_ok()
                && value.get("id").is_some();
            let notification = serde_json::from_value::<Notification>(value.clone()).is_ok()
                && value.get("id").is_none();
            assert!(
                response || notification,
                "stdout holds a line that is neither a JSON-RPC response nor a notification: {line}"
            );
            if sender.send(value).is_err() {
                break;
            }
        }
    });
    receiver
}

fn next(lines: &Receiver<Value>, what: &str) -> Value {
    lines.recv_timeout(PATIENCE).unwrap_or_else(|_| {
        panic!("no line on stdout within {PATIENCE:?} while waiting for {what}")
    })
}

/// The line answering `id`, keeping the notifications read meanwhile.
fn answer(lines: &Receiver<Value>, id: i64, notes: &mut Vec<Value>) -> Value {
    loop {
        let line = next(lines, &format!("the answer to request {id}"));
        if line.get("id") == Some(&json!(id)) {
            return line;
        }
        notes.push(line);
    }
}

#[test]
fn stdin_closed_cancels_the_runs_and_exits_zero_once_they_settled() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("slow.json"), SLOW).unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let sessions = dir.path().join("sessions");
    let script = dir.path().join("slow.json").display().to_string();
    let mut child = spawn_keel(
        &[
            "rpc",
            "--script",
            &script,
            "--session-dir",
            &sessions.display().to_string(),
        ],
        dir.path(),
        &[("KEEL_LOG", "debug")],
    );
    let mut stdin = child.stdin.take().unwrap();
    let lines = lines(child.stdout.take().unwrap());
    let mut notes = Vec::new();
    let send = |stdin: &mut std::process::ChildStdin, value: Value| {
        writeln!(stdin, "{value}").unwrap();
        stdin.flush().unwrap();
    };

    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize"}),
    );
    let init = answer(&lines, 1, &mut notes);
    assert_eq!(init["result"]["server_name"], "keel", "{init}");
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 2, "method": "run/start",
        "params": {"prompt": "Take your time.", "workspace": workspace}}),
    );
    let started = answer(&lines, 2, &mut notes);
    let run_id = started["result"]["run_id"].as_str().unwrap().to_owned();
    // run/result waits for the run; later requests are answered meanwhile.
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 3, "method": "run/result", "params": {"run_id": run_id}}),
    );
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 4, "method": "models/list", "params": {}}),
    );
    let models = answer(&lines, 4, &mut notes);
    assert!(models["result"]["providers"].is_array(), "{models}");
    assert!(
        !notes.iter().any(|line| line.get("id") == Some(&json!(3))),
        "run/result answered before the run ended: {notes:?}"
    );
    // A line over the limit (4 MiB) is answered and skipped; reading goes on.
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"run/steer\",\"params\":{{\"run_id\":\"{run_id}\",\"text\":\"{}\"}}}}",
        "x".repeat(5 * 1024 * 1024)
    );
    writeln!(stdin, "{huge}").unwrap();
    let refused = loop {
        let line = next(&lines, "the answer to the oversized line");
        if line.get("error").is_some() && line["id"].is_null() {
            break line;
        }
        notes.push(line);
    };
    assert_eq!(
        refused["error"]["data"]["code"], "message_too_large",
        "{refused}"
    );
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 6, "method": "models/list", "params": {}}),
    );
    answer(&lines, 6, &mut notes);
    // Wait until the model turn is under way.
    while !notes
        .iter()
        .any(|note| note["params"]["event"]["type"] == "turn_start")
    {
        notes.push(next(&lines, "the run's turn_start"));
    }

    drop(stdin);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("keel rpc did not exit within 30 s of stdin closing");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(0),
        "keel rpc exits 0 once its runs settled"
    );
    // Nothing more is answered after stdin closed: run/result (id 3) is not.
    loop {
        match lines.recv_timeout(Duration::from_secs(5)) {
            Ok(line) => notes.push(line),
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("stdout stayed open after exit"),
        }
    }
    assert!(
        !notes.iter().any(|line| line.get("id") == Some(&json!(3))),
        "run/result was answered after stdin closed"
    );
    // The run was cancelled and its session says so.
    let session_id = started["result"]["session_id"].as_str().unwrap();
    let session = common::files_under(&sessions)
        .into_iter()
        .find(|path| {
            path.display()
                .to_string()
                .ends_with(&format!("{session_id}.jsonl"))
        })
        .expect("the run's session file");
    let text = std::fs::read_to_string(session).unwrap();
    assert!(
        text.contains("cancelled"),
        "the session records the cancellation:\n{text}"
    );
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("standard input closed"),
        "logs go to stderr: {stderr}"
    );
}

#[test]
fn rpc_and_serve_explain_themselves() {
    for command in ["rpc", "serve"] {
        let output = common::keel_command()
            .args([command, "--help"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        let help = String::from_utf8(output.stdout).unwrap();
        assert!(help.contains("Keel as a service"), "{help}");
    }
}

/// A client may write requests right behind `initialize` without waiting
/// for its answer: they see the connection initialized, never a
/// `not_initialized` that depends on which task ran first.
#[test]
fn requests_pipelined_behind_initialize_see_it() {
    let home = tempfile::tempdir().unwrap();
    let script = home.path().join("script.json");
    std::fs::write(&script, SLOW).unwrap();
    let script = script.display().to_string();
    for round in 0..20 {
        let mut child = spawn_keel(&["rpc", "--script", &script], home.path(), &[]);
        let received = lines(child.stdout.take().unwrap());
        let mut stdin = child.stdin.take().unwrap();
        let pipelined = format!(
            "{}\n{}\n",
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "models/list", "params": {}}),
        );
        stdin.write_all(pipelined.as_bytes()).unwrap();
        stdin.flush().unwrap();
        // The two answers, in whichever order they come.
        for _ in 0..2 {
            let response = next(&received, "an answer");
            assert!(
                response.get("result").is_some(),
                "round {round}: {response}"
            );
        }
        drop(stdin);
        let _ = child.wait();
    }
}
