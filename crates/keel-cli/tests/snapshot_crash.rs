//! A run killed (SIGKILL, as a power cut) while its workspace snapshot's
//! objects are being named leaves no named object that is incomplete: each
//! object is durable before it has its name, so what the kill leaves is at
//! worst a temporary file. The session goes on, its next snapshot reuses
//! the objects already named, and a restore of it is byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use common::home::{Home, assert_success, final_result, text_turns};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Every regular file under `root`, relative path → bytes.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                let rel = entry.path().strip_prefix(root).unwrap().to_owned();
                out.insert(
                    rel.to_string_lossy().into_owned(),
                    std::fs::read(entry.path()).unwrap(),
                );
            }
        }
    }
    out
}

#[test]
fn a_run_killed_while_naming_snapshot_objects_leaves_no_incomplete_object() {
    const {
        assert!(
            keel_failpoint::ENABLED,
            "test builds of keel carry the failpoints"
        )
    };
    let home = Home::new();
    let ws = home.workspace();
    for i in 0..20 {
        std::fs::write(
            ws.join(format!("f{i:02}.txt")),
            format!("{i}\n").repeat(4000),
        )
        .unwrap();
    }
    let script = home.script("script", json!({"turns": text_turns("done")}));
    let killed = home.run_script(
        &["run", "hi"],
        &script,
        &[(keel_failpoint::ENV, "in_snapshot_naming:5")],
    );
    assert_eq!(killed.status.signal(), Some(9), "killed at the point");
    let first: Value =
        serde_json::from_slice(killed.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    let id = first["session_id"].as_str().unwrap().to_owned();

    let objects = home.sessions().join(format!("{id}.snapshots/objects"));
    let stored = files(&objects);
    let (temporary, named): (Vec<_>, Vec<_>) = stored
        .iter()
        .partition(|(name, _)| name.starts_with("tmp-"));
    assert_eq!(
        named.len(),
        5,
        "killed after the fifth name: {:?}",
        stored.keys()
    );
    assert!(
        !temporary.is_empty(),
        "the kill came before every object had its name"
    );
    for (name, bytes) in &named {
        let id = name.replace('/', "");
        assert_eq!(
            format!("{:x}", Sha256::digest(bytes)),
            id,
            "object {name} is complete under its name"
        );
    }

    // The session goes on; its next snapshot stands on the objects already
    // named, and restores byte for byte.
    let again = home.run_script(&["run", "--session", &id, "again"], &script, &[]);
    assert_success(&again);
    assert_eq!(final_result(&again)["session_id"], id.as_str());
    let restored = home.path().join("restored");
    let output = home
        .command(&["session", "restore", &id, "--into"])
        .arg(&restored)
        .output()
        .unwrap();
    assert_success(&output);
    assert_eq!(files(&restored), files(&ws));
    // The dead writer's temporary files are gone.
    let left: Vec<String> = files(&objects)
        .into_keys()
        .filter(|name| name.starts_with("tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
