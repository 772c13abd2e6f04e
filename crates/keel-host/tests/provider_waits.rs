//! The provider settings of `config.toml` (`first_byte_timeout_sec`,
//! `idle_timeout_sec`, `max_retries`, `max_retry_wait_sec`) reach the runs a
//! host assembles: a kernel from `Settings` against a local server speaking
//! the Chat Completions wire format.
//!
//! These run in tokio's virtual time (`start_paused`): the server runs on
//! the test's runtime and every wait — its chunk delays, the adapter's
//! progress timeouts, the kernel's retry waits — is a tokio timer, so a
//! 240 s answer takes 240 s of virtual time and milliseconds of wall time.
//! Asserted durations are virtual: no wall-clock race.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use keel_host::{Choices, Settings, Sources};
use keel_kernel::RunSpec;
use keel_protocol::{RunErrorCode, RunEventKind, RunResult, RunState};
use keel_provider::testing::{Reply, TestServer};
use keel_session::MemoryStore;
use tokio::time::Instant;

/// One Chat Completions chunk as an SSE event.
fn chunk(text: &str, finish: Option<&str>) -> Vec<u8> {
    let body = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "model": "slow",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]});
    format!("data: {body}\n\n").into_bytes()
}

/// `count` words, one a second, then the end of the answer.
fn steady(count: usize) -> Vec<(Duration, Vec<u8>)> {
    let mut chunks: Vec<(Duration, Vec<u8>)> = (0..count)
        .map(|_| (Duration::from_secs(1), chunk("word ", None)))
        .collect();
    chunks.push((Duration::ZERO, chunk("", Some("stop"))));
    chunks.push((Duration::ZERO, b"data: [DONE]\n\n".to_vec()));
    chunks
}

fn limited(retry_after: &str) -> Reply {
    Reply::Status {
        status: 429,
        headers: vec![("retry-after".into(), retry_after.into())],
        body: r#"{"error":{"message":"slow down"}}"#.into(),
    }
}

/// Keeps the paused clock moving in steps of 100 ms: an idle runtime would
/// otherwise jump straight to its next timer in the same step in which it
/// reads the server's bytes, and that timer could be the adapter's own
/// timeout (see keel-provider's `tests/retry.rs`).
fn tick_the_clock() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        let mut ticks = tokio::time::interval(Duration::from_millis(100));
        loop {
            ticks.tick().await;
        }
    })
}

/// Runs one prompt with provider `local` at `server`, configured by
/// `settings` (lines of its `[providers.local]` table) and `overrides`.
async fn run(
    server: &TestServer,
    settings: &str,
    overrides: &[&str],
) -> (Vec<RunEventKind>, RunResult) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "provider = \"local\"\n[providers.local]\napi = \"openai-chat\"\nbase_url = \"{}\"\n\
             default_model = \"slow\"\n{settings}\n",
            server.url()
        ),
    )
    .unwrap();
    let workspace = dir.path().join("work");
    std::fs::create_dir(&workspace).unwrap();
    let mut sources = Sources::default();
    sources.config_file = Some(config);
    sources.overrides = overrides.iter().map(|text| (*text).to_owned()).collect();
    let settings = Settings::load(&sources).unwrap();
    let setup = settings
        .resolve({
            let mut choices = Choices::default();
            choices.workspace = Some(workspace);
            choices
        })
        .unwrap();
    let kernel = setup.config.kernel(Arc::new(MemoryStore::new())).unwrap();
    let run = kernel.create_run(RunSpec::new("hi")).await.unwrap();
    let mut events = run.events().unwrap();
    let mut kinds = Vec::new();
    while let Some(event) = events.next().await {
        kinds.push(event.kind);
    }
    (kinds, run.result().await)
}

fn retry_delays(events: &[RunEventKind]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|kind| match kind {
            RunEventKind::ProviderRetry { delay_ms, .. } => Some(*delay_ms),
            _ => None,
        })
        .collect()
}

const WAITS: &str = "first_byte_timeout_sec = 30\nidle_timeout_sec = 10\nmax_retries = 2\n\
                     max_retry_wait_sec = 150";

/// Acceptance (issue 22), end to end: a 429 asking for 120 s is waited in
/// full and reported as `provider_retry` with its delay, then an answer
/// that streams steadily for 240 s settles the run.
#[tokio::test(start_paused = true)]
async fn a_long_steady_answer_after_a_long_retry_after_settles() {
    let _clock = tick_the_clock();
    let server = TestServer::start(vec![
        limited("120"),
        Reply::Sse {
            chunks: steady(240),
        },
    ])
    .await
    .unwrap();
    let started = Instant::now();
    let (events, result) = run(&server, WAITS, &[]).await;
    assert_eq!(result.state, RunState::Settled, "{:?}", result.error);
    assert_eq!(retry_delays(&events), [120_000]);
    assert!(
        started.elapsed() >= Duration::from_secs(360),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(result.message.unwrap().text(), "word ".repeat(240));
}

/// A stream that stalls fails at the configured idle timeout (10 s), and
/// with `max_retries = 0` (here from a `-c` override) is not retried.
#[tokio::test(start_paused = true)]
async fn a_stalled_answer_fails_at_the_configured_idle_timeout() {
    let _clock = tick_the_clock();
    let mut chunks = steady(5);
    chunks.insert(5, (Duration::from_secs(3_600), chunk("late ", None)));
    let server = TestServer::start(vec![Reply::Sse { chunks }])
        .await
        .unwrap();
    let started = Instant::now();
    let (events, result) = run(&server, WAITS, &["providers.local.max_retries=0"]).await;
    assert_eq!(result.state, RunState::Failed);
    let error = result.error.unwrap();
    assert_eq!(error.code, RunErrorCode::Timeout);
    assert_eq!(
        error.message,
        "the stream made no progress for 10 s (idle_timeout_sec; keep-alive comments do not count)"
    );
    assert!(retry_delays(&events).is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(600),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.connections(), 1);
}

/// A wait longer than `max_retry_wait_sec` is not waited: the run fails
/// `rate_limited`, naming the wait asked for and the configured limit.
#[tokio::test(start_paused = true)]
async fn a_wait_past_max_retry_wait_sec_fails_naming_it() {
    let _clock = tick_the_clock();
    let server = TestServer::start(vec![limited("200")]).await.unwrap();
    let (events, result) = run(&server, WAITS, &[]).await;
    assert_eq!(result.state, RunState::Failed);
    assert!(retry_delays(&events).is_empty());
    let error = result.error.unwrap();
    assert_eq!(error.code, RunErrorCode::RateLimited);
    assert_eq!(
        error.message,
        "HTTP 429: slow down (the provider asked to wait 200 s before retrying, longer than the \
         longest wait allowed, 150 s: raise max_retry_wait_sec to wait that long)"
    );
    assert_eq!(server.connections(), 1);
}
