//! Command hooks (`[[hooks]]` in the user's config.toml) through `keel run`
//! as a process: a hook blocks an edit to a protected path and lets
//! another through, its timeout is enforced (the hook killed, the run
//! going on), a fail-closed hook that times out blocks, and the same hook
//! in the project's `.keel/config.toml` is ignored with a warning.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::home::Home;
use serde_json::{Value, json};

/// A guard that blocks writes under `protected/` and allows the rest,
/// judging the path as it resolves (docs/extensions.md shows it).
const GUARD: &str = r#"#!/usr/bin/env python3
import json, os, sys
event = json.load(sys.stdin)
workspace = event["workspace"]
target = os.path.realpath(os.path.join(workspace, event["arguments"].get("path", "")))
protected = os.path.realpath(os.path.join(workspace, "protected"))
if target == protected or target.startswith(protected + os.sep):
    print(json.dumps({"outcome": "block", "code": "protected", "message": "protected/ is read-only"}))
else:
    print(json.dumps({"outcome": "allow"}))
"#;

fn write(path: &str) -> Value {
    json!({"content": [{"type": "tool_call", "name": "write", "arguments": {"path": path, "content": "x\n"}}]})
}

fn done() -> Value {
    json!({"content": [{"type": "text", "text": "done"}]})
}

/// Writes an executable script `name` into the home; its path.
fn script(home: &Home, name: &str, text: &str) -> PathBuf {
    let path = home.path().join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn user_config(home: &Home, text: &str) {
    let dir = home.path().join("config/keel");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

/// Runs the turns in auto; the events and stderr.
fn run(home: &Home, turns: Vec<Value>) -> (Vec<Value>, String) {
    let script = home.script("script", json!({ "turns": turns }));
    let output = home.run_script(&["run", "--mode", "auto", "go"], &script, &[]);
    let lines = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (lines, String::from_utf8(output.stderr).unwrap())
}

fn of<'a>(lines: &'a [Value], kind: &'a str) -> Vec<&'a Value> {
    lines.iter().filter(|line| line["type"] == kind).collect()
}

fn statuses(lines: &[Value]) -> Vec<String> {
    of(lines, "tool_execution_end")
        .iter()
        .map(|line| line["result"]["status"].as_str().unwrap().to_owned())
        .collect()
}

fn hook_config(command: &Path, extra: &str) -> String {
    format!(
        "[[hooks]]\nevent = \"tool_call\"\nmatcher = \"write|edit\"\ncommand = [{:?}]\n{extra}",
        command.display().to_string()
    )
}

#[test]
fn a_command_hook_blocks_a_protected_write_and_lets_another_through() {
    let home = Home::new();
    let guard = script(&home, "guard.sh", GUARD);
    user_config(&home, &hook_config(&guard, ""));
    std::fs::create_dir(home.workspace().join("protected")).unwrap();
    let absolute = home
        .workspace()
        .join("protected/c.txt")
        .display()
        .to_string();
    let (lines, stderr) = run(
        &home,
        vec![
            write("protected/secret.txt"),
            write("./protected/a.txt"),
            write("sub/../protected/b.txt"),
            write(&absolute),
            write("notes.txt"),
            done(),
        ],
    );
    assert_eq!(
        statuses(&lines),
        ["error", "error", "error", "error", "success"],
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(home.workspace().join("protected"))
            .unwrap()
            .count(),
        0
    );
    assert!(!home.workspace().join("protected/secret.txt").exists());
    assert!(home.workspace().join("notes.txt").exists());
    let blocked = &of(&lines, "tool_execution_end")[0]["result"]["error"];
    assert_eq!(blocked["code"], "blocked");
    assert!(
        blocked["message"]
            .as_str()
            .unwrap()
            .contains("protected/ is read-only")
    );
    let events = of(&lines, "hook_blocked");
    assert_eq!(events.len(), 4);
    assert_eq!(events[0]["extension"], "config-hooks");
    assert_eq!(events[0]["point"], "tool_call");
    // The configuration records the hooks' extension.
    let registered = of(&lines, "extension_registered");
    assert_eq!(
        registered[0]["extension"]["hook_points"],
        json!(["tool_call"])
    );
}

#[test]
fn a_hook_past_its_timeout_is_killed_and_the_run_goes_on_or_blocks_when_fail_closed() {
    let home = Home::new();
    let pids = home.path().join("pids");
    let slow = script(
        &home,
        "slow.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\nsleep 30 &\necho $! >> {}\nwait\n",
            pids.display()
        ),
    );
    user_config(&home, &hook_config(&slow, "timeout_sec = 1\n"));
    let started = Instant::now();
    let (lines, stderr) = run(&home, vec![write("a.txt"), done()]);
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the run did not wait for the hook's sleep"
    );
    assert_eq!(statuses(&lines), ["success"], "{stderr}");
    let failed = of(&lines, "hook_failed");
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0]["reason"]
            .as_str()
            .unwrap()
            .contains("1 s timeout")
    );
    assert_eq!(failed[0]["blocked"], false);

    // Fail-closed: the same timeout blocks the call.
    user_config(
        &home,
        &hook_config(&slow, "timeout_sec = 1\nfail_closed = true\n"),
    );
    let (lines, stderr) = run(&home, vec![write("b.txt"), done()]);
    assert_eq!(statuses(&lines), ["error"], "{stderr}");
    assert!(!home.workspace().join("b.txt").exists());
    assert_eq!(of(&lines, "hook_failed")[0]["blocked"], true);
    // The hooks' whole process groups were killed: the background sleeps
    // they started are gone too.
    std::thread::sleep(Duration::from_millis(500));
    let pids = std::fs::read_to_string(&pids).unwrap();
    assert_eq!(pids.lines().count(), 2);
    for pid in pids.lines() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.chars().next());
        assert!(
            stat.is_empty() || state == Some('Z'),
            "the hook's background process {pid} outlived it"
        );
    }
}

