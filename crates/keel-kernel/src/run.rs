//! `AgentRun`: the host's handle on one run, and the supervisor that ends it.
//!
//! The run itself executes in a background task (see `turn_loop`); the
//! state both sides touch lives in `shared`. [`AgentRun::start`] spawns a
//! supervisor task that awaits the loop and turns its outcome into the
//! single terminal event, even if the loop panics.
//!
//! # Cancel safety
//!
//! - [`AgentRun::result`] is cancel safe: it only watches the published
//!   result; dropping the future loses nothing, and calling it again (or
//!   from several tasks) returns the same result.
//! - [`EventStream::next`] is cancel safe: it is a channel receive, so an
//!   event is either returned or stays queued for the next call.
//! - Dropping the [`AgentRun`] cancels the run; dropping the [`EventStream`]
//!   tells the run that nobody can answer permission requests any more.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use keel_protocol::{
    ErrorSource, PermissionAnswer, PermissionScope, QueueKind, QueuedMessage, RunError,
    RunErrorCode, RunEvent, RunResult, RunState,
};
use keel_session::WriterLease;
use keel_tools::changes::{Baseline, WorkspaceChanges};
use tokio::sync::{mpsc, watch};

use crate::ids::new_id;
use crate::parts::{KernelParts, RunSpec};
use crate::shared::{ControlError, Outcome, RunShared};
use crate::{turn_loop, watchdog};

/// The host's handle on one run. Dropping it cancels the run.
///
/// # Steering and follow-ups
///
/// A host can talk to a running run through two queues:
///
/// - **Steer** ([`AgentRun::steer`]): delivered at the next model turn. The
///   run never interrupts a tool batch or a streaming response for it: once
///   the current turn's tool calls have all ended and their results are
///   recorded, every queued steering message is added to the conversation
///   (`message_injected`) and the model answers them in the next turn. A
///   steering message that arrives while the model is giving its final
///   answer is delivered right after that answer, so the run goes on.
/// - **Follow-up** ([`AgentRun::follow_up`]): delivered only when the run
///   would otherwise settle (the model answered without tool calls and no
///   steering is pending), one at a time: each follow-up starts a new
///   stretch of turns, as if the user typed it after the answer.
///
/// Both are announced with `message_queued` when accepted. What is still
/// waiting is listed by [`AgentRun::queued`] (in delivery order: steering
/// first) and can be taken back with [`AgentRun::clear_queue`]
/// (`queue_cleared`). What is still queued when the run ends is dropped
/// (`message_dropped`), never silently.
#[must_use = "dropping an AgentRun cancels the run"]
pub struct AgentRun {
    shared: Arc<RunShared>,
    workspace: std::path::PathBuf,
    baseline: Result<Arc<Baseline>, String>,
    events: Mutex<Option<mpsc::UnboundedReceiver<RunEvent>>>,
    result: watch::Receiver<Option<RunResult>>,
}

