//! `AgentRun`: the host's handle on one run.
//!
//! The run itself executes in a background task (see `turn_loop`). This
//! handle carries the shared state that both sides touch: the event stream
//! (taken once), the steering and follow-up queues, pending permission
//! requests, the cancellation token and the final result. A supervisor task
//! emits the single terminal event, even if the loop panics.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use keel_protocol::{
    AssistantMessage, ErrorSource, PermissionResolution, QueueKind, RunError, RunEvent,
    RunEventKind, RunResult, RunState,
};
use keel_tools::changes::{Baseline, WorkspaceChanges};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::emitter::Emitter;
use crate::kernel::{KernelParts, RunSpec};
use crate::turn_loop;

/// The host's handle on one run. Dropping it cancels the run.
pub struct AgentRun {
    shared: Arc<RunShared>,
    baseline: Result<Arc<Baseline>, String>,
    events: Mutex<Option<mpsc::UnboundedReceiver<RunEvent>>>,
    result: watch::Receiver<Option<RunResult>>,
}

/// Why a control call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The event stream has already been taken; a run has one consumer.
    #[error("the run's event stream already has a consumer")]
    EventStreamTaken,
    /// The run has ended or is ending; nothing more can be queued.
    #[error("the run is no longer active")]
    NotActive,
    /// The message is empty or whitespace.
    #[error("the message is empty")]
    EmptyMessage,
    /// No pending permission request has this id.
    #[error("no pending permission request `{0}` (stale, already resolved, or never issued)")]
    UnknownPermissionRequest(String),
    /// The workspace's changes cannot be computed.
    #[error("workspace changes are unavailable: {0}")]
    ChangesUnavailable(String),
}

/// How the turn loop ended; the supervisor turns it into the terminal event.
pub(crate) enum Outcome {
    Settled(AssistantMessage),
    Cancelled {
        reason: String,
        last: Option<AssistantMessage>,
    },
    Failed {
        error: RunError,
        last: Option<AssistantMessage>,
    },
}

/// State shared by the handle, the turn loop and the supervisor.
pub(crate) struct RunShared {
    pub(crate) run_id: String,
    pub(crate) session_id: String,
    pub(crate) emitter: Emitter,
    pub(crate) cancel: CancellationToken,
    control: Mutex<Control>,
    permissions: Mutex<HashMap<String, oneshot::Sender<PermissionResolution>>>,
    /// False once the host dropped the event stream: nobody can answer a
    /// permission request any more, so every request is denied.
    host_listening: AtomicBool,
    result: watch::Sender<Option<RunResult>>,
}

struct Control {
    steering: VecDeque<String>,
    follow_ups: VecDeque<String>,
    accepting: bool,
}

