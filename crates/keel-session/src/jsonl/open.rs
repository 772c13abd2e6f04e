//! Opening a session file for writing, and creating one.
//!
//! Opening takes the file's exclusive lock before anything else, then scans
//! it; the only write it may make is cutting a torn tail the scan proved
//! (a prefix of the last write batch, and not below the length the summary
//! sidecar recorded as acknowledged). A refused file is never touched.
//! Creating writes the header with `create_new` and syncs it and the
//! directory; if that fails, the partial file is removed, so a full disk
//! leaves no session behind.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};

use nix::fcntl::{Flock, FlockArg};

use super::format::{self, Header};
use super::scan::{self, io_error};
use super::writer::{self, Job, State, WriterSetup};
use super::{JsonlStore, meta};
use crate::{NewSession, SessionError, TornTail};
use keel_protocol::now_ms;

/// A session opened for writing by this store.
#[derive(Debug)]
pub(super) struct OpenSession {
    pub(super) state: Arc<Mutex<State>>,
    /// Taken on drop, which lets the writer finish and exit.
    pub(super) jobs: Option<mpsc::Sender<Job>>,
    writer: Option<std::thread::JoinHandle<()>>,
    pub(super) reader: File,
    /// The torn tail cut off when the session was opened.
    pub(super) repaired: Option<TornTail>,
    _lock: Flock<File>,
}

impl Drop for OpenSession {
    /// Closes the writer and waits for it, so its last summary is written.
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl JsonlStore {
    /// Whether a writer holds `session_id` open now: this store, or another
    /// process (its file is locked). A snapshot: it may change at once.
    pub fn is_open(&self, session_id: &str) -> bool {
        let open_here = self
            .open
            .lock()
            .map_or(true, |open| open.contains_key(session_id));
        if open_here {
            return true;
        }
        let Ok(path) = self.file(session_id) else {
            return false;
        };
        match scan::open_regular(&path, true) {
            Ok(file) => Flock::lock(file, FlockArg::LockExclusiveNonblock).is_err(),
            Err(_) => false,
        }
    }

    /// Deletes the session `session_id` for good: its file, its summary and
    /// its journal directory; returns the bytes freed.
    ///
    /// Refused while the session is open for writing — here
    /// ([`SessionError::SessionBusy`]) or by another process
    /// ([`SessionError::Locked`]): the file is locked like a writer's for
    /// the whole removal, and deleted last, so a removal cut short leaves
    /// at worst a session without its summary (rebuilt on the next read)
    /// or journal (which only an interrupted run needs; the caller keeps
    /// those). Nothing is followed out of the store: a link in a
    /// session's name is removed as a link.
    pub fn remove(&self, session_id: &str) -> Result<u64, SessionError> {
        let path = self.file(session_id)?;
        let open_here = self
            .open
            .lock()
            .map_err(|_| SessionError::Unavailable("store lock poisoned".into()))?
            .contains_key(session_id);
        if open_here {
            return Err(SessionError::SessionBusy(session_id.to_owned()));
        }
        let file = scan::open_regular(&path, true)?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|_| SessionError::Locked(session_id.to_owned()))?;
        let mut freed = lock.metadata().map(|meta| meta.len()).unwrap_or(0);
        let meta_path = self.meta_file(session_id);
        freed += remove_entry(&meta_path)?;
        if let Some(journal) = crate::SessionStore::journal_dir(self, session_id) {
            freed += remove_entry(&journal)?;
        }
        if let Some(snapshots) = crate::SessionStore::snapshot_dir(self, session_id) {
            freed += remove_entry(&snapshots)?;
        }
        std::fs::remove_file(&path).map_err(|error| io_error(&path, error))?;
        drop(lock);
        Ok(freed)
    }

