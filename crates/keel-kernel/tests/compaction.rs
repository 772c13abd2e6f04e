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
            .tool(Arc::new(ReadTool::default()))
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
    // A prompt longer than the summary, so that the summary shrinks the
    // context (a summary that does not is refused).
    let prompt = format!("What is in big.txt? {}", "Please be thorough. ".repeat(60));
    let (events, result) = setup.run(&kernel, RunSpec::new(prompt)).await;
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
        .compaction({
            let mut compaction_settings = keel_kernel::CompactionSettings::default();
            compaction_settings.keep_recent_tokens = 50;
            compaction_settings
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

/// A summary of a model that writes in its own format: non-empty, useful,
/// without Keel's headings.
const OWN_FORMAT: &str = "### Task\n- find out what big.txt holds\n### Progress\n- big.txt was read: 500 numbered lines about a quick brown fox\n### Files\n- big.txt";

/// Keel's summary instructions, echoed back as a weak model does (the
/// opening of the fixed summary prompt, its headings and its rules).
const ECHO: &str = "You write checkpoint summaries of a coding agent's conversation. The agent will continue the task from your summary alone: the conversation you summarise is removed from its context. Do not continue the conversation, do not answer questions asked in it, and do not call tools. Write only the summary, in Markdown, under exactly these eight headings, in this order, each as a `## ` line:

## Goal
## Constraints and preferences
## Done and verified
## In progress
## Blocked
## Key decisions
## Exact files, symbols, commands and errors
## Next steps

Under each heading write short bullet points (or `- none`). Be exact: keep file paths, function and type names, commands, error messages and numbers verbatim, because the agent will act on them.";

fn compaction_failures(events: &[RunEvent]) -> Vec<(CompactionTrigger, keel_protocol::RunError)> {
    events
        .iter()
        .filter_map(|event| match &event.kind {
            RunEventKind::CompactionFailed { reason, error } => Some((*reason, error.clone())),
            _ => None,
        })
        .collect()
}

/// The text of a summary request's user message.
fn input_of(request: &keel_provider::ModelRequest) -> String {
    match request.messages[0].as_ref() {
        keel_protocol::Message::User(user) => user.plain_text(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_summary_without_the_headings_is_corrected_once_then_kept_as_free_text() {
    let mut answers = vec![Reply::text(
        "Sorry, here is what happened: the file was read.",
    )];
    answers.extend(vec![Reply::text(OWN_FORMAT); 8]);
    let setup = Setup::new(Sim::new(
        vec![read_big(), Reply::text("It holds 500 lines.")],
        answers,
        Some(2_000),
    ));
    let kernel = setup.builder().build().unwrap();
    let (events, result) = setup
        .run(&kernel, RunSpec::new("What is in big.txt?"))
        .await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
    assert!(
        compaction_failures(&events).is_empty(),
        "{:?}",
        kinds(&events)
    );

    // One corrective request, right after the first answer: the same
    // input, plus the validation error. Later answers in the model's own
    // format (one per chunk of the span) are not corrected again.
    let summaries = setup.sim.summaries.lock().unwrap().clone();
    let inputs: Vec<String> = summaries.iter().map(input_of).collect();
    let corrected: Vec<usize> = (0..inputs.len())
        .filter(|&n| inputs[n].contains("lacks the heading `Goal`"))
        .collect();
    assert_eq!(corrected, [1], "{inputs:#?}");
    assert!(inputs[1].starts_with(&inputs[0]), "{inputs:#?}");

    // The model's own answer is the summary, as free text.
    let checkpoints = setup.checkpoints(&result.session_id).await;
    assert_eq!(checkpoints.len(), 1);
    let EntryPayload::Checkpoint {
        summary, metrics, ..
    } = &checkpoints[0].payload
    else {
        unreachable!()
    };
    assert_eq!(summary.trim(), OWN_FORMAT);
    // The corrective request is counted among the summary requests.
    assert_eq!(
        metrics.as_ref().unwrap().summary_requests as usize,
        summaries.len()
    );
}

#[tokio::test]
async fn an_empty_summary_writes_nothing_and_fails_typed() {
    let setup = Setup::new(Sim::new(
        vec![read_big()],
        vec![Reply::text("  \n"); 8],
        Some(2_000),
    ));
    let kernel = setup.builder().build().unwrap();
    let (events, result) = setup
        .run(&kernel, RunSpec::new("What is in big.txt?"))
        .await;
    assert_eq!(result.state, RunState::Failed);
    let error = result.error.unwrap();
    assert_eq!(error.code, RunErrorCode::CompactionFailed, "{error:?}");
    assert!(error.message.contains("the summary is empty"), "{error:?}");
    // The empty answer got its one correction, no more.
    let summaries = setup.sim.summaries.lock().unwrap().clone();
    let corrections = summaries
        .iter()
        .filter(|request| {
            common::render(request, setup.dir.path()).contains("the summary is empty")
        })
        .count();
    assert_eq!(corrections, 1, "{} summary requests", summaries.len());
    let failed = compaction_failures(&events);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, CompactionTrigger::Overflow);
    assert_eq!(failed[0].1, error);
    assert!(setup.checkpoints(&result.session_id).await.is_empty());
    assert!(!kinds(&events).contains(&"compaction_succeeded"));
}

/// A kernel whose manual compaction covers the read of big.txt, after a
/// run that read it.
async fn session_with_big_read(setup: &Setup) -> (AgentKernel, String) {
    let kernel = setup
        .builder()
        .compaction({
            let mut compaction_settings = keel_kernel::CompactionSettings::default();
            compaction_settings.keep_recent_tokens = 50;
            compaction_settings
        })
        .build()
        .unwrap();
    let (_, result) = setup
        .run(&kernel, RunSpec::new("What is in big.txt?"))
        .await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
    (kernel, result.session_id)
}

#[tokio::test]
async fn a_summary_that_grows_the_context_is_rejected() {
    // Every heading, and under them more than the file it replaces.
    let bloated = common::valid_summary(&"the quick brown fox jumps; ".repeat(400));
    let setup = Setup::new(Sim::new(
        vec![read_big(), Reply::text("It counts.")],
        vec![Reply::Text(bloated)],
        None,
    ));
    let (kernel, session) = session_with_big_read(&setup).await;
    let error = kernel.compact(&session, None).await.unwrap_err();
    let KernelError::Compaction(error) = error else {
        panic!("{error:?}")
    };
    assert_eq!(error.code, RunErrorCode::CompactionFailed);
    assert!(
        error.message.contains("does not shrink the context"),
        "{error:?}"
    );
    assert!(setup.checkpoints(&session).await.is_empty());
}

#[tokio::test]
async fn a_summary_echoing_the_instructions_is_rejected() {
    let setup = Setup::new(Sim::new(
        vec![read_big(), Reply::text("It counts.")],
        vec![Reply::text(ECHO)],
        None,
    ));
    let (kernel, session) = session_with_big_read(&setup).await;
    let error = kernel.compact(&session, None).await.unwrap_err();
    let KernelError::Compaction(error) = error else {
        panic!("{error:?}")
    };
    assert_eq!(error.code, RunErrorCode::CompactionFailed);
    assert!(
        error
            .message
            .contains("repeats Keel's summary instructions"),
        "{error:?}"
    );
    assert!(setup.checkpoints(&session).await.is_empty());
    // Not a heading problem: no corrective retry was asked for.
    assert_eq!(setup.sim.summaries.lock().unwrap().len(), 1);
}

/// The threshold setup of the tests below: an 8k window (threshold
/// 6,144), and a model that reads part.txt (about 300 tokens with its line
/// numbers) `reads` times, then answers.
fn reading(reads: usize) -> Vec<Reply> {
    let mut replies: Vec<Reply> = (0..reads)
        .map(|n| Reply::call(&format!("part_{n}"), "read", r#"{"path":"part.txt"}"#))
        .collect();
    replies.push(Reply::text("done."));
    replies
}

/// Writes part.txt into the setup's workspace.
fn write_part(setup: &Setup) {
    let part: String = (0..25)
        .map(|n| format!("line {n}: the quick brown fox\n"))
        .collect();
    std::fs::write(setup.dir.path().join("part.txt"), part).unwrap();
}

/// The turns that started between the events at `from` and `to`.
fn turns_between(events: &[RunEvent], from: usize, to: usize) -> usize {
    events[from..to]
        .iter()
        .filter(|event| event.type_name() == "turn_start")
        .count()
}

fn auth_error() -> Reply {
    Reply::Error(keel_protocol::ProviderError::new(
        keel_protocol::ProviderErrorKind::Auth,
        "bad key",
    ))
}

#[tokio::test]
async fn a_failed_threshold_compaction_does_not_end_a_run_that_still_fits() {
    // The first summary request fails; later ones succeed.
    let setup = Setup::new(Sim::new(reading(30), vec![auth_error()], None));
    write_part(&setup);
    let kernel = setup.builder().context_window(8_192).build().unwrap();
    let (events, result) = setup.run(&kernel, RunSpec::new("Read the file.")).await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");

    // The failure was reported, and the run went on to a later compaction
    // that succeeded.
    let failed = compaction_failures(&events);
    assert_eq!(failed.len(), 1, "{:?}", kinds(&events));
    assert_eq!(failed[0].0, CompactionTrigger::Threshold);
    assert!(failed[0].1.message.contains("auth: bad key"), "{failed:?}");
    let kinds = kinds(&events);
    let failure = kinds
        .iter()
        .position(|k| *k == "compaction_failed")
        .unwrap();
    let success = kinds
        .iter()
        .position(|k| *k == "compaction_succeeded")
        .expect("a later compaction");
    assert!(failure < success, "{kinds:?}");
    // Not at once: two more turns ran first (the backoff after a first
    // failure), each still above the threshold.
    let retry = kinds[..success]
        .iter()
        .rposition(|k| *k == "compaction_started")
        .unwrap();
    assert_eq!(turns_between(&events, failure, retry), 2, "{kinds:?}");
    assert!(!setup.checkpoints(&result.session_id).await.is_empty());
    let sizes = setup.sim.sizes.lock().unwrap().clone();
    assert_eq!(sizes.len(), 31);
    assert!(sizes.iter().all(|size| *size <= 8_192), "{sizes:?}");
}

#[tokio::test]
async fn a_compaction_that_keeps_failing_ends_the_run_only_once_the_context_no_longer_fits() {
    let setup = Setup::new(Sim::new(reading(40), vec![auth_error(); 64], None));
    write_part(&setup);
    let kernel = setup.builder().context_window(8_192).build().unwrap();
    let (events, result) = setup.run(&kernel, RunSpec::new("Read the file.")).await;
    assert_eq!(result.state, RunState::Failed, "{result:?}");
    let error = result.error.unwrap();
    assert_eq!(error.code, RunErrorCode::CompactionFailed, "{error:?}");
    assert!(
        error.message.contains("does not fit the model's window"),
        "{error:?}"
    );
    // Earlier failures, while the context still fitted, did not end it,
    // and the waits between attempts grew.
    let failed = compaction_failures(&events);
    assert!(failed.len() >= 3, "{:?}", kinds(&events));
    assert!(
        failed
            .iter()
            .all(|(reason, _)| *reason == CompactionTrigger::Threshold)
    );
    let starts: Vec<usize> = (0..events.len())
        .filter(|&n| events[n].type_name() == "compaction_started")
        .collect();
    assert_eq!(turns_between(&events, starts[0], starts[1]), 2);
    // No request past the window was ever sent.
    let sizes = setup.sim.sizes.lock().unwrap().clone();
    assert!(sizes.len() < 41, "{sizes:?}");
    assert!(sizes.iter().all(|size| *size <= 8_192), "{sizes:?}");
    assert!(setup.checkpoints(&result.session_id).await.is_empty());
}
