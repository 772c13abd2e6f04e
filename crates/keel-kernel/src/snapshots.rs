//! Workspace snapshots in the session (docs/session-format.md): recorded at each run's
//! start and end, materialised elsewhere, and put back in place by a
//! rewind together with the session's leaf.
//!
//! The objects live in the store's [`SessionStore::snapshot_dir`]; a store
//! that keeps none (the in-memory store) records no
//! snapshots, and a rewind there is refused. Recording never fails a run:
//! a snapshot that cannot be taken is reported as a `snapshot_failed`
//! warning and the run goes on without it (a rewind across that run then
//! finds the nearest snapshot that was taken, and treats the paths it
//! cannot vouch for as conflicts).
//!
//! Invariant: an entry naming a manifest is appended only after
//! [`keel_tools::changes::record::record`] made the manifest and its objects
//! durable.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_protocol::{Entry, EntryPayload, SnapshotReason, WorkspaceSnapshot};
use keel_session::{SessionError, SessionStore};
use keel_tools::changes::record::{self, Manifest, ObjectDir, RecordLimits, Recorded};

use crate::error::KernelError;
use crate::ids::{new_id, now_ms};

pub use keel_tools::changes::record::{SnapshotError, Written};

/// Records the workspace at `root` into `dir`'s objects (blocking: callers
/// on the runtime use `spawn_blocking`) and returns the entry payload.
pub(crate) fn record_blocking(
    root: &Path,
    dir: &Path,
    limits: &RecordLimits,
    reason: SnapshotReason,
) -> Result<EntryPayload, SnapshotError> {
    let objects = ObjectDir::create(dir)?;
    let recorded = record::record(root, limits, &objects)?;
    Ok(payload(root, &recorded, reason))
}

/// The entry payload of a recorded snapshot.
pub(crate) fn payload(root: &Path, recorded: &Recorded, reason: SnapshotReason) -> EntryPayload {
    let mut snapshot = WorkspaceSnapshot::new(recorded.id.clone(), reason);
    snapshot.workspace = Some(root.display().to_string());
    snapshot.files = recorded.manifest.files.len() as u64;
    snapshot.bytes = recorded.manifest.bytes();
    snapshot.new_bytes = recorded.new_bytes;
    snapshot.excluded_count = recorded.manifest.excluded.len() as u64;
    snapshot.excluded = recorded
        .manifest
        .excluded
        .iter()
        .take(WorkspaceSnapshot::MAX_LISTED)
        .cloned()
        .collect();
    EntryPayload::WorkspaceSnapshot { snapshot }
}

/// Records a snapshot for a run: `None` (and a log line) when the store
/// keeps none; an error is the caller's to report as a warning.
pub(crate) async fn record_for_run(
    store: &dyn SessionStore,
    session_id: &str,
    root: &Path,
    limits: Option<&RecordLimits>,
    reason: SnapshotReason,
) -> Result<Option<EntryPayload>, SnapshotError> {
    let (Some(dir), Some(limits)) = (store.snapshot_dir(session_id), limits) else {
        return Ok(None);
    };
    let root = root.to_path_buf();
    let limits = limits.clone();
    let task = move || record_blocking(&root, &dir, &limits, reason);
    match tokio::task::spawn_blocking(task).await {
        Ok(result) => result.map(Some),
        Err(join) => Err(SnapshotError::Io {
            what: "recording",
            path: PathBuf::from("the workspace snapshot"),
            source: std::io::Error::other(join.to_string()),
        }),
    }
}

/// The latest snapshot entry on `path` (root first), at or before its end.
pub(crate) fn latest(path: &[Entry]) -> Option<(&Entry, &WorkspaceSnapshot)> {
    path.iter().rev().find_map(|entry| match &entry.payload {
        EntryPayload::WorkspaceSnapshot { snapshot } => Some((entry, snapshot)),
        _ => None,
    })
}

