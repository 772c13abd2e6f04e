//! Workspace snapshots as a user meets them, through `keel` as a process:
//! each run records the workspace at its start and end beside the session;
//! `keel session restore` writes one elsewhere, byte for byte with modes;
//! `keel rewind` puts code and conversation back together — files written
//! by `write`, `edit` and `bash` alike — and can itself be undone, leaving
//! a file changed outside the session alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::home::{Home, assert_success, final_result};
use serde_json::{Value, json};

/// Every regular file under `root` (`.`-prefixed ones too) with its mode
/// bits and bytes.
fn files(root: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                let rel = entry
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .display()
                    .to_string();
                let mode = meta.permissions().mode() & 0o777;
                out.insert(rel, (mode, std::fs::read(entry.path()).unwrap()));
            }
        }
    }
    out
}

/// The session's active branch (`session show`) as `(id, kind, entry)`
/// triples, each entry whole (`session export`).
fn branch(home: &Home, id: &str) -> Vec<(String, String, Value)> {
    let shown = home.json(&["session", "show"], &[id]);
    let exported = home.command(&["session", "export", id]).output().unwrap();
    let exported: Value = serde_json::from_slice(&exported.stdout).unwrap();
    let whole = |wanted: &str| {
        exported["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == wanted)
            .cloned()
            .unwrap()
    };
    shown["branch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let entry_id = e["id"].as_str().unwrap().to_owned();
            let entry = whole(&entry_id);
            (entry_id, e["kind"].as_str().unwrap().to_owned(), entry)
        })
        .collect()
}

/// How many objects the session's snapshot store holds.
fn objects(home: &Home, id: &str) -> usize {
    let dir = home.sessions().join(format!("{id}.snapshots/objects"));
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|fan| std::fs::read_dir(fan.path()).unwrap().count())
        .sum()
}

