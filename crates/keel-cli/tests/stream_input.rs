//! `keel run --input-format stream-json` as a process (issue 15): a script
//! drives the `AgentRun` seam through stdin — a user message starts a run,
//! a steer and a follow-up reach the model, a cancel ends the run, the next
//! user message starts another run in the same session, permission answers
//! approve by id, and the end of input denies what is still pending; and
//! `keel resume` driven the same way.
//!
//! The scripted provider checks what each request holds (`expect`); the
//! bash calls wait for a file the test creates, so the order of events is
//! fixed by the test, not by timing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod live;

use std::path::Path;

use live::{Live, command};
use serde_json::{Value, json};

fn script(dir: &Path, turns: Value) -> String {
    let path = dir.join("script.json");
    std::fs::write(&path, json!({ "turns": turns }).to_string()).unwrap();
    path.display().to_string()
}

fn bash(command: &str) -> Value {
    json!([{"type": "tool_call", "name": "bash", "arguments": {"command": command}}])
}

fn text(text: &str) -> Value {
    json!([{"type": "text", "text": text}])
}

fn control(value: Value) -> String {
    value.to_string()
}

#[test]
fn a_script_steers_follows_up_cancels_and_starts_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("project");
    std::fs::create_dir(&workspace).unwrap();
    let script = script(
        dir.path(),
        json!([
            {"expect": {"last_user_contains": "start the work"},
             "content": bash("while [ ! -e go ]; do sleep 0.05; done; echo first call done")},
            {"expect": {"last_user_contains": "STEER-1", "tool_result_contains": "first call done"},
             "content": text("steered answer")},
            {"expect": {"last_user_contains": "FOLLOW-1"},
             "content": bash("while [ ! -e never ]; do sleep 0.05; done")},
            {"expect": {"last_user_contains": "second run"}, "content": text("second answer")}
        ]),
    );
    let mut keel = command(dir.path());
    keel.args([
        "run",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--mode",
        "full",
    ])
    .args(["--script", &script])
    .arg("--workspace")
    .arg(&workspace);
    let mut live = Live::start(keel);

    live.send(&control(
        json!({"type": "user_message", "text": "start the work"}),
    ));
    live.event("tool_execution_start");
    live.send(&control(json!({"type": "cancle"})));
    live.send(&control(
        json!({"type": "steer", "text": "STEER-1: look at the tests"}),
    ));
    live.send(&control(
        json!({"type": "follow_up", "text": "FOLLOW-1: now the docs"}),
    ));
    let steer = live.event("message_queued");
    let follow = live.event("message_queued");
    assert_eq!(
        (steer["queue"].as_str(), follow["queue"].as_str()),
        (Some("steer"), Some("follow_up"))
    );
    std::fs::write(workspace.join("go"), "").unwrap();

    // The follow-up starts a turn whose tool call waits forever: cancel it.
    live.wait_for("the follow-up's tool call", |value| {
        value["type"] == "tool_execution_start"
            && value["arguments"]["command"]
                .as_str()
                .is_some_and(|c| c.contains("never"))
    });
    live.send(&control(json!({"type": "cancel"})));
    let first = live.result();
    assert_eq!(first["state"], "cancelled", "{first}");

    // Between runs a steer has nothing to steer; a user message starts the next run.
    live.send(&control(json!({"type": "steer", "text": "too late"})));
    live.send(&control(
        json!({"type": "user_message", "text": "second run, please"}),
    ));
    let second = live.result();
    assert_eq!(second["state"], "settled", "{second}");
    assert_eq!(second["session_id"], first["session_id"], "one session");

    let (code, stderr, seen) = live.finish();
    assert_eq!(code, 0, "the last run settled: {stderr}");
    assert!(
        stderr.contains("line 2 is not a control message"),
        "an unreadable line is reported by number: {stderr}"
    );
    assert!(
        stderr.contains("no run is active; `steer` ignored"),
        "{stderr}"
    );
    let cancelled_call = seen
        .iter()
        .find(|value| {
            value["type"] == "tool_execution_end" && value["result"]["status"] == "cancelled"
        })
        .expect("the waiting call ends cancelled");
    assert_eq!(cancelled_call["result"]["tool_name"], "bash");
    let runs: Vec<&Value> = seen
        .iter()
        .filter(|value| value["type"] == "run_started")
        .collect();
    assert_eq!(runs.len(), 2, "two runs");
}

#[test]
fn permission_answers_approve_by_id_and_end_of_input_denies() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("project");
    std::fs::create_dir(&workspace).unwrap();
    let write = |path: &str| json!([{"type": "tool_call", "name": "write", "arguments": {"path": path, "content": "written\n"}}]);
    let script = script(
        dir.path(),
        json!([
            {"content": write("approved.txt")},
            {"expect": {"tool_result_contains": "approved.txt"}, "content": write("denied.txt")},
            {"expect": {"tool_results": 1}, "content": text("done")}
        ]),
    );
    let mut keel = command(dir.path());
    keel.args([
        "run",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--mode",
        "ask",
    ])
    .args(["--script", &script])
    .arg("--workspace")
    .arg(&workspace)
    // A prompt argument starts the first run; stdin carries only controls.
    .arg("write two files");
    let mut live = Live::start(keel);
    let request = live.event("permission_requested");
    live.send(&control(json!({
        "type": "permission_answer", "request_id": "not-this-one", "decision": "approve"
    })));
    live.send(&control(json!({
        "type": "permission_answer", "request_id": request["request_id"], "decision": "approve"
    })));
    let resolved = live.event("permission_resolved");
    assert_eq!(resolved["resolution"], "approved", "{resolved}");
    live.event("permission_requested");
    live.close();
    let resolved = live.event("permission_resolved");
    assert_eq!(
        resolved["resolution"], "denied",
        "end of input denies: {resolved}"
    );
    let result = live.result();
    assert_eq!(result["state"], "settled", "{result}");
    let (code, stderr, _) = live.finish();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("`permission_answer` not applied"),
        "{stderr}"
    );
    assert!(workspace.join("approved.txt").exists());
    assert!(!workspace.join("denied.txt").exists());
}

