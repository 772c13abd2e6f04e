//! Workspace snapshots recorded in a session (docs/session-format.md): what the workspace
//! held at a run's start and end, and around a rewind.
//!
//! The snapshot itself (its manifest and the files' bytes) is stored as
//! content-addressed objects beside the session; the entry names the
//! manifest by its SHA-256 and says what was left out.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Why a snapshot was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SnapshotReason {
    /// The workspace as a run found it.
    RunStart,
    /// The workspace as a run left it.
    RunEnd,
    /// The workspace just before a rewind changed it, so the rewind can be
    /// undone by rewinding to this entry.
    BeforeRewind,
    /// The workspace just after a rewind.
    Rewind,
}

/// Why a path is not in a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExclusionReason {
    /// Larger than the per-file limit.
    TooLarge,
    /// A file with several hard links (another of its names may be outside
    /// the workspace, so Keel never reads it).
    HardLinked,
    /// The snapshot's total size budget was spent.
    OverBudget,
    /// Its path or symlink target is not UTF-8.
    NotUtf8,
}

/// A path a snapshot left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SnapshotExclusion {
    /// The path, relative to the workspace root (lossy for a non-UTF-8 path).
    pub path: String,
    /// Why it was left out.
    pub reason: ExclusionReason,
    /// Its size in bytes, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl SnapshotExclusion {
    /// `path` left out for `reason`.
    pub fn new(path: impl Into<String>, reason: ExclusionReason, size: Option<u64>) -> Self {
        Self {
            path: path.into(),
            reason,
            size,
        }
    }
}

/// A recorded workspace snapshot, as its session entry holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkspaceSnapshot {
    /// The SHA-256 (hex) of the snapshot's manifest object.
    pub manifest: String,
    /// Why it was recorded.
    pub reason: SnapshotReason,
    /// How many files and symlinks it holds.
    pub files: u64,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Bytes this snapshot added to the session's object store (what the
    /// earlier snapshots did not already hold).
    pub new_bytes: u64,
    /// The paths left out, at most [`WorkspaceSnapshot::MAX_LISTED`] of them
    /// (`excluded_count` says how many there were). Paths git ignores and
    /// `.git` are never walked, so they are not listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<SnapshotExclusion>,
    /// How many paths were left out in all.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub excluded_count: u64,
    /// The workspace root it was recorded in (absent in none Keel writes;
    /// a rewind refuses snapshots of another workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// For a `rewind` snapshot: the `before_rewind` entry that undoes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_entry_id: Option<String>,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl WorkspaceSnapshot {
    /// The most exclusions an entry lists.
    pub const MAX_LISTED: usize = 50;

    /// A snapshot entry for manifest `manifest`.
    pub fn new(manifest: impl Into<String>, reason: SnapshotReason) -> Self {
        Self {
            manifest: manifest.into(),
            reason,
            files: 0,
            bytes: 0,
            new_bytes: 0,
            excluded: Vec::new(),
            excluded_count: 0,
            workspace: None,
            undo_entry_id: None,
        }
    }
}
