//! The prediction's patch is read with the repository's hooks, filters,
//! textconv, external diff and fsmonitor off, against `base_commit`
//! itself, with untracked files and without the agent's test files when
//! asked; the checkout holds `base_commit`'s history only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A repository with two commits; returns (first, second).
fn repository(dir: &Path) -> (String, String) {
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("a.py"), "x = 1\n").unwrap();
    std::fs::write(dir.join("b.bin"), [0u8, 1, 2, 3]).unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "one"]);
    let first = git(dir, &["rev-parse", "HEAD"]).trim().to_owned();
    std::fs::write(dir.join("a.py"), "x = 2\n").unwrap();
    git(dir, &["commit", "-q", "-am", "two"]);
    let second = git(dir, &["rev-parse", "HEAD"]).trim().to_owned();
    (first, second)
}

#[test]
fn the_patch_runs_no_hook_filter_textconv_external_diff_or_fsmonitor() {
    let scratch = tempfile::tempdir().unwrap();
    let mirror = scratch.path().join("mirror");
    std::fs::create_dir_all(&mirror).unwrap();
    let (base, later) = repository(&mirror);
    let workspace = scratch.path().join("workspace");
    keel_swebench::git::checkout(&mirror, &base, &workspace).unwrap();
    // Only base_commit's history is in the checkout.
    let later_there = Command::new("git")
        .args(["cat-file", "-e", &later])
        .current_dir(&workspace)
        .status()
        .unwrap();
    assert!(!later_there.success(), "a later commit is in the checkout");

    // What an agent (or a hostile repository) could plant: every program
    // git might run writes a marker.
    let marker = scratch.path().join("ran");
    let program = scratch.path().join("program.sh");
    std::fs::write(
        &program,
        format!("#!/bin/sh\necho \"$0 $*\" >> {}\ncat\n", marker.display()),
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&program).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&program, permissions).unwrap();
    let program = program.display().to_string();
    for (key, value) in [
        ("filter.evil.clean", program.as_str()),
        ("filter.evil.smudge", program.as_str()),
        ("filter.evil.process", program.as_str()),
        ("diff.evil.textconv", program.as_str()),
        ("diff.evil.command", program.as_str()),
        ("diff.external", program.as_str()),
        ("core.fsmonitor", program.as_str()),
        ("core.hooksPath", scratch.path().to_str().unwrap()),
    ] {
        git(&workspace, &["config", key, value]);
    }
    std::fs::write(
        workspace.join(".gitattributes"),
        "* filter=evil diff=evil\n",
    )
    .unwrap();
    std::fs::create_dir_all(workspace.join(".git/info")).unwrap();
    std::fs::write(
        workspace.join(".git/info/attributes"),
        "* filter=evil diff=evil\n",
    )
    .unwrap();
    for hook in ["pre-commit", "post-index-change", "fsmonitor-watchman"] {
        std::fs::copy(scratch.path().join("program.sh"), scratch.path().join(hook)).unwrap();
    }
    // The agent's work: an edit, a new file, a binary change, a test file.
    std::fs::write(workspace.join("a.py"), "x = 3\n").unwrap();
    std::fs::write(workspace.join("new.py"), "y = 1\n").unwrap();
    std::fs::write(workspace.join("b.bin"), [0u8, 9, 9, 3]).unwrap();
    std::fs::create_dir_all(workspace.join("tests")).unwrap();
    std::fs::write(workspace.join("tests/test_new.py"), "def test(): pass\n").unwrap();

    let patch = keel_swebench::git::patch(&workspace, &base, false).unwrap();
    assert!(
        !marker.exists(),
        "git ran a planted program: {}",
        std::fs::read_to_string(&marker).unwrap()
    );
    assert!(
        patch.contains("-x = 1\n+x = 3\n"),
        "against base_commit itself: {patch}"
    );
    assert!(patch.contains("+++ b/new.py"), "{patch}");
    assert!(patch.contains("GIT binary patch"), "{patch}");
    assert!(patch.contains("tests/test_new.py"), "{patch}");
    assert!(patch.contains(".gitattributes"), "{patch}");
    // It applies at base_commit.
    let check = scratch.path().join("check");
    keel_swebench::git::checkout(&mirror, &base, &check).unwrap();
    std::fs::write(scratch.path().join("p.patch"), &patch).unwrap();
    git(
        &check,
        &["apply", scratch.path().join("p.patch").to_str().unwrap()],
    );
    assert_eq!(
        std::fs::read_to_string(check.join("a.py")).unwrap(),
        "x = 3\n"
    );
    assert_eq!(std::fs::read(check.join("b.bin")).unwrap(), [0u8, 9, 9, 3]);

    // --exclude-tests leaves the added test file out, and only it.
    let without = keel_swebench::git::patch(&workspace, &base, true).unwrap();
    assert!(!without.contains("tests/test_new.py"), "{without}");
    assert!(without.contains("+++ b/new.py"), "{without}");
    assert!(!marker.exists(), "git ran a planted program");
    // The workspace's own index is untouched.
    assert!(git(&workspace, &["diff", "--cached", "--name-only"]).is_empty());
}