#[test]
fn input_that_ends_before_a_user_message_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path(), json!([{"content": text("unused")}]));
    let mut keel = command(dir.path());
    keel.args([
        "run",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--script",
        &script,
    ])
    .arg("--workspace")
    .arg(dir.path());
    let live = Live::start(keel);
    let (code, _, seen) = live.finish();
    assert_eq!(code, 2);
    assert!(
        seen.iter()
            .any(|value| value.to_string().contains("no_prompt")),
        "{seen:?}"
    );
    // `-` cannot be the prompt: stdin carries control messages.
    let mut keel = command(dir.path());
    keel.args([
        "run",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--script",
        &script,
        "-",
    ]);
    let (code, _, seen) = Live::start(keel).finish();
    assert_eq!(code, 2);
    assert!(seen[0].to_string().contains("user_message"), "{seen:?}");
}

#[test]
fn a_signal_between_runs_ends_keel_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path(), json!([{"content": text("done")}]));
    // The workspace beside the data directory (which holds the sessions):
    // Keel refuses sessions a sandboxed command could write.
    let workspace = dir.path().join("project");
    std::fs::create_dir(&workspace).unwrap();
    let mut keel = command(dir.path());
    keel.args([
        "run",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--script",
        &script,
    ])
    .arg("--workspace")
    .arg(&workspace);
    let mut live = Live::start(keel);
    live.send(&control(json!({"type": "user_message", "text": "one run"})));
    assert_eq!(live.result()["state"], "settled");
    // keel now waits for the next message, stdin still open: SIGTERM ends it.
    live.wait_for("the session line", |value| {
        value.get("session").is_some() || value["type"] == "session"
    });
    let status = std::process::Command::new("kill")
        .args(["-TERM", &live.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Closing stdin now would race the signal (end of input also ends keel).
    live.wait_exit();
    let (code, _, _) = live.finish();
    assert_eq!(code, 143);
}

#[test]
fn resume_with_stream_json_input_answers_the_recovered_call_and_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("project");
    std::fs::create_dir(&workspace).unwrap();
    let sessions = dir.path().join("sessions");
    // Turns by the number of assistant messages so far, so the resumed
    // process continues the same script where the dead one stopped.
    let script = dir.path().join("script.json");
    let write = json!([{"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "A\n"}}]);
    let turns = json!([
        {"content": write},
        {"content": text("resumed")},
        {"content": text("second run")}
    ]);
    std::fs::write(
        &script,
        json!({"by_history": true, "turns": turns}).to_string(),
    )
    .unwrap();
    let with_script = |keel: &mut std::process::Command| {
        keel.arg("--script")
            .arg(&script)
            .arg("--workspace")
            .arg(&workspace)
            .arg("--session-dir")
            .arg(&sessions);
    };
    // The first run dies (SIGKILL, from the failpoint) once the write is
    // journaled, before it happens.
    let mut first = command(dir.path());
    first
        .args(["run", "--output-format", "stream-json", "--mode", "auto"])
        .env(keel_failpoint::ENV, keel_failpoint::AFTER_EFFECT_STARTED);
    with_script(&mut first);
    let died = first.arg("write a").output().unwrap();
    assert!(died.status.code().is_none(), "killed by the failpoint");
    assert!(!workspace.join("a.txt").exists());
    let id = std::fs::read_dir(&sessions)
        .unwrap()
        .filter_map(|entry| entry.unwrap().file_name().into_string().ok())
        .find_map(|name| name.strip_suffix(".jsonl").map(str::to_owned))
        .unwrap();

    let mut resume = command(dir.path());
    resume.args([
        "resume",
        "--output-format",
        "stream-json",
        &id,
        "--input-format",
        "stream-json",
        "--mode",
        "ask",
    ]);
    with_script(&mut resume);
    let mut live = Live::start(resume);
    let recovered = live.event("effect_recovered");
    assert_eq!(recovered["action"], "rerun", "{recovered}");
    // The re-run write asks in `ask`; the answer comes on stdin.
    let request = live.event("permission_requested");
    live.send(&control(json!({
        "type": "permission_answer", "request_id": request["request_id"], "decision": "approve"
    })));
    let result = live.result();
    assert_eq!(result["state"], "settled", "{result}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).unwrap(),
        "A\n"
    );
    // The next message starts another run, in the same session.
    live.send(&control(
        json!({"type": "user_message", "text": "and again"}),
    ));
    let second = live.result();
    assert_eq!(second["state"], "settled", "{second}");
    let (code, stderr, seen) = live.finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(live::session_ids(&seen), vec![id.clone(), id]);
    let answers: Vec<&str> = seen
        .iter()
        .filter(|value| value["type"] == "message_end" && value["message"]["role"] == "assistant")
        .filter_map(|value| value["message"]["content"][0]["text"].as_str())
        .collect();
    assert_eq!(answers, ["resumed", "second run"], "{seen:#?}");
}
