//! `.git` and `.keel` through `AgentKernel`: a `write` or `edit` into them has
//! scope `metadata`, so it asks in `auto` (and does not happen when the host
//! denies), is denied in `plan`, and happens once the host approves or in
//! `full` — judged by the file on disk, while the same calls on ordinary
//! paths run without asking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod one_call;

use std::path::Path;

use keel_protocol::{IntentScope, PermissionMode, PermissionResolution, ToolStatus};
use one_call::one_call;
use serde_json::{Value, json};

const HOOK: &str = "#!/bin/sh\ntouch /tmp/keel-should-not-exist\n";

/// What happened to the one call of a run: whether the host was asked,
/// with which scope, and the call's status.
struct Outcome {
    asked: Option<IntentScope>,
    status: ToolStatus,
}

async fn call(
    dir: &Path,
    mode: PermissionMode,
    tool: &str,
    arguments: Value,
    answer: PermissionResolution,
) -> Outcome {
    let called = one_call(dir, mode, tool, arguments, answer).await;
    Outcome {
        asked: called.asked.map(|(scope, _)| scope),
        status: called.result.status,
    }
}

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in [".git/hooks", ".keel", "src", "vendor/lib/.git"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    std::fs::write(dir.path().join(".git/config"), "[core]\n").unwrap();
    std::fs::write(dir.path().join("src/a.txt"), "a\n").unwrap();
    dir
}

/// The protected targets, each as a write and as an edit of `.git/config`.
fn protected_calls() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            ".git/hooks/pre-commit",
            "write",
            json!({"path": ".git/hooks/pre-commit", "content": HOOK}),
        ),
        (
            ".keel/config.toml",
            "write",
            json!({"path": ".keel/config.toml", "content": "x"}),
        ),
        (
            "vendor/lib/.git/config",
            "write",
            json!({"path": "vendor/lib/.git/config", "content": "x"}),
        ),
        (
            ".git/config",
            "edit",
            json!({"path": ".git/config", "edits": [{"old_text": "[core]", "new_text": "[core]\n\tfsmonitor = x"}]}),
        ),
    ]
}

fn untouched(dir: &Path, target: &str) -> bool {
    let content = std::fs::read_to_string(dir.join(target)).unwrap_or_default();
    content.is_empty() || content == "[core]\n"
}

#[tokio::test]
async fn writes_into_git_and_keel_ask_in_auto_and_do_nothing_when_denied() {
    for (target, tool, arguments) in protected_calls() {
        let dir = setup();
        let outcome = call(
            dir.path(),
            PermissionMode::Auto,
            tool,
            arguments,
            PermissionResolution::Denied,
        )
        .await;
        assert_eq!(outcome.asked, Some(IntentScope::Metadata), "{target}");
        assert_eq!(outcome.status, ToolStatus::Error, "{target}");
        assert!(untouched(dir.path(), target), "{target} was written");
    }
}

#[tokio::test]
async fn writes_into_git_and_keel_are_denied_in_plan_without_asking() {
    for (target, tool, arguments) in protected_calls() {
        let dir = setup();
        let outcome = call(
            dir.path(),
            PermissionMode::Plan,
            tool,
            arguments,
            PermissionResolution::Approved,
        )
        .await;
        assert_eq!(outcome.asked, None, "{target}");
        assert_eq!(outcome.status, ToolStatus::Error, "{target}");
        assert!(untouched(dir.path(), target), "{target} was written");
    }
}

#[tokio::test]
async fn an_approved_or_full_write_into_git_happens() {
    for (mode, asked) in [
        (PermissionMode::Auto, Some(IntentScope::Metadata)),
        (PermissionMode::Full, None),
    ] {
        for (target, tool, arguments) in protected_calls() {
            let dir = setup();
            let outcome = call(
                dir.path(),
                mode,
                tool,
                arguments,
                PermissionResolution::Approved,
            )
            .await;
            assert_eq!(outcome.asked, asked, "{target}");
            assert_eq!(outcome.status, ToolStatus::Success, "{target}");
            assert!(!untouched(dir.path(), target), "{target} was not written");
        }
    }
}

#[tokio::test]
async fn ordinary_paths_and_reads_of_git_do_not_ask() {
    let dir = setup();
    let calls = [
        ("write", json!({"path": "src/b.txt", "content": "b"})),
        (
            "edit",
            json!({"path": "src/a.txt", "edits": [{"old_text": "a", "new_text": "A"}]}),
        ),
        (
            "write",
            json!({"path": ".gitignore", "content": "target/\n"}),
        ),
        ("read", json!({"path": ".git/config"})),
    ];
    for (tool, arguments) in calls {
        let shown = arguments.to_string();
        let outcome = call(
            dir.path(),
            PermissionMode::Auto,
            tool,
            arguments,
            PermissionResolution::Denied,
        )
        .await;
        assert_eq!(outcome.asked, None, "{shown}");
        assert_eq!(outcome.status, ToolStatus::Success, "{shown}");
    }
}
