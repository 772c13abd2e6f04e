//! The red team racing Keel's file tools: while the model calls a file tool
//! 300 times on `d/…`, a background thread swaps the workspace directory `d`
//! with a symlink to a directory outside (`renameat2(RENAME_EXCHANGE)` in a
//! loop). Keel checks a path by name, so only opening it beneath the root
//! handle with no symlink followed keeps it inside. Judged by effect,
//! through `keel run` in `auto` (a call classified while `d` was the
//! symlink asks, and the host denies by closing its input): `write` puts no
//! file outside, `edit` leaves the outside file unchanged, and `read`,
//! `grep`, `ls` and `find` return nothing from outside.
//! docs/security.md lists these cases.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
use serde_json::{Value, json};

const SECRET: &str = "OUTSIDE-SECRET-c41d";
const OUTSIDE_NAME: &str = "outside-only-name-7e2a";
const CALLS: usize = 300;
/// How long `d` stays a real directory, and a symlink, per swap.
const REAL_US: u64 = 1500;
const SYMLINK_US: u64 = 100;

struct Race {
    base: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    swapper: Option<JoinHandle<()>>,
}

impl Race {
    fn new() -> Race {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        let outside = base.path().join("outside");
        std::fs::create_dir_all(ws.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(ws.join("d/f"), "line inside\n").unwrap();
        std::fs::write(outside.join("f"), format!("line {SECRET}\n")).unwrap();
        std::fs::write(outside.join(OUTSIDE_NAME), format!("{SECRET}\n")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("dswap")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let (d, dswap) = (ws.join("d"), ws.join("dswap"));
        let swapper = {
            let (stop, swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
            std::thread::spawn(move || {
                let mut real = true;
                while !stop.load(Ordering::Relaxed) {
                    if renameat2(AT_FDCWD, &d, AT_FDCWD, &dswap, RenameFlags::RENAME_EXCHANGE)
                        .is_ok()
                    {
                        swaps.fetch_add(1, Ordering::Relaxed);
                        real = !real;
                    }
                    // `d` stays real for long (so most calls pass the checks
                    // by name) and a symlink for a moment (so some opens
                    // fall between a check and the open).
                    let pause = if real { REAL_US } else { SYMLINK_US };
                    std::thread::sleep(std::time::Duration::from_micros(pause));
                }
                // Leave the real directory at `d`.
                if std::fs::symlink_metadata(&d)
                    .unwrap()
                    .file_type()
                    .is_symlink()
                {
                    renameat2(AT_FDCWD, &d, AT_FDCWD, &dswap, RenameFlags::RENAME_EXCHANGE)
                        .unwrap();
                }
            })
        };
        Race {
            base,
            stop,
            swaps,
            swapper: Some(swapper),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.base.path().join(rel)
    }

    /// One `keel run` in `auto` whose model calls `tool` with each of `calls`.
    fn run(&self, tool: &str, calls: Vec<Value>) -> String {
        let content: Vec<Value> = calls
            .into_iter()
            .map(|arguments| json!({"type": "tool_call", "name": tool, "arguments": arguments}))
            .collect();
        let script = json!({"turns": [
            {"content": content},
            {"content": [{"type": "text", "text": "done"}]}
        ]});
        let script_path = self.path("script.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        let output = common::keel_command()
            .args([
                "run",
                "--output-format",
                "stream-json",
                "--provider",
                "scripted",
                "--mode",
                "auto",
            ])
            .args(["--tools", "read,write,edit,grep,find,ls"])
            .arg("--script")
            .arg(&script_path)
            .arg("--workspace")
            .arg(self.path("ws"))
            .arg("--session-dir")
            .arg(self.path("sessions"))
            .env("XDG_DATA_HOME", self.path("data"))
            .stdin(std::process::Stdio::null())
            .arg("race")
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(printed.contains("\"type\":\"run_settled\""), "{printed}");
        printed
    }

    /// Stops the swapper; how many swaps it made.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(swapper) = self.swapper.take() {
            swapper.join().unwrap();
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

/// How many of the run's calls succeeded.
fn successes(printed: &str) -> usize {
    printed
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "tool_execution_end")
        .filter(|event| event["result"]["status"] == "success")
        .count()
}

fn outside_untouched(race: &Race) {
    let mut names: Vec<String> = std::fs::read_dir(race.path("outside"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["f", OUTSIDE_NAME], "a file landed outside");
    let content = std::fs::read_to_string(race.path("outside/f")).unwrap();
    assert_eq!(
        content,
        format!("line {SECRET}\n"),
        "the outside file changed"
    );
}

fn no_leak(printed: &str, what: &str) {
    assert!(
        !printed.contains(SECRET),
        "{what} returned the outside secret"
    );
    assert!(
        !printed.contains(OUTSIDE_NAME),
        "{what} returned an outside name"
    );
}

#[test]
fn racing_a_swapped_directory_puts_nothing_outside_and_returns_nothing_from_it() {
    let race = Race::new();
    let mut report = Vec::new();

    let writes = (0..CALLS)
        .map(|i| json!({"path": format!("d/w{i}"), "content": "x"}))
        .collect();
    let printed = race.run("write", writes);
    outside_untouched(&race);
    report.push(("write", successes(&printed)));

    let edits = (0..CALLS)
        .map(|i| {
            let (old, new) = if i % 2 == 0 {
                ("line", "LINE")
            } else {
                ("LINE", "line")
            };
            json!({"path": "d/f", "edits": [{"old_text": old, "new_text": new}]})
        })
        .collect();
    let printed = race.run("edit", edits);
    outside_untouched(&race);
    report.push(("edit", successes(&printed)));

    let reads = (0..CALLS).map(|_| json!({"path": "d/f"})).collect();
    let printed = race.run("read", reads);
    no_leak(&printed, "read");
    report.push(("read", successes(&printed)));

    let greps = (0..CALLS)
        .map(|_| json!({"pattern": "SECRET|inside|line", "path": "d"}))
        .collect();
    let printed = race.run("grep", greps);
    no_leak(&printed, "grep");
    report.push(("grep", successes(&printed)));

    let lists = (0..CALLS).map(|_| json!({"path": "d"})).collect();
    let printed = race.run("ls", lists);
    no_leak(&printed, "ls");
    report.push(("ls", successes(&printed)));

    let finds = (0..CALLS)
        .map(|_| json!({"pattern": "*", "path": "d"}))
        .collect();
    let printed = race.run("find", finds);
    no_leak(&printed, "find");
    report.push(("find", successes(&printed)));

    outside_untouched(&race);
    let swaps = race.finish();
    println!("race: {swaps} swaps; successes per {CALLS} calls: {report:?}");
    // Not vacuous: the directory really moved, and calls really ran
    // (how many won the race varies from run to run).
    assert!(swaps > 500, "only {swaps} swaps");
    let succeeded: usize = report.iter().map(|(_, n)| n).sum();
    assert!(succeeded > 0, "no call succeeded: {report:?}");
}
