//! The kernel retries as keel-provider's policy says: a failure that allows
//! one retry is retried once, and a provider that never finishes fails the
//! run within the retry budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_kernel::{AgentKernel, RetryPolicy, RunSpec};
use keel_protocol::{RunEventKind, RunState};
use keel_provider::{Script, ScriptedProvider};
use keel_session::MemoryStore;
use keel_tools::Workspace;

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
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        budget,
        // Exact delays: these tests are about the budget, not the jitter.
        jitter_percent: 0,
    }
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

#[tokio::test]
async fn a_provider_that_never_finishes_fails_within_the_budget() {
    let slow = r#"{"turns": [{"content": [{"type": "text", "text": "a very slow answer"}], "delay_ms": 60000}]}"#;
    let started = Instant::now();
    let (_, result) = run(slow, fast(Duration::from_millis(500))).await;
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    assert_eq!(result.state, RunState::Failed);
    let error = result.error.unwrap();
    assert!(error.message.contains("retry budget"), "{error:?}");
}
