//! The stall watchdog (`RunSpec::stall_timeout`): a run that makes no
//! progress fails with `run_stalled` instead of hanging, and a permission
//! wait is never a stall. Driven through `AgentKernel` with the scripted
//! provider, on tokio's paused clock (time jumps whenever every task waits).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use keel_kernel::{AgentKernel, AgentRun, RunSpec};
use keel_protocol::{
    EntryPayload, ErrorSource, ExecutionMode, IntentKind, IntentScope, Message, OperationIntent,
    PermissionMode, PermissionResolution, RunEndState, RunError, RunErrorCode, RunEvent,
    RunEventKind, RunState, ToolStatus,
};
use keel_provider::{Script, ScriptedProvider};
use keel_session::{MemoryStore, SessionStore};
use keel_tools::{Tool, ToolContext, ToolFuture, ToolOutput, Workspace};
use serde_json::{Value, json};

/// How a test tool behaves.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Waits until cancelled.
    HangsUntilCancelled,
    /// Never ends, and ignores cancellation.
    IgnoresCancel,
    /// Ends at once (a write, so that `ask` mode asks first).
    Quick,
}

struct TestTool(&'static str, Behaviour);

impl Tool for TestTool {
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "A test tool."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn intent(&self, _: &Value, _: &Workspace) -> OperationIntent {
        let kind = match self.1 {
            Behaviour::Quick => IntentKind::Write,
            _ => IntentKind::Read,
        };
        OperationIntent::new(kind, IntentScope::Workspace)
    }
    fn execute(&self, _arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        let behaviour = self.1;
        Box::pin(async move {
            match behaviour {
                Behaviour::HangsUntilCancelled => {
                    context.cancel.cancelled().await;
                    Err(keel_tools::ToolError::cancelled())
                }
                Behaviour::IgnoresCancel => std::future::pending().await,
                Behaviour::Quick => Ok(ToolOutput::text("written".to_owned())),
            }
        })
    }
}

/// A run of `spec` on a kernel whose scripted provider plays `script`,
/// with the test tools, over a memory store, in a temporary workspace.
struct Started {
    run: AgentRun,
    store: Arc<MemoryStore>,
    _kernel: AgentKernel,
    _dir: tempfile::TempDir,
}

async fn start(script: Value, spec: RunSpec) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::new());
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(TestTool("hang", Behaviour::HangsUntilCancelled)),
        Arc::new(TestTool("deaf", Behaviour::IgnoresCancel)),
        Arc::new(TestTool("quick", Behaviour::Quick)),
    ];
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(&script.to_string()).unwrap(),
        )))
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(store.clone())
        .tools(tools)
        .build()
        .unwrap();
    let run = kernel.create_run(spec).await.unwrap();
    Started {
        run,
        store,
        _kernel: kernel,
        _dir: dir,
    }
}

/// The run's events; fails the test if the run has not ended after a day
/// of (paused) time, instead of hanging.
async fn collect(run: &AgentRun) -> Vec<RunEvent> {
    let mut stream = run.events().unwrap();
    let mut events = Vec::new();
    let all = async {
        while let Some(event) = stream.next().await {
            events.push(event);
        }
    };
    tokio::time::timeout(Duration::from_secs(24 * 3600), all)
        .await
        .expect("the run never ended: it hung instead of failing as stalled");
    events
}

fn stall() -> Duration {
    Duration::from_secs(30)
}

async fn run_end(store: &MemoryStore, session_id: &str) -> Option<RunEndState> {
    store
        .active_branch(session_id)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .find_map(|entry| match entry.payload {
            EntryPayload::RunEnd { state, .. } => Some(state),
            _ => None,
        })
}

/// Runs `started` to its end, which must be a failure as `run_stalled`:
/// the run's events and its error.
async fn stalled(started: &Started) -> (Vec<RunEvent>, RunError) {
    let events = collect(&started.run).await;
    let result = started.run.result().await;
    assert_eq!(result.state, RunState::Failed, "{result:?}");
    let error = result.error.unwrap();
    assert_eq!(error.code, RunErrorCode::RunStalled);
    (events, error)
}