/// Reads manifest `id` from the session's object directory, or from its
/// ancestors' (a fork holds its parent's snapshot entries).
pub(crate) fn load(dirs: &[PathBuf], id: &str) -> Result<(ObjectDir, Manifest), SnapshotError> {
    let mut last = None;
    for dir in dirs {
        match ObjectDir::open(dir).and_then(|objects| {
            let manifest = objects.manifest(id)?;
            Ok((objects, manifest))
        }) {
            Ok(found) => return Ok(found),
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| SnapshotError::Damaged {
        id: id.to_owned(),
        why: "this store keeps no snapshots".into(),
    }))
}

/// The entries from the root to `entry_id`, root first.
pub(crate) fn path_to(entries: &[Entry], entry_id: &str) -> Option<Vec<Entry>> {
    let by_id: std::collections::HashMap<&str, &Entry> = entries
        .iter()
        .map(|entry| (entry.id.as_str(), entry))
        .collect();
    let tip = by_id.get(entry_id)?;
    let path = keel_session::path_from_root(*tip, entries.len(), |entry: &Entry| {
        match &entry.parent_id {
            None => Some(None),
            Some(parent) => by_id.get(parent.as_str()).map(|parent| Some(*parent)),
        }
    })?;
    Some(path.into_iter().cloned().collect())
}

/// The leaf a rewind moves to (`None`: nothing precedes the run), and the
/// snapshot entry and snapshot it puts the workspace back to.
pub(crate) type Destination<'a> = (Option<&'a Entry>, &'a Entry, &'a WorkspaceSnapshot);

/// Where a rewind to the last entry of `path` goes: the entry the leaf
/// moves to, and the snapshot entry (with its snapshot) the workspace is
/// put back to.
///
/// An entry inside a run (from its start snapshot through the entry before
/// its `run_end`) stands for the moment before that run began: the leaf
/// moves to the entry the run began after, the workspace to the run's start
/// snapshot — so the branch never ends inside a run (which would read as
/// interrupted). Any other entry is taken as it is, with the latest
/// snapshot at or before it.
pub(crate) fn destination(path: &[Entry]) -> Option<Destination<'_>> {
    let mut run_began: Option<usize> = None;
    for (at, entry) in path.iter().enumerate() {
        let opens = match &entry.payload {
            EntryPayload::WorkspaceSnapshot { snapshot } => {
                snapshot.reason == SnapshotReason::RunStart
            }
            // A resumed run's `run_start` continues the run already open.
            EntryPayload::RunStart { .. } => true,
            EntryPayload::RunEnd { .. } => {
                run_began = None;
                false
            }
            _ => false,
        };
        if opens && run_began.is_none() {
            run_began = Some(at);
        }
    }
    let (leaf, upto) = match run_began {
        Some(begin) => (begin.checked_sub(1).map(|p| &path[p]), begin + 1),
        None => (path.last(), path.len()),
    };
    let (entry, snapshot) = latest(&path[..upto])?;
    Some((leaf, entry, snapshot))
}

/// What [`crate::AgentKernel::restore_snapshot`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Restored {
    /// The `workspace_snapshot` entry whose snapshot was written.
    pub snapshot_entry_id: String,
    /// The snapshot as its entry records it.
    pub snapshot: WorkspaceSnapshot,
    /// The paths written, and those the snapshot left out (`unknown`).
    pub written: Written,
}

/// What [`crate::AgentKernel::rewind`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rewound {
    /// The `before_rewind` snapshot entry: rewinding to it undoes this rewind.
    pub undo_entry_id: String,
    /// The entry the leaf moved to.
    pub leaf_entry_id: String,
    /// The snapshot entry the workspace was put back to.
    pub snapshot_entry_id: String,
    /// The new leaf: the `rewind` snapshot entry appended after the move.
    pub rewind_entry_id: String,
    /// What was written, removed, and left alone (conflicts and paths no
    /// snapshot vouches for).
    pub written: Written,
}

