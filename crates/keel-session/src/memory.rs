//! The in-memory store: for tests, demos and hosts that persist elsewhere.
//!
//! It enforces the same invariants as the durable stores, so a run behaves the
//! same against it; it simply forgets everything when dropped. Writer
//! leases work as in every store: one live lease per session, released when
//! the lease is dropped.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use keel_protocol::{Entry, EntryPayload, Message, TimestampMs};

use crate::{NewSession, SessionError, SessionInfo, SessionStore, StoreFuture, WriterLease};

/// A session store held in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<HashMap<String, Tree>>,
    /// The sessions a live [`WriterLease`] holds.
    leased: Arc<Mutex<HashSet<String>>>,
    /// Where session journal directories go, when a test gives one.
    journal_root: Option<PathBuf>,
}

#[derive(Debug, Default)]
struct Tree {
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
    leaf: Option<String>,
    created: TimestampMs,
    last_activity: TimestampMs,
    parent_session: Option<String>,
    workspace: Option<String>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose sessions keep their journal directories
    /// (`bash` receipts) under `root`, one `<session id>` directory each.
    pub fn with_journal_root(root: impl Into<PathBuf>) -> Self {
        Self {
            journal_root: Some(root.into()),
            ..Self::default()
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, HashMap<String, Tree>>, SessionError> {
        self.sessions
            .lock()
            .map_err(|_| SessionError::Unavailable("memory store lock poisoned".into()))
    }

    fn with_tree<T>(
        &self,
        session_id: &str,
        f: impl FnOnce(&mut Tree) -> Result<T, SessionError>,
    ) -> Result<T, SessionError> {
        let mut sessions = self.lock()?;
        let tree = sessions
            .get_mut(session_id)
            .ok_or_else(|| SessionError::SessionNotFound(session_id.to_owned()))?;
        f(tree)
    }
}

/// Releases a memory session's lease when dropped.
struct Release {
    leased: Arc<Mutex<HashSet<String>>>,
    session_id: String,
}

impl Drop for Release {
    fn drop(&mut self) {
        // A poisoned set still holds the ids: release this one regardless.
        let mut leased = match self.leased.lock() {
            Ok(leased) => leased,
            Err(poisoned) => poisoned.into_inner(),
        };
        leased.remove(&self.session_id);
    }
}

impl Tree {
    fn validate(&self, group: &[Entry]) -> Result<(), SessionError> {
        if group.is_empty() {
            return Err(SessionError::EmptyAppend);
        }
        let mut seen: Vec<&str> = Vec::new();
        for (position, entry) in group.iter().enumerate() {
            if self.index.contains_key(&entry.id) || seen.contains(&entry.id.as_str()) {
                return Err(SessionError::DuplicateEntry(entry.id.clone()));
            }
            match &entry.parent_id {
                None if self.entries.is_empty() && position == 0 => {}
                None => return Err(SessionError::SecondRoot(entry.id.clone())),
                Some(parent)
                    if self.index.contains_key(parent) || seen.contains(&parent.as_str()) => {}
                Some(parent) => {
                    return Err(SessionError::MissingParent {
                        entry_id: entry.id.clone(),
                        parent_id: parent.clone(),
                    });
                }
            }
            seen.push(&entry.id);
        }
        Ok(())
    }

    fn branch(&self) -> Result<Vec<Entry>, SessionError> {
        let Some(tip) = self.leaf.as_deref().and_then(|id| self.index.get(id)) else {
            return Ok(Vec::new());
        };
        let path = crate::path_from_root(*tip, self.entries.len(), |position| {
            match self.entries.get(position)?.parent_id.as_deref() {
                None => Some(None),
                Some(parent) => self.index.get(parent).map(|&p| Some(p)),
            }
        })
        // Unreachable while appends are validated; reported, not hidden.
        .ok_or_else(|| SessionError::Unavailable("the memory session's tree is broken".into()))?;
        Ok(path
            .into_iter()
            .filter_map(|position| self.entries.get(position).cloned())
            .collect())
    }

    fn title(&self) -> Option<String> {
        self.entries.iter().find_map(|entry| match &entry.payload {
            EntryPayload::Message {
                message: Message::User(user),
            } => crate::title_of(&user.plain_text()),
            _ => None,
        })
    }
}

impl SessionStore for MemoryStore {
    fn journal_dir(&self, session_id: &str) -> Option<PathBuf> {
        let root = self.journal_root.as_ref()?;
        // The id becomes a file name: only plain ids get a directory.
        let plain = !session_id.is_empty()
            && session_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !plain {
            return None;
        }
        Some(root.join(session_id))
    }

    fn create<'a>(&'a self, new: NewSession) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let id = new.id.unwrap_or_else(uuid_like);
            let mut sessions = self.lock()?;
            if sessions.contains_key(&id) {
                return Err(SessionError::SessionExists(id));
            }
            let now = keel_protocol::now_ms();
            let tree = Tree {
                created: now,
                last_activity: now,
                parent_session: new.parent_session,
                workspace: new.workspace,
                ..Tree::default()
            };
            sessions.insert(id.clone(), tree);
            Ok(id)
        })
    }

    fn append<'a>(&'a self, session_id: &'a str, entries: Vec<Entry>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.with_tree(session_id, |tree| {
                tree.validate(&entries)?;
                for entry in entries {
                    tree.index.insert(entry.id.clone(), tree.entries.len());
                    tree.leaf = Some(entry.id.clone());
                    tree.entries.push(entry);
                }
                tree.last_activity = keel_protocol::now_ms();
                Ok(())
            })
        })
    }

    fn leaf<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move { self.with_tree(session_id, |tree| Ok(tree.leaf.clone())) })
    }

    fn active_branch<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Vec<Entry>> {
        Box::pin(async move { self.with_tree(session_id, |tree| tree.branch()) })
    }

    fn set_leaf<'a>(&'a self, session_id: &'a str, entry_id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.with_tree(session_id, |tree| {
                if !tree.index.contains_key(entry_id) {
                    return Err(SessionError::EntryNotFound {
                        session_id: session_id.to_owned(),
                        entry_id: entry_id.to_owned(),
                    });
                }
                tree.leaf = Some(entry_id.to_owned());
                Ok(())
            })
        })
    }

    fn entries<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Vec<Entry>> {
        Box::pin(async move { self.with_tree(session_id, |tree| Ok(tree.entries.clone())) })
    }

    fn list(&self) -> StoreFuture<'_, Vec<SessionInfo>> {
        Box::pin(async move {
            let sessions = self.lock()?;
            let mut infos: Vec<SessionInfo> = sessions
                .iter()
                .map(|(id, tree)| SessionInfo {
                    id: id.clone(),
                    title: tree.title(),
                    entries: tree.entries.len(),
                    bytes: 0,
                    created: tree.created,
                    last_activity: tree.last_activity,
                    parent_session: tree.parent_session.clone(),
                    workspace: tree.workspace.clone(),
                    problem: None,
                    torn: None,
                })
                .collect();
            infos.sort_by(|a, b| {
                b.last_activity
                    .cmp(&a.last_activity)
                    .then_with(|| a.id.cmp(&b.id))
            });
            Ok(infos)
        })
    }

    fn resolve_id<'a>(&'a self, wanted: &'a str) -> StoreFuture<'a, String> {
        Box::pin(async move {
            let sessions = self.lock()?;
            crate::unique_id(wanted, sessions.keys().map(String::as_str))
        })
    }

    fn open_writer<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, WriterLease> {
        Box::pin(async move {
            if !self.lock()?.contains_key(session_id) {
                return Err(SessionError::SessionNotFound(session_id.to_owned()));
            }
            let mut leased = self.leased.lock().map_err(|_| {
                SessionError::Unavailable("memory store lease lock poisoned".into())
            })?;
            if !leased.insert(session_id.to_owned()) {
                return Err(SessionError::SessionBusy(session_id.to_owned()));
            }
            let release = Release {
                leased: Arc::clone(&self.leased),
                session_id: session_id.to_owned(),
            };
            Ok(WriterLease::new(session_id, None, release))
        })
    }

    fn open_sessions(&self) -> usize {
        match self.leased.lock() {
            Ok(leased) => leased.len(),
            Err(poisoned) => poisoned.into_inner().len(),
        }
    }
}

