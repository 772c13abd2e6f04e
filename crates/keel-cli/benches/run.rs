//! In-process benchmarks of a scripted run through `keel_kernel::AgentKernel`.
//!
//! No process is spawned and nothing is printed: each iteration builds a
//! kernel over a fresh temporary workspace, plays a script through the real
//! kernel, provider stream, accumulator, tools and a session store, drains
//! the event stream and checks the run settled. The tool turns use
//! only `read` and `edit` (no `bash`), so the numbers are the kernel's own
//! cost, not the shell's. `scripts/bench.sh` measures the whole binary.
//!
//! Benchmarks:
//! - `scripted_run`: N tool turns (read + edit of `counter.txt`) and a final
//!   text turn, with the in-memory session store; the kernel's per-turn cost
//!   and its growth with N.
//! - `scripted_run_jsonl`: the same 10-turn run on the JSONL store `keel run`
//!   uses, so each append is written and fsynced to the temporary directory.
//! - `streamed_text`: one turn streaming 64 KiB of text in 8-character
//!   deltas (8192 events): the streaming and accumulation path.
//! - `serialize_events`: the events of a 10-turn run written as JSON Lines,
//!   the way `keel run` prints them (via `serde_json::Value`) and directly.
//!
//! Run with `cargo bench -p keel-cli` (a few seconds).

// Benches may panic on setup failure: a broken fixture must stop the bench.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, LazyLock};

use divan::Bencher;
use keel_kernel::{AgentKernel, RunSpec};
use keel_protocol::{PermissionMode, RunEvent, RunState};
use keel_provider::{Script, ScriptedProvider};
use keel_session::{JsonlStore, MemoryStore, SessionStore};
use keel_tools::Tool;
use keel_tools::Workspace;
use keel_tools::builtin::{EditTool, ReadTool};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Runs the benchmarks.
fn main() {
    divan::main();
}

/// One runtime for every iteration, shaped like the CLI's (two workers).
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
});

/// A script of `turns` read + edit turns on `counter.txt` and a final text turn.
fn counter_script(turns: usize) -> Script {
    let mut list: Vec<serde_json::Value> = (0..turns)
        .map(|i| {
            json!({"content": [
                {"type": "tool_call", "name": "read", "arguments": {"path": "counter.txt"}},
                {"type": "tool_call", "name": "edit", "arguments": {
                    "path": "counter.txt",
                    "edits": [{"old_text": format!("value {i}\n"), "new_text": format!("value {}\n", i + 1)}],
                }},
            ]})
        })
        .collect();
    list.push(json!({"content": [{"type": "text", "text": format!("Counted to {turns}.")}]}));
    Script::from_json(&json!({ "turns": list }).to_string()).expect("valid script")
}

/// A one-turn script streaming `bytes` of text in 8-character deltas.
fn text_script(bytes: usize) -> Script {
    let text = "lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(bytes / 57 + 1);
    let text: String = text.chars().take(bytes).collect();
    Script::from_json(
        &json!({"chunk_chars": 8, "turns": [{"content": [{"type": "text", "text": text}]}]})
            .to_string(),
    )
    .expect("valid script")
}

/// Which session store a run writes to.
#[derive(Clone, Copy)]
enum Store {
    /// `MemoryStore`: no I/O.
    Memory,
    /// `JsonlStore` in `sessions/` of the temporary directory.
    Jsonl,
}

/// A temporary directory, removed on drop even if a session writer thread
/// is still finishing its summary file in it (it outlives the store briefly).
struct Fixture {
    path: PathBuf,
}

