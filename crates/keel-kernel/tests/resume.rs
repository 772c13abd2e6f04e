//! Crash recovery (docs/recovery.md) through `AgentKernel`: a run whose process dies mid-batch (here:
//! its runtime is torn down while a tool runs) leaves an effect journal from
//! which `AgentKernel::resume` continues without doing an applied effect
//! twice and without silently redoing one whose outcome is unknown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use keel_kernel::{AgentKernel, KernelError, RunSpec};
use keel_protocol::{
    Entry, EntryPayload, ExecutionMode, Idempotency, IntentKind, IntentScope, Message,
    OperationIntent, PermissionMode, RecoveryAction, RunEventKind, RunState, ToolErrorCode,
    ToolStatus,
};
use keel_provider::{Script, ScriptedProvider};
use keel_session::{MemoryStore, SessionStore};
use keel_tools::builtin::{BashTool, EditTool, WriteTool};
use keel_tools::{Tool, ToolContext, ToolFuture, Workspace};
use serde_json::{Value, json};

/// A side-effecting tool that never finishes: the crash happens while it runs.
struct Hang;

impl Tool for Hang {
    fn name(&self) -> &str {
        "hang"
    }
    fn description(&self) -> &str {
        "Never returns."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Sequential
    }
    fn intent(&self, _arguments: &Value, _workspace: &Workspace) -> OperationIntent {
        OperationIntent::new(IntentKind::Write, IntentScope::Workspace)
    }
    fn execute(&self, _arguments: Value, _context: ToolContext) -> ToolFuture<'_> {
        Box::pin(std::future::pending())
    }
}

fn kernel(dir: &std::path::Path, store: Arc<MemoryStore>, script: Value) -> AgentKernel {
    AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(&script.to_string()).unwrap(),
        )))
        .workspace(Workspace::new(dir).unwrap())
        .store(store)
        .tool(Arc::new(WriteTool::default()))
        .tool(Arc::new(EditTool::default()))
        .tool(Arc::new(Hang))
        .tool(Arc::new(BashTool::default()))
        .build()
        .unwrap()
}

/// Runs `calls` in one batch and "crashes" when `hang` starts: the runtime
/// is shut down without letting the run finish. Returns the session id.
fn crash_in_batch(dir: &std::path::Path, store: Arc<MemoryStore>, calls: Value) -> String {
    crash_in_batch_in(dir, store, calls, PermissionMode::Auto)
}

/// [`crash_in_batch`] with the crashed run in `mode`.
fn crash_in_batch_in(
    dir: &std::path::Path,
    store: Arc<MemoryStore>,
    calls: Value,
    mode: PermissionMode,
) -> String {
    crash_when(
        dir,
        store,
        calls,
        mode,
        |kind| matches!(kind, RunEventKind::ToolExecutionStart { tool_name, .. } if tool_name == "hang"),
    )
}

/// Runs `calls` in one batch and "crashes" at the first event `until`
/// accepts. Returns the session id.
fn crash_when(
    dir: &std::path::Path,
    store: Arc<MemoryStore>,
    calls: Value,
    mode: PermissionMode,
    until: impl Fn(&RunEventKind) -> bool,
) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let script = json!({"turns": [{"content": calls}]});
    let kernel = kernel(dir, store, script);
    let session = runtime.block_on(async {
        let run = kernel
            .create_run(RunSpec::new("go").mode(mode))
            .await
            .unwrap();
        let mut events = run.events().unwrap();
        while let Some(event) = events.next().await {
            if until(&event.kind) {
                break;
            }
        }
        let session = run.session_id().to_owned();
        std::mem::forget(run);
        session
    });
    runtime.shutdown_timeout(Duration::from_millis(100));
    session
}

fn recovered(entries: &[Entry]) -> Vec<(String, RecoveryAction)> {
    entries
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::EffectRecovered {
                tool_name, action, ..
            } => Some((tool_name.clone(), *action)),
            _ => None,
        })
        .collect()
}

