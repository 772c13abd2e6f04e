//! A connection as the runs see it: where its notifications go.
//!
//! Each connection has one bounded buffer (an mpsc channel of
//! `notification_buffer` notifications, each an `Arc` shared with the run's
//! ring). Runs push with `try_send`, never waiting: a full buffer ends that
//! subscription and leaves a lagged notice in a side list, at most one per
//! run, which [`super::Connection::notification`] hands out once the
//! buffer is drained. So a client that stops reading costs at most its
//! buffer and one notice per run it subscribed to; the server never grows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use keel_protocol::rpc::Notification;
use keel_protocol::rpc::methods::{EVENTS_LAGGED, EventsLaggedNotification};
use tokio::sync::{Notify, mpsc};

use super::runs::RunRecord;

/// What a push to a connection did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// In the buffer.
    Sent,
    /// The buffer was full: the subscription ends, the client is told.
    Lagged,
    /// The connection is gone.
    Closed,
}

/// The shared half of a connection.
pub(crate) struct Peer {
    pub(crate) id: u64,
    pub(crate) tenant: String,
    sender: mpsc::Sender<Arc<Notification>>,
    /// Lagged notices by run id, handed out after the buffer.
    lagged: Mutex<HashMap<String, EventsLaggedNotification>>,
    pub(crate) wake: Notify,
    closed: AtomicBool,
    /// The runs this connection started (for `cancel_started`, `settled`).
    pub(crate) started: Mutex<Vec<Arc<RunRecord>>>,
    pub(crate) initialized: AtomicBool,
}

impl Peer {
    pub(crate) fn new(id: u64, tenant: String, sender: mpsc::Sender<Arc<Notification>>) -> Self {
        Self {
            id,
            tenant,
            sender,
            lagged: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
            started: Mutex::new(Vec::new()),
            initialized: AtomicBool::new(false),
        }
    }

    /// Pushes one notification without waiting; on a full buffer, records
    /// the lagged notice (`last_seq`: the last one this subscription
    /// delivered).
    pub(crate) fn push(
        &self,
        note: &Arc<Notification>,
        run_id: &str,
        session_id: &str,
        last_seq: Option<u64>,
    ) -> Pushed {
        if self.closed.load(Ordering::Acquire) {
            return Pushed::Closed;
        }
        match self.sender.try_send(Arc::clone(note)) {
            Ok(()) => Pushed::Sent,
            Err(mpsc::error::TrySendError::Closed(_)) => Pushed::Closed,
            Err(mpsc::error::TrySendError::Full(_)) => {
                super::lock(&self.lagged).insert(run_id.to_owned(), {
                    let mut events_lagged_notification = EventsLaggedNotification::default();
                    events_lagged_notification.run_id = run_id.to_owned();
                    events_lagged_notification.session_id = session_id.to_owned();
                    events_lagged_notification.last_seq = last_seq;
                    events_lagged_notification
                });
                self.wake.notify_one();
                Pushed::Lagged
            }
        }
    }

    /// One pending lagged notice, if any.
    pub(crate) fn take_lagged(&self) -> Option<Notification> {
        let mut lagged = super::lock(&self.lagged);
        let run_id = lagged.keys().next()?.clone();
        let notice = lagged.remove(&run_id)?;
        let params = serde_json::to_value(notice).ok()?;
        Some(Notification::new(EVENTS_LAGGED, params))
    }

    /// Forgets a lagged notice of `run_id` (the client subscribed again).
    pub(crate) fn clear_lagged(&self, run_id: &str) {
        super::lock(&self.lagged).remove(run_id);
    }

    /// The connection was dropped: runs stop pushing to it.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        super::lock(&self.started).clear();
        super::lock(&self.lagged).clear();
    }
}