impl Fixture {
    /// The directory.
    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Fixture {
    /// Removes the directory, retrying while a late write refills it.
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir_all(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A fresh temporary directory whose `ws/` workspace holds `counter.txt` = "value 0".
fn workspace() -> Fixture {
    let path = tempfile::Builder::new()
        .prefix("keel-bench-")
        .tempdir()
        .expect("tempdir")
        .keep();
    std::fs::create_dir(path.join("ws")).expect("create ws/");
    std::fs::write(path.join("ws/counter.txt"), "value 0\n").expect("write counter.txt");
    Fixture { path }
}

/// Plays `script` in `directory` with read + edit and returns every event.
async fn play(script: Script, directory: &Fixture, store: Store) -> Vec<RunEvent> {
    let tools: [Arc<dyn Tool>; 2] = [Arc::new(ReadTool::default()), Arc::new(EditTool::default())];
    let store: Arc<dyn SessionStore> = match store {
        Store::Memory => Arc::new(MemoryStore::new()),
        Store::Jsonl => {
            Arc::new(JsonlStore::new(directory.path().join("sessions")).expect("session store"))
        }
    };
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(script)))
        .workspace(Workspace::new(directory.path().join("ws")).expect("workspace"))
        .store(store)
        .tools(tools)
        .build()
        .expect("kernel");
    let spec = RunSpec::new("count").mode(PermissionMode::Auto);
    let run = kernel.create_run(spec).await.expect("run starts");
    let mut stream = run.events().expect("event stream");
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
    }
    let result = run.result().await;
    assert_eq!(
        result.state,
        RunState::Settled,
        "run did not settle: {:?}",
        result.error
    );
    events
}

/// Plays `script` in a fresh workspace on `store`, once per sample.
fn bench_play(bencher: Bencher, script: Script, store: Store) {
    bencher
        .with_inputs(|| (script.clone(), workspace()))
        .bench_local_values(|(script, directory)| {
            let events = RUNTIME.block_on(play(script, &directory, store));
            (events, directory)
        });
}

/// N read + edit turns plus a final text turn, end to end in process.
#[divan::bench(args = [1, 10, 50], sample_count = 20, max_time = 2)]
fn scripted_run(bencher: Bencher, turns: usize) {
    let script = counter_script(turns);
    bench_play(bencher, script, Store::Memory);
}

/// The 10-turn run on the JSONL store: every append is fsynced.
#[divan::bench(sample_count = 10, max_time = 3)]
fn scripted_run_jsonl(bencher: Bencher) {
    let script = counter_script(10);
    bench_play(bencher, script, Store::Jsonl);
}

/// One turn streaming 64 KiB of text as 8192 deltas.
#[divan::bench(sample_count = 20, max_time = 2)]
fn streamed_text(bencher: Bencher) {
    let script = text_script(64 * 1024);
    bench_play(bencher, script, Store::Memory);
}

/// The events of one 10-turn run, recorded once for the serialization benches.
static EVENTS: LazyLock<Vec<RunEvent>> = LazyLock::new(|| {
    let directory = workspace();
    RUNTIME.block_on(play(counter_script(10), &directory, Store::Memory))
});

/// JSON Lines of the 10-turn run's events the way `keel run` writes them:
/// each event through `serde_json::to_value`, then `Display`.
#[divan::bench(sample_count = 50, max_time = 1)]
fn serialize_events_via_value(bencher: Bencher) {
    let events = &*EVENTS;
    bencher
        .counter(divan::counter::ItemsCount::new(events.len()))
        .bench(|| {
            let mut out = Vec::with_capacity(64 * 1024);
            for event in events {
                let value = serde_json::to_value(event).unwrap_or_default();
                writeln!(out, "{value}").expect("write to Vec");
            }
            out
        });
}

/// The same JSON Lines written directly with `serde_json::to_writer`.
#[divan::bench(sample_count = 50, max_time = 1)]
fn serialize_events_direct(bencher: Bencher) {
    let events = &*EVENTS;
    bencher
        .counter(divan::counter::ItemsCount::new(events.len()))
        .bench(|| {
            let mut out = Vec::with_capacity(64 * 1024);
            for event in events {
                serde_json::to_writer(&mut out, event).expect("serialize event");
                out.push(b'\n');
            }
            out
        });
}
