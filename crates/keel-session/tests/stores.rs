//! Both stores against the conformance suite, and the JSONL store against
//! restarts, torn tails, damage and a second writer — through the public API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_session::conformance::{self, entry};
use keel_session::{JsonlStore, MemoryStore, NewSession, SessionError, SessionStore};

#[tokio::test]
async fn memory_store_conforms() {
    conformance::run_all(&|| Arc::new(MemoryStore::new()) as Arc<dyn SessionStore>).await;
}

#[tokio::test]
async fn jsonl_store_conforms() {
    let root = tempfile::tempdir().unwrap();
    let counter = AtomicUsize::new(0);
    let factory = || {
        let dir = root
            .path()
            .join(counter.fetch_add(1, Ordering::Relaxed).to_string());
        Arc::new(JsonlStore::new(dir).unwrap()) as Arc<dyn SessionStore>
    };
    conformance::run_all(&factory).await;
}

fn file_of(store: &JsonlStore, id: &str) -> PathBuf {
    store.dir().join(format!("{id}.jsonl"))
}

#[tokio::test]
async fn sessions_and_branch_switches_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = JsonlStore::new(dir.path()).unwrap();
        let id = store.create(NewSession::default()).await.unwrap();
        store
            .append(&id, vec![entry("a", None), entry("b", Some("a"))])
            .await
            .unwrap();
        store
            .append(&id, vec![entry("c", Some("a"))])
            .await
            .unwrap();
        store.set_leaf(&id, "b").await.unwrap();
        id
    };
    let store = JsonlStore::new(dir.path()).unwrap();
    assert_eq!(
        store.leaf(&id).await.unwrap().as_deref(),
        Some("b"),
        "the leaf survives a restart"
    );
    let branch: Vec<String> = store
        .active_branch(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(branch, ["a", "b"]);
    assert_eq!(store.entries(&id).await.unwrap().len(), 3);
    assert!(store.repaired_tail(&id).is_none());
    let listed = store.list().await.unwrap();
    assert_eq!(listed[0].entries, 3);
    assert!(listed[0].bytes > 0);
}

#[tokio::test]
async fn a_second_writer_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let first = JsonlStore::new(dir.path()).unwrap();
    let id = first.create(NewSession::default()).await.unwrap();
    first.append(&id, vec![entry("a", None)]).await.unwrap();
    // The first store writes the session, as a run in another process does.
    let _lease = first.open_writer(&id).await.unwrap();
    let before = std::fs::read(file_of(&first, &id)).unwrap();
    let second = JsonlStore::new(dir.path()).unwrap();
    let refused = second.append(&id, vec![entry("b", Some("a"))]).await;
    assert!(
        matches!(&refused, Err(SessionError::Locked(_))),
        "{refused:?}"
    );
    assert!(refused.unwrap_err().to_string().contains("one writer"));
    assert_eq!(std::fs::read(file_of(&first, &id)).unwrap(), before);
    let snapshot = second.snapshot(&id).unwrap();
    assert_eq!(snapshot.entries.len(), 1, "reading does not need the lock");
}

/// A session whose last batch (`b`) is torn: a crash left half of it, and
/// no summary vouches for it.
async fn torn_session(dir: &std::path::Path) -> (String, PathBuf, Vec<u8>) {
    let store = JsonlStore::new(dir).unwrap();
    let id = store.create(NewSession::default()).await.unwrap();
    store.append(&id, vec![entry("a", None)]).await.unwrap();
    let path = file_of(&store, &id);
    let intact = std::fs::metadata(&path).unwrap().len() as usize;
    store
        .append(&id, vec![entry("b", Some("a"))])
        .await
        .unwrap();
    drop(store);
    let full = std::fs::read(&path).unwrap();
    let torn = full[..intact + (full.len() - intact) / 2].to_vec();
    std::fs::write(&path, &torn).unwrap();
    std::fs::remove_file(dir.join(format!("{id}.meta.json"))).unwrap();
    (id, path, torn)
}

#[tokio::test]
async fn reads_while_another_process_holds_the_lock_leave_lock_and_tail_alone() {
    use nix::fcntl::{Flock, FlockArg};
    let dir = tempfile::tempdir().unwrap();
    let (id, path, torn) = torn_session(dir.path()).await;
    // A writer elsewhere holds the file lock (flock locks belong to an open
    // file, so this one stands for another process's).
    let elsewhere = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let elsewhere = Flock::lock(elsewhere, FlockArg::LockExclusiveNonblock).unwrap();

    let store = JsonlStore::new(dir.path()).unwrap();
    assert_eq!(store.leaf(&id).await.unwrap().as_deref(), Some("a"));
    let branch = store.active_branch(&id).await.unwrap();
    assert_eq!(branch, [entry("a", None)], "the complete groups are read");
    assert_eq!(store.context_branch(&id).await.unwrap(), branch);
    assert_eq!(store.entries(&id).await.unwrap(), branch);
    let listed = store.list().await.unwrap();
    assert!(listed[0].torn.is_some(), "the listing shows the tail");
    assert_eq!(store.resolve_id(&id).await.unwrap(), id);
    assert_eq!(store.open_sessions(), 0, "no read opened the session");
    assert_eq!(std::fs::read(&path).unwrap(), torn, "no read cut the tail");
    let writer = store.open_writer(&id).await;
    assert!(
        matches!(&writer, Err(SessionError::Locked(_))),
        "the other writer still holds the lock: {writer:?}"
    );

    // Once the other writer is gone, nothing of this store holds the lock.
    drop(elsewhere);
    let probe = std::fs::File::open(&path).unwrap();
    let probe = Flock::lock(probe, FlockArg::LockExclusiveNonblock);
    assert!(probe.is_ok(), "reads left no lock behind");
    drop(probe);
    let lease = store.open_writer(&id).await.unwrap();
    let repair = lease
        .repair()
        .expect("the writer cuts the tail and says so");
    assert_eq!(repair.session_id, id);
    assert!(std::fs::read(&path).unwrap().len() < torn.len());
}