fn results(entries: &[Entry]) -> Vec<(String, ToolStatus, Option<ToolErrorCode>)> {
    entries
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::Message {
                message: Message::ToolResult(result),
            } => Some((
                result.tool_name.clone(),
                result.status,
                result.error.as_ref().map(|error| error.code),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn effects_are_journaled_before_they_run_and_a_resume_does_none_twice() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.txt"), "one\n").unwrap();
    let store = Arc::new(MemoryStore::new());
    let calls = json!([
        {"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "A\n"}},
        {"type": "tool_call", "name": "edit", "arguments": {"path": "b.txt", "edits": [{"old_text": "one", "new_text": "two"}]}},
        {"type": "tool_call", "name": "hang", "arguments": {}}
    ]);
    let session = crash_in_batch(dir.path(), Arc::clone(&store), calls);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let before = store.entries(&session).await.unwrap();
        let effects: Vec<(String, Idempotency, usize)> = before
            .iter()
            .filter_map(|entry| match &entry.payload {
                EntryPayload::EffectStarted { effect } => Some((
                    effect.tool_name.clone(),
                    effect.idempotency,
                    effect.evidence.len(),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            effects,
            vec![
                ("write".into(), Idempotency::WriteFile, 1),
                ("edit".into(), Idempotency::EditFile, 1),
                ("hang".into(), Idempotency::Undeclared, 0),
            ]
        );
        assert!(results(&before).is_empty(), "the crash left no results");

        let kernel = kernel(
            dir.path(),
            Arc::clone(&store),
            json!({"turns": [{"content": [{"type": "text", "text": "done"}]}]}),
        );
        assert!(kernel.interrupted(&session).await.unwrap());
        let refused = kernel
            .create_run(RunSpec::new("again").session(&session))
            .await;
        match refused {
            Err(error @ KernelError::Interrupted(_)) => {
                assert!(error.to_string().contains("keel resume"), "{error}");
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("a run continued past dangling calls"),
        }

        let run = kernel.resume(&session, PermissionMode::Auto).await.unwrap();
        let mut events = run.events().unwrap();
        let mut reported = Vec::new();
        while let Some(event) = events.next().await {
            if let RunEventKind::EffectRecovered { action, .. } = event.kind {
                reported.push(action);
            }
        }
        assert_eq!(run.result().await.state, RunState::Settled);
        assert_eq!(
            reported,
            vec!["already_applied", "already_applied", "interrupted"]
        );

        let after = store.entries(&session).await.unwrap();
        assert_eq!(
            recovered(&after),
            vec![
                ("write".into(), RecoveryAction::AlreadyApplied),
                ("edit".into(), RecoveryAction::AlreadyApplied),
                ("hang".into(), RecoveryAction::Interrupted),
            ]
        );
        assert_eq!(
            results(&after),
            vec![
                ("write".into(), ToolStatus::Success, None),
                ("edit".into(), ToolStatus::Success, None),
                (
                    "hang".into(),
                    ToolStatus::Error,
                    Some(ToolErrorCode::Interrupted)
                ),
            ]
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
            "two\n"
        );
        assert!(!kernel.interrupted(&session).await.unwrap());
        assert!(matches!(
            kernel.resume(&session, PermissionMode::Auto).await,
            Err(KernelError::NotInterrupted(_))
        ));
    });
}

#[test]
fn a_resume_applies_what_had_not_happened_and_runs_what_never_started() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.txt"), "one\n").unwrap();
    let store = Arc::new(MemoryStore::new());
    // The hang comes first: the write and the edit are journaled (one group
    // with the decisions) but never ran when the crash came.
    let calls = json!([
        {"type": "tool_call", "name": "hang", "arguments": {}},
        {"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "A\n"}},
        {"type": "tool_call", "name": "edit", "arguments": {"path": "b.txt", "edits": [{"old_text": "one", "new_text": "two"}]}},
        {"type": "tool_call", "name": "nonexistent", "arguments": {}}
    ]);
    // The crashed run had `full`; the resume gets the mode the host gives
    // again (`auto`), never the interrupted run's.
    let session = crash_in_batch_in(dir.path(), Arc::clone(&store), calls, PermissionMode::Full);
    assert!(!dir.path().join("a.txt").exists());
    let after = resume_settled(dir.path(), &store, &session);
    assert_eq!(
        recovered(&after),
        vec![
            ("hang".into(), RecoveryAction::Interrupted),
            ("write".into(), RecoveryAction::Rerun),
            ("edit".into(), RecoveryAction::Rerun),
            ("nonexistent".into(), RecoveryAction::NotStarted),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "A\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
        "two\n"
    );
    let statuses: Vec<ToolStatus> = results(&after).into_iter().map(|r| r.1).collect();
    assert_eq!(
        statuses,
        vec![
            ToolStatus::Error,
            ToolStatus::Success,
            ToolStatus::Success,
            ToolStatus::Error
        ]
    );
    let kinds: Vec<&str> = after.iter().map(Entry::kind).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "run_start").count(), 2);
    assert_eq!(kinds.last(), Some(&"run_end"));
    let modes: Vec<PermissionMode> = after
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::RunStart { mode, .. } => Some(*mode),
            _ => None,
        })
        .collect();
    assert_eq!(modes, vec![PermissionMode::Full, PermissionMode::Auto]);
}

#[test]
fn an_edit_whose_target_changed_is_a_conflict_not_a_rerun() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.txt"), "one\n").unwrap();
    let store = Arc::new(MemoryStore::new());
    let calls = json!([
        {"type": "tool_call", "name": "hang", "arguments": {}},
        {"type": "tool_call", "name": "edit", "arguments": {"path": "b.txt", "edits": [{"old_text": "one", "new_text": "two"}]}}
    ]);
    let session = crash_in_batch(dir.path(), Arc::clone(&store), calls);
    std::fs::write(dir.path().join("b.txt"), "someone else\n").unwrap();
    let after = resume_settled(dir.path(), &store, &session);
    assert_eq!(
        recovered(&after)[1],
        ("edit".into(), RecoveryAction::Conflict)
    );
    assert_eq!(results(&after)[1].2, Some(ToolErrorCode::EffectConflict));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
        "someone else\n"
    );
}