/// A spec that stalls after [`stall`], in `mode`.
fn watched(mode: PermissionMode) -> RunSpec {
    RunSpec::new("go").mode(mode).stall_timeout(stall())
}

#[tokio::test(start_paused = true)]
async fn a_silent_provider_fails_the_run_as_stalled() {
    let script = json!({"turns": [
        {"delay_ms": 600_000, "content": [{"type": "text", "text": "too late"}]}]});
    let started = start(script, RunSpec::new("go").stall_timeout(stall())).await;
    let (events, error) = stalled(&started).await;
    assert_eq!(error.code.as_str(), "run_stalled");
    assert_eq!(error.source, ErrorSource::Provider);
    assert!(
        error.message.contains("provider `scripted`"),
        "the message names what the run waited on: {}",
        error.message
    );
    assert!(matches!(
        events.last().map(|event| &event.kind),
        Some(RunEventKind::RunFailed { error }) if error.code == RunErrorCode::RunStalled
    ));
    assert_eq!(
        run_end(&started.store, started.run.session_id()).await,
        Some(RunEndState::Failed),
        "the session records the run as failed, not cancelled"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hanging_tool_is_cancelled_and_recorded_and_the_run_fails_as_stalled() {
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": "hang", "arguments": {}}]},
        {"content": [{"type": "text", "text": "never asked"}]}]});
    let started = start(script, watched(PermissionMode::Auto)).await;
    let (events, error) = stalled(&started).await;
    assert_eq!(error.source, ErrorSource::Tool);
    assert!(
        error.message.contains("tool `hang`"),
        "the message names the tool: {}",
        error.message
    );
    assert!(events.iter().any(|event| matches!(
        &event.kind,
        RunEventKind::ToolExecutionEnd { result } if result.status == ToolStatus::Cancelled
    )));
    let session_id = started.run.session_id();
    let recorded: Vec<ToolStatus> = started
        .store
        .active_branch(session_id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|entry| match entry.payload {
            EntryPayload::Message {
                message: Message::ToolResult(result),
            } => Some(result.status),
            _ => None,
        })
        .collect();
    assert_eq!(
        recorded,
        [ToolStatus::Cancelled],
        "the cut-short call is in the session, as cancelled"
    );
    assert_eq!(
        run_end(&started.store, session_id).await,
        Some(RunEndState::Failed)
    );
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_ignores_cancellation_still_ends_the_run() {
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": "deaf", "arguments": {}}]}]});
    let started = start(script, watched(PermissionMode::Auto)).await;
    let (events, error) = stalled(&started).await;
    assert!(
        error.message.contains("tool `deaf`") && error.message.contains("did not stop"),
        "{}",
        error.message
    );
    assert_eq!(
        events
            .iter()
            .filter(|event| event.kind.is_terminal())
            .count(),
        1,
        "exactly one terminal event"
    );
}

#[tokio::test(start_paused = true)]
async fn a_permission_wait_of_hours_is_not_a_stall() {
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": "quick", "arguments": {}}]},
        {"content": [{"type": "text", "text": "all done"}]}]});
    let started = start(script, watched(PermissionMode::Ask)).await;
    let run = &started.run;
    let mut stream = run.events().unwrap();
    let mut asked = false;
    while let Some(event) = stream.next().await {
        if let RunEventKind::PermissionRequested { request_id, .. } = &event.kind {
            asked = true;
            // A human takes three hours to answer (on the paused clock).
            tokio::time::sleep(Duration::from_secs(3 * 3600)).await;
            run.resolve_permission(request_id, PermissionResolution::Approved)
                .unwrap();
        }
    }
    assert!(asked, "the write was asked about");
    let result = run.result().await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
}

#[tokio::test(start_paused = true)]
async fn without_a_stall_timeout_a_slow_provider_is_waited_for() {
    let script = json!({"turns": [
        {"delay_ms": 600_000, "content": [{"type": "text", "text": "slow but fine"}]}]});
    let started = start(script, RunSpec::new("go")).await;
    let result = started.run.result().await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
}
