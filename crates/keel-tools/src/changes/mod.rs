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
//! **What a snapshot holds** (see `scan`): the regular files and symlinks
//! under the root that git's ignore rules keep (plus any the repository
//! tracks), each read by Keel itself beneath a handle of the root. A file
//! over [`SnapshotLimits::max_file`] or with several hard links is never
//! read: it is recorded by size and modification time, and a change to it
//! is listed with a `Binary files … differ` section, which says that it
//! changed but not how (`git apply` rejects such a patch). FIFOs, sockets
//! and devices are never opened. Each snapshot and each report runs under
//! [`SnapshotLimits::budget`]; past it, that call fails with
//! [`ChangesError::TimedOut`] instead of stalling the run.
//!
//! **Git workspaces.** When the root lies inside a git work tree (a `.git`
//! in it or an ancestor), the snapshot is a git tree object in Keel's own
//! *shadow* repository in a private scratch directory (`shadow`, under
//! [`SnapshotLimits::spill_under`]): Keel streams the bytes
//! it read into `git fast-import` there. The patch is
//! `git diff-tree -p --binary -M --full-index` between the start and end
//! trees, so renames and binary files apply with `git apply --binary`.
//! Invariants:
//! - git never runs in the workspace's repository and never reads the
//!   workspace — where the sandbox can be enforced it runs confined to the
//!   shadow repository and cannot see the workspace at all
//!   ([`Baseline::git_confined`]): no hook, filter driver, fsmonitor, alias, include or
//!   attribute of that repository or of the user applies, whatever the
//!   model wrote into `.git` or `.gitattributes`. The repository is read
//!   by Keel only to find it (`.git`, `HEAD`) and to copy its index, whose
//!   list of tracked paths the shadow repository prints;
//! - the user's index, `HEAD`, refs, objects and working tree are never
//!   touched;
//! - the patch is valid UTF-8: if git's output is not (a Latin-1 text file,
//!   a non-UTF-8 path), the affected file sections are regenerated as binary
//!   patches with quoted paths (needs git ≥ 2.42 for `--attr-source`).
//!
//! A file whose stamp (device, inode, size, times, mode) has not changed
//! since the start snapshot, and which had settled before it, is not read
//! again at the end. If git is not installed or the shadow repository
//! fails, Keel falls back to its own diff.
//!
//! **Other workspaces.** Keel keeps each file of the start snapshot: files
//! up to 1 MiB, within a 64 MiB total budget, either in memory or — when
//! the caller names a directory ([`SnapshotLimits::spill_under`]) — in a
//! private spill directory (`spill`: content-addressed 0600 files in a 0700
//! directory, removed with the baseline), so that a baseline's heap is only
//! paths, sizes and hashes; of the rest only length and an FNV-1a hash. At the end, files are read one at a time.
//! The patch is git-compatible (`diff --git` headers, modes, `/dev/null`
//! for additions and deletions, `\ No newline at end of file`, lines split
//! at `\n` only), with no rename detection (a rename is a deletion plus an
//! addition). Limitation: a changed file that contains a NUL byte or is not
//! UTF-8 on either side, or whose content was not kept, appears as
//! `Binary files … differ`: the path is listed, but `git apply` rejects the
//! patch. Ignore files are honoured, so a file that becomes ignored during
//! the run shows as deleted. A `git init` during the run changes nothing:
//! the end state is read the way the start state was.

mod files;
mod git;
pub mod gitcode;
pub mod quarantine;
pub mod record;
mod scan;
mod shadow;
mod spill;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::env::HostEnv;
use files::{FilesBaseline, capture_files, files_changes};
use git::{Snapshot, UserRepo, find_repository, git_changes, snapshot, tracked_paths};
use scan::Scan;
use shadow::Shadow;
use spill::Spill;

