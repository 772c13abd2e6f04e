//! Benchmarks for the JSONL session store (`scripts/bench-sessions.sh` runs
//! them; `docs/benchmarks-sessions.md` explains the method and the numbers).
//!
//! Every subcommand prints one `key=value …` line per measurement so a shell
//! script can pick the numbers out:
//!
//! ```text
//! session_bench gen-large DIR [BYTES] [--no-checkpoints]  # a linear ~100 MiB session; prints its id
//! session_bench open DIR ID [context|active] [--bytes] # fresh store, build the branch, time it
//! session_bench append DIR [COUNT] [WRITERS] # fsync'd append latency vs raw write+fdatasync
//! session_bench gen-many DIR [SESSIONS] [ENTRIES]  # many small sessions, for `keel session list`
//! ```
//!
//! Sessions are written only through the store's public API (`create`,
//! `append`), with entries shaped like a real run's: user message, assistant
//! message with thinking and a tool call, permission decision, tool result
//! with a large text output, and compaction checkpoints.

// A benchmark may panic on setup failure: there is nobody to report to.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_protocol::{
    AssistantMessage, ContentBlock, DecisionSource, Entry, EntryPayload, IntentKind, IntentScope,
    Message, OperationIntent, PermissionDecision, PermissionMode, PermissionResolution, StopReason,
    ToolCall, ToolResultMessage, ToolStatus, Usage, UserContent, UserMessage,
};
use keel_session::{JsonlStore, NewSession, SessionStore};
use serde_json::json;

/// Entries appended per group while generating (one fsync per group).
const GROUP: usize = 50;
/// Entries between compaction checkpoints.
const CHECKPOINT_EVERY: usize = 2_000;
/// How far before a checkpoint its first kept entry is.
const KEPT_BEFORE_CHECKPOINT: usize = 20;

/// Dispatches on the subcommand.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |n: usize| args.get(n).map(String::as_str);
    let number = |n: usize, default: u64| arg(n).map_or(default, |v| v.parse().expect("a number"));
    match arg(0) {
        Some("gen-large") => gen_large(
            Path::new(arg(1).expect("DIR")),
            number(2, 100 << 20),
            arg(3) != Some("--no-checkpoints"),
        ),
        Some("open") => open(
            Path::new(arg(1).expect("DIR")),
            arg(2).expect("ID"),
            arg(3) == Some("active"),
            arg(4) == Some("--bytes"),
        ),
        Some("append") => append_bench(
            Path::new(arg(1).expect("DIR")),
            number(2, 2_000) as usize,
            number(3, 8) as usize,
        ),
        Some("gen-many") => gen_many(
            Path::new(arg(1).expect("DIR")),
            number(2, 1_000) as usize,
            number(3, 10) as usize,
        ),
        _ => {
            eprintln!(
                "usage: session_bench gen-large DIR [BYTES] [--no-checkpoints] | open DIR ID [context|active] [--bytes] \
                 | append DIR [COUNT] [WRITERS] | gen-many DIR [SESSIONS] [ENTRIES]"
            );
            std::process::exit(2);
        }
    }
}

/// A single-threaded runtime, as a CLI run uses for its store calls.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

// --- content ------------------------------------------------------------------

/// A small deterministic PRNG (splitmix64), so every run writes the same data.
struct Rng(u64);

impl Rng {
    /// The next 64 random bits.
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    fn range(&mut self, low: usize, high: usize) -> usize {
        low + (self.next() % (high - low + 1) as u64) as usize
    }

    /// `count` lowercase hex digits.
    fn hex(&mut self, count: usize) -> String {
        (0..count)
            .map(|_| char::from(b"0123456789abcdef"[(self.next() % 16) as usize]))
            .collect()
    }
}

