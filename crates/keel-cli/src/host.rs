//! Drives one run as its host: prints events, answers what the run asks.

use keel_kernel::{AgentRun, ControlError};
use keel_protocol::{RunEvent, RunResult};

use crate::output::Output;

/// Consumes the run's events, printing each and passing it to `react`, then
/// prints the result and the workspace's changes, and returns the result.
pub async fn drive<F>(
    run: &AgentRun,
    output: &Output,
    mut react: F,
) -> Result<RunResult, ControlError>
where
    F: AsyncFnMut(&RunEvent, &AgentRun),
{
    let mut events = run.events()?;
    while let Some(event) = events.next().await {
        output.event(&event);
        react(&event, run).await;
    }
    Ok(finish(run, output).await)
}

/// After the run's last event: prints the result and the workspace's
/// changes, and returns the result.
pub async fn finish(run: &AgentRun, output: &Output) -> RunResult {
    let result = run.result().await;
    output.result(&result);
    match run.workspace_changes().await {
        Ok(changes) => output.workspace(&changes),
        Err(error) => tracing::warn!(%error, "no workspace changes to report"),
    }
    result
}

/// Exit code 0 only for a settled run.
pub fn exit_code(result: &RunResult) -> std::process::ExitCode {
    if result.state == keel_protocol::RunState::Settled {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}
