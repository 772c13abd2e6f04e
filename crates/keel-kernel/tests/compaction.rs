//! Compaction's three triggers and its failures, through the public seams:
//! a simulated model (`common::Sim`) that refuses requests above a size
//! with a context-length error, answers summary requests, and reports its
//! token counts; runs and manual compactions started by `AgentKernel`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{Reply, Sim, valid_summary};
use keel_kernel::{AgentKernel, AgentKernelBuilder, Instructions, KernelError, RunSpec};
use keel_protocol::{
    CompactionTrigger, Entry, EntryPayload, ErrorSource, PermissionMode, RunErrorCode, RunEvent,
    RunEventKind, RunResult, RunState,
};
use keel_session::{MemoryStore, SessionStore};
use keel_tools::Workspace;
use keel_tools::builtin::ReadTool;

/// A file of about 2,500 o200k tokens.
fn big_text() -> String {
    (0..500)
        .map(|n| format!("line {n}: the quick brown fox\n"))
        .collect()
}

struct Setup {
    dir: tempfile::TempDir,
    store: Arc<MemoryStore>,
    sim: Arc<Sim>,
}

impl Setup {
    fn new(sim: Sim) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join("big.txt"), big_text()).unwrap();
        std::fs::write(dir.path().join("small.txt"), "tiny\n").unwrap();
        Self {
            dir,
            store: Arc::new(MemoryStore::new()),
            sim: Arc::new(sim),
        }
    }

    fn builder(&self) -> AgentKernelBuilder {
        AgentKernel::builder()
            .provider(self.sim.clone())
            .model("sim-1")
            .workspace(Workspace::new(self.dir.path()).unwrap())
            .store(self.store.clone())
            .tool(Arc::new(ReadTool))
            .system_prompt("You are a test agent.")
            .project_instructions(Instructions::none())
    }

    async fn run(&self, kernel: &AgentKernel, spec: RunSpec) -> (Vec<RunEvent>, RunResult) {
        let run = kernel
            .create_run(spec.mode(PermissionMode::Auto))
            .await
            .unwrap();
        let mut events = run.events().unwrap();
        let mut all = Vec::new();
        while let Some(event) = events.next().await {
            all.push(event);
        }
        (all, run.result().await)
    }

    async fn checkpoints(&self, session: &str) -> Vec<Entry> {
        self.store
            .entries(session)
            .await
            .unwrap()
            .into_iter()
            .filter(|entry| matches!(entry.payload, EntryPayload::Checkpoint { .. }))
            .collect()
    }
}

fn kinds(events: &[RunEvent]) -> Vec<&'static str> {
    events.iter().map(RunEvent::type_name).collect()
}