    /// Locks, scans and (only for a proven torn tail) repairs the file, then
    /// starts its writer.
    pub(super) fn open_for_writing_now(
        &self,
        session_id: &str,
        path: &Path,
    ) -> Result<OpenSession, SessionError> {
        let file = scan::open_regular(path, true)?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|_| SessionError::Locked(session_id.to_owned()))?;
        // A removal (`remove`) holds the lock until the file is unlinked:
        // a file opened just before that is no longer the session's.
        still_named(&lock, path, session_id)?;
        let meta_path = self.meta_file(session_id);
        let summary = meta::read(&meta_path);
        let scanned = lock.try_clone().map_err(|error| io_error(path, error))?;
        let scan = scan::scan(scanned, path, session_id, summary.as_ref())?;
        let mut file = lock.try_clone().map_err(|error| io_error(path, error))?;
        if let Some(torn) = &scan.torn {
            tracing::warn!(
                session = session_id,
                line = torn.line,
                bytes = torn.bytes,
                reason = %torn.reason,
                "cutting off a torn tail"
            );
            file.set_len(scan.valid_len)
                .and_then(|()| file.sync_data())
                .map_err(|error| io_error(path, error))?;
        }
        file.seek(SeekFrom::Start(scan.valid_len))
            .map_err(|error| io_error(path, error))?;
        let reader = lock.try_clone().map_err(|error| io_error(path, error))?;
        let state = Arc::new(Mutex::new(State {
            index: scan.index,
            pending: Vec::new(),
            poisoned: None,
        }));
        let meta_base = meta::Meta {
            created: scan.header.created,
            parent_session: scan.header.parent_session.clone(),
            workspace: scan.header.workspace.clone(),
            ..meta::Meta::default()
        };
        let (jobs, receiver) = mpsc::channel();
        let setup = WriterSetup {
            file,
            len: scan.valid_len,
            next_group: scan.next_group,
            state: Arc::clone(&state),
            meta_path,
            meta_base,
        };
        let writer = writer::spawn(setup, receiver).map_err(|error| io_error(path, error))?;
        Ok(OpenSession {
            state,
            jobs: Some(jobs),
            writer: Some(writer),
            reader,
            repaired: scan.torn,
            _lock: lock,
        })
    }

    /// Writes a new session's header; on failure nothing is left behind.
    pub(super) fn create_file(&self, new: &NewSession) -> Result<String, SessionError> {
        let id = new
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let path = self.file(&id)?;
        let header = Header {
            format: format::FORMAT.into(),
            version: format::VERSION,
            id: id.clone(),
            created: now_ms(),
            parent_session: new.parent_session.clone(),
            workspace: new.workspace.clone(),
        };
        let line = format::encode_header(&header)
            .map_err(|error| SessionError::Unavailable(error.to_string()))?;
        let mut file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(SessionError::SessionExists(id));
            }
            Err(error) => return Err(io_error(&path, error)),
        };
        // A summary left by an earlier session of this id describes another
        // file; it must not vouch for this one.
        remove_if_present(&self.meta_file(&id));
        let written = std::io::Write::write_all(&mut file, &line)
            .and_then(|()| file.sync_all())
            .and_then(|()| File::open(&self.dir)?.sync_all());
        if let Err(error) = written {
            drop(file);
            remove_if_present(&path);
            return Err(io_error(&path, error));
        }
        Ok(id)
    }
}

/// Removes `path`; a file already gone is fine, anything else is logged.
fn remove_if_present(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(%error, path = %path.display(), "could not remove a leftover file");
        }
    }
}

/// Removes `path` if it is there — a directory with everything in it, a
/// file, or a link (never what it points at) — and returns the bytes of
/// the files removed.
fn remove_entry(path: &Path) -> Result<u64, SessionError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(io_error(path, error)),
    };
    if !meta.is_dir() {
        std::fs::remove_file(path).map_err(|error| io_error(path, error))?;
        return Ok(if meta.is_file() { meta.len() } else { 0 });
    }
    let mut freed = 0;
    let listing = std::fs::read_dir(path).map_err(|error| io_error(path, error))?;
    for item in listing {
        let item = item.map_err(|error| io_error(path, error))?;
        freed += remove_entry(&item.path())?;
    }
    std::fs::remove_dir(path).map_err(|error| io_error(path, error))?;
    Ok(freed)
}

/// Refuses a locked `file` that is no longer the one at `path` (removed, or
/// replaced, while it was being opened).
fn still_named(file: &File, path: &Path, session_id: &str) -> Result<(), SessionError> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata().map_err(|error| io_error(path, error))?;
    match std::fs::symlink_metadata(path) {
        Ok(named) if named.ino() == held.ino() && named.dev() == held.dev() => Ok(()),
        Ok(_) => Err(SessionError::Locked(session_id.to_owned())),
        Err(_) => Err(SessionError::SessionNotFound(session_id.to_owned())),
    }
}
