//! `keel rpc`: one JSON-RPC 2.0 object per line on stdin, one per line on
//! stdout (responses and notifications, written by one writer task); logs
//! never go to stdout.
//!
//! A line longer than the limit is answered with `message_too_large` and
//! skipped without being read into memory whole. When stdin ends (or stdout
//! is gone), nothing more is answered: the requests in flight are dropped,
//! every run this client started is cancelled, and [`serve`] returns once
//! each has settled.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use keel_host::broker::{Broker, Tenant};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::dispatch::{self, Dispatch, WRITER_QUEUE};
use crate::frames::{Frame, LineReader};

/// Bounds of a stdio client.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StdioLimits {
    /// The longest line read.
    pub max_message_bytes: usize,
    /// Requests in flight before reading waits.
    pub max_in_flight: usize,
}

impl Default for StdioLimits {
    fn default() -> Self {
        Self {
            max_message_bytes: crate::DEFAULT_MAX_MESSAGE_BYTES,
            max_in_flight: crate::MAX_IN_FLIGHT,
        }
    }
}

/// Serves one local client (tenant `local`) over `input` and `output`
/// until `input` ends or `output` fails; returns once every run the client
/// started has settled (they are cancelled first).
pub async fn serve<R, W>(broker: &Broker, input: R, output: W, limits: StdioLimits)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let connection = broker.connect(Tenant::local());
    let caller = connection.caller();
    let (out, lines) = mpsc::channel(WRITER_QUEUE);
    let closed = Arc::new(AtomicBool::new(false));
    let mut writer = tokio::spawn(write_lines(output, lines, Arc::clone(&closed)));
    let pump = dispatch::pump(connection, out.clone());
    let mut dispatch = Dispatch::new(caller.clone(), out, limits.max_in_flight);
    let mut input = LineReader::new(BufReader::new(input), limits.max_message_bytes);
    let mut writer_done = false;
    loop {
        let slot = tokio::select! {
            slot = dispatch.slot() => slot,
            _ = &mut writer => { writer_done = true; break }
        };
        let Some(slot) = slot else { break };
        let frame = tokio::select! {
            frame = input.next() => frame,
            _ = &mut writer => { writer_done = true; break }
        };
        match frame {
            Ok(Frame::Line(line)) => dispatch.frame(&line, slot),
            Ok(Frame::TooLarge) => dispatch.too_large(limits.max_message_bytes, slot),
            Ok(Frame::End) => break,
            Err(error) => {
                tracing::warn!(%error, "reading standard input failed; ending as if it closed");
                break;
            }
        }
    }
    tracing::debug!("standard input closed: cancelling this client's runs");
    closed.store(true, Ordering::SeqCst);
    dispatch.close().await;
    // The connection (in the pump) must outlive the wait: dropping it
    // forgets which runs it started. Its notifications are discarded.
    caller.cancel_started();
    caller.settled().await;
    pump.abort();
    let _ = pump.await;
    // Every sender is gone: the writer ends after the line it may be
    // writing, unless the reader of stdout stopped reading.
    if !writer_done
        && tokio::time::timeout(WRITER_GRACE, &mut writer)
            .await
            .is_err()
    {
        writer.abort();
    }
}

/// How long the writer may take to finish its last line at the end.
const WRITER_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Writes each line and a newline, flushing after each; stops at the first
/// failure, and discards every line once `closed` is set.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut output: W,
    mut lines: mpsc::Receiver<String>,
    closed: Arc<AtomicBool>,
) {
    while let Some(line) = lines.recv().await {
        if closed.load(Ordering::SeqCst) {
            // Keep draining, so nothing waits on a full queue.
            continue;
        }
        let written = async {
            output.write_all(line.as_bytes()).await?;
            output.write_all(b"\n").await?;
            output.flush().await
        };
        if let Err(error) = written.await {
            tracing::warn!(%error, "writing standard output failed; ending");
            return;
        }
    }
}
