//! `git` through `AgentKernel` in a repository: reading git runs without
//! asking; `git commit` (and any command writing `.git`) has scope
//! `metadata`, so it asks in `auto`, is denied in `plan`, leaves `HEAD` as
//! it was when denied, and — approved — runs still sandboxed, with just
//! the repository writable, and lands. Judged by the repository on disk.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod one_call;

use std::path::Path;
use std::process::Command;

use keel_protocol::{IntentScope, PermissionMode, PermissionResolution, ToolStatus};
use one_call::one_call;
use serde_json::json;

/// What happened to the one `bash` call of a run.
struct Outcome {
    /// The scope and reason of the permission request, if any.
    asked: Option<(IntentScope, String)>,
    status: ToolStatus,
    output: String,
}

async fn bash(
    dir: &Path,
    mode: PermissionMode,
    command: &str,
    answer: PermissionResolution,
) -> Outcome {
    let called = one_call(dir, mode, "bash", json!({"command": command}), answer).await;
    Outcome {
        asked: called.asked,
        status: called.result.status,
        output: serde_json::to_string(&called.result.content).unwrap(),
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=U", "-c", "user.email=u@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    git(dir.path(), &["init", "-q"]);
    git(dir.path(), &["add", "a.txt"]);
    git(dir.path(), &["commit", "-q", "-m", "start"]);
    dir
}

const COMMIT: &str =
    "git -c user.name=M -c user.email=m@example.com commit -q --allow-empty -m by-the-model";

#[tokio::test]
async fn reading_git_runs_without_asking() {
    let dir = repository();
    for mode in [PermissionMode::Auto, PermissionMode::Plan] {
        let outcome = bash(
            dir.path(),
            mode,
            "git status --short && git log --oneline && git diff",
            PermissionResolution::Denied,
        )
        .await;
        assert!(outcome.asked.is_none(), "{mode:?}");
        assert_eq!(outcome.status, ToolStatus::Success, "{}", outcome.output);
        assert!(outcome.output.contains("start"), "{}", outcome.output);
    }
}

#[tokio::test]
async fn git_commit_asks_in_auto_and_does_nothing_when_denied() {
    let dir = repository();
    let head = git(dir.path(), &["rev-parse", "HEAD"]);
    let outcome = bash(
        dir.path(),
        PermissionMode::Auto,
        COMMIT,
        PermissionResolution::Denied,
    )
    .await;
    let (scope, reason) = outcome.asked.unwrap();
    assert_eq!(scope, IntentScope::Metadata);
    assert!(
        reason.contains("`git commit` writes the repository's metadata"),
        "{reason}"
    );
    assert!(
        reason.contains("sandboxed with `.git`/`.keel` writable"),
        "{reason}"
    );
    assert_eq!(outcome.status, ToolStatus::Error);
    assert_eq!(git(dir.path(), &["rev-parse", "HEAD"]), head);
}

#[tokio::test]
async fn git_commit_is_denied_in_plan_without_asking() {
    let dir = repository();
    let head = git(dir.path(), &["rev-parse", "HEAD"]);
    let outcome = bash(
        dir.path(),
        PermissionMode::Plan,
        COMMIT,
        PermissionResolution::Approved,
    )
    .await;
    assert!(outcome.asked.is_none());
    assert_eq!(outcome.status, ToolStatus::Error);
    assert_eq!(git(dir.path(), &["rev-parse", "HEAD"]), head);
}

#[tokio::test]
async fn an_approved_git_commit_lands_and_stays_sandboxed() {
    let dir = repository();
    let outside = tempfile::tempdir().unwrap();
    let escape = outside.path().join("escaped");
    // The same approved call also tries to write outside the workspace
    // (through python3, which the analysis cannot see): still confined.
    let command = format!(
        "{COMMIT} && python3 -c \"open('{}', 'w').write('x')\"; git log -1 --format=%s",
        escape.display()
    );
    let outcome = bash(
        dir.path(),
        PermissionMode::Auto,
        &command,
        PermissionResolution::Approved,
    )
    .await;
    assert_eq!(
        outcome.asked.map(|(scope, _)| scope),
        Some(IntentScope::Metadata)
    );
    assert_eq!(outcome.status, ToolStatus::Success, "{}", outcome.output);
    assert_eq!(
        git(dir.path(), &["log", "-1", "--format=%s"]),
        "by-the-model"
    );
    assert!(
        !escape.exists(),
        "the approved call wrote outside the workspace"
    );
}

#[tokio::test]
async fn a_write_into_git_the_analysis_cannot_see_fails_in_auto() {
    let dir = repository();
    let hook = dir.path().join(".git/hooks/pre-commit");
    let command = "python3 -c \"open('.git/hooks/pre-commit', 'w').write('#!/bin/sh')\"";
    let outcome = bash(
        dir.path(),
        PermissionMode::Auto,
        command,
        PermissionResolution::Denied,
    )
    .await;
    assert!(outcome.asked.is_none(), "python3 is opaque to the analysis");
    assert_eq!(outcome.status, ToolStatus::Error);
    assert!(
        outcome.output.contains("Read-only file system"),
        "{}",
        outcome.output
    );
    assert!(!hook.exists());
}
