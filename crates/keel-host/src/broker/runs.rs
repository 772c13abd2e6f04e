//! Runs held by id, and the pump that carries each run's events to its
//! subscribers.
//!
//! # The event path, and why the kernel's channel may stay unbounded
//!
//! The kernel emits a run's events into an unbounded channel
//! ([`keel_kernel::EventStream`]). The broker takes that stream once, when
//! the run starts, and one pump task per run drains it **always**, at the
//! kernel's pace, whatever the clients do: each event goes into the run's
//! [`Ring`] (bounded by count and bytes) and is offered to each subscribed
//! connection's bounded buffer with `try_send`. A connection whose buffer
//! is full loses that subscription (it gets `run/events_lagged` naming the
//! last `seq` it was given, and may `run/subscribe` again from there). So
//! the unbounded channel never holds more than the events emitted since
//! the pump's last wake-up, and no client, slow or gone, can make the
//! server hold more than its buffer.
//!
//! Holding the stream for the run's whole life is also what keeps
//! permission requests alive across disconnects: the kernel denies pending
//! requests only when the stream is dropped (`host_left`), and the broker
//! drops it only after the terminal event.
//!
//! # Invariants
//!
//! - Ring push, delivery to subscribers, and subscription (replay +
//!   registration) happen under the run's one `stream` lock, so a
//!   subscriber gets every event after its `after_seq` exactly once: the
//!   replay sees every event pushed before it and registration sees every
//!   one after.
//! - Every run ends with exactly one terminal notification per
//!   subscription: the kernel's terminal event, carrying the run's result;
//!   if the kernel's stream ended without one (a lost run), the pump makes
//!   one from the run's result.
//! - When a run ends its admission permit, kernel lease and session claim
//!   are released, and its ring stays readable for `ring_grace`, but at
//!   most `max_finished_runs` finished runs are held: past it the one that
//!   finished first is forgotten at once (`not_found`), so clients
//!   starting many short runs cannot make the broker hold a ring for each
//!   of them for the whole grace period.
//!
//! # Cancel safety
//!
//! The pump is a spawned task; nothing awaits it. [`RunRecord::finished`]
//! only watches a channel and may be dropped at any point.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_kernel::{AgentRun, EventStream};
use keel_protocol::rpc::Notification;
use keel_protocol::rpc::methods::{RUN_EVENT, RunEventNotification, RunSubscribeResponse};
use keel_protocol::rpc::{ErrorKind, RpcError};
use keel_protocol::{RunEvent, RunEventKind, RunResult, RunState};
use tokio::sync::watch;

use super::lock;
use super::metrics::Counters;
use super::peer::{Peer, Pushed};
use super::ring::Ring;

/// Every run the broker holds, live or within its grace period.
pub(crate) type RunMap = Arc<Mutex<HashMap<String, Arc<RunRecord>>>>;

/// One run: the kernel's handle, its ring and subscribers, its end.
pub(crate) struct RunRecord {
    pub(crate) run_id: String,
    pub(crate) session_id: String,
    pub(crate) tenant: String,
    /// The tenant's ceiling: its permission requests that would widen the
    /// run past it are denied as they come (`authority`).
    authority: super::Authority,
    pub(crate) run: AgentRun,
    stream: Mutex<Stream>,
    done: watch::Sender<Option<RunResult>>,
    /// When it finished, in the order runs finish (0: not yet).
    finished_order: AtomicU64,
}

/// The order in which runs finish, across the process (only compared).
static FINISHED: AtomicU64 = AtomicU64::new(1);

struct Stream {
    ring: Ring,
    subscribers: Vec<Subscriber>,
    finished: bool,
}

struct Subscriber {
    peer: Arc<Peer>,
    /// The last `seq` delivered to it.
    last_seq: Option<u64>,
}

/// What a run holds until it ends; dropped by the pump after the terminal
/// event (admission permit, kernel lease, session claim).
pub(crate) type Holds = Box<dyn Send + Sync>;

/// Whose a run is: its tenant and that tenant's ceiling.
pub(crate) struct Owner {
    pub(crate) tenant: String,
    pub(crate) authority: super::Authority,
}

/// The bounds of a run's ring.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingBounds {
    pub(crate) events: usize,
    pub(crate) bytes: usize,
    pub(crate) grace: Duration,
    /// Most finished runs held (within their grace period) at once.
    pub(crate) keep: usize,
}