/// Lines that look like tool output: source code, compiler and test output.
/// They carry what JSON must escape (quotes, backslashes, tabs, newlines) and
/// some non-ASCII text.
const OUTPUT_LINES: &[&str] = &[
    "use std::collections::HashMap;",
    "pub fn parse(input: &str) -> Result<Config, Error> {",
    "    let value: serde_json::Value = serde_json::from_str(input)?;",
    "    if value.get(\"version\").and_then(|v| v.as_u64()) > Some(2) {",
    "        return Err(Error::Unsupported(format!(\"version {}\", v)));",
    "    }",
    "}",
    "\tlet path = \"C:\\\\Users\\\\build\\\\target\";",
    "warning: unused variable: `entry` — prefix it with an underscore",
    "  --> crates/keel-session/src/jsonl/scan.rs:118:13",
    "test jsonl::tests::torn_tail_is_cut ... ok",
    "error[E0308]: mismatched types: expected `u32`, found `usize`",
    "    Finished `dev` profile [unoptimized + debuginfo] target(s) in 4.21s",
    "// Ünïcödé in comments: naïve café, 日本語, emoji 🚀",
    "        assert_eq!(decode(&line).unwrap().group, 3, \"group of {line:?}\");",
    "+    let mut reader = BufReader::with_capacity(1 << 16, file);",
    "-    let reader = BufReader::new(file);",
    "drwxr-xr-x  5 dev dev  4096 Mar  3 10:12 crates",
];

/// About `bytes` of tool-output text, numbered like `cat -n`.
fn output_text(rng: &mut Rng, bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 128);
    let mut line = 1;
    while text.len() < bytes {
        let pick = OUTPUT_LINES[rng.range(0, OUTPUT_LINES.len() - 1)];
        text.push_str(&format!("{line:>6}\t{pick}\n"));
        line += 1;
    }
    text
}

/// About `bytes` of prose, for prompts, thinking and summaries.
fn prose(rng: &mut Rng, bytes: usize) -> String {
    const WORDS: &[&str] = &[
        "the",
        "session",
        "store",
        "reads",
        "branch",
        "entry",
        "checkpoint",
        "tool",
        "call",
        "result",
        "file",
        "test",
        "fails",
        "because",
        "index",
        "offset",
        "fix",
        "then",
        "run",
        "again",
        "and",
        "check",
        "that",
        "output",
        "matches",
        "expected",
        "value",
    ];
    let mut text = String::with_capacity(bytes + 16);
    while text.len() < bytes {
        text.push_str(WORDS[rng.range(0, WORDS.len() - 1)]);
        text.push(if rng.range(0, 11) == 0 { '.' } else { ' ' });
    }
    text
}

/// Makes linear entries: each new entry's parent is the previous one.
struct Chain {
    rng: Rng,
    parent: Option<String>,
    /// Ids of every entry made so far, in order.
    ids: Vec<String>,
    clock: u64,
}

impl Chain {
    /// A chain starting at `parent` (`None` for a new session).
    fn new(seed: u64, parent: Option<String>) -> Self {
        Self {
            rng: Rng(seed),
            parent,
            ids: Vec::new(),
            clock: 1_760_000_000_000,
        }
    }

    /// The next entry of the chain, holding `payload`.
    fn entry(&mut self, payload: EntryPayload) -> Entry {
        let id = uuid::Uuid::now_v7().to_string();
        self.clock += self.rng.range(5, 4_000) as u64;
        self.ids.push(id.clone());
        Entry::new(id.clone(), self.parent.replace(id), self.clock, payload)
    }

    /// A user prompt.
    fn user(&mut self) -> Entry {
        let size = self.rng.range(80, 600);
        let text = prose(&mut self.rng, size);
        self.entry(EntryPayload::Message {
            message: Message::User(UserMessage::text(text)),
        })
    }