#[tokio::test]
async fn a_closed_session_is_unlocked_and_its_repair_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    let (id, path, _) = torn_session(dir.path()).await;
    let store = JsonlStore::new(dir.path()).unwrap();
    let checked = store.open_for_writing(&id).await.unwrap();
    assert!(checked.is_some(), "opening cut the torn tail");
    assert_eq!(store.open_sessions(), 0, "checking does not keep it open");
    let lease = store.open_writer(&id).await.unwrap();
    assert_eq!(
        lease.repair(),
        checked.as_ref(),
        "the next lease reports the repair"
    );
    // Another store (another process) cannot write while the lease lives…
    let other = JsonlStore::new(dir.path()).unwrap();
    let refused = other.append(&id, vec![entry("x", Some("a"))]).await;
    assert!(
        matches!(refused, Err(SessionError::Locked(_))),
        "{refused:?}"
    );
    drop(lease);
    // …and can once it is dropped: the file lock went with it.
    other
        .append(&id, vec![entry("x", Some("a"))])
        .await
        .unwrap();
    assert_eq!(other.open_sessions(), 0);
    let again = store.open_writer(&id).await.unwrap();
    assert_eq!(again.repair(), None, "a repair is reported once");
    assert_eq!(store.entries(&id).await.unwrap().len(), 2);
    assert!(std::fs::metadata(&path).unwrap().len() > 0);
}

#[tokio::test]
async fn bad_files_are_typed_errors_and_stay_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path()).unwrap();
    let write = |name: &str, text: &str| {
        std::fs::write(dir.path().join(format!("{name}.jsonl")), text).unwrap();
    };
    write("notes", "just some notes\n");
    write(
        "future",
        "{\"format\":\"keel-session\",\"version\":99,\"id\":\"future\",\"created\":1}\n",
    );
    let cases = [
        ("notes", "is not a Keel session"),
        ("future", "version 99"),
        ("../etc", "not a valid session id"),
    ];
    for (id, message) in cases {
        let error = store.leaf(id).await.unwrap_err();
        assert!(error.to_string().contains(message), "{id}: {error}");
    }
    assert!(matches!(
        store.leaf("notes").await,
        Err(SessionError::NotASession { .. })
    ));
    assert!(matches!(
        store.leaf("future").await,
        Err(SessionError::UnsupportedVersion { found: 99, .. })
    ));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.jsonl")).unwrap(),
        "just some notes\n"
    );
}

/// Rewrites the checksum of a record line after a deliberate edit.
fn reframe(line: &str) -> String {
    let body = &line[..line.len() - 18];
    format!(
        "{body},\"crc\":\"{:08x}\"}}",
        crc32fast::hash(body.as_bytes())
    )
}

#[tokio::test]
async fn a_record_whose_parent_is_missing_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = JsonlStore::new(dir.path()).unwrap();
        let id = store.create(NewSession::default()).await.unwrap();
        store.append(&id, vec![entry("a", None)]).await.unwrap();
        store
            .append(&id, vec![entry("b", Some("a"))])
            .await
            .unwrap();
        store
            .append(&id, vec![entry("c", Some("b"))])
            .await
            .unwrap();
        id
    };
    let path = dir.path().join(format!("{id}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[2] = reframe(&lines[2].replace("\"parent_id\":\"a\"", "\"parent_id\":\"ghost\""));
    let edited = lines.join("\n") + "\n";
    std::fs::write(&path, &edited).unwrap();
    let store = JsonlStore::new(dir.path()).unwrap();
    let error = store.leaf(&id).await.unwrap_err();
    assert!(
        matches!(&error, SessionError::Corrupt { line: 3, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("ghost"), "{error}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        edited,
        "a refused file is not repaired"
    );

    // Damage before the tail (a flipped byte in line 2) is refused, not truncated.
    let mut damaged = text.clone().into_bytes();
    let second_line = text.find('\n').unwrap() + 10;
    damaged[second_line] ^= 0x20;
    std::fs::write(&path, &damaged).unwrap();
    let store = JsonlStore::new(dir.path()).unwrap();
    let error = store.leaf(&id).await.unwrap_err();
    assert!(
        matches!(&error, SessionError::Corrupt { line: 2, .. }),
        "{error:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), damaged);
}
