//! Saved full outputs last as long as the runs that may read them, and a
//! store sees only its own outputs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keel_tools::outputs::OutputStore;

#[test]
fn outputs_are_removed_when_the_last_run_ends_unless_kept() {
    let parent = tempfile::tempdir().unwrap();
    let store = OutputStore::new(parent.path());
    let first = store.hold();
    let second = store.hold();
    let path = store.resolve(&store.save("bash", b"log").unwrap()).unwrap();
    assert!(path.starts_with(parent.path()));
    drop(first);
    assert!(path.exists(), "another run still holds the outputs");
    drop(second);
    assert!(!path.exists());
    assert!(!path.parent().unwrap().exists());

    store.keep_after_runs(true);
    let run = store.hold();
    let kept = store.resolve(&store.save("bash", b"log").unwrap()).unwrap();
    drop(run);
    drop(store);
    assert_eq!(std::fs::read(&kept).unwrap(), b"log");
}

#[test]
fn a_store_does_not_resolve_another_stores_outputs() {
    let parent = tempfile::tempdir().unwrap();
    let (a, b) = (
        OutputStore::new(parent.path()),
        OutputStore::new(parent.path()),
    );
    let (_run_a, _run_b) = (a.hold(), b.hold());
    let reference = b.save("grep", b"secret of b").unwrap();
    let in_b = b.resolve(&reference).unwrap();
    assert_eq!(std::fs::read(&in_b).unwrap(), b"secret of b");
    assert!(
        a.resolve(&reference).is_none_or(|path| !path.exists()),
        "A resolved B's output"
    );
}

#[test]
fn dropping_the_store_removes_its_outputs() {
    let parent = tempfile::tempdir().unwrap();
    let store = OutputStore::new(parent.path());
    let path = store.resolve(&store.save("bash", b"log").unwrap()).unwrap();
    drop(store);
    assert!(!path.exists());
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
}