impl RunRecord {
    /// Holds `run` under its id, subscribes `first` (the starting
    /// connection, if it asked) before any event can be delivered, and
    /// starts the pump.
    pub(crate) fn start(
        run: AgentRun,
        owner: Owner,
        first: Option<&Arc<Peer>>,
        holds: Holds,
        bounds: RingBounds,
        runs: &RunMap,
        counters: &Arc<Counters>,
    ) -> Result<Arc<Self>, RpcError> {
        let events = run.events().map_err(|error| {
            RpcError::new(ErrorKind::Internal, format!("the run's events: {error}"))
        })?;
        let (done, _) = watch::channel(None);
        let record = Arc::new(Self {
            run_id: run.run_id().to_owned(),
            session_id: run.session_id().to_owned(),
            tenant: owner.tenant,
            authority: owner.authority,
            run,
            stream: Mutex::new(Stream {
                ring: Ring::new(bounds.events, bounds.bytes),
                subscribers: first
                    .map(|peer| Subscriber {
                        peer: Arc::clone(peer),
                        last_seq: None,
                    })
                    .into_iter()
                    .collect(),
                finished: false,
            }),
            done,
            finished_order: AtomicU64::new(0),
        });
        lock(runs).insert(record.run_id.clone(), Arc::clone(&record));
        counters.run_started(&record.tenant);
        tokio::spawn(pump(
            Arc::clone(&record),
            events,
            holds,
            bounds,
            Arc::clone(runs),
            Arc::clone(counters),
        ));
        Ok(record)
    }

    /// Whether the run has ended (its terminal event was pushed).
    pub(crate) fn is_finished(&self) -> bool {
        self.done.borrow().is_some()
    }

    /// Waits for the run's end and returns its result.
    pub(crate) async fn finished(&self) -> RunResult {
        let mut receiver = self.done.subscribe();
        loop {
            if let Some(result) = receiver.borrow_and_update().clone() {
                return result;
            }
            if receiver.changed().await.is_err() {
                // The sender lives in `self`: it cannot be gone while we
                // borrow `self`; ask the kernel as a last resort.
                return self.run.result().await;
            }
        }
    }

    /// Subscribes `peer` from after `after_seq`: replays what the ring holds
    /// and registers for the live tail, under one lock (see the module docs).
    /// An `after_seq` beyond the last event emitted gets the events after it.
    pub(crate) fn subscribe(
        &self,
        peer: &Arc<Peer>,
        after_seq: Option<u64>,
    ) -> Result<RunSubscribeResponse, RpcError> {
        let mut stream = lock(&self.stream);
        let stream = &mut *stream;
        let replay = stream.ring.after(after_seq).map_err(|lagged| {
            let mut error = RpcError::new(
                ErrorKind::EventsLagged,
                format!(
                    "run `{}` no longer holds the events after seq {}; rebuild from session/get",
                    self.run_id,
                    after_seq.map_or_else(|| "(start)".to_owned(), |seq| seq.to_string())
                ),
            )
            .with("run_id", self.run_id.as_str())
            .with("session_id", self.session_id.as_str());
            if let Some(oldest) = lagged.oldest_seq {
                error = error.with("oldest_seq", oldest);
            }
            error
        })?;
        stream.subscribers.retain(|sub| sub.peer.id != peer.id);
        peer.clear_lagged(&self.run_id);
        let mut subscriber = Subscriber {
            peer: Arc::clone(peer),
            last_seq: after_seq,
        };
        let mut keep = true;
        for note in replay {
            let seq = seq_of(note);
            match peer.push(note, &self.run_id, &self.session_id, subscriber.last_seq) {
                Pushed::Sent => subscriber.last_seq = seq.or(subscriber.last_seq),
                Pushed::Lagged | Pushed::Closed => {
                    keep = false;
                    break;
                }
            }
        }
        let response = {
            let mut run_subscribe_response = RunSubscribeResponse::default();
            run_subscribe_response.run_id = self.run_id.clone();
            run_subscribe_response.session_id = self.session_id.clone();
            run_subscribe_response.oldest_seq = stream.ring.oldest_seq();
            run_subscribe_response.next_seq = stream.ring.next_seq();
            run_subscribe_response.finished = stream.finished;
            run_subscribe_response
        };
        if keep && !stream.finished {
            stream.subscribers.push(subscriber);
        }
        Ok(response)
    }

    /// Pushes one event's notification into the ring and to every
    /// subscriber; returns how many were sent and how many lagged.
    fn deliver(
        &self,
        seq: u64,
        note: Arc<Notification>,
        bytes: usize,
        terminal: bool,
    ) -> (u64, u64) {
        let mut stream = lock(&self.stream);
        let stream = &mut *stream;
        stream.ring.push(seq, Arc::clone(&note), bytes);
        let (mut sent, mut lagged) = (0, 0);
        stream.subscribers.retain_mut(|sub| {
            // A subscriber that asked from a `seq` not yet emitted waits
            // for the events after it.
            if sub.last_seq.is_some_and(|last| seq <= last) {
                return true;
            }
            match sub
                .peer
                .push(&note, &self.run_id, &self.session_id, sub.last_seq)
            {
                Pushed::Sent => {
                    sub.last_seq = Some(seq);
                    sent += 1;
                    true
                }
                Pushed::Lagged => {
                    lagged += 1;
                    false
                }
                Pushed::Closed => false,
            }
        });
        if terminal {
            stream.finished = true;
            stream.subscribers.clear();
        }
        (sent, lagged)
    }
}

