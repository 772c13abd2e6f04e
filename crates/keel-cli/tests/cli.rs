//! `keel` as a process: startup errors, permission answers, schema output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::keel;
use serde_json::Value;

const EDIT_SCRIPT: &str = r#"{"turns":[
  {"content":[{"type":"tool_call","name":"read","arguments":{"path":"a.txt"}}]},
  {"expect":{"tool_result_contains":"hello"},"content":[{"type":"tool_call","name":"edit","arguments":{"path":"a.txt","edits":[{"old_text":"hello","new_text":"goodbye"}]}}]},
  {"expect":{"tool_results":1},"content":[{"type":"tool_call","name":"bash","arguments":{"command":"cat a.txt"}}]},
  {"content":[{"type":"text","text":"done"}]}]}"#;

fn workspace(script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    std::fs::write(dir.path().join("script.json"), script).unwrap();
    dir
}

fn run_in(dir: &Path, extra: &[&str], stdin: &str) -> common::Output {
    let script = dir.join("script.json");
    let mut args = vec![
        "run",
        "--script",
        script.to_str().unwrap(),
        "--workspace",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args.push("change the greeting");
    keel(&args, None, stdin)
}

fn startup_error(output: &common::Output) -> String {
    assert_eq!(output.code, 2, "startup errors exit 2");
    assert!(
        output.events.is_empty(),
        "no run events after a startup error"
    );
    output
        .startup_error
        .as_ref()
        .expect("one startup_error line")["code"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn version_prints_and_exits_zero() {
    let output = std::process::Command::new(assert_cmd::cargo::cargo_bin!("keel"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("keel "));
}

#[test]
fn a_full_mode_run_reads_edits_and_runs_a_command() {
    let dir = workspace(EDIT_SCRIPT);
    let output = run_in(dir.path(), &["--mode", "full"], "");
    assert_eq!(output.code, 0, "{}", output.stderr);
    assert_eq!(output.result["state"], "settled");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "goodbye\n"
    );
    let bash_output = output
        .events
        .iter()
        .find(|e| e["type"] == "tool_execution_end" && e["result"]["tool_name"] == "bash")
        .unwrap();
    assert_eq!(bash_output["result"]["content"][0]["text"], "goodbye");
}

#[test]
fn end_of_input_denies_what_the_policy_asks() {
    let dir = workspace(EDIT_SCRIPT);
    let output = run_in(dir.path(), &[], "");
    assert_eq!(output.code, 0);
    let resolved: Vec<&Value> = output
        .events
        .iter()
        .filter(|e| e["type"] == "permission_resolved")
        .collect();
    assert_eq!(resolved.len(), 1, "only bash asks in auto mode");
    assert_eq!(resolved[0]["resolution"], "denied");
    let bash = output
        .events
        .iter()
        .find(|e| e["type"] == "tool_execution_end" && e["result"]["tool_name"] == "bash")
        .unwrap();
    assert_eq!(bash["result"]["error"]["code"], "permission_denied");
}

#[test]
fn a_json_decision_on_stdin_approves_only_its_request() {
    let dir = workspace(EDIT_SCRIPT);
    // First learn the request id the run will issue (it is bound to the call).
    let probe = run_in(dir.path(), &[], "");
    let requested = probe
        .events
        .iter()
        .find(|e| e["type"] == "permission_requested")
        .unwrap();
    let request_id = requested["request_id"].as_str().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let wrong = run_in(
        dir.path(),
        &[],
        "{\"request_id\":\"perm-1-0000\",\"decision\":\"approve\"}\n",
    );
    let resolved = wrong
        .events
        .iter()
        .find(|e| e["type"] == "permission_resolved")
        .unwrap();
    assert_eq!(
        resolved["resolution"], "denied",
        "a decision for another request denies"
    );
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let decision = format!("{{\"request_id\":\"{request_id}\",\"decision\":\"approve\"}}\n");
    let right = run_in(dir.path(), &[], &decision);
    let resolved = right
        .events
        .iter()
        .find(|e| e["type"] == "permission_resolved")
        .unwrap();
    assert_eq!(resolved["resolution"], "approved");
    assert_eq!(right.result["state"], "settled");
}

#[test]
fn startup_errors_are_one_json_line_with_exit_2() {
    let dir = workspace("{\"turns\": [");
    assert_eq!(
        startup_error(&run_in(dir.path(), &[], "")),
        "invalid_script"
    );
    let dir = workspace(r#"{"turns":[{"content":[{"type":"video"}]}]}"#);
    assert_eq!(
        startup_error(&run_in(dir.path(), &[], "")),
        "invalid_script"
    );
    assert_eq!(
        startup_error(&keel(&["run", "hello"], None, "")),
        "script_required"
    );
    assert_eq!(
        startup_error(&keel(&["run", "--provider", "nope", "hello"], None, "")),
        "unknown_provider"
    );
    assert_eq!(startup_error(&keel(&["run", "--bogus"], None, "")), "usage");
    let dir = workspace(EDIT_SCRIPT);
    let script = dir.path().join("script.json");
    let missing = keel(
        &[
            "run",
            "--script",
            script.to_str().unwrap(),
            "--workspace",
            "/nonexistent/keel",
            "x",
        ],
        None,
        "",
    );
    assert_eq!(startup_error(&missing), "workspace");
    let empty = keel(
        &[
            "run",
            "--script",
            script.to_str().unwrap(),
            "--workspace",
            dir.path().to_str().unwrap(),
            " ",
        ],
        None,
        "",
    );
    assert_eq!(startup_error(&empty), "empty_prompt");
}

#[test]
fn schema_prints_the_checked_in_schemas() {
    let output = std::process::Command::new(assert_cmd::cargo::cargo_bin!("keel"))
        .args(["schema", "run_event"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let printed: Value = serde_json::from_slice(&output.stdout).unwrap();
    let on_disk: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../schema/run_event.json"
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(printed, on_disk);
    assert_eq!(
        startup_error(&keel(&["schema", "nope"], None, "")),
        "unknown_schema"
    );
}
