//! The run's queue seen and taken back by the host: `AgentRun::queued` and
//! `AgentRun::clear_queue`, driven through `AgentKernel` with the scripted
//! provider.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use keel_kernel::{AgentKernel, AgentRun, RunSpec};
use keel_protocol::{
    ExecutionMode, IntentKind, IntentScope, Message, OperationIntent, PermissionMode, QueueKind,
    QueuedMessage, RunEvent, RunEventKind, RunState, UserContent,
};
use keel_provider::{Script, ScriptedProvider};
use keel_session::MemoryStore;
use keel_tools::{Tool, ToolContext, ToolFuture, ToolOutput, Workspace};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A tool that waits until the test opens it, so the test can work on the
/// queue while a tool batch is in flight.
struct Gate(Arc<Notify>);

impl Tool for Gate {
    fn name(&self) -> &str {
        "gate"
    }
    fn description(&self) -> &str {
        "Waits until the test opens the gate."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn intent(&self, _: &Value, _: &Workspace) -> OperationIntent {
        OperationIntent::new(IntentKind::Read, IntentScope::Workspace)
    }
    fn execute(&self, _arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(async move {
            tokio::select! {
                () = self.0.notified() => Ok(ToolOutput::text("open".to_owned())),
                () = context.cancel.cancelled() => Err(keel_tools::ToolError::cancelled()),
            }
        })
    }
}

fn kernel(script: &str, dir: &std::path::Path, gate: Arc<Notify>) -> AgentKernel {
    AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(script).unwrap(),
        )))
        .workspace(Workspace::new(dir).unwrap())
        .store(Arc::new(MemoryStore::new()))
        .tools(vec![Arc::new(Gate(gate)) as Arc<dyn Tool>])
        .build()
        .unwrap()
}

fn user_texts(events: &[RunEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.kind {
            RunEventKind::MessageStart {
                message: Message::User(user),
            } => Some(
                user.content
                    .iter()
                    .filter_map(|content| match content {
                        UserContent::Text { text } => Some(text.clone()),
                        _ => None,
                    })
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect()
}

fn msg(kind: QueueKind, text: &str) -> QueuedMessage {
    QueuedMessage::new(kind, text)
}

/// Runs until the gate tool starts, lets `work` act on the queue, opens the
/// gate and collects the rest.
async fn with_gate_open(
    run: &AgentRun,
    gate: &Notify,
    work: impl FnOnce(&AgentRun),
) -> Vec<RunEvent> {
    let mut stream = run.events().unwrap();
    let mut events = Vec::new();
    let mut work = Some(work);
    while let Some(event) = stream.next().await {
        if matches!(event.kind, RunEventKind::ToolExecutionStart { .. })
            && let Some(work) = work.take()
        {
            work(run);
            gate.notify_one();
        }
        events.push(event);
    }
    assert!(work.is_none(), "the gate tool never started");
    events
}

const SCRIPT: &str = r#"{"turns":[
    {"content":[{"type":"tool_call","name":"gate","arguments":{}}]},
    {"content":[{"type":"text","text":"after the gate"}]},
    {"content":[{"type":"text","text":"after the follow-up"}]}]}"#;

#[tokio::test]
async fn the_queue_lists_in_delivery_order_and_clears_by_kind() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Notify::new());
    let kernel = kernel(SCRIPT, dir.path(), Arc::clone(&gate));
    let run = kernel
        .create_run(RunSpec::new("go").mode(PermissionMode::Auto))
        .await
        .unwrap();
    let events = with_gate_open(&run, &gate, |run| {
        assert_eq!(run.queued(), Vec::new(), "nothing queued yet");
        run.follow_up("f1").unwrap();
        run.steer("s1").unwrap();
        run.follow_up("f2").unwrap();
        run.steer("s2").unwrap();
        assert_eq!(
            run.queued(),
            [
                msg(QueueKind::Steer, "s1"),
                msg(QueueKind::Steer, "s2"),
                msg(QueueKind::FollowUp, "f1"),
                msg(QueueKind::FollowUp, "f2"),
            ],
            "steering is delivered before follow-ups"
        );
        assert_eq!(
            run.clear_queue(Some(QueueKind::FollowUp)),
            [
                msg(QueueKind::FollowUp, "f1"),
                msg(QueueKind::FollowUp, "f2")
            ]
        );
        assert_eq!(
            run.queued(),
            [msg(QueueKind::Steer, "s1"), msg(QueueKind::Steer, "s2")]
        );
        run.follow_up("f3").unwrap();
        assert_eq!(
            run.clear_queue(None),
            [
                msg(QueueKind::Steer, "s1"),
                msg(QueueKind::Steer, "s2"),
                msg(QueueKind::FollowUp, "f3"),
            ]
        );
        assert_eq!(run.queued(), Vec::new());
        assert_eq!(run.clear_queue(Some(QueueKind::Steer)), Vec::new());
        run.follow_up("f4").unwrap();
    })
    .await;

    let result = run.result().await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
    assert_eq!(
        user_texts(&events),
        ["go", "f4"],
        "only the message left in the queue reaches the conversation"
    );
    let cleared: Vec<(Option<QueueKind>, usize, usize)> = events
        .iter()
        .filter_map(|event| match event.kind {
            RunEventKind::QueueCleared {
                queue,
                steer,
                follow_up,
            } => Some((queue, steer, follow_up)),
            _ => None,
        })
        .collect();
    assert_eq!(
        cleared,
        [
            (Some(QueueKind::FollowUp), 0, 2),
            (None, 2, 1),
            (Some(QueueKind::Steer), 0, 0)
        ],
        "every clear is on the stream with its counts"
    );
    assert!(
        !events
            .iter()
            .any(|event| matches!(event.kind, RunEventKind::MessageDropped { .. })),
        "cleared messages are not reported dropped"
    );
    assert_eq!(run.queued(), Vec::new(), "nothing is queued after the run");
}

#[tokio::test]
async fn a_cleared_steering_message_does_not_keep_the_run_going() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Notify::new());
    let script = r#"{"turns":[
        {"content":[{"type":"tool_call","name":"gate","arguments":{}}]},
        {"content":[{"type":"text","text":"after the gate"}]}]}"#;
    let kernel = kernel(script, dir.path(), Arc::clone(&gate));
    let run = kernel
        .create_run(RunSpec::new("go").mode(PermissionMode::Auto))
        .await
        .unwrap();
    let events = with_gate_open(&run, &gate, |run| {
        run.steer("never mind").unwrap();
        assert_eq!(
            run.clear_queue(Some(QueueKind::Steer)),
            [msg(QueueKind::Steer, "never mind")]
        );
    })
    .await;
    let result = run.result().await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
    assert_eq!(user_texts(&events), ["go"]);
    assert!(
        !events
            .iter()
            .any(|event| matches!(event.kind, RunEventKind::MessageInjected { .. })),
        "nothing was injected"
    );
}
