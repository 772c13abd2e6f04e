//! Git's and Keel's metadata in the view of a confined command, judged by
//! effect on the host: at workspace-write `.git` (a directory or a linked
//! work tree's `gitdir:` file) and `.keel` stay as they were whatever the
//! command tries, while the rest of the workspace is written and reading
//! git works; a call approved to write them does; a repository the command
//! makes itself is its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use keel_sandbox::{Sandbox, SandboxConfig, SandboxLevel, confine};

/// A sandbox at `level`; `metadata_writable` as an approved call has it.
fn sandbox(level: SandboxLevel, metadata_writable: bool) -> Sandbox {
    Sandbox::new(level)
        .with_config(Arc::new(SandboxConfig::default()))
        .with_metadata_writable(metadata_writable)
}

/// Runs `script` confined in `workspace`; whether it succeeded, and what it printed.
fn run(sandbox: &Sandbox, workspace: &Path, script: &str) -> (bool, String) {
    let confinement = confine(sandbox, workspace).unwrap();
    let mut command = Command::new("/bin/sh");
    command
        .args(["-c", script])
        .current_dir(workspace)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", workspace);
    confinement.apply(&mut command);
    let output = command.output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), printed)
}

/// The host's git in `dir`.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .args(["-c", "user.name=U", "-c", "user.email=u@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A repository with one commit, and `.keel/config.toml`.
fn repository(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("a.txt"), "a\n").unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "a.txt"]);
    git(dir, &["commit", "-q", "-m", "start"]);
    std::fs::create_dir_all(dir.join(".keel")).unwrap();
    std::fs::write(dir.join(".keel/config.toml"), "x = 1\n").unwrap();
    std::fs::canonicalize(dir).unwrap()
}

const COMMIT: &str =
    "git -c user.name=M -c user.email=m@example.com commit -q --allow-empty -m attack";

/// Every way of writing the metadata a confined command tries; each must
/// fail and leave the host's files as they were.
const ATTACKS: &[&str] = &[
    "echo 'touch /tmp/x' > .git/hooks/pre-commit",
    "printf '[core]\\n\\thooksPath = /tmp\\n' >> .git/config",
    "git config core.hooksPath /tmp",
    COMMIT,
    "mv .git .git-old",
    "rm -rf .git",
    "rm .git/HEAD",
    "echo y > .keel/config.toml",
    "mv .keel .keel-old",
    "python3 -c \"open('.git/hooks/post-checkout', 'w').write('x')\"",
];

/// What the attacks could change: the files of `.git` and `.keel` that
/// matter, and the renamed directories.
fn fingerprint(root: &Path) -> Vec<(String, Option<String>)> {
    [
        ".git/config",
        ".git/HEAD",
        ".git/hooks/pre-commit",
        ".git/hooks/post-checkout",
        ".keel/config.toml",
        ".git-old/HEAD",
        ".keel-old/config.toml",
    ]
    .into_iter()
    .map(|rel| (rel.to_owned(), std::fs::read_to_string(root.join(rel)).ok()))
    .collect()
}

#[test]
fn metadata_stays_as_it_was_while_the_workspace_is_written() {
    let base = tempfile::tempdir().unwrap();
    let root = repository(&base.path().join("ws"));
    let head = git(&root, &["rev-parse", "HEAD"]);
    let before = fingerprint(&root);
    let writing = sandbox(SandboxLevel::WorkspaceWrite, false);
    for attack in ATTACKS {
        let (ok, printed) = run(&writing, &root, attack);
        assert!(!ok, "{attack} succeeded: {printed}");
        assert_eq!(fingerprint(&root), before, "{attack}: {printed}");
    }
    assert_eq!(git(&root, &["rev-parse", "HEAD"]), head);
    // The rest of the workspace is writable, and reading git works.
    let (ok, printed) = run(
        &writing,
        &root,
        "echo b > b.txt && git status --short && git log --oneline && git diff --stat",
    );
    assert!(ok, "{printed}");
    assert!(
        printed.contains("?? b.txt") && printed.contains("start"),
        "{printed}"
    );
    // Read-only, git reads too.
    let (ok, printed) = run(
        &sandbox(SandboxLevel::ReadOnly, false),
        &root,
        "git log --oneline",
    );
    assert!(ok && printed.contains("start"), "{printed}");
}

#[test]
fn an_approved_call_writes_the_metadata() {
    let base = tempfile::tempdir().unwrap();
    let root = repository(&base.path().join("ws"));
    let head = git(&root, &["rev-parse", "HEAD"]);
    let approved = sandbox(SandboxLevel::WorkspaceWrite, true);
    let (ok, printed) = run(&approved, &root, COMMIT);
    assert!(ok, "{printed}");
    assert_ne!(git(&root, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&root, &["log", "-1", "--format=%s"]), "attack");
    let (ok, printed) = run(&approved, &root, "echo y > .keel/config.toml");
    assert!(ok, "{printed}");
}

#[test]
fn a_repository_the_command_makes_is_its_own() {
    let base = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(base.path()).unwrap();
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    let writing = sandbox(SandboxLevel::WorkspaceWrite, false);
    let script = format!("git init -q && git add a.txt && {COMMIT} && echo x > .git/hooks/h");
    let (ok, printed) = run(&writing, &root, &script);
    assert!(ok, "{printed}");
    assert!(root.join(".git/hooks/h").exists());
    // The next command finds it existing, and protected.
    let (ok, _) = run(&writing, &root, "echo y > .git/hooks/h");
    assert!(!ok);
}

