//! The stall watchdog: a run that shows no progress for its stall timeout
//! fails with `run_stalled` instead of hanging silently.
//!
//! Progress is any event the run emits (the emitter notes when it last
//! emitted one): provider chunks, tool output and ends, session entries.
//! Time with a permission request pending is not a stall: a request may wait
//! for a human for hours, so while one is pending the watchdog keeps pushing
//! its deadline back.
//!
//! On a stall the watchdog records the error in the run's shared state and
//! then cancels the run's token, exactly as a host cancel does: the provider
//! stream and running tools end, cut-short calls are recorded as cancelled,
//! and the turn loop reports the stall (not a cancel) as its outcome. If the
//! loop still has not ended one more stall timeout after the cancel (a tool
//! that ignores cancellation), its task is aborted and the run fails anyway:
//! every run ends with one terminal event.
//!
//! Cancel safety: [`watch`] owns the loop's task handle; dropping the future
//! detaches the task (it goes on, unwatched). The supervisor never drops it.

use std::time::Duration;

use keel_protocol::{ErrorSource, RunError, RunErrorCode};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

use crate::shared::{Outcome, RunShared};

/// Awaits the turn loop's task, failing the run if it stalls for `timeout`
/// (no watchdog when `None`). `provider` names the provider in the error.
pub(crate) async fn watch(
    mut task: JoinHandle<Outcome>,
    shared: &RunShared,
    timeout: Option<Duration>,
    provider: &str,
) -> Result<Outcome, JoinError> {
    let Some(timeout) = timeout else {
        return task.await;
    };
    loop {
        let deadline = shared.emitter.last_progress() + timeout;
        tokio::select! {
            joined = &mut task => return joined.map(|outcome| stall_wins(outcome, shared)),
            () = tokio::time::sleep_until(deadline) => {}
        }
        // Pending first: an answer notes progress before it removes the
        // request, so a request just answered shows in one or the other.
        if shared.permission_pending() {
            shared.emitter.hold_off();
            continue;
        }
        if shared.emitter.last_progress() + timeout > Instant::now() {
            continue;
        }
        break;
    }
    let error = stalled(timeout, &shared.emitter.running_tools(), provider);
    tracing::warn!(run_id = %shared.run_id, error = %error.message, "the run stalled");
    shared.mark_stalled(error.clone());
    shared.cancel.cancel();
    tokio::select! {
        joined = &mut task => joined.map(|outcome| stall_wins(outcome, shared)),
        () = tokio::time::sleep(timeout) => {
            task.abort();
            let message = format!(
                "{}; its work did not stop within {} after it was cancelled",
                error.message,
                seconds(timeout)
            );
            Ok(Outcome::Failed {
                error: RunError::new(error.source, error.code, message),
                last: None,
            })
        }
    }
}

/// A cancel caused by the watchdog is reported as the stall it was.
fn stall_wins(outcome: Outcome, shared: &RunShared) -> Outcome {
    match (outcome, shared.stall_error()) {
        (Outcome::Cancelled { last, .. }, Some(error)) => Outcome::Failed { error, last },
        (outcome, _) => outcome,
    }
}

/// The `run_stalled` error, naming what the run was waiting on.
fn stalled(timeout: Duration, tools: &[String], provider: &str) -> RunError {
    let (source, waiting) = match tools {
        [] => (ErrorSource::Provider, format!("the provider `{provider}`")),
        [tool] => (ErrorSource::Tool, format!("the tool `{tool}`")),
        tools => (
            ErrorSource::Tool,
            format!(
                "the tools {}",
                tools
                    .iter()
                    .map(|tool| format!("`{tool}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    };
    RunError::new(
        source,
        RunErrorCode::RunStalled,
        format!(
            "the run made no progress for {} while waiting on {waiting}, so it was stopped",
            seconds(timeout)
        ),
    )
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}