/// Drains the run's events into its ring and subscribers until the
/// terminal event, then releases what the run held.
async fn pump(
    record: Arc<RunRecord>,
    mut events: EventStream,
    holds: Holds,
    bounds: RingBounds,
    runs: RunMap,
    counters: Arc<Counters>,
) {
    let mut holds = Some(holds);
    let mut next_seq = 0;
    let mut terminal = None;
    while let Some(event) = events.next().await {
        next_seq = event.seq + 1;
        if event.kind.is_terminal() {
            terminal = Some(event);
            break;
        }
        let refused = match &event.kind {
            RunEventKind::PermissionRequested {
                request_id, intent, ..
            } if !record.authority.may_approve(intent) => Some(request_id.clone()),
            _ => None,
        };
        push_event(&record, event, None, &counters);
        if let Some(request_id) = refused {
            // Past the tenant's ceiling: nobody of this tenant may approve
            // it, so it is denied now rather than left to wait.
            let _ = record
                .run
                .resolve_permission(&request_id, keel_protocol::PermissionResolution::Denied);
        }
    }
    let result = record.run.result().await;
    // The kernel's stream ended without a terminal event only if it lost
    // the run; its result says so, and the pump makes the one terminal
    // notification from it.
    let event = terminal.unwrap_or_else(|| lost_event(&record, next_seq, &result));
    // What the run held is released before its end is told, so a client
    // that sees the terminal event may start the next run on the session.
    drop(holds.take());
    counters.run_ended(&record.tenant);
    // The terminal notification is in the ring (and with its subscribers)
    // before `run/result` answers, so a client that has the result and
    // then subscribes finds the whole run there, and no live push races
    // its reading.
    push_event(&record, event, Some(result.clone()), &counters);
    record.done.send_replace(Some(result));
    drop(events);
    record
        .finished_order
        .store(FINISHED.fetch_add(1, Ordering::Relaxed), Ordering::Release);
    forget_oldest_finished(&runs, bounds.keep);
    // Only the id is kept while waiting, so a run forgotten early frees
    // its ring now.
    let run_id = record.run_id.clone();
    drop(record);
    tokio::time::sleep(bounds.grace).await;
    lock(&runs).remove(&run_id);
}

/// Forgets the finished runs that finished first until at most `keep` are
/// held.
fn forget_oldest_finished(runs: &RunMap, keep: usize) {
    // Ordered only: a run whose pump has not stamped it yet is not counted
    // (it is the newest, not the oldest).
    let order = |record: &RunRecord| record.finished_order.load(Ordering::Acquire);
    let mut runs = lock(runs);
    loop {
        let finished = runs.values().filter(|record| order(record) > 0);
        if finished.count() <= keep {
            return;
        }
        let oldest = runs
            .values()
            .filter(|record| order(record) > 0)
            .min_by_key(|record| order(record))
            .map(|record| record.run_id.clone());
        match oldest {
            Some(run_id) => {
                runs.remove(&run_id);
            }
            None => return,
        }
    }
}

fn push_event(record: &RunRecord, event: RunEvent, result: Option<RunResult>, counters: &Counters) {
    let seq = event.seq;
    let terminal = event.kind.is_terminal();
    let params = {
        let mut run_event_notification = RunEventNotification::new(record.run_id.clone(), event);
        run_event_notification.result = result;
        run_event_notification
    };
    let params = match serde_json::to_value(params) {
        Ok(params) => params,
        Err(error) => {
            tracing::warn!(%error, run_id = %record.run_id, seq, "an event could not be serialized");
            return;
        }
    };
    let bytes = serde_json::to_vec(&params).map_or(0, |bytes| bytes.len());
    let note = Arc::new(Notification::new(RUN_EVENT, params));
    let (sent, lagged) = record.deliver(seq, note, bytes, terminal);
    counters.delivered(sent, lagged);
}

fn lost_event(record: &RunRecord, seq: u64, result: &RunResult) -> RunEvent {
    let error = result.error.clone().unwrap_or_else(|| {
        keel_protocol::RunError::new(
            keel_protocol::ErrorSource::Kernel,
            keel_protocol::RunErrorCode::KernelLost,
            "the run's event stream ended without a terminal event",
        )
    });
    let kind = match (result.state, &result.message) {
        (RunState::Settled, Some(message)) => RunEventKind::RunSettled {
            message: message.clone(),
        },
        (RunState::Cancelled, _) => RunEventKind::RunCancelled {
            reason: "cancelled".into(),
        },
        _ => RunEventKind::RunFailed { error },
    };
    RunEvent::new(
        seq,
        record.run_id.clone(),
        record.session_id.clone(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            }),
        kind,
    )
}

fn seq_of(note: &Notification) -> Option<u64> {
    note.params.get("event")?.get("seq")?.as_u64()
}
