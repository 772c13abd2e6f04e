//! `keel demo permissions --mode M`: what each permission mode lets through.
//!
//! The workspace is a subdirectory of the demo's temporary directory, with
//! `outside.txt` beside it, so outside access is real. Cases:
//! - `standard`: the model reads, writes, runs a shell command, tries the
//!   network and reads outside; the demo host approves what stays inside the
//!   workspace and denies the rest, so every row of SPEC §7 shows.
//! - `cancel`: the host cancels the run while a permission request is
//!   pending; the kernel denies it and records that.
//! - `host-disconnect`: the host drops the event stream at the first
//!   request; nobody can answer, so the kernel denies it and the run ends
//!   without running the call.
//! - `resume`: a run in the chosen mode, then the same session continued
//!   with no mode given: it comes back in `auto`, never silently in `full`.
//!
//! After the runs it prints the session's permission decisions, which hold
//! hashes of the arguments, never the arguments.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use keel_kernel::{AgentKernel, AgentRun, RunSpec};
use keel_protocol::{EntryPayload, PermissionMode, RunEvent, RunEventKind, RunResult};
use keel_session::{MemoryStore, SessionStore};
use serde_json::json;

use crate::demo::{approve_inside, demo_kernel};
use crate::host;
use crate::output::{Output, say};
use crate::startup::StartupError;

/// Runs case `case` in `mode`; `root` holds the fixture project.
pub async fn run(case: &str, mode: PermissionMode, root: &Path) -> Result<ExitCode, StartupError> {
    let workspace = root.join("ws");
    std::fs::create_dir_all(&workspace).map_err(workspace_error)?;
    for name in ["README.md", "calc.sh", "check.sh"] {
        std::fs::rename(root.join(name), workspace.join(name)).map_err(workspace_error)?;
    }
    std::fs::write(root.join("outside.txt"), "a file beside the workspace\n")
        .map_err(workspace_error)?;
    let script = match case {
        "standard" => include_str!("../demos/permissions-standard.json"),
        "cancel" | "host-disconnect" => include_str!("../demos/permissions-pending.json"),
        _ => include_str!("../demos/permissions-resume.json"),
    };
    let store = Arc::new(MemoryStore::new());
    let kernel = demo_kernel(script, &workspace, store.clone(), None)?;
    let result = match case {
        "standard" => one_run(&kernel, mode, None, Host::ApproveInside).await?,
        "cancel" => one_run(&kernel, mode, None, Host::CancelWhenAsked).await?,
        "host-disconnect" => disconnecting_run(&kernel, mode).await?,
        _ => {
            let first = one_run(&kernel, mode, None, Host::ApproveInside).await?;
            say(json!({"resume": {"session_id": first.session_id, "mode_given": null}}));
            one_run_spec(
                &kernel,
                RunSpec::new("Continue.").session(first.session_id.clone()),
                Host::ApproveInside,
            )
            .await?
        }
    };
    print_decisions(store.as_ref(), &result.session_id).await?;
    Ok(host::exit_code(&result))
}

/// How the demo host answers permission requests.
#[derive(Clone, Copy)]
enum Host {
    /// Approve calls that stay inside the workspace without the network.
    ApproveInside,
    /// Cancel the run instead of answering.
    CancelWhenAsked,
}

async fn one_run(
    kernel: &AgentKernel,
    mode: PermissionMode,
    session_id: Option<String>,
    host_kind: Host,
) -> Result<RunResult, StartupError> {
    let spec = RunSpec::new("Show what this mode allows.")
        .session_opt(session_id)
        .mode(mode)
        .max_turns(10);
    one_run_spec(kernel, spec, host_kind).await
}

async fn one_run_spec(
    kernel: &AgentKernel,
    spec: RunSpec,
    host_kind: Host,
) -> Result<RunResult, StartupError> {
    let run = kernel
        .create_run(spec)
        .await
        .map_err(|error| StartupError::new(error.code(), error.to_string()))?;
    host::drive(
        &run,
        &Output::detect(),
        async |event: &RunEvent, run: &AgentRun| {
            answer(host_kind, event, run);
        },
    )
    .await
    .map_err(|error| StartupError::new("host", error.to_string()))
}

fn answer(host_kind: Host, event: &RunEvent, run: &AgentRun) {
    let RunEventKind::PermissionRequested {
        request_id, intent, ..
    } = &event.kind
    else {
        return;
    };
    match host_kind {
        Host::CancelWhenAsked => run.cancel(),
        Host::ApproveInside => {
            // A stale id only means the run moved on.
            let _ = run.resolve_permission(request_id, approve_inside(intent));
        }
    }
}

/// Prints events until the first permission request, then drops the stream.
async fn disconnecting_run(
    kernel: &AgentKernel,
    mode: PermissionMode,
) -> Result<RunResult, StartupError> {
    let spec = RunSpec::new("Show what this mode allows.")
        .mode(mode)
        .max_turns(10);
    let run = kernel
        .create_run(spec)
        .await
        .map_err(|error| StartupError::new(error.code(), error.to_string()))?;
    let output = Output::detect();
    let mut events = run
        .events()
        .map_err(|error| StartupError::new("host", error.to_string()))?;
    while let Some(event) = events.next().await {
        output.event(&event);
        if matches!(event.kind, RunEventKind::PermissionRequested { .. }) {
            break;
        }
    }
    drop(events);
    say(json!({"host": "disconnected"}));
    let result = run.result().await;
    output.result(&result);
    Ok(result)
}

/// Prints the session's permission decisions, one JSON line each.
async fn print_decisions(store: &dyn SessionStore, session_id: &str) -> Result<(), StartupError> {
    let entries = store
        .entries(session_id)
        .await
        .map_err(|error| StartupError::new(error.code(), error.to_string()))?;
    for entry in entries {
        if let EntryPayload::PermissionDecision { decision } = entry.payload {
            say(json!({ "permission_decision": decision }));
        }
    }
    Ok(())
}

fn workspace_error(error: std::io::Error) -> StartupError {
    StartupError::new("workspace", error.to_string())
}
