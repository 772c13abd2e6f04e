//! Drives one run as its host: prints events, answers what the run asks.

use keel_kernel::{AgentRun, ControlError};
use keel_protocol::{RunEvent, RunResult, SessionLine};
use keel_tools::changes::WorkspaceChanges;

use crate::output::Output;
use crate::startup::StartupError;

/// Consumes the run's events, printing each and passing it to `react`
/// (ticking the view while a call runs), and returns the result and the
/// workspace's changes; the caller prints them with [`finish`].
pub async fn drive<F>(
    run: &AgentRun,
    output: &Output,
    mut react: F,
) -> Result<(RunResult, Option<WorkspaceChanges>), ControlError>
where
    F: AsyncFnMut(&RunEvent, &AgentRun),
{
    let mut events = run.events()?;
    let mut ticks = tokio::time::interval(crate::view::TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = ticks.tick(), if output.wants_ticks() => {
                output.tick();
                continue;
            }
        };
        let Some(event) = event else { break };
        output.event(&event);
        react(&event, run).await;
    }
    Ok(end(run).await)
}

/// After the run's last event: its result and the workspace's changes.
pub async fn end(run: &AgentRun) -> (RunResult, Option<WorkspaceChanges>) {
    let result = run.result().await;
    let changes = match run.workspace_changes().await {
        Ok(changes) => Some(changes),
        Err(error) => {
            tracing::warn!(%error, "no workspace changes to report");
            None
        }
    };
    (result, changes)
}

/// Drives `run` with `react` and prints its end (without a session line).
pub async fn drive_and_finish<F>(
    run: &AgentRun,
    output: &Output,
    react: F,
) -> Result<RunResult, StartupError>
where
    F: AsyncFnMut(&RunEvent, &AgentRun),
{
    let (result, changes) = drive(run, output, react)
        .await
        .map_err(|error| StartupError::new("host", error.to_string()))?;
    finish(output, &result, changes.as_ref(), None)?;
    Ok(result)
}

/// Prints the run's result, its workspace changes and its session.
pub fn finish(
    output: &Output,
    result: &RunResult,
    changes: Option<&WorkspaceChanges>,
    session: Option<SessionLine>,
) -> Result<(), StartupError> {
    output.finish(result, changes, session)
}

/// Exit code 0 only for a settled run.
pub fn exit_code(result: &RunResult) -> std::process::ExitCode {
    if result.state == keel_protocol::RunState::Settled {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}