#[test]
fn a_resumed_run_keeps_the_hosts_turn_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::new());
    let calls = json!([{"type": "tool_call", "name": "hang", "arguments": {}}]);
    let session = crash_in_batch(dir.path(), Arc::clone(&store), calls);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let script = json!({"turns": [
            {"content": [{"type": "tool_call", "name": "write", "arguments": {"path": "c.txt", "content": "c\n"}}]},
            {"content": [{"type": "text", "text": "done"}]}
        ]});
        let kernel = kernel(dir.path(), Arc::clone(&store), script);
        let spec = RunSpec::new("")
            .session(&session)
            .mode(PermissionMode::Auto)
            .max_turns(1);
        let run = kernel.resume_with(spec).await.unwrap();
        let result = run.result().await;
        assert_eq!(result.state, RunState::Failed, "{result:?}");
        assert_eq!(
            result.error.unwrap().code,
            keel_protocol::RunErrorCode::TurnLimit
        );
        assert!(dir.path().join("c.txt").exists(), "the one turn ran");
        // Without a session there is nothing to resume.
        let error = kernel.resume_with(RunSpec::new("")).await.err().unwrap();
        assert!(matches!(error, KernelError::NotInterrupted(_)), "{error}");
    });
}

/// The text and details of the (last) result of `tool`.
fn result_of(entries: &[Entry], tool: &str) -> (ToolStatus, String, Option<Value>) {
    entries
        .iter()
        .rev()
        .find_map(|entry| match &entry.payload {
            EntryPayload::Message {
                message: Message::ToolResult(result),
            } if result.tool_name == tool => {
                let text = result
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        keel_protocol::UserContent::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                Some((result.status, text, result.details.clone()))
            }
            _ => None,
        })
        .unwrap()
}

/// The receipt keys (`effect_started` entry ids) of the `tool` calls
/// journaled in `entries`.
fn journaled_call(entries: &[Entry], tool: &str) -> Vec<String> {
    entries
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::EffectStarted { effect } if effect.tool_name == tool => {
                Some(entry.id.clone())
            }
            _ => None,
        })
        .collect()
}

/// Resumes `session` in `auto` and waits for the run to settle.
fn resume_settled(dir: &std::path::Path, store: &Arc<MemoryStore>, session: &str) -> Vec<Entry> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let kernel = kernel(
            dir,
            Arc::clone(store),
            json!({"turns": [{"content": [{"type": "text", "text": "done"}]}]}),
        );
        let run = kernel.resume(session, PermissionMode::Auto).await.unwrap();
        assert_eq!(run.result().await.state, RunState::Settled);
        store.entries(session).await.unwrap()
    })
}

#[test]
fn a_command_that_finished_before_the_crash_is_recovered_from_its_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let journal = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::with_journal_root(journal.path()));
    // The command ends before the crash; the batch's results are appended
    // only after `hang`, so the session holds no result for it.
    let calls = json!([
        {"type": "tool_call", "name": "bash", "arguments": {"command": "echo line >> counter.txt; echo appended; exit 3"}},
        {"type": "tool_call", "name": "hang", "arguments": {}}
    ]);
    let session = crash_in_batch(dir.path(), Arc::clone(&store), calls);
    let counter = || std::fs::read_to_string(dir.path().join("counter.txt")).unwrap();
    assert_eq!(counter(), "line\n");

    let after = resume_settled(dir.path(), &store, &session);
    assert_eq!(
        recovered(&after),
        vec![
            ("bash".into(), RecoveryAction::RecoveredFromReceipt),
            ("hang".into(), RecoveryAction::Interrupted),
        ]
    );
    let (status, text, details) = result_of(&after, "bash");
    assert_eq!(status, ToolStatus::Error, "{text}");
    assert!(text.contains("appended"), "the output tail: {text}");
    assert!(text.contains("Command exited with code 3"), "{text}");
    assert_eq!(details.unwrap()["exit_code"], json!(3));
    let codes = results(&after);
    assert_eq!(codes[0].2, Some(ToolErrorCode::ProcessFailed));
    assert_eq!(counter(), "line\n", "the command was not run again");
}