    /// An assistant message with thinking, a sentence and one tool call.
    fn assistant_call(&mut self, call_id: &str, tool: &str) -> Entry {
        let thinking_size = self.rng.range(200, 2_000);
        let thinking = prose(&mut self.rng, thinking_size);
        let text_size = self.rng.range(40, 300);
        let text = prose(&mut self.rng, text_size);
        let arguments = match tool {
            "bash" => json!({ "command": "cargo test -p keel-session --quiet 2>&1 | tail -n 80" }),
            "edit" => json!({
                "path": "crates/keel-session/src/jsonl/scan.rs",
                "old_text": "let reader = BufReader::new(file);",
                "new_text": "let mut reader = BufReader::with_capacity(1 << 16, file);",
            }),
            _ => json!({ "path": "crates/keel-session/src/jsonl/mod.rs" }),
        };
        let signature = self.rng.hex(96);
        let usage = self.usage();
        self.entry(EntryPayload::Message {
            message: Message::Assistant({
                let mut assistant_message = AssistantMessage::default();
                assistant_message.content = vec![
                    ContentBlock::Thinking {
                        thinking,
                        signature: Some(signature),
                    },
                    ContentBlock::Text { text },
                    ContentBlock::ToolCall(ToolCall::new(
                        call_id.to_owned(),
                        tool.to_owned(),
                        arguments,
                    )),
                ];
                assistant_message.stop_reason = StopReason::ToolUse;
                assistant_message.usage = usage;
                assistant_message.model = Some("claude-sonnet-4-5".into());
                assistant_message.provider = Some("anthropic".into());
                assistant_message
            }),
        })
    }

    /// An assistant message that ends the turn.
    fn assistant_final(&mut self) -> Entry {
        let size = self.rng.range(100, 1_200);
        let text = prose(&mut self.rng, size);
        let usage = self.usage();
        self.entry(EntryPayload::Message {
            message: Message::Assistant({
                let mut assistant_message = AssistantMessage::default();
                assistant_message.content = vec![ContentBlock::Text { text }];
                assistant_message.stop_reason = StopReason::Stop;
                assistant_message.usage = usage;
                assistant_message.model = Some("claude-sonnet-4-5".into());
                assistant_message.provider = Some("anthropic".into());
                assistant_message
            }),
        })
    }

    /// Plausible token usage.
    fn usage(&mut self) -> Usage {
        {
            let mut usage = Usage::default();
            usage.input_tokens = self.rng.range(100, 4_000) as u64;
            usage.output_tokens = self.rng.range(20, 1_500) as u64;
            usage.cache_read_tokens = self.rng.range(0, 120_000) as u64;
            usage.cache_write_tokens = self.rng.range(0, 8_000) as u64;
            usage.cost_usd = None;
            usage
        }
    }

    /// The permission decision recorded before a tool call runs.
    fn permission(&mut self, call_id: &str, tool: &str) -> Entry {
        let kind = match tool {
            "bash" => IntentKind::Shell,
            "edit" => IntentKind::Write,
            _ => IntentKind::Read,
        };
        let arguments_sha256 = self.rng.hex(64);
        self.entry(EntryPayload::PermissionDecision {
            decision: {
                let mut intent = OperationIntent::new(kind, IntentScope::Workspace);
                intent.targets = vec!["crates/keel-session/src/jsonl/mod.rs".into()];
                let mut permission_decision = PermissionDecision::new(
                    call_id,
                    tool,
                    PermissionMode::Auto,
                    PermissionResolution::Approved,
                    DecisionSource::Policy,
                    intent,
                );
                permission_decision.arguments_sha256 = arguments_sha256;
                permission_decision.reason =
                    "auto mode allows this operation inside the workspace".into();
                permission_decision
            },
        })
    }

    /// A tool result with about `bytes` of output.
    fn tool_result(&mut self, call_id: &str, tool: &str, bytes: usize) -> Entry {
        let text = output_text(&mut self.rng, bytes);
        let duration = self.rng.range(3, 9_000);
        self.entry(EntryPayload::Message {
            message: Message::ToolResult({
                let mut tool_result_message = ToolResultMessage::new(
                    call_id,
                    tool,
                    ToolStatus::Success,
                    vec![UserContent::Text { text }],
                );
                tool_result_message.details =
                    Some(json!({ "exit_code": 0, "duration_ms": duration }));
                tool_result_message
            }),
        })
    }

