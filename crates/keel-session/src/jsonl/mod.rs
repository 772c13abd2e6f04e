//! The JSONL store: one append-only file per session, Keel's embedded default.
//!
//! `<dir>/<id>.jsonl` holds a versioned header line naming the session and
//! then framed, checksummed records (see `format`). A session is opened for
//! writing on first use through [`SessionStore`] (`open`): the file is locked
//! (advisory, exclusive), so a second writer — another process, or another
//! store in this one — is refused instead of forking the tree; it is scanned
//! as a stream into an index; a torn tail — only ever a prefix of the last
//! write batch (see `scan`) — is cut off and reported as a [`Repair`];
//! anything else is refused untouched. Appends go through a group-commit
//! writer thread and are acknowledged only after fsync.
//!
//! Reading (`read`: [`JsonlStore::reader`], `snapshot`, `list`, and the
//! source of `fork`) never takes the lock and never writes: it sees the
//! complete groups present when it scanned, which a concurrent writer only
//! ever appends to.

mod format;
mod index;
mod meta;
mod open;
mod read;
mod salvage;
mod scan;
mod writer;

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use keel_protocol::Entry;

use self::format::Record;
use self::index::Slot;
use self::open::OpenSession;
use self::scan::io_error;
use self::writer::State;
use crate::{NewSession, Repair, SessionError, SessionInfo, SessionStore, StoreFuture, TornTail};

pub use self::read::{SessionReader, Snapshot};
pub use self::salvage::{LostSpan, SalvageReport};

/// Sessions as JSONL files in one directory.
#[derive(Debug)]
pub struct JsonlStore {
    dir: PathBuf,
    open: Mutex<HashMap<String, Arc<OpenSession>>>,
}

impl JsonlStore {
    /// A store over `dir`, created (private to the user) if missing.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, SessionError> {
        let dir = dir.into();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|error| io_error(&dir, &error))?;
        Ok(Self {
            dir,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// The directory the sessions live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The torn tail cut off when this store opened the session, if any.
    pub fn repaired_tail(&self, session_id: &str) -> Option<TornTail> {
        let open = self.open.lock().ok()?;
        open.get(session_id)
            .and_then(|session| session.repaired.clone())
    }

    /// The file that holds `session_id` (the id is checked, the file need not exist).
    pub fn file(&self, session_id: &str) -> Result<PathBuf, SessionError> {
        check_id(session_id)?;
        Ok(self.dir.join(format!("{session_id}.jsonl")))
    }

    fn meta_file(&self, session_id: &str) -> PathBuf {
        self.dir.join(format!("{session_id}.meta.json"))
    }

    /// The session, opened for writing on first use.
    fn session(&self, session_id: &str) -> Result<Arc<OpenSession>, SessionError> {
        let mut open = self
            .open
            .lock()
            .map_err(|_| SessionError::Io("store lock poisoned".into()))?;
        if let Some(session) = open.get(session_id) {
            return Ok(Arc::clone(session));
        }
        let path = self.file(session_id)?;
        let session = Arc::new(self.open_for_writing_now(session_id, &path)?);
        open.insert(session_id.to_owned(), Arc::clone(&session));
        Ok(session)
    }

    fn read_branch(
        &self,
        session_id: &str,
        context_only: bool,
    ) -> Result<Vec<Entry>, SessionError> {
        let session = self.session(session_id)?;
        let slots: Vec<Slot> = {
            let state = lock_state(&session)?;
            let positions = if context_only {
                state.index.context_path()
            } else {
                state.index.path_to(state.index.leaf)
            };
            positions
                .iter()
                .filter_map(|&p| state.index.slots.get(p).cloned())
                .collect()
        };
        let path = self.file(session_id)?;
        let mut line = Vec::new();
        slots
            .iter()
            .map(|slot| read_entry(&session.reader, &path, slot, &mut line))
            .collect()
    }

    fn enqueue(
        &self,
        session_id: &str,
        records: Vec<Record>,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<(), String>>, SessionError> {
        let session = self.session(session_id)?;
        let mut state = lock_state(&session)?;
        validate(&state, &records)?;
        for record in &records {
            if let Record::Entry { entry } = record {
                state.pending.push(entry.id.clone());
            }
        }
        let (ack, done) = tokio::sync::oneshot::channel();
        session
            .jobs
            .as_ref()
            .ok_or_else(|| SessionError::Io("the session is closing".into()))?
            .send(writer::Job { records, ack })
            .map_err(|_| SessionError::Io("the session writer has stopped".into()))?;
        Ok(done)
    }
}

fn validate(state: &State, records: &[Record]) -> Result<(), SessionError> {
    if let Some(reason) = &state.poisoned {
        return Err(SessionError::Io(format!(
            "the session is unusable after a failed write ({reason}); reopen it"
        )));
    }
    if records.is_empty() {
        return Err(SessionError::EmptyAppend);
    }
    let mut pending: Vec<&str> = state.pending.iter().map(String::as_str).collect();
    for record in records {
        match record {
            Record::Entry { entry } => {
                state
                    .index
                    .check(&entry.id, entry.parent_id.as_deref(), &pending)
                    .map_err(tree_error)?;
                pending.push(&entry.id);
            }
            Record::Leaf { leaf_id } => {
                if !state.index.contains(leaf_id) && !pending.contains(&leaf_id.as_str()) {
                    return Err(SessionError::EntryNotFound {
                        session_id: String::new(),
                        entry_id: leaf_id.clone(),
                    });
                }
            }
        }
    }
    Ok(())
}

fn tree_error(fault: index::TreeFault) -> SessionError {
    match fault {
        index::TreeFault::Duplicate(id) => SessionError::DuplicateEntry(id),
        index::TreeFault::SecondRoot(id) => SessionError::SecondRoot(id),
        index::TreeFault::MissingParent {
            entry_id,
            parent_id,
        } => SessionError::MissingParent {
            entry_id,
            parent_id,
        },
        index::TreeFault::UnknownLeaf(id) => SessionError::EntryNotFound {
            session_id: String::new(),
            entry_id: id,
        },
    }
}

fn lock_state(session: &OpenSession) -> Result<std::sync::MutexGuard<'_, State>, SessionError> {
    session
        .state
        .lock()
        .map_err(|_| SessionError::Io("session state lock poisoned".into()))
}

/// Reads one entry back from its line, into `line` (reused between calls so
/// reading a branch allocates one line buffer, not one per entry).
fn read_entry(
    file: &std::fs::File,
    path: &Path,
    slot: &Slot,
    line: &mut Vec<u8>,
) -> Result<Entry, SessionError> {
    line.clear();
    line.resize(slot.len as usize, 0);
    file.read_exact_at(line, slot.offset)
        .map_err(|error| io_error(path, &error))?;
    match format::decode_line(line) {
        Ok(record) => match record {
            Record::Entry { entry } => Ok(entry),
            Record::Leaf { .. } => {
                Err(reread_fault(path, slot, "a leaf record where an entry was"))
            }
        },
        Err(_) => Err(reread_fault(
            path,
            slot,
            "the record changed on disk since the session was opened",
        )),
    }
}

fn reread_fault(path: &Path, slot: &Slot, reason: &str) -> SessionError {
    SessionError::Corrupt {
        path: path.display().to_string(),
        line: 0,
        reason: format!("entry `{}` at byte {}: {reason}", slot.id, slot.offset),
    }
}

/// Session ids name files: only `[A-Za-z0-9_-]`, 1 to 128 characters.
fn check_id(session_id: &str) -> Result<(), SessionError> {
    let valid = !session_id.is_empty()
        && session_id.len() <= 128
        && session_id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
    if valid {
        Ok(())
    } else {
        Err(SessionError::InvalidId(session_id.to_owned()))
    }
}

async fn acknowledged(
    done: tokio::sync::oneshot::Receiver<Result<(), String>>,
) -> Result<(), SessionError> {
    match done.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(reason)) => Err(SessionError::Io(reason)),
        Err(_) => Err(SessionError::Io(
            "the session writer stopped before acknowledging".into(),
        )),
    }
}

