//! Invariants of a run, driven through the public `AgentKernel` seam.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_kernel::{AgentKernel, AgentRun, ControlError, RunSpec};
use keel_protocol::{
    EntryPayload, ExecutionMode, Message, PermissionMode, PermissionResolution, RunEvent,
    RunEventKind, RunState, ToolErrorCode, ToolStatus,
};
use keel_provider::{Script, ScriptedProvider};
use keel_session::{MemoryStore, SessionStore};
use keel_tools::builtin::{BashOptions, default_tools};
use keel_tools::{Tool, ToolContext, ToolFuture, ToolOutput, Workspace};
use proptest::prelude::*;
use serde_json::{Value, json};

fn kernel(
    script: &str,
    dir: &std::path::Path,
    extra: Vec<Arc<dyn Tool>>,
) -> (AgentKernel, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(script).unwrap(),
        )))
        .workspace(Workspace::new(dir).unwrap())
        .store(store.clone())
        .tools(default_tools(BashOptions::default()))
        .tools(extra)
        .build()
        .unwrap();
    (kernel, store)
}

fn spec(prompt: &str, mode: PermissionMode) -> RunSpec {
    RunSpec::new(prompt).mode(mode)
}

async fn collect(run: &AgentRun) -> Vec<RunEvent> {
    let mut events = run.events().unwrap();
    let mut all = Vec::new();
    while let Some(event) = events.next().await {
        all.push(event);
    }
    all
}

fn assert_one_terminal_last(events: &[RunEvent]) {
    let terminal = events.iter().filter(|e| e.kind.is_terminal()).count();
    assert_eq!(terminal, 1, "exactly one terminal event");
    assert!(
        events.last().unwrap().kind.is_terminal(),
        "terminal event is last"
    );
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event.seq, index as u64, "gapless seq");
    }
}

/// A parallel tool that sleeps `ms` and echoes `tag`.
struct Sleepy;

impl Tool for Sleepy {
    fn name(&self) -> &str {
        "sleepy"
    }
    fn description(&self) -> &str {
        "Sleeps, then echoes its tag."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"ms": {"type": "integer"}, "tag": {"type": "string"}}, "required": ["ms", "tag"], "additionalProperties": false})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn intent(&self, _: &Value, _: &Workspace) -> keel_protocol::OperationIntent {
        keel_protocol::OperationIntent::new(
            keel_protocol::IntentKind::Read,
            keel_protocol::IntentScope::Workspace,
        )
    }
    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(async move {
            let ms = arguments["ms"].as_u64().unwrap_or(0);
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                () = context.cancel.cancelled() => return Err(keel_tools::ToolError::cancelled()),
            }
            Ok(ToolOutput::text(
                arguments["tag"].as_str().unwrap_or_default().to_owned(),
            ))
        })
    }
}

#[tokio::test]
async fn tool_results_return_in_call_order_whatever_the_completion_order() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"{"turns":[
        {"content":[
            {"type":"tool_call","name":"sleepy","arguments":{"ms":150,"tag":"first"}},
            {"type":"tool_call","name":"sleepy","arguments":{"ms":10,"tag":"second"}},
            {"type":"tool_call","name":"sleepy","arguments":{"ms":80,"tag":"third"}}]},
        {"expect":{"tool_results":3},"content":[{"type":"text","text":"done"}]}]}"#;
    let (kernel, store) = kernel(script, dir.path(), vec![Arc::new(Sleepy)]);
    let run = kernel
        .create_run(spec("go", PermissionMode::Auto))
        .await
        .unwrap();
    let events = collect(&run).await;
    assert_one_terminal_last(&events);
    let completion: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            RunEventKind::ToolExecutionEnd { result } => Some(result.text()),
            _ => None,
        })
        .collect();
    assert_eq!(
        completion,
        ["second", "third", "first"],
        "ends arrive in completion order"
    );
    let stored: Vec<String> = store
        .active_branch(run.session_id())
        .await
        .unwrap()
        .into_iter()
        .filter_map(|entry| match entry.payload {
            EntryPayload::Message {
                message: Message::ToolResult(result),
            } => Some(result.text()),
            _ => None,
        })
        .collect();
    assert_eq!(
        stored,
        ["first", "second", "third"],
        "results are stored in call order"
    );
    assert_eq!(run.result().await.state, RunState::Settled);
}

