//! `keel run --session/--fork` and `keel session …` as processes, on a
//! session directory of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::keel;
use serde_json::Value;

/// Two runs' worth of turns: the second run must see the first one's history.
const SCRIPT: &str = r#"{"turns":[
  {"expect":{"messages":1},"content":[{"type":"text","text":"first answer"}]},
  {"expect":{"messages":3,"last_user_contains":"again"},"content":[{"type":"text","text":"second answer"}]}]}"#;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new(script: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("script.json"), script).unwrap();
        std::fs::create_dir(dir.path().join("sessions")).unwrap();
        Self { dir }
    }

    fn sessions(&self) -> String {
        self.dir.path().join("sessions").display().to_string()
    }

    fn run(&self, extra: &[&str], prompt: &str) -> common::Output {
        let script = self.dir.path().join("script.json").display().to_string();
        let workspace = self.dir.path().display().to_string();
        let sessions = self.sessions();
        let mut args = vec![
            "run",
            "--script",
            &script,
            "--workspace",
            &workspace,
            "--session-dir",
            &sessions,
        ];
        args.extend_from_slice(extra);
        args.push(prompt);
        keel(&args, None, "")
    }

    fn session(&self, args: &[&str]) -> (i32, String) {
        let sessions = self.sessions();
        let mut all = vec!["session"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--session-dir", &sessions]);
        let output = std::process::Command::new(assert_cmd::cargo::cargo_bin!("keel"))
            .args(&all)
            .output()
            .unwrap();
        (
            output.status.code().unwrap(),
            String::from_utf8(output.stdout).unwrap(),
        )
    }
}

fn session_line(output: &common::Output) -> &Value {
    &output
        .extras
        .iter()
        .find(|line| line.get("session").is_some())
        .expect("a session line")["session"]
}

#[test]
fn a_run_is_stored_and_a_second_run_continues_it() {
    let fixture = Fixture::new(SCRIPT);
    let first = fixture.run(&[], "hello");
    assert_eq!(first.code, 0, "{:?}", first.result);
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();
    assert!(std::path::Path::new(session_line(&first)["path"].as_str().unwrap()).is_file());

    // A second process continues on the active leaf (the script checks the history).
    let mut script_two = serde_json::from_str::<Value>(SCRIPT).unwrap();
    script_two["turns"].as_array_mut().unwrap().remove(0);
    std::fs::write(
        fixture.dir.path().join("script.json"),
        script_two.to_string(),
    )
    .unwrap();
    let second = fixture.run(&["--session", &id[..13]], "hello again");
    assert_eq!(second.code, 0, "{:?}", second.result);
    assert_eq!(
        second.result["session_id"],
        id.as_str(),
        "a unique prefix names the session"
    );
    assert!(second.events.iter().any(|e| e["type"] == "session_resumed"));
    assert!(
        !second
            .events
            .iter()
            .any(|e| e["type"] == "session_entry" && e["kind"] == "configuration"),
        "an unchanged configuration is not recorded again"
    );

    let (code, listing) = fixture.session(&["list"]);
    assert_eq!(code, 0);
    let sessions: Vec<Value> = listing
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["title"], "hello");
    assert_eq!(sessions[0]["entries"], 5);
}

