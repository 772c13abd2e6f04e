//! Streaming a provider's server-sent events over HTTP, for every adapter.
//!
//! [`drive`] sends the request, classifies a non-success response, checks
//! that a success is an event stream, decodes the SSE stream and feeds each
//! event to the adapter's [`WireFormat`] parser, forwarding what it
//! produces. It owns the rules every adapter shares:
//! - cancellation ends the stream with `cancelled`, and dropping the stream
//!   abandons the request at once;
//! - time bounds the wait for *progress*, never the length of a response:
//!   connecting has the connect timeout (30 s by default); the first model
//!   output — response headers, then the first event the parser turns into
//!   output — must come within the first-byte timeout of sending (300 s);
//!   after it, each gap between outputs is bounded by the idle timeout
//!   (120 s). SSE comments (`: keep-alive`) and events that carry no
//!   output (pings) are not progress: a stream of nothing but keep-alives
//!   ends with `timeout` as surely as a silent one, and one that keeps
//!   producing output may stream for as long as it takes;
//! - a success whose content type is not `text/event-stream` (an HTML page
//!   from a proxy, a JSON body) is a `protocol` error quoting its first
//!   bytes;
//! - transport failures are classified by cause (`transport.rs`): a request
//!   that cannot be built is `invalid_request` (never retried), a refused
//!   connection or a DNS or TLS failure is retried at most once;
//! - a stream that ends or breaks before the parser saw its terminal event
//!   ends with `stream_dropped`.
//!
//! Request bodies are streamed as they are serialised (`body.rs`), so a
//! long history is never held a second time as JSON while it is sent.

pub(crate) mod body;
mod transport;

use std::collections::VecDeque;
use std::time::Duration;

use futures::StreamExt;
use keel_protocol::{ProviderError, ProviderErrorKind, ProviderEvent};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::ProviderStream;
use crate::errors::{classify_status, preview, retry_after};
use crate::sse::{SseDecoder, SseEvent};

/// The content type every adapter's API promises for a streamed response.
const EVENT_STREAM: &str = "text/event-stream";

/// How many bytes of an unexpected body an error quotes.
const PREVIEW_BYTES: usize = 200;

/// Time limits for one streamed request: each bounds a wait for progress,
/// none the length of a response that keeps producing output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpTimeouts {
    /// To open the connection, TLS included (`connect_timeout_sec`).
    pub connect: Duration,
    /// From sending the request until its first model output: the response
    /// headers, then the first event the parser turns into output
    /// (`first_byte_timeout_sec`). Covers a slow model reading a long prompt.
    pub first_byte: Duration,
    /// Between two model outputs once the first came (`idle_timeout_sec`);
    /// keep-alive comments and pings do not reset it.
    pub idle: Duration,
}

impl Default for HttpTimeouts {
    fn default() -> Self {
        Self::from(crate::config::Waits::default())
    }
}

impl From<crate::config::Waits> for HttpTimeouts {
    fn from(waits: crate::config::Waits) -> Self {
        Self {
            connect: waits.connect,
            first_byte: waits.first_byte,
            idle: waits.idle,
        }
    }
}

/// One provider API's stream format: SSE events in, provider events out.
pub trait WireFormat: Send + 'static {
    /// Handles one SSE event (`event` is its type, `data` its payload).
    /// Returning a `done` or `error` event ends the stream.
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<ProviderEvent>, ProviderError>;

    /// Handles the end of the byte stream; by default a stream that ends
    /// before its terminal event was dropped.
    fn on_end(&mut self) -> Result<Vec<ProviderEvent>, ProviderError> {
        Err(ProviderError::new(
            ProviderErrorKind::StreamDropped,
            "the stream ended before the response was complete",
        ))
    }
}

/// Sends `request` and streams its events through `format`.
pub fn drive<F: WireFormat>(
    request: reqwest::RequestBuilder,
    format: F,
    timeouts: HttpTimeouts,
    cancel: CancellationToken,
) -> ProviderStream {
    let (sender, receiver) = mpsc::channel(64);
    tokio::spawn(async move {
        let terminal = match run(request, format, timeouts, &cancel, &sender).await {
            Ok(()) => return,
            Err(error) => ProviderEvent::Error { error },
        };
        let _ = sender.send(terminal).await;
    });
    futures::stream::unfold(receiver, |mut receiver| async move {
        let event = receiver.recv().await?;
        Some((event, receiver))
    })
    .boxed()
}

