//! Sessions and their workspace, as processes (issue 15): `--continue`
//! resumes the latest session of the current workspace, `session list`
//! shows the workspace and filters to the current one (`--all`,
//! `--workspace`), and `--session ID` from another workspace is refused
//! naming both unless `--workspace` says which one to use.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::keel;
use serde_json::{Value, json};

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "b", "c", "sessions"] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        Self { dir }
    }

    /// A workspace, as sessions record it (canonical).
    fn workspace(&self, name: &str) -> PathBuf {
        std::fs::canonicalize(self.dir.path().join(name)).unwrap()
    }

    /// `keel run` in workspace `cwd` with a one-turn script whose request
    /// must hold `messages` messages.
    fn run(&self, cwd: &str, messages: usize, extra: &[&str]) -> common::Output {
        let script = self
            .dir
            .path()
            .join(format!("script-{cwd}-{messages}.json"));
        let turns = json!({"turns": [
            {"expect": {"messages": messages}, "content": [{"type": "text", "text": "ok"}]}
        ]});
        std::fs::write(&script, turns.to_string()).unwrap();
        let sessions = self.dir.path().join("sessions");
        let mut args = vec![
            "run",
            "--output-format",
            "stream-json",
            "--script",
            script.to_str().unwrap(),
            "--session-dir",
            sessions.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.push("a task");
        keel(&args, Some(&self.workspace(cwd)), "")
    }

    /// `keel session list ARGS` in workspace `cwd`: the listed sessions.
    fn list(&self, cwd: &str, extra: &[&str]) -> Vec<Value> {
        let sessions = self.dir.path().join("sessions");
        let output = common::keel_command()
            .args([
                "session",
                "list",
                "--output-format",
                "stream-json",
                "--session-dir",
            ])
            .arg(&sessions)
            .args(extra)
            .current_dir(self.workspace(cwd))
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

fn session_of(output: &common::Output) -> String {
    assert_eq!(
        output.code, 0,
        "{:?} {:?}",
        output.startup_error, output.stderr
    );
    output.result["session_id"].as_str().unwrap().to_owned()
}

fn error_of(output: &common::Output) -> (String, String) {
    assert_eq!(output.code, 2, "{:?}", output.result);
    let error = output.startup_error.as_ref().expect("a startup error");
    (
        error["code"].as_str().unwrap().to_owned(),
        error["message"].as_str().unwrap().to_owned(),
    )
}

fn ids(listed: &[Value]) -> Vec<&str> {
    listed
        .iter()
        .map(|info| info["id"].as_str().unwrap())
        .collect()
}

#[test]
fn continue_resumes_the_latest_session_of_this_workspace() {
    let fixture = Fixture::new();
    let older = session_of(&fixture.run("a", 1, &[]));
    let newer = session_of(&fixture.run("a", 1, &[]));
    let elsewhere = session_of(&fixture.run("b", 1, &[]));
    assert_ne!(older, newer);

    // In a, the latest session of a — not b's, which is newer still.
    let continued = fixture.run("a", 3, &["--continue"]);
    assert_eq!(
        session_of(&continued),
        newer,
        "the history reached the model"
    );
    assert!(
        continued
            .events
            .iter()
            .any(|e| e["type"] == "session_resumed")
    );
    let again = fixture.run("b", 3, &["--continue"]);
    assert_eq!(session_of(&again), elsewhere);

    let (code, message) = error_of(&fixture.run("c", 1, &["--continue"]));
    assert_eq!(code, "no_session_to_continue");
    assert!(
        message.contains(&fixture.workspace("c").display().to_string()),
        "{message}"
    );
    let (code, _) = error_of(&fixture.run("a", 1, &["--continue", "--session", &older]));
    assert_eq!(code, "usage", "--continue and --session conflict");
    let (code, message) = error_of(&fixture.run("a", 1, &["--fork", "abc"]));
    assert_eq!(code, "usage");
    assert!(message.contains("--fork needs"), "{message}");
}

#[test]
fn session_list_shows_the_workspace_and_filters_to_it() {
    let fixture = Fixture::new();
    let first = session_of(&fixture.run("a", 1, &[]));
    let second = session_of(&fixture.run("b", 1, &[]));
    let listed = fixture.list("a", &[]);
    assert_eq!(ids(&listed), [first.as_str()]);
    assert_eq!(
        listed[0]["workspace"].as_str().map(Path::new),
        Some(fixture.workspace("a").as_path())
    );
    let all = fixture.list("a", &["--all"]);
    let mut every = ids(&all);
    every.sort_unstable();
    let mut both = [first.as_str(), second.as_str()];
    both.sort_unstable();
    assert_eq!(every, both);
    let of_b = fixture.list("c", &["--workspace", "../b"]);
    assert_eq!(ids(&of_b), [second.as_str()]);
    assert!(fixture.list("c", &[]).is_empty());
}

#[test]
fn a_session_from_another_workspace_needs_an_explicit_workspace() {
    let fixture = Fixture::new();
    let id = session_of(&fixture.run("a", 1, &[]));

    let (code, message) = error_of(&fixture.run("b", 3, &["--session", &id]));
    assert_eq!(code, "session_workspace");
    for workspace in ["a", "b"] {
        let path = fixture.workspace(workspace).display().to_string();
        assert!(message.contains(&path), "names {path}: {message}");
    }

    // Named explicitly, the other workspace is used; so is the session's own.
    let b = fixture.workspace("b").display().to_string();
    let moved = fixture.run("b", 3, &["--session", &id, "--workspace", &b]);
    assert_eq!(session_of(&moved), id);
    let a = fixture.workspace("a").display().to_string();
    let home = fixture.run("c", 5, &["--session", &id, "--workspace", &a]);
    assert_eq!(session_of(&home), id);
    // In its own workspace no flag is needed.
    assert_eq!(session_of(&fixture.run("a", 7, &["--session", &id])), id);
}
