//! Reading sessions without writing them: inspection, export, fork sources
//! and listings.
//!
//! Nothing here takes the writer lock or writes a byte (not even the summary
//! sidecar), so it is safe while a run writes the session. A reader scans
//! the file once and keeps only its index; the complete groups it saw stay
//! valid because a writer only appends after them (or cuts a torn tail,
//! which lies beyond them). Entries are read back one at a time, so memory
//! grows with the number of entries, not with their size.

use std::fs::File;
use std::path::{Path, PathBuf};

use keel_protocol::{Entry, TimestampMs};

use super::index::Index;
use super::scan::{self, io_error};
use super::{JsonlStore, check_id, meta, read_entry};
use crate::{SessionError, SessionInfo, TornTail};

/// A read-only copy of a whole session, for inspection and export.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The session id.
    pub id: String,
    /// The session it was forked from.
    pub parent_session: Option<String>,
    /// The workspace it was created for.
    pub workspace: Option<String>,
    /// When it was created.
    pub created: TimestampMs,
    /// The active leaf.
    pub leaf: Option<String>,
    /// Every entry, in append order.
    pub entries: Vec<Entry>,
    /// A torn tail found (and not repaired: snapshots never write).
    pub torn: Option<TornTail>,
}

/// A consistent, read-only view of one session as scanned: its header, its
/// tree by position, and the file to read entries back from on demand.
#[derive(Debug)]
pub struct SessionReader {
    id: String,
    parent_session: Option<String>,
    workspace: Option<String>,
    created: TimestampMs,
    index: Index,
    torn: Option<TornTail>,
    file: File,
    path: PathBuf,
}

impl SessionReader {
    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The session it was forked from.
    pub fn parent_session(&self) -> Option<&str> {
        self.parent_session.as_deref()
    }

    /// The workspace it was created for.
    pub fn workspace(&self) -> Option<&str> {
        self.workspace.as_deref()
    }

    /// When it was created.
    pub fn created(&self) -> TimestampMs {
        self.created
    }

    /// The active leaf.
    pub fn leaf(&self) -> Option<&str> {
        self.index
            .leaf
            .and_then(|position| self.index.slots.get(position))
            .map(|slot| slot.id.as_str())
    }

    /// A torn tail after the complete groups, left in place (readers never
    /// write; the next writer cuts it). While another process writes, this
    /// may also be its batch in progress.
    pub fn torn(&self) -> Option<&TornTail> {
        self.torn.as_ref()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the session has no entries.
    pub fn is_empty(&self) -> bool {
        self.index.len() == 0
    }

    /// Every entry id, in append order (no payload is read).
    pub fn entry_ids(&self) -> impl Iterator<Item = &str> + Clone {
        self.index.slots.iter().map(|slot| slot.id.as_str())
    }

    /// Each entry's parent as a position in append order (`None` for the
    /// root), in append order: the tree's shape without any payload.
    pub fn parent_positions(&self) -> impl Iterator<Item = Option<usize>> + '_ {
        self.index.slots.iter().map(|slot| slot.parent)
    }

    /// The active leaf's position in append order.
    pub fn leaf_position(&self) -> Option<usize> {
        self.index.leaf
    }

    /// The entry at `position` in append order.
    pub fn entry_at(&self, position: usize) -> Result<Entry, SessionError> {
        let slot = self
            .index
            .slots
            .get(position)
            .ok_or_else(|| SessionError::EntryNotFound {
                session_id: self.id.clone(),
                entry_id: format!("#{position}"),
            })?;
        read_entry(&self.file, &self.path, slot, &mut Vec::new())
    }

    /// Every entry in append order, read one at a time (one line buffer is
    /// reused, so memory is the largest entry, not the session).
    pub fn entries(&self) -> impl Iterator<Item = Result<Entry, SessionError>> + '_ {
        let mut line = Vec::new();
        self.index
            .slots
            .iter()
            .map(move |slot| read_entry(&self.file, &self.path, slot, &mut line))
    }

    /// The ids from the root to the active leaf (no payload is read).
    pub fn active_ids(&self) -> Vec<&str> {
        self.index
            .path_to(self.index.leaf)
            .into_iter()
            .filter_map(|position| self.index.slots.get(position))
            .map(|slot| slot.id.as_str())
            .collect()
    }

    /// The entries from the root to the active leaf.
    pub fn active_branch(&self) -> Result<Vec<Entry>, SessionError> {
        self.active_entries().collect()
    }

    /// The entries from the root to the active leaf, read one at a time.
    pub fn active_entries(&self) -> impl Iterator<Item = Result<Entry, SessionError>> + '_ {
        let mut line = Vec::new();
        self.index
            .path_to(self.index.leaf)
            .into_iter()
            .filter_map(|position| self.index.slots.get(position))
            .map(move |slot| read_entry(&self.file, &self.path, slot, &mut line))
    }

    /// The entries from the root to `entry_id`.
    pub fn path_to(&self, entry_id: &str) -> Result<Vec<Entry>, SessionError> {
        let tip = self
            .index
            .position(entry_id)
            .ok_or_else(|| SessionError::EntryNotFound {
                session_id: self.id.clone(),
                entry_id: entry_id.to_owned(),
            })?;
        self.read_positions(&self.index.path_to(Some(tip)))
    }

    /// The entries from the latest checkpoint's first kept entry (or the
    /// root) to the active leaf: what a model request needs.
    pub(super) fn context_branch(&self) -> Result<Vec<Entry>, SessionError> {
        self.read_positions(&self.index.context_path())
    }

    fn read_positions(&self, positions: &[usize]) -> Result<Vec<Entry>, SessionError> {
        let mut line = Vec::new();
        positions
            .iter()
            .filter_map(|&position| self.index.slots.get(position))
            .map(|slot| read_entry(&self.file, &self.path, slot, &mut line))
            .collect()
    }

    /// Reads every entry into a [`Snapshot`].
    pub fn into_snapshot(self) -> Result<Snapshot, SessionError> {
        let entries = self.entries().collect::<Result<Vec<_>, _>>()?;
        let leaf = self.leaf().map(str::to_owned);
        Ok(Snapshot {
            id: self.id,
            parent_session: self.parent_session,
            workspace: self.workspace,
            created: self.created,
            leaf,
            entries,
            torn: self.torn,
        })
    }
}

