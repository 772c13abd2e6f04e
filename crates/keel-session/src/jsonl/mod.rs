//! The JSONL store: one append-only file per session, Keel's embedded default.
//!
//! `<dir>/<id>.jsonl` holds a versioned header line and then framed, check-
//! summed records (see `format`). A session is opened for writing on first
//! use through [`SessionStore`]: the file is locked (advisory, exclusive), so
//! a second writer — another process, or another store in this one — is
//! refused instead of forking the tree; it is scanned as a stream into an
//! index; a torn tail left by a crash is cut off and reported. Appends go
//! through a group-commit writer thread and are acknowledged only after
//! fsync. Inspection (`snapshot`) reads without the lock and never repairs.

mod format;
mod index;
mod meta;
mod scan;
mod writer;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};

use keel_protocol::{Entry, TimestampMs};
use nix::fcntl::{Flock, FlockArg};

use self::format::{Header, Record};
use self::index::Slot;
use self::scan::io_error;
use self::writer::{Job, State, WriterSetup};
use crate::{NewSession, SessionError, SessionInfo, SessionStore, StoreFuture, TornTail};

/// Sessions as JSONL files in one directory.
#[derive(Debug)]
pub struct JsonlStore {
    dir: PathBuf,
    open: Mutex<HashMap<String, Arc<OpenSession>>>,
}

/// A session opened for writing by this store.
#[derive(Debug)]
struct OpenSession {
    state: Arc<Mutex<State>>,
    /// Taken on drop, which lets the writer finish and exit.
    jobs: Option<mpsc::Sender<Job>>,
    writer: Option<std::thread::JoinHandle<()>>,
    reader: File,
    repaired: Option<TornTail>,
    _lock: Flock<File>,
}

