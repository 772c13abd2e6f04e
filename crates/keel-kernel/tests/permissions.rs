//! The permission matrix (docs/security.md) through `AgentKernel`: every (mode × intent) cell of the matrix,
//! the sandbox level an allowed call runs at, host decisions bound to the
//! exact call, recorded decisions, and runs that must never come back in
//! `full` unless the host says so again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use keel_kernel::{AgentKernel, AgentRun, RunSpec};
use keel_protocol::{
    DecisionSource, EntryPayload, ExecutionMode, IntentKind, IntentScope, OperationIntent,
    PermissionMode, PermissionResolution, RunEventKind, ToolStatus,
};
use keel_provider::{Script, ScriptedProvider};
use keel_session::{MemoryStore, SessionStore};
use keel_tools::builtin::{BashOptions, default_tools};
use keel_tools::{ShellExecution, Tool, ToolContext, ToolFuture, ToolOutput, Workspace};
use serde_json::{Value, json};

/// A tool whose intent is whatever its arguments say; it reports the
/// sandbox level it was given (`+metadata` when `.git`/`.keel` are writable).
struct Probe;

impl Tool for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn description(&self) -> &str {
        "Claims the intent it is told to."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"kind": {"type": "string"}, "scope": {"type": "string"}}, "required": ["kind", "scope"]})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn intent(&self, arguments: &Value, _workspace: &Workspace) -> OperationIntent {
        serde_json::from_value(arguments.clone()).unwrap()
    }
    fn execute(&self, _arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(async move {
            let sandbox = &context.extension::<ShellExecution>().unwrap().sandbox;
            let metadata = match sandbox.metadata_writable {
                true => "+metadata",
                false => "",
            };
            let level = sandbox.level.as_str();
            Ok(ToolOutput::text(format!("{level}{metadata}")))
        })
    }
}

/// What happened to one call: `allow:<level>`, `deny` or `ask`.
/// A run in `mode` whose model calls `probe` once with this intent.
async fn probe_run(
    dir: &std::path::Path,
    mode: PermissionMode,
    kind: IntentKind,
    scope: IntentScope,
) -> AgentRun {
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": "probe", "arguments": {"kind": kind, "scope": scope}}]},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(&script.to_string()).unwrap(),
        )))
        .workspace(Workspace::new(dir).unwrap())
        .tool(Arc::new(Probe))
        .build()
        .unwrap();
    kernel
        .create_run(RunSpec::new("go").mode(mode))
        .await
        .unwrap()
}

async fn outcome(mode: PermissionMode, kind: IntentKind, scope: IntentScope) -> String {
    let dir = tempfile::tempdir().unwrap();
    let run = probe_run(dir.path(), mode, kind, scope).await;
    let mut events = run.events().unwrap();
    let mut asked = false;
    let mut result = None;
    while let Some(event) = events.next().await {
        match event.kind {
            RunEventKind::PermissionRequested { request_id, .. } => {
                asked = true;
                run.resolve_permission(&request_id, PermissionResolution::Denied)
                    .unwrap();
            }
            RunEventKind::ToolExecutionEnd { result: r } => result = Some(r),
            _ => {}
        }
    }
    let result = result.unwrap();
    match (asked, result.status) {
        (true, _) => "ask".into(),
        (false, ToolStatus::Success) => format!("allow:{}", text(&result.content)),
        (false, _) => "deny".into(),
    }
}

fn text(content: &[keel_protocol::UserContent]) -> String {
    content
        .iter()
        .map(|block| match block {
            keel_protocol::UserContent::Text { text } => text.clone(),
            keel_protocol::UserContent::Image(_) => String::new(),
        })
        .collect()
}

#[tokio::test]
async fn every_cell_of_the_matrix() {
    use IntentKind::{Custom, Network, Read, Shell, Unknown, Write};
    use IntentScope::{Metadata, Outside, Workspace as Inside};
    let rw = "allow:workspace_write";
    let full = "allow:unsandboxed";
    let full_m = "allow:unsandboxed+metadata";
    // Rows of the matrix in docs/security.md; columns plan, ask, auto, full.
    let rows: &[((IntentKind, IntentScope), [&str; 4])] = &[
        ((Read, Inside), ["allow:read_only", rw, rw, full]),
        ((Write, Inside), ["deny", "ask", rw, full]),
        ((Shell, Inside), ["allow:read_only", "ask", rw, full]),
        ((Read, Outside), ["deny", "ask", "ask", full]),
        ((Write, Outside), ["deny", "ask", "ask", full]),
        ((Shell, Outside), ["deny", "ask", "ask", full]),
        ((Shell, IntentScope::Unknown), ["deny", "ask", "ask", full]),
        ((Network, Inside), ["deny", "ask", "ask", full]),
        ((Network, Outside), ["deny", "ask", "ask", full]),
        // Writing `.git` or `.keel`: kept from writes like the outside.
        ((Write, Metadata), ["deny", "ask", "ask", full_m]),
        ((Shell, Metadata), ["deny", "ask", "ask", full_m]),
        ((Network, Metadata), ["deny", "ask", "ask", full_m]),
        ((Custom, IntentScope::Unknown), ["deny", "ask", "ask", full]),
        (
            (Unknown, IntentScope::Unknown),
            ["deny", "ask", "ask", full],
        ),
    ];
    let modes = [
        PermissionMode::Plan,
        PermissionMode::Ask,
        PermissionMode::Auto,
        PermissionMode::Full,
    ];
    let mut cells = 0;
    for ((kind, scope), expected) in rows {
        for (mode, want) in modes.iter().zip(expected) {
            let got = outcome(*mode, *kind, *scope).await;
            assert_eq!(&got, want, "{mode:?} × {kind:?}@{scope:?}");
            cells += 1;
        }
    }
    assert_eq!(cells, 56);
}

