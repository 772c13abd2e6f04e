//! The run's changes: the patch from a run applies with `git apply` to a copy
//! of the starting state and reproduces the final state.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use keel_tools::changes::{Baseline, ChangesError, SnapshotLimits, WorkspaceChanges};

/// Runs git in `dir`, asserting success, and returns stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether this machine can enforce Keel's sandbox.
fn sandbox_available() -> bool {
    use keel_tools::sandbox::{Sandbox, SandboxLevel, probe};
    let dir = tempfile::tempdir().unwrap();
    probe::try_level(&Sandbox::new(SandboxLevel::WorkspaceWrite), dir.path()).is_ok()
}

fn init_repo(dir: &Path) {
    git(dir, &["init", "-q"]);
    git(dir, &["config", "user.name", "Keel Test"]);
    git(dir, &["config", "user.email", "keel@example.com"]);
}

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Every file under `root` except `.git` and `skip`: path → (executable, bytes).
fn files(root: &Path, skip: &[&str]) -> BTreeMap<String, (bool, Vec<u8>)> {
    fn visit(root: &Path, dir: &Path, skip: &[&str], out: &mut BTreeMap<String, (bool, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            if rel == ".git" || skip.contains(&rel.as_str()) {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                visit(root, &path, skip, out);
            } else {
                let exec = entry.metadata().unwrap().permissions().mode() & 0o111 != 0;
                out.insert(rel, (exec, std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    visit(root, root, skip, &mut out);
    out
}

/// Copies `from` into `to`, leaving out `.git`, keeping permissions.
fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == ".git" {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Applies `patch` with `git apply --binary` in `dir` (not a repository).
fn git_apply(dir: &Path, patch: &str) {
    let mut child = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap())
        .args(["apply", "--binary", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(patch.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git apply failed: {}\n--- patch ---\n{patch}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn chmod_x(path: &Path) {
    let mut perms = std::fs::metadata(path).unwrap().permissions();
    perms.set_mode(0o755);
    std::fs::set_permissions(path, perms).unwrap();
}

/// A line-rich text so git detects a rename even after a small edit.
fn long_text(tag: &str) -> String {
    (1..=20).map(|i| format!("{tag} line {i}\n")).collect()
}

#[test]
fn git_patch_replays_adds_edits_deletes_renames_and_binaries() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    init_repo(root);
    write(root, "a.txt", b"one\ntwo\nthree\n");
    write(root, "nonl.txt", b"first\nno newline");
    write(root, "del.txt", b"to be deleted\n");
    write(root, "old_name.txt", long_text("moved").as_bytes());
    write(root, "img.bin", b"\x89PNG\0\x01\x02\x03binary\0data");
    write(root, "dir/nested.txt", b"nested\n");
    write(root, ".gitignore", b"ignored.log\n");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    write(root, "untracked.txt", b"untracked before the run\n");
    write(root, "ignored.log", b"ignored before the run\n");

    let head = git(root, &["rev-parse", "HEAD"]);
    let index = git(root, &["ls-files", "-s"]);

    let baseline = Baseline::capture(root).unwrap();
    assert!(baseline.is_git());
    // Keel's git runs inside the sandbox wherever the sandbox works.
    assert_eq!(baseline.git_confined(), sandbox_available());
    let start = tempfile::tempdir().unwrap();
    copy_tree(root, start.path());

    write(root, "new.txt", b"brand new\n");
    write(root, "dir/new.bin", b"\0\x01\x02new binary\xff");
    write(root, "a.txt", b"one\nTWO\nthree\nfour\n");
    write(root, "nonl.txt", b"first\nstill no newline");
    write(root, "untracked.txt", b"untracked, edited\n");
    write(
        root,
        "img.bin",
        b"\x89PNG\0\x01\x02\x04binary\0data, changed",
    );
    write(root, "ignored.log", b"ignored, edited\n");
    std::fs::remove_file(root.join("del.txt")).unwrap();
    std::fs::rename(root.join("old_name.txt"), root.join("dir/renamed.txt")).unwrap();
    let mut renamed = long_text("moved");
    renamed.push_str("one more line\n");
    write(root, "dir/renamed.txt", renamed.as_bytes());

    let changes = baseline.changes().unwrap();
    assert_eq!(
        changes.changed_paths,
        [
            "a.txt",
            "del.txt",
            "dir/new.bin",
            "dir/renamed.txt",
            "img.bin",
            "new.txt",
            "nonl.txt",
            "old_name.txt",
            "untracked.txt"
        ]
    );
    assert!(
        changes
            .patch
            .contains("rename from old_name.txt\nrename to dir/renamed.txt\n"),
        "{}",
        changes.patch
    );
    assert!(
        changes.patch.contains("GIT binary patch"),
        "{}",
        changes.patch
    );
    assert!(!changes.patch.contains("ignored.log"));

    git_apply(start.path(), &changes.patch);
    assert_eq!(
        files(start.path(), &["ignored.log"]),
        files(root, &["ignored.log"])
    );

    // The user's HEAD and index are untouched.
    assert_eq!(git(root, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(root, &["ls-files", "-s"]), index);
    assert_eq!(git(root, &["diff", "--cached", "--name-only"]), "");

    // Computing the changes again gives the same answer.
    assert_eq!(baseline.changes().unwrap(), changes);
}

#[test]
fn git_repository_without_commits_works() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    init_repo(root);
    write(root, "a.txt", b"a\n");
    let baseline = Baseline::capture(root).unwrap();
    assert!(baseline.is_git());
    let start = tempfile::tempdir().unwrap();
    copy_tree(root, start.path());

    write(root, "a.txt", b"a\nb\n");
    write(root, "b.txt", b"b");
    let changes = baseline.changes().unwrap();
    assert_eq!(changes.changed_paths, ["a.txt", "b.txt"]);
    git_apply(start.path(), &changes.patch);
    assert_eq!(files(start.path(), &[]), files(root, &[]));
}

#[test]
fn git_subdirectory_root_is_relative() {
    let ws = tempfile::tempdir().unwrap();
    init_repo(ws.path());
    write(ws.path(), "outside.txt", b"outside\n");
    write(ws.path(), "sub/inside.txt", b"inside\n");
    git(ws.path(), &["add", "-A"]);
    git(ws.path(), &["commit", "-q", "-m", "start"]);
    let root = ws.path().join("sub");
    let baseline = Baseline::capture(&root).unwrap();
    assert!(baseline.is_git());

    write(ws.path(), "outside.txt", b"outside, edited\n");
    write(&root, "inside.txt", b"inside, edited\n");
    write(&root, "deeper/new.txt", b"new\n");
    let changes = baseline.changes().unwrap();
    assert_eq!(changes.changed_paths, ["deeper/new.txt", "inside.txt"]);
    assert!(
        changes
            .patch
            .contains("diff --git a/inside.txt b/inside.txt\n"),
        "{}",
        changes.patch
    );
    assert!(!changes.patch.contains("outside"));
}

#[test]
fn git_non_utf8_text_still_yields_an_applicable_patch() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    init_repo(root);
    write(root, "latin1.txt", b"caf\xe9\n");
    write(root, "plain.txt", b"plain\n");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    let baseline = Baseline::capture(root).unwrap();
    let start = tempfile::tempdir().unwrap();
    copy_tree(root, start.path());

    write(root, "latin1.txt", b"caf\xe9 cr\xe8me\n");
    write(root, "plain.txt", b"plain, edited\n");
    let changes = baseline.changes().unwrap();
    assert_eq!(changes.changed_paths, ["latin1.txt", "plain.txt"]);
    assert!(
        changes.patch.contains("+plain, edited\n"),
        "{}",
        changes.patch
    );
    assert!(
        changes.patch.contains("GIT binary patch"),
        "{}",
        changes.patch
    );
    git_apply(start.path(), &changes.patch);
    assert_eq!(files(start.path(), &[]), files(root, &[]));
}

#[test]
fn plain_directory_patch_replays_adds_edits_deletes_and_modes() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    let middle: String = (1..=12).map(|i| format!("line {i}\n")).collect();
    write(root, "a.txt", middle.as_bytes());
    write(root, "nonl.txt", b"first\nlast without newline");
    write(root, "gains_newline.txt", b"no newline yet");
    write(root, "loses_newline.txt", b"has a newline\n");
    write(root, "del.txt", b"to be deleted\n");
    write(root, "empty_del.txt", b"");
    write(root, "keep.txt", b"moved around\n");
    write(root, "script.sh", b"#!/bin/sh\necho hi\n");
    write(root, "name with space.txt", b"spaces\n");
    write(root, "unchanged.txt", b"same\n");

    let baseline = Baseline::capture(root).unwrap();
    assert!(!baseline.is_git());
    let start = tempfile::tempdir().unwrap();
    copy_tree(root, start.path());

    write(
        root,
        "a.txt",
        middle
            .replace("line 6\n", "line six\n")
            .replace("line 12\n", "")
            .as_bytes(),
    );
    write(root, "nonl.txt", b"first\nlast, still without newline");
    write(root, "gains_newline.txt", b"no newline yet\n");
    write(root, "loses_newline.txt", b"has a newline");
    write(root, "new.txt", b"new\n");
    write(root, "empty_new.txt", b"");
    write(root, "name with space.txt", b"spaces, edited\n");
    std::fs::remove_file(root.join("del.txt")).unwrap();
    std::fs::remove_file(root.join("empty_del.txt")).unwrap();
    std::fs::create_dir(root.join("moved")).unwrap();
    std::fs::rename(root.join("keep.txt"), root.join("moved/keep.txt")).unwrap();
    chmod_x(&root.join("script.sh"));

    let changes = baseline.changes().unwrap();
    assert_eq!(
        changes.changed_paths,
        [
            "a.txt",
            "del.txt",
            "empty_del.txt",
            "empty_new.txt",
            "gains_newline.txt",
            "keep.txt",
            "loses_newline.txt",
            "moved/keep.txt",
            "name with space.txt",
            "new.txt",
            "nonl.txt",
            "script.sh"
        ]
    );
    assert!(
        changes.patch.contains("old mode 100644\nnew mode 100755\n"),
        "{}",
        changes.patch
    );
    assert!(
        changes.patch.contains("\\ No newline at end of file\n"),
        "{}",
        changes.patch
    );

    git_apply(start.path(), &changes.patch);
    assert_eq!(files(start.path(), &[]), files(root, &[]));
}

#[test]
fn plain_directory_lists_binary_and_oversized_changes() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    write(root, "img.bin", b"\0\x01\x02");
    write(root, "text.txt", b"text\n");
    let big = "a line of text to fill the file\n".repeat(64 * 1024); // 2 MiB
    write(root, "big.txt", big.as_bytes());
    write(root, "big_same.txt", big.as_bytes());
    let baseline = Baseline::capture(root).unwrap();
    assert!(!baseline.is_git());

    write(root, "img.bin", b"\0\x01\x03");
    write(root, "new.bin", b"\xff\xfe not utf-8");
    write(root, "big.txt", format!("{big}one more\n").as_bytes());
    let changes = baseline.changes().unwrap();
    // Too big to keep: listed, and marked like a binary file.
    assert_eq!(changes.changed_paths, ["big.txt", "img.bin", "new.bin"]);
    assert!(
        changes
            .patch
            .contains("Binary files a/big.txt and b/big.txt differ\n")
    );
    assert!(
        changes
            .patch
            .contains("Binary files a/img.bin and b/img.bin differ\n"),
        "{}",
        changes.patch
    );
    assert!(
        changes
            .patch
            .contains("new file mode 100644\nBinary files /dev/null and b/new.bin differ\n")
    );
}

#[test]
fn no_changes_give_an_empty_result() {
    let empty = {
        let mut workspace_changes = WorkspaceChanges::default();
        workspace_changes.changed_paths = Vec::new();
        workspace_changes.patch = String::new();
        workspace_changes.git_code = Vec::new();
        workspace_changes
    };

    let plain = tempfile::tempdir().unwrap();
    write(plain.path(), "a.txt", b"a\n");
    let baseline = Baseline::capture(plain.path()).unwrap();
    assert_eq!(baseline.changes().unwrap(), empty);

    let repo = tempfile::tempdir().unwrap();
    init_repo(repo.path());
    write(repo.path(), "a.txt", b"a\n");
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "start"]);
    write(repo.path(), "untracked.txt", b"u\n");
    let baseline = Baseline::capture(repo.path()).unwrap();
    assert!(baseline.is_git());
    let changes = baseline.changes().unwrap();
    assert!(changes.is_empty());
    assert_eq!(changes, empty);
}

#[test]
fn baseline_can_move_to_a_blocking_task() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Baseline>();
}

#[test]
fn missing_root_is_an_error() {
    let ws = tempfile::tempdir().unwrap();
    assert!(Baseline::capture(&ws.path().join("missing")).is_err());
}

/// A 2 GiB sparse file (made by `set_len`) is over the size cap: it is never
/// read, only listed as changed, and the report stays quick — in a git
/// workspace and in a plain one.
#[test]
fn a_huge_sparse_file_stays_within_the_caps() {
    for git_workspace in [true, false] {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        if git_workspace {
            init_repo(root);
        }
        write(root, "a.txt", b"a\n");
        let unchanged = std::fs::File::create(root.join("old-sparse.bin")).unwrap();
        unchanged.set_len(2 << 30).unwrap();
        let baseline = Baseline::capture(root).unwrap();
        assert_eq!(baseline.is_git(), git_workspace);

        let started = std::time::Instant::now();
        let sparse = std::fs::File::create(root.join("sparse.bin")).unwrap();
        sparse.set_len(2 << 30).unwrap();
        write(root, "a.txt", b"a\nb\n");
        let changes = baseline.changes().unwrap();
        let elapsed = started.elapsed();
        assert!(elapsed < std::time::Duration::from_secs(5), "{elapsed:?}");
        assert_eq!(changes.changed_paths, ["a.txt", "sparse.bin"]);
        assert!(
            changes
                .patch
                .contains("new file mode 100644\nBinary files /dev/null and b/sparse.bin differ\n"),
            "{}",
            changes.patch
        );
        assert!(changes.patch.contains("+b\n"), "{}", changes.patch);
    }
}

/// A snapshot over its time budget fails with a clear error, not a stall.
#[test]
fn a_snapshot_over_its_budget_fails_clearly() {
    for git_workspace in [true, false] {
        let ws = tempfile::tempdir().unwrap();
        if git_workspace {
            init_repo(ws.path());
        }
        for i in 0..50 {
            write(ws.path(), &format!("f{i}.txt"), b"x\n");
        }
        let limits = {
            let mut snapshot_limits = SnapshotLimits::default();
            snapshot_limits.budget = std::time::Duration::from_nanos(1);
            snapshot_limits
        };
        let error = Baseline::capture_with(ws.path(), limits).unwrap_err();
        assert!(matches!(error, ChangesError::TimedOut { .. }), "{error}");
        assert!(error.to_string().contains("budget"), "{error}");
    }
}

/// A FIFO, and a file over the cap, never block or balloon a snapshot.
#[test]
fn fifos_are_skipped_and_small_caps_hold() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    init_repo(root);
    let fifo = root.join("pipe");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    write(root, "big.txt", &[b'x'; 100]);
    let limits = {
        let mut snapshot_limits = SnapshotLimits::default();
        snapshot_limits.max_file = 10;
        snapshot_limits
    };
    let baseline = Baseline::capture_with(root, limits).unwrap();
    write(root, "big.txt", &[b'y'; 101]);
    let changes = baseline.changes().unwrap();
    assert_eq!(changes.changed_paths, ["big.txt"]);
    assert!(!changes.patch.contains("yyy"), "{}", changes.patch);
}

/// A file the repository tracks is snapshotted even when it is ignored.
#[test]
fn tracked_but_ignored_files_are_still_compared() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    init_repo(root);
    write(root, "kept.log", b"tracked\n");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "start"]);
    write(root, ".gitignore", b"*.log\n");
    write(root, "other.log", b"untracked and ignored\n");
    let baseline = Baseline::capture(root).unwrap();
    write(root, "kept.log", b"tracked, edited\n");
    write(root, "other.log", b"edited\n");
    let changes = baseline.changes().unwrap();
    assert_eq!(changes.changed_paths, ["kept.log"]);
}

