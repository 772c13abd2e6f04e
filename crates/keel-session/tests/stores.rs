//! Both stores against the conformance suite, and the JSONL store against
//! restarts, torn tails, damage and a second writer — through the public API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_session::conformance::{self, entry};
use keel_session::{JsonlStore, MemoryStore, NewSession, SessionError, SessionStore};
use proptest::prelude::*;

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

/// A session of `groups` (sizes given), returning the file path and the
/// file length before the last group.
fn build(dir: &Path, groups: &[usize]) -> (String, PathBuf, u64, Vec<String>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = JsonlStore::new(dir).unwrap();
        let id = store.create(NewSession::default()).await.unwrap();
        let path = file_of(&store, &id);
        let mut parent: Option<String> = None;
        let mut before_last = 0;
        let mut acked_before_last = Vec::new();
        let mut n = 0;
        for (g, size) in groups.iter().enumerate() {
            if g + 1 == groups.len() {
                before_last = std::fs::metadata(&path).unwrap().len();
                acked_before_last = store
                    .entries(&id)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|e| e.id)
                    .collect();
            }
            let mut group = Vec::new();
            for _ in 0..*size {
                n += 1;
                let id = format!("e{n}");
                group.push(entry(&id, parent.as_deref()));
                parent = Some(id);
            }
            store.append(&id, group).await.unwrap();
        }
        (id, path, before_last, acked_before_last)
    })
}

fn open_ids(dir: &Path, id: &str) -> (Result<Vec<String>, SessionError>, bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = JsonlStore::new(dir).unwrap();
        let ids = store
            .entries(id)
            .await
            .map(|entries| entries.into_iter().map(|e| e.id).collect());
        (ids, store.repaired_tail(id).is_some())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn a_torn_or_damaged_last_group_is_cut_and_nothing_acknowledged_is_lost(
        groups in prop::collection::vec(1usize..4, 2..5),
        mask in 1u8..=255,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (id, path, before_last, acked) = build(dir.path(), &groups);
        let full = std::fs::read(&path).unwrap();
        let copy = tempfile::tempdir().unwrap();
        let copy_path = copy.path().join(format!("{id}.jsonl"));
        // Truncation at every byte offset inside the last group.
        for cut in before_last..full.len() as u64 {
            std::fs::write(&copy_path, &full[..cut as usize]).unwrap();
            let (ids, repaired) = open_ids(copy.path(), &id);
            prop_assert_eq!(ids.unwrap(), acked.clone(), "cut at {}", cut);
            prop_assert_eq!(repaired, cut > before_last, "cut at {} reported", cut);
            prop_assert_eq!(std::fs::metadata(&copy_path).unwrap().len(), before_last);
        }
        // Any byte of the last record flipped.
        let last_line_start = full[..full.len() - 1].iter().rposition(|&b| b == b'\n').unwrap() + 1;
        for position in last_line_start..full.len() {
            let mut damaged = full.clone();
            damaged[position] ^= mask;
            std::fs::write(&copy_path, &damaged).unwrap();
            let (ids, repaired) = open_ids(copy.path(), &id);
            prop_assert_eq!(ids.unwrap(), acked.clone(), "flip at {}", position);
            prop_assert!(repaired, "flip at {} must be reported", position);
        }
    }
}