#[test]
fn a_command_the_crash_cut_short_is_interrupted_with_its_output_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let journal = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::with_journal_root(journal.path()));
    let calls = json!([
        {"type": "tool_call", "name": "bash", "arguments": {"command": "echo line >> counter.txt; echo partial-output; sleep 30; echo never"}}
    ]);
    let session = crash_when(
        dir.path(),
        Arc::clone(&store),
        calls,
        PermissionMode::Auto,
        |kind| {
            matches!(kind, RunEventKind::ToolExecutionUpdate { progress, .. }
                if progress.data.contains("partial-output"))
        },
    );
    let after = resume_settled(dir.path(), &store, &session);
    assert_eq!(
        recovered(&after),
        vec![("bash".into(), RecoveryAction::Interrupted)]
    );
    let (status, text, _) = result_of(&after, "bash");
    assert_eq!(status, ToolStatus::Error);
    assert!(text.contains("partial-output"), "{text}");
    assert!(!text.contains("never"), "{text}");
    assert_eq!(results(&after)[0].2, Some(ToolErrorCode::Interrupted));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("counter.txt")).unwrap(),
        "line\n"
    );
}

/// An unsandboxed `sleep` in its own process group, reaped by a thread
/// that reports its exit.
fn sleeper() -> (i32, std::sync::mpsc::Receiver<std::process::ExitStatus>) {
    use std::os::unix::process::CommandExt;
    // No inherited stdio: a sleeper the test failed to kill must not hold
    // the test's output pipe open.
    let mut child = std::process::Command::new("sleep")
        .arg("300")
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait().unwrap());
    });
    (pid, receiver)
}

#[test]
fn a_leftover_command_group_is_killed_only_when_its_start_time_matches() {
    use keel_tools::receipt::{Started, process_start_time};
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let journal = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::with_journal_root(journal.path()));
    // Both commands are journaled, the crash comes before either runs;
    // their `.started` receipts are then written as a dead run's would be.
    let calls = json!([
        {"type": "tool_call", "name": "hang", "arguments": {}},
        {"type": "tool_call", "name": "bash", "arguments": {"command": "sleep 300"}},
        {"type": "tool_call", "name": "bash", "arguments": {"command": "sleep 300"}}
    ]);
    let session = crash_in_batch_in(dir.path(), Arc::clone(&store), calls, PermissionMode::Full);
    let ids = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { journaled_call(&store.entries(&session).await.unwrap(), "bash") });
    assert_eq!(ids.len(), 2);
    let receipts = keel_tools::Receipts::new(journal.path().join(&session));
    let (ours, ours_exit) = sleeper();
    let (reused, reused_exit) = sleeper();
    for (call_id, pid, offset) in [(&ids[0], ours, 0), (&ids[1], reused, 1)] {
        let start_time = process_start_time(pid).unwrap() + offset;
        let started = {
            let mut started = Started::default();
            started.pid = Some(pid);
            started.pgid = Some(pid);
            started.start_time = Some(start_time);
            started.started_ms = 0;
            started
        };
        receipts.write_started(call_id, &started).unwrap();
    }

    let after = resume_settled(dir.path(), &store, &session);
    let status = ours_exit
        .recv_timeout(Duration::from_secs(5))
        .expect("the leftover group was killed");
    assert_eq!(status.signal(), Some(9));
    assert!(
        reused_exit
            .recv_timeout(Duration::from_millis(300))
            .is_err(),
        "a process whose start time differs was left alone"
    );
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(reused),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    reused_exit.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(
        recovered(&after)[1..],
        [
            ("bash".into(), RecoveryAction::Interrupted),
            ("bash".into(), RecoveryAction::Interrupted),
        ]
    );
}

#[test]
fn receipts_are_removed_once_the_batch_results_are_durable() {
    let dir = tempfile::tempdir().unwrap();
    let journal = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::with_journal_root(journal.path()));
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "echo hi"}}]},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let kernel = kernel(dir.path(), Arc::clone(&store), script);
    let session = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let run = kernel.create_run(RunSpec::new("go")).await.unwrap();
        assert_eq!(run.result().await.state, RunState::Settled);
        run.session_id().to_owned()
    });
    let receipts = journal.path().join(&session);
    assert!(receipts.is_dir(), "the command wrote its receipts");
    let left: Vec<_> = std::fs::read_dir(&receipts).unwrap().collect();
    assert!(left.is_empty(), "receipts left behind: {left:?}");
}

