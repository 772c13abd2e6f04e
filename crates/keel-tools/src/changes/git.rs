//! The git snapshot of a workspace (a tree object written through a
//! temporary index) and the patch between two such trees; see the parent
//! module for the invariants.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use super::{ChangesError, Kind, WorkspaceChanges, io_err};

/// `-c` overrides that pin every output-affecting setting git would read.
const GIT_CONFIG: &str = "core.quotepath=off diff.noprefix=false diff.mnemonicprefix=false \
    color.ui=false core.autocrlf=false core.fsmonitor=false diff.submodule=short gc.auto=0 \
    maintenance.auto=false";

/// A temporary index file, removed (with any stale lock) on drop.
#[derive(Debug)]
pub(super) struct TempIndex(pub(super) PathBuf);

impl TempIndex {
    fn new() -> TempIndex {
        let name = format!("keel-index-{}", uuid::Uuid::now_v7());
        TempIndex(std::env::temp_dir().join(name))
    }
}

impl Drop for TempIndex {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let mut lock = self.0.clone().into_os_string();
        lock.push(".lock");
        let _ = std::fs::remove_file(lock);
    }
}

/// Seeds a temporary index from `HEAD`, if any, and snapshots the work tree.
pub(super) fn capture_git(root: &Path) -> Result<Kind, ChangesError> {
    let index = TempIndex::new();
    let head = git(
        root,
        None,
        "rev-parse --verify --quiet HEAD^{commit}",
        &[],
        None,
    );
    if head.is_ok_and(|o| o.status.success()) {
        git_ok(root, Some(&index.0), "read-tree HEAD", &[], None)?;
    }
    let tree = snapshot_tree(root, &index.0)?;
    let lock = Mutex::new(());
    Ok(Kind::Git { index, tree, lock })
}

/// Whether `root` is in a git work tree that git will serve and does not ignore.
pub(super) fn uses_git(root: &Path) -> bool {
    let out = match git(
        root,
        None,
        "rev-parse --is-inside-work-tree --show-prefix",
        &[],
        None,
    ) {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            tracing::debug!(stderr = %stderr.trim(), "not using git for changes");
            return false;
        }
        Err(err) => {
            tracing::debug!(%err, "git unavailable for changes");
            return false;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    if lines.next() != Some("true") {
        return false;
    }
    // A root ignored by its enclosing repository would snapshot as empty.
    let ignored =
        || git(root, None, "check-ignore -q -- .", &[], None).is_ok_and(|o| o.status.success());
    lines.next().unwrap_or("").is_empty() || !ignored()
}

/// Runs `git <cmd> <args>` in `root` with a scrubbed environment and pinned
/// configuration; `cmd` is split at whitespace.
fn git(
    root: &Path,
    index: Option<&Path>,
    cmd: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<Output, ChangesError> {
    let mut command = Command::new("git");
    command.current_dir(root).env_clear();
    for var in ["PATH", "HOME"] {
        if let Some(value) = std::env::var_os(var) {
            command.env(var, value);
        }
    }
    if let Some(index) = index {
        command.env("GIT_INDEX_FILE", index);
    }
    command
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0");
    for setting in GIT_CONFIG.split_whitespace() {
        command.args(["-c", setting]);
    }
    command.args(cmd.split_whitespace()).args(args);
    let input = if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    command
        .stdin(input)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let context = || format!("running git {cmd}");
    let mut child = command.spawn().map_err(|e| io_err(context(), e))?;
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(bytes).map_err(|e| io_err(context(), e))?;
    }
    child.wait_with_output().map_err(|e| io_err(context(), e))
}

fn git_failure(cmd: &str, out: &Output) -> ChangesError {
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    ChangesError::Git {
        command: cmd.to_string(),
        status: out.status.to_string(),
        stderr,
    }
}

fn bad_output(cmd: &str, detail: impl Into<String>) -> ChangesError {
    ChangesError::GitOutput {
        command: cmd.to_string(),
        detail: detail.into(),
    }
}

/// Runs git and returns its stdout, failing on a non-zero exit.
fn git_ok(
    root: &Path,
    index: Option<&Path>,
    cmd: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<Vec<u8>, ChangesError> {
    let out = git(root, index, cmd, args, stdin)?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(git_failure(cmd, &out))
    }
}

/// Runs git and returns its stdout as one object id.
fn git_object_id(
    root: &Path,
    index: Option<&Path>,
    cmd: &str,
    stdin: Option<&[u8]>,
) -> Result<String, ChangesError> {
    let stdout = git_ok(root, index, cmd, &[], stdin)?;
    let id = String::from_utf8_lossy(&stdout).trim().to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad_output(cmd, format!("not an object id: {id:?}")));
    }
    Ok(id)
}

