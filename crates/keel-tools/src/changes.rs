//! The run's changes: which paths a run changed, and a unified patch from the
//! state at run start to the state at run end.
//!
//! The host wants to know what a run did to the workspace without trusting
//! the model's account of it, and wants it in a form it can review, store and
//! replay elsewhere (`git apply`). So Keel snapshots the workspace when the
//! run starts ([`Baseline::capture`]) and diffs the current state against
//! that snapshot when it ends ([`Baseline::changes`]). Both calls block; async
//! callers use `spawn_blocking`.
//!
//! **Git workspaces.** When the root lies inside a git work tree, the
//! snapshot is a git tree object: Keel seeds a *temporary* index file
//! (`GIT_INDEX_FILE`) from `HEAD` (nothing, in a repository without commits),
//! runs `git add -A -- .` (so `.gitignore` is respected and untracked files
//! are included) and `git write-tree`. The patch is
//! `git diff-tree -p --binary -M --full-index` between the start and end
//! trees, limited to and relative to the root (`--relative`), so renames and
//! binary files apply with `git apply`. Invariants:
//! - the user's index, `HEAD`, refs and working tree are never touched; the
//!   only side effect is unreferenced blobs and trees in the object database,
//!   which are harmless and pruned by `git gc` after `gc.pruneExpire`;
//! - git runs with a cleared environment (`PATH`, `HOME`, `GIT_INDEX_FILE`,
//!   `GIT_CONFIG_NOSYSTEM=1`, `GIT_TERMINAL_PROMPT=0`) and explicit `-c`
//!   overrides, so user configuration cannot change the patch format;
//! - the patch is valid UTF-8: if git's output is not (a Latin-1 text file,
//!   a non-UTF-8 path), the affected file sections are regenerated as binary
//!   patches with quoted paths (needs git ≥ 2.42 for `--attr-source`).
//!
//! If the root is ignored by its enclosing repository, git is not installed,
//! or git refuses the repository (e.g. "dubious ownership"), Keel falls back
//! to its own diff.
//!
//! **Other workspaces.** Keel walks the root (skipping `.git`, honouring
//! ignore files, following no symlinks) and remembers each regular file and
//! symlink: files up to 1 MiB, within a 64 MiB total budget, are kept in
//! memory; of the rest only length and an FNV-1a hash (streamed) are kept.
//! At the end, files are read one at a time (those over 64 MiB only hashed).
//! The patch is git-compatible (`diff --git` headers, modes, `/dev/null` for
//! additions and deletions, `\ No newline at end of file`, lines split at
//! `\n` only), with no rename detection (a rename is a deletion plus an
//! addition). Limitation: a changed file that contains a NUL byte or is not
//! UTF-8 on either side, or whose content was not kept, appears as
//! `Binary files … differ`: the path is listed, but `git apply` rejects the
//! patch. Ignore files are honoured, so a file that becomes ignored during
//! the run shows as deleted.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::ops::Range;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use similar::{Algorithm, DiffTag};

/// Largest file whose starting content Keel keeps in memory.
const MAX_KEPT_FILE: usize = 1 << 20;
/// Total starting content Keel keeps in memory.
const KEPT_BUDGET: usize = 64 << 20;
/// Largest current file Keel reads whole to write its patch.
const MAX_PATCH_FILE: usize = 64 << 20;
/// Context lines around each hunk.
const CONTEXT: usize = 3;
/// After this long a line diff settles for a valid but non-minimal result.
const DIFF_TIMEOUT: Duration = Duration::from_secs(5);

/// `-c` overrides that pin every output-affecting setting git would read.
const GIT_CONFIG: &str = "core.quotepath=off diff.noprefix=false diff.mnemonicprefix=false \
    color.ui=false core.autocrlf=false core.fsmonitor=false diff.submodule=short gc.auto=0 \
    maintenance.auto=false";

/// Why the run's changes could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    /// Reading the workspace or a temporary file failed.
    #[error("{context}: {source}")]
    Io {
        /// What Keel was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A git command exited unsuccessfully.
    #[error("`git {command}` failed ({status}): {stderr}")]
    Git {
        /// The git subcommand and its arguments.
        command: String,
        /// The exit status.
        status: String,
        /// What git printed on stderr.
        stderr: String,
    },
    /// A git command printed something Keel cannot use.
    #[error("unexpected output from `git {command}`: {detail}")]
    GitOutput {
        /// The git subcommand and its arguments.
        command: String,
        /// What was wrong with it.
        detail: String,
    },
}

