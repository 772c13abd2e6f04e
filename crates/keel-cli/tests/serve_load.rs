//! The load test of `keel serve` (issue 23): a real server process on a
//! free loopback port, driven over WebSocket, its memory (and its sandbox
//! holders') sampled from `/proc`.
//!
//! Scenarios, each against a server of its own, one at a time (they
//! measure memory, so they must not overlap):
//! - [`thousand_runs_settle_within_a_gibibyte`]: 1,000 concurrent scripted
//!   runs, each in its own workspace (write, read, and in one run of ten a
//!   sandboxed `bash` call) all settle with the right files, and the server
//!   with its sandbox holders stays under 1 GiB (`.ci/run` runs it with
//!   1,000 runs against a release build; docs/benchmarks.md);
//! - [`parked_runs_cost_under_a_mebibyte_each`]: 1,000 runs waiting on a
//!   permission request cost < 1 MiB each beyond an empty server; denied
//!   or cancelled, they all settle;
//! - [`a_burst_past_the_limits_is_refused_at_once`]: starts past
//!   `--max-runs` and `--max-queue` get `retry_after_ms`, memory flat;
//! - [`a_client_that_stops_reading_does_not_grow_the_server`];
//! - [`a_flooding_token_does_not_starve_another`].
//!
//! Every number measured is printed on one line (`load: …`, see it with
//! `--nocapture`). `KEEL_LOAD_RUNS` sets the number of runs (default
//! 1,000 in a release build, 200 in a debug one: CI's `cargo test
//! --workspace` on two cores cannot fit 1,000 debug runs in its time
//! budget), `KEEL_LOAD_BIN` the server binary (scripts/bench-serve.sh
//! serves a release build) and `KEEL_LOAD_BASH_EVERY` which runs are
//! offered `bash` (default one in ten; 0: none). Every wait is bounded and
//! fails with what it waited for; the server is killed when a test ends,
//! whichever way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// The scenarios measure memory: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const MIB: f64 = 1024.0 * 1024.0;