/// The tool calls of the session's assistant messages: (id, wire id).
fn call_ids(entries: &[Entry]) -> Vec<(String, Option<String>)> {
    entries
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::Message {
                message: Message::Assistant(assistant),
            } => Some(assistant.tool_calls().cloned().collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .map(|call| (call.id, call.wire_id))
        .collect()
}

#[test]
fn a_call_id_the_model_reuses_in_a_later_turn_never_takes_the_earlier_calls_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let journal = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::with_journal_root(journal.path()));
    // Turn 1: `same` finishes before the crash and is recovered from its
    // receipt, which is kept.
    let calls = json!([
        {"type": "tool_call", "id": "same", "name": "bash", "arguments": {"command": "echo one >> counter.txt"}},
        {"type": "tool_call", "id": "other", "name": "hang", "arguments": {}}
    ]);
    let session = crash_in_batch(dir.path(), Arc::clone(&store), calls);
    // The resumed run's next turn calls `same` again; it is cut short.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let script = json!({"turns": [{"content": [
            {"type": "tool_call", "id": "same", "name": "bash", "arguments": {"command": "echo two >> counter.txt; echo started-two; sleep 30"}}
        ]}]});
        let kernel = kernel(dir.path(), Arc::clone(&store), script);
        let run = kernel.resume(&session, PermissionMode::Auto).await.unwrap();
        let mut events = run.events().unwrap();
        while let Some(event) = events.next().await {
            if matches!(&event.kind, RunEventKind::ToolExecutionUpdate { progress, .. }
                if progress.data.contains("started-two"))
            {
                break;
            }
        }
        std::mem::forget(run);
    });
    runtime.shutdown_timeout(Duration::from_millis(100));

    let after = resume_settled(dir.path(), &store, &session);
    let decided = recovered(&after);
    assert_eq!(
        decided,
        vec![
            ("bash".into(), RecoveryAction::RecoveredFromReceipt),
            ("hang".into(), RecoveryAction::Interrupted),
            ("bash".into(), RecoveryAction::Interrupted),
        ],
        "the second command was cut short: its outcome is unknown"
    );
    let ids = call_ids(&after);
    assert_eq!(ids[0], ("same".to_owned(), None));
    // The repeated id was replaced by one unique in the session; the
    // provider's id is kept for the wire.
    assert_ne!(ids[2].0, "same");
    assert_eq!(ids[2].1.as_deref(), Some("same"));
    let unique: std::collections::HashSet<&String> = ids.iter().map(|(id, _)| id).collect();
    assert_eq!(unique.len(), ids.len(), "call ids are unique: {ids:?}");
    let (status, text, _) = after
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::Message {
                message: Message::ToolResult(result),
            } if result.call_id == ids[2].0 => Some((result.status, result.text(), ())),
            _ => None,
        })
        .next()
        .unwrap();
    assert_eq!(status, ToolStatus::Error, "never a success: {text}");
}