/// Stages the working tree under `root` into `index` and writes it as a tree.
pub(super) fn snapshot_tree(root: &Path, index: &Path) -> Result<String, ChangesError> {
    let cmd = "add -A --ignore-errors -- .";
    let out = git(root, Some(index), cmd, &[], None)?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("fatal:") {
            return Err(git_failure(cmd, &out));
        }
        // Unreadable files are skipped; everything else is still staged.
        tracing::warn!(stderr = %stderr.trim(), "some files could not be snapshotted");
    }
    git_object_id(root, Some(index), "write-tree", None)
}

const NAMES: &str = "diff-tree -r -z --name-status -M --relative";
const PATCH: &str = "diff-tree -r -p --binary -M --full-index --relative --src-prefix=a/ \
    --dst-prefix=b/ --no-color --no-ext-diff --no-textconv";

pub(super) fn git_changes(
    root: &Path,
    start: &str,
    end: &str,
) -> Result<WorkspaceChanges, ChangesError> {
    if start == end {
        return Ok(WorkspaceChanges {
            changed_paths: Vec::new(),
            patch: String::new(),
        });
    }
    let names = git_ok(root, None, NAMES, &[start, end], None)?;
    let mut changed_paths = parse_name_status(&names);
    changed_paths.sort();
    changed_paths.dedup();
    let patch = match String::from_utf8(git_ok(root, None, PATCH, &[start, end], None)?) {
        Ok(patch) => patch,
        Err(err) => utf8_patch(root, &[start, end], err.as_bytes())?,
    };
    Ok(WorkspaceChanges {
        changed_paths,
        patch,
    })
}

/// Parses `--name-status -z` output: renames and copies carry two paths.
fn parse_name_status(raw: &[u8]) -> Vec<String> {
    let mut tokens = raw.split(|&b| b == 0).filter(|t| !t.is_empty());
    let mut paths = Vec::new();
    while let Some(status) = tokens.next() {
        let count = if matches!(status.first(), Some(b'R' | b'C')) {
            2
        } else {
            1
        };
        for path in tokens.by_ref().take(count) {
            paths.push(String::from_utf8_lossy(path).into_owned());
        }
    }
    paths
}

/// Replaces the non-UTF-8 file sections of `raw` with binary, quoted versions.
fn utf8_patch(root: &Path, trees: &[&str], raw: &[u8]) -> Result<String, ChangesError> {
    let attrs = Some(b"* binary\n".as_slice());
    let blob = git_object_id(root, None, "hash-object -w --stdin", attrs)?;
    let listing = format!("100644 blob {blob}\t.gitattributes\n");
    let attrs = git_object_id(root, None, "mktree", Some(listing.as_bytes()))?;
    let cmd = format!("-c core.quotepath=on --attr-source={attrs} {PATCH}");
    let binary = git_ok(root, None, &cmd, trees, None)?;
    let (text, binary) = (split_sections(raw), split_sections(&binary));
    if text.len() != binary.len() {
        return Err(bad_output(&cmd, "binary re-run disagrees on the file list"));
    }
    let mut patch = String::new();
    for (section, fallback) in text.into_iter().zip(binary) {
        let chosen = std::str::from_utf8(section).or_else(|_| std::str::from_utf8(fallback));
        let Ok(chosen) = chosen else {
            return Err(bad_output(
                &cmd,
                "patch is not UTF-8 even with binary sections",
            ));
        };
        patch.push_str(chosen);
    }
    Ok(patch)
}

/// Splits a patch before each line that starts with `diff --git `.
fn split_sections(patch: &[u8]) -> Vec<&[u8]> {
    let mut starts: Vec<usize> = Vec::new();
    let mut line_start = 0;
    while line_start < patch.len() {
        if patch[line_start..].starts_with(b"diff --git ") {
            starts.push(line_start);
        }
        match patch[line_start..].iter().position(|&b| b == b'\n') {
            Some(nl) => line_start += nl + 1,
            None => break,
        }
    }
    let mut sections = Vec::new();
    if let Some(&first) = starts.first()
        && first > 0
    {
        sections.push(&patch[..first]);
    }
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(patch.len());
        sections.push(&patch[start..end]);
    }
    sections
}
