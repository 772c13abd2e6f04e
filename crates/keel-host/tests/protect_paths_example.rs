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

#[tokio::test]
async fn the_guard_judges_the_path_as_it_resolves_not_as_it_is_spelled() {
    use std::sync::Arc;

    use keel_host::{HostConfig, ProviderChoice};
    use keel_kernel::RunSpec;
    use keel_protocol::{PermissionMode, RunEventKind};

    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("vendor")).unwrap();
    std::os::unix::fs::symlink(project.path().join("vendor"), project.path().join("alias"))
        .unwrap();
    let absolute = project.path().join("vendor/c.txt").display().to_string();
    let spellings = [
        "./vendor/a.txt",
        "sub/../vendor/b.txt",
        &absolute,
        "alias/d.txt",
    ];
    let mut turns: Vec<serde_json::Value> = spellings
        .iter()
        .map(|path| json!({"content": [{"type": "tool_call", "name": "write", "arguments": {"path": path, "content": "x"}}]}))
        .collect();
    turns.push(json!({"content": [{"type": "text", "text": "done"}]}));
    let script = keel_provider::Script::from_json(&json!({ "turns": turns }).to_string()).unwrap();
    let mut config = HostConfig::new(ProviderChoice::Script {
        script,
        model: None,
    })
    .workspace(project.path());
    config.extensions.push(protect_paths::extension("vendor"));
    let kernel = config
        .kernel(Arc::new(keel_session::MemoryStore::new()))
        .unwrap();
    let run = kernel
        .create_run(RunSpec::new("go").mode(PermissionMode::Full))
        .await
        .unwrap();
    let mut events = run.events().unwrap();
    let mut blocked = 0;
    while let Some(event) = events.next().await {
        if let RunEventKind::HookBlocked { .. } = event.kind {
            blocked += 1;
        }
    }
    let written: Vec<_> = walk(project.path());
    assert_eq!(blocked, spellings.len(), "{written:?}");
    assert_eq!(
        std::fs::read_dir(project.path().join("vendor"))
            .unwrap()
            .count(),
        0
    );
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        found.push(path.display().to_string());
        if path.is_dir() && !path.is_symlink() {
            found.extend(walk(&path));
        }
    }
    found
}

#[tokio::test]
async fn count_lines_refuses_a_link_out_of_the_workspace_and_a_fifo() {
    use keel_tools::{Tool, ToolContext, Workspace};

    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("two.txt"), "a\nb\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", project.path().join("out")).unwrap();
    nix::unistd::mkfifo(&project.path().join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let workspace = std::sync::Arc::new(Workspace::new(project.path()).unwrap());
    let count = |path: &str| {
        let context = ToolContext::new("c", workspace.clone());
        protect_paths::CountLines.execute(json!({ "path": path }), context)
    };
    let counted = count("two.txt").await.unwrap();
    assert_eq!(
        counted.content,
        keel_tools::ToolOutput::text("two.txt: 2 lines").content
    );
    assert!(count("out").await.is_err(), "a symlink out is refused");
    // Refused at once, never blocking on the FIFO.
    let refused = tokio::time::timeout(std::time::Duration::from_secs(10), count("pipe"))
        .await
        .expect("the FIFO did not block the read");
    assert!(refused.is_err());
}
