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
//!
//! Ownership: a session has one writer. Writing it for a while
//! (a run, a compaction) takes its [`WriterLease`] through
//! [`SessionStore::open_writer`]; a second lease while one lives is
//! [`SessionError::SessionBusy`], and dropping the lease closes the session
//! in the store. Reads never take a lease and never open a session for
//! writing.
//!
//! Walking parent links is done in one place, [`path_from_root`], by every
//! store and by hosts that draw a branch, so a broken or cyclic link is
//! handled the same way everywhere.

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

#[cfg(feature = "test-util")]
pub mod conformance;
pub mod jsonl;
pub mod memory;

use std::collections::HashMap;
use std::path::PathBuf;

use futures::future::BoxFuture;
use keel_protocol::{Entry, TimestampMs};

pub use jsonl::{JsonlStore, LostSpan, SalvageReport, SessionReader, Snapshot};
pub use memory::MemoryStore;

/// Longest session title, in characters (an ellipsis marks a cut).
pub const TITLE_CHARS: usize = 80;

/// A session's title from its first user text: whitespace runs (newlines
/// included) become one space, the ends are trimmed, and a text longer
/// than [`TITLE_CHARS`] is cut with `…`. `None` for a text with no words.
pub fn title_of(text: &str) -> Option<String> {
    let mut words = text.split_whitespace();
    let mut title = String::from(words.next()?);
    for word in words {
        title.push(' ');
        title.push_str(word);
    }
    if title.chars().count() > TITLE_CHARS {
        title = title.chars().take(TITLE_CHARS - 1).collect();
        title.truncate(title.trim_end().len());
        title.push('…');
    }
    Some(title)
}

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

    /// The part of the active branch a model request needs: from the latest
    /// checkpoint's first kept entry (or the root) to the leaf.
    fn context_branch<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Vec<Entry>> {
        Box::pin(async move {
            Ok(from_latest_checkpoint(
                self.active_branch(session_id).await?,
            ))
        })
    }

    /// Moves the active leaf to an existing entry (a branch switch).
    fn set_leaf<'a>(&'a self, session_id: &'a str, entry_id: &'a str) -> StoreFuture<'a, ()>;

    /// Every entry of the session, in append order.
    fn entries<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Vec<Entry>>;

    /// Summaries of all sessions, newest activity first.
    fn list(&self) -> StoreFuture<'_, Vec<SessionInfo>>;

    /// The full id of the one session whose id is `wanted`, or starts or
    /// ends with it. An exact id wins over longer ids it is a prefix of;
    /// otherwise no match is [`SessionError::SessionNotFound`] and several
    /// are [`SessionError::AmbiguousSession`].
    fn resolve_id<'a>(&'a self, wanted: &'a str) -> StoreFuture<'a, String>;

    /// Takes the session's writer lease: the session is open for
    /// writing for as long as the returned [`WriterLease`] lives, and a
    /// second `open_writer` of it is refused with
    /// [`SessionError::SessionBusy`] until the lease is dropped (another
    /// process is kept out by the store's own means: the JSONL store's lease
    /// is its file lock, [`SessionError::Locked`]). Dropping the lease closes
    /// the session: the store stops holding it open. The lease carries the
    /// repair made when the session was opened (a torn tail cut off), which
    /// its holder reports. Reads never take a lease.
    fn open_writer<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, WriterLease>;

    /// Checks that `session_id` can be opened for writing (repairing a torn
    /// tail, as opening does) and returns the repair, without keeping the
    /// session open. A store that repaired the session keeps the repair for
    /// the next [`open_writer`](Self::open_writer), so the run that writes
    /// the session reports it too; stores that never repair return `None`.
    fn open_for_writing<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<Repair>> {
        Box::pin(async move {
            let lease = self.open_writer(session_id).await?;
            Ok(lease.repair().cloned())
        })
    }

    /// How many sessions this store holds open for writing now (held by a
    /// lease or by a write in progress): zero once every run has ended.
    fn open_sessions(&self) -> usize;

    /// The session's private journal directory (where `bash` keeps its
    /// per-call receipts, docs/recovery.md), or `None` when this store keeps none.
    /// It need not exist yet: its user creates it (mode 0700) on first use.
    fn journal_dir(&self, _session_id: &str) -> Option<PathBuf> {
        None
    }

    /// The session's workspace snapshot directory (content-addressed
    /// objects beside the session, docs/session-format.md), or `None` when this store
    /// keeps no snapshots (runs then record none). It need not exist yet:
    /// its user creates it (mode 0700) on first use.
    fn snapshot_dir(&self, _session_id: &str) -> Option<PathBuf> {
        None
    }

    /// Starts a new session holding the path from the root to `entry_id`
    /// (same entry ids), naming `session_id` as its parent and keeping its
    /// workspace; returns its id.
    fn fork<'a>(&'a self, session_id: &'a str, entry_id: &'a str) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let entries = self.entries(session_id).await?;
            let path = path_to(&entries, entry_id).ok_or_else(|| SessionError::EntryNotFound {
                session_id: session_id.to_owned(),
                entry_id: entry_id.to_owned(),
            })?;
            let workspace = self
                .list()
                .await?
                .into_iter()
                .find(|info| info.id == session_id)
                .and_then(|info| info.workspace);
            let new = NewSession {
                parent_session: Some(session_id.to_owned()),
                workspace,
                ..NewSession::default()
            };
            let id = self.create(new).await?;
            self.append(&id, path).await?;
            Ok(id)
        })
    }
}