impl SessionStore for JsonlStore {
    fn journal_dir(&self, session_id: &str) -> Option<PathBuf> {
        check_id(session_id).ok()?;
        Some(self.dir.join(format!("{session_id}.journal")))
    }

    fn create<'a>(&'a self, new: NewSession) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let id = self.create_file(&new)?;
            self.session(&id)?;
            Ok(id)
        })
    }

    fn append<'a>(&'a self, session_id: &'a str, entries: Vec<Entry>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let records = entries
                .into_iter()
                .map(|entry| Record::Entry { entry })
                .collect();
            acknowledged(self.enqueue(session_id, records)?).await
        })
    }

    fn leaf<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            let session = self.session(session_id)?;
            let state = lock_state(&session)?;
            Ok(state
                .index
                .leaf
                .and_then(|p| state.index.slots.get(p))
                .map(|slot| slot.id.clone()))
        })
    }

    fn active_branch<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Vec<Entry>> {
        Box::pin(async move { self.read_branch(session_id, false) })
    }

    fn context_branch<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Vec<Entry>> {
        Box::pin(async move { self.read_branch(session_id, true) })
    }

    fn set_leaf<'a>(&'a self, session_id: &'a str, entry_id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let record = Record::Leaf {
                leaf_id: entry_id.to_owned(),
            };
            let done = self
                .enqueue(session_id, vec![record])
                .map_err(|error| match error {
                    SessionError::EntryNotFound { entry_id, .. } => SessionError::EntryNotFound {
                        session_id: session_id.to_owned(),
                        entry_id,
                    },
                    other => other,
                })?;
            acknowledged(done).await
        })
    }

    fn entries<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Vec<Entry>> {
        Box::pin(async move {
            let session = self.session(session_id)?;
            let slots: Vec<Slot> = lock_state(&session)?.index.slots.clone();
            let path = self.file(session_id)?;
            let mut line = Vec::new();
            slots
                .iter()
                .map(|slot| read_entry(&session.reader, &path, slot, &mut line))
                .collect()
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<SessionInfo>> {
        Box::pin(async move { self.list_now() })
    }

    fn resolve_id<'a>(&'a self, wanted: &'a str) -> StoreFuture<'a, String> {
        Box::pin(async move {
            check_id(wanted)?;
            let ids = self.session_ids()?;
            crate::unique_id(wanted, ids.iter().map(String::as_str))
        })
    }

    fn open_for_writing<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<Repair>> {
        Box::pin(async move {
            let session = self.session(session_id)?;
            Ok(session.repaired.clone().map(|torn| Repair {
                session_id: session_id.to_owned(),
                torn,
            }))
        })
    }

    /// Reads the source without its lock (it may be open for writing
    /// elsewhere) and never writes to it; only the new session is written.
    fn fork<'a>(&'a self, session_id: &'a str, entry_id: &'a str) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let reader = self.reader(session_id)?;
            let path = reader.path_to(entry_id)?;
            let new = NewSession {
                parent_session: Some(session_id.to_owned()),
                workspace: reader.workspace().map(str::to_owned),
                ..NewSession::default()
            };
            let id = self.create(new).await?;
            self.append(&id, path).await?;
            Ok(id)
        })
    }
}