impl AgentRun {
    pub(crate) fn start(
        parts: Arc<KernelParts>,
        spec: RunSpec,
        baseline: Result<Arc<Baseline>, String>,
        lease: WriterLease,
    ) -> Self {
        let run_id = new_id();
        let workspace = parts.workspace.root().to_path_buf();
        let session_id = lease.session_id().to_owned();
        let repair = lease.repair().cloned();
        let (sender, receiver) = mpsc::unbounded_channel();
        let (result_sender, result) = watch::channel(None);
        let shared = Arc::new(RunShared::new(run_id, session_id, sender, result_sender));
        let supervised = Arc::clone(&shared);
        tokio::spawn(async move {
            // Full tool outputs are kept for the run's tools, then removed.
            let _outputs = parts.outputs.hold();
            // The kernel's namespace holders serve the run's commands; they
            // stop (and are reaped) when the kernel's last run ends.
            let holders = parts.holders.hold();
            let provider = parts.provider.name().to_owned();
            let stall_timeout = spec.stall_timeout;
            let task = tokio::spawn(turn_loop::run(parts, Arc::clone(&supervised), spec, repair));
            let joined = watchdog::watch(task, &supervised, stall_timeout, &provider).await;
            let outcome = joined.unwrap_or_else(|join_error| Outcome::Failed {
                error: RunError::new(
                    ErrorSource::Kernel,
                    RunErrorCode::KernelPanic,
                    format!("the run task ended abnormally: {join_error}"),
                ),
                last: None,
            });
            drop(holders);
            // The session is released before the result is published, so a
            // host that starts the next run on it once `result()` returns is
            // never refused as busy. Releasing joins the session's writer
            // thread (it writes the summary), so it is done off the runtime.
            let _ = tokio::task::spawn_blocking(move || drop(lease)).await;
            supervised.finish(outcome);
        });
        Self {
            shared,
            workspace,
            baseline,
            events: Mutex::new(Some(receiver)),
            result,
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.shared.run_id
    }

    /// The workspace the run works in (its canonical root).
    pub fn workspace_root(&self) -> &std::path::Path {
        &self.workspace
    }

    /// The session the run writes to.
    pub fn session_id(&self) -> &str {
        &self.shared.session_id
    }

    /// Takes the event stream. A run has exactly one consumer: a second call
    /// is refused.
    pub fn events(&self) -> Result<EventStream, ControlError> {
        let mut slot = self
            .events
            .lock()
            .map_err(|_| ControlError::EventStreamTaken)?;
        slot.take()
            .map(|receiver| EventStream {
                receiver,
                shared: Arc::clone(&self.shared),
            })
            .ok_or(ControlError::EventStreamTaken)
    }

    /// Queues a steering message, injected after the current tool batch.
    pub fn steer(&self, text: impl Into<String>) -> Result<(), ControlError> {
        self.shared.enqueue(QueueKind::Steer, text.into())
    }

    /// Queues a follow-up message, injected only when the run would settle.
    pub fn follow_up(&self, text: impl Into<String>) -> Result<(), ControlError> {
        self.shared.enqueue(QueueKind::FollowUp, text.into())
    }

    /// The messages queued and not yet injected, in delivery order:
    /// steering messages first, then follow-ups, each in the order sent.
    /// Empty once the run has ended.
    pub fn queued(&self) -> Vec<QueuedMessage> {
        self.shared.queued()
    }

    /// Takes back queued messages before they are injected: the `kind`
    /// queue, or both when `None`. Returns what was removed, in delivery
    /// order, and emits `queue_cleared` with the counts (also when nothing
    /// was queued, so the stream shows the host's request). A message
    /// already injected is not affected.
    pub fn clear_queue(&self, kind: Option<QueueKind>) -> Vec<QueuedMessage> {
        self.shared.clear_queue(kind)
    }

    /// Cancels the run. Idempotent; pending permission requests are denied and
    /// queued messages dropped.
    pub fn cancel(&self) {
        self.shared.cancel.cancel();
    }

    /// Answers a `permission_requested` event. The decision applies only to the
    /// call (and exact arguments and intent) that request was issued for.
    ///
    /// Takes a [`PermissionAnswer`] or a bare [`keel_protocol::PermissionResolution`]
    /// (meaning once). An answer with [`PermissionScope::Always`] also makes a
    /// session rule: the kernel records it as a `permission_rule` entry with
    /// the decision, and decides later calls of the same tool with the same
    /// intent and exactly the same target (command or path) by it, in this
    /// run and in later runs on this branch of the session, without asking.
    /// A scope this kernel does not know is refused and the request stays pending.
    pub fn resolve_permission(
        &self,
        request_id: &str,
        answer: impl Into<PermissionAnswer>,
    ) -> Result<(), ControlError> {
        let answer = answer.into();
        match answer.scope {
            PermissionScope::Once | PermissionScope::Always => {}
            other => return Err(ControlError::UnsupportedScope(other)),
        }
        // An answer is progress: noted before the request leaves the
        // pending map, so the stall watchdog sees one or the other.
        self.shared.emitter.hold_off();
        let sender = self
            .shared
            .permissions()
            .remove(request_id)
            .ok_or_else(|| ControlError::UnknownPermissionRequest(request_id.to_owned()))?;
        sender
            .send(answer)
            .map_err(|_| ControlError::UnknownPermissionRequest(request_id.to_owned()))
    }

    /// Waits for the run to end and returns its result. Does not consume events.
    pub async fn result(&self) -> RunResult {
        let mut receiver = self.result.clone();
        loop {
            if let Some(result) = receiver.borrow_and_update().clone() {
                return result;
            }
            if receiver.changed().await.is_err() {
                return self.lost_result();
            }
        }
    }

    /// The workspace's changes since the run started: changed paths, a
    /// unified patch (`git diff --binary` in a git workspace), and the
    /// repository code the run's commands planted (`git_code`, each also a
    /// `warning` event when it was noticed). Usually asked
    /// after `result()`; asked earlier, it describes the changes so far.
    pub async fn workspace_changes(&self) -> Result<WorkspaceChanges, ControlError> {
        let baseline = self
            .baseline
            .clone()
            .map_err(ControlError::ChangesUnavailable)?;
        let mut changes = tokio::task::spawn_blocking(move || baseline.changes())
            .await
            .map_err(|error| ControlError::ChangesUnavailable(error.to_string()))?
            .map_err(|error| ControlError::ChangesUnavailable(error.to_string()))?;
        changes.git_code = self.shared.git_code();
        Ok(changes)
    }

    fn lost_result(&self) -> RunResult {
        {
            let mut run_result = RunResult::new(
                self.shared.run_id.clone(),
                self.shared.session_id.clone(),
                RunState::Failed,
            );
            run_result.message = None;
            run_result.error = Some(RunError::new(
                ErrorSource::Kernel,
                RunErrorCode::KernelLost,
                "the run ended without a result",
            ));
            run_result
        }
    }
}

impl Drop for AgentRun {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
    }
}

/// The run's events, in `seq` order; ends after the terminal event.
///
/// Dropping it tells the run that its host stopped listening: pending and
/// later permission requests are denied, since nobody can answer them.
pub struct EventStream {
    receiver: mpsc::UnboundedReceiver<RunEvent>,
    shared: Arc<RunShared>,
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.shared.host_left();
    }
}

impl EventStream {
    /// The next event, or `None` after the terminal event.
    pub async fn next(&mut self) -> Option<RunEvent> {
        self.receiver.recv().await
    }
}

impl futures::Stream for EventStream {
    type Item = RunEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RunEvent>> {
        self.receiver.poll_recv(cx)
    }
}
