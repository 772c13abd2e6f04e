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

mod files;
mod git;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use files::{FileState, capture_files, files_changes};
use git::{TempIndex, capture_git, git_changes, snapshot_tree, uses_git};

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