/// A host approval runs the call at the least level its intent needs.
#[tokio::test]
async fn approved_calls_run_at_the_level_their_intent_needs() {
    for (kind, scope, level) in [
        (IntentKind::Shell, IntentScope::Workspace, "workspace_write"),
        (
            IntentKind::Network,
            IntentScope::Workspace,
            "workspace_write_network",
        ),
        (IntentKind::Shell, IntentScope::Outside, "unsandboxed"),
        // Approving a command whose reach is unknown keeps the sandbox.
        (IntentKind::Shell, IntentScope::Unknown, "workspace_write"),
        (IntentKind::Unknown, IntentScope::Unknown, "workspace_write"),
        (
            IntentKind::Network,
            IntentScope::Unknown,
            "workspace_write_network",
        ),
        // Approving a write of `.git`/`.keel` widens just that.
        (
            IntentKind::Shell,
            IntentScope::Metadata,
            "workspace_write+metadata",
        ),
        (
            IntentKind::Write,
            IntentScope::Metadata,
            "workspace_write+metadata",
        ),
        (
            IntentKind::Network,
            IntentScope::Metadata,
            "workspace_write_network+metadata",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let run = probe_run(dir.path(), PermissionMode::Ask, kind, scope).await;
        let mut events = run.events().unwrap();
        let mut ran = None;
        while let Some(event) = events.next().await {
            match event.kind {
                RunEventKind::PermissionRequested { request_id, .. } => {
                    assert!(
                        run.resolve_permission("perm-999-0000", PermissionResolution::Approved)
                            .is_err()
                    );
                    run.resolve_permission(&request_id, PermissionResolution::Approved)
                        .unwrap();
                    assert!(
                        run.resolve_permission(&request_id, PermissionResolution::Approved)
                            .is_err(),
                        "an id answers once"
                    );
                }
                RunEventKind::ToolExecutionEnd { result } => ran = Some(text(&result.content)),
                _ => {}
            }
        }
        assert_eq!(ran.as_deref(), Some(level), "{kind:?}@{scope:?}");
    }
}

/// Runs `bash` in the given session and mode; returns (run_started mode,
/// the decision's sandbox reason, the session id).
async fn bash_run(
    kernel: &AgentKernel,
    session_id: Option<String>,
    mode: Option<PermissionMode>,
) -> (PermissionMode, String) {
    let mut spec = RunSpec::new("go").session_opt(session_id);
    if let Some(mode) = mode {
        spec = spec.mode(mode);
    }
    let run = kernel.create_run(spec).await.unwrap();
    let mut events = run.events().unwrap();
    let mut started = None;
    let mut warned = false;
    while let Some(event) = events.next().await {
        match event.kind {
            RunEventKind::RunStarted { mode, .. } => started = Some(mode),
            RunEventKind::PermissionRequested { request_id, .. } => {
                run.resolve_permission(&request_id, PermissionResolution::Denied)
                    .unwrap();
            }
            RunEventKind::Warning { code, .. } => warned |= code == "unsandboxed",
            _ => {}
        }
    }
    let result = run.result().await;
    let mode = started.unwrap();
    assert_eq!(
        warned,
        mode == PermissionMode::Full,
        "full, and only full, warns"
    );
    (mode, result.session_id)
}

#[tokio::test]
async fn a_continued_session_never_comes_back_in_full_silently() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    let call = json!({"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "cat a.txt"}}]});
    let done = json!({"content": [{"type": "text", "text": "done"}]});
    let script = json!({"turns": [call, done, call, done, call, done]});
    let store = Arc::new(MemoryStore::new());
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(&script.to_string()).unwrap(),
        )))
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(store.clone())
        .tools(default_tools(BashOptions::default()))
        .build()
        .unwrap();
    let (first, session) = bash_run(&kernel, None, Some(PermissionMode::Full)).await;
    assert_eq!(first, PermissionMode::Full);
    let (second, _) = bash_run(&kernel, Some(session.clone()), None).await;
    assert_eq!(
        second,
        PermissionMode::Auto,
        "the session's earlier full is not inherited"
    );
    let (third, _) = bash_run(&kernel, Some(session.clone()), Some(PermissionMode::Full)).await;
    assert_eq!(
        third,
        PermissionMode::Full,
        "the host may grant full again, explicitly"
    );
    let decisions: Vec<_> = store
        .entries(&session)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|entry| match entry.payload {
            EntryPayload::PermissionDecision { decision } => Some(decision),
            _ => None,
        })
        .collect();
    let modes: Vec<_> = decisions.iter().map(|d| d.mode).collect();
    assert_eq!(
        modes,
        [
            PermissionMode::Full,
            PermissionMode::Auto,
            PermissionMode::Full
        ]
    );
    for decision in &decisions {
        assert_eq!(decision.source, DecisionSource::Policy);
        assert_eq!(decision.arguments_sha256.len(), 64);
        let stored = serde_json::to_string(decision).unwrap();
        assert!(
            !stored.contains("cat a.txt"),
            "decisions hold hashes, not arguments"
        );
    }
    assert!(
        decisions[1].reason.contains("workspace_write"),
        "{}",
        decisions[1].reason
    );
}
