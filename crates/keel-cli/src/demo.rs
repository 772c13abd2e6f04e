//! `keel demo`: deterministic scenarios that need no key and no network.
//!
//! Each scenario plays an embedded script against the real kernel, the real
//! tools and a real temporary workspace; only the model is scripted. The demo
//! host reacts to events the way a real host would (approving a shell
//! command, steering, queueing a follow-up, cancelling), so each case shows
//! one part of the run contract end to end.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use keel_host::{HostConfig, HostError, ProviderChoice};
use keel_kernel::{AgentKernel, AgentRun, RetryPolicy, RunSpec};
use keel_protocol::{
    IntentKind, IntentScope, OperationIntent, PermissionMode, PermissionResolution, ProviderEvent,
    RunEvent, RunEventKind,
};
use keel_provider::Script;
use keel_session::{MemoryStore, SessionStore};

use crate::args::{DemoArgs, DemoName};
use crate::host;
use crate::output::Output;
use crate::startup::StartupError;

/// The fixture project every demo works in.
const FIXTURE: &[(&str, &str)] = &[
    (
        "README.md",
        "# calc\n\nA tiny shell calculator. Run `bash check.sh` to test it.\n",
    ),
    (
        "calc.sh",
        "#!/usr/bin/env bash\n# Adds two integers.\nadd() {\n  echo $(( $1 - $2 ))\n}\n",
    ),
    (
        "check.sh",
        "#!/usr/bin/env bash\nsource ./calc.sh\nresult=$(add 2 3)\nif [ \"$result\" = \"5\" ]; then\n  echo \"check passed: add 2 3 = 5\"\nelse\n  echo \"check failed: add 2 3 = $result (expected 5)\"\n  exit 1\nfi\n",
    ),
];

/// One case of a scenario: its prompt, its script and what the host does.
struct Case {
    prompt: &'static str,
    script: &'static str,
    host: HostBehaviour,
}

#[derive(Clone, Copy)]
enum HostBehaviour {
    /// Approve what stays inside the workspace, deny the rest.
    Approve,
    /// Steer once, as soon as the model starts streaming.
    SteerWhileStreaming,
    /// Queue a follow-up as soon as the run starts.
    FollowUpAtStart,
    /// Approve the command, queue a follow-up, then cancel while it runs.
    CancelDuringTool,
}

fn case(name: DemoName, case: &str) -> Option<Case> {
    let found = match (name, case) {
        (DemoName::StreamedRun, "success") => (
            "Introduce yourself in two sentences.",
            include_str!("../demos/streamed-run-success.json"),
            HostBehaviour::Approve,
        ),
        (DemoName::StreamedRun, "provider-error") => (
            "Introduce yourself in two sentences.",
            include_str!("../demos/streamed-run-provider-error.json"),
            HostBehaviour::Approve,
        ),
        (DemoName::ToolLoop, "success") => (
            "The check in check.sh fails. Fix the bug.",
            include_str!("../demos/tool-loop-success.json"),
            HostBehaviour::Approve,
        ),
        (DemoName::ToolLoop, "mixed-batch") => (
            "Read the project, then write a plan to notes/plan.md.",
            include_str!("../demos/tool-loop-mixed-batch.json"),
            HostBehaviour::Approve,
        ),
        (DemoName::ToolLoop, "failure") => (
            "The check in check.sh fails. Fix the bug.",
            include_str!("../demos/tool-loop-failure.json"),
            HostBehaviour::Approve,
        ),
        (DemoName::RunControl, "steering") => (
            "Look around the project.",
            include_str!("../demos/run-control-steering.json"),
            HostBehaviour::SteerWhileStreaming,
        ),
        (DemoName::RunControl, "follow-up") => (
            "What is this project?",
            include_str!("../demos/run-control-follow-up.json"),
            HostBehaviour::FollowUpAtStart,
        ),
        (DemoName::RunControl, "cancel") => (
            "Wait for the build.",
            include_str!("../demos/run-control-cancel.json"),
            HostBehaviour::CancelDuringTool,
        ),
        (DemoName::RunControl, "retry-success") => (
            "Say something.",
            include_str!("../demos/run-control-retry-success.json"),
            HostBehaviour::Approve,
        ),
        (DemoName::RunControl, "retry-failure") => (
            "Say something.",
            include_str!("../demos/run-control-retry-failure.json"),
            HostBehaviour::Approve,
        ),
        _ => return None,
    };
    let (prompt, script, host) = found;
    Some(Case {
        prompt,
        script,
        host,
    })
}

fn cases(name: DemoName) -> &'static [&'static str] {
    match name {
        DemoName::StreamedRun => &["success", "provider-error"],
        DemoName::ToolLoop => &["success", "mixed-batch", "failure"],
        DemoName::RunControl => &[
            "steering",
            "follow-up",
            "cancel",
            "retry-success",
            "retry-failure",
        ],
        DemoName::SessionTree => &["success", "invalid-entry"],
        DemoName::Permissions => &["standard", "cancel", "host-disconnect", "resume"],
        DemoName::ContextCompaction => &["success", "overflow", "summary-error"],
        DemoName::CrashRecovery => &["killed-mid-batch"],
        DemoName::Extensions => &["success", "ordering", "invalid-outcome"],
    }
}