impl AgentRun {
    pub(crate) fn start(
        parts: Arc<KernelParts>,
        spec: RunSpec,
        session_id: String,
        baseline: Result<Arc<Baseline>, String>,
    ) -> Self {
        let run_id = new_id();
        let (sender, receiver) = mpsc::unbounded_channel();
        let (result_sender, result) = watch::channel(None);
        let shared = Arc::new(RunShared {
            emitter: Emitter::new(run_id.clone(), session_id.clone(), sender),
            run_id,
            session_id,
            cancel: CancellationToken::new(),
            control: Mutex::new(Control {
                steering: VecDeque::new(),
                follow_ups: VecDeque::new(),
                accepting: true,
            }),
            permissions: Mutex::new(HashMap::new()),
            host_listening: AtomicBool::new(true),
            result: result_sender,
        });
        let supervised = Arc::clone(&shared);
        tokio::spawn(async move {
            // Full tool outputs are kept for the run's tools, then removed.
            let _outputs = keel_tools::outputs::hold();
            let task = tokio::spawn(turn_loop::run(parts, Arc::clone(&supervised), spec));
            let outcome = task.await.unwrap_or_else(|join_error| Outcome::Failed {
                error: RunError::new(
                    ErrorSource::Kernel,
                    "kernel_panic",
                    format!("the run task ended abnormally: {join_error}"),
                ),
                last: None,
            });
            supervised.finish(outcome);
        });
        Self {
            shared,
            baseline,
            events: Mutex::new(Some(receiver)),
            result,
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.shared.run_id
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

    /// Cancels the run. Idempotent; pending permission requests are denied and
    /// queued messages dropped.
    pub fn cancel(&self) {
        self.shared.cancel.cancel();
    }

    /// Answers a `permission_requested` event. The decision applies only to the
    /// call (and exact arguments and intent) that request was issued for.
    pub fn resolve_permission(
        &self,
        request_id: &str,
        resolution: PermissionResolution,
    ) -> Result<(), ControlError> {
        let sender = self
            .shared
            .permissions()
            .remove(request_id)
            .ok_or_else(|| ControlError::UnknownPermissionRequest(request_id.to_owned()))?;
        sender
            .send(resolution)
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

    /// The workspace's changes since the run started: changed paths and a
    /// unified patch (`git diff --binary` in a git workspace). Usually asked
    /// after `result()`; asked earlier, it describes the changes so far.
    pub async fn workspace_changes(&self) -> Result<WorkspaceChanges, ControlError> {
        let baseline = self
            .baseline
            .clone()
            .map_err(ControlError::ChangesUnavailable)?;
        tokio::task::spawn_blocking(move || baseline.changes())
            .await
            .map_err(|error| ControlError::ChangesUnavailable(error.to_string()))?
            .map_err(|error| ControlError::ChangesUnavailable(error.to_string()))
    }

    fn lost_result(&self) -> RunResult {
        RunResult {
            run_id: self.shared.run_id.clone(),
            session_id: self.shared.session_id.clone(),
            state: RunState::Failed,
            message: None,
            error: Some(RunError::new(
                ErrorSource::Kernel,
                "kernel_lost",
                "the run ended without a result",
            )),
        }
    }
}

impl Drop for AgentRun {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
    }
}

impl RunShared {
    fn enqueue(&self, queue: QueueKind, text: String) -> Result<(), ControlError> {
        if text.trim().is_empty() {
            return Err(ControlError::EmptyMessage);
        }
        let mut control = self.control();
        if !control.accepting || self.cancel.is_cancelled() {
            return Err(ControlError::NotActive);
        }
        match queue {
            QueueKind::Steer => control.steering.push_back(text.clone()),
            QueueKind::FollowUp => control.follow_ups.push_back(text.clone()),
        }
        // Emitted under the control lock so `message_queued` precedes `message_injected`.
        self.emitter
            .emit(RunEventKind::MessageQueued { queue, text });
        Ok(())
    }

    /// Takes every queued steering message.
    pub(crate) fn take_steering(&self) -> Vec<String> {
        self.control().steering.drain(..).collect()
    }

    /// Takes the next message to inject when the run would settle: steering
    /// that arrived after the last drain point first, then one follow-up.
    /// With neither, the run stops accepting messages (it is about to settle).
    pub(crate) fn take_pending_or_close(&self) -> Option<(QueueKind, String)> {
        let mut control = self.control();
        if let Some(text) = control.steering.pop_front() {
            return Some((QueueKind::Steer, text));
        }
        if let Some(text) = control.follow_ups.pop_front() {
            return Some((QueueKind::FollowUp, text));
        }
        control.accepting = false;
        None
    }

    /// Registers a pending permission request.
    pub(crate) fn register_permission(
        &self,
        request_id: String,
    ) -> oneshot::Receiver<PermissionResolution> {
        let (sender, receiver) = oneshot::channel();
        self.permissions().insert(request_id, sender);
        receiver
    }

    /// Whether the host still consumes events (and so can answer requests).
    pub(crate) fn host_listening(&self) -> bool {
        self.host_listening.load(Ordering::SeqCst)
    }

    /// The host dropped the event stream: deny what is pending, and all later requests.
    fn host_left(&self) {
        self.host_listening.store(false, Ordering::SeqCst);
        self.permissions().clear();
    }

    /// Forgets a pending request (answered, cancelled or abandoned).
    pub(crate) fn forget_permission(&self, request_id: &str) {
        self.permissions().remove(request_id);
    }

    fn finish(&self, outcome: Outcome) {
        let dropped = {
            let mut control = self.control();
            control.accepting = false;
            let mut dropped: Vec<_> = control
                .steering
                .drain(..)
                .map(|text| (QueueKind::Steer, text))
                .collect();
            dropped.extend(
                control
                    .follow_ups
                    .drain(..)
                    .map(|text| (QueueKind::FollowUp, text)),
            );
            dropped
        };
        for (queue, text) in dropped {
            self.emitter.emit(RunEventKind::MessageDropped {
                queue,
                text,
                reason: "the run ended before the message was injected".into(),
            });
        }
        self.permissions().clear();
        let (state, message, error, event) = match outcome {
            Outcome::Settled(message) => (
                RunState::Settled,
                Some(message.clone()),
                None,
                RunEventKind::RunSettled { message },
            ),
            Outcome::Cancelled { reason, last } => (
                RunState::Cancelled,
                last,
                None,
                RunEventKind::RunCancelled { reason },
            ),
            Outcome::Failed { error, last } => (
                RunState::Failed,
                last,
                Some(error.clone()),
                RunEventKind::RunFailed { error },
            ),
        };
        self.emitter.emit(event);
        let result = RunResult {
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            state,
            message,
            error,
        };
        self.result.send_replace(Some(result));
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        // The lock is never held across code that can panic; recover the data.
        self.control
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn permissions(
        &self,
    ) -> MutexGuard<'_, HashMap<String, oneshot::Sender<PermissionResolution>>> {
        self.permissions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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

/// A time-ordered unique id.
pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
