//! One writer per session, through `AgentKernel`: a run holds its session's
//! writer lease for its whole life, a second run (or resume, or compaction)
//! on that session is refused as `session_busy`, and the lease is released
//! before the result is published, so the next run can start at once and
//! no session stays open after its runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use keel_kernel::{AgentKernel, KernelError, RunSpec};
use keel_protocol::{PermissionMode, PermissionResolution, RunEventKind, RunState};
use keel_provider::{Script, ScriptedProvider};
use keel_session::{JsonlStore, MemoryStore, SessionStore};
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, default_tools};
use serde_json::json;

/// A kernel over `store` whose model first writes a file (which `ask` mode
/// must ask about), then answers with text for as many runs as needed.
fn kernel(workspace: &std::path::Path, store: Arc<dyn SessionStore>) -> AgentKernel {
    let mut turns = vec![
        json!({"content": [{"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "A\n"}}]}),
    ];
    turns.extend(
        (0..40).map(|n| json!({"content": [{"type": "text", "text": format!("answer {n}")}]})),
    );
    let script = json!({ "turns": turns });
    AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(&script.to_string()).unwrap(),
        )))
        .workspace(Workspace::new(workspace).unwrap())
        .tools(default_tools(BashOptions::default()))
        .store(store)
        .build()
        .unwrap()
}

fn stores(sessions: &std::path::Path) -> [Arc<dyn SessionStore>; 2] {
    [
        Arc::new(MemoryStore::new()),
        Arc::new(JsonlStore::new(sessions).unwrap()),
    ]
}

#[tokio::test]
async fn a_second_writer_on_a_live_runs_session_is_session_busy() {
    let sessions = tempfile::tempdir().unwrap();
    for store in stores(sessions.path()) {
        let workspace = tempfile::tempdir().unwrap();
        let kernel = kernel(workspace.path(), Arc::clone(&store));
        let first = kernel
            .create_run(RunSpec::new("write a.txt").mode(PermissionMode::Ask))
            .await
            .unwrap();
        let session = first.session_id().to_owned();
        let mut events = first.events().unwrap();
        // The run is parked on its permission request: alive, and writing.
        let request = loop {
            let event = events.next().await.expect("the run asks before it ends");
            if let RunEventKind::PermissionRequested { request_id, .. } = event.kind {
                break request_id;
            }
        };
        assert_eq!(store.open_sessions(), 1, "the live run holds its session");

        let second = kernel
            .create_run(RunSpec::new("me too").session(&session))
            .await;
        match second {
            Err(KernelError::SessionBusy(id)) => assert_eq!(id, session),
            Err(other) => panic!("a second run must be session_busy, got {other}"),
            Ok(_) => panic!("a second run on a live run's session started"),
        }
        let resumed = kernel.resume_with(RunSpec::new("").session(&session)).await;
        assert_eq!(
            resumed.err().map(|error| error.code()),
            Some("session_busy"),
            "a resume is a second writer too"
        );
        let compacted = kernel.compact(&session, None).await;
        assert_eq!(
            compacted.err().map(|error| error.code()),
            Some("session_busy"),
            "so is a compaction"
        );
        // Reads go on while the run writes, and take nothing.
        assert!(kernel.interrupted(&session).await.is_ok());
        kernel.preview_request(&session).await.unwrap();
        assert_eq!(store.open_sessions(), 1);

        first
            .resolve_permission(&request, PermissionResolution::Denied)
            .unwrap();
        while events.next().await.is_some() {}
        assert_eq!(first.result().await.state, RunState::Settled);

        let next = kernel
            .create_run(RunSpec::new("again").session(&session))
            .await
            .expect("once the first run's result is out, the session is free");
        assert_eq!(next.result().await.state, RunState::Settled);
        assert_eq!(store.open_sessions(), 0);
    }
}

#[tokio::test]
async fn runs_release_their_session_before_their_result_and_leave_none_open() {
    let sessions = tempfile::tempdir().unwrap();
    for store in stores(sessions.path()) {
        let workspace = tempfile::tempdir().unwrap();
        let kernel = kernel(workspace.path(), Arc::clone(&store));
        // The first turn's write call is answered (auto mode) and done.
        let opening = kernel
            .create_run(RunSpec::new("start").mode(PermissionMode::Auto))
            .await
            .unwrap();
        let session = opening.session_id().to_owned();
        assert_eq!(opening.result().await.state, RunState::Settled);
        for n in 0..12 {
            assert_eq!(
                store.open_sessions(),
                0,
                "run {n}: a finished run left its session open"
            );
            // Alternate: the same session right after its last result, and
            // a new session each time.
            let spec = match n % 2 {
                0 => RunSpec::new(format!("again {n}")).session(&session),
                _ => RunSpec::new(format!("new {n}")),
            };
            let run = kernel
                .create_run(spec)
                .await
                .unwrap_or_else(|error| panic!("run {n} was refused: {error}"));
            assert_eq!(run.result().await.state, RunState::Settled, "run {n}");
        }
        assert_eq!(store.open_sessions(), 0, "no session stays open");
        assert!(store.list().await.unwrap().len() >= 7);
    }
}
