//! `keel demo permissions --mode M`: what each permission mode lets through.
//!
//! The workspace is a subdirectory of the demo's temporary directory, with
//! `outside.txt` beside it, so outside access is real. Cases:
//! - `standard`: the model reads, writes, runs a shell command, tries the
//!   network and reads outside; the demo host approves what stays inside the
//!   workspace and denies the rest, so every row of the permission matrix shows.
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
use keel_protocol::{
    DecisionSource, EntryPayload, PermissionMode, PermissionResolution, RunEvent, RunEventKind,
    RunResult,
};
use keel_session::{MemoryStore, SessionStore};
use serde_json::json;

use crate::demo::{approve_inside, demo_kernel};
use crate::host;
use crate::output::Output;
use crate::startup::StartupError;

/// Runs case `case` in `mode`; `root` holds the fixture project.
pub async fn run(
    case: &str,
    mode: PermissionMode,
    root: &Path,
    output: &Output,
) -> Result<ExitCode, StartupError> {
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
        "standard" => one_run(&kernel, mode, Host::ApproveInside, output).await?,
        "cancel" => one_run(&kernel, mode, Host::CancelWhenAsked, output).await?,
        "host-disconnect" => disconnecting_run(&kernel, mode, output).await?,
        _ => {
            let first = one_run(&kernel, mode, Host::ApproveInside, output).await?;
            output.note(
                "resume",
                json!({"session_id": first.session_id, "mode_given": null}),
                || {
                    format!(
                        "── continuing session {} without giving a mode",
                        first.session_id
                    )
                },
            );
            one_run_spec(
                &kernel,
                RunSpec::new("Continue.").session(first.session_id.clone()),
                Host::ApproveInside,
                output,
            )
            .await?
        }
    };
    print_decisions(store.as_ref(), &result.session_id, output).await?;
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
    host_kind: Host,
    output: &Output,
) -> Result<RunResult, StartupError> {
    let spec = RunSpec::new("Show what this mode allows.")
        .mode(mode)
        .max_turns(10);
    one_run_spec(kernel, spec, host_kind, output).await
}

async fn one_run_spec(
    kernel: &AgentKernel,
    spec: RunSpec,
    host_kind: Host,
    output: &Output,
) -> Result<RunResult, StartupError> {
    let run = kernel.create_run(spec).await?;
    host::drive_and_finish(&run, output, async |event: &RunEvent, run: &AgentRun| {
        answer(host_kind, event, run);
    })
    .await
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
    output: &Output,
) -> Result<RunResult, StartupError> {
    let spec = RunSpec::new("Show what this mode allows.")
        .mode(mode)
        .max_turns(10);
    let run = kernel.create_run(spec).await?;
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
    output.note("host_disconnected", json!({}), || {
        "── the host stopped listening: nobody can answer the request".to_owned()
    });
    let result = run.result().await;
    host::finish(output, &result, None, None)?;
    Ok(result)
}

/// Prints the session's permission decisions: one JSON line each, or one
/// plain line each in the view.
async fn print_decisions(
    store: &dyn SessionStore,
    session_id: &str,
    output: &Output,
) -> Result<(), StartupError> {
    let entries = store.entries(session_id).await?;
    for entry in entries {
        if let EntryPayload::PermissionDecision { decision } = entry.payload {
            let human = || {
                format!(
                    "decision: {} {} by {} ({}; arguments sha256 {}…)",
                    decision.tool_name,
                    resolution_word(decision.resolution),
                    source_word(decision.source),
                    decision.reason,
                    decision.arguments_sha256.get(..12).unwrap_or_default()
                )
            };
            let fields = serde_json::to_value(&decision).unwrap_or_default();
            output.note("permission_decision", fields, human);
        }
    }
    Ok(())
}

fn resolution_word(resolution: PermissionResolution) -> &'static str {
    match resolution {
        PermissionResolution::Approved => "allowed",
        PermissionResolution::Denied => "denied",
    }
}

fn source_word(source: DecisionSource) -> &'static str {
    match source {
        DecisionSource::Policy => "the policy",
        DecisionSource::Host => "the host",
        DecisionSource::Kernel => "the kernel",
        DecisionSource::SessionRule => "a session rule",
        _ => "another source",
    }
}

fn workspace_error(error: std::io::Error) -> StartupError {
    StartupError::new("workspace", error.to_string())
}
