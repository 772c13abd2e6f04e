//! `SessionStore::journal_dir`: where a session's command receipts live.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keel_session::{JsonlStore, MemoryStore, NewSession, SessionStore};

#[tokio::test]
async fn the_jsonl_store_keeps_a_journal_directory_beside_each_session_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path()).unwrap();
    let id = store.create(NewSession::default()).await.unwrap();
    let journal = store.journal_dir(&id).unwrap();
    assert_eq!(journal, dir.path().join(format!("{id}.journal")));
    assert!(!journal.exists(), "created by its user, on demand");
    assert_eq!(store.journal_dir("../escape"), None, "ids are checked");
    // A journal directory does not disturb the listing.
    std::fs::create_dir(&journal).unwrap();
    let listed: Vec<String> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, vec![id]);
}

#[test]
fn the_memory_store_keeps_none_unless_given_a_root() {
    assert_eq!(MemoryStore::new().journal_dir("s1"), None);
    let store = MemoryStore::with_journal_root("/tmp/root");
    assert_eq!(
        store.journal_dir("s1"),
        Some(std::path::PathBuf::from("/tmp/root/s1"))
    );
    assert_eq!(store.journal_dir("../s1"), None);
}