pub async fn run(args: DemoArgs) -> Result<ExitCode, StartupError> {
    let names = cases(args.name);
    let case_name = args.case.as_deref().unwrap_or(names[0]);
    if !names.contains(&case_name) {
        return Err(StartupError::new(
            "unknown_case",
            format!("unknown case `{case_name}`; cases: {}", names.join(", ")),
        ));
    }
    let directory = tempfile::Builder::new()
        .prefix("keel-demo-")
        .tempdir()
        .map_err(|error| StartupError::new("workspace", error.to_string()))?;
    for (path, content) in FIXTURE {
        std::fs::write(directory.path().join(path), content)
            .map_err(|error| StartupError::new("workspace", error.to_string()))?;
    }
    let output = Output::new(&args.output, false);
    match args.name {
        DemoName::SessionTree => {
            return crate::demo_session::run(case_name, directory.path(), &output).await;
        }
        DemoName::Permissions => {
            let mode = PermissionMode::from(args.mode);
            return crate::demo_permissions::run(case_name, mode, directory.path(), &output).await;
        }
        DemoName::ContextCompaction => {
            return crate::demo_compaction::run(case_name, directory.path(), &output).await;
        }
        DemoName::CrashRecovery => {
            return crate::demo_crash::run(case_name, directory.path(), &output).await;
        }
        DemoName::Extensions => {
            return crate::demo_extensions::run(case_name, directory.path(), &output).await;
        }
        _ => {}
    }
    let case = case(args.name, case_name)
        .ok_or_else(|| StartupError::new("unknown_case", format!("unknown case `{case_name}`")))?;
    let kernel = build_kernel(&case, directory.path())?;
    let spec = RunSpec::new(case.prompt)
        .mode(PermissionMode::Auto)
        .max_turns(20);
    let run = Arc::new(kernel.create_run(spec).await?);
    let mut reactor = Reactor {
        behaviour: case.host,
        steered: false,
    };
    let result = host::drive_and_finish(
        &run,
        &output,
        async |event: &RunEvent, handle: &AgentRun| {
            reactor.react(event, handle, &run);
        },
    )
    .await?;
    Ok(host::exit_code(&result))
}

fn build_kernel(case: &Case, root: &std::path::Path) -> Result<AgentKernel, StartupError> {
    let mut retry = RetryPolicy::default();
    retry.max_attempts = 4;
    retry.base_delay = Duration::from_millis(10);
    retry.max_delay = Duration::from_secs(1);
    // Demos are deterministic: their delays are exact.
    retry.jitter_percent = 0;
    demo_kernel(case.script, root, Arc::new(MemoryStore::new()), Some(retry))
}

/// A demo's kernel, assembled by keel-host: the scripted provider playing
/// `script`, the default tools in `root`, runs stored in `store`.
pub fn demo_kernel(
    script: &str,
    root: &std::path::Path,
    store: Arc<dyn SessionStore>,
    retry: Option<RetryPolicy>,
) -> Result<AgentKernel, StartupError> {
    let script = Script::from_json(script).map_err(HostError::from)?;
    let mut config = HostConfig::new(ProviderChoice::Script {
        script,
        model: None,
    })
    .workspace(root);
    config.retry = retry;
    Ok(config.kernel(store)?)
}

/// The fixture's task played by `script` in `workspace`, in `auto`, with
/// the host configuration `configure` adjusts; permission requests are
/// answered as [`approve_inside`] does. The exit code of its result.
pub(crate) async fn fix_the_bug(
    script: &str,
    workspace: &std::path::Path,
    output: &Output,
    configure: impl FnOnce(&mut HostConfig),
) -> Result<ExitCode, StartupError> {
    let script = Script::from_json(script).map_err(HostError::from)?;
    let mut config = HostConfig::new(ProviderChoice::Script {
        script,
        model: None,
    })
    .workspace(workspace);
    configure(&mut config);
    let kernel = config.kernel(Arc::new(MemoryStore::new()))?;
    let spec = RunSpec::new("The check in check.sh fails. Fix the bug.")
        .mode(PermissionMode::Auto)
        .max_turns(10);
    let run = kernel.create_run(spec).await?;
    let result =
        host::drive_and_finish(&run, output, async |event: &RunEvent, handle: &AgentRun| {
            if let RunEventKind::PermissionRequested {
                request_id, intent, ..
            } = &event.kind
            {
                // A stale id only means the run moved on.
                let _ = handle.resolve_permission(request_id, approve_inside(intent));
            }
        })
        .await?;
    Ok(host::exit_code(&result))
}

/// The demo hosts' answer to a permission request: approve what stays
/// inside the workspace without the network, deny the rest.
pub(crate) fn approve_inside(intent: &OperationIntent) -> PermissionResolution {
    if intent.scope == IntentScope::Workspace && intent.kind != IntentKind::Network {
        PermissionResolution::Approved
    } else {
        PermissionResolution::Denied
    }
}

/// The demo host's reactions to events.
struct Reactor {
    behaviour: HostBehaviour,
    steered: bool,
}

impl Reactor {
    fn react(&mut self, event: &RunEvent, handle: &AgentRun, shared: &Arc<AgentRun>) {
        match (&event.kind, self.behaviour) {
            (
                RunEventKind::PermissionRequested {
                    request_id, intent, ..
                },
                _,
            ) => {
                // A stale id only means the run moved on.
                let _ = handle.resolve_permission(request_id, approve_inside(intent));
            }
            (RunEventKind::RunStarted { .. }, HostBehaviour::FollowUpAtStart) => {
                let _ = handle.follow_up("Now say it in one line.");
            }
            (
                RunEventKind::MessageUpdate {
                    delta: ProviderEvent::TextDelta { .. },
                },
                HostBehaviour::SteerWhileStreaming,
            ) if !self.steered => {
                self.steered = true;
                let _ = handle.steer("Focus on the README, not the scripts.");
            }
            (RunEventKind::ToolExecutionStart { .. }, HostBehaviour::CancelDuringTool) => {
                let _ = handle.follow_up("Then run the check.");
                let run = Arc::clone(shared);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    run.cancel();
                });
            }
            _ => {}
        }
    }
}