/// How many runs the big scenarios start: `KEEL_LOAD_RUNS`, else 1,000 in
/// a release build and 200 in a debug one (`cargo test --workspace` on CI's
/// two cores: 1,000 debug runs take over a minute each scenario; see
/// docs/benchmarks.md).
fn load_runs() -> usize {
    std::env::var("KEEL_LOAD_RUNS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) { 200 } else { 1000 })
}

/// The `keel` binary serving: `KEEL_LOAD_BIN` (e.g. a release build, for
/// scripts/bench-serve.sh), else this test build's.
fn keel_bin() -> PathBuf {
    std::env::var_os("KEEL_LOAD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(assert_cmd::cargo::cargo_bin!("keel")))
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `scenario` with an overall bound that fails with its name.
fn bounded<F: std::future::Future<Output = ()>>(name: &str, limit: Duration, scenario: F) {
    let runtime = runtime();
    runtime.block_on(async {
        if tokio::time::timeout(limit, scenario).await.is_err() {
            panic!("{name}: did not finish within {limit:?}");
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
}

// ---------------------------------------------------------------------------
// The server process

/// A `keel serve` process with its own home, configuration, sessions and
/// workspaces; killed on drop.
struct Server {
    child: Child,
    address: String,
    dir: tempfile::TempDir,
}

impl Server {
    /// Starts `keel serve` on a free loopback port with the scripted
    /// provider playing `script`, `extra` flags and `config` as the user's
    /// config.toml.
    fn start(script: &Value, extra: &[&str], config: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let config_home = dir.path().join("config");
        std::fs::create_dir_all(config_home.join("keel")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(dir.path().join("workspaces")).unwrap();
        std::fs::write(config_home.join("keel/config.toml"), config).unwrap();
        let script_path = dir.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let mut command = Command::new(keel_bin());
        common::isolate(&mut command);
        command
            .arg("serve")
            .args([
                "--listen",
                "127.0.0.1:0",
                "--provider",
                "scripted",
                "--script",
            ])
            .arg(&script_path)
            .arg("--session-dir")
            .arg(dir.path().join("sessions"))
            .args(extra)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &config_home)
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .env("KEEL_LOG", "warn")
            .env_remove("KEEL_SERVER_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (found, address) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(value) = serde_json::from_str::<Value>(&line)
                    && value["type"] == "listening"
                {
                    let _ = found.send(value["address"].as_str().unwrap_or("").to_owned());
                }
            }
        });
        let mut server = Server {
            child,
            address: String::new(),
            dir,
        };
        match address.recv_timeout(Duration::from_secs(60)) {
            Ok(address) => server.address = address,
            Err(_) => panic!(
                "keel serve did not print its address within 60 s; its log:\n{}",
                server.log()
            ),
        }
        server
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        text.get(start..).unwrap_or(&text).to_owned()
    }

    /// A fresh workspace with `seed.txt` holding `seed`.
    fn workspace(&self, name: &str, seed: &str) -> PathBuf {
        let path = self.dir.path().join("workspaces").join(name);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("seed.txt"), seed).unwrap();
        path
    }

    async fn connect(&self, token: Option<&str>) -> Client {
        Client::connect(&self.address, token).await
    }

    /// `GET /metrics`, as name → value (samples without labels).
    fn metrics(&self, token: Option<&str>) -> HashMap<String, f64> {
        let mut stream = TcpStream::connect(&self.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let auth = token.map_or_else(String::new, |token| {
            format!("Authorization: Bearer {token}\r\n")
        });
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: {}\r\n{auth}Connection: close\r\n\r\n",
            self.address
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "GET /metrics: {text}");
        text.lines()
            .filter(|line| line.starts_with("keel_") && !line.contains('{'))
            .filter_map(|line| {
                let (name, value) = line.split_once(' ')?;
                Some((name.to_owned(), value.trim().parse().ok()?))
            })
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Memory of the server and its descendants (the sandbox holders)

/// Memory of a process tree, in KiB.
#[derive(Debug, Clone, Copy, Default)]
struct Memory {
    pss: u64,
    /// The server process's own PSS (the rest is its holders').
    server_pss: u64,
    rss: u64,
    /// Page tables (not in PSS/RSS, but memory all the same).
    page_tables: u64,
    processes: u64,
}

impl Memory {
    fn pss_mib(&self) -> f64 {
        self.pss as f64 / 1024.0
    }
}

fn descendants(root: u32) -> Vec<u32> {
    let mut all = vec![root];
    let mut index = 0;
    while index < all.len() {
        let pid = all[index];
        index += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            all.extend(
                children
                    .split_whitespace()
                    .filter_map(|pid| pid.parse::<u32>().ok()),
            );
        }
    }
    all
}

fn field(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|line| line.starts_with(name))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// PSS, RSS and page tables of `root` and every process under it.
fn memory(root: u32) -> Memory {
    let mut total = Memory::default();
    for pid in descendants(root) {
        let own = pid == root;
        let Ok(rollup) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) else {
            continue;
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        total.pss += field(&rollup, "Pss:");
        if own {
            total.server_pss = field(&rollup, "Pss:");
        }
        total.rss += field(&rollup, "Rss:");
        total.page_tables += field(&status, "VmPTE:");
        total.processes += 1;
    }
    total
}

/// Samples [`memory`] every `every` on a thread of its own until dropped.
struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Memory>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: u32, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let stop = Arc::clone(&stop);
            let samples = Arc::clone(&samples);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let sample = memory(pid);
                    samples.lock().unwrap().push(sample);
                    std::thread::sleep(every);
                }
            })
        };
        Sampler {
            stop,
            samples,
            thread: Some(thread),
        }
    }

    /// The peak of each measure over the samples (each at its own moment).
    fn peak(&self) -> Memory {
        let samples = self.samples.lock().unwrap();
        let mut peak = Memory::default();
        for sample in samples.iter() {
            peak.pss = peak.pss.max(sample.pss);
            peak.server_pss = peak.server_pss.max(sample.server_pss);
            peak.rss = peak.rss.max(sample.rss);
            peak.page_tables = peak.page_tables.max(sample.page_tables);
            peak.processes = peak.processes.max(sample.processes);
        }
        peak
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// ---------------------------------------------------------------------------
// A JSON-RPC client over WebSocket

/// A notification and when it arrived (ms since the epoch).
type Note = (u64, Value);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, Value>>>>>;

/// One connection: calls are matched to answers by id by a reader task;
/// notifications go to [`Client::notes`].
struct Client {
    out: mpsc::UnboundedSender<Message>,
    pending: Pending,
    next_id: AtomicU64,
    notes: tokio::sync::Mutex<mpsc::UnboundedReceiver<Note>>,
}

impl Client {
    async fn connect(address: &str, token: Option<&str>) -> Client {
        let mut request = format!("ws://{address}/").into_client_request().unwrap();
        if let Some(token) = token {
            request
                .headers_mut()
                .insert("Authorization", format!("Bearer {token}").parse().unwrap());
        }
        let (socket, _) = tokio_tungstenite::connect_async(request)
            .await
            .unwrap_or_else(|error| panic!("connecting to ws://{address}/: {error}"));
        let (mut sink, mut stream) = socket.split();
        let (out, mut outgoing) = mpsc::unbounded_channel::<Message>();
        tokio::spawn(async move {
            while let Some(message) = outgoing.recv().await {
                if sink.send(message).await.is_err() {
                    break;
                }
            }
        });
        let pending: Pending = Arc::default();
        let (notify, notes) = mpsc::unbounded_channel();
        {
            let pending = Arc::clone(&pending);
            tokio::spawn(async move {
                while let Some(Ok(message)) = stream.next().await {
                    let Message::Text(text) = message else {
                        continue;
                    };
                    let received = now_ms();
                    let Ok(value) = serde_json::from_str::<Value>(text.as_str()) else {
                        continue;
                    };
                    if let Some(id) = value.get("id").and_then(Value::as_u64) {
                        let answer = match value.get("error") {
                            Some(error) => Err(error.clone()),
                            None => Ok(value.get("result").cloned().unwrap_or(Value::Null)),
                        };
                        if let Some(waiter) = pending.lock().unwrap().remove(&id) {
                            let _ = waiter.send(answer);
                        }
                    } else if notify.send((received, value)).is_err() {
                        break;
                    }
                }
                // Closed: fail every call still waiting.
                pending.lock().unwrap().clear();
            });
        }
        let client = Client {
            out,
            pending,
            next_id: AtomicU64::new(1),
            notes: tokio::sync::Mutex::new(notes),
        };
        client
            .call("initialize", json!({ "client_name": "load-test" }))
            .await
            .expect("initialize");
        client
    }

    /// Calls `method`; the result, or the JSON-RPC error object.
    async fn call(&self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, wait) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, answer);
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.out
            .send(Message::Text(request.to_string().into()))
            .map_err(|_| json!({ "message": "connection closed" }))?;
        wait.await
            .unwrap_or_else(|_| Err(json!({ "message": "connection closed before the answer" })))
    }

    /// The next notification, if one comes within `limit`.
    async fn note(&self, limit: Duration) -> Option<Note> {
        tokio::time::timeout(limit, self.notes.lock().await.recv())
            .await
            .ok()
            .flatten()
    }
}

