//! Emits run events with a gapless `seq`, and nothing after the terminal one.
//!
//! The emitter also keeps the run's pulse for the stall watchdog: when it
//! last emitted an event, and which tools are running (between their
//! `tool_execution_start` and `tool_execution_end`).

use std::sync::Mutex;

use keel_protocol::{RunEvent, RunEventKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

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
    /// When the run last showed progress (an event, or a permission wait).
    last_progress: Instant,
    /// Calls started and not yet ended: (call id, tool name), in start order.
    running: Vec<(String, String)>,
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
                last_progress: Instant::now(),
                running: Vec::new(),
            }),
        }
    }

    /// The run the events belong to.
    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The run's session.
    pub(crate) fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Emits one event; after a terminal event, emits nothing more.
    pub(crate) fn emit(&self, kind: RunEventKind) {
        // A poisoned lock means a thread panicked mid-emit; the stream is then
        // unusable and dropping further events is the only safe choice.
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let terminal = kind.is_terminal();
        inner.last_progress = Instant::now();
        match &kind {
            RunEventKind::ToolExecutionStart {
                call_id, tool_name, ..
            } => inner.running.push((call_id.clone(), tool_name.clone())),
            RunEventKind::ToolExecutionEnd { result } => {
                inner
                    .running
                    .retain(|(call_id, _)| *call_id != result.call_id);
            }
            _ => {}
        }
        let event = RunEvent::new(
            inner.next_seq,
            self.run_id.clone(),
            self.session_id.clone(),
            now_ms(),
            kind,
        );
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

impl Emitter {
    /// When the run last showed progress.
    pub(crate) fn last_progress(&self) -> Instant {
        self.inner
            .lock()
            .map_or_else(|_| Instant::now(), |inner| inner.last_progress)
    }

    /// Counts now as progress (the run is waiting for a permission answer,
    /// which is not a stall).
    pub(crate) fn hold_off(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.last_progress = Instant::now();
        }
    }

    /// The names of the tools running now, in start order, without repeats.
    pub(crate) fn running_tools(&self) -> Vec<String> {
        let Ok(inner) = self.inner.lock() else {
            return Vec::new();
        };
        let mut names: Vec<String> = Vec::new();
        for (_, name) in &inner.running {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }
}