#[test]
fn a_write_never_overwrites_a_file_the_user_changed_deleted_or_replaced_after_the_crash() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt"] {
        std::fs::write(dir.path().join(name), "original\n").unwrap();
    }
    let store = Arc::new(MemoryStore::new());
    // Journaled, but the crash came while `hang` ran: none of them ran.
    let calls = json!([
        {"type": "tool_call", "name": "hang", "arguments": {}},
        {"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "planned\n"}},
        {"type": "tool_call", "name": "write", "arguments": {"path": "b.txt", "content": "planned\n"}},
        {"type": "tool_call", "name": "write", "arguments": {"path": "c.txt", "content": "planned\n"}},
        {"type": "tool_call", "name": "edit", "arguments": {"path": "d.txt", "edits": [{"old_text": "original", "new_text": "edited"}]}},
        {"type": "tool_call", "name": "write", "arguments": {"path": "e.txt", "content": "planned\n"}},
        {"type": "tool_call", "name": "write", "arguments": {"path": "new.txt", "content": "planned\n"}}
    ]);
    let session = crash_in_batch(dir.path(), Arc::clone(&store), calls);
    // The user's changes after the crash.
    std::fs::write(dir.path().join("a.txt"), "the user's fix\n").unwrap();
    std::fs::remove_file(dir.path().join("b.txt")).unwrap();
    std::fs::remove_file(dir.path().join("c.txt")).unwrap();
    std::fs::create_dir(dir.path().join("c.txt")).unwrap();
    std::fs::remove_file(dir.path().join("d.txt")).unwrap();
    std::os::unix::fs::symlink("a.txt", dir.path().join("new.txt")).unwrap();

    let after = resume_settled(dir.path(), &store, &session);
    assert_eq!(
        recovered(&after),
        vec![
            ("hang".into(), RecoveryAction::Interrupted),
            ("write".into(), RecoveryAction::Conflict),
            ("write".into(), RecoveryAction::Conflict),
            ("write".into(), RecoveryAction::Conflict),
            ("edit".into(), RecoveryAction::Conflict),
            // Untouched since: written now.
            ("write".into(), RecoveryAction::Rerun),
            ("write".into(), RecoveryAction::Conflict),
        ]
    );
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).ok();
    assert_eq!(read("a.txt").as_deref(), Some("the user's fix\n"));
    assert!(
        !dir.path().join("b.txt").exists(),
        "the deleted file stays deleted"
    );
    assert!(dir.path().join("c.txt").is_dir(), "the directory stays");
    assert!(!dir.path().join("d.txt").exists());
    assert_eq!(read("e.txt").as_deref(), Some("planned\n"));
    assert!(
        std::fs::symlink_metadata(dir.path().join("new.txt"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the user's symlink stays"
    );
    let codes: Vec<Option<ToolErrorCode>> = results(&after).into_iter().map(|r| r.2).collect();
    assert_eq!(codes[1], Some(ToolErrorCode::EffectConflict));
    // The model and the recovery entries say what happened to each file.
    let reasons: Vec<String> = after
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::EffectRecovered { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert!(reasons[1].contains("a.txt was changed"), "{}", reasons[1]);
    assert!(reasons[2].contains("b.txt was deleted"), "{}", reasons[2]);
    assert!(
        reasons[3].contains("c.txt was replaced by a directory"),
        "{}",
        reasons[3]
    );
    assert!(reasons[4].contains("d.txt was deleted"), "{}", reasons[4]);
    assert!(
        reasons[6].contains("new.txt was replaced by a symbolic link"),
        "{}",
        reasons[6]
    );
    let (_, text, _) = result_of(&after, "edit");
    assert!(text.contains("d.txt was deleted"), "{text}");
}

#[test]
fn a_session_written_before_the_new_journal_fields_still_resumes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "mine\n").unwrap();
    let store = Arc::new(MemoryStore::new());
    // Entries as an older Keel wrote them: no `wire_id` on calls, no
    // `before_kind` in the evidence, no `workspace_moved` on `run_start`.
    let payloads: Vec<EntryPayload> = [
        json!({"kind": "run_start", "run_id": "r1", "mode": "auto"}),
        json!({"kind": "message", "message": {"role": "user", "content": [{"type": "text", "text": "go"}]}}),
        json!({"kind": "message", "message": {"role": "assistant", "stop_reason": "tool_use", "content": [
            {"type": "tool_call", "id": "w1", "name": "write", "arguments": {"path": "a.txt", "content": "planned\n"}},
            {"type": "tool_call", "id": "w2", "name": "write", "arguments": {"path": "b.txt", "content": "planned\n"}}
        ]}}),
        json!({"kind": "effect_started", "effect": {"call_id": "w1", "tool_name": "write",
            "arguments_sha256": "x", "idempotency": "write_file",
            "evidence": [{"path": "a.txt", "before_sha256": null, "after_sha256": "00"}]}}),
        json!({"kind": "effect_started", "effect": {"call_id": "w2", "tool_name": "write",
            "arguments_sha256": "x", "idempotency": "write_file",
            "evidence": [{"path": "b.txt", "before_sha256": null, "after_sha256": "00"}]}}),
    ]
    .into_iter()
    .map(|value| serde_json::from_value(value).unwrap())
    .collect();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let session = runtime.block_on(async {
        let session = store
            .create(keel_session::NewSession::default())
            .await
            .unwrap();
        let mut parent: Option<String> = None;
        let entries = payloads
            .into_iter()
            .enumerate()
            .map(|(index, payload)| {
                let id = format!("old{index}");
                Entry::new(id.clone(), parent.replace(id), 0, payload)
            })
            .collect();
        store.append(&session, entries).await.unwrap();
        session
    });
    let after = resume_settled(dir.path(), &store, &session);
    assert_eq!(
        recovered(&after),
        vec![
            // An old record's "no hash before" is "absent": a.txt exists now.
            ("write".into(), RecoveryAction::Conflict),
            ("write".into(), RecoveryAction::Rerun),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
        "planned\n"
    );
}

/// Resumes `session` in `auto` and waits for the run to settle: the
/// session's entries and the run's `warning` events (code, message).
fn resume_warned(
    dir: &std::path::Path,
    store: &Arc<MemoryStore>,
    session: &str,
) -> (Vec<Entry>, Vec<(String, String)>) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let kernel = kernel(
            dir,
            Arc::clone(store),
            json!({"turns": [{"content": [{"type": "text", "text": "done"}]}]}),
        );
        let run = kernel.resume(session, PermissionMode::Auto).await.unwrap();
        let mut events = run.events().unwrap();
        let mut warnings = Vec::new();
        while let Some(event) = events.next().await {
            if let RunEventKind::Warning { code, message } = event.kind {
                warnings.push((code, message));
            }
        }
        assert_eq!(run.result().await.state, RunState::Settled);
        (store.entries(session).await.unwrap(), warnings)
    })
}