/// Sixteen 512 KiB text files (8 MiB), each line naming its file.
fn eight_mib_workspace(root: &Path) {
    for n in 0..16 {
        let line = format!("file {n:02}: a line of start content, long enough to fill\n");
        let text = line.repeat((512 << 10) / line.len());
        write(root, &format!("dir/file{n:02}.txt"), text.as_bytes());
    }
}

fn edit_some(root: &Path) {
    let path = root.join("dir/file03.txt");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.replace_range(100..110, "EDITED....");
    std::fs::write(&path, text).unwrap();
    std::fs::remove_file(root.join("dir/file07.txt")).unwrap();
    write(root, "dir/new.txt", b"added\n");
}

/// A non-git baseline with a spill directory keeps its start contents on
/// disk, not on the heap, reports exactly what an in-memory one reports,
/// and removes its directory when dropped.
#[test]
fn a_spilled_baseline_holds_little_memory_and_cleans_up() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    eight_mib_workspace(root);
    let temp = tempfile::tempdir().unwrap();
    let limits = {
        let mut snapshot_limits = SnapshotLimits::default();
        snapshot_limits.spill_under = Some(temp.path().to_path_buf());
        snapshot_limits
    };
    let spilled = Baseline::capture_with(root, limits).unwrap();
    let in_memory = Baseline::capture(root).unwrap();
    assert!(!spilled.is_git());

    assert!(
        in_memory.heap_bytes() >= 8 << 20,
        "the accounting sees in-memory contents: {}",
        in_memory.heap_bytes()
    );
    assert!(
        spilled.heap_bytes() < 1 << 20,
        "a spilled baseline of 8 MiB holds {} bytes of heap",
        spilled.heap_bytes()
    );
    let dir = spilled.spill_dir().unwrap().to_path_buf();
    assert!(dir.starts_with(temp.path()));
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the spill directory is private");
    let mut on_disk = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let meta = entry.unwrap().metadata().unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        on_disk += meta.len();
    }
    let workspace_bytes: u64 = (0..16)
        .map(|n| {
            let path = root.join(format!("dir/file{n:02}.txt"));
            std::fs::metadata(path).unwrap().len()
        })
        .sum();
    assert!(workspace_bytes >= 8_000_000, "{workspace_bytes}");
    assert_eq!(
        on_disk, workspace_bytes,
        "every start content is on disk, once"
    );

    edit_some(root);
    let from_disk = spilled.changes().unwrap();
    let from_memory = in_memory.changes().unwrap();
    assert_eq!(
        from_disk.changed_paths,
        ["dir/file03.txt", "dir/file07.txt", "dir/new.txt"]
    );
    assert!(
        from_disk
            .patch
            .contains("+file 03: a line of start content")
    );
    assert_eq!(from_disk.changed_paths, from_memory.changed_paths);
    assert_eq!(
        from_disk.patch, from_memory.patch,
        "the same patch either way"
    );

    drop(spilled);
    assert!(
        !dir.exists(),
        "the spill directory is removed with the baseline"
    );
}