fn read_big() -> Reply {
    Reply::call("call_big", "read", r#"{"path":"big.txt"}"#)
}

#[tokio::test]
async fn an_overflow_compacts_retries_once_and_settles() {
    let setup = Setup::new(Sim::new(
        vec![read_big(), Reply::text("The file counts lines.")],
        vec![],
        Some(2_000),
    ));
    let kernel = setup.builder().build().unwrap();
    let (events, result) = setup
        .run(&kernel, RunSpec::new("What is in big.txt?"))
        .await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");

    // Request 2 (with the file) was refused; request 3 is its retry.
    let sizes = setup.sim.sizes.lock().unwrap().clone();
    assert_eq!(sizes.len(), 3, "{sizes:?}");
    assert!(sizes[1] > 2_000 && sizes[2] <= 2_000, "{sizes:?}");
    let kinds = kinds(&events);
    let started = kinds
        .iter()
        .position(|k| *k == "compaction_started")
        .unwrap();
    let succeeded = kinds
        .iter()
        .position(|k| *k == "compaction_succeeded")
        .unwrap();
    assert!(started < succeeded);
    assert!(
        events.iter().any(|event| matches!(
            &event.kind,
            RunEventKind::CompactionStarted {
                reason: CompactionTrigger::Overflow,
                ..
            }
        )),
        "{kinds:?}"
    );
    assert_eq!(kinds.iter().filter(|k| **k == "provider_retry").count(), 0);
    // The error stated the refused request's size: the estimate is
    // calibrated by it.
    let before = events
        .iter()
        .find_map(|event| match &event.kind {
            RunEventKind::CompactionStarted { tokens_before, .. } => Some(*tokens_before),
            _ => None,
        })
        .unwrap();
    assert!(before.abs_diff(sizes[1]) <= 2, "{before} vs {}", sizes[1]);

    // The retry carries the summary instead of the file's text.
    let requests = setup.sim.requests.lock().unwrap().clone();
    let retry = common::render(&requests[2], setup.dir.path());
    assert!(retry.contains("<summary>"), "{retry}");
    assert!(!retry.contains("line 300:"), "{retry}");

    // The checkpoint: evidence from the covered span, metrics, the trigger.
    let checkpoints = setup.checkpoints(&result.session_id).await;
    assert_eq!(checkpoints.len(), 1);
    let EntryPayload::Checkpoint {
        evidence, metrics, ..
    } = &checkpoints[0].payload
    else {
        unreachable!()
    };
    assert_eq!(evidence.as_ref().unwrap().files_read, ["big.txt"]);
    let metrics = metrics.as_ref().unwrap();
    assert_eq!(metrics.trigger, CompactionTrigger::Overflow);
    assert!(metrics.tokens_after < metrics.tokens_before, "{metrics:?}");
    assert_eq!(
        (metrics.provider.as_str(), metrics.model.as_str()),
        ("sim", "sim-1")
    );
    // The window stated by the error (2,000) leaves room for a small chunk
    // of the span per summary request.
    assert!(metrics.summary_requests >= 1, "{metrics:?}");
    assert_eq!(metrics.window, Some(2_000));
}

#[tokio::test]
async fn a_second_overflow_right_after_fails_the_run_clearly() {
    // Even the compacted request is above the limit.
    let setup = Setup::new(Sim::new(vec![read_big()], vec![], Some(40)));
    let kernel = setup.builder().build().unwrap();
    let (events, result) = setup
        .run(&kernel, RunSpec::new("What is in big.txt?"))
        .await;
    assert_eq!(result.state, RunState::Failed);
    let error = result.error.unwrap();
    assert_eq!(error.code, RunErrorCode::ContextOverflow, "{error:?}");
    assert_eq!(error.source, ErrorSource::Provider);
    assert!(
        error
            .message
            .contains("still larger than the model's context window after compacting"),
        "{error:?}"
    );
    // The first request overflowed too: it compacted once per refused
    // request at most, and never twice in a row for the same request.
    let kinds = kinds(&events);
    let compactions = kinds.iter().filter(|k| **k == "compaction_started").count();
    assert_eq!(compactions, 1, "{kinds:?}");
    assert_eq!(setup.sim.sizes.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn an_unusable_summary_writes_nothing_and_fails_typed() {
    let setup = Setup::new(Sim::new(
        vec![read_big()],
        vec![Reply::text("Sorry, I cannot summarise this."); 8],
        Some(2_000),
    ));
    let kernel = setup.builder().build().unwrap();
    let (events, result) = setup
        .run(&kernel, RunSpec::new("What is in big.txt?"))
        .await;
    assert_eq!(result.state, RunState::Failed);
    let error = result.error.unwrap();
    assert_eq!(error.code, RunErrorCode::CompactionFailed, "{error:?}");
    assert!(
        error.message.contains("lacks the heading `Goal`"),
        "{error:?}"
    );
    let failed = events
        .iter()
        .find_map(|event| match &event.kind {
            RunEventKind::CompactionFailed { reason, error } => Some((*reason, error.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(failed.0, CompactionTrigger::Overflow);
    assert_eq!(failed.1, error);
    assert!(setup.checkpoints(&result.session_id).await.is_empty());
    assert!(!kinds(&events).contains(&"compaction_succeeded"));
}

#[tokio::test]
async fn a_failing_summary_request_fails_typed_without_looping() {
    let setup = Setup::new(Sim::new(
        vec![read_big()],
        vec![Reply::Error(keel_protocol::ProviderError::new(
            keel_protocol::ProviderErrorKind::Auth,
            "bad key",
        ))],
        Some(2_000),
    ));
    let kernel = setup.builder().build().unwrap();
    let (_, result) = setup
        .run(&kernel, RunSpec::new("What is in big.txt?"))
        .await;
    let error = result.error.unwrap();
    assert_eq!(error.code, RunErrorCode::CompactionFailed);
    assert!(error.message.contains("auth: bad key"), "{error:?}");
    assert_eq!(setup.sim.summaries.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_threshold_compacts_before_the_request_that_would_pass_it() {
    let replies = vec![
        Reply::call("c1", "read", r#"{"path":"big.txt"}"#),
        Reply::call("c2", "read", r#"{"path":"small.txt"}"#),
        Reply::text("done."),
    ];
    let setup = Setup::new(Sim::new(replies, vec![], None));
    // Threshold: 4,096 − 1,024 = 3,072 tokens; the file alone is ~2,500.
    let kernel = setup.builder().context_window(4_096).build().unwrap();
    let (events, result) = setup.run(&kernel, RunSpec::new("Read both files.")).await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
    let started: Vec<_> = events
        .iter()
        .filter_map(|event| match &event.kind {
            RunEventKind::CompactionStarted {
                reason,
                tokens_before,
                window,
            } => Some((*reason, *tokens_before, *window)),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0].0, CompactionTrigger::Threshold);
    assert!(started[0].1 > 3_072, "{started:?}");
    assert_eq!(started[0].2, Some(4_096));
    let sizes = setup.sim.sizes.lock().unwrap().clone();
    assert!(sizes.iter().all(|size| *size <= 4_096), "{sizes:?}");
    // turn_end reports the context: the window and an estimate within it.
    let usage: Vec<_> = events
        .iter()
        .filter_map(|event| match &event.kind {
            RunEventKind::TurnEnd { context, .. } => *context,
            _ => None,
        })
        .collect();
    assert_eq!(usage.len(), 3);
    assert!(usage.iter().all(|usage| usage.window == Some(4_096)));
    assert!(usage[0].estimated_tokens > 2_500, "{usage:?}");
    assert!(
        usage[2].estimated_tokens < usage[0].estimated_tokens,
        "{usage:?}"
    );
    assert!(usage[2].reported_input_tokens.is_some());
}

#[tokio::test]
async fn a_manual_compaction_writes_a_checkpoint_with_the_hosts_focus() {
    let setup = Setup::new(Sim::new(
        vec![read_big(), Reply::text("It counts.")],
        vec![],
        None,
    ));
    let kernel = setup
        .builder()
        .compaction(keel_kernel::CompactionSettings {
            keep_recent_tokens: 50,
            ..keel_kernel::CompactionSettings::default()
        })
        .build()
        .unwrap();
    let (_, result) = setup
        .run(&kernel, RunSpec::new("What is in big.txt?"))
        .await;
    let session = result.session_id;
    let report = kernel
        .compact(&session, Some("keep the line numbers"))
        .await
        .unwrap();
    assert!(report.tokens_after < report.tokens_before, "{report:?}");
    let summaries = setup.sim.summaries.lock().unwrap().clone();
    assert_eq!(summaries.len(), 1);
    let input = common::render(&summaries[0], setup.dir.path());
    assert!(
        input.contains("Additional focus: keep the line numbers"),
        "{input}"
    );
    assert!(input.contains("Files read: big.txt"), "{input}");
    let checkpoints = setup.checkpoints(&session).await;
    assert_eq!(checkpoints.len(), 1);
    assert_eq!(checkpoints[0].id, report.checkpoint_id);
    let EntryPayload::Checkpoint {
        summary,
        first_kept_entry_id,
        metrics,
        ..
    } = &checkpoints[0].payload
    else {
        unreachable!()
    };
    assert_eq!(summary.trim(), valid_summary("summary 1").trim());
    assert_eq!(metrics.as_ref().unwrap().trigger, CompactionTrigger::Manual);
    // The kept tail is the last turn: the final answer.
    let kept = setup
        .store
        .entries(&session)
        .await
        .unwrap()
        .into_iter()
        .find(|entry| &entry.id == first_kept_entry_id)
        .unwrap();
    assert!(matches!(
        kept.payload,
        EntryPayload::Message {
            message: keel_protocol::Message::Assistant(_)
        }
    ));

    // A session with nothing to summarise is refused, and nothing written.
    let empty = setup
        .store
        .create(keel_session::NewSession::default())
        .await
        .unwrap();
    let error = kernel.compact(&empty, None).await.unwrap_err();
    assert!(
        matches!(&error, KernelError::Compaction(e) if e.code == RunErrorCode::CompactionFailed)
    );
    assert_eq!(error.code(), "compaction_failed");
    assert!(setup.store.entries(&empty).await.unwrap().is_empty());
}
