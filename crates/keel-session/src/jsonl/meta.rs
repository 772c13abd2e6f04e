//! The sidecar summary that lets `list` skip parsing session files.
//!
//! `<id>.meta.json` (mode `0600`: it holds the first prompt) caches a
//! session's title, entry count and last activity, stamped with what it
//! describes: the session file's length, its modification time, and the
//! offset, write batch and checksum of its last record. It is a cache:
//! written by the session's writer after synced batches, without fsync,
//! trusted only while every stamp matches the file (the last record is
//! re-read and its checksum verified), and rebuilt by a scan otherwise. An
//! edit before the last record that keeps the length and restores the
//! modification time goes unnoticed by the summary (a scan still refuses
//! it when the session is read or opened).
//!
//! Because the writer refreshes it only after a batch was synced, the length
//! it records was acknowledged: a file found shorter than its summary (of the
//! same creation) lost acknowledged records to something other than a crash,
//! and the scan refuses it instead of cutting more.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use keel_protocol::TimestampMs;
use serde::{Deserialize, Serialize};

use super::index::Index;
use super::scan::LastRecord;

/// A session's summary, as cached.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub(crate) file_len: u64,
    /// The file's modification time, in nanoseconds since the epoch.
    pub(crate) modified_ns: u128,
    /// The last record's line offset, write batch and checksum.
    pub(crate) last: Option<(u64, u64, u32)>,
    pub(crate) title: Option<String>,
    pub(crate) entries: usize,
    pub(crate) created: TimestampMs,
    pub(crate) last_activity: TimestampMs,
    pub(crate) parent_session: Option<String>,
    /// The workspace from the header (absent in summaries written before
    /// it was cached: the listing then reads the header).
    #[serde(default)]
    pub(crate) workspace: Option<String>,
}

impl Meta {
    /// This summary updated from an index and the file's state.
    pub(crate) fn with_index(
        &self,
        index: &Index,
        file_len: u64,
        last: Option<LastRecord>,
        modified_ns: u128,
    ) -> Self {
        Self {
            file_len,
            modified_ns,
            last: last.map(|last| (last.offset, last.batch, last.crc)),
            title: index.title.clone(),
            entries: index.len(),
            last_activity: index.last_activity.max(self.created),
            ..self.clone()
        }
    }

    /// Whether this summary still describes `file`: same length and
    /// modification time, and its last record is where and what it says.
    pub(crate) fn describes(&self, file: &File) -> bool {
        let Ok(metadata) = file.metadata() else {
            return false;
        };
        if metadata.len() != self.file_len || modified_ns(&metadata) != Some(self.modified_ns) {
            return false;
        }
        let Some((offset, batch, crc)) = self.last else {
            return true;
        };
        // The last line, re-read and re-checked: it must start where the
        // summary says, in its batch, and carry its checksum.
        let Some(length) = self
            .file_len
            .checked_sub(offset)
            .and_then(|length| usize::try_from(length).ok())
            .filter(|&length| offset > 0 && length > 1)
        else {
            return false;
        };
        let mut line = vec![0; length + 1];
        if file.read_exact_at(&mut line, offset - 1).is_err() {
            return false;
        }
        let head = format!("\n{{\"b\":{batch},");
        line.starts_with(head.as_bytes())
            && line.ends_with(b"\n")
            && line
                .get(1..line.len() - 1)
                .and_then(super::format::verified_crc)
                == Some(crc)
    }
}

/// A file's modification time in nanoseconds since the epoch.
pub(crate) fn modified_ns(metadata: &std::fs::Metadata) -> Option<u128> {
    metadata
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|elapsed| elapsed.as_nanos())
}

/// Reads a cached summary, if present and parseable.
pub(crate) fn read(path: &Path) -> Option<Meta> {
    let file = super::scan::open_regular(path, false).ok()?;
    serde_json::from_reader(std::io::BufReader::new(file)).ok()
}

/// Replaces the cached summary (private to the user); failures only cost a
/// later rescan.
pub(crate) fn write(path: &Path, meta: &Meta) {
    let Ok(bytes) = serde_json::to_vec(meta) else {
        return;
    };
    let temporary = path.with_extension("json.tmp");
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut file| {
            // A leftover temporary file keeps its old mode: narrow it.
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            file.write_all(&bytes)
        })
        .and_then(|()| std::fs::rename(&temporary, path));
    if let Err(error) = result {
        tracing::debug!(%error, path = %path.display(), "could not update the session summary");
    }
}