/// Trims a branch to what a model request needs: from the latest
/// checkpoint's first kept entry (or the checkpoint itself) to the leaf.
pub fn from_latest_checkpoint(mut branch: Vec<Entry>) -> Vec<Entry> {
    let Some(checkpoint_at) = branch.iter().rposition(|entry| {
        matches!(
            entry.payload,
            keel_protocol::EntryPayload::Checkpoint { .. }
        )
    }) else {
        return branch;
    };
    let first_kept = match &branch[checkpoint_at].payload {
        keel_protocol::EntryPayload::Checkpoint {
            first_kept_entry_id,
            ..
        } => Some(first_kept_entry_id.clone()),
        _ => None,
    };
    let start = first_kept
        .and_then(|id| branch.iter().position(|entry| entry.id == id))
        .unwrap_or(checkpoint_at)
        .min(checkpoint_at);
    branch.split_off(start)
}

/// The entries from the root to `entry_id`, or `None` if it is not there.
fn path_to(entries: &[Entry], entry_id: &str) -> Option<Vec<Entry>> {
    let by_id: std::collections::HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .map(|(position, entry)| (entry.id.as_str(), position))
        .collect();
    let tip = *by_id.get(entry_id)?;
    let positions = path_from_root(tip, entries.len(), |position| {
        match entries.get(position)?.parent_id.as_deref() {
            None => Some(None),
            Some(parent) => by_id.get(parent).map(|&p| Some(p)),
        }
    })?;
    positions
        .into_iter()
        .map(|position| entries.get(position).cloned())
        .collect()
}

/// The one id among `ids` that is `wanted` or starts or ends with it: the
/// rule of [`SessionStore::resolve_id`], shared by the stores.
pub(crate) fn unique_id<'a>(
    wanted: &str,
    ids: impl Iterator<Item = &'a str>,
) -> Result<String, SessionError> {
    if wanted.is_empty() {
        return Err(SessionError::InvalidId(wanted.to_owned()));
    }
    let mut found: Option<&str> = None;
    let mut count = 0;
    for id in ids {
        if id == wanted {
            return Ok(id.to_owned());
        }
        if id.starts_with(wanted) || id.ends_with(wanted) {
            found = Some(id);
            count += 1;
        }
    }
    match (found, count) {
        (Some(id), 1) => Ok(id.to_owned()),
        (None, _) => Err(SessionError::SessionNotFound(wanted.to_owned())),
        (Some(_), count) => Err(SessionError::AmbiguousSession {
            wanted: wanted.to_owned(),
            count,
        }),
    }
}

/// The fewest characters a shortened session id is shown with.
pub const SHORT_ID_MIN: usize = 8;

/// Each of `ids` shortened to its shortest prefix (at least
/// [`SHORT_ID_MIN`] characters) that names it alone, as
/// [`SessionStore::resolve_id`] resolves a shortened id: no other id starts
/// or ends with it. An id no prefix names alone (another id is that id with
/// more after it) stays whole, which an exact id always names. Same order
/// as `ids`.
pub fn short_ids(ids: &[&str]) -> Vec<String> {
    let mut sorted: Vec<&str> = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let common = |a: &str, b: &str| a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    // How many ids end with each suffix of a length, built per length asked.
    let mut enders: HashMap<usize, HashMap<&str, usize>> = HashMap::new();
    let mut short: HashMap<&str, String> = HashMap::new();
    for (at, id) in sorted.iter().enumerate() {
        let before = at.checked_sub(1).map_or(0, |b| common(sorted[b], id));
        let after = sorted.get(at + 1).map_or(0, |next| common(next, id));
        let mut end = SHORT_ID_MIN.max(before.max(after) + 1);
        let found = loop {
            if end >= id.len() {
                break *id;
            }
            if !id.is_char_boundary(end) {
                end += 1;
                continue;
            }
            let prefix = &id[..end];
            let ending = enders.entry(end).or_insert_with(|| {
                let mut counts = HashMap::new();
                for other in &sorted {
                    if let Some(tail) = other
                        .len()
                        .checked_sub(end)
                        .and_then(|start| other.get(start..))
                    {
                        *counts.entry(tail).or_insert(0) += 1;
                    }
                }
                counts
            });
            let own = usize::from(id.ends_with(prefix));
            if ending.get(prefix).copied().unwrap_or(0) == own {
                break prefix;
            }
            end += 1;
        };
        short.insert(id, found.to_owned());
    }
    ids.iter()
        .map(|id| short.get(id).cloned().unwrap_or_else(|| (*id).to_owned()))
        .collect()
}

