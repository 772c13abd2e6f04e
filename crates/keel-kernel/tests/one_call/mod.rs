//! One tool call through `AgentKernel`: a scripted run that makes the call
//! with the default tools, answers a permission request with the host's
//! answer, and reports what was asked and how the call ended. Shared by the
//! tests that judge a single call's permission and effect.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use keel_kernel::{AgentKernel, RunSpec};
use keel_protocol::{
    IntentScope, PermissionMode, PermissionResolution, RunEventKind, ToolResultMessage,
};
use keel_provider::{Script, ScriptedProvider};
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, default_tools};
use serde_json::{Value, json};

/// What happened to the run's one call.
pub struct Called {
    /// The scope and reason of the permission request, if the host was asked.
    pub asked: Option<(IntentScope, String)>,
    /// The call's result.
    pub result: ToolResultMessage,
}

/// Runs `tool` with `arguments` in `dir` under `mode`, answering any
/// permission request with `answer`.
pub async fn one_call(
    dir: &Path,
    mode: PermissionMode,
    tool: &str,
    arguments: Value,
    answer: PermissionResolution,
) -> Called {
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": tool, "arguments": arguments}]},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let mut builder = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(&script.to_string()).unwrap(),
        )))
        .workspace(Workspace::new(dir).unwrap());
    for tool in default_tools(BashOptions::default()) {
        builder = builder.tool(tool);
    }
    let kernel = builder.build().unwrap();
    let run = kernel
        .create_run(RunSpec::new("go").mode(mode))
        .await
        .unwrap();
    let mut events = run.events().unwrap();
    let (mut asked, mut result) = (None, None);
    while let Some(event) = events.next().await {
        match event.kind {
            RunEventKind::PermissionRequested {
                request_id,
                intent,
                reason,
                ..
            } => {
                asked = Some((intent.scope, reason));
                run.resolve_permission(&request_id, answer).unwrap();
            }
            RunEventKind::ToolExecutionEnd { result: end } => result = Some(end),
            _ => {}
        }
    }
    Called {
        asked,
        result: result.unwrap(),
    }
}
