//! `keel session prune` and `[sessions] retention` as processes, in an
//! isolated home: old sessions go with their journals; open, interrupted
//! and damaged sessions and the parents of kept forks stay.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use common::home::{Home, assert_success};

/// A run of `turns` in a new session (mode `full`, prompt `name`); its
/// exit code and session id.
fn run(home: &Home, name: &str, turns: Value, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let script = home.script(name, json!({ "turns": turns }));
    let output = home.run_script(&["run", "--mode", "full", name], &script, env);
    (output.status.code(), home.newest_id())
}

/// `keel session prune ARGS --output-format json`: the document.
fn prune(home: &Home, args: &[&str]) -> Value {
    home.json(&["session", "prune"], args)
}

fn text(answer: &str) -> Value {
    json!([{"content": [{"type": "text", "text": answer}]}])
}

fn ids_of(document: &Value, list: &str) -> Vec<String> {
    document[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_str().unwrap().to_owned())
        .collect()
}

fn reason(document: &Value, id: &str) -> String {
    document["kept"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["id"] == id)
        .map(|item| item["reason"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("{id} not kept: {document}"))
}

#[test]
fn prune_removes_old_sessions_with_their_journals_and_keeps_what_is_still_needed() {
    let home = Home::new();
    // A plain old session, and one whose bash call left a journal.
    let (_, plain) = run(&home, "plain", text("a"), &[]);
    let (_, journaled) = run(
        &home,
        "journaled",
        json!([
            {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "echo hi"}}]},
            {"content": [{"type": "text", "text": "ran"}]}
        ]),
        &[],
    );
    assert!(
        home.sessions()
            .join(format!("{journaled}.journal"))
            .is_dir()
    );
    // One a crash interrupted.
    let (code, interrupted) = run(
        &home,
        "interrupted",
        json!([
            {"content": [{"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "A"}}]},
            {"content": [{"type": "text", "text": "wrote"}]}
        ]),
        &[(keel_failpoint::ENV, keel_failpoint::AFTER_EFFECT_STARTED)],
    );
    assert_eq!(code, None, "killed by the failpoint");
    // A damaged one.
    let damaged = "01900000-0000-7000-8000-000000000000";
    std::fs::write(
        home.sessions().join(format!("{damaged}.jsonl")),
        "not a session\n",
    )
    .unwrap();
    // A parent whose fork is the newest session (kept by --keep 1).
    let (_, parent) = run(&home, "parent", text("p"), &[]);
    let forked = home
        .command(&["session", "fork", &parent, "--output-format", "json"])
        .arg(first_entry(
            &home.sessions().join(format!("{parent}.jsonl")),
        ))
        .output()
        .unwrap();
    assert_success(&forked);
    let fork = home.newest_id();
    assert_ne!(fork, parent);

    std::thread::sleep(Duration::from_millis(20));
    let dry = prune(&home, &["--older-than", "0s", "--keep", "1", "--dry-run"]);
    let mut would: Vec<String> = ids_of(&dry, "removed");
    would.sort();
    let mut expected = vec![plain.clone(), journaled.clone()];
    expected.sort();
    assert_eq!(would, expected, "{dry}");
    assert!(
        home.sessions().join(format!("{plain}.jsonl")).is_file(),
        "a dry run removes nothing"
    );

    let done = prune(&home, &["--older-than", "0s", "--keep", "1"]);
    let mut removed = ids_of(&done, "removed");
    removed.sort();
    assert_eq!(removed, expected, "{done}");
    assert_eq!(reason(&done, &interrupted), "interrupted");
    assert_eq!(reason(&done, &parent), "parent_of_kept");
    assert_eq!(reason(&done, damaged), "damaged");
    assert!(
        done["summary"]["freed_bytes"].as_u64().unwrap() > 0,
        "{done}"
    );
    for id in &expected {
        let left: Vec<String> = std::fs::read_dir(home.sessions())
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name.starts_with(id.as_str()))
            .collect();
        assert!(left.is_empty(), "{id} left {left:?}");
    }
    for id in [&interrupted, &parent, &fork] {
        assert!(
            home.sessions().join(format!("{id}.jsonl")).is_file(),
            "{id}"
        );
    }
    // The interrupted session still resumes.
    let resumed = home
        .command(&[
            "resume",
            &interrupted,
            "--output-format",
            "stream-json",
            "--mode",
            "full",
        ])
        .arg("--script")
        .arg(home.path().join("interrupted.json"))
        .output()
        .unwrap();
    assert_success(&resumed);
}

#[test]
fn a_session_a_run_holds_open_is_not_pruned() {
    let home = Home::new();
    let script = home.path().join("slow.json");
    std::fs::write(
        &script,
        json!({"turns": [{"delay_ms": 30000, "content": [{"type": "text", "text": "late"}]}]})
            .to_string(),
    )
    .unwrap();
    let mut running = home
        .command(&["run", "--output-format", "stream-json", "--script"])
        .arg(&script)
        .arg("slow")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = common::wait_until(Duration::from_secs(20), || {
        std::fs::read_dir(home.sessions()).is_ok_and(|dir| {
            dir.flatten().any(|entry| {
                std::fs::read_to_string(entry.path()).is_ok_and(|text| text.contains("run_start"))
            })
        })
    });
    assert!(started, "the run never started");
    let id = home.newest_id();
    let done = prune(&home, &["--older-than", "0s"]);
    running.kill().unwrap();
    running.wait().unwrap();
    assert_eq!(reason(&done, &id), "open", "{done}");
    assert!(home.sessions().join(format!("{id}.jsonl")).is_file());
}

#[test]
fn retention_in_the_users_config_prunes_and_the_project_layer_cannot_set_it() {
    let home = Home::new();
    let (_, old) = run(&home, "old", text("a"), &[]);
    // A project file that asks for retention is ignored with a warning.
    std::fs::create_dir(home.workspace().join(".keel")).unwrap();
    std::fs::write(
        home.workspace().join(".keel/config.toml"),
        "[sessions]\nretention = \"1s\"\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let script = home.path().join("old.json");
    let output = home
        .command(&["run", "--output-format", "stream-json", "--script"])
        .arg(&script)
        .arg("second")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`sessions` is ignored"), "{stderr}");
    assert!(
        home.sessions().join(format!("{old}.jsonl")).is_file(),
        "a project cannot prune"
    );
    let second = home.newest_id();

    // Without --older-than and without retention: a usage error.
    let refused = home.command(&["session", "prune"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--older-than"));

    // The user's retention is prune's default, and `keel run` applies it.
    std::fs::create_dir_all(home.path().join("config/keel")).unwrap();
    std::fs::write(
        home.path().join("config/keel/config.toml"),
        "[sessions]\nretention = \"1s\"\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let output = home
        .command(&["run", "--output-format", "stream-json", "--script"])
        .arg(&script)
        .arg("third")
        .output()
        .unwrap();
    assert_success(&output);
    let third = home.newest_id();
    assert!(
        !home.sessions().join(format!("{old}.jsonl")).exists(),
        "retention applied"
    );
    assert!(
        !home.sessions().join(format!("{second}.jsonl")).exists(),
        "retention applied"
    );
    assert!(
        home.sessions().join(format!("{third}.jsonl")).is_file(),
        "the run's own session stays"
    );
    assert!(home.sessions().join(".pruned").is_file());
}

/// The id of the first entry in a session file.
fn first_entry(file: &Path) -> String {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|line| {
            line.pointer("/r/entry/id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap()
}
