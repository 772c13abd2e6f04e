//! Sessions: durable, append-only trees of entries that outlive runs.
//!
//! A session is a tree of immutable [`keel_protocol::Entry`] values plus one
//! active leaf; the active branch is the path from the root to that leaf and
//! is the only history a model request may see. [`SessionStore`] is the seam
//! every store implements: append a group of entries atomically (all or none,
//! and the leaf moves to the last one), read the active branch, move the leaf.
//!
//! Invariants every store enforces: entry ids are unique within a session; an
//! entry's parent is already stored (or earlier in the same group); only the
//! first entry of a session may be a root; nothing stored is ever changed.

pub mod memory;

use futures::future::BoxFuture;
use keel_protocol::{Entry, TimestampMs};

pub use memory::MemoryStore;

/// The future a store operation returns.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, SessionError>>;

/// A durable store of session trees.
pub trait SessionStore: Send + Sync {
    /// Creates an empty session and returns its id.
    fn create<'a>(&'a self, new: NewSession) -> StoreFuture<'a, String>;

    /// Appends `entries` atomically and moves the leaf to the last of them.
    fn append<'a>(&'a self, session_id: &'a str, entries: Vec<Entry>) -> StoreFuture<'a, ()>;

    /// The active leaf, `None` for an empty session.
    fn leaf<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<String>>;

    /// The entries from the root to the active leaf.
    fn active_branch<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Vec<Entry>>;

    /// Moves the active leaf to an existing entry (a branch switch).
    fn set_leaf<'a>(&'a self, session_id: &'a str, entry_id: &'a str) -> StoreFuture<'a, ()>;

    /// Every entry of the session, in append order.
    fn entries<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Vec<Entry>>;

    /// Summaries of all sessions, newest activity first.
    fn list(&self) -> StoreFuture<'_, Vec<SessionInfo>>;
}

/// What a new session starts with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewSession {
    /// The id to use; a fresh one is generated when `None`.
    pub id: Option<String>,
    /// The session this one was forked from.
    pub parent_session: Option<String>,
    /// The workspace the session works in.
    pub workspace: Option<String>,
}

/// A summary of one session, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session id.
    pub id: String,
    /// The first user text, shortened.
    pub title: Option<String>,
    /// Number of entries.
    pub entries: usize,
    /// When the session was created.
    pub created: TimestampMs,
    /// When the last entry was appended.
    pub last_activity: TimestampMs,
    /// The session this one was forked from.
    pub parent_session: Option<String>,
}

/// Why a store operation failed. Nothing already stored is changed by a failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// No session has this id.
    #[error("session `{0}` not found")]
    SessionNotFound(String),
    /// A session with this id already exists.
    #[error("session `{0}` already exists")]
    SessionExists(String),
    /// No entry has this id in the session.
    #[error("entry `{entry_id}` not found in session `{session_id}`")]
    EntryNotFound {
        /// The session.
        session_id: String,
        /// The missing entry.
        entry_id: String,
    },
    /// An entry names a parent that is not stored.
    #[error("entry `{entry_id}` names parent `{parent_id}`, which is not in the session")]
    MissingParent {
        /// The entry.
        entry_id: String,
        /// The missing parent.
        parent_id: String,
    },
    /// An entry without a parent in a non-empty session.
    #[error("entry `{0}` has no parent, but the session already has a root")]
    SecondRoot(String),
    /// An entry id is already used.
    #[error("entry id `{0}` is already used in this session")]
    DuplicateEntry(String),
    /// An empty group was appended.
    #[error("an append must contain at least one entry")]
    EmptyAppend,
    /// The store's medium failed.
    #[error("session store I/O error: {0}")]
    Io(String),
}
