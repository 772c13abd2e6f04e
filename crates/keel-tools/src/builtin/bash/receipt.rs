//! The `bash` side of command receipts ([`crate::receipt`]): Keel's process
//! records the spawn, tees the output into the call's `.out` file and, once
//! the command is reaped, records its ending atomically (renamed into
//! place, not fsynced: see [`crate::receipt`]). A receipt that cannot be
//! written costs only recoverability (the call then counts as interrupted
//! after a crash), never the command's result.

use keel_protocol::ToolErrorCode;
use tokio::io::AsyncWriteExt;

use super::Ending;
use crate::builtin::output::{Collector, Stream};
use crate::builtin::process::Process;
use crate::receipt::{CallReceipt, ExitReceipt, Receipts, Started, now_ms, process_start_time};
use crate::tool::{ToolError, ToolOutput};

/// Where a command's output goes: the collector, and the receipt's `.out`.
pub(super) struct Sink {
    pub(super) collector: Collector,
    pub(super) recorder: Option<Recorder>,
}

impl Sink {
    /// Adds one chunk from `stream` to both: the receipt first, so output
    /// a host has seen streamed is already in the `.out` file.
    pub(super) async fn push(&mut self, stream: Stream, bytes: &[u8]) {
        if let Some(recorder) = &mut self.recorder {
            recorder.push(bytes).await;
        }
        self.collector.push(stream, bytes).await;
    }
}

/// One call's receipt being written.
pub(super) struct Recorder {
    receipts: Receipts,
    key: String,
    out: Option<tokio::fs::File>,
    written: u64,
    cap: u64,
}

impl Recorder {
    /// Writes the call's `.started` receipt for `process` and opens its
    /// `.out`; `None` (receipts off for this call) when that fails.
    pub(super) fn start(call: &CallReceipt, process: &Process, cap: u64) -> Option<Self> {
        let CallReceipt { receipts, key } = call;
        let pid = process.pid();
        let started = Started {
            pid,
            pgid: pid,
            start_time: pid.and_then(process_start_time),
            started_ms: now_ms(),
        };
        let opened = receipts
            .write_started(key, &started)
            .and_then(|()| receipts.create_out(key));
        match opened {
            Ok(out) => Some(Self {
                receipts: receipts.clone(),
                key: key.clone(),
                out: Some(tokio::fs::File::from_std(out)),
                written: 0,
                cap,
            }),
            Err(error) => {
                tracing::warn!(dir = %receipts.dir().display(), %error, "writing a command receipt failed");
                None
            }
        }
    }

    async fn push(&mut self, bytes: &[u8]) {
        let Some(out) = &mut self.out else { return };
        let room = self.cap.saturating_sub(self.written);
        let kept = bytes
            .get(..usize::try_from(room).unwrap_or(usize::MAX).min(bytes.len()))
            .unwrap_or_default();
        if kept.is_empty() {
            return;
        }
        // Flushed: the chunk is in the file (the page cache) when this
        // returns, so a crash of Keel right after loses none of it.
        let written = async {
            out.write_all(kept).await?;
            out.flush().await
        }
        .await;
        if let Err(error) = written {
            tracing::warn!(%error, "writing a command's receipt output failed");
            self.out = None;
            return;
        }
        self.written += kept.len() as u64;
    }

    /// Records how the command ended and the result it gives.
    pub(super) async fn finish(
        mut self,
        ending: &str,
        exit_code: Option<i32>,
        result: &Result<ToolOutput, ToolError>,
    ) {
        let Some(mut out) = self.out.take() else {
            return;
        };
        // Every chunk was flushed as it came; the `.exit` follows the output.
        if let Err(error) = out.flush().await {
            tracing::warn!(%error, "writing a command's receipt output failed");
            return;
        }
        let error: Option<(ToolErrorCode, String)> = result
            .as_ref()
            .err()
            .map(|error| (error.code, error.message.clone()));
        let exit = ExitReceipt {
            ending: ending.to_owned(),
            exit_code,
            error,
            output_path: self.receipts.out_path(&self.key),
            output_bytes: self.written,
            ended_ms: now_ms(),
        };
        let receipts = self.receipts.clone();
        let key = self.key.clone();
        let written = tokio::task::spawn_blocking(move || receipts.write_exit(&key, &exit)).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "writing a command's exit receipt failed"),
            Err(error) => tracing::warn!(%error, "writing a command's exit receipt failed"),
        }
    }
}

/// How `ending` is named in the receipt, and its exit code.
pub(super) fn describe(ending: &Ending) -> (&'static str, Option<i32>) {
    match ending {
        Ending::Exited(status) => ("exited", status.code()),
        Ending::NotStarted(_) => ("not_started", None),
        Ending::WaitFailed(_) => ("wait_failed", None),
        Ending::TimedOut => ("timed_out", None),
        Ending::Cancelled => ("cancelled", None),
        Ending::Flooded => ("flooded", None),
    }
}
