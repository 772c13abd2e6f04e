//! Embedding Keel: a host that builds a kernel, starts a run, watches its
//! events, answers permission requests and prints the result.
//!
//! Run with `cargo run -p keel-kernel --example embed`.

use std::sync::Arc;

use keel_kernel::{AgentKernel, RunSpec};
use keel_protocol::{PermissionResolution, RunEventKind};
use keel_provider::{Script, ScriptedProvider};
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, default_tools};

const SCRIPT: &str = r#"{"turns":[
  {"content":[{"type":"tool_call","name":"write","arguments":{"path":"hello.txt","content":"hello\n"}}]},
  {"content":[{"type":"tool_call","name":"bash","arguments":{"command":"cat hello.txt"}}]},
  {"expect":{"tool_result_contains":"hello"},"content":[{"type":"text","text":"Wrote and checked hello.txt."}]}]}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let project = tempfile::tempdir()?;
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(Script::from_json(SCRIPT)?)))
        .workspace(Workspace::new(project.path())?)
        .tools(default_tools(BashOptions::default()))
        .build()?;
    let run = kernel
        .create_run(RunSpec {
            prompt: "Create hello.txt and check it".into(),
            ..RunSpec::default()
        })
        .await?;
    let mut events = run.events()?;
    while let Some(event) = events.next().await {
        match &event.kind {
            RunEventKind::PermissionRequested {
                request_id,
                tool_name,
                ..
            } => {
                println!("host approves {tool_name}");
                run.resolve_permission(request_id, PermissionResolution::Approved)?;
            }
            RunEventKind::ToolExecutionEnd { result } => {
                println!(
                    "{} -> {:?}: {}",
                    result.tool_name,
                    result.status,
                    result.text()
                );
            }
            _ => {}
        }
    }
    let result = run.result().await;
    println!(
        "{:?}: {}",
        result.state,
        result.message.map(|m| m.text()).unwrap_or_default()
    );
    Ok(())
}
