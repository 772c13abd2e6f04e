//! The JSONL store's read-only side and its edges, through the public API:
//! readers and forks never lock or write (even beside a writer, even with a
//! torn tail), non-regular files are skipped, the summary sidecar is private
//! and checked against the file, and a failed create leaves no file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use keel_session::conformance::entry;
use keel_session::{JsonlStore, NewSession, SessionError, SessionStore};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A closed session `a → b → c` (three appends) in `dir`; returns its id.
fn written(dir: &Path) -> String {
    runtime().block_on(async {
        let store = JsonlStore::new(dir).unwrap();
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
    })
}

#[test]
fn a_fork_of_a_session_being_written_reads_a_snapshot_and_leaves_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let id = written(dir.path());
    let path = dir.path().join(format!("{id}.jsonl"));
    let runtime = runtime();
    // The writer holds the session open (and locked) throughout.
    let writer = JsonlStore::new(dir.path()).unwrap();
    runtime
        .block_on(writer.append(&id, vec![entry("d", Some("c"))]))
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    let other = JsonlStore::new(dir.path()).unwrap();
    let fork = runtime.block_on(other.fork(&id, "b")).unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the source is untouched"
    );
    let branch: Vec<String> = runtime
        .block_on(other.active_branch(&fork))
        .unwrap()
        .into_iter()
        .map(|entry| entry.id)
        .collect();
    assert_eq!(branch, ["a", "b"]);
    // The writer still owns its session and keeps appending.
    runtime
        .block_on(writer.append(&id, vec![entry("e", Some("d"))]))
        .unwrap();
    assert_eq!(
        other.reader(&id).unwrap().len(),
        5,
        "a reader sees the new append"
    );
}

#[test]
fn reading_a_torn_session_reports_the_tail_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let id = written(dir.path());
    let path = dir.path().join(format!("{id}.jsonl"));
    let meta = dir.path().join(format!("{id}.meta.json"));
    let full = std::fs::read(&path).unwrap();
    // A crash in the last append: its line is cut short. The summary from
    // before it is what a crash would leave, so drop the later one.
    let torn = &full[..full.len() - 7];
    std::fs::write(&path, torn).unwrap();
    std::fs::remove_file(&meta).unwrap();
    let store = JsonlStore::new(dir.path()).unwrap();
    let reader = store.reader(&id).unwrap();
    let tail = reader.torn().expect("the torn tail is reported");
    assert_eq!(tail.line, 4);
    assert_eq!(reader.len(), 2);
    assert_eq!(reader.active_ids(), ["a", "b"]);
    let fork = runtime().block_on(store.fork(&id, "b")).unwrap();
    let listed = runtime().block_on(store.list()).unwrap();
    let info = listed.iter().find(|info| info.id == id).unwrap();
    assert_eq!(info.torn.as_ref(), Some(tail), "the listing shows the tail");
    assert_eq!((info.problem.clone(), info.entries), (None, 2));
    assert_eq!(store.snapshot(&id).unwrap().entries.len(), 2);
    assert_eq!(std::fs::read(&path).unwrap(), torn, "readers never cut");
    assert!(!meta.exists(), "readers never write a summary");
    // Only a writer cuts, and it reports what it cut.
    let repair = runtime().block_on(store.open_for_writing(&id)).unwrap();
    assert_eq!(repair.unwrap().torn, tail.clone());
    assert_ne!(fork, id);
}

#[test]
fn a_fifo_named_like_a_session_is_skipped_and_never_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let id = written(dir.path());
    let fifo = dir.path().join("x.jsonl");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let (done, finished) = std::sync::mpsc::channel();
    let root = dir.path().to_owned();
    std::thread::spawn(move || {
        let store = JsonlStore::new(&root).unwrap();
        let runtime = runtime();
        let listed = runtime.block_on(store.list());
        let opened = runtime.block_on(store.open_for_writing("x"));
        let read = store.reader("x").map(|_| ());
        let resolved = runtime.block_on(store.resolve_id("x"));
        let _ = done.send((listed, opened, read, resolved));
    });
    let (listed, opened, read, resolved) = finished
        .recv_timeout(Duration::from_secs(10))
        .expect("nothing blocks on a FIFO");
    let ids: Vec<String> = listed.unwrap().into_iter().map(|info| info.id).collect();
    assert_eq!(ids, [id], "the FIFO is not listed");
    assert!(
        matches!(opened, Err(SessionError::NotASession { .. })),
        "{opened:?}"
    );
    assert!(
        matches!(read, Err(SessionError::NotASession { .. })),
        "{read:?}"
    );
    assert!(
        matches!(resolved, Err(SessionError::SessionNotFound(_))),
        "{resolved:?}"
    );
}