/// What a run changed: the paths and a patch that replays it with `git apply`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkspaceChanges {
    /// Changed paths relative to the root, sorted; a rename lists both paths.
    pub changed_paths: Vec<String>,
    /// A unified, git-compatible patch from the start state to the end state.
    pub patch: String,
}

impl WorkspaceChanges {
    /// Whether the run changed nothing.
    pub fn is_empty(&self) -> bool {
        self.changed_paths.is_empty() && self.patch.is_empty()
    }
}

/// The workspace state at run start, to diff the end state against.
pub struct Baseline {
    root: PathBuf,
    kind: Kind,
}

impl std::fmt::Debug for Baseline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the kept contents: they can be tens of MiB.
        let mut s = f.debug_struct("Baseline");
        s.field("root", &self.root)
            .field("git", &self.is_git())
            .finish_non_exhaustive()
    }
}

enum Kind {
    Git {
        index: TempIndex,
        tree: String,
        /// Serialises `git add` on the shared temporary index.
        lock: Mutex<()>,
    },
    Files(BTreeMap<Vec<u8>, FileState>),
}

impl Baseline {
    /// Snapshots the workspace at `root` (blocking).
    pub fn capture(root: &Path) -> Result<Baseline, ChangesError> {
        let meta = std::fs::metadata(root)
            .map_err(|e| io_err(format!("reading {}", root.display()), e))?;
        if !meta.is_dir() {
            let e = std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory");
            return Err(io_err(format!("reading {}", root.display()), e));
        }
        let root = root.to_path_buf();
        let kind = match uses_git(&root).then(|| capture_git(&root)) {
            Some(Ok(kind)) => kind,
            Some(Err(err)) => {
                tracing::warn!(%err, "git snapshot failed; using Keel's own diff");
                Kind::Files(capture_files(&root))
            }
            None => Kind::Files(capture_files(&root)),
        };
        Ok(Baseline { root, kind })
    }

    /// The workspace root this baseline was captured from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this baseline is a git snapshot (rather than Keel's own).
    pub fn is_git(&self) -> bool {
        matches!(self.kind, Kind::Git { .. })
    }

    /// Computes the changes from the baseline to the current state (blocking).
    pub fn changes(&self) -> Result<WorkspaceChanges, ChangesError> {
        match &self.kind {
            Kind::Git { index, tree, lock } => {
                let end = {
                    let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    snapshot_tree(&self.root, &index.0)?
                };
                git_changes(&self.root, tree, &end)
            }
            Kind::Files(files) => Ok(files_changes(&self.root, files)),
        }
    }
}

fn io_err(context: String, source: std::io::Error) -> ChangesError {
    ChangesError::Io { context, source }
}

// ---------------------------------------------------------------- git ----

