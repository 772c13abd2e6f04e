//! Emits run events with a gapless `seq`, and nothing after the terminal one.

use std::sync::Mutex;

use keel_protocol::{RunEvent, RunEventKind};
use tokio::sync::mpsc;

use crate::ids::now_ms;

/// The single writer of a run's event stream.
pub(crate) struct Emitter {
    run_id: String,
    session_id: String,
    inner: Mutex<Inner>,
}

struct Inner {
    next_seq: u64,
    /// Dropped after the terminal event, which ends the consumer's stream.
    sender: Option<mpsc::UnboundedSender<RunEvent>>,
}

impl Emitter {
    pub(crate) fn new(
        run_id: String,
        session_id: String,
        sender: mpsc::UnboundedSender<RunEvent>,
    ) -> Self {
        Self {
            run_id,
            session_id,
            inner: Mutex::new(Inner {
                next_seq: 0,
                sender: Some(sender),
            }),
        }
    }

    /// Emits one event; after a terminal event, emits nothing more.
    pub(crate) fn emit(&self, kind: RunEventKind) {
        // A poisoned lock means a thread panicked mid-emit; the stream is then
        // unusable and dropping further events is the only safe choice.
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let terminal = kind.is_terminal();
        let event = RunEvent {
            seq: inner.next_seq,
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            timestamp: now_ms(),
            kind,
        };
        let Some(sender) = &inner.sender else {
            return;
        };
        // The consumer may have dropped the stream; the run goes on regardless.
        let _ = sender.send(event);
        inner.next_seq += 1;
        if terminal {
            inner.sender = None;
        }
    }
}