/// The `effect_recovered` reason of the (first) `tool` call.
fn recovery_reason(entries: &[Entry], tool: &str) -> String {
    entries
        .iter()
        .find_map(|entry| match &entry.payload {
            EntryPayload::EffectRecovered {
                tool_name, reason, ..
            } if tool_name == tool => Some(reason.clone()),
            _ => None,
        })
        .unwrap()
}

/// The one receipt file of the journal `dir` with this suffix.
fn receipt_file(dir: &std::path::Path, suffix: &str) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == suffix))
        .unwrap_or_else(|| panic!("no .{suffix} receipt in {}", dir.display()))
}

#[test]
fn each_journal_damage_is_an_interruption_that_names_its_cause() {
    use std::os::unix::fs::PermissionsExt;
    type Damage = fn(&std::path::Path, &std::path::Path);
    let damages: Vec<(&str, Damage, &str)> = vec![
        (
            "torn .exit",
            |journal, _| {
                std::fs::write(receipt_file(journal, "exit"), b"{\"ending\":\"exi").unwrap();
            },
            "the .exit receipt is torn or garbage",
        ),
        (
            "garbage .exit",
            |journal, _| std::fs::write(receipt_file(journal, "exit"), b"\0\xffjunk").unwrap(),
            "the .exit receipt is torn or garbage",
        ),
        (
            "missing .out of a command that printed",
            |journal, _| std::fs::remove_file(receipt_file(journal, "out")).unwrap(),
            "output lost",
        ),
        (
            ".exit is a FIFO",
            |journal, _| {
                let exit = receipt_file(journal, "exit");
                std::fs::remove_file(&exit).unwrap();
                nix::unistd::mkfifo(&exit, nix::sys::stat::Mode::S_IRWXU).unwrap();
            },
            "the .exit receipt is a FIFO",
        ),
        (
            ".out is a link to a secret",
            |journal, base| {
                let out = receipt_file(journal, "out");
                std::fs::remove_file(&out).unwrap();
                std::fs::write(base.join("id_rsa"), "PRIVATE-KEY-MATERIAL").unwrap();
                std::os::unix::fs::symlink(base.join("id_rsa"), &out).unwrap();
            },
            "the .out receipt is a symbolic link",
        ),
        (
            "journal deleted",
            |journal, _| std::fs::remove_dir_all(journal).unwrap(),
            "is missing",
        ),
        (
            "journal is a file",
            |journal, _| {
                std::fs::remove_dir_all(journal).unwrap();
                std::fs::write(journal, b"").unwrap();
            },
            "is not a directory",
        ),
        (
            "journal is a dangling link",
            |journal, base| {
                std::fs::remove_dir_all(journal).unwrap();
                std::os::unix::fs::symlink(base.join("nowhere"), journal).unwrap();
            },
            "is a symbolic link",
        ),
        (
            "journal is world-writable",
            |journal, _| {
                std::fs::set_permissions(journal, std::fs::Permissions::from_mode(0o777)).unwrap();
            },
            "other users may write it",
        ),
    ];
    let mut damages = damages;
    // Root reads any directory: an unreadable one is testable only as a user.
    if !nix::unistd::geteuid().is_root() {
        damages.push((
            "journal unreadable",
            |journal, _| {
                std::fs::set_permissions(journal, std::fs::Permissions::from_mode(0o000)).unwrap();
            },
            "cannot be read",
        ));
    }
    for (name, damage, cause) in damages {
        let dir = tempfile::tempdir().unwrap();
        let base = tempfile::tempdir().unwrap();
        let store = Arc::new(MemoryStore::with_journal_root(base.path()));
        let calls = json!([
            {"type": "tool_call", "name": "bash", "arguments": {"command": "echo printed"}},
            {"type": "tool_call", "name": "hang", "arguments": {}}
        ]);
        let session = crash_in_batch(dir.path(), Arc::clone(&store), calls);
        let journal = base.path().join(&session);
        damage(&journal, base.path());

        let (after, warnings) = resume_warned(dir.path(), &store, &session);
        assert_eq!(
            recovered(&after)[0],
            ("bash".into(), RecoveryAction::Interrupted),
            "{name}"
        );
        let reason = recovery_reason(&after, "bash");
        assert!(reason.contains(cause), "{name}: {reason}");
        assert!(
            warnings
                .iter()
                .any(|(code, message)| code == "journal_damaged" && message.contains(cause)),
            "{name}: {warnings:?}"
        );
        let (status, text, _) = result_of(&after, "bash");
        assert_eq!(status, ToolStatus::Error, "{name}");
        assert!(!text.contains("(no output)"), "{name}: {text}");
        assert!(!text.contains("PRIVATE-KEY-MATERIAL"), "{name}: {text}");
        assert_eq!(
            results(&after)[0].2,
            Some(ToolErrorCode::Interrupted),
            "{name}"
        );
        // Let the temporary directories be removed.
        let _ = std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o700));
    }
}