/// Writes the workspace snapshot in force at `at` (an entry id or a unique
/// prefix of one; the active leaf when `None`) — the latest one recorded at
/// or before it — into `into`, which must be missing or an empty directory.
/// Reads the session only.
pub async fn restore_snapshot(
    store: &Arc<dyn SessionStore>,
    session_id: &str,
    at: Option<&str>,
    into: &Path,
) -> Result<Restored, KernelError> {
    let path = match at {
        Some(wanted) => entry_path(store.as_ref(), session_id, wanted).await?,
        None => store.active_branch(session_id).await?,
    };
    let (entry, snapshot) = latest(&path).ok_or_else(|| KernelError::NoSnapshot {
        session_id: session_id.to_owned(),
        at: at.map_or_else(|| "its leaf".to_owned(), |at| format!("entry {at}")),
    })?;
    let dirs = snapshot_dirs(store.as_ref(), session_id).await?;
    let (manifest, into) = (snapshot.manifest.clone(), into.to_path_buf());
    let written = blocking(move || {
        let (objects, manifest) = load(&dirs, &manifest)?;
        record::materialize(&manifest, &objects, &into)
    })
    .await?;
    Ok(Restored {
        snapshot_entry_id: entry.id.clone(),
        snapshot: snapshot.clone(),
        written,
    })
}

/// Rewinds code and conversation together (docs/session-format.md) in the workspace at
/// `root`: records the workspace as it is (a `before_rewind` snapshot, so
/// the rewind can be undone by rewinding to it), puts back every file the
/// session changed since the snapshot in force at `to` — through `bash`
/// too — and moves the leaf there. An entry inside a run stands for the
/// moment before that run ([`destination`]). Files the session never
/// touched stay as they are; a file changed outside the session since the
/// session last recorded it is a conflict, reported and left alone. Holds
/// the session's writer lease throughout (busy while a run writes it).
///
/// # Cancel safety
///
/// Not cancel safe: dropping the future after the workspace started to
/// change can leave the leaf where it was; the `before_rewind` entry is
/// then already recorded, and rewinding to it puts everything back.
pub async fn rewind(
    store: &Arc<dyn SessionStore>,
    root: &Path,
    limits: &RecordLimits,
    session_id: &str,
    to: &str,
) -> Result<Rewound, KernelError> {
    let _lease = store
        .open_writer(session_id)
        .await
        .map_err(|error| match error {
            SessionError::SessionBusy(id) => KernelError::SessionBusy(id),
            other => KernelError::Session(other),
        })?;
    let no_snapshot = |at: String| KernelError::NoSnapshot {
        session_id: session_id.to_owned(),
        at,
    };
    let dir = store
        .snapshot_dir(session_id)
        .ok_or_else(|| no_snapshot("any entry".into()))?;
    let target_path = entry_path(store.as_ref(), session_id, to).await?;
    let target_id = target_path.last().map(|e| e.id.clone()).unwrap_or_default();
    let (leaf, wanted_entry, wanted) =
        destination(&target_path).ok_or_else(|| no_snapshot(format!("entry {target_id}")))?;
    let leaf = leaf
        .ok_or_else(|| KernelError::NothingBefore(target_id.clone()))?
        .id
        .clone();
    let snapshot_entry_id = wanted_entry.id.clone();
    let branch = store.active_branch(session_id).await?;
    let (_, reference) = latest(&branch).ok_or_else(|| no_snapshot("its leaf".into()))?;
    // Snapshots recorded in another workspace (a run resumed with
    // `--workspace`) say nothing about this one.
    for snapshot in [wanted, reference] {
        if let Some(recorded) = &snapshot.workspace
            && Path::new(recorded) != root
        {
            return Err(KernelError::OtherWorkspace {
                recorded: recorded.clone(),
                root: root.display().to_string(),
            });
        }
    }
    let dirs = snapshot_dirs(store.as_ref(), session_id).await?;
    let (wanted_id, reference_id) = (wanted.manifest.clone(), reference.manifest.clone());
    let (task_root, task_dir, task_limits) = (root.to_path_buf(), dir.clone(), limits.clone());
    let (before, loaded) = blocking(move || {
        let (objects, target) = load(&dirs, &wanted_id)?;
        let (_, reference) = load(&dirs, &reference_id)?;
        let own = ObjectDir::create(&task_dir)?;
        let now = record::record(&task_root, &task_limits, &own)?;
        let before = payload(&task_root, &now, SnapshotReason::BeforeRewind);
        Ok((before, (objects, target, reference, now.manifest)))
    })
    .await?;
    // Nothing in the workspace changes before the `before_rewind` entry is
    // in the session.
    let undo_entry_id = append_at_leaf(store.as_ref(), session_id, before).await?;
    let (objects, target, reference, now) = loaded;
    let task_root = root.to_path_buf();
    let written =
        blocking(move || record::rewind(&task_root, &target, &reference, &now, &objects)).await?;
    store.set_leaf(session_id, &leaf).await?;
    let (task_root, task_limits) = (root.to_path_buf(), limits.clone());
    let mut after = blocking(move || {
        let objects = ObjectDir::create(&dir)?;
        record::record(&task_root, &task_limits, &objects)
    })
    .await
    .map(|recorded| payload(root, &recorded, SnapshotReason::Rewind))?;
    if let EntryPayload::WorkspaceSnapshot { snapshot } = &mut after {
        snapshot.undo_entry_id = Some(undo_entry_id.clone());
    }
    let rewind_entry_id = append_at_leaf(store.as_ref(), session_id, after).await?;
    Ok(Rewound {
        undo_entry_id,
        leaf_entry_id: leaf,
        snapshot_entry_id,
        rewind_entry_id,
        written,
    })
}

