//! The JSONL store: one append-only file per session, Keel's embedded default.
//!
//! `<dir>/<id>.jsonl` holds a versioned header line naming the session and
//! then framed, checksummed records (see `format`). A session is opened for
//! writing (`open`) by its writer lease ([`SessionStore::open_writer`]) or,
//! for the length of one call, by an `append` or `set_leaf` made without
//! one: the file is locked (advisory, exclusive), so a writer in another
//! process, or another store in this one, is refused
//! ([`SessionError::Locked`]) instead of forking the tree; it is scanned as
//! a stream into an index; a torn tail — only ever a prefix of the last
//! write batch (see `scan`) — is cut off and reported as a [`Repair`];
//! anything else is refused untouched. Appends go through a group-commit
//! writer thread and are acknowledged only after fsync.
//!
//! Invariants of the open map: a session is in it exactly while something
//! holds it (its lease, a write in progress, a read of its open state); at
//! most one lease per session is live (a second is
//! [`SessionError::SessionBusy`]); when the last hold goes, the session is
//! removed and closed — its writer thread drains and stops, its file is
//! unlocked — before the map is unlocked, so a new writer never finds the
//! file still locked by a session this store is closing.
//!
//! Reading (`read`: [`JsonlStore::reader`], `snapshot`, `list`, the source
//! of `fork`, and the trait's reads of a session that is not open) never
//! takes the lock, never starts a writer and never writes: it sees the
//! complete groups present when it scanned, which a concurrent writer only
//! ever appends to. A read of a session open here uses its open state.

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
use crate::{
    NewSession, Repair, SessionError, SessionInfo, SessionStore, StoreFuture, TornTail, WriterLease,
};

pub use self::read::{SessionReader, Snapshot};
pub use self::salvage::{LostSpan, SalvageReport};

/// The session format version this build writes (the header's `version`).
pub const FORMAT_VERSION: u32 = format::VERSION;
/// The oldest session format version this build reads; every version from
/// it to [`FORMAT_VERSION`] is read, any other is refused untouched.
pub const OLDEST_FORMAT_VERSION: u32 = format::OLDEST_VERSION;

/// Sessions as JSONL files in one directory.
#[derive(Debug)]
pub struct JsonlStore {
    dir: PathBuf,
    open: OpenMap,
    /// Torn tails cut by an open whose repair no lease has reported yet
    /// (one per repaired session, until its next lease takes it).
    repairs: Mutex<HashMap<String, TornTail>>,
}

/// The sessions this store holds open for writing, shared with the holds.
type OpenMap = Arc<Mutex<HashMap<String, Held>>>;

/// A session open for writing, and who holds it.
#[derive(Debug)]
struct Held {
    session: Arc<OpenSession>,
    /// Live holds: its lease, writes in progress, reads of its open state.
    holders: usize,
    /// Whether a writer lease is among them.
    leased: bool,
}

/// One hold on an open session; the last to be dropped closes it.
#[derive(Debug)]
struct Hold {
    open: OpenMap,
    session_id: String,
    /// `None` only while dropping.
    session: Option<Arc<OpenSession>>,
    /// Whether this hold is the session's writer lease.
    lease: bool,
}

impl Hold {
    fn session(&self) -> Result<&OpenSession, SessionError> {
        self.session
            .as_deref()
            .ok_or_else(|| SessionError::Unavailable("the session is closing".into()))
    }
}

impl Drop for Hold {
    /// Gives the hold back; the last one removes the session and closes it
    /// (joining its writer, unlocking its file) under the map's lock.
    fn drop(&mut self) {
        let mine = self.session.take();
        let mut open = match self.open.lock() {
            Ok(open) => open,
            // The map itself is intact: a panic elsewhere never leaves a
            // half-made change to it (each change is one insert or remove).
            Err(poisoned) => poisoned.into_inner(),
        };
        let Some(held) = open.get_mut(&self.session_id) else {
            return;
        };
        if self.lease {
            held.leased = false;
        }
        held.holders = held.holders.saturating_sub(1);
        if held.holders == 0 {
            let closed = open.remove(&self.session_id);
            drop(mine);
            drop(closed);
            tracing::debug!(session = %self.session_id, "session closed for writing");
        }
    }
}

