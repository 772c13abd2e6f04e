//! The sidecar summary that lets `list` skip parsing session files.
//!
//! `<id>.meta.json` caches a session's title, entry count and last activity,
//! stamped with the length of the session file it describes. It is a cache:
//! written after each batch without fsync, trusted only while the stamp
//! matches the file, and rebuilt by a scan otherwise.

use std::path::Path;

use keel_protocol::TimestampMs;
use serde::{Deserialize, Serialize};

use super::index::Index;

/// A session's summary, as cached.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub(crate) file_len: u64,
    pub(crate) title: Option<String>,
    pub(crate) entries: usize,
    pub(crate) created: TimestampMs,
    pub(crate) last_activity: TimestampMs,
    pub(crate) parent_session: Option<String>,
}

impl Meta {
    /// This summary updated from an index and a file length.
    pub(crate) fn with_index(&self, index: &Index, file_len: u64) -> Self {
        Self {
            file_len,
            title: index.title.clone(),
            entries: index.len(),
            last_activity: index.last_activity.max(self.created),
            ..self.clone()
        }
    }
}

/// Reads a cached summary, if present and parseable.
pub(crate) fn read(path: &Path) -> Option<Meta> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Replaces the cached summary; failures only cost a later rescan.
pub(crate) fn write(path: &Path, meta: &Meta) {
    let Ok(bytes) = serde_json::to_vec(meta) else {
        return;
    };
    let temporary = path.with_extension("json.tmp");
    let result = std::fs::write(&temporary, bytes).and_then(|()| std::fs::rename(&temporary, path));
    if let Err(error) = result {
        tracing::debug!(%error, path = %path.display(), "could not update the session summary");
    }
}
