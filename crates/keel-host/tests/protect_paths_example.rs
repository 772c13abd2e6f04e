//! The extension example (`examples/protect_paths.rs`, docs/extensions.md)
//! does what it says: its hook blocks the write under `vendor/` and lets
//! the other through, its tool answers, and its entry kind records each
//! judgement in the session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/protect_paths.rs"]
mod protect_paths;

use keel_protocol::RunState;
use serde_json::json;

#[test]
fn the_extension_example_blocks_the_protected_write_and_records_it() {
    protect_paths::main().expect("the example's run settles and vendor/ stays untouched");
}

#[tokio::test]
async fn the_audit_entries_name_each_judgement() {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("vendor")).unwrap();
    let (result, audit) = protect_paths::run_in(project.path()).await.unwrap();
    assert_eq!(result.state, RunState::Settled);
    assert_eq!(
        audit,
        [
            json!({"tool": "write", "path": "vendor/lib.txt", "blocked": true}),
            json!({"tool": "write", "path": "notes.txt", "blocked": false}),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("notes.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert!(!project.path().join("vendor/lib.txt").exists());
}
