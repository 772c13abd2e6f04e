//! Benchmarks of the context pipeline and of token accounting.
//!
//! - `preview_request`: the model request for a session whose active
//!   branch holds N entries (no checkpoint), through
//!   `AgentKernel::preview_request`: the store's copy of the branch, the
//!   projection, the provider adaptation and the (byte) estimate, cold.
//! - `request_in_a_run`: the same request asked again of an open
//!   `ContextView` — what a run's turn loop does per request (branch in
//!   memory, entry sizes counted once).
//! - `count_tokens`: o200k counts of 64 KiB (exact) and 1 MiB (sampled)
//!   of source text, the encoder already loaded; `load_o200k` is the
//!   one-time load, measured once.
//!
//! Run with `cargo bench -p keel-kernel --bench context`.

// Benches may panic on setup failure: a broken fixture must stop the bench.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, LazyLock};

use divan::Bencher;
use keel_kernel::{AgentKernel, Instructions};
use keel_protocol::{
    AssistantMessage, ContentBlock, Entry, EntryPayload, Message, StopReason, ToolCall,
    ToolResultMessage, ToolStatus, UserContent, UserMessage,
};
use keel_provider::{Script, ScriptedProvider};
use keel_session::{MemoryStore, NewSession, SessionStore};
use keel_tools::Workspace;

fn main() {
    divan::main();
}

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
});

/// About 1 MiB of Rust source: the kernel's own files, repeated.
static SOURCE: LazyLock<String> = LazyLock::new(|| {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        text.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    let mut out = String::with_capacity(1 << 20);
    while out.len() < 1 << 20 {
        out.push_str(&text);
    }
    out.truncate(out.floor_char_boundary(1 << 20));
    out
});

/// The entry payloads of turn `n`: a user message, an assistant call and
/// its result, or the answer — about 600 bytes per entry on average.
fn payload(n: usize) -> EntryPayload {
    let message = match n % 4 {
        0 => Message::User(UserMessage::text(format!(
            "step {n}: check the counter in counter.txt and bump it"
        ))),
        1 => Message::Assistant({
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = vec![
                ContentBlock::Text {
                    text: format!("Reading the file for step {n}."),
                },
                ContentBlock::ToolCall(ToolCall::new(
                    format!("call_{n}"),
                    "read",
                    serde_json::json!({"path": "counter.txt"}),
                )),
            ];
            assistant_message.stop_reason = StopReason::ToolUse;
            assistant_message
        }),
        2 => Message::ToolResult({
            let mut tool_result_message = ToolResultMessage::new(
                format!("call_{}", n - 1),
                "read",
                ToolStatus::Success,
                vec![UserContent::Text {
                    text: format!("     1\tvalue {n}\n").repeat(80),
                }],
            );
            tool_result_message.error = None;
            tool_result_message.details = None;
            tool_result_message
        }),
        _ => Message::Assistant({
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = vec![ContentBlock::Text {
                text: format!("The counter is at {n}; next step."),
            }];
            assistant_message
        }),
    };
    EntryPayload::Message { message }
}

/// A kernel over a memory store holding one session of `entries` entries.
fn session(entries: usize) -> (AgentKernel, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::new());
    let id = RUNTIME.block_on(async {
        let id = store.create(NewSession::default()).await.unwrap();
        let list: Vec<Entry> = (0..entries)
            .map(|n| {
                Entry::new(
                    format!("e{n}"),
                    n.checked_sub(1).map(|p| format!("e{p}")),
                    0,
                    payload(n),
                )
            })
            .collect();
        store.append(&id, list).await.unwrap();
        id
    });
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(r#"{"turns":[{"content":[]}]}"#).unwrap(),
        )))
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(store)
        .tools(keel_tools::builtin::default_tools(Default::default()))
        .project_instructions(Instructions::none())
        .build()
        .unwrap();
    (kernel, id, dir)
}

#[divan::bench(args = [1_000, 10_000], sample_count = 20, max_time = 3)]
fn preview_request(bencher: Bencher, entries: usize) {
    let (kernel, id, _dir) = session(entries);
    bencher.bench(|| {
        let preview = RUNTIME.block_on(kernel.preview_request(&id)).unwrap();
        assert_eq!(preview.request.messages.len(), entries);
        preview
    });
}

#[divan::bench(args = [1_000, 10_000], sample_count = 20, max_time = 3)]
fn request_in_a_run(bencher: Bencher, entries: usize) {
    let (kernel, id, _dir) = session(entries);
    let mut view = RUNTIME.block_on(kernel.context_view(&id)).unwrap();
    RUNTIME.block_on(view.request());
    bencher.bench_local(|| {
        let preview = RUNTIME.block_on(view.request());
        assert_eq!(preview.request.messages.len(), entries);
        preview
    });
}

#[divan::bench(sample_count = 1, sample_size = 1)]
fn load_o200k() -> u64 {
    keel_kernel::tokens::count_tokens("warm up")
}

#[divan::bench(args = [64 * 1024, 1 << 20], sample_count = 20, max_time = 3)]
fn count_tokens(bencher: Bencher, bytes: usize) {
    let text = &SOURCE[..SOURCE.floor_char_boundary(bytes)];
    keel_kernel::tokens::count_tokens("warm up");
    bencher.bench(|| keel_kernel::tokens::count_tokens(divan::black_box(text)));
}