#[test]
fn a_reused_call_id_never_takes_the_receipt_of_an_earlier_call() {
    let dir = tempfile::tempdir().unwrap();
    let journal = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::with_journal_root(journal.path()));
    // The first `call_0` ends before the crash: its `.exit` is in the journal.
    let calls = json!([
        {"type": "tool_call", "id": "call_0", "name": "bash", "arguments": {"command": "echo first"}},
        {"type": "tool_call", "id": "call_1", "name": "hang", "arguments": {}}
    ]);
    let session = crash_in_batch(dir.path(), Arc::clone(&store), calls);
    // A run of the same session reuses `call_0` for a command the next
    // crash cuts short; the first call's receipts are still there.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let kernel = kernel(
            dir.path(),
            Arc::clone(&store),
            json!({"turns": [{"content": [
                {"type": "tool_call", "id": "call_0", "name": "bash",
                 "arguments": {"command": "echo second >> log.txt; echo second-started; sleep 30"}}
            ]}]}),
        );
        let run = kernel.resume(&session, PermissionMode::Auto).await.unwrap();
        let mut events = run.events().unwrap();
        while let Some(event) = events.next().await {
            if matches!(&event.kind, RunEventKind::ToolExecutionUpdate { progress, .. }
                if progress.data.contains("second-started"))
            {
                break;
            }
        }
        std::mem::forget(run);
    });
    runtime.shutdown_timeout(Duration::from_millis(100));

    let after = resume_settled(dir.path(), &store, &session);
    let last = recovered(&after).last().cloned().unwrap();
    assert_eq!(last, ("bash".into(), RecoveryAction::Interrupted));
    let (status, text, _) = result_of(&after, "bash");
    assert_eq!(status, ToolStatus::Error, "{text}");
    assert!(text.contains("second-started"), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("log.txt")).unwrap(),
        "second\n",
        "the cut-short command was not run again"
    );
}

#[test]
fn an_untrusted_journal_directory_is_reported_when_a_command_is_journaled() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let journal = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::with_journal_root(journal.path()));
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "echo hi"}}]},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let kernel = kernel(dir.path(), Arc::clone(&store), script);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (warnings, status) = runtime.block_on(async {
        let session = store
            .create(keel_session::NewSession::default())
            .await
            .unwrap();
        // The session's journal directory exists, and others may write it.
        let untrusted = journal.path().join(&session);
        std::fs::create_dir(&untrusted).unwrap();
        std::fs::set_permissions(&untrusted, std::fs::Permissions::from_mode(0o777)).unwrap();
        let run = kernel
            .create_run(RunSpec::new("go").session(&session))
            .await
            .unwrap();
        let mut events = run.events().unwrap();
        let mut warnings = Vec::new();
        while let Some(event) = events.next().await {
            if let RunEventKind::Warning { code, message } = event.kind {
                warnings.push((code, message));
            }
        }
        assert_eq!(run.result().await.state, RunState::Settled);
        let entries = store.entries(&session).await.unwrap();
        (warnings, result_of(&entries, "bash").0)
    });
    assert!(
        warnings
            .iter()
            .any(|(code, message)| code == "journal_untrusted"
                && message.contains("other users may write it")),
        "{warnings:?}"
    );
    assert_eq!(status, ToolStatus::Success, "the command still runs");
    let left: Vec<_> = std::fs::read_dir(journal.path())
        .unwrap()
        .flatten()
        .flat_map(|entry| std::fs::read_dir(entry.path()).unwrap().flatten())
        .collect();
    assert!(left.is_empty(), "no receipt was written into it: {left:?}");
}