#[test]
fn a_linked_work_tree_reads_its_repository_and_cannot_write_it() {
    let base = tempfile::tempdir().unwrap();
    let main = repository(&base.path().join("main"));
    std::fs::write(main.join("secret.txt"), "MAIN-WORKING-FILE\n").unwrap();
    git(&main, &["worktree", "add", "-q", "../wt"]);
    let wt = std::fs::canonicalize(base.path().join("wt")).unwrap();
    let pointer = std::fs::read_to_string(wt.join(".git")).unwrap();
    let head = git(&wt, &["rev-parse", "HEAD"]);
    let writing = sandbox(SandboxLevel::WorkspaceWrite, false);
    let (ok, printed) = run(&writing, &wt, "git status --short && git log --oneline");
    assert!(ok && printed.contains("start"), "{printed}");
    for attack in [
        COMMIT,
        "echo 'gitdir: /tmp' > .git",
        "rm .git",
        "git branch x",
    ] {
        let (ok, printed) = run(&writing, &wt, attack);
        assert!(!ok, "{attack} succeeded: {printed}");
        assert_eq!(std::fs::read_to_string(wt.join(".git")).unwrap(), pointer);
    }
    assert_eq!(git(&wt, &["rev-parse", "HEAD"]), head);
    // The main work tree's files are not part of the view.
    let secret = main.join("secret.txt");
    let (ok, printed) = run(&writing, &wt, &format!("cat {}", secret.display()));
    assert!(!ok && !printed.contains("MAIN-WORKING-FILE"), "{printed}");
    // Approved, the commit lands in the shared repository.
    let (ok, printed) = run(&sandbox(SandboxLevel::WorkspaceWrite, true), &wt, COMMIT);
    assert!(ok, "{printed}");
    assert_ne!(git(&wt, &["rev-parse", "HEAD"]), head);
}

/// A sandbox at workspace-write that protects Keel's configuration `dir`.
fn protecting(dir: &Path, metadata_writable: bool) -> Sandbox {
    Sandbox::new(SandboxLevel::WorkspaceWrite)
        .with_config(Arc::new({
            let mut sandbox_config = SandboxConfig::default();
            sandbox_config.protected = vec![dir.to_path_buf()];
            sandbox_config
        }))
        .with_metadata_writable(metadata_writable)
}

/// Every way of planting Keel's user configuration from a workspace that is
/// the home directory; each must fail and leave it as it was.
const CONFIG_ATTACKS: &[&str] = &[
    "echo 'mode = \"full\"' > .config/keel/config.toml",
    "echo planted > .config/keel/AGENTS.md",
    "rm -rf .config/keel",
    "mv .config/keel .config/keel-old",
    "mv .config .config-old && mkdir -p .config/keel && echo 'mode = \"full\"' > .config/keel/config.toml",
    "python3 -c \"open('.config/keel/config.toml', 'w').write('mode = \\\"full\\\"')\"",
];

fn config_fingerprint(home: &Path) -> Vec<(String, Option<String>)> {
    [
        ".config/keel/config.toml",
        ".config/keel/AGENTS.md",
        ".config-old/keel/config.toml",
        ".config/keel-old/config.toml",
    ]
    .into_iter()
    .map(|rel| (rel.to_owned(), std::fs::read_to_string(home.join(rel)).ok()))
    .collect()
}

#[test]
fn keels_configuration_in_a_home_workspace_stays_as_it_was() {
    let base = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(base.path()).unwrap();
    let config = home.join(".config/keel");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), "mode = \"ask\"\n").unwrap();
    let before = config_fingerprint(&home);
    // Even a call approved to write `.git` may not write it.
    for approved in [false, true] {
        let sandbox = protecting(&config, approved);
        for attack in CONFIG_ATTACKS {
            let (ok, printed) = run(&sandbox, &home, attack);
            assert!(!ok, "{attack} succeeded: {printed}");
            assert_eq!(config_fingerprint(&home), before, "{attack}: {printed}");
        }
        // The rest of the home, `~/.config` included, is written.
        let (ok, printed) = run(
            &sandbox,
            &home,
            "echo b > b.txt && mkdir -p .config/other && echo c > .config/other/c",
        );
        assert!(ok, "{printed}");
        assert!(home.join(".config/other/c").is_file());
    }
}

#[test]
fn a_missing_keel_configuration_cannot_be_created() {
    let base = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(base.path()).unwrap();
    let config = home.join(".config/keel");
    let sandbox = protecting(&config, false);
    for attack in [
        "mkdir -p .config/keel && echo 'mode = \"full\"' > .config/keel/config.toml",
        "echo 'mode = \"full\"' > .config/keel/config.toml",
        "mv .config .config-old && mkdir -p .config/keel && echo x > .config/keel/config.toml",
    ] {
        let (ok, printed) = run(&sandbox, &home, attack);
        assert!(!ok, "{attack} succeeded: {printed}");
        assert!(
            !config.join("config.toml").exists() && !home.join(".config-old").exists(),
            "{attack}: {printed}"
        );
    }
    // Keel made the directory, empty, to protect it.
    assert_eq!(std::fs::read_dir(&config).unwrap().count(), 0);
    let (ok, printed) = run(&sandbox, &home, "echo b > b.txt");
    assert!(ok && home.join("b.txt").is_file(), "{printed}");
}
