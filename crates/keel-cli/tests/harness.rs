//! The tests' own rule: every test starts `keel` through the one harness,
//! `common::keel_command` (HOME and the XDG directories never the
//! developer's, the environment that changes `keel` scrubbed), not with a
//! `Command` of its own. A source check, so that a new test file cannot
//! quietly read a developer's real configuration.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_test_starts_keel_through_the_shared_harness() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let harness = tests.join("common").join("mod.rs");
    let mut files = Vec::new();
    sources(&tests, &mut files);
    assert!(files.len() > 20, "the test sources were not found");
    // Built from parts so that this file does not match itself.
    let direct = format!(
        "Command::new({}!(\"keel\"))",
        "assert_cmd::cargo::cargo_bin"
    );
    let mut offenders = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let count = text.matches(&direct).count();
        let allowed = usize::from(*file == harness);
        if count != allowed {
            offenders.push(format!("{} ({count})", file.display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "start keel with common::keel_command (or isolated_keel, Home::command), \
         not a Command of its own: {offenders:?}"
    );
}
