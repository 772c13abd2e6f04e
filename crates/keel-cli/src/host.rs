//! Drives one run as its host: prints events, answers what the run asks.

use keel_kernel::{AgentRun, ControlError};
use keel_protocol::{RunEvent, RunResult, SessionLine};
use keel_tools::changes::WorkspaceChanges;

use keel_host::sessions;
use keel_session::JsonlStore;

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
    session: Option<Stored>,
) -> Result<(), StartupError> {
    output.finish(result, changes, session)
}

/// Where a run's session is: its line for the JSON forms, and its id as
/// the view shows it (the shortest unique prefix).
pub struct Stored {
    /// The session's id and file.
    pub line: SessionLine,
    /// The id's shortest unique prefix in its store.
    pub short_id: String,
}

impl Stored {
    /// The session `session_id` of `store`.
    pub fn of(store: &JsonlStore, session_id: &str) -> Result<Self, StartupError> {
        let path = sessions::session_file(store, session_id)?;
        Ok(Self {
            line: SessionLine::new(session_id.to_owned(), path.display().to_string()),
            short_id: sessions::short_id(store, session_id),
        })
    }
}

/// Exit code 0 only for a settled run.
pub fn exit_code(result: &RunResult) -> std::process::ExitCode {
    if result.state == keel_protocol::RunState::Settled {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}