/// A read-only copy of a whole session, for inspection and export.
#[derive(Debug, Clone, PartialEq)]
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

    /// `$XDG_DATA_HOME/keel/sessions`, else `~/.local/share/keel/sessions`.
    pub fn default_dir() -> Option<PathBuf> {
        let data = std::env::var_os("XDG_DATA_HOME")
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share"))
            })?;
        Some(data.join("keel").join("sessions"))
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

    /// Reads a whole session without locking or repairing it.
    pub fn snapshot(&self, session_id: &str) -> Result<Snapshot, SessionError> {
        let path = self.file(session_id)?;
        let scan = scan::scan(&path)?;
        let reader = File::open(&path).map_err(|error| io_error(&path, &error))?;
        let entries = scan
            .index
            .slots
            .iter()
            .map(|slot| read_entry(&reader, &path, slot))
            .collect::<Result<Vec<_>, _>>()?;
        let leaf = scan
            .index
            .leaf
            .and_then(|position| scan.index.slots.get(position))
            .map(|slot| slot.id.clone());
        Ok(Snapshot {
            id: scan.header.id,
            parent_session: scan.header.parent_session,
            workspace: scan.header.workspace,
            created: scan.header.created,
            leaf,
            entries,
            torn: scan.torn,
        })
    }

    fn file(&self, session_id: &str) -> Result<PathBuf, SessionError> {
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
        let session = Arc::new(self.open_for_writing(session_id, &path)?);
        open.insert(session_id.to_owned(), Arc::clone(&session));
        Ok(session)
    }

    fn open_for_writing(&self, session_id: &str, path: &Path) -> Result<OpenSession, SessionError> {
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(SessionError::SessionNotFound(session_id.to_owned()));
            }
            Err(error) => return Err(io_error(path, &error)),
        };
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|_| SessionError::Locked(session_id.to_owned()))?;
        let scan = scan::scan(path)?;
        let mut file = lock.try_clone().map_err(|error| io_error(path, &error))?;
        if let Some(torn) = &scan.torn {
            tracing::warn!(session = session_id, line = torn.line, bytes = torn.bytes, reason = %torn.reason, "cutting off a torn tail");
            file.set_len(scan.valid_len)
                .and_then(|()| file.sync_data())
                .map_err(|error| io_error(path, &error))?;
        }
        file.seek(SeekFrom::Start(scan.valid_len))
            .map_err(|error| io_error(path, &error))?;
        let reader = lock.try_clone().map_err(|error| io_error(path, &error))?;
        let state = Arc::new(Mutex::new(State {
            index: scan.index,
            pending: Vec::new(),
            poisoned: None,
        }));
        let meta_base = meta::Meta {
            created: scan.header.created,
            parent_session: scan.header.parent_session.clone(),
            ..meta::Meta::default()
        };
        let (jobs, receiver) = mpsc::channel();
        let setup = WriterSetup {
            file,
            len: scan.valid_len,
            next_group: scan.next_group,
            state: Arc::clone(&state),
            meta_path: self.meta_file(session_id),
            meta_base,
        };
        let writer = writer::spawn(setup, receiver).map_err(|error| io_error(path, &error))?;
        Ok(OpenSession {
            state,
            jobs: Some(jobs),
            writer: Some(writer),
            reader,
            repaired: scan.torn,
            _lock: lock,
        })
    }

    fn create_file(&self, new: &NewSession) -> Result<String, SessionError> {
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
        let line =
            format::encode_header(&header).map_err(|error| SessionError::Io(error.to_string()))?;
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
            Err(error) => return Err(io_error(&path, &error)),
        };
        std::io::Write::write_all(&mut file, &line)
            .and_then(|()| file.sync_all())
            .and_then(|()| File::open(&self.dir)?.sync_all())
            .map_err(|error| io_error(&path, &error))?;
        Ok(id)
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
        slots
            .iter()
            .map(|slot| read_entry(&session.reader, &path, slot))
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
            .send(Job { records, ack })
            .map_err(|_| SessionError::Io("the session writer has stopped".into()))?;
        Ok(done)
    }

    fn info(&self, session_id: &str, path: &Path) -> SessionInfo {
        let file_len = std::fs::metadata(path).map(|m| m.len()).unwrap_or_default();
        let cached =
            meta::read(&self.meta_file(session_id)).filter(|meta| meta.file_len == file_len);
        let (meta, problem) = match cached {
            Some(meta) => (meta, None),
            None => match scan::scan(path) {
                Ok(scan) => (
                    meta::Meta {
                        created: scan.header.created,
                        parent_session: scan.header.parent_session.clone(),
                        ..meta::Meta::default()
                    }
                    .with_index(&scan.index, scan.valid_len),
                    scan.torn
                        .map(|torn| format!("torn tail at line {}: {}", torn.line, torn.reason)),
                ),
                Err(error) => (meta::Meta::default(), Some(error.to_string())),
            },
        };
        SessionInfo {
            id: session_id.to_owned(),
            title: meta.title,
            entries: meta.entries,
            bytes: file_len,
            created: meta.created,
            last_activity: meta.last_activity,
            parent_session: meta.parent_session,
            problem,
        }
    }
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

/// Reads one entry back from its line.
fn read_entry(file: &File, path: &Path, slot: &Slot) -> Result<Entry, SessionError> {
    let mut line = vec![0; slot.len as usize];
    file.read_exact_at(&mut line, slot.offset)
        .map_err(|error| io_error(path, &error))?;
    match format::decode_line(&line) {
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

fn now_ms() -> TimestampMs {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as TimestampMs)
        .unwrap_or_default()
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
            slots
                .iter()
                .map(|slot| read_entry(&session.reader, &path, slot))
                .collect()
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<SessionInfo>> {
        Box::pin(async move {
            let listing =
                std::fs::read_dir(&self.dir).map_err(|error| io_error(&self.dir, &error))?;
            let mut infos = Vec::new();
            for item in listing.flatten() {
                let path = item.path();
                let Some(id) = path
                    .file_name()
                    .and_then(|name| name.to_str())
                    .and_then(|name| name.strip_suffix(".jsonl"))
                else {
                    continue;
                };
                if check_id(id).is_ok() {
                    infos.push(self.info(id, &path));
                }
            }
            infos.sort_by(|a, b| {
                b.last_activity
                    .cmp(&a.last_activity)
                    .then_with(|| a.id.cmp(&b.id))
            });
            Ok(infos)
        })
    }
}
