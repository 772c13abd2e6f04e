//! `keel resume` as a process (issue 17): a `keel run` killed with SIGKILL
//! while its batch runs leaves a session that `keel run --session` refuses
//! (naming `keel resume`) and `keel resume` continues without doing the
//! applied write again and without re-running the cut-short command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::home::{Home, final_result};
use common::{sleepers, wait_until};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

fn keel() -> Command {
    common::keel_command()
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
        .args([
            "run",
            "--output-format",
            "stream-json",
            "--mode",
            "auto",
            "--script",
        ])
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
        .args(["run", "--output-format", "stream-json", "--script"])
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
        .args([
            "resume",
            &id,
            "--output-format",
            "stream-json",
            "--mode",
            "auto",
            "--script",
        ])
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

/// `keel ARGS` isolated from the user's configuration and data, no
/// failpoint armed unless `failpoint` names one (`NAME:N`).
fn keel_in(args: &[&str], sessions: &Path, failpoint: Option<&str>) -> Command {
    let mut command = keel();
    command
        .args(common::with_stream_json(args))
        .arg("--session-dir")
        .arg(sessions)
        .env(
            "XDG_DATA_HOME",
            std::env::temp_dir().join(format!("keel-test-data-{}", std::process::id())),
        )
        .env("XDG_CONFIG_HOME", "/nonexistent/keel-test-config")
        // The key of the local provider server, where a test uses one.
        .env("KEEL_TEST_PROVIDER_KEY", "sk-test")
        .env_remove(keel_failpoint::ENV)
        .stdin(Stdio::null());
    if let Some(point) = failpoint {
        command.env(keel_failpoint::ENV, point);
    }
    command
}

/// Runs `command` to its end; true when a failpoint killed it (SIGKILL).
/// What it printed goes to the test's output, for a failure's sake.
fn killed(command: &mut Command) -> bool {
    use std::os::unix::process::ExitStatusExt;
    let output = command.output().unwrap();
    if output.status.signal() != Some(libc::SIGKILL) {
        eprintln!(
            "not killed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output.status.signal() == Some(libc::SIGKILL)
}

/// Runs `command` to its end; its exit status and what it printed.
fn finished(command: &mut Command) -> (bool, String) {
    let output = command.output().unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// `(tool, action)` of each `effect_recovered` entry, in order.
fn recovered_actions(entries: &[Value]) -> Vec<(String, String)> {
    entries
        .iter()
        .filter(|entry| entry["kind"] == "effect_recovered")
        .map(|entry| {
            (
                entry["tool_name"].as_str().unwrap().to_owned(),
                entry["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The ToolResult of `call_id` in the session.
fn result_of(entries: &[Value], call_id: &str) -> Value {
    entries
        .iter()
        .find(|entry| entry["kind"] == "message" && entry["message"]["call_id"] == call_id)
        .map(|entry| entry["message"].clone())
        .unwrap_or_else(|| panic!("no result for {call_id}"))
}

/// Turn 1 runs a command with `first` as its id and is killed once its
/// result is durable but before its receipts are removed; the resumed run's
/// next turn calls a command with `second` as its id and is killed while it
/// runs; the second resume must report that command `interrupted`, never
/// recovered from the first command's receipt. `args` choose the model.
fn a_reused_id_case(args: &[&str], workspace: &Path, sessions: &Path) -> Vec<Value> {
    let mut all = args.to_vec();
    all.extend(["--mode", "auto", "--workspace", workspace.to_str().unwrap()]);
    let run: Vec<&str> = ["run"].iter().copied().chain(all.iter().copied()).collect();
    let mut first = keel_in(&run, sessions, Some("after_result:1"));
    assert!(killed(first.arg("count")), "the first run was not killed");
    let (id, _) = entries(sessions);
    let resume: Vec<&str> = ["resume", id.as_str()]
        .iter()
        .copied()
        .chain(all.iter().copied())
        .collect();
    assert!(
        killed(&mut keel_in(&resume, sessions, Some("in_bash:1"))),
        "the first resume was not killed in its command"
    );
    let (ok, said) = finished(&mut keel_in(&resume, sessions, None));
    assert!(ok, "{said}");
    let (_, entries) = entries(sessions);
    let calls: Vec<String> = entries
        .iter()
        .filter(|entry| entry["kind"] == "message" && entry["message"]["role"] == "assistant")
        .flat_map(|entry| entry["message"]["content"].as_array().unwrap().clone())
        .filter(|block| block["type"] == "tool_call")
        .map(|block| block["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_ne!(calls[0], calls[1], "call ids are unique in the session");
    assert_eq!(
        recovered_actions(&entries),
        vec![("bash".to_owned(), "interrupted".to_owned())],
        "the killed command's outcome is unknown"
    );
    let result = result_of(&entries, &calls[1]);
    assert_eq!(result["status"], "error", "{result}");
    assert_eq!(result["error"]["code"], "interrupted", "{result}");
    entries
}

#[test]
fn a_call_id_a_scripted_model_reuses_is_interrupted_when_killed_not_recovered_as_a_success() {
    let workspace = tempfile::tempdir().unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let script = scripts.path().join("script.json");
    std::fs::write(
        &script,
        json!({"by_history": true, "turns": [
            {"content": [{"type": "tool_call", "id": "dup", "name": "bash", "arguments": {"command": "echo one >> counter.txt"}}]},
            {"content": [{"type": "tool_call", "id": "dup", "name": "bash", "arguments": {"command": "echo two >> counter.txt; sleep 30"}}]},
            {"content": [{"type": "text", "text": "done"}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let entries = a_reused_id_case(
        &["--script", script.to_str().unwrap()],
        workspace.path(),
        sessions.path(),
    );
    // The scripted model's repeated id is kept for the wire.
    let second = entries
        .iter()
        .filter(|entry| entry["kind"] == "message" && entry["message"]["role"] == "assistant")
        .filter_map(|entry| entry["message"]["content"][0].get("wire_id").cloned())
        .collect::<Vec<_>>();
    assert_eq!(second, vec![json!("dup")]);
}

/// One SSE `data:` line for a Chat Completions chunk.
fn chat_chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({"id": "c1", "object": "chat.completion.chunk", "model": "local-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {body}\n\n")
}

/// A streamed Chat Completions reply calling `bash` with no call id, as
/// some OpenAI-compatible servers send it.
fn bash_without_id(command: &str) -> keel_provider::testing::Reply {
    let arguments = json!({ "command": command }).to_string();
    let mut sse = chat_chunk(
        json!({"role": "assistant", "content": null,
        "tool_calls": [{"index": 0, "type": "function", "function": {"name": "bash", "arguments": arguments}}]}),
        None,
    );
    sse += &chat_chunk(json!({}), Some("tool_calls"));
    sse += "data: [DONE]\n\n";
    keel_provider::testing::Reply::sse(&sse)
}

#[test]
fn a_call_id_an_openai_compatible_server_never_sent_is_unique_and_a_killed_command_interrupted() {
    use keel_provider::testing::{Reply, TestServer};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut answer = chat_chunk(json!({"role": "assistant", "content": "done"}), None);
    answer += &chat_chunk(json!({}), Some("stop"));
    answer += "data: [DONE]\n\n";
    let server = runtime
        .block_on(TestServer::start(vec![
            bash_without_id("echo one >> counter.txt"),
            bash_without_id("echo two >> counter.txt; sleep 30"),
            Reply::sse(&answer),
        ]))
        .unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let config = config.path().join("config.toml");
    std::fs::write(
        &config,
        "[providers.local]\napi = \"openai-chat\"\napi_key_env = \"KEEL_TEST_PROVIDER_KEY\"\n\n[providers.local.models.local-model]\ninput_price = 0.0\noutput_price = 0.0\n",
    )
    .unwrap();
    let url = server.url();
    a_reused_id_case(
        &[
            "--provider",
            "local",
            "--base-url",
            &url,
            "--model",
            "local-model",
            "--config",
            config.to_str().unwrap(),
        ],
        workspace.path(),
        sessions.path(),
    );
    // The last request carries both calls, each answered under its own id.
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "one request per turn");
    let last = requests[2].json();
    let messages = last["messages"].as_array().unwrap();
    let called: Vec<&str> = messages
        .iter()
        .filter_map(|message| message["tool_calls"].as_array())
        .flatten()
        .map(|call| call["id"].as_str().unwrap())
        .collect();
    let answered: Vec<&str> = messages
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| message["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(called.len(), 2);
    assert_ne!(called[0], called[1]);
    assert_eq!(called, answered);
}

/// Writes a by-history script whose first turn is `calls` and whose
/// second answers "done".
fn batch_script(path: &Path, calls: Value) {
    std::fs::write(
        path,
        json!({"by_history": true, "turns": [
            {"content": calls},
            {"content": [{"type": "text", "text": "done"}]}
        ]})
        .to_string(),
    )
    .unwrap();
}

#[test]
fn a_file_the_user_changed_or_deleted_after_a_crash_is_a_conflict_and_kept() {
    let workspace = tempfile::tempdir().unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    for name in ["a.txt", "b.txt", "c.txt", "d.txt"] {
        std::fs::write(workspace.path().join(name), "original\n").unwrap();
    }
    let script = scripts.path().join("script.json");
    batch_script(
        &script,
        json!([
            {"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "planned\n"}},
            {"type": "tool_call", "name": "write", "arguments": {"path": "b.txt", "content": "planned\n"}},
            {"type": "tool_call", "name": "edit", "arguments": {"path": "c.txt", "edits": [{"old_text": "original", "new_text": "edited"}]}},
            {"type": "tool_call", "name": "write", "arguments": {"path": "d.txt", "content": "planned\n"}}
        ]),
    );
    let common = [
        "--mode",
        "auto",
        "--script",
        script.to_str().unwrap(),
        "--workspace",
        workspace.path().to_str().unwrap(),
    ];
    let run: Vec<&str> = ["run"]
        .into_iter()
        .chain(common)
        .chain(["change files"])
        .collect();
    // Killed once the batch's records are durable, before any call ran.
    assert!(killed(&mut keel_in(
        &run,
        sessions.path(),
        Some("after_effect_started:1")
    )));
    // After the crash the user fixes a.txt, deletes b.txt, edits c.txt.
    std::fs::write(workspace.path().join("a.txt"), "the user's fix\n").unwrap();
    std::fs::remove_file(workspace.path().join("b.txt")).unwrap();
    std::fs::write(workspace.path().join("c.txt"), "the user's c\n").unwrap();

    let (id, _) = entries(sessions.path());
    let resume: Vec<&str> = ["resume", id.as_str()].into_iter().chain(common).collect();
    let (ok, said) = finished(&mut keel_in(&resume, sessions.path(), None));
    assert!(ok, "{said}");
    let (_, entries) = entries(sessions.path());
    assert_eq!(
        recovered_actions(&entries),
        vec![
            ("write".to_owned(), "conflict".to_owned()),
            ("write".to_owned(), "conflict".to_owned()),
            ("edit".to_owned(), "conflict".to_owned()),
            ("write".to_owned(), "rerun".to_owned()),
        ]
    );
    let read = |name: &str| std::fs::read_to_string(workspace.path().join(name)).ok();
    assert_eq!(read("a.txt").as_deref(), Some("the user's fix\n"));
    assert_eq!(read("b.txt"), None, "the deleted file was not recreated");
    assert_eq!(read("c.txt").as_deref(), Some("the user's c\n"));
    assert_eq!(read("d.txt").as_deref(), Some("planned\n"));
    // The model is told (an effect_conflict result naming the file), and
    // so is the user (a warning, and the recovery entry's reason).
    let results: Vec<&Value> = entries
        .iter()
        .filter(|entry| entry["kind"] == "message" && entry["message"]["role"] == "tool_result")
        .map(|entry| &entry["message"])
        .collect();
    assert_eq!(results[0]["error"]["code"], "effect_conflict");
    assert!(
        results[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("b.txt was deleted"),
        "{}",
        results[1]
    );
    assert!(said.contains("recovery_conflict"), "{said}");
    assert!(said.contains("a.txt was changed"), "{said}");
}

#[test]
fn resume_in_another_workspace_is_refused_unless_named_then_warned_and_recorded() {
    let home = tempfile::tempdir().unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let own = home.path().join("own");
    let other = home.path().join("other");
    let empty = home.path().join("empty");
    for dir in [&own, &other, &empty] {
        std::fs::create_dir(dir).unwrap();
    }
    std::fs::write(own.join("a.txt"), "original\n").unwrap();
    std::fs::write(other.join("a.txt"), "original\n").unwrap();
    let script = home.path().join("script.json");
    batch_script(
        &script,
        json!([{"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "planned\n"}}]),
    );
    let script = script.to_str().unwrap();
    let run = [
        "run",
        "--output-format",
        "stream-json",
        "--mode",
        "auto",
        "--script",
        script,
        "--workspace",
        own.to_str().unwrap(),
        "write",
    ];
    assert!(killed(&mut keel_in(
        &run,
        sessions.path(),
        Some("after_effect_started:1")
    )));
    let (id, _) = entries(sessions.path());
    let own = std::fs::canonicalize(&own).unwrap();
    let other = std::fs::canonicalize(&other).unwrap();
    let resume = ["resume", id.as_str(), "--mode", "auto", "--script", script];

    // Run from another directory without --workspace: refused, both named.
    let (ok, said) = finished(keel_in(&resume, sessions.path(), None).current_dir(&other));
    assert!(!ok, "{said}");
    assert!(said.contains("session_workspace"), "{said}");
    assert!(
        said.contains(own.to_str().unwrap()) && said.contains(other.to_str().unwrap()),
        "{said}"
    );
    // An empty or missing workspace for a session whose calls changed files: refused.
    let (ok, said) = finished(
        keel_in(&resume, sessions.path(), None)
            .arg("--workspace")
            .arg(&empty),
    );
    assert!(!ok, "{said}");
    assert!(said.contains("workspace_empty"), "{said}");
    assert!(said.contains(own.to_str().unwrap()), "{said}");
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "nothing written"
    );
    let (ok, said) = finished(
        keel_in(&resume, sessions.path(), None)
            .arg("--workspace")
            .arg(home.path().join("missing")),
    );
    assert!(!ok, "{said}");
    let (_, unchanged) = entries(sessions.path());
    assert!(
        !unchanged
            .iter()
            .any(|entry| entry["kind"] == "effect_recovered"),
        "a refused resume records nothing"
    );

    // Named explicitly: it warns naming both, and records the move.
    let (ok, said) = finished(
        keel_in(&resume, sessions.path(), None)
            .arg("--workspace")
            .arg(&other),
    );
    assert!(ok, "{said}");
    assert!(said.contains("workspace_moved"), "{said}");
    assert!(
        said.contains(&format!(
            "in workspace {}, not in its own workspace {}",
            other.display(),
            own.display()
        )),
        "{said}"
    );
    let (_, entries) = entries(sessions.path());
    let moved: Vec<&Value> = entries
        .iter()
        .filter(|entry| entry["kind"] == "run_start")
        .filter_map(|entry| entry.get("workspace_moved"))
        .collect();
    assert_eq!(
        moved,
        vec![&json!({"from": own.to_str().unwrap(), "to": other.to_str().unwrap()})]
    );
    // Recovery was judged against the named workspace, and acted there.
    assert_eq!(
        std::fs::read_to_string(other.join("a.txt")).unwrap(),
        "planned\n"
    );
    assert_eq!(
        std::fs::read_to_string(own.join("a.txt")).unwrap(),
        "original\n"
    );
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

/// `keel resume` as peers mean it, in an isolated home (`common::home`):
/// with the session's shortest unique prefix, or `--last`, and a prompt.
fn home_with(turns: Value) -> (Home, std::path::PathBuf) {
    let home = Home::new();
    let script = home.script("script", json!({"by_history": true, "turns": turns}));
    (home, script)
}

/// The text `keel session list` shows, run in the workspace.
fn listing(home: &Home) -> String {
    let output = home
        .command(&["session", "list", "--output-format", "text"])
        .output()
        .unwrap();
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn resume_with_a_short_id_or_last_and_a_prompt_continues_a_settled_session() {
    let (home, script) = home_with(json!([
        {"content": [{"type": "text", "text": "first answer"}]},
        {"expect": {"last_user_contains": "second prompt"}, "content": [{"type": "text", "text": "second answer"}]},
        {"expect": {"last_user_contains": "third prompt"}, "content": [{"type": "text", "text": "third answer"}]}
    ]));
    let first = home.run_script(&["run", "first prompt"], &script, &[]);
    assert_eq!(first.status.code(), Some(0));
    let id = final_result(&first)["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Other sessions created in the same minute share the id's first 8
    // characters: the listing shows each by a longer prefix, unique in the store.
    let mut others = Vec::new();
    for _ in 0..2 {
        let (other, other_script) = home_with(common::home::text_turns("x"));
        let output = other.run_script(&["run", "other"], &other_script, &[]);
        assert_eq!(output.status.code(), Some(0));
        let other_id = final_result(&output)["session_id"]
            .as_str()
            .unwrap()
            .to_owned();
        others.push(other_id.clone());
        for name in [format!("{other_id}.jsonl"), format!("{other_id}.meta.json")] {
            let from = other.sessions().join(&name);
            if from.exists() {
                std::fs::copy(&from, home.sessions().join(&name)).unwrap();
            }
        }
    }
    let listing = listing(&home);
    let short = listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .find(|word| id.starts_with(word) && word.len() >= 8)
        .unwrap_or_else(|| panic!("{id} is not listed by a prefix: {listing}"))
        .to_owned();
    assert!(short.len() < id.len(), "{listing}");
    if others.iter().any(|other| other[..8] == id[..8]) {
        assert!(short.len() > 8, "{short} names several sessions: {listing}");
    }

    let second = home.run_script(&["resume", &short, "second prompt"], &script, &[]);
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let result = final_result(&second);
    assert_eq!(result["session_id"], id.as_str());
    assert_eq!(result["message"]["content"][0]["text"], "second answer");

    let third = home.run_script(&["resume", "--last", "third prompt"], &script, &[]);
    assert_eq!(
        third.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    assert_eq!(final_result(&third)["session_id"], id.as_str());

    // Nothing interrupted and no prompt: a typed refusal naming the short id.
    let nothing = home.run_script(&["resume", &short], &script, &[]);
    assert_eq!(nothing.status.code(), Some(2));
    let said = String::from_utf8_lossy(&nothing.stdout);
    assert!(said.contains("nothing_to_resume"), "{said}");
    assert!(said.contains(&format!("keel resume {short}")), "{said}");
    // No session named and no terminal to pick one on: a usage error.
    let unnamed = home.run_script(&["resume"], &script, &[]);
    assert_eq!(unnamed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unnamed.stdout).contains("picker"));
}

#[test]
fn resume_after_a_crash_recovers_the_run_then_answers_the_prompt_in_the_same_run() {
    let (home, script) = home_with(json!([
        {"content": [{"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "A\n"}}]},
        {"content": [{"type": "text", "text": "wrote a"}]},
        {"expect": {"last_user_contains": "now b"}, "content": [{"type": "text", "text": "and b"}]}
    ]));
    // The first run dies (SIGKILL, from the failpoint) once the write is
    // journaled, before it happens.
    let died = home.run_script(
        &["run", "--mode", "auto", "write a"],
        &script,
        &[(keel_failpoint::ENV, keel_failpoint::AFTER_EFFECT_STARTED)],
    );
    assert!(died.status.code().is_none(), "killed by the failpoint");
    let resumed = home.run_script(
        &["resume", "--last", "--mode", "auto", "now b"],
        &script,
        &[],
    );
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(stdout.contains("\"effect_recovered\""), "{stdout}");
    assert_eq!(
        stdout
            .lines()
            .filter(|line| line.contains("\"type\":\"result\""))
            .count(),
        1,
        "recovery and the prompt are one run: {stdout}"
    );
    assert_eq!(
        final_result(&resumed)["message"]["content"][0]["text"],
        "and b"
    );
    assert_eq!(
        std::fs::read_to_string(home.workspace().join("a.txt")).unwrap(),
        "A\n"
    );
}