impl JsonlStore {
    /// A store over `dir`, created (private to the user) if missing.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, SessionError> {
        let dir = dir.into();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|error| io_error(&dir, error))?;
        Ok(Self {
            dir,
            open: Arc::new(Mutex::new(HashMap::new())),
            repairs: Mutex::new(HashMap::new()),
        })
    }

    /// The directory the sessions live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The torn tail cut off when this store opened the session, while the
    /// session is open or its repair is not yet reported.
    pub fn repaired_tail(&self, session_id: &str) -> Option<TornTail> {
        if let Some(torn) = self.repairs.lock().ok()?.get(session_id) {
            return Some(torn.clone());
        }
        let open = self.open.lock().ok()?;
        open.get(session_id)
            .and_then(|held| held.session.repaired.clone())
    }

    /// The file that holds `session_id` (the id is checked, the file need not exist).
    pub fn file(&self, session_id: &str) -> Result<PathBuf, SessionError> {
        check_id(session_id)?;
        Ok(self.dir.join(format!("{session_id}.jsonl")))
    }

    fn meta_file(&self, session_id: &str) -> PathBuf {
        self.dir.join(format!("{session_id}.meta.json"))
    }

    /// Holds `session_id` open for writing, opening it (lock, scan, repair,
    /// writer) when it is not open; with `lease`, as its writer lease, which
    /// is refused while another lease is live.
    fn hold(&self, session_id: &str, lease: bool) -> Result<Hold, SessionError> {
        let mut open = self
            .open
            .lock()
            .map_err(|_| SessionError::Unavailable("store lock poisoned".into()))?;
        let session = match open.get_mut(session_id) {
            Some(held) => {
                if lease && held.leased {
                    return Err(SessionError::SessionBusy(session_id.to_owned()));
                }
                held.leased |= lease;
                held.holders += 1;
                Arc::clone(&held.session)
            }
            None => {
                let path = self.file(session_id)?;
                let session = Arc::new(self.open_for_writing_now(session_id, &path)?);
                if let Some(torn) = &session.repaired {
                    self.remember(session_id, torn.clone());
                }
                let held = Held {
                    session: Arc::clone(&session),
                    holders: 1,
                    leased: lease,
                };
                open.insert(session_id.to_owned(), held);
                session
            }
        };
        Ok(Hold {
            open: Arc::clone(&self.open),
            session_id: session_id.to_owned(),
            session: Some(session),
            lease,
        })
    }

    /// A hold on `session_id` if this store has it open, else `None` (the
    /// caller then reads the file without opening it).
    fn hold_if_open(&self, session_id: &str) -> Result<Option<Hold>, SessionError> {
        let mut open = self
            .open
            .lock()
            .map_err(|_| SessionError::Unavailable("store lock poisoned".into()))?;
        Ok(open.get_mut(session_id).map(|held| {
            held.holders += 1;
            Hold {
                open: Arc::clone(&self.open),
                session_id: session_id.to_owned(),
                session: Some(Arc::clone(&held.session)),
                lease: false,
            }
        }))
    }

    /// Keeps a repair for the session's next lease to report.
    fn remember(&self, session_id: &str, torn: TornTail) {
        if let Ok(mut repairs) = self.repairs.lock() {
            repairs.insert(session_id.to_owned(), torn);
        }
    }

    /// The repair no lease has reported yet, taken.
    fn unreported(&self, session_id: &str) -> Option<Repair> {
        let torn = self.repairs.lock().ok()?.remove(session_id)?;
        Some(Repair {
            session_id: session_id.to_owned(),
            torn,
        })
    }

    fn read_branch(
        &self,
        session_id: &str,
        context_only: bool,
    ) -> Result<Vec<Entry>, SessionError> {
        let Some(hold) = self.hold_if_open(session_id)? else {
            let reader = self.reader(session_id)?;
            return if context_only {
                reader.context_branch()
            } else {
                reader.active_branch()
            };
        };
        let session = hold.session()?;
        let slots: Vec<Slot> = {
            let state = lock_state(session)?;
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

    /// Queues `records` on the held session's writer after checking them.
    fn enqueue(
        &self,
        hold: &Hold,
        records: Vec<Record>,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<(), String>>, SessionError> {
        let session = hold.session()?;
        let mut state = lock_state(session)?;
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
            .ok_or_else(|| SessionError::Unavailable("the session is closing".into()))?
            .send(writer::Job { records, ack })
            .map_err(|_| SessionError::Unavailable("the session writer has stopped".into()))?;
        Ok(done)
    }
}

fn validate(state: &State, records: &[Record]) -> Result<(), SessionError> {
    if let Some(reason) = &state.poisoned {
        return Err(SessionError::Unavailable(format!(
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
        .map_err(|_| SessionError::Unavailable("session state lock poisoned".into()))
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
        .map_err(|error| io_error(path, error))?;
    match format::decode_line(line) {
        Ok(record) => match record {
            Record::Entry { entry } => Ok(*entry),
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
        Ok(Err(reason)) => Err(SessionError::Unavailable(reason)),
        Err(_) => Err(SessionError::Unavailable(
            "the session writer stopped before acknowledging".into(),
        )),
    }
}

impl SessionStore for JsonlStore {
    fn journal_dir(&self, session_id: &str) -> Option<PathBuf> {
        check_id(session_id).ok()?;
        Some(self.dir.join(format!("{session_id}.journal")))
    }

    fn snapshot_dir(&self, session_id: &str) -> Option<PathBuf> {
        check_id(session_id).ok()?;
        Some(self.dir.join(format!("{session_id}.snapshots")))
    }

    fn create<'a>(&'a self, new: NewSession) -> StoreFuture<'a, String> {
        Box::pin(async move {
            // Only the header is written: the session opens for writing when
            // a lease or a write needs it.
            self.create_file(&new)
        })
    }

    fn append<'a>(&'a self, session_id: &'a str, entries: Vec<Entry>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let records = entries
                .into_iter()
                .map(|entry| Record::Entry {
                    entry: Box::new(entry),
                })
                .collect();
            let hold = self.hold(session_id, false)?;
            let done = self.enqueue(&hold, records)?;
            // The hold lasts until the append is acknowledged.
            let stored = acknowledged(done).await;
            drop(hold);
            stored
        })
    }

    fn leaf<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            let Some(hold) = self.hold_if_open(session_id)? else {
                return Ok(self.reader(session_id)?.leaf().map(str::to_owned));
            };
            let state = lock_state(hold.session()?)?;
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
            let hold = self.hold(session_id, false)?;
            let done = self
                .enqueue(&hold, vec![record])
                .map_err(|error| match error {
                    SessionError::EntryNotFound { entry_id, .. } => SessionError::EntryNotFound {
                        session_id: session_id.to_owned(),
                        entry_id,
                    },
                    other => other,
                })?;
            let stored = acknowledged(done).await;
            drop(hold);
            stored
        })
    }

    fn entries<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Vec<Entry>> {
        Box::pin(async move {
            let Some(hold) = self.hold_if_open(session_id)? else {
                return self.reader(session_id)?.entries().collect();
            };
            let session = hold.session()?;
            let slots: Vec<Slot> = lock_state(session)?.index.slots.clone();
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

    fn open_writer<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, WriterLease> {
        Box::pin(async move {
            let hold = self.hold(session_id, true)?;
            let repair = self.unreported(session_id);
            Ok(WriterLease::new(session_id, repair, hold))
        })
    }

    /// Opens the session (cutting a torn tail) and closes it again unless
    /// something else holds it; the repair stays for the next lease.
    fn open_for_writing<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<Repair>> {
        Box::pin(async move {
            let lease = self.open_writer(session_id).await?;
            let repair = lease.repair().cloned();
            if let Some(repair) = &repair {
                self.remember(session_id, repair.torn.clone());
            }
            drop(lease);
            Ok(repair)
        })
    }

    fn open_sessions(&self) -> usize {
        match self.open.lock() {
            Ok(open) => open.len(),
            Err(poisoned) => poisoned.into_inner().len(),
        }
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