/// The one parent-walk over entries: from `tip` up to its root, returned
/// root first.
///
/// `parent_of` names a node's parent (`Some(None)` for a root, `None` for a
/// node it does not know). The walk fails (`None`) when a link names an
/// unknown node or when it takes more than `limit` steps, which only a cycle
/// can cause when `limit` is the number of nodes.
pub fn path_from_root<K: Copy>(
    tip: K,
    limit: usize,
    mut parent_of: impl FnMut(K) -> Option<Option<K>>,
) -> Option<Vec<K>> {
    let mut path = vec![tip];
    let mut cursor = tip;
    while let Some(parent) = parent_of(cursor)? {
        if path.len() >= limit {
            return None;
        }
        path.push(parent);
        cursor = parent;
    }
    path.reverse();
    Some(path)
}

/// The right to write one session, held for as long as this value lives
/// (what [`SessionStore::open_writer`] returns). Dropping it releases the session:
/// the store closes it (for the JSONL store: stops its writer thread and
/// unlocks its file), and the session may be opened for writing again.
#[must_use = "dropping a writer lease closes the session for writing"]
pub struct WriterLease {
    session_id: String,
    repair: Option<Repair>,
    /// Whatever the store needs dropped to release the session.
    _release: Box<dyn std::any::Any + Send + Sync>,
}

impl WriterLease {
    /// A lease on `session_id` for a store to hand out: `release` is
    /// dropped when the lease is, and releases the session then.
    pub fn new(
        session_id: impl Into<String>,
        repair: Option<Repair>,
        release: impl std::any::Any + Send + Sync,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            repair,
            _release: Box::new(release),
        }
    }

    /// The session this lease writes.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The torn tail the store cut off when it opened the session for this
    /// lease (or for an earlier open whose repair nobody reported yet).
    pub fn repair(&self) -> Option<&Repair> {
        self.repair.as_ref()
    }
}

impl std::fmt::Debug for WriterLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterLease")
            .field("session_id", &self.session_id)
            .field("repair", &self.repair)
            .finish_non_exhaustive()
    }
}

/// A damaged tail found when a session file was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TornTail {
    /// Where the last complete group ends (the file is cut here).
    pub offset: u64,
    /// How many bytes follow it.
    pub bytes: u64,
    /// The 1-based line where the damage starts.
    pub line: usize,
    /// What is wrong there.
    pub reason: String,
}

/// A torn tail that a store cut off when it opened a session for writing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Repair {
    /// The session that was repaired.
    pub session_id: String,
    /// What was cut: where, how many bytes, from which line, and why it was
    /// a torn write.
    pub torn: TornTail,
}

/// What a new session starts with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
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
#[non_exhaustive]
pub struct SessionInfo {
    /// The session id.
    pub id: String,
    /// The first user text, shortened.
    pub title: Option<String>,
    /// Number of entries.
    pub entries: usize,
    /// Size on disk, in bytes (0 for stores without files).
    pub bytes: u64,
    /// When the session was created.
    pub created: TimestampMs,
    /// When the last entry was appended.
    pub last_activity: TimestampMs,
    /// The session this one was forked from.
    pub parent_session: Option<String>,
    /// The workspace the session was created for (`None` for sessions
    /// stored without one).
    pub workspace: Option<String>,
    /// Why the session cannot be read, if it cannot (damage, which is
    /// refused, or a file that is not a session).
    pub problem: Option<String>,
    /// A torn tail after the complete groups, left for the next writer to
    /// cut (listing never writes).
    pub torn: Option<TornTail>,
}