/// Why the run's changes could not be computed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The snapshot took longer than its time budget and was abandoned.
    #[error("the workspace snapshot took longer than its {budget:?} budget (while {what})")]
    TimedOut {
        /// The budget that was spent.
        budget: Duration,
        /// What Keel was doing when it ran out.
        what: String,
    },
}

/// The caps on one snapshot of the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnapshotLimits {
    /// Files larger than this are never read, only compared by size and
    /// modification time (default 64 MiB).
    pub max_file: u64,
    /// How long one snapshot (and one report) may take (default 60 s).
    pub budget: Duration,
    /// The scratch directory a baseline makes its private directories in
    /// (normally the OS temp dir, which the host looks up), each removed
    /// when the baseline drops: a git baseline's shadow repository, and a
    /// non-git baseline's start contents it diffs against, so that
    /// baseline itself holds only paths, sizes and hashes. `None` (the
    /// default): the shadow repository goes under `/tmp` and a non-git
    /// baseline keeps the contents in memory, up to 64 MiB.
    pub spill_under: Option<PathBuf>,
    /// The host's environment snapshot; only its `PATH` is used, to find
    /// git ([`HostEnv::search_path`]: Keel's default `PATH` when empty, as
    /// by default). Git gets nothing else of it.
    pub env: HostEnv,
}

impl Default for SnapshotLimits {
    fn default() -> Self {
        SnapshotLimits {
            max_file: 64 << 20,
            budget: Duration::from_secs(60),
            spill_under: None,
            env: HostEnv::empty(),
        }
    }
}

/// The instant a snapshot must be done by.
#[derive(Debug, Clone)]
pub(crate) struct Deadline {
    at: Instant,
    budget: Duration,
}

impl Deadline {
    fn new(budget: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + budget,
            budget,
        }
    }

    /// Fails once the budget is spent; `what` says what was going on.
    fn check(&self, what: &str) -> Result<(), ChangesError> {
        if Instant::now() > self.at {
            return Err(ChangesError::TimedOut {
                budget: self.budget,
                what: what.to_owned(),
            });
        }
        Ok(())
    }

    /// The time left.
    fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }
}

/// What a run changed: the paths and a patch that replays it with `git apply`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct WorkspaceChanges {
    /// Changed paths relative to the root, sorted; a rename lists both paths.
    pub changed_paths: Vec<String>,
    /// A unified, git-compatible patch from the start state to the end state.
    pub patch: String,
    /// Repository code the run's commands planted or changed
    /// ([`gitcode`]); the kernel fills it in, a [`Baseline`] leaves it empty.
    pub git_code: Vec<keel_protocol::GitCodeChange>,
}

impl WorkspaceChanges {
    /// Whether the run changed nothing.
    pub fn is_empty(&self) -> bool {
        self.changed_paths.is_empty() && self.patch.is_empty() && self.git_code.is_empty()
    }
}

/// The workspace state at run start, to diff the end state against.
pub struct Baseline {
    root: PathBuf,
    limits: SnapshotLimits,
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
    Git(Box<GitBaseline>),
    Files(Box<FilesBaseline>),
}

/// A git baseline: the shadow repository and the start snapshot in it.
struct GitBaseline {
    shadow: Shadow,
    repo: UserRepo,
    start: Snapshot,
    /// Serialises the end snapshots written into the shadow repository.
    lock: Mutex<()>,
}

impl Baseline {
    /// Snapshots the workspace at `root` (blocking), with the default limits.
    pub fn capture(root: &Path) -> Result<Baseline, ChangesError> {
        Baseline::capture_with(root, SnapshotLimits::default())
    }

