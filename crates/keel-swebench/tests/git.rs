//! The prediction's patch is read with the repository's hooks, filters,
//! textconv, external diff and fsmonitor off, against `base_commit`
//! itself, with untracked files and without the agent's test files when
//! asked; the checkout holds `base_commit`'s history only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The evaluator's deadline on each git command in these tests: a hang
/// ends as an error, so no test waits unbounded.
const T: Duration = Duration::from_secs(60);

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
    keel_swebench::git::checkout(&mirror, &base, &workspace, T).unwrap();
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

    let patch = keel_swebench::git::patch(&workspace, &base, false, T)
        .unwrap()
        .patch;
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
    keel_swebench::git::checkout(&mirror, &base, &check, T).unwrap();
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
    let without = keel_swebench::git::patch(&workspace, &base, true, T)
        .unwrap()
        .patch;
    assert!(!without.contains("tests/test_new.py"), "{without}");
    assert!(without.contains("+++ b/new.py"), "{without}");
    assert!(!marker.exists(), "git ran a planted program");
    // The workspace's own index is untouched.
    assert!(git(&workspace, &["diff", "--cached", "--name-only"]).is_empty());
}

#[test]
fn nested_repositories_are_left_out_and_their_configuration_never_read() {
    let scratch = tempfile::tempdir().unwrap();
    let mirror = scratch.path().join("mirror");
    std::fs::create_dir_all(&mirror).unwrap();
    let (base, _) = repository(&mirror);
    let workspace = scratch.path().join("workspace");
    keel_swebench::git::checkout(&mirror, &base, &workspace, T).unwrap();
    std::fs::write(workspace.join("a.py"), "x = 3\n").unwrap();
    // A nested repository whose configuration includes a FIFO: git reading
    // it would wait forever for a writer.
    let sub = workspace.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    git(&sub, &["init", "-q"]);
    std::fs::write(sub.join("s.txt"), "s\n").unwrap();
    git(&sub, &["add", "-A"]);
    git(&sub, &["commit", "-q", "-m", "s"]);
    let fifo = workspace.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let config = sub.join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[include]\n\tpath = ../../fifo\n");
    std::fs::write(&config, text).unwrap();
    // A linked-worktree style `.git` file deeper down is a nested one too.
    std::fs::create_dir_all(workspace.join("pkg/vendored")).unwrap();
    std::fs::write(
        workspace.join("pkg/vendored/.git"),
        "gitdir: ../../sub/.git\n",
    )
    .unwrap();
    std::fs::write(workspace.join("pkg/vendored/v.py"), "v = 1\n").unwrap();

    let prediction = keel_swebench::git::patch(&workspace, &base, false, T).unwrap();
    assert_eq!(prediction.nested, vec!["pkg/vendored", "sub"]);
    assert!(prediction.patch.contains("+x = 3"), "{}", prediction.patch);
    assert!(!prediction.patch.contains("sub"), "{}", prediction.patch);
    assert!(
        !prediction.patch.contains("vendored"),
        "{}",
        prediction.patch
    );
}

#[test]
fn a_workspace_whose_git_is_not_a_directory_is_refused_without_discovery() {
    let scratch = tempfile::tempdir().unwrap();
    let mirror = scratch.path().join("mirror");
    std::fs::create_dir_all(&mirror).unwrap();
    let (base, _) = repository(&mirror);
    let workspace = scratch.path().join("workspace");
    keel_swebench::git::checkout(&mirror, &base, &workspace, T).unwrap();
    // The agent swaps the repository for a `.git` file pointing elsewhere.
    std::fs::rename(workspace.join(".git"), scratch.path().join("moved")).unwrap();
    std::fs::write(
        workspace.join(".git"),
        format!("gitdir: {}\n", scratch.path().join("moved").display()),
    )
    .unwrap();
    let error = keel_swebench::git::patch(&workspace, &base, false, T).unwrap_err();
    assert!(
        error.to_string().contains("not a repository directory"),
        "{error}"
    );
}