/// A process-unique id for sessions created without one.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "mem-{}-{}",
        keel_protocol::now_ms(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_protocol::UserMessage;

    fn entry(id: &str, parent: Option<&str>) -> Entry {
        Entry::new(
            id,
            parent.map(Into::into),
            0,
            EntryPayload::Message {
                message: Message::User(UserMessage::text(id)),
            },
        )
    }

    #[tokio::test]
    async fn append_moves_leaf_and_branch_follows_parents() {
        let store = MemoryStore::new();
        let s = store.create(NewSession::default()).await.unwrap();
        store
            .append(&s, vec![entry("a", None), entry("b", Some("a"))])
            .await
            .unwrap();
        store.append(&s, vec![entry("c", Some("a"))]).await.unwrap();
        let ids: Vec<_> = store
            .active_branch(&s)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, ["a", "c"]);
        store.set_leaf(&s, "b").await.unwrap();
        let ids: Vec<_> = store
            .active_branch(&s)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, ["a", "b"]);
    }

    #[tokio::test]
    async fn invalid_groups_change_nothing() {
        let store = MemoryStore::new();
        let s = store.create(NewSession::default()).await.unwrap();
        store.append(&s, vec![entry("a", None)]).await.unwrap();
        let bad = store
            .append(&s, vec![entry("b", Some("a")), entry("c", Some("zz"))])
            .await;
        assert!(matches!(bad, Err(SessionError::MissingParent { .. })));
        assert!(matches!(
            store.append(&s, vec![entry("a", Some("a"))]).await,
            Err(SessionError::DuplicateEntry(_))
        ));
        assert!(matches!(
            store.append(&s, vec![entry("r", None)]).await,
            Err(SessionError::SecondRoot(_))
        ));
        assert_eq!(store.entries(&s).await.unwrap().len(), 1);
        assert_eq!(store.leaf(&s).await.unwrap().as_deref(), Some("a"));
    }
}