/// Appends one entry at the session's leaf (the caller holds its writer
/// lease); returns its id.
async fn append_at_leaf(
    store: &dyn SessionStore,
    session_id: &str,
    payload: EntryPayload,
) -> Result<String, KernelError> {
    let parent = store.leaf(session_id).await?;
    let id = new_id();
    let entry = Entry::new(id.clone(), parent, now_ms(), payload);
    store.append(session_id, vec![entry]).await?;
    Ok(id)
}

/// The entries from the root to the entry `wanted` names (an id or a unique
/// prefix of one).
async fn entry_path(
    store: &dyn SessionStore,
    session_id: &str,
    wanted: &str,
) -> Result<Vec<Entry>, KernelError> {
    let entries = store.entries(session_id).await?;
    let exact = entries.iter().find(|e| e.id == wanted);
    let mut prefixed = entries
        .iter()
        .filter(|e| !wanted.is_empty() && e.id.starts_with(wanted));
    let found = match (exact, prefixed.next(), prefixed.next()) {
        (Some(exact), _, _) => Some(exact.id.clone()),
        (None, Some(only), None) => Some(only.id.clone()),
        _ => None,
    };
    found
        .and_then(|id| path_to(&entries, &id))
        .ok_or_else(|| KernelError::NoSuchEntry {
            session_id: session_id.to_owned(),
            entry_id: wanted.to_owned(),
        })
}

/// The snapshot directories a session's entries may name: its own, then its
/// parent's (a fork copies its parent's entries), and so on.
async fn snapshot_dirs(
    store: &dyn SessionStore,
    session_id: &str,
) -> Result<Vec<PathBuf>, KernelError> {
    let sessions = store.list().await?;
    let mut dirs = Vec::new();
    let mut current = Some(session_id.to_owned());
    while let Some(id) = current.take() {
        if dirs.len() > sessions.len() {
            break;
        }
        dirs.extend(store.snapshot_dir(&id));
        current = sessions
            .iter()
            .find(|info| info.id == id)
            .and_then(|info| info.parent_session.clone());
    }
    Ok(dirs)
}

/// Runs blocking snapshot work off the runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SnapshotError> + Send + 'static,
) -> Result<T, KernelError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(KernelError::from),
        Err(join) => Err(KernelError::Snapshot(SnapshotError::Io {
            what: "working on",
            path: PathBuf::from("the workspace snapshot"),
            source: std::io::Error::other(join.to_string()),
        })),
    }
}
