//! `RunSpec::max_cost_usd`: the run fails with `budget_exceeded` before the
//! request that would spend past the budget, with `cost_unknown` when a
//! response's cost cannot be known, and is untouched when it stays under.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use keel_kernel::{AgentKernel, RunSpec};
use keel_protocol::{RunEventKind, RunResult, RunState};
use keel_provider::{Script, ScriptedProvider};
use keel_session::MemoryStore;
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, default_tools};
use serde_json::{Value, json};

/// A turn that reads a file and reports `usage`.
fn reading(usage: Value) -> Value {
    json!({"content": [{"type": "tool_call", "name": "read", "arguments": {"path": "a.txt"}}], "usage": usage})
}

/// Runs three reading turns and a final answer under `budget`; returns the
/// result and how many turns started.
async fn run(usage: Value, budget: Option<f64>) -> (RunResult, usize) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    let script = json!({"turns": [
        reading(usage.clone()), reading(usage.clone()), reading(usage.clone()),
        {"content": [{"type": "text", "text": "done"}], "usage": usage}
    ]});
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(&script.to_string()).unwrap(),
        )))
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(Arc::new(MemoryStore::new()))
        .tools(default_tools(BashOptions::default()))
        .build()
        .unwrap();
    let run = kernel
        .create_run(RunSpec::new("go").max_cost_usd(budget))
        .await
        .unwrap();
    let mut events = run.events().unwrap();
    let mut turns = 0;
    while let Some(event) = events.next().await {
        turns += usize::from(matches!(event.kind, RunEventKind::TurnStart { .. }));
    }
    (run.result().await, turns)
}

#[tokio::test]
async fn the_run_stops_before_the_request_that_would_pass_the_budget() {
    let priced = json!({"input_tokens": 100, "output_tokens": 10, "cost_usd": 0.02});
    let (result, turns) = run(priced.clone(), Some(0.03)).await;
    assert_eq!(result.state, RunState::Failed);
    let error = result.error.unwrap();
    assert_eq!(error.code.as_str(), "budget_exceeded");
    assert!(error.message.contains("$0.0400"), "{}", error.message);
    assert_eq!(turns, 2, "0.02 + 0.02 passed 0.03: no third request");
    assert!(result.message.is_some(), "the last answer is kept");

    let (result, turns) = run(priced, Some(1.0)).await;
    assert_eq!(result.state, RunState::Settled);
    assert_eq!(turns, 4);
}

#[tokio::test]
async fn an_unknown_cost_stops_a_budgeted_run_and_nothing_else() {
    let unpriced = json!({"input_tokens": 100, "output_tokens": 10});
    let (result, turns) = run(unpriced.clone(), Some(5.0)).await;
    assert_eq!(result.error.unwrap().code.as_str(), "cost_unknown");
    assert_eq!(turns, 1);
    let (result, turns) = run(unpriced, None).await;
    assert_eq!(result.state, RunState::Settled);
    assert_eq!(turns, 4);
}