#[test]
fn the_summary_is_private_and_trusted_only_while_it_describes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let id = written(dir.path());
    let meta = dir.path().join(format!("{id}.meta.json"));
    let mode = std::fs::metadata(&meta).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the summary holds the first prompt");
    let store = JsonlStore::new(dir.path()).unwrap();
    let listed = runtime().block_on(store.list()).unwrap();
    assert_eq!((listed[0].entries, listed[0].problem.clone()), (3, None));

    // Same length, same modification time, but the last record changed: the
    // summary's checksum of the last record no longer matches, so the file
    // is rescanned (and found damaged).
    let path = dir.path().join(format!("{id}.jsonl"));
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 30;
    bytes[at] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    let listed = runtime().block_on(store.list()).unwrap();
    let problem = listed[0].problem.clone().unwrap_or_default();
    assert!(
        problem.contains(":4:"),
        "the rescan names the damage: {problem}"
    );

    // A summary in the old format (or any unparseable one) is ignored.
    std::fs::write(&meta, b"{\"file_len\":1}").unwrap();
    let listed = runtime().block_on(store.list()).unwrap();
    assert!(listed[0].problem.is_some());
}

/// Run as a child by the next test: creates a session with a file-size limit
/// of zero (the shell sets it), so writing the header fails like a full disk.
#[test]
fn create_child() {
    let Some(dir) = std::env::var_os("KEEL_CREATE_DIR") else {
        return;
    };
    let store = JsonlStore::new(dir).unwrap();
    let new = {
        let mut new_session = NewSession::default();
        new_session.id = Some("full".into());
        new_session
    };
    match runtime().block_on(store.create(new)) {
        Ok(id) => println!("created {id}"),
        Err(error) => println!("refused {}: {error}", error.code()),
    }
}

#[test]
fn a_failed_create_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new("sh")
        .args(["-c", "trap '' XFSZ; ulimit -f 0; exec \"$@\"", "sh"])
        .arg(std::env::current_exe().unwrap())
        .args(["create_child", "--exact", "--nocapture", "--test-threads=1"])
        .env("KEEL_CREATE_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("refused session_io"), "{stdout}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert!(left.is_empty(), "nothing is left behind: {left:?}");
}

/// The workspace a session was created for is listed — from a fresh scan,
/// from the summary sidecar, and from a sidecar written before the summary
/// cached it (the header is read then) — and a fork keeps it, in both stores.
#[test]
fn the_workspace_is_listed_and_forks_keep_it() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime();
    let id = runtime.block_on(async {
        let store = JsonlStore::new(dir.path()).unwrap();
        let new = {
            let mut new_session = NewSession::default();
            new_session.workspace = Some("/work/project".into());
            new_session
        };
        let id = store.create(new).await.unwrap();
        store.append(&id, vec![entry("a", None)]).await.unwrap();
        id
    });
    let workspace_of = |store: &JsonlStore, id: &str| {
        let listed = runtime.block_on(store.list()).unwrap();
        listed
            .into_iter()
            .find(|info| info.id == id)
            .unwrap()
            .workspace
    };
    // The writer closed: its sidecar describes the file and holds the workspace.
    let meta = dir.path().join(format!("{id}.meta.json"));
    let sidecar: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
    assert_eq!(sidecar["workspace"], "/work/project");
    let store = JsonlStore::new(dir.path()).unwrap();
    assert_eq!(workspace_of(&store, &id).as_deref(), Some("/work/project"));
    // A sidecar of an older Keel, without the field, still trusted: the header is read.
    let mut old = sidecar.clone();
    old.as_object_mut().unwrap().remove("workspace");
    std::fs::write(&meta, old.to_string()).unwrap();
    assert_eq!(workspace_of(&store, &id).as_deref(), Some("/work/project"));
    assert_eq!(
        std::fs::read(&meta).unwrap(),
        old.to_string().into_bytes(),
        "listing never writes the sidecar"
    );
    // No sidecar: a scan.
    std::fs::remove_file(&meta).unwrap();
    assert_eq!(workspace_of(&store, &id).as_deref(), Some("/work/project"));
    // A fork keeps the source's workspace.
    let fork = runtime.block_on(store.fork(&id, "a")).unwrap();
    assert_eq!(
        store.snapshot(&fork).unwrap().workspace.as_deref(),
        Some("/work/project")
    );
    let memory = keel_session::MemoryStore::new();
    let forked = runtime.block_on(async {
        let new = {
            let mut new_session = NewSession::default();
            new_session.workspace = Some("/w".into());
            new_session
        };
        let id = memory.create(new).await.unwrap();
        memory.append(&id, vec![entry("a", None)]).await.unwrap();
        memory.fork(&id, "a").await.unwrap()
    });
    let listed = runtime.block_on(memory.list()).unwrap();
    let info = listed.iter().find(|info| info.id == forked).unwrap();
    assert_eq!(info.workspace.as_deref(), Some("/w"));
}

/// An I/O failure keeps the operating system's error and the path it was
/// on (a caller can match on the kind), and says both in its message.
#[test]
fn an_io_error_keeps_the_path_and_the_operating_systems_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    // A store beneath a regular file: creating its directory fails in the
    // kernel (ENOTDIR), not in Keel's checks.
    let root = file.join("sessions");
    let error = JsonlStore::new(&root).unwrap_err();
    let SessionError::Io { path, source } = &error else {
        panic!("expected an I/O error, got {error:?}");
    };
    assert!(
        root.starts_with(path),
        "{path:?} is not on the way to {root:?}"
    );
    assert_eq!(source.kind(), std::io::ErrorKind::NotADirectory);
    assert!(std::error::Error::source(&error).is_some());
    assert!(error.to_string().contains(&path.display().to_string()));
    assert_eq!(error.code(), "session_io");
}
