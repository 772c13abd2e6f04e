//! One client's frames in, its answers out; the same for every transport.
//!
//! Each request runs in its own task (a `run/result` that waits must not
//! hold up the rest), holding one of a bounded number of permits: when a
//! client has [`crate::MAX_IN_FLIGHT`] requests in flight, its transport
//! stops reading until one finishes. Answers and notifications go to the
//! transport's single writer through a bounded queue of serialized lines.
//!
//! # Cancel safety
//!
//! [`Dispatch::close`] aborts the requests still in flight: each broker
//! method either took effect or did not (see `keel_host::broker`).

use std::sync::Arc;

use keel_host::broker::{Caller, Connection};
use keel_protocol::rpc::{ErrorKind, Incoming, Notification, Response, RpcError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};

/// The lines waiting for a client's writer.
pub(crate) const WRITER_QUEUE: usize = 64;

/// Requests in flight for one client.
pub(crate) struct Dispatch {
    caller: Caller,
    out: mpsc::Sender<String>,
    tasks: JoinSet<()>,
    permits: Arc<Semaphore>,
}

impl Dispatch {
    /// Requests of `caller`, answered on `out`, at most `in_flight` at once.
    pub(crate) fn new(caller: Caller, out: mpsc::Sender<String>, in_flight: usize) -> Self {
        Self {
            caller,
            out,
            tasks: JoinSet::new(),
            permits: Arc::new(Semaphore::new(in_flight.max(1))),
        }
    }

    /// A slot for the next frame; waits while the client has the most
    /// requests in flight. Cancel safe.
    pub(crate) async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).acquire_owned().await.ok()
    }

    /// Whether a slot is free now.
    pub(crate) fn has_slot(&self) -> bool {
        self.permits.available_permits() > 0
    }

    /// Handles one frame: `initialize` is applied at once, any other
    /// request in its own task, and answered (a notification from the
    /// client is applied, not answered); anything else is answered with its
    /// error at once.
    pub(crate) fn frame(&mut self, frame: &[u8], slot: OwnedSemaphorePermit) {
        while self.tasks.try_join_next().is_some() {}
        match Incoming::parse(frame) {
            Incoming::Invalid(response) => self.answer(response, slot),
            Incoming::Request(request) if request.method == "initialize" => {
                // Applied before the next frame is read: a client may send
                // its first requests right behind `initialize` without
                // waiting, and they must not race it (and be refused with
                // `not_initialized`). `initialize` never waits, so this
                // future is ready on its first poll.
                let call = self.caller.call(&request.method, request.params.clone());
                match futures::FutureExt::now_or_never(call) {
                    Some(outcome) => {
                        if let Some(id) = request.id {
                            let response = match outcome {
                                Ok(result) => Response::ok(Some(id), result),
                                Err(error) => Response::error(Some(id), error),
                            };
                            self.answer(response, slot);
                        }
                    }
                    None => self.spawn(request, slot),
                }
            }
            Incoming::Request(request) => self.spawn(request, slot),
        }
    }

    /// Applies `request` in its own task and answers it (unless it is a
    /// notification).
    fn spawn(&mut self, request: keel_protocol::rpc::Request, slot: OwnedSemaphorePermit) {
        let out = self.out.clone();
        let caller = self.caller.clone();
        self.tasks.spawn(async move {
            let outcome = caller.call(&request.method, request.params).await;
            if let Some(id) = request.id {
                let response = match outcome {
                    Ok(result) => Response::ok(Some(id), result),
                    Err(error) => Response::error(Some(id), error),
                };
                send(&out, &response).await;
            }
            drop(slot);
        });
    }

    /// Answers a frame over `limit` bytes with `message_too_large`.
    pub(crate) fn too_large(&mut self, limit: usize, slot: OwnedSemaphorePermit) {
        self.answer(too_large(limit), slot);
    }

    /// Answers a frame that was not read as a request with `response`.
    pub(crate) fn answer(&mut self, response: Response, slot: OwnedSemaphorePermit) {
        let out = self.out.clone();
        self.tasks.spawn(async move {
            send(&out, &response).await;
            drop(slot);
        });
    }

    /// Aborts the requests still in flight and waits until they are gone.
    pub(crate) async fn close(mut self) {
        self.tasks.shutdown().await;
    }
}

/// The `message_too_large` answer (id `null`: the frame was not read).
pub(crate) fn too_large(limit: usize) -> Response {
    Response::error(
        None,
        RpcError::new(
            ErrorKind::MessageTooLarge,
            format!("the message is larger than {limit} bytes; it was not read"),
        )
        .with("limit_bytes", limit),
    )
}

/// Forwards `connection`'s notifications to `out` until either ends.
pub(crate) fn pump(mut connection: Connection, out: mpsc::Sender<String>) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(notification) = connection.notification().await {
            let Some(line) = line(&notification) else {
                continue;
            };
            if out.send(line).await.is_err() {
                break;
            }
        }
    })
}

/// Serializes and queues one answer; a closed queue means the client is
/// gone, and the answer with it.
async fn send(out: &mpsc::Sender<String>, response: &Response) {
    match serde_json::to_string(response) {
        Ok(line) => {
            let _ = out.send(line).await;
        }
        Err(error) => tracing::error!(%error, "a response could not be serialized"),
    }
}

fn line(notification: &Notification) -> Option<String> {
    serde_json::to_string(notification)
        .map_err(|error| tracing::error!(%error, "a notification could not be serialized"))
        .ok()
}