    /// A compaction checkpoint keeping the last `KEPT_BEFORE_CHECKPOINT` entries.
    fn checkpoint(&mut self) -> Entry {
        let kept = self.ids.len().saturating_sub(KEPT_BEFORE_CHECKPOINT);
        let first_kept_entry_id = self.ids[kept].clone();
        let size = self.rng.range(2_000, 4_000);
        let summary = prose(&mut self.rng, size);
        self.entry(EntryPayload::checkpoint(summary, first_kept_entry_id))
    }

    /// One turn of a run: a prompt, 1–8 tool cycles (assistant call,
    /// permission decision, result of 1–14 KB) and a final answer.
    fn turn(&mut self) -> Vec<Entry> {
        let cycles = self.rng.range(1, 8);
        self.turn_with(cycles)
    }

    /// One turn with `cycles` tool cycles.
    fn turn_with(&mut self, cycles: usize) -> Vec<Entry> {
        const TOOLS: &[&str] = &["read", "bash", "edit", "read", "bash"];
        let mut entries = vec![self.user()];
        for _ in 0..cycles {
            let call_id = format!("toolu_{}", self.rng.hex(24));
            let tool = TOOLS[self.rng.range(0, TOOLS.len() - 1)];
            let size = self.rng.range(1_000, 14_000);
            entries.push(self.assistant_call(&call_id, tool));
            entries.push(self.permission(&call_id, tool));
            entries.push(self.tool_result(&call_id, tool, size));
        }
        entries.push(self.assistant_final());
        entries
    }
}

// --- 1. a large session -------------------------------------------------------

/// Writes one linear session of at least `target` bytes (with compaction
/// checkpoints if `checkpoints`); prints its id and shape.
fn gen_large(dir: &Path, target: u64, with_checkpoints: bool) {
    let started = Instant::now();
    current_thread().block_on(async {
        let store = JsonlStore::new(dir).unwrap();
        let id = store.create(NewSession::default()).await.unwrap();
        let path = dir.join(format!("{id}.jsonl"));
        let mut chain = Chain::new(0x6b65_656c, None);
        let mut group = Vec::new();
        let mut since_checkpoint = 0;
        let mut checkpoints = 0;
        loop {
            for entry in chain.turn() {
                group.push(entry);
                since_checkpoint += 1;
            }
            if with_checkpoints && since_checkpoint >= CHECKPOINT_EVERY {
                group.push(chain.checkpoint());
                since_checkpoint = 0;
                checkpoints += 1;
            }
            if group.len() >= GROUP {
                store.append(&id, std::mem::take(&mut group)).await.unwrap();
                if std::fs::metadata(&path).unwrap().len() >= target {
                    break;
                }
            }
        }
        let bytes = std::fs::metadata(&path).unwrap().len();
        let entries = chain.ids.len();
        println!(
            "id={id} entries={entries} bytes={bytes} avg_entry_bytes={} checkpoints={checkpoints} gen_s={:.1}",
            bytes / entries as u64,
            started.elapsed().as_secs_f64()
        );
    });
}

/// Opens a fresh store, builds the context (or whole active) branch, and
/// prints the time to open (scan + index) and to read the branch; with
/// `bytes`, also the branch's size as JSON (which costs time after the clock
/// stops, so timed runs leave it out).
fn open(dir: &Path, id: &str, active: bool, bytes: bool) {
    let runtime = current_thread();
    let started = Instant::now();
    let (branch, opened_at) = runtime.block_on(async {
        let store = JsonlStore::new(dir).unwrap();
        // `leaf` opens the session: lock, stream-scan, build the index.
        store.leaf(id).await.unwrap().expect("a non-empty session");
        let opened_at = started.elapsed();
        let branch = if active {
            store.active_branch(id).await.unwrap()
        } else {
            store.context_branch(id).await.unwrap()
        };
        (branch, opened_at)
    });
    let total = started.elapsed();
    let hwm_kb = vm_hwm_kb();
    let bytes: usize = if bytes {
        branch
            .iter()
            .map(|entry| serde_json::to_vec(entry).map_or(0, |json| json.len()))
            .sum()
    } else {
        0
    };
    println!(
        "branch={} entries={} branch_bytes={bytes} open_ms={:.1} read_ms={:.1} total_ms={:.1} vm_hwm_kb={hwm_kb}",
        if active { "active" } else { "context" },
        branch.len(),
        ms(opened_at),
        ms(total - opened_at),
        ms(total),
    );
}

