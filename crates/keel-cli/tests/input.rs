//! Where `keel run` takes its prompt from (issue 15): the argument, `@FILE`,
//! `-`, or standard input when no prompt is given and it is not a terminal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::keel;

/// A one-turn script whose request must carry `wanted` in its user message.
fn script(dir: &Path, wanted: &str) -> String {
    let script = serde_json::json!({"turns": [
        {"expect": {"last_user_contains": wanted}, "content": [{"type": "text", "text": "ok"}]}
    ]});
    let path = dir.join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    path.display().to_string()
}

fn run(dir: &Path, script: &str, prompt: Option<&str>, stdin: &str) -> common::Output {
    let workspace = dir.display().to_string();
    let mut args = vec!["run", "--script", script, "--workspace", &workspace];
    args.extend(prompt);
    keel(&args, None, stdin)
}

#[test]
fn the_prompt_comes_from_stdin_when_none_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path(), "task from a pipe");
    let output = run(dir.path(), &script, None, "task from a pipe\n");
    assert_eq!(output.code, 0, "{:?} {}", output.result, output.stderr);
    assert_eq!(output.result["state"], "settled");
}

#[test]
fn a_dash_reads_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path(), "dash task");
    let output = run(dir.path(), &script, Some("-"), "dash task");
    assert_eq!(output.code, 0, "{:?} {}", output.result, output.stderr);
}

#[test]
fn an_at_file_reads_the_prompt_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path(), "task from a file");
    let prompt = dir.path().join("prompt.md");
    std::fs::write(&prompt, "task from a file\n").unwrap();
    let argument = format!("@{}", prompt.display());
    let output = run(dir.path(), &script, Some(&argument), "");
    assert_eq!(output.code, 0, "{:?} {}", output.result, output.stderr);
    // The argument itself is used when it names no file.
    let literal = script_for_literal(dir.path());
    let output = run(dir.path(), &literal, Some("plain words"), "");
    assert_eq!(output.code, 0, "{:?}", output.result);
}

fn script_for_literal(dir: &Path) -> String {
    let sub = dir.join("literal");
    std::fs::create_dir_all(&sub).unwrap();
    script(&sub, "plain words")
}

#[test]
fn a_missing_prompt_file_or_empty_stdin_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path(), "x");
    let output = run(dir.path(), &script, Some("@/nonexistent/prompt.md"), "");
    assert_eq!(output.code, 2);
    assert_eq!(output.startup_error.unwrap()["code"], "prompt_file");
    let output = run(dir.path(), &script, None, "");
    assert_eq!(output.code, 2);
    assert_eq!(output.startup_error.unwrap()["code"], "empty_prompt");
    let binary = dir.path().join("binary.txt");
    std::fs::write(&binary, [0x66, 0xff, 0xfe]).unwrap();
    let argument = format!("@{}", binary.display());
    let output = run(dir.path(), &script, Some(&argument), "");
    assert_eq!(output.code, 2);
    assert_eq!(output.startup_error.unwrap()["code"], "prompt_not_utf8");
}