/// A temporary index file, removed (with any stale lock) on drop.
#[derive(Debug)]
struct TempIndex(PathBuf);

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
fn capture_git(root: &Path) -> Result<Kind, ChangesError> {
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
fn uses_git(root: &Path) -> bool {
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
fn snapshot_tree(root: &Path, index: &Path) -> Result<String, ChangesError> {
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

fn git_changes(root: &Path, start: &str, end: &str) -> Result<WorkspaceChanges, ChangesError> {
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

// -------------------------------------------------------------- files ----

/// A file or symlink as Keel remembers it.
struct FileState {
    mode: u32,
    len: usize,
    hash: u64,
    /// `None` when the content did not fit the memory budget.
    content: Option<Vec<u8>>,
}

fn capture_files(root: &Path) -> BTreeMap<Vec<u8>, FileState> {
    let mut files = BTreeMap::new();
    let mut kept = 0usize;
    for (rel, path) in walk(root) {
        let limit = MAX_KEPT_FILE.min(KEPT_BUDGET.saturating_sub(kept));
        if let Some(state) = read_entry(&path, limit) {
            kept += state.content.as_ref().map_or(0, Vec::len);
            files.insert(rel, state);
        }
    }
    files
}

/// Regular files and symlinks under `root`: (relative path bytes, full path), sorted.
fn walk(root: &Path) -> Vec<(Vec<u8>, PathBuf)> {
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .git_ignore(true)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .build();
    let mut entries = Vec::new();
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(err) => {
                tracing::warn!(%err, "skipping an unreadable workspace entry");
                continue;
            }
        };
        let wanted = entry
            .file_type()
            .is_some_and(|t| t.is_file() || t.is_symlink());
        if entry.depth() == 0 || !wanted {
            continue;
        }
        if let Ok(rel) = entry.path().strip_prefix(root) {
            entries.push((
                rel.as_os_str().as_bytes().to_vec(),
                entry.path().to_path_buf(),
            ));
        }
    }
    entries.sort();
    entries
}

/// Reads a regular file or a symlink's target with its git mode; the content
/// of a file larger than `limit` is only hashed, streaming.
fn read_entry(path: &Path, limit: usize) -> Option<FileState> {
    let read = || -> std::io::Result<Option<FileState>> {
        let meta = std::fs::symlink_metadata(path)?;
        let (mode, bytes) = if meta.file_type().is_symlink() {
            (
                0o120000,
                std::fs::read_link(path)?.into_os_string().into_vec(),
            )
        } else if !meta.is_file() {
            return Ok(None);
        } else {
            let exec = meta.permissions().mode() & 0o111 != 0;
            let mode = if exec { 0o100755 } else { 0o100644 };
            if meta.len() > limit as u64 {
                let (len, hash) = hash_file(path)?;
                return Ok(Some(FileState {
                    mode,
                    len,
                    hash,
                    content: None,
                }));
            }
            (mode, std::fs::read(path)?)
        };
        let hash = fnv1a(FNV_OFFSET, &bytes);
        Ok(Some(FileState {
            mode,
            len: bytes.len(),
            hash,
            content: Some(bytes),
        }))
    };
    read().unwrap_or_else(|err| {
        tracing::warn!(path = %path.display(), %err, "skipping an unreadable file");
        None
    })
}

fn hash_file(path: &Path) -> std::io::Result<(usize, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let (mut len, mut hash) = (0usize, FNV_OFFSET);
    loop {
        let n = file.read(&mut buf)?;
        let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
            return Ok((len, hash));
        };
        len += n;
        hash = fnv1a(hash, chunk);
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Continues an FNV-1a 64 hash over `bytes`.
fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One side of a file change: its mode and content, if known.
struct Side<'a> {
    mode: u32,
    content: Option<&'a [u8]>,
}

fn files_changes(root: &Path, start: &BTreeMap<Vec<u8>, FileState>) -> WorkspaceChanges {
    let now: BTreeMap<Vec<u8>, PathBuf> = walk(root).into_iter().collect();
    let mut paths: Vec<&Vec<u8>> = start.keys().chain(now.keys()).collect();
    paths.sort();
    paths.dedup();

    let mut changes = WorkspaceChanges {
        changed_paths: Vec::new(),
        patch: String::new(),
    };
    for rel in paths {
        let old = start.get(rel);
        // Read one current file at a time; only a patch's content is kept.
        let new = now
            .get(rel)
            .and_then(|path| read_entry(path, MAX_PATCH_FILE));
        if let (Some(o), Some(n)) = (old, &new) {
            let same = match (&o.content, &n.content) {
                (Some(a), Some(b)) => a == b,
                _ => o.len == n.len && o.hash == n.hash,
            };
            if o.mode == n.mode && same {
                continue;
            }
        }
        let old = old.map(|o| Side {
            mode: o.mode,
            content: o.content.as_deref(),
        });
        let new = new.as_ref().map(|n| Side {
            mode: n.mode,
            content: n.content.as_deref(),
        });
        changes
            .changed_paths
            .push(String::from_utf8_lossy(rel).into_owned());
        let is_link = |side: &Option<Side>| side.as_ref().is_some_and(|s| s.mode == 0o120000);
        if old.is_some() && new.is_some() && is_link(&old) != is_link(&new) {
            // A type change is a deletion plus an addition, as git writes it.
            push_file_diff(&mut changes.patch, rel, old, None);
            push_file_diff(&mut changes.patch, rel, None, new);
        } else {
            push_file_diff(&mut changes.patch, rel, old, new);
        }
    }
    changes
}

/// Appends one file's `diff --git` section.
fn push_file_diff(out: &mut String, rel: &[u8], old: Option<Side>, new: Option<Side>) {
    let a = quote_path("a/", rel);
    let b = quote_path("b/", rel);
    out.push_str(&format!("diff --git {a} {b}\n"));
    match (&old, &new) {
        (None, Some(n)) => out.push_str(&format!("new file mode {:o}\n", n.mode)),
        (Some(o), None) => out.push_str(&format!("deleted file mode {:o}\n", o.mode)),
        (Some(o), Some(n)) if o.mode != n.mode => {
            out.push_str(&format!("old mode {:o}\nnew mode {:o}\n", o.mode, n.mode));
        }
        _ => {}
    }
    let old_content = old.as_ref().map(|o| o.content);
    let new_content = new.as_ref().map(|n| n.content);
    let old_label = if old.is_some() {
        a
    } else {
        "/dev/null".to_string()
    };
    let new_label = if new.is_some() {
        b
    } else {
        "/dev/null".to_string()
    };
    match (as_text(old_content), as_text(new_content)) {
        (Some(old_text), Some(new_text)) => {
            if old_text == new_text {
                return; // a mode change, or an empty file added or deleted
            }
            let tab = if rel.contains(&b' ') { "\t" } else { "" };
            out.push_str(&format!("--- {old_label}{tab}\n+++ {new_label}{tab}\n"));
            push_hunks(out, old_text, new_text);
        }
        _ => out.push_str(&format!(
            "Binary files {old_label} and {new_label} differ\n"
        )),
    }
}

/// A side's text: empty when absent, `None` when unknown or binary.
fn as_text(side: Option<Option<&[u8]>>) -> Option<&str> {
    match side {
        None => Some(""),
        Some(None) => None,
        Some(Some(bytes)) if bytes.contains(&0) => None,
        Some(Some(bytes)) => std::str::from_utf8(bytes).ok(),
    }
}

/// Appends unified hunks turning `old` into `new`, splitting lines at `\n` only.
fn push_hunks(out: &mut String, old: &str, new: &str) {
    let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
    let new_lines: Vec<&str> = new.split_inclusive('\n').collect();
    let deadline = Some(Instant::now() + DIFF_TIMEOUT);
    let ops =
        similar::capture_diff_slices_deadline(Algorithm::Myers, &old_lines, &new_lines, deadline);
    for group in similar::group_diff_ops(ops, CONTEXT) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            hunk_range(old_range),
            hunk_range(new_range)
        ));
        for op in &group {
            let (tag, old_range, new_range) = op.as_tag_tuple();
            match tag {
                DiffTag::Equal => push_lines(out, ' ', &old_lines, old_range),
                DiffTag::Delete => push_lines(out, '-', &old_lines, old_range),
                DiffTag::Insert => push_lines(out, '+', &new_lines, new_range),
                DiffTag::Replace => {
                    push_lines(out, '-', &old_lines, old_range);
                    push_lines(out, '+', &new_lines, new_range);
                }
            }
        }
    }
}