#[tokio::test]
async fn nothing_is_persisted_when_a_stream_fails_midway() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"{"turns":[{"content":[{"type":"text","text":"partial answer that never"},
        {"type":"tool_call","name":"write","arguments":{"path":"x","content":"y"}}],
        "error":{"kind":"invalid_request","message":"boom"}}]}"#;
    let (kernel, store) = kernel(script, dir.path(), vec![]);
    let run = kernel
        .create_run(spec("go", PermissionMode::Auto))
        .await
        .unwrap();
    let events = collect(&run).await;
    assert_one_terminal_last(&events);
    let result = run.result().await;
    assert_eq!(result.state, RunState::Failed);
    assert_eq!(result.error.unwrap().code, "invalid_request");
    let kinds: Vec<String> = store
        .entries(run.session_id())
        .await
        .unwrap()
        .iter()
        .map(|entry| match &entry.payload {
            EntryPayload::Message {
                message: Message::User(_),
            } => "user".to_owned(),
            EntryPayload::Message {
                message: Message::Assistant(_),
            } => "assistant".to_owned(),
            other => other.kind().to_owned(),
        })
        .collect();
    assert_eq!(
        kinds,
        ["configuration", "run_start", "user", "run_end"],
        "no partial assistant message is stored"
    );
    assert!(
        !dir.path().join("x").exists(),
        "the streamed tool call never ran"
    );
    assert!(!events.iter().any(|e| matches!(
        e.kind,
        RunEventKind::MessageEnd {
            message: Message::Assistant(_)
        }
    )));
}

#[tokio::test]
async fn a_second_event_consumer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (kernel, _) = kernel(
        r#"{"turns":[{"content":[{"type":"text","text":"hi"}]}]}"#,
        dir.path(),
        vec![],
    );
    let run = kernel
        .create_run(spec("go", PermissionMode::Auto))
        .await
        .unwrap();
    let _first = run.events().unwrap();
    assert_eq!(run.events().err(), Some(ControlError::EventStreamTaken));
    assert_eq!(run.result().await.state, RunState::Settled);
}

#[tokio::test]
async fn control_calls_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (kernel, _) = kernel(
        r#"{"turns":[{"content":[{"type":"text","text":"hi"}]}]}"#,
        dir.path(),
        vec![],
    );
    assert!(
        kernel
            .create_run(spec("  ", PermissionMode::Auto))
            .await
            .is_err(),
        "empty prompt refused"
    );
    let run = kernel
        .create_run(spec("go", PermissionMode::Auto))
        .await
        .unwrap();
    assert_eq!(run.steer(" "), Err(ControlError::EmptyMessage));
    assert!(matches!(
        run.resolve_permission("perm-9-nope", keel_protocol::PermissionResolution::Approved),
        Err(ControlError::UnknownPermissionRequest(_))
    ));
    collect(&run).await;
    assert_eq!(
        run.follow_up("more"),
        Err(ControlError::NotActive),
        "a settled run takes nothing"
    );
    run.cancel();
    run.cancel();
    assert_eq!(
        run.result().await.state,
        RunState::Settled,
        "cancel after the end changes nothing"
    );
}