/// Peak resident set size of this process so far (`VmHWM`), in KiB.
fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A duration in milliseconds.
fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

// --- 2. append latency -------------------------------------------------------

/// A small (~500 B on disk) assistant message, the size of a short reply.
fn small_entry(chain: &mut Chain) -> Entry {
    let text = prose(&mut chain.rng, 110);
    chain.entry(EntryPayload::Message {
        message: Message::Assistant({
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = vec![ContentBlock::Text { text }];
            assistant_message.stop_reason = StopReason::Stop;
            assistant_message.usage = Usage::default();
            assistant_message.model = None;
            assistant_message.provider = None;
            assistant_message
        }),
    })
}

/// Measures sequential and concurrent fsync'd appends, and raw write+fdatasync
/// (alone, and followed by a sidecar replace as the store's writer does).
fn append_bench(dir: &Path, count: usize, writers: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let store = Arc::new(JsonlStore::new(dir).unwrap());

    // Sequential: one single-entry group at a time, each awaited.
    let (id, root) = runtime.block_on(new_session(&store));
    let path = dir.join(format!("{id}.jsonl"));
    let before = std::fs::metadata(&path).unwrap().len();
    let mut latencies = Vec::with_capacity(count);
    let started = Instant::now();
    runtime.block_on(async {
        let mut chain = Chain::new(1, Some(root));
        for _ in 0..count {
            let entry = small_entry(&mut chain);
            let t = Instant::now();
            store.append(&id, vec![entry]).await.unwrap();
            latencies.push(t.elapsed());
        }
    });
    let wall = started.elapsed();
    let line_bytes = (std::fs::metadata(&path).unwrap().len() - before) / count as u64;
    report(
        "sequential",
        &mut latencies,
        wall,
        line_bytes,
        batches(&path) - 1,
    );

    // Raw: the same number of same-size lines, write + fdatasync each.
    let raw_path = dir.join("raw.bin");
    let mut raw = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&raw_path)
        .unwrap();
    let mut line = vec![b'x'; line_bytes as usize - 1];
    line.push(b'\n');
    let mut latencies = Vec::with_capacity(count);
    let started = Instant::now();
    for _ in 0..count {
        let t = Instant::now();
        raw.write_all(&line).unwrap();
        raw.sync_data().unwrap();
        latencies.push(t.elapsed());
    }
    let wall = started.elapsed();
    report("raw", &mut latencies, wall, line_bytes, count);

    // Raw plus what the store's writer does before it acknowledges: replace
    // a ~200 B summary sidecar (write a temporary file, rename it over).
    let sidecar = dir.join("raw.meta.json");
    let temporary = dir.join("raw.meta.json.tmp");
    let summary = vec![b'm'; 200];
    let mut latencies = Vec::with_capacity(count);
    let started = Instant::now();
    for _ in 0..count {
        let t = Instant::now();
        raw.write_all(&line).unwrap();
        raw.sync_data().unwrap();
        std::fs::write(&temporary, &summary).unwrap();
        std::fs::rename(&temporary, &sidecar).unwrap();
        latencies.push(t.elapsed());
    }
    let wall = started.elapsed();
    report("raw_sidecar", &mut latencies, wall, line_bytes, count);
    std::fs::remove_file(&raw_path).unwrap();
    std::fs::remove_file(&sidecar).unwrap();

    // Group commit: `writers` tasks append `count / writers` entries each,
    // each task its own chain below the root.
    let (id, root) = runtime.block_on(new_session(&store));
    let path = dir.join(format!("{id}.jsonl"));
    let per_writer = count / writers;
    let started = Instant::now();
    let mut latencies = runtime.block_on(async {
        let tasks: Vec<_> = (0..writers)
            .map(|writer| {
                let store = Arc::clone(&store);
                let id = id.clone();
                let root = root.clone();
                tokio::spawn(async move {
                    let mut chain = Chain::new(100 + writer as u64, Some(root));
                    let mut latencies = Vec::with_capacity(per_writer);
                    for _ in 0..per_writer {
                        let entry = small_entry(&mut chain);
                        let t = Instant::now();
                        store.append(&id, vec![entry]).await.unwrap();
                        latencies.push(t.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        let mut all = Vec::with_capacity(count);
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all
    });
    let wall = started.elapsed();
    report(
        &format!("concurrent{writers}"),
        &mut latencies,
        wall,
        line_bytes,
        batches(&path) - 1,
    );
}

/// A new session holding one root entry; returns its id and the root's id.
async fn new_session(store: &JsonlStore) -> (String, String) {
    let id = store.create(NewSession::default()).await.unwrap();
    let mut chain = Chain::new(7, None);
    let root = chain.user();
    let root_id = root.id.clone();
    store.append(&id, vec![root]).await.unwrap();
    (id, root_id)
}

/// How many write batches (fsyncs) a session file holds: distinct `b` values.
fn batches(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    let mut seen: Vec<u64> = text
        .lines()
        .skip(1)
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|value| value.get("b").and_then(serde_json::Value::as_u64))
        .collect();
    seen.dedup();
    seen.len()
}

/// Prints the latency distribution and throughput of one append series.
fn report(name: &str, latencies: &mut [Duration], wall: Duration, line_bytes: u64, fsyncs: usize) {
    latencies.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |p: f64| {
        let rank = ((p * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
        us(latencies[rank - 1])
    };
    let mean = latencies.iter().map(|d| us(*d)).sum::<f64>() / latencies.len() as f64;
    println!(
        "series={name} appends={} line_bytes={line_bytes} fsyncs={fsyncs} p50_us={:.0} p99_us={:.0} max_us={:.0} mean_us={mean:.0} wall_ms={:.0} per_s={:.0}",
        latencies.len(),
        at(0.50),
        at(0.99),
        us(latencies[latencies.len() - 1]),
        ms(wall),
        latencies.len() as f64 / wall.as_secs_f64(),
    );
}

// --- 3. many small sessions -----------------------------------------------------

/// Writes `sessions` sessions of about `entries` entries each, on 4 threads.
fn gen_many(dir: &Path, sessions: usize, entries: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let started = Instant::now();
    let threads = 4;
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let dir: PathBuf = dir.to_owned();
            scope.spawn(move || {
                let runtime = current_thread();
                for n in (thread..sessions).step_by(threads) {
                    runtime.block_on(small_session(&dir, n as u64, entries));
                }
            });
        }
    });
    println!(
        "sessions={sessions} entries_each={entries} gen_s={:.1}",
        started.elapsed().as_secs_f64()
    );
}

/// One small session: one turn of about `entries` entries, in one group.
async fn small_session(dir: &Path, seed: u64, entries: usize) {
    // A store per session: a store keeps every session it touched open (a
    // writer thread and file handles each), which 1,000 sessions would exhaust.
    let store = JsonlStore::new(dir).unwrap();
    let id = store.create(NewSession::default()).await.unwrap();
    let mut chain = Chain::new(seed, None);
    let cycles = entries.saturating_sub(2).div_ceil(3).max(1);
    store.append(&id, chain.turn_with(cycles)).await.unwrap();
}