/// Formats a hunk range as git does: 1-based start, count omitted when 1.
fn hunk_range(range: Range<usize>) -> String {
    let len = range.len();
    let start = if len == 0 {
        range.start
    } else {
        range.start + 1
    };
    if len == 1 {
        start.to_string()
    } else {
        format!("{start},{len}")
    }
}

fn push_lines(out: &mut String, sign: char, lines: &[&str], range: Range<usize>) {
    for line in lines.get(range).unwrap_or_default() {
        out.push(sign);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

/// Prefixes a path, C-quoting it as git does when it has special bytes.
fn quote_path(prefix: &str, rel: &[u8]) -> String {
    let special = |b: u8| b < 0x20 || b == 0x7f || b == b'"' || b == b'\\';
    let utf8 = std::str::from_utf8(rel);
    match utf8 {
        Ok(plain) if !rel.iter().any(|&b| special(b)) => return format!("{prefix}{plain}"),
        _ => {}
    }
    let mut quoted = format!("\"{prefix}");
    for &b in rel {
        match b {
            b'"' => quoted.push_str("\\\""),
            b'\\' => quoted.push_str("\\\\"),
            b'\t' => quoted.push_str("\\t"),
            b'\n' => quoted.push_str("\\n"),
            b'\r' => quoted.push_str("\\r"),
            0x20..=0x7e => quoted.push(char::from(b)),
            _ => quoted.push_str(&format!("\\{b:03o}")),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_escapes_special_bytes() {
        assert_eq!(
            quote_path("a/", b"plain/p\xc3\xa9.txt"),
            "a/plain/p\u{e9}.txt"
        );
        assert_eq!(quote_path("b/", b"tab\there"), "\"b/tab\\there\"");
        assert_eq!(quote_path("a/", b"bad\xff"), "\"a/bad\\377\"");
    }
}