#[tokio::test]
async fn bad_tool_input_becomes_typed_tool_results() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("blob.bin"), [0xff, 0xfe, 0x00, 0x80]).unwrap();
    std::fs::write(dir.path().join("twice.txt"), "a\na\n").unwrap();
    let script = r#"{"turns":[
        {"content":[
            {"type":"tool_call","name":"read","arguments":{"path":"blob.bin"}},
            {"type":"tool_call","name":"edit","arguments":{"path":"twice.txt","edits":[{"old_text":"a","new_text":"b"}]}},
            {"type":"tool_call","name":"edit","arguments":{"path":"twice.txt","edits":[{"old_text":"zzz","new_text":"b"}]}},
            {"type":"tool_call","name":"write","arguments":{"path":"/etc/keel-test","content":"x"}},
            {"type":"tool_call","name":"read","arguments":{"path":"twice.txt","offset":0}}]},
        {"expect":{"tool_results":5},"content":[{"type":"text","text":"ok"}]}]}"#;
    let (kernel, _) = kernel(script, dir.path(), vec![]);
    let run = kernel
        .create_run(spec("go", PermissionMode::Auto))
        .await
        .unwrap();
    // The host denies what the policy asks (the write outside the workspace).
    let mut stream = run.events().unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        if let RunEventKind::PermissionRequested { request_id, .. } = &event.kind {
            run.resolve_permission(request_id, PermissionResolution::Denied)
                .unwrap();
        }
        events.push(event);
    }
    let codes: Vec<Option<ToolErrorCode>> = events
        .iter()
        .filter_map(|e| match &e.kind {
            RunEventKind::ToolExecutionEnd { result } => {
                assert_eq!(result.status, ToolStatus::Error);
                Some(result.error.as_ref().map(|error| error.code))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        codes,
        [
            Some(ToolErrorCode::BinaryFile),
            Some(ToolErrorCode::EditAmbiguous),
            Some(ToolErrorCode::EditNotFound),
            Some(ToolErrorCode::PermissionDenied),
            Some(ToolErrorCode::InvalidArguments),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("twice.txt")).unwrap(),
        "a\na\n",
        "nothing changed"
    );
    assert!(!std::path::Path::new("/etc/keel-test").exists());
    assert_eq!(run.result().await.state, RunState::Settled);
}

/// Judged by effect: the command runs sandboxed in its own PID namespace,
/// so the PIDs it could report mean nothing outside; its background
/// processes (one in a new session) would each write a file if they lived.
#[tokio::test]
async fn cancelling_a_long_bash_kills_its_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"{"turns":[{"content":[{"type":"tool_call","name":"bash",
        "arguments":{"command":"(sleep 1.5; echo x > survivor1) & (setsid sh -c 'sleep 1.5; echo x > survivor2' &); echo go > started; sleep 100"}}]},
        {"content":[{"type":"text","text":"never"}]}]}"#;
    let (kernel, _) = kernel(script, dir.path(), vec![]);
    let run = kernel
        .create_run(spec("go", PermissionMode::Auto))
        .await
        .unwrap();
    let mut events = run.events().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dir.path().join("started").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.cancel();
    let mut all = Vec::new();
    while let Some(event) = events.next().await {
        all.push(event);
    }
    assert_one_terminal_last(&all);
    assert_eq!(run.result().await.state, RunState::Cancelled);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for survivor in ["survivor1", "survivor2"] {
        assert!(
            !dir.path().join(survivor).exists(),
            "{survivor}: a background process outlived the cancel"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn exactly_one_terminal_event_under_randomly_timed_cancels(delay_ms in 0u64..60, steer in any::<bool>()) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async move {
            let dir = tempfile::tempdir().unwrap();
            let script = r#"{"turns":[
                {"delay_ms":3,"content":[{"type":"text","text":"working on it"},
                    {"type":"tool_call","name":"bash","arguments":{"command":"sleep 0.02; echo hi"}}]},
                {"delay_ms":3,"content":[{"type":"text","text":"done now"}]},
                {"content":[{"type":"text","text":"after steering"}]}]}"#;
            let (kernel, _) = kernel(script, dir.path(), vec![]);
            let run = Arc::new(kernel.create_run(spec("go", PermissionMode::Full)).await.unwrap());
            let control = Arc::clone(&run);
            let canceller = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                if steer {
                    let _ = control.steer("also this");
                }
                control.cancel();
            });
            let events = collect(&run).await;
            canceller.await.unwrap();
            assert_one_terminal_last(&events);
            let result = run.result().await;
            let terminal = events.last().unwrap().type_name();
            let expected = match result.state {
                RunState::Settled => "run_settled",
                RunState::Cancelled => "run_cancelled",
                RunState::Failed => "run_failed",
                RunState::Active => "active",
            };
            assert_eq!(terminal, expected);
            assert_ne!(result.state, RunState::Failed, "{:?}", result.error);
        });
    }
}