    /// Snapshots the workspace at `root` (blocking) within `limits`; the
    /// reports of [`Baseline::changes`] keep to the same limits.
    pub fn capture_with(root: &Path, limits: SnapshotLimits) -> Result<Baseline, ChangesError> {
        let context = || format!("reading {}", root.display());
        let meta = std::fs::metadata(root).map_err(|e| io_err(context(), e))?;
        if !meta.is_dir() {
            let e = std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory");
            return Err(io_err(context(), e));
        }
        let root = std::fs::canonicalize(root).map_err(|e| io_err(context(), e))?;
        let kind = match find_repository(&root) {
            Some(repo) => match capture_git(&root, repo, &limits) {
                Ok(kind) => kind,
                Err(err @ ChangesError::TimedOut { .. }) => return Err(err),
                Err(err) => {
                    tracing::warn!(%err, "git snapshot failed; using Keel's own diff");
                    capture_own(&root, &limits)?
                }
            },
            None => capture_own(&root, &limits)?,
        };
        Ok(Baseline { root, limits, kind })
    }

    /// The workspace root this baseline was captured from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this baseline is a git snapshot (rather than Keel's own).
    pub fn is_git(&self) -> bool {
        matches!(self.kind, Kind::Git(_))
    }

    /// Whether this baseline's git runs inside Keel's sandbox (a git
    /// baseline on a machine that can enforce it; see `shadow`).
    pub fn git_confined(&self) -> bool {
        match &self.kind {
            Kind::Git(git) => git.shadow.is_confined(),
            Kind::Files(_) => false,
        }
    }

    /// Computes the changes from the baseline to the current state
    /// (blocking), within the baseline's limits.
    pub fn changes(&self) -> Result<WorkspaceChanges, ChangesError> {
        let scan = Scan::new(&self.root, &self.limits)?;
        match &self.kind {
            Kind::Git(git) => {
                let _guard = git
                    .lock
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let tracked = tracked_paths(&git.shadow, &git.repo, scan.deadline());
                let end = snapshot(&git.shadow, &scan, &tracked, Some(&git.start))?;
                git_changes(&git.shadow, &git.start, &end, scan.deadline())
            }
            Kind::Files(files) => files_changes(&scan, files),
        }
    }

    /// Approximately how many bytes of heap the baseline holds: for Keel's
    /// own snapshot, its paths, per-file records and any contents kept in
    /// memory (none when they are spilled, see
    /// [`SnapshotLimits::spill_under`]).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Baseline>()
            + match &self.kind {
                Kind::Git(_) => std::mem::size_of::<GitBaseline>(),
                Kind::Files(files) => files.heap_bytes(),
            }
    }

    /// The private directory holding the spilled start contents, if any;
    /// it is removed when the baseline drops.
    pub fn spill_dir(&self) -> Option<&Path> {
        match &self.kind {
            Kind::Files(files) => files.spill.as_ref().map(Spill::dir),
            Kind::Git(_) => None,
        }
    }
}

/// Keel's own snapshot, spilling kept contents when the limits say where.
fn capture_own(root: &Path, limits: &SnapshotLimits) -> Result<Kind, ChangesError> {
    let scan = Scan::new(root, limits)?;
    let spill = match &limits.spill_under {
        Some(parent) => Some(Spill::create(parent)?),
        None => None,
    };
    Ok(Kind::Files(Box::new(capture_files(&scan, spill)?)))
}

/// Creates the shadow repository and takes the start snapshot into it.
fn capture_git(root: &Path, repo: UserRepo, limits: &SnapshotLimits) -> Result<Kind, ChangesError> {
    let scan = Scan::new(root, limits)?;
    let scratch = match &limits.spill_under {
        Some(dir) => dir.as_path(),
        None => Path::new(shadow::DEFAULT_SCRATCH),
    };
    let shadow = Shadow::create(scratch, &limits.env)?;
    let tracked = tracked_paths(&shadow, &repo, scan.deadline());
    let start = snapshot(&shadow, &scan, &tracked, None)?;
    Ok(Kind::Git(Box::new(GitBaseline {
        shadow,
        repo,
        start,
        lock: Mutex::new(()),
    })))
}

fn io_err(context: String, source: std::io::Error) -> ChangesError {
    ChangesError::Io { context, source }
}
