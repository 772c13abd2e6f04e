//! The user's permission rules (`[permissions] allow|ask|deny` in
//! config.toml) through `keel` as a process: precedence (deny wins, `full`
//! included; ask makes an allowed call a question; allow answers one), a
//! compound command allowed only when each simple command matches, a path
//! rule matched on the canonical path (a re-pointed symlink no longer
//! matches), the
//! project layer unable to add `allow` (a warning, and the call is still
//! asked), a rule that cannot be read is a startup error naming its key,
//! and `keel doctor` shows the rules (text and JSON).
//!
//! Runs use the scripted provider; stdin is empty, so every permission
//! request is denied (EOF means deny).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use serde_json::{Value, json};

fn call(tool: &str, arguments: Value) -> Value {
    json!({"content": [{"type": "tool_call", "name": tool, "arguments": arguments}]})
}

fn bash(command: &str) -> Value {
    call("bash", json!({ "command": command }))
}

fn done() -> Value {
    json!({"content": [{"type": "text", "text": "done"}]})
}

/// A home with `config` as the user's file and the workspace `ws`.
fn home(config: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("config/keel")).unwrap();
    std::fs::create_dir_all(home.path().join("ws")).unwrap();
    std::fs::write(home.path().join("config/keel/config.toml"), config).unwrap();
    home
}

/// What a run showed: its exit code, the events and stderr.
struct Ran {
    code: Option<i32>,
    lines: Vec<Value>,
    stderr: String,
}

impl Ran {
    /// The commands or paths asked about, in order.
    fn asked(&self) -> Vec<String> {
        self.of("permission_requested")
            .map(|line| line["arguments"].to_string())
            .collect()
    }

