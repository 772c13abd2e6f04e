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
    let output = common::keel_command().arg("--version").output().unwrap();
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
    let output = run_in(dir.path(), &["--mode", "ask"], "");
    assert_eq!(output.code, 0);
    let resolved: Vec<&Value> = output
        .events
        .iter()
        .filter(|e| e["type"] == "permission_resolved")
        .collect();
    assert_eq!(resolved.len(), 2, "the edit and bash ask in ask mode");
    assert!(resolved.iter().all(|r| r["resolution"] == "denied"));
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
    let probe = run_in(dir.path(), &["--mode", "ask"], "");
    let requested = probe
        .events
        .iter()
        .find(|e| e["type"] == "permission_requested")
        .unwrap();
    let request_id = requested["request_id"].as_str().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let wrong = run_in(
        dir.path(),
        &["--mode", "ask"],
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
    let right = run_in(dir.path(), &["--mode", "ask"], &decision);
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
        "no_provider"
    );
    assert_eq!(
        startup_error(&keel(&["run", "--provider", "scripted", "hello"], None, "")),
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
    let output = common::keel_command()
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
    let unknown = keel(&["schema", "nope"], None, "");
    assert_eq!(unknown.code, 2);
    assert!(
        unknown.stderr.starts_with("keel: no schema named `nope`")
            && unknown.stderr.contains("[unknown_schema]"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn the_run_patch_reproduces_the_final_workspace_with_git_apply() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let git = |args: &[&str], cwd: &Path| {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&status.stderr)
        );
    };
    std::fs::write(work.join("keep.txt"), "one\ntwo\n").unwrap();
    std::fs::write(work.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(work.join("old-name.txt"), "moving house\n").unwrap();
    std::fs::write(work.join("logo.bin"), [0u8, 1, 2, 3, 255]).unwrap();
    git(&["init", "-q"], &work);
    git(
        &["-c", "user.name=t", "-c", "user.email=t@t", "add", "-A"],
        &work,
    );
    git(
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "start",
        ],
        &work,
    );
    let start = dir.path().join("start");
    copy_tree(&work, &start);

    let script = r#"{"turns":[{"content":[
        {"type":"tool_call","name":"write","arguments":{"path":"new/added.txt","content":"fresh\n"}},
        {"type":"tool_call","name":"edit","arguments":{"path":"keep.txt","edits":[{"old_text":"two","new_text":"2"}]}},
        {"type":"tool_call","name":"bash","arguments":{"command":"rm gone.txt && mv old-name.txt new-name.txt && printf '\\000\\377\\001' > logo.bin"}}]},
        {"content":[{"type":"text","text":"done"}]}]}"#;
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script).unwrap();
    let output = keel(
        &[
            "run",
            "--script",
            script_path.to_str().unwrap(),
            "--workspace",
            work.to_str().unwrap(),
            "--mode",
            "full",
            "change things",
        ],
        None,
        "",
    );
    assert_eq!(output.code, 0, "{:?}", output.result);
    let workspace = common::extra(&output, "workspace_changes");
    let paths: Vec<&str> = workspace["changed_paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for expected in [
        "new/added.txt",
        "keep.txt",
        "gone.txt",
        "old-name.txt",
        "new-name.txt",
        "logo.bin",
    ] {
        assert!(
            paths.contains(&expected),
            "{expected} missing from {paths:?}"
        );
    }
    let patch_file = dir.path().join("run.patch");
    std::fs::write(&patch_file, workspace["patch"].as_str().unwrap()).unwrap();
    git(&["apply", "--binary", patch_file.to_str().unwrap()], &start);
    for file in ["new/added.txt", "keep.txt", "new-name.txt", "logo.bin"] {
        assert_eq!(
            std::fs::read(start.join(file)).unwrap(),
            std::fs::read(work.join(file)).unwrap(),
            "{file}"
        );
    }
    assert!(!start.join("gone.txt").exists() && !start.join("old-name.txt").exists());
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn tools_can_be_chosen_and_unknown_ones_are_refused() {
    let script = r#"{"turns":[
      {"expect":{"tools":["read","grep","ls"]},"content":[{"type":"tool_call","name":"grep","arguments":{"pattern":"hel+o"}}]},
      {"expect":{"tool_result_contains":"a.txt:1: hello"},"content":[{"type":"text","text":"found it"}]}]}"#;
    let dir = workspace(script);
    let output = run_in(dir.path(), &["--tools", "read,grep,ls"], "");
    assert_eq!(output.code, 0, "{:?}", output.result);
    let unknown = run_in(dir.path(), &["--tools", "read,frobnicate"], "");
    assert_eq!(startup_error(&unknown), "unknown_tool");
}
