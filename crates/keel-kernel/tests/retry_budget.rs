//! The kernel retries as keel-provider's policy says: a failure that allows
//! one retry is retried once; the retry budget bounds the waits between
//! attempts, never one attempt that keeps streaming; a server's wait is
//! honoured in full and reported as `provider_retry` with its delay, and a
//! wait past the longest allowed fails the run `rate_limited`, naming it.
//!
//! The long cases run in tokio's virtual time (`start_paused`): the
//! scripted provider's delays and the retry waits are tokio timers, so 240 s
//! of streaming take milliseconds of wall time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use keel_kernel::{AgentKernel, RetryPolicy, RunSpec};
use keel_protocol::{RunEventKind, RunState};
use keel_provider::{Script, ScriptedProvider};
use keel_session::MemoryStore;
use keel_tools::Workspace;
use tokio::time::Instant;

async fn run(script: &str, retry: RetryPolicy) -> (Vec<RunEventKind>, keel_protocol::RunResult) {
    let dir = tempfile::tempdir().unwrap();
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(script).unwrap(),
        )))
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(Arc::new(MemoryStore::new()))
        .retry(retry)
        .build()
        .unwrap();
    let run = kernel.create_run(RunSpec::new("hi")).await.unwrap();
    let mut events = run.events().unwrap();
    let mut kinds = Vec::new();
    while let Some(event) = events.next().await {
        kinds.push(event.kind);
    }
    (kinds, run.result().await)
}

fn fast(budget: Duration) -> RetryPolicy {
    let mut policy = RetryPolicy::default();
    policy.max_attempts = 4;
    policy.base_delay = Duration::from_millis(10);
    policy.max_delay = Duration::from_millis(50);
    policy.budget = budget;
    policy.max_wait = Duration::from_secs(300);
    // Exact delays: these tests are about the budget, not the jitter.
    policy.jitter_percent = 0;
    policy
}

#[tokio::test]
async fn a_failure_that_allows_one_retry_is_retried_once() {
    let refused = r#"{"content": [], "error": {"kind": "stream_dropped", "message": "cannot connect (connection refused)", "max_retries": 1}}"#;
    let script = format!(
        r#"{{"turns": [{refused}, {refused}, {refused}, {{"content": [{{"type": "text", "text": "ok"}}]}}]}}"#
    );
    let (events, result) = run(&script, fast(Duration::from_secs(30))).await;
    let retries: Vec<(u32, u32)> = events
        .iter()
        .filter_map(|kind| match kind {
            RunEventKind::ProviderRetry {
                attempt,
                max_attempts,
                ..
            } => Some((*attempt, *max_attempts)),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [(1, 2)]);
    assert_eq!(result.state, RunState::Failed);
    let error = result.error.unwrap();
    assert!(error.message.contains("(after 2 attempts)"), "{error:?}");
}

/// Acceptance (issue 22): an answer that keeps streaming for 240 s is not
/// cut by a retry budget of 1 s — the budget bounds retries, not one
/// healthy attempt.
#[tokio::test(start_paused = true)]
async fn a_slow_steady_answer_is_never_cut_by_the_retry_budget() {
    // 30 deltas of 8 characters and the events around them, 4 s apart.
    let text = "steady! ".repeat(30);
    let slow = format!(
        r#"{{"turns": [{{"content": [{{"type": "text", "text": "{text}"}}], "delay_ms": 4000}}]}}"#
    );
    let started = Instant::now();
    let (events, result) = run(&slow, fast(Duration::from_secs(1))).await;
    assert_eq!(result.state, RunState::Settled, "{:?}", result.error);
    assert!(
        started.elapsed() >= Duration::from_secs(120),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !events
            .iter()
            .any(|kind| matches!(kind, RunEventKind::ProviderRetry { .. })),
        "one attempt"
    );
    assert_eq!(result.message.unwrap().text(), text);
}

/// Acceptance (issue 22): a server's wait of 120 s is waited in full (not
/// cut to the backoff's 60 s cap) and reported as `provider_retry` with
/// its delay; a wait of 600 s, past the longest allowed (300 s), is not
/// waited: the run fails `rate_limited`, naming the wait asked for.
#[tokio::test(start_paused = true)]
async fn a_servers_wait_is_honoured_in_full_up_to_the_longest_allowed() {
    let limited = |ms: u64| {
        format!(
            r#"{{"content": [], "error": {{"kind": "rate_limited", "message": "HTTP 429: slow down", "retry_after_ms": {ms}}}}}"#
        )
    };
    let answer = r#"{"content": [{"type": "text", "text": "ok"}]}"#;
    let script = format!(r#"{{"turns": [{}, {answer}]}}"#, limited(120_000));
    let started = Instant::now();
    let (events, result) = run(&script, fast(Duration::from_secs(900))).await;
    assert_eq!(result.state, RunState::Settled, "{:?}", result.error);
    let delays: Vec<u64> = events
        .iter()
        .filter_map(|kind| match kind {
            RunEventKind::ProviderRetry { delay_ms, .. } => Some(*delay_ms),
            _ => None,
        })
        .collect();
    assert_eq!(delays, [120_000]);
    assert!(started.elapsed() >= Duration::from_secs(120));

    let script = format!(r#"{{"turns": [{}, {answer}]}}"#, limited(600_000));
    let (events, result) = run(&script, fast(Duration::from_secs(900))).await;
    assert_eq!(result.state, RunState::Failed);
    assert!(
        !events
            .iter()
            .any(|kind| matches!(kind, RunEventKind::ProviderRetry { .. })),
        "not waited"
    );
    let error = result.error.unwrap();
    assert_eq!(error.code, keel_protocol::RunErrorCode::RateLimited);
    assert_eq!(
        error.message,
        "HTTP 429: slow down (the provider asked to wait 600 s before retrying, longer than \
         the longest wait allowed, 300 s: raise max_retry_wait_sec to wait that long)"
    );
}
