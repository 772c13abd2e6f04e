//! Saved full outputs last as long as the runs that may read them. A test
//! binary of its own: removing the directory must not race other tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keel_tools::outputs::{hold, keep_after_runs, resolve, save};

#[test]
fn outputs_are_removed_when_the_last_run_ends_unless_kept() {
    let first = hold();
    let second = hold();
    let path = resolve(&save("bash", b"log").unwrap()).unwrap();
    drop(first);
    assert!(path.exists(), "another run still holds the outputs");
    drop(second);
    assert!(!path.exists());
    assert!(!path.parent().unwrap().exists());

    keep_after_runs(true);
    let run = hold();
    let kept = resolve(&save("bash", b"log").unwrap()).unwrap();
    drop(run);
    assert_eq!(std::fs::read(&kept).unwrap(), b"log");
    std::fs::remove_dir_all(kept.parent().unwrap()).unwrap();
}