#[test]
fn the_same_hook_in_the_project_file_is_ignored_with_a_warning() {
    let home = Home::new();
    let guard = script(&home, "guard.sh", GUARD);
    std::fs::create_dir_all(home.workspace().join(".keel")).unwrap();
    std::fs::write(
        home.workspace().join(".keel/config.toml"),
        hook_config(&guard, ""),
    )
    .unwrap();
    std::fs::create_dir(home.workspace().join("protected")).unwrap();
    let (lines, stderr) = run(&home, vec![write("protected/secret.txt"), done()]);
    assert_eq!(statuses(&lines), ["success"], "{stderr}");
    assert!(home.workspace().join("protected/secret.txt").exists());
    let warned = stderr.contains("`hooks` is ignored")
        || lines
            .iter()
            .any(|line| line.to_string().contains("`hooks` is ignored"));
    assert!(warned, "{stderr}");
    assert!(of(&lines, "extension_registered").is_empty());
}

#[test]
fn a_bad_hook_setting_is_a_startup_error_naming_it() {
    let home = Home::new();
    user_config(
        &home,
        "[[hooks]]\nevent = \"before_tool\"\ncommand = [\"true\"]\n",
    );
    let script = home.script("script", json!({ "turns": [done()] }));
    let output = home.run_script(&["run", "go"], &script, &[]);
    assert_eq!(output.status.code(), Some(2));
    // The startup error line (stdout, in stream-json).
    let said =
        String::from_utf8(output.stdout).unwrap() + &String::from_utf8(output.stderr).unwrap();
    assert!(said.contains("startup_error"), "{said}");
    assert!(said.contains("[[hooks]] #1"), "{said}");
    assert!(said.contains("`event` must be one of"), "{said}");
}

// ---- from the attack review ---------------------------------------------------------

#[test]
fn a_block_is_kept_when_the_hook_leaves_a_child_holding_its_stdout() {
    let home = Home::new();
    let pids = home.path().join("pids");
    let guard = script(
        &home,
        "bg.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\nsleep 300 &\necho $! > {}\necho '{{\"outcome\":\"block\",\"message\":\"no writes\"}}'\n",
            pids.display()
        ),
    );
    user_config(&home, &hook_config(&guard, "timeout_sec = 20\n"));
    let started = Instant::now();
    let (lines, stderr) = run(&home, vec![write("a.txt"), done()]);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the run did not wait for the hook's child"
    );
    assert_eq!(statuses(&lines), ["error"], "{stderr}");
    assert!(!home.workspace().join("a.txt").exists());
    assert!(of(&lines, "hook_failed").is_empty());
    // The child was killed with the hook's group.
    std::thread::sleep(Duration::from_millis(300));
    let pid = std::fs::read_to_string(&pids).unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    assert!(stat.is_empty() || stat.contains(") Z "), "{stat}");
}

#[test]
fn hooks_in_a_config_file_inside_the_workspace_are_ignored() {
    let home = Home::new();
    let guard = script(&home, "guard.sh", GUARD);
    let inside = home.workspace().join("keel.toml");
    std::fs::write(&inside, hook_config(&guard, "")).unwrap();
    std::fs::create_dir(home.workspace().join("protected")).unwrap();
    let script = home.script(
        "script",
        json!({ "turns": [write("protected/secret.txt"), done()] }),
    );
    let config = inside.display().to_string();
    let output = home.run_script(
        &["run", "--mode", "auto", "--config", &config, "go"],
        &script,
        &[],
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("`hooks` is ignored"), "{stderr}");
    assert!(stderr.contains("inside the workspace"), "{stderr}");
    assert!(home.workspace().join("protected/secret.txt").exists());
}

#[test]
fn a_warning_quoting_the_repository_cannot_reach_the_terminal_raw() {
    let home = Home::new();
    std::fs::create_dir_all(home.workspace().join(".keel")).unwrap();
    std::fs::write(
        home.workspace().join(".keel/config.toml"),
        "\"x\\u001b]0;PWNED\\u0007\\r\\nkeel: fake line\" = 1\n",
    )
    .unwrap();
    let (_, stderr) = run(&home, vec![done()]);
    assert!(
        stderr.contains("project_key_ignored") || stderr.contains("is ignored"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(!stderr.contains("\nkeel: fake line"), "{stderr:?}");
}