#[test]
fn fork_tree_show_and_export() {
    let fixture = Fixture::new(SCRIPT);
    let first = fixture.run(&[], "hello");
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();

    let (code, shown) = fixture.session(&["show", &id]);
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    let branch = shown["branch"].as_array().unwrap();
    assert_eq!(branch.len(), 3, "configuration, user, assistant");
    let user_entry = branch[1]["id"].as_str().unwrap().to_owned();

    // Fork at the user message (by the short suffix the tree shows) and continue there.
    let mut script = serde_json::from_str::<Value>(SCRIPT).unwrap();
    script["turns"] = serde_json::json!([{"expect": {"messages": 2, "last_user_contains": "other"}, "content": [{"type": "text", "text": "forked answer"}]}]);
    std::fs::write(fixture.dir.path().join("script.json"), script.to_string()).unwrap();
    let short = &user_entry[user_entry.len() - 8..];
    let forked = fixture.run(&["--session", &id, "--fork", short], "the other way");
    assert_eq!(forked.code, 0, "{:?}", forked.result);
    let fork_id = session_line(&forked)["id"].as_str().unwrap().to_owned();
    assert_ne!(fork_id, id);

    let (_, listing) = fixture.session(&["list"]);
    let fork_info: Value = listing
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|s| s["id"] == fork_id.as_str())
        .unwrap();
    assert_eq!(fork_info["parent_session"], id.as_str());

    let (code, tree) = fixture.session(&["tree", &fork_id]);
    assert_eq!(code, 0);
    assert!(
        tree.contains("← leaf") && tree.contains("user: the other way"),
        "{tree}"
    );
    assert!(
        tree.lines().all(|line| line.starts_with('*')),
        "a linear fork is all active: {tree}"
    );

    let export_path = fixture.dir.path().join("export.json");
    let (code, _) = fixture.session(&["export", &id, "--output", export_path.to_str().unwrap()]);
    assert_eq!(code, 0);
    let exported: Value =
        serde_json::from_str(&std::fs::read_to_string(&export_path).unwrap()).unwrap();
    assert_eq!(exported["id"], id.as_str());
    assert_eq!(exported["entries"].as_array().unwrap().len(), 3);

    let (code, forked_again) = fixture.session(&["fork", &id, short]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&forked_again).unwrap()["session"]["parent_session"],
        id.as_str()
    );
}

#[test]
fn bad_session_arguments_are_startup_errors() {
    let fixture = Fixture::new(SCRIPT);
    let missing = fixture.run(&["--session", "no-such-session"], "hi");
    assert_eq!(missing.code, 2);
    assert_eq!(missing.startup_error.unwrap()["code"], "session_not_found");
    let first = fixture.run(&[], "hello");
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();
    let bad_entry = fixture.run(&["--session", &id, "--fork", "zzzz"], "hi");
    assert_eq!(bad_entry.startup_error.unwrap()["code"], "entry_not_found");
    let hostile = fixture.run(&["--session", "../../etc/passwd"], "hi");
    assert_eq!(hostile.code, 2);

    // A damaged file is refused with the line, and left as it was.
    let path = fixture
        .dir
        .path()
        .join("sessions")
        .join(format!("{id}.jsonl"));
    let mut bytes = std::fs::read(&path).unwrap();
    let second_line = bytes.iter().position(|&b| b == b'\n').unwrap() + 5;
    bytes[second_line] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let damaged = fixture.run(&["--session", &id], "hi");
    let error = damaged.startup_error.unwrap();
    assert_eq!(error["code"], "session_corrupt", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains(":2:"),
        "{error}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn the_session_tree_demo_branches_and_forks() {
    let output = std::process::Command::new(assert_cmd::cargo::cargo_bin!("keel"))
        .args(["demo", "session-tree", "--case", "success"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let results: Vec<&Value> = lines
        .iter()
        .filter_map(|l| l.get("result"))
        .filter(|r| l_is_result(r))
        .collect();
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r["state"] == "settled"));
    let trees: Vec<&Value> = lines.iter().filter_map(|l| l.get("tree")).collect();
    let original = trees[0]["lines"].as_array().unwrap();
    assert!(
        original
            .iter()
            .any(|l| l.as_str().unwrap().starts_with("├─")),
        "the original session branches"
    );
    assert!(
        original
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .contains("← leaf")
    );

    let output = std::process::Command::new(assert_cmd::cargo::cargo_bin!("keel"))
        .args(["demo", "session-tree", "--case", "invalid-entry"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let codes: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.get("session_error"))
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["invalid_entry", "session_locked"]);
    let counts = lines.iter().find_map(|l| l.get("entries")).unwrap();
    assert_eq!(
        counts["before"], counts["after"],
        "nothing stored was changed"
    );
}

fn l_is_result(value: &Value) -> bool {
    value.get("state").is_some()
}