/// Events of many runs, as a client saw them: resubscribes a lagged run
/// from its last `seq`, so none is missed.
#[derive(Default)]
struct Seen {
    /// The events of each run, by run id.
    events: HashMap<String, Vec<Value>>,
    /// (event timestamp, receive time) in ms, for latency.
    latencies: Vec<u64>,
    lagged: u64,
}

impl Seen {
    fn record(&mut self, received: u64, note: &Value) -> Option<(String, Option<u64>)> {
        match note["method"].as_str() {
            Some("run/event") => {
                let event = &note["params"]["event"];
                let run_id = note["params"]["run_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if let Some(timestamp) = event["timestamp"].as_u64() {
                    self.latencies.push(received.saturating_sub(timestamp));
                }
                self.events.entry(run_id).or_default().push(event.clone());
                None
            }
            Some("run/events_lagged") => {
                self.lagged += 1;
                let params = &note["params"];
                Some((
                    params["run_id"].as_str().unwrap_or_default().to_owned(),
                    params["last_seq"].as_u64(),
                ))
            }
            _ => None,
        }
    }

    fn has(&self, run_id: &str, kind: &str) -> bool {
        self.events
            .get(run_id)
            .is_some_and(|events| events.iter().any(|event| event["type"] == kind))
    }

    fn count(&self, kind: &str) -> usize {
        self.events
            .values()
            .filter(|events| events.iter().any(|event| event["type"] == kind))
            .count()
    }
}

/// Reads `client`'s notifications into `seen` until `done(seen)` holds,
/// resubscribing lagged runs; fails after `limit` saying `what`.
async fn watch(
    client: &Client,
    seen: &mut Seen,
    limit: Duration,
    what: &str,
    done: impl Fn(&Seen) -> bool,
) {
    let deadline = Instant::now() + limit;
    while !done(seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "waited {limit:?} for {what}; seen: events of {} runs, {} permission requests, {} terminal, {} lagged notices",
            seen.events.len(),
            seen.count("permission_requested"),
            seen.count("run_settled") + seen.count("run_failed") + seen.count("run_cancelled"),
            seen.lagged
        );
        let Some((received, note)) = client.note(left.min(Duration::from_secs(1))).await else {
            continue;
        };
        if let Some((run_id, last_seq)) = seen.record(received, &note) {
            let mut params = json!({ "run_id": run_id });
            if let Some(seq) = last_seq {
                params["after_seq"] = json!(seq);
            }
            client
                .call("run/subscribe", params)
                .await
                .unwrap_or_else(|error| panic!("resubscribing {run_id}: {error}"));
        }
    }
}