    /// Each call's status, in order.
    fn statuses(&self) -> Vec<String> {
        self.of("tool_execution_end")
            .map(|line| line["result"]["status"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The text of each error result, in order.
    fn errors(&self) -> Vec<String> {
        self.of("tool_execution_end")
            .filter(|line| line["result"]["status"] == "error")
            .map(|line| {
                line["result"]["error"]["message"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    fn of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.lines.iter().filter(move |line| line["type"] == kind)
    }
}

fn run(home: &Path, mode: &str, turns: Vec<Value>) -> Ran {
    let script = home.join("script.json");
    std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
    let script = script.display().to_string();
    let workspace = home.join("ws").display().to_string();
    let output = common::keel_plain(
        &[
            "run",
            "--workspace",
            &workspace,
            "--output-format",
            "stream-json",
            "--script",
            &script,
            "--mode",
            mode,
            "go",
        ],
        home,
        "",
    );
    Ran {
        code: output.status.code(),
        lines: String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

#[test]
fn deny_wins_ask_asks_allow_answers_and_a_project_cannot_allow() {
    if !common::sandbox_enforced("deny_wins_ask_asks_allow_answers_and_a_project_cannot_allow") {
        return;
    }
    let home = home(
        r#"
[permissions]
allow = ["write(notes/*)", "bash(echo *)"]
deny = ["bash(rm *)"]
"#,
    );
    std::fs::create_dir_all(home.path().join("ws/.keel")).unwrap();
    std::fs::write(
        home.path().join("ws/.keel/config.toml"),
        "[permissions]\nallow = [\"bash(touch *)\"]\nask = [\"read(private.txt)\"]\n",
    )
    .unwrap();
    std::fs::write(home.path().join("ws/private.txt"), "p").unwrap();
    let ran = run(
        home.path(),
        "ask",
        vec![
            call("write", json!({"path": "notes/a.txt", "content": "x"})),
            bash("echo one > one.txt && echo two >> one.txt"),
            bash("echo three >> one.txt; touch made.txt"),
            bash("touch made.txt"),
            call("read", json!({"path": "private.txt"})),
            bash("rm -f notes/a.txt"),
            done(),
        ],
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    // The project's `allow` is ignored, with a warning naming the key.
    assert!(
        ran.stderr.contains("keel: warning:")
            && ran.stderr.contains("`permissions.allow`")
            && ran.stderr.contains(".keel/config.toml"),
        "{}",
        ran.stderr
    );
    let asked = ran.asked();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert!(asked[0].contains("touch made.txt"), "{asked:?}");
    assert!(asked[1].contains("touch made.txt"), "{asked:?}");
    assert!(asked[2].contains("private.txt"), "{asked:?}");
    assert_eq!(
        ran.statuses(),
        ["success", "success", "error", "error", "error", "error"]
    );
    assert_eq!(
        std::fs::read_to_string(home.path().join("ws/one.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert!(!home.path().join("ws/made.txt").exists());
    assert!(home.path().join("ws/notes/a.txt").exists());
    let errors = ran.errors();
    assert!(
        errors
            .last()
            .unwrap()
            .contains("denied by rule deny[0] \"bash(rm *)\""),
        "{errors:?}"
    );
}

#[test]
fn a_path_rule_follows_the_canonical_path_and_not_a_repointed_symlink() {
    let base = tempfile::tempdir().unwrap();
    let outside = base.path().canonicalize().unwrap();
    std::fs::write(outside.join("allowed.txt"), "ALLOWED-CONTENTS").unwrap();
    std::fs::write(outside.join("other.txt"), "OTHER-CONTENTS").unwrap();
    let home = home(&format!(
        "[permissions]\nallow = [\"read({})\"]\n",
        outside.join("allowed.txt").display()
    ));
    let link = home.path().join("ws/link");
    std::os::unix::fs::symlink(outside.join("allowed.txt"), &link).unwrap();
    let read_link = || vec![call("read", json!({"path": "link"})), done()];
    let ran = run(home.path(), "auto", read_link());
    assert!(ran.asked().is_empty(), "{:?}", ran.asked());
    assert_eq!(ran.statuses(), ["success"]);
    assert!(
        ran.lines
            .iter()
            .any(|line| line.to_string().contains("ALLOWED-CONTENTS")),
        "the read went through the link"
    );
    // Re-pointed at another file outside: the rule no longer matches.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(outside.join("other.txt"), &link).unwrap();
    let ran = run(home.path(), "auto", read_link());
    assert_eq!(ran.asked().len(), 1, "{:?}", ran.asked());
    assert_eq!(ran.statuses(), ["error"]);
    assert!(
        !ran.lines
            .iter()
            .any(|line| line.to_string().contains("OTHER-CONTENTS")),
        "the other file was not read"
    );
}

#[test]
fn full_mode_with_a_deny_rule_denies() {
    let home = home("[permissions]\ndeny = [\"write(*.env)\", \"bash(curl *)\"]\n");
    let ran = run(
        home.path(),
        "full",
        vec![
            call("write", json!({"path": "prod.env", "content": "KEY=1"})),
            bash("true && curl -s http://127.0.0.1:9/"),
            call("write", json!({"path": "fine.txt", "content": "ok"})),
            done(),
        ],
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(ran.asked().is_empty());
    assert_eq!(ran.statuses(), ["error", "error", "success"]);
    assert!(!home.path().join("ws/prod.env").exists());
    let errors = ran.errors();
    assert!(errors[0].contains("deny[0] \"write(*.env)\""), "{errors:?}");
    assert!(errors[1].contains("deny[1] \"bash(curl *)\""), "{errors:?}");
}

#[test]
fn a_rule_that_cannot_be_read_is_a_startup_error_naming_its_key() {
    let home = home("[profiles.p.permissions]\ndeny = [\"bash(rm *)\", \"bash(echo 'x)\"]\n");
    let ran = run(home.path(), "ask", vec![done()]);
    assert_ne!(ran.code, Some(0));
    let shown = format!("{}{:?}", ran.stderr, ran.lines);
    // Profiles are read (and checked) whether or not they are selected.
    assert!(
        shown.contains("permissions.deny[1]") && shown.contains("is not closed"),
        "{shown}"
    );
}

#[test]
fn doctor_shows_the_rules() {
    let home = home(
        "[permissions]\nallow = [\"bash(cargo test *)\"]\nask = [\"mcp__github__*\"]\n\
         deny = [\"read(~/.ssh/**)\"]\n",
    );
    let json = common::keel_plain(&["doctor", "--output-format", "json"], home.path(), "");
    let report: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        report["config"]["permissions"],
        json!({
            "allow": ["bash(cargo test *)"],
            "ask": ["mcp__github__*"],
            "deny": ["read(~/.ssh/**)"],
        }),
        "{report}"
    );
    let text = common::keel_plain(&["doctor"], home.path(), "");
    let text = String::from_utf8(text.stdout).unwrap();
    for line in [
        "permissions:     allow[0] \"bash(cargo test *)\"",
        "permissions:     ask[0] \"mcp__github__*\"",
        "permissions:     deny[0] \"read(~/.ssh/**)\"",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
}