async fn run<F: WireFormat>(
    request: reqwest::RequestBuilder,
    mut format: F,
    timeouts: HttpTimeouts,
    cancel: &CancellationToken,
    sender: &mpsc::Sender<ProviderEvent>,
) -> Result<(), ProviderError> {
    // The first output is due within `first_byte` of sending; each later
    // one within `idle` of the one before. Only output moves the deadline.
    let mut deadline = due(timeouts.first_byte);
    let mut progressed = false;
    let response = tokio::select! {
        () = cancel.cancelled() => return Err(cancelled()),
        () = sender.closed() => return Ok(()),
        response = tokio::time::timeout_at(deadline, request.send()) => match response {
            Err(_) => return Err(ProviderError::new(
                ProviderErrorKind::Timeout,
                format!("no response within {}", shown(timeouts.first_byte)),
            )),
            Ok(Err(error)) => return Err(transport::classify(&error, timeouts.connect)),
            Ok(Ok(response)) => response,
        },
    };
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        let delay = retry_after(response.headers());
        let body = tokio::select! {
            () = cancel.cancelled() => return Err(cancelled()),
            body = tokio::time::timeout(timeouts.idle, response.text()) => body.ok().and_then(Result::ok).unwrap_or_default(),
        };
        return Err(classify_status(status, &body, delay));
    }
    if let Some(content_type) = unexpected_content_type(&response) {
        let mut body = response.bytes_stream();
        let mut head = Vec::new();
        while head.len() < PREVIEW_BYTES {
            let next = tokio::select! {
                () = cancel.cancelled() => return Err(cancelled()),
                next = tokio::time::timeout(timeouts.idle, body.next()) => next,
            };
            match next {
                Ok(Some(Ok(bytes))) => head.extend_from_slice(&bytes),
                _ => break,
            }
        }
        let quoted = if head.is_empty() {
            "an empty body".to_owned()
        } else {
            preview(&head, PREVIEW_BYTES)
        };
        return Err(ProviderError::new(
            ProviderErrorKind::Protocol,
            format!(
                "the provider answered {status} with content type `{content_type}`, not an event stream: {quoted}"
            ),
        ));
    }
    let mut body = response.bytes_stream();
    let mut decoder = SseDecoder::default();
    let mut pending: VecDeque<SseEvent> = VecDeque::new();
    loop {
        let mut ended = false;
        let produced = match pending.pop_front() {
            Some(event) => format.on_event(&event.event, &event.data)?,
            None => {
                let next = tokio::select! {
                    () = cancel.cancelled() => return Err(cancelled()),
                    () = sender.closed() => return Ok(()),
                    next = tokio::time::timeout_at(deadline, body.next()) => next,
                };
                match next {
                    Err(_) => return Err(no_progress(progressed, timeouts)),
                    Ok(Some(Ok(bytes))) => {
                        decoder.push(&bytes, &mut pending);
                        continue;
                    }
                    Ok(Some(Err(error))) => return Err(transport::broken_stream(&error)),
                    Ok(None) => {
                        ended = true;
                        format.on_end()?
                    }
                }
            }
        };
        if !produced.is_empty() {
            progressed = true;
            deadline = due(timeouts.idle);
        }
        let mut finished = false;
        for event in produced {
            finished |= matches!(
                event,
                ProviderEvent::Done { .. } | ProviderEvent::Error { .. }
            );
            if sender.send(event).await.is_err() {
                return Ok(());
            }
        }
        if finished {
            return Ok(());
        }
        if ended {
            return Err(dropped());
        }
    }
}

/// The instant `wait` from now; a wait beyond a year counts as a year (an
/// `Instant` cannot hold every `Duration`).
fn due(wait: Duration) -> Instant {
    const YEAR: Duration = Duration::from_secs(365 * 86_400);
    Instant::now() + wait.min(YEAR)
}

/// The error for a stream whose next output did not come in time.
fn no_progress(progressed: bool, timeouts: HttpTimeouts) -> ProviderError {
    let message = if progressed {
        format!(
            "the stream made no progress for {} (idle_timeout_sec; keep-alive comments do \
             not count)",
            shown(timeouts.idle)
        )
    } else {
        format!(
            "no model output within {} of the request (first_byte_timeout_sec; keep-alive \
             comments do not count)",
            shown(timeouts.first_byte)
        )
    };
    ProviderError::new(ProviderErrorKind::Timeout, message)
}

fn dropped() -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::StreamDropped,
        "the stream ended before the response was complete",
    )
}

fn cancelled() -> ProviderError {
    ProviderError::new(ProviderErrorKind::Cancelled, "request cancelled")
}

/// The response's content type when it is present and not an event stream.
/// A response without one is read as the stream it should be.
fn unexpected_content_type(response: &reqwest::Response) -> Option<String> {
    let value = response.headers().get(reqwest::header::CONTENT_TYPE)?;
    let text = String::from_utf8_lossy(value.as_bytes());
    let essence = text.split(';').next().unwrap_or_default().trim();
    (!essence.eq_ignore_ascii_case(EVENT_STREAM)).then(|| preview(text.as_bytes(), PREVIEW_BYTES))
}

/// A duration as people read it in an error: `60 s`, `0.3 s`.
fn shown(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

/// Feeds a whole SSE transcript (bytes as the server sent them, in `chunks`)
/// through `format`; for tests, fuzzing and benchmarks of parsers.
pub async fn replay<F: WireFormat>(chunks: Vec<Vec<u8>>, mut format: F) -> Vec<ProviderEvent> {
    let mut decoder = SseDecoder::default();
    let mut events: VecDeque<SseEvent> = VecDeque::new();
    for chunk in &chunks {
        decoder.push(chunk, &mut events);
    }
    let mut out = Vec::new();
    loop {
        let next = events.pop_front();
        let ended = next.is_none();
        let produced = match next {
            None => format.on_end(),
            Some(event) => format.on_event(&event.event, &event.data),
        };
        match produced {
            Ok(produced) => {
                let finished = produced.iter().any(|event| {
                    matches!(
                        event,
                        ProviderEvent::Done { .. } | ProviderEvent::Error { .. }
                    )
                });
                out.extend(produced);
                if finished {
                    return out;
                }
                if ended {
                    out.push(ProviderEvent::Error { error: dropped() });
                    return out;
                }
            }
            Err(error) => {
                out.push(ProviderEvent::Error { error });
                return out;
            }
        }
    }
}