/// Waits (bounded) until `metric` reaches `at_least`.
async fn wait_metric(
    server: &Server,
    token: Option<&str>,
    metric: &str,
    at_least: f64,
    limit: Duration,
) {
    let deadline = Instant::now() + limit;
    loop {
        let value = server.metrics(token).get(metric).copied().unwrap_or(0.0);
        if value >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "waited {limit:?} for {metric} >= {at_least} (it is {value}); server log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts one run; its ids.
async fn start(
    client: &Client,
    prompt: &str,
    workspace: &Path,
    extra: Value,
) -> Result<(String, String), Value> {
    let mut params = json!({ "prompt": prompt, "workspace": workspace.display().to_string() });
    if let (Some(params), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
        for (key, value) in extra {
            params.insert(key.clone(), value.clone());
        }
    }
    let started = client.call("run/start", params).await?;
    Ok((
        started["run_id"].as_str().unwrap().to_owned(),
        started["session_id"].as_str().unwrap().to_owned(),
    ))
}

fn percentile(sorted: &[u64], fraction: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let index = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

// ---------------------------------------------------------------------------
// Scripts

/// A turn calling one tool.
fn call(tool: &str, arguments: Value, delay_ms: u64) -> Value {
    json!({ "delay_ms": delay_ms, "content": [
        { "type": "tool_call", "name": tool, "arguments": arguments }
    ]})
}

fn answer(text: &str, delay_ms: u64) -> Value {
    json!({ "delay_ms": delay_ms, "content": [{ "type": "text", "text": text }] })
}

/// The script of the 1,000 runs: write, read the seed, copy it with bash,
/// answer. Played by history, so each run plays it from its own start.
const WRITTEN: &str = "written by a load-test run\n";

fn work_script(delay_ms: u64) -> Value {
    json!({ "by_history": true, "chunk_chars": 64, "turns": [
        call("write", json!({ "path": "out.txt", "content": WRITTEN }), delay_ms),
        call("read", json!({ "path": "seed.txt" }), delay_ms),
        call("bash", json!({ "command": "cp seed.txt copy.txt" }), delay_ms),
        answer("done", delay_ms),
    ]})
}

/// A write (which asks, in ask mode), then an answer.
fn park_script() -> Value {
    json!({ "by_history": true, "chunk_chars": 64, "turns": [
        call("write", json!({ "path": "out.txt", "content": WRITTEN }), 0),
        answer("done", 0),
    ]})
}

const NO_CONFIG: &str = "";

// ---------------------------------------------------------------------------
// Scenarios

/// One run in `KEEL_LOAD_BASH_EVERY` (default 10; 0: none) offers `bash`
/// (and so starts a sandbox holder); the others are offered read, write
/// and edit only, so their `bash` call is answered `unknown_tool` and they
/// go on.
fn bash_every() -> usize {
    std::env::var("KEEL_LOAD_BASH_EVERY")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(10)
}

fn has_bash(run: usize) -> bool {
    let every = bash_every();
    every > 0 && run.is_multiple_of(every)
}

#[test]
fn thousand_runs_settle_within_a_gibibyte() {
    let _serial = serial();
    let runs = load_runs();
    bounded("1,000 runs", Duration::from_secs(240), async {
        let limit = runs.to_string();
        let server = Server::start(
            &work_script(20),
            &["--max-runs", &limit, "--max-queue", &limit],
            NO_CONFIG,
        );
        let empty = memory(server.pid());
        let sampler = Sampler::start(server.pid(), Duration::from_millis(250));
        let connections = 10;
        let mut clients = Vec::new();
        for _ in 0..connections {
            clients.push(Arc::new(server.connect(None).await));
        }
        let began = Instant::now();
        let mut tasks = Vec::new();
        for (index, client) in clients.iter().enumerate() {
            let client = Arc::clone(client);
            let mine: Vec<(usize, PathBuf)> = (index..runs)
                .step_by(connections)
                .map(|run| {
                    (
                        run,
                        server.workspace(&format!("w{run}"), &format!("seed of run {run}\n")),
                    )
                })
                .collect();
            tasks.push(tokio::spawn(async move {
                let starts = mine.iter().map(|(run, workspace)| {
                    let tools = if has_bash(*run) {
                        json!(["read", "write", "edit", "bash"])
                    } else {
                        json!(["read", "write", "edit"])
                    };
                    let client = Arc::clone(&client);
                    async move {
                        let ids = start(
                            &client,
                            "go",
                            workspace,
                            json!({ "mode": "auto", "tools": tools }),
                        )
                        .await
                        .unwrap_or_else(|error| panic!("run {run}: start refused: {error}"));
                        (*run, workspace.clone(), ids.0)
                    }
                });
                let started: Vec<(usize, PathBuf, String)> =
                    futures::future::join_all(starts).await;
                let ids: HashSet<String> = started.iter().map(|(_, _, id)| id.clone()).collect();
                let mut seen = Seen::default();
                watch(
                    &client,
                    &mut seen,
                    Duration::from_secs(200),
                    "every run's terminal event",
                    |seen| {
                        ids.iter().all(|id| {
                            seen.has(id, "run_settled")
                                || seen.has(id, "run_failed")
                                || seen.has(id, "run_cancelled")
                        })
                    },
                )
                .await;
                (started, seen)
            }));
        }
        let mut all = Vec::new();
        let mut latencies = Vec::new();
        let mut lagged = 0;
        for task in tasks {
            let (started, seen) = task.await.unwrap();
            latencies.extend_from_slice(&seen.latencies);
            lagged += seen.lagged;
            all.push((started, seen));
        }
        let elapsed = began.elapsed();
        let peak = sampler.peak();
        drop(sampler);
        // The end state: settled, the files right, the read saw this
        // workspace's own seed, and only bash runs made the copy.
        let mut checked = 0;
        for (started, seen) in &all {
            for (run, workspace, run_id) in started {
                let events = &seen.events[run_id];
                // Every event exactly once, in order, across lags and
                // resubscriptions.
                let seqs: Vec<u64> = events
                    .iter()
                    .filter_map(|event| event["seq"].as_u64())
                    .collect();
                assert!(
                    seqs.iter().copied().eq(0..seqs.len() as u64),
                    "run {run}: events missing, repeated or out of order: {seqs:?}"
                );
                let last = events.last().unwrap();
                assert_eq!(last["type"], "run_settled", "run {run} ended {last}");
                let seed = format!("seed of run {run}\n");
                assert_eq!(
                    std::fs::read_to_string(workspace.join("out.txt")).unwrap(),
                    WRITTEN,
                    "run {run}"
                );
                let read_saw_seed = events.iter().any(|event| {
                    event["type"] == "tool_execution_end"
                        && event["result"]["tool_name"] == "read"
                        && event["result"]
                            .to_string()
                            .contains(&format!("seed of run {run}"))
                });
                assert!(
                    read_saw_seed,
                    "run {run}: its read did not return its own seed"
                );
                let copy = std::fs::read_to_string(workspace.join("copy.txt")).ok();
                if has_bash(*run) {
                    assert_eq!(
                        copy.as_deref(),
                        Some(seed.as_str()),
                        "run {run}: bash's copy"
                    );
                } else {
                    assert_eq!(copy, None, "run {run} had no bash");
                }
                checked += 1;
            }
        }
        assert_eq!(checked, runs);
        latencies.sort_unstable();
        println!(
            "load: {runs} runs ({} with bash) settled in {:.1} s = {:.0} runs/s",
            (0..runs).filter(|run| has_bash(*run)).count(),
            elapsed.as_secs_f64(),
            runs as f64 / elapsed.as_secs_f64()
        );
        println!(
            "load: event latency kernel→client over {} events: p50 {} ms, p99 {} ms, max {} ms; lagged subscriptions {lagged}",
            latencies.len(),
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies.last().copied().unwrap_or(0)
        );
        println!(
            "load: server+holders peak PSS {:.1} MiB (server alone peak {:.1} MiB), peak RSS {:.1} MiB, peak page tables {:.1} MiB, peak processes {} (empty server PSS {:.1} MiB)",
            peak.pss_mib(),
            peak.server_pss as f64 / 1024.0,
            peak.rss as f64 / 1024.0,
            peak.page_tables as f64 / 1024.0,
            peak.processes,
            empty.pss_mib()
        );
        assert!(
            (peak.pss + peak.page_tables) as f64 * 1024.0 <= 1024.0 * MIB,
            "server and holders peaked at {:.1} MiB PSS + {:.1} MiB page tables, over 1 GiB",
            peak.pss_mib(),
            peak.page_tables as f64 / 1024.0
        );
    });
}

#[test]
fn parked_runs_cost_under_a_mebibyte_each() {
    let _serial = serial();
    let runs = load_runs();
    bounded("parked runs", Duration::from_secs(400), async {
        let limit = runs.to_string();
        let server = Server::start(
            &park_script(),
            &["--max-runs", &limit, "--max-queue", &limit],
            NO_CONFIG,
        );
        let client = Arc::new(server.connect(None).await);
        // Settle the allocator and the runtime's threads before measuring.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let empty = memory(server.pid());
        let mut started = Vec::new();
        for chunk in (0..runs).collect::<Vec<_>>().chunks(200) {
            let starts = chunk.iter().map(|run| {
                let workspace = server.workspace(&format!("p{run}"), "seed\n");
                let client = Arc::clone(&client);
                async move {
                    let (run_id, _) = start(&client, "go", &workspace, json!({ "mode": "ask" }))
                        .await
                        .unwrap_or_else(|error| panic!("run {run}: start refused: {error}"));
                    (*run, workspace, run_id)
                }
            });
            started.extend(futures::future::join_all(starts).await);
        }
        let mut seen = Seen::default();
        watch(
            &client,
            &mut seen,
            Duration::from_secs(300),
            "every run's permission request",
            |seen| seen.count("permission_requested") >= runs,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let parked = memory(server.pid());
        let per_run = (parked.pss.saturating_sub(empty.pss)) as f64 / runs as f64;
        println!(
            "load: {runs} parked runs: server PSS {:.1} MiB (empty {:.1} MiB) = {:.1} KiB per parked run; RSS {:.1} MiB; processes {}",
            parked.pss_mib(),
            empty.pss_mib(),
            per_run,
            parked.rss as f64 / 1024.0,
            parked.processes
        );
        assert!(
            per_run < 1024.0,
            "a parked run costs {per_run:.0} KiB beyond an empty server, not < 1 MiB"
        );
        // Deny the even runs, cancel the odd ones: all settle that way.
        let answers = started.iter().map(|(run, _, run_id)| {
            let client = Arc::clone(&client);
            let request = seen.events[run_id]
                .iter()
                .find(|event| event["type"] == "permission_requested")
                .map(|event| event["request_id"].clone())
                .unwrap();
            async move {
                if run % 2 == 0 {
                    client
                        .call(
                            "permission/resolve",
                            json!({ "run_id": run_id, "request_id": request, "decision": "deny", "scope": "once" }),
                        )
                        .await
                } else {
                    client.call("run/cancel", json!({ "run_id": run_id })).await
                }
            }
        });
        for answered in futures::future::join_all(answers).await {
            answered.unwrap();
        }
        let ids: Vec<String> = started.iter().map(|(_, _, id)| id.clone()).collect();
        watch(
            &client,
            &mut seen,
            Duration::from_secs(120),
            "every parked run's end",
            |seen| {
                ids.iter()
                    .all(|id| seen.has(id, "run_settled") || seen.has(id, "run_cancelled"))
            },
        )
        .await;
        for (run, workspace, run_id) in &started {
            let end = if run % 2 == 0 {
                "run_settled"
            } else {
                "run_cancelled"
            };
            assert!(seen.has(run_id, end), "parked run {run} did not end {end}");
            assert!(
                !workspace.join("out.txt").exists(),
                "parked run {run} wrote without approval"
            );
        }
    });
}

#[test]
fn a_burst_past_the_limits_is_refused_at_once() {
    let _serial = serial();
    bounded("burst", Duration::from_secs(120), async {
        let server = Server::start(
            &park_script(),
            &["--max-runs", "4", "--max-queue", "4"],
            NO_CONFIG,
        );
        let client = Arc::new(server.connect(None).await);
        // Fill the slots (parked on a permission request) and the queue.
        let mut parked = Vec::new();
        for run in 0..4 {
            let workspace = server.workspace(&format!("b{run}"), "seed\n");
            parked.push(
                start(&client, "go", &workspace, json!({ "mode": "ask" }))
                    .await
                    .unwrap()
                    .0,
            );
        }
        let mut queued = Vec::new();
        for run in 4..8 {
            let workspace = server.workspace(&format!("b{run}"), "seed\n");
            let client = Arc::clone(&client);
            queued.push(tokio::spawn(async move {
                start(&client, "go", &workspace, json!({ "mode": "ask" })).await
            }));
        }
        wait_metric(
            &server,
            None,
            "keel_runs_queued",
            4.0,
            Duration::from_secs(30),
        )
        .await;
        let before = memory(server.pid());
        let burst = 1000;
        let workspace = server.workspace("burst", "seed\n");
        let began = Instant::now();
        let mut refused = 0;
        let mut slowest = Duration::ZERO;
        for chunk in 0..(burst / 200) {
            let starts = (0..200).map(|_| {
                let client = Arc::clone(&client);
                let workspace = workspace.clone();
                async move {
                    let sent = Instant::now();
                    let answer = start(&client, "go", &workspace, json!({ "mode": "ask" })).await;
                    (answer, sent.elapsed())
                }
            });
            let answers = tokio::time::timeout(Duration::from_secs(30), futures::future::join_all(starts))
                .await
                .unwrap_or_else(|_| {
                    panic!("starts past the limits were not all answered within 30 s: they wait instead of being refused")
                });
            for (answer, took) in answers {
                let error = answer.expect_err("a start past the limits was accepted");
                let retry = error["data"]["retry_after_ms"].as_u64();
                assert!(
                    retry.is_some_and(|ms| ms > 0),
                    "chunk {chunk}: refusal without retry_after_ms: {error}"
                );
                slowest = slowest.max(took);
                refused += 1;
            }
        }
        let elapsed = began.elapsed();
        let after = memory(server.pid());
        let metrics = server.metrics(None);
        println!(
            "load: burst of {burst} starts past --max-runs 4 --max-queue 4: {refused} refused with retry_after_ms in {:.2} s (slowest answer {} ms); server PSS {:.1} → {:.1} MiB",
            elapsed.as_secs_f64(),
            slowest.as_millis(),
            before.pss_mib(),
            after.pss_mib()
        );
        assert_eq!(metrics.get("keel_runs_active").copied(), Some(4.0));
        assert_eq!(metrics.get("keel_runs_queued").copied(), Some(4.0));
        assert!(
            after.pss_mib() - before.pss_mib() < 16.0,
            "the burst grew the server by {:.1} MiB",
            after.pss_mib() - before.pss_mib()
        );
        // Cancel what holds the slots: the queued starts get theirs.
        for run_id in &parked {
            client
                .call("run/cancel", json!({ "run_id": run_id }))
                .await
                .unwrap();
        }
        for queued in queued {
            let (run_id, _) = queued.await.unwrap().expect("a queued start was refused");
            client
                .call("run/cancel", json!({ "run_id": run_id }))
                .await
                .unwrap();
            let result = client
                .call("run/result", json!({ "run_id": run_id }))
                .await
                .unwrap();
            assert_eq!(result["result"]["state"], "cancelled", "{result}");
        }
    });
}

/// A run that streams `events` text deltas of 256 characters, one a
/// millisecond at most (a fast model; the scripted provider with no delay
/// at all outruns the broker's pump, see [`chatty`]).
fn chatty_script(events: usize) -> Value {
    json!({ "by_history": true, "chunk_chars": 256, "turns": [answer(&"x".repeat(256 * events), 1)] })
}

const CHATTY_RUNS: u64 = 20;
const CHATTY_EVENTS: usize = 2000;

/// Starts [`CHATTY_RUNS`] chatty runs on a fresh server from a client that
/// reads its socket (`reading`) or never does, waits (bounded) until they
/// have all ended, and returns the server's PSS before and at its peak, the
/// subscriptions that lagged and the events sent.
async fn chatty(reading: bool) -> (Memory, Memory, f64, f64) {
    let server = Server::start(&chatty_script(CHATTY_EVENTS), &[], NO_CONFIG);
    let (socket, _) = tokio_tungstenite::connect_async(format!("ws://{}/", server.address))
        .await
        .unwrap();
    let (mut sink, mut stream) = socket.split();
    let reader =
        reading.then(|| tokio::spawn(async move { while stream.next().await.is_some() {} }));
    let request = |id: u64, method: &str, params: Value| {
        Message::Text(
            json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
                .to_string()
                .into(),
        )
    };
    sink.send(request(0, "initialize", json!({})))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = memory(server.pid());
    let sampler = Sampler::start(server.pid(), Duration::from_millis(100));
    for run in 0..CHATTY_RUNS {
        let workspace = server.workspace(&format!("c{run}"), "seed\n");
        let params = json!({ "prompt": "talk", "workspace": workspace.display().to_string(), "mode": "auto" });
        sink.send(request(run + 1, "run/start", params))
            .await
            .unwrap();
    }
    wait_metric(
        &server,
        None,
        "keel_runs_started_total",
        CHATTY_RUNS as f64,
        Duration::from_secs(60),
    )
    .await;
    // Every run ends although its client may never read.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let metrics = server.metrics(None);
        if metrics.get("keel_runs_active").copied() == Some(0.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the chatty runs did not end: {metrics:?}\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let peak = sampler.peak();
    drop(sampler);
    let metrics = server.metrics(None);
    if let Some(reader) = reader {
        reader.abort();
    }
    drop(sink);
    (
        before,
        peak,
        metrics
            .get("keel_lagged_subscribers_total")
            .copied()
            .unwrap_or(0.0),
        metrics
            .get("keel_events_sent_total")
            .copied()
            .unwrap_or(0.0),
    )
}

#[test]
fn a_client_that_stops_reading_does_not_grow_the_server() {
    let _serial = serial();
    bounded("slow reader", Duration::from_secs(300), async {
        // The same chatty runs twice: to a client that reads (the control:
        // what the runs themselves cost), then to one that never reads.
        let (before, peak, lagged, sent) = chatty(true).await;
        let control = peak.pss_mib() - before.pss_mib();
        println!(
            "load: {CHATTY_RUNS} chatty runs × {CHATTY_EVENTS} events to a reading client: server PSS {:.1} → peak {:.1} MiB (+{control:.1} MiB); {lagged} subscriptions lagged, {sent} events sent",
            before.pss_mib(),
            peak.pss_mib(),
        );
        let (before, peak, lagged, sent) = chatty(false).await;
        let silent = peak.pss_mib() - before.pss_mib();
        println!(
            "load: the same runs to a client that never reads: server PSS {:.1} → peak {:.1} MiB (+{silent:.1} MiB); {lagged} subscriptions lagged, {sent} events sent",
            before.pss_mib(),
            peak.pss_mib(),
        );
        assert!(
            silent <= control + 16.0,
            "a client that stopped reading grew the server by {silent:.1} MiB, {control:.1} MiB with one that reads"
        );
        assert!(
            lagged >= 1.0,
            "no subscription lagged: the client was not slow enough to test anything"
        );
    });
}

#[test]
fn a_flooding_token_does_not_starve_another() {
    let _serial = serial();
    bounded("two tokens", Duration::from_secs(180), async {
        let tokens = tempfile::tempdir().unwrap();
        let flood_token = "flood-token-0123456789abcdef";
        let light_token = "light-token-0123456789abcdef";
        std::fs::write(tokens.path().join("flood"), flood_token).unwrap();
        std::fs::write(tokens.path().join("light"), light_token).unwrap();
        let config = format!(
            "[server.tokens.flood]\ntoken_file = \"{}\"\n[server.tokens.light]\ntoken_file = \"{}\"\n",
            tokens.path().join("flood").display(),
            tokens.path().join("light").display()
        );
        let script = json!({ "by_history": true, "chunk_chars": 64, "turns": [
            call("write", json!({ "path": "out.txt", "content": WRITTEN }), 30),
            answer("done", 30),
        ]});
        let server = Server::start(&script, &["--max-runs", "2", "--max-queue", "64"], &config);
        let flood = Arc::new(server.connect(Some(flood_token)).await);
        let light = Arc::new(server.connect(Some(light_token)).await);
        let flood_runs = 40;
        let mut flooding = Vec::new();
        for run in 0..flood_runs {
            let workspace = server.workspace(&format!("f{run}"), "seed\n");
            let client = Arc::clone(&flood);
            flooding.push(tokio::spawn(async move {
                let (run_id, _) = start(&client, "go", &workspace, json!({ "mode": "auto" }))
                    .await
                    .unwrap_or_else(|error| panic!("flood run {run}: {error}"));
                client
                    .call("run/result", json!({ "run_id": run_id }))
                    .await
                    .unwrap()
            }));
        }
        wait_metric(
            &server,
            Some(flood_token),
            "keel_runs_queued",
            (flood_runs - 2) as f64 - 4.0,
            Duration::from_secs(60),
        )
        .await;
        let mut lights = Vec::new();
        for run in 0..3 {
            let workspace = server.workspace(&format!("l{run}"), "seed\n");
            let client = Arc::clone(&light);
            lights.push(tokio::spawn(async move {
                let (run_id, _) = start(&client, "go", &workspace, json!({ "mode": "auto" }))
                    .await
                    .unwrap_or_else(|error| panic!("light run {run}: {error}"));
                let result = client
                    .call("run/result", json!({ "run_id": run_id }))
                    .await
                    .unwrap();
                (workspace, result)
            }));
        }
        for light in lights {
            let (workspace, result) = light.await.unwrap();
            assert_eq!(result["result"]["state"], "settled", "{result}");
            assert_eq!(
                std::fs::read_to_string(workspace.join("out.txt")).unwrap(),
                WRITTEN
            );
        }
        let queued = server
            .metrics(Some(flood_token))
            .get("keel_runs_queued")
            .copied()
            .unwrap_or(0.0);
        println!(
            "load: two tokens: the light token's 3 runs settled while {queued} of the flooding token's {flood_runs} starts still waited"
        );
        assert!(
            queued >= 10.0,
            "the light token's runs settled only after the flood's queue drained to {queued}"
        );
        for flooded in flooding {
            let result = flooded.await.unwrap();
            assert_eq!(result["result"]["state"], "settled", "{result}");
        }
    });
}