#[test]
fn rewind_puts_back_write_edit_and_bash_changes_and_can_be_undone() {
    let home = Home::new();
    let ws = home.workspace();
    std::fs::write(ws.join("edit_me.txt"), "old\n").unwrap();
    std::fs::create_dir(ws.join("bin")).unwrap();
    std::fs::write(ws.join("bin/tool.sh"), "#!/bin/sh\necho tool\n").unwrap();
    std::fs::set_permissions(ws.join("bin/tool.sh"), PermissionsExt::from_mode(0o750)).unwrap();
    std::fs::write(ws.join("data.bin"), [0u8, 159, 146, 150, 255]).unwrap();
    std::os::unix::fs::symlink("edit_me.txt", ws.join("link")).unwrap();
    let start = files(&ws);
    let script = home.script(
        "change",
        json!({"turns": [
            {"content": [
                {"type": "tool_call", "name": "write", "arguments": {"path": "written.txt", "content": "new file\n"}},
                {"type": "tool_call", "name": "edit", "arguments": {"path": "edit_me.txt", "edits": [{"old_text": "old", "new_text": "new"}]}},
                {"type": "tool_call", "name": "bash", "arguments": {"command": "mkdir -p out && printf made > out/by_bash.txt"}}
            ]},
            {"content": [{"type": "text", "text": "done"}]}
        ]}),
    );
    let run = home.run_script(&["run", "--mode", "auto", "change things"], &script, &[]);
    assert_success(&run);
    let id = final_result(&run)["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let after_run = files(&ws);
    assert_eq!(after_run["out/by_bash.txt"].1, b"made");

    // The run's start and end are recorded, in the same groups as its
    // `run_start` and `run_end`.
    let entries = branch(&home, &id);
    let kinds: Vec<&str> = entries.iter().map(|(_, kind, _)| kind.as_str()).collect();
    let start_at = kinds.iter().position(|k| *k == "run_start").unwrap();
    assert_eq!(kinds[start_at - 1], "workspace_snapshot", "{kinds:?}");
    assert_eq!(entries[start_at - 1].2["snapshot"]["reason"], "run_start");
    assert_eq!(
        entries[start_at - 1].2["snapshot"]["files"],
        4,
        "{:?}",
        entries[start_at - 1].2
    );
    assert_eq!(&kinds[kinds.len() - 2..], ["workspace_snapshot", "run_end"]);
    let run_start = entries[start_at].0.clone();

    // A restore at the run's start reproduces the workspace byte for byte.
    let restored = home.path().join("restored");
    let output = home
        .command(&["session", "restore", &id[..8], "--at", &run_start, "--into"])
        .arg(&restored)
        .output()
        .unwrap();
    assert_success(&output);
    assert_eq!(files(&restored), start);
    assert_eq!(
        std::fs::read_link(restored.join("link")).unwrap(),
        Path::new("edit_me.txt")
    );
    // Never into a directory that holds something.
    let output = home
        .command(&["session", "restore", &id, "--into"])
        .arg(&restored)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("directory_not_empty"));

    // Rewind to the run's first entry: all three changes go back, and the
    // leaf moves to before the run.
    let rewound = home.json(&["rewind"], &[&id, "--to", &run_start]);
    assert_eq!(files(&ws), start, "{rewound}");
    assert!(!ws.join("out").exists(), "the directory bash made goes too");
    assert_eq!(rewound["written"]["conflicts"], json!([]));
    let leaf_branch = branch(&home, &id);
    assert!(
        !leaf_branch
            .iter()
            .any(|(_, kind, _)| kind == "message" || kind == "run_start"),
        "the conversation is back before the run: {leaf_branch:?}"
    );
    let last = &leaf_branch.last().unwrap().2;
    assert_eq!(last["snapshot"]["reason"], "rewind");
    let undo = rewound["undo_entry_id"].as_str().unwrap().to_owned();
    assert_eq!(last["snapshot"]["undo_entry_id"], undo.as_str());

    // Changed outside the session in between: reported, never overwritten.
    std::fs::write(ws.join("edit_me.txt"), "the user's\n").unwrap();
    let output = home
        .command(&["rewind", &id, "--to", &undo, "--output-format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let undone: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(undone["written"]["conflicts"], json!(["edit_me.txt"]));
    let now = files(&ws);
    assert_eq!(now["edit_me.txt"].1, b"the user's\n");
    assert_eq!(now["written.txt"], after_run["written.txt"]);
    assert_eq!(now["out/by_bash.txt"], after_run["out/by_bash.txt"]);
    // The undo went back to the conversation as the run left it.
    let undone_branch = branch(&home, &id);
    assert!(undone_branch.iter().any(|(_, kind, _)| kind == "run_end"));

    // A text run over the unchanged workspace adds no object: both of its
    // snapshots are the one already stored.
    let before = objects(&home, &id);
    let again = home.script("again", json!({"turns": common::home::text_turns("ok")}));
    let output = home.run_script(&["resume", &id, "again"], &again, &[]);
    assert_success(&output);
    assert_eq!(objects(&home, &id), before);
    let last_start = branch(&home, &id)
        .into_iter()
        .rev()
        .find(|(_, kind, e)| kind == "workspace_snapshot" && e["snapshot"]["reason"] == "run_start")
        .unwrap();
    assert_eq!(
        last_start.2["snapshot"]["new_bytes"], 0,
        "{:?}",
        last_start.2
    );
}

#[test]
fn rewind_refuses_what_it_cannot_do_and_changes_nothing() {
    let home = Home::new();
    let ws = home.workspace();
    std::fs::write(ws.join("f.txt"), "one\n").unwrap();
    let script = home.script("s", json!({"turns": common::home::text_turns("hi")}));
    let run = home.run_script(&["run", "hello"], &script, &[]);
    let id = final_result(&run)["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = std::fs::read(home.sessions().join(format!("{id}.jsonl"))).unwrap();
    for (args, code) in [
        (
            vec!["rewind", &id, "--to", "no-such-entry"],
            "entry_not_found",
        ),
        (
            vec!["rewind", "no-such-session", "--to", "x"],
            "session_not_found",
        ),
    ] {
        let output = home.command(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(code), "{args:?}: {stderr}");
    }
    // The session's first run has nothing before it but its configuration:
    // rewinding to the configuration entry works, to nothing earlier does not.
    let entries = branch(&home, &id);
    assert_eq!(entries[0].1, "configuration");
    assert_eq!(
        std::fs::read(home.sessions().join(format!("{id}.jsonl"))).unwrap(),
        before,
        "a refused rewind writes nothing"
    );
    std::fs::write(ws.join("f.txt"), "two\n").unwrap();
    let output = home
        .command(&["rewind", &id, "--to", &entries[0].0])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "no snapshot at the configuration"
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("no_snapshot"));
    assert_eq!(std::fs::read(ws.join("f.txt")).unwrap(), b"two\n");

    // A run resumed in another workspace records its snapshots there: a
    // rewind of the session's own workspace to them is refused.
    let other = home.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let output = home.run_script(
        &[
            "resume",
            &id,
            "--workspace",
            other.to_str().unwrap(),
            "elsewhere",
        ],
        &script,
        &[],
    );
    assert_success(&output);
    let elsewhere = branch(&home, &id)
        .into_iter()
        .rev()
        .find(|(_, kind, e)| kind == "workspace_snapshot" && e["snapshot"]["reason"] == "run_start")
        .unwrap();
    let output = home
        .command(&["rewind", &id, "--to", &elsewhere.0])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("workspace_mismatch"));
    assert_eq!(std::fs::read(ws.join("f.txt")).unwrap(), b"two\n");
}

#[test]
fn snapshots_can_be_turned_off_in_the_users_configuration() {
    let home = Home::new();
    std::fs::create_dir_all(home.path().join("config/keel")).unwrap();
    std::fs::write(
        home.path().join("config/keel/config.toml"),
        "[sessions]\nsnapshots = false\n",
    )
    .unwrap();
    std::fs::write(home.workspace().join("f.txt"), "one\n").unwrap();
    let script = home.script("s", json!({"turns": common::home::text_turns("hi")}));
    let run = home.run_script(&["run", "hello"], &script, &[]);
    assert_success(&run);
    let id = final_result(&run)["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!home.sessions().join(format!("{id}.snapshots")).exists());
    assert!(
        !branch(&home, &id)
            .iter()
            .any(|(_, kind, _)| kind == "workspace_snapshot"),
        "no snapshot entry"
    );
}