/// Why a store operation failed. Nothing already stored is changed by a failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The store's medium failed on `path`.
    #[error("session store I/O error: {}: {source}", path.display())]
    Io {
        /// The file or directory the operation was on.
        path: std::path::PathBuf,
        /// What the operating system reported.
        #[source]
        source: std::io::Error,
    },
    /// The store cannot serve the operation, for a reason other than its
    /// medium (its writer stopped, the session is closing or was poisoned by
    /// a failed write, a file changed while it was salvaged).
    #[error("session store error: {0}")]
    Unavailable(String),
    /// The id cannot name a session (only letters, digits, `-` and `_`).
    #[error("`{0}` is not a valid session id (use 1-128 letters, digits, `-` or `_`)")]
    InvalidId(String),
    /// A writer lease on the session is live in this store (a run, or a
    /// compaction, is writing it): a session has one writer.
    #[error(
        "session `{0}` is busy: it is already open for writing in this process (a live run or compaction); a session has one writer"
    )]
    SessionBusy(String),
    /// Another writer holds the session.
    #[error(
        "session `{0}` is open for writing elsewhere (another process or store); a session has one writer"
    )]
    Locked(String),
    /// The file is not a Keel session.
    #[error("{path} is not a Keel session: {reason}")]
    NotASession {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The header claims a format version this build does not read: one
    /// written by a newer Keel, or one no Keel writes (version 0). The file
    /// is neither read nor written.
    #[error("{}", version_message(path, *found, *oldest, *supported))]
    UnsupportedVersion {
        /// The file.
        path: String,
        /// The version in the file.
        found: u64,
        /// The oldest version this build reads.
        oldest: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// Several sessions match an abbreviated id.
    #[error("`{wanted}` names {count} sessions; give more of the id")]
    AmbiguousSession {
        /// The abbreviation.
        wanted: String,
        /// How many sessions it matches.
        count: usize,
    },
    /// The header names another session than the file name does (a renamed
    /// or copied file): it is refused rather than answering to either id.
    #[error(
        "{path} is named for session `{file_id}` but its header says `{header_id}`; a renamed or copied session file is refused"
    )]
    IdMismatch {
        /// The file.
        path: String,
        /// The id its name gives.
        file_id: String,
        /// The id its header holds.
        header_id: String,
    },
    /// The file holds damage that no crash can produce (anything but a
    /// prefix of the last write batch).
    /// The message names `keel session salvage <id>`, the way forward.
    #[error(
        "{path}:{line}: session file is damaged: {reason}; `keel session salvage {}` writes its intact records to a new session and leaves this file as it is",
        salvage_id(path)
    )]
    Corrupt {
        /// The file.
        path: String,
        /// The 1-based line (0 when found re-reading an entry).
        line: usize,
        /// What is wrong there.
        reason: String,
    },
}

/// Why a header version is refused, for a person.
fn version_message(path: &str, found: u64, oldest: u32, supported: u32) -> String {
    if found > u64::from(supported) {
        format!(
            "{path} was written by a newer Keel (session format version {found}; this build reads versions {oldest} to {supported}): upgrade Keel to use it; the file is left untouched"
        )
    } else {
        format!(
            "{path} claims session format version {found}, which no Keel writes (this build reads versions {oldest} to {supported}); the file is refused and left untouched"
        )
    }
}

/// The session id a session file's path names (its stem), for the salvage
/// hint; `<id>` when the stem is not one.
fn salvage_id(path: &str) -> &str {
    std::path::Path::new(path)
        .file_stem()
        .and_then(|stem| stem.to_str())
        .filter(|stem| {
            !stem.is_empty()
                && stem
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        })
        .unwrap_or("<id>")
}

impl SessionError {
    /// A stable snake_case code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::SessionNotFound(_) => "session_not_found",
            Self::AmbiguousSession { .. } => "session_ambiguous",
            Self::IdMismatch { .. } => "session_id_mismatch",
            Self::SessionExists(_) => "session_exists",
            Self::EntryNotFound { .. } => "entry_not_found",
            Self::MissingParent { .. }
            | Self::SecondRoot(_)
            | Self::DuplicateEntry(_)
            | Self::EmptyAppend => "invalid_entry",
            Self::Io { .. } | Self::Unavailable(_) => "session_io",
            Self::InvalidId(_) => "invalid_session_id",
            Self::SessionBusy(_) => "session_busy",
            Self::Locked(_) => "session_locked",
            Self::NotASession { .. } => "not_a_session",
            Self::UnsupportedVersion { .. } => "session_version",
            Self::Corrupt { .. } => "session_corrupt",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_ids_are_the_shortest_prefixes_resolve_id_maps_back() {
        let ids = [
            "01a23582-0001-7000-8000-00000000aaaa",
            "01a23582-0002-7000-8000-00000000bbbb",
            "01a23582-0002-7000-8000-00000000cccc",
            "01b00000-0000-7000-8000-000000000000",
            "short",
        ];
        let short = short_ids(&ids);
        assert_eq!(
            short,
            [
                "01a23582-0001",
                "01a23582-0002-7000-8000-00000000b",
                "01a23582-0002-7000-8000-00000000c",
                "01b00000",
                "short",
            ]
        );
        for (id, short) in ids.iter().zip(&short) {
            assert_eq!(unique_id(short, ids.iter().copied()).unwrap(), *id);
        }
        // A prefix that ends another id is not unique: resolve_id matches suffixes too.
        let ids = ["abcdefgh12", "zzzzabcdefgh"];
        assert_eq!(short_ids(&ids)[0], "abcdefgh1");
    }
}