impl JsonlStore {
    /// Opens a session for reading: no lock, no repair, no write. A torn
    /// tail is reported ([`SessionReader::torn`]) and left for the next
    /// writer; any other damage is an error.
    pub fn reader(&self, session_id: &str) -> Result<SessionReader, SessionError> {
        let path = self.file(session_id)?;
        // The summary is read before the scan: it only ever describes bytes
        // already in the file, even while a writer appends.
        let summary = meta::read(&self.meta_file(session_id));
        let file = scan::open_regular(&path, false)?;
        let scanned = file.try_clone().map_err(|error| io_error(&path, error))?;
        let scan = scan::scan(scanned, &path, session_id, summary.as_ref())?;
        Ok(SessionReader {
            id: scan.header.id,
            parent_session: scan.header.parent_session,
            workspace: scan.header.workspace,
            created: scan.header.created,
            index: scan.index,
            torn: scan.torn,
            file,
            path,
        })
    }

    /// Reads a whole session without locking or repairing it.
    pub fn snapshot(&self, session_id: &str) -> Result<Snapshot, SessionError> {
        self.reader(session_id)?.into_snapshot()
    }

    /// The ids of the session files in the directory; anything else there
    /// named like one (a FIFO, a link, a directory) is skipped with a warning.
    pub fn session_ids(&self) -> Result<Vec<String>, SessionError> {
        let listing = std::fs::read_dir(&self.dir).map_err(|error| io_error(&self.dir, error))?;
        let mut ids = Vec::new();
        for item in listing.flatten() {
            let name = item.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|name| name.strip_suffix(".jsonl"))
                .filter(|id| check_id(id).is_ok())
            else {
                continue;
            };
            // The entry's own type: a symbolic link is not followed.
            match item.file_type() {
                Ok(kind) if kind.is_file() => ids.push(id.to_owned()),
                Ok(kind) => tracing::warn!(
                    path = %item.path().display(),
                    kind = ?kind,
                    "skipping a session-named entry that is not a regular file"
                ),
                Err(error) => tracing::warn!(
                    path = %item.path().display(),
                    %error,
                    "skipping a session-named entry whose type is unknown"
                ),
            }
        }
        Ok(ids)
    }

    /// Summaries of every session, newest activity first.
    pub(super) fn list_now(&self) -> Result<Vec<SessionInfo>, SessionError> {
        let mut infos: Vec<SessionInfo> = self
            .session_ids()?
            .iter()
            .map(|id| self.info(id, &self.dir.join(format!("{id}.jsonl"))))
            .collect();
        infos.sort_by(|a, b| {
            b.last_activity
                .cmp(&a.last_activity)
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok(infos)
    }

    /// One session's summary: the sidecar if it still describes the file,
    /// else a scan (whose result is not written back: listing never writes).
    fn info(&self, session_id: &str, path: &Path) -> SessionInfo {
        let summary = meta::read(&self.meta_file(session_id));
        let opened = scan::open_regular(path, false);
        let file_len = opened
            .as_ref()
            .ok()
            .and_then(|file| file.metadata().ok())
            .map(|metadata| metadata.len())
            .unwrap_or_default();
        let outcome = opened.and_then(|file| {
            if let Some(cached) = summary.as_ref().filter(|meta| meta.describes(&file)) {
                let mut cached = cached.clone();
                if cached.workspace.is_none() {
                    cached.workspace = scan::header_at(&file, path).and_then(|h| h.workspace);
                }
                return Ok((cached, None));
            }
            let scan = scan::scan(file, path, session_id, summary.as_ref())?;
            let fresh = meta::Meta {
                created: scan.header.created,
                parent_session: scan.header.parent_session.clone(),
                workspace: scan.header.workspace.clone(),
                ..meta::Meta::default()
            }
            .with_index(&scan.index, scan.valid_len, scan.last, 0);
            Ok((fresh, scan.torn))
        });
        let (meta, torn, problem) = match outcome {
            Ok((meta, torn)) => (meta, torn, None),
            Err(error) => {
                // A damaged session still lists under its workspace (from a
                // readable header), so its owner sees it and the way out.
                let header = scan::open_regular(path, false)
                    .ok()
                    .and_then(|file| scan::header_at(&file, path));
                let meta = meta::Meta {
                    created: header.as_ref().map_or(0, |header| header.created),
                    parent_session: header.as_ref().and_then(|h| h.parent_session.clone()),
                    workspace: header.and_then(|header| header.workspace),
                    ..meta::Meta::default()
                };
                (meta, None, Some(error.to_string()))
            }
        };
        SessionInfo {
            id: session_id.to_owned(),
            title: meta.title,
            entries: meta.entries,
            bytes: file_len,
            created: meta.created,
            last_activity: meta.last_activity,
            parent_session: meta.parent_session,
            workspace: meta.workspace,
            problem,
            torn,
        }
    }
}
