//! Embedding Keel: a host that assembles a kernel through keel-host, starts
//! a run, watches its events, answers permission requests and prints the
//! result.
//!
//! Run with `cargo run -p keel-host --example embed`.

use std::sync::Arc;

use keel_host::{HostConfig, ProviderChoice};
use keel_kernel::RunSpec;
use keel_protocol::{PermissionResolution, RunEventKind, RunState};
use keel_provider::Script;
use keel_session::MemoryStore;

const SCRIPT: &str = r#"{"turns":[
  {"content":[{"type":"tool_call","name":"write","arguments":{"path":"hello.txt","content":"hello\n"}}]},
  {"content":[{"type":"tool_call","name":"bash","arguments":{"command":"cat hello.txt"}}]},
  {"expect":{"tool_result_contains":"hello"},"content":[{"type":"text","text":"Wrote and checked hello.txt."}]}]}"#;

#[tokio::main]
/// Assembles a kernel through keel-host, runs one task to the end and checks its file.
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let project = tempfile::tempdir()?;
    let script = Script::from_json(SCRIPT)?;
    let kernel = HostConfig::new(ProviderChoice::Script {
        script,
        model: None,
    })
    .workspace(project.path())
    .kernel(Arc::new(MemoryStore::new()))?;
    let run = kernel
        .create_run(RunSpec::new("Create hello.txt and check it"))
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
    if result.state != RunState::Settled {
        return Err(format!("the run ended {:?}", result.state).into());
    }
    if std::fs::read_to_string(project.path().join("hello.txt"))? != "hello\n" {
        return Err("hello.txt does not hold what the run wrote".into());
    }
    Ok(())
}
