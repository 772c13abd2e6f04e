//! The state one run shares between its host handle, its turn loop and its
//! supervisor, and the outcome the loop hands to the supervisor.
//!
//! This module sits below both the turn loop and the handle (`run.rs`), so
//! that neither needs the other's types: the loop drains queues and registers
//! permission requests here, the handle enqueues and resolves here, and the
//! supervisor calls [`RunShared::finish`] exactly once.
//!
//! Lock discipline: `control` (the steering and follow-up queues and whether
//! the run still accepts messages) and `permissions` (pending requests by id)
//! are plain mutexes, each held only for a queue or map operation and never
//! across an `.await` or across code that can panic; `message_queued` is
//! emitted under `control` so that it always precedes the matching
//! `message_injected`. `host_listening` is an atomic flag that only ever goes
//! from true to false. `result` is written once, by `finish`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use keel_protocol::{
    AssistantMessage, PermissionAnswer, PermissionScope, QueueKind, QueuedMessage, RunError,
    RunEvent, RunEventKind, RunResult, RunState,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::emitter::Emitter;

/// Why a control call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// The answer's scope is not one this kernel keeps (it keeps `once` and
    /// `always`); answer with one of those instead.
    #[error("permission answers with scope `{0:?}` are not supported; answer once or always")]
    UnsupportedScope(PermissionScope),
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
    permissions: Mutex<HashMap<String, oneshot::Sender<PermissionAnswer>>>,
    /// False once the host dropped the event stream: nobody can answer a
    /// permission request any more, so every request is denied.
    host_listening: AtomicBool,
    result: watch::Sender<Option<RunResult>>,
    /// Repository code the run's commands planted (`gitcode`), in order.
    git_code: Mutex<Vec<keel_protocol::GitCodeChange>>,
    /// Set by the stall watchdog before it cancels the run: the run then
    /// ends failed with this error instead of cancelled.
    stalled: Mutex<Option<RunError>>,
}

struct Control {
    steering: VecDeque<String>,
    follow_ups: VecDeque<String>,
    accepting: bool,
}

impl RunShared {
    /// Fresh state for a run whose events go to `events` and whose result
    /// is published on `result`.
    pub(crate) fn new(
        run_id: String,
        session_id: String,
        events: mpsc::UnboundedSender<RunEvent>,
        result: watch::Sender<Option<RunResult>>,
    ) -> Self {
        Self {
            emitter: Emitter::new(run_id.clone(), session_id.clone(), events),
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
            result,
            git_code: Mutex::new(Vec::new()),
            stalled: Mutex::new(None),
        }
    }

    /// Records repository code a call planted.
    pub(crate) fn add_git_code(&self, changes: Vec<keel_protocol::GitCodeChange>) {
        self.git_code
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend(changes);
    }

    /// The repository code the run's calls planted so far.
    pub(crate) fn git_code(&self) -> Vec<keel_protocol::GitCodeChange> {
        self.git_code
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(crate) fn enqueue(&self, queue: QueueKind, text: String) -> Result<(), ControlError> {
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

    /// The messages still queued, in delivery order: steering before
    /// follow-ups (the loop always injects pending steering first), each
    /// queue in the order it was filled.
    pub(crate) fn queued(&self) -> Vec<QueuedMessage> {
        let control = self.control();
        queued_in_order(&control)
    }

    /// Removes and returns what is queued (in delivery order): one queue,
    /// or both when `kind` is `None`. Emits `queue_cleared` under the
    /// control lock, so no `message_injected` for a cleared message can
    /// follow it.
    pub(crate) fn clear_queue(&self, kind: Option<QueueKind>) -> Vec<QueuedMessage> {
        let mut control = self.control();
        let cleared = match kind {
            Some(QueueKind::Steer) => {
                let steer = std::mem::take(&mut control.steering);
                queued_from(QueueKind::Steer, steer)
            }
            Some(QueueKind::FollowUp) => {
                let follow_ups = std::mem::take(&mut control.follow_ups);
                queued_from(QueueKind::FollowUp, follow_ups)
            }
            None => {
                let cleared = queued_in_order(&control);
                control.steering.clear();
                control.follow_ups.clear();
                cleared
            }
        };
        let count = |wanted| {
            cleared
                .iter()
                .filter(|message| message.kind == wanted)
                .count()
        };
        self.emitter.emit(RunEventKind::QueueCleared {
            queue: kind,
            steer: count(QueueKind::Steer),
            follow_up: count(QueueKind::FollowUp),
        });
        cleared
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

    /// Records that the run stalled; a later cancel outcome becomes this failure.
    pub(crate) fn mark_stalled(&self, error: RunError) {
        *self
            .stalled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(error);
    }

    /// The stall error, when the watchdog stopped the run.
    pub(crate) fn stall_error(&self) -> Option<RunError> {
        self.stalled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Whether a permission request waits for the host's answer.
    pub(crate) fn permission_pending(&self) -> bool {
        !self.permissions().is_empty()
    }

    /// Registers a pending permission request.
    pub(crate) fn register_permission(
        &self,
        request_id: String,
    ) -> oneshot::Receiver<PermissionAnswer> {
        let (sender, receiver) = oneshot::channel();
        self.permissions().insert(request_id, sender);
        receiver
    }

    /// Whether the host still consumes events (and so can answer requests).
    pub(crate) fn host_listening(&self) -> bool {
        self.host_listening.load(Ordering::SeqCst)
    }

    /// The host dropped the event stream: deny what is pending, and all later requests.
    pub(crate) fn host_left(&self) {
        self.host_listening.store(false, Ordering::SeqCst);
        self.permissions().clear();
    }

    /// Forgets a pending request (answered, cancelled or abandoned).
    pub(crate) fn forget_permission(&self, request_id: &str) {
        self.permissions().remove(request_id);
    }

    pub(crate) fn finish(&self, outcome: Outcome) {
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
        let result = {
            let mut run_result =
                RunResult::new(self.run_id.clone(), self.session_id.clone(), state);
            run_result.message = message;
            run_result.error = error;
            run_result
        };
        self.result.send_replace(Some(result));
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        // The lock is never held across code that can panic; recover the data.
        self.control
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn permissions(
        &self,
    ) -> MutexGuard<'_, HashMap<String, oneshot::Sender<PermissionAnswer>>> {
        self.permissions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Both queues' messages in delivery order: steering, then follow-ups.
fn queued_in_order(control: &Control) -> Vec<QueuedMessage> {
    let steering = control
        .steering
        .iter()
        .map(|text| QueuedMessage::new(QueueKind::Steer, text.clone()));
    let follow_ups = control
        .follow_ups
        .iter()
        .map(|text| QueuedMessage::new(QueueKind::FollowUp, text.clone()));
    steering.chain(follow_ups).collect()
}

fn queued_from(kind: QueueKind, texts: VecDeque<String>) -> Vec<QueuedMessage> {
    texts
        .into_iter()
        .map(|text| QueuedMessage::new(kind, text))
        .collect()
}
