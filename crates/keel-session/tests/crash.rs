//! A writer killed with SIGKILL in the middle of appends, 50 times: every
//! append acknowledged before the kill is there afterwards.
//!
//! The test re-runs its own binary as the writer (`crash_writer`, which does
//! nothing unless `KEEL_CRASH_DIR` is set), reads the ids the writer reports
//! as acknowledged, kills it at a varying moment, then reopens the session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use keel_session::conformance::entry;
use keel_session::{JsonlStore, NewSession, SessionStore};

#[test]
fn crash_writer() {
    let (Some(dir), Ok(session), Ok(round)) = (
        std::env::var_os("KEEL_CRASH_DIR"),
        std::env::var("KEEL_CRASH_SESSION"),
        std::env::var("KEEL_CRASH_ROUND"),
    ) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = JsonlStore::new(dir).unwrap();
        let mut parent = store.leaf(&session).await.unwrap();
        for n in 0.. {
            let id = format!("r{round}-{n}");
            // Alternate single entries and groups of three.
            let group: Vec<_> = (0..if n % 2 == 0 { 1 } else { 3 })
                .map(|k| {
                    let this = format!("{id}-{k}");
                    let made = entry(&this, parent.as_deref());
                    parent = Some(this);
                    made
                })
                .collect();
            let ids: Vec<String> = group.iter().map(|e| e.id.clone()).collect();
            store.append(&session, group).await.unwrap();
            println!("acked {}", ids.join(" "));
        }
    });
}

#[test]
fn acknowledged_appends_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let session = runtime.block_on(async {
        let store = JsonlStore::new(dir.path()).unwrap();
        store.create(NewSession::default()).await.unwrap()
    });
    let mut acked_total = 0;
    for round in 0..50u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["crash_writer", "--exact", "--nocapture", "--test-threads=1"])
            .env("KEEL_CRASH_DIR", dir.path())
            .env("KEEL_CRASH_SESSION", &session)
            .env("KEEL_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (lines, received) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(ids) = line.strip_prefix("acked ") {
                    let _ = lines.send(ids.split(' ').map(str::to_owned).collect::<Vec<_>>());
                }
            }
        });
        // Wait for the first acknowledgement, then kill at a varying moment.
        let first = received
            .recv_timeout(Duration::from_secs(20))
            .expect("the writer acknowledged nothing");
        std::thread::sleep(Duration::from_millis(round * 7 % 23));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        let mut acked: Vec<String> = first;
        acked.extend(received.try_iter().flatten());
        acked_total += acked.len();
        let stored: std::collections::HashSet<String> = runtime.block_on(async {
            let store = JsonlStore::new(dir.path()).unwrap();
            store
                .entries(&session)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.id)
                .collect()
        });
        for id in &acked {
            assert!(
                stored.contains(id),
                "round {round}: acknowledged entry {id} was lost"
            );
        }
    }
    assert!(
        acked_total >= 100,
        "the test must exercise many appends, saw {acked_total}"
    );
}
