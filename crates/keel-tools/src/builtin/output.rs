//! Bounded collection of a command's combined output, for `bash`.
//!
//! Chunks from stdout and stderr are forwarded as progress and appended in
//! arrival order. Memory stays bounded: everything is kept until the output
//! passes [`MAX_BYTES`]; then it is spilled to a log file in the temporary
//! directory, later chunks go to that file, and only a rolling tail of
//! `2 * MAX_BYTES` bytes stays in memory. Since the tail always holds more
//! than [`MAX_BYTES`], the (possibly cut) first line of the tail is never
//! shown. Line counts cover the whole output, not only the tail.
//!
//! Three bounds keep a flood (`yes`) from filling the disk or the host's
//! event stream ([`Limits`]): the log file stops growing at its cap and ends
//! with a marker saying so; progress stops being streamed past its cap (the
//! result and the log still get everything up to their bounds); and a
//! command whose output rate stays above the flood rate for consecutive
//! one-second windows is reported [`Collector::flooded`], which `bash`
//! answers by killing it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::tool::ProgressSink;
use crate::truncate::{MAX_BYTES, MAX_LINES, truncate_tail};

/// Bytes of output kept in memory once spilled.
const TAIL_BYTES: usize = 2 * MAX_BYTES;

/// The length of one window of the flood check.
const FLOOD_WINDOW: Duration = Duration::from_secs(1);

/// The bounds of one command's output (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    /// Bytes the log file keeps at most.
    pub log_bytes: u64,
    /// Bytes streamed as progress at most.
    pub progress_bytes: u64,
    /// Bytes per second above which a window counts as flooded.
    pub flood_rate: u64,
    /// Consecutive flooded windows after which the command is a flood.
    pub flood_windows: u32,
}

/// The flood check's state.
#[derive(Debug)]
struct Rate {
    window_start: Instant,
    window_bytes: u64,
    flooded_windows: u32,
}

/// Which pipe a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// Accumulates output; see the module docs.
pub(super) struct Collector {
    limits: Limits,
    /// Where the full output is logged once it outgrows memory.
    outputs: crate::outputs::OutputStore,
    rate: Rate,
    progress: ProgressSink,
    progress_sent: u64,
    log_written: u64,
    log_capped: bool,
    stdout: Utf8Decoder,
    stderr: Utf8Decoder,
    memory: Vec<u8>,
    total_bytes: usize,
    newlines: usize,
    ends_with_newline: bool,
    log: Log,
}

/// Where the full output goes once it is too big for memory.
enum Log {
    /// Not spilled yet: memory holds everything.
    None,
    /// Spilled: the file holds everything so far.
    Open {
        file: tokio::fs::File,
        path: PathBuf,
        /// The `keel-output:` reference `read` accepts.
        reference: String,
    },
    /// Spilling failed: the full output is lost, only the tail remains.
    Failed,
}

/// The shown output and where the rest is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Collected {
    /// What the model sees (tail, with a truncation note when cut).
    pub text: String,
    /// Whether anything was left out.
    pub truncated: bool,
    /// The log file with the full output, when truncated.
    pub full_output_path: Option<PathBuf>,
    /// The `keel-output:` reference to it, for `read`.
    pub full_output: Option<String>,
}

impl Collected {
    /// Host-facing details of a result.
    pub(crate) fn details(&self, exit_code: Option<i32>) -> Value {
        let mut details = json!({"exit_code": exit_code, "truncated": self.truncated});
        if let Some(path) = &self.full_output_path {
            details["full_output_path"] = json!(path.display().to_string());
        }
        if let Some(reference) = &self.full_output {
            details["full_output"] = json!(reference);
        }
        details
    }
}

impl Collector {
    /// An empty collector streaming progress to `progress`.
    pub(crate) fn new(
        progress: ProgressSink,
        limits: Limits,
        outputs: crate::outputs::OutputStore,
    ) -> Self {
        Self {
            limits,
            outputs,
            rate: Rate {
                window_start: Instant::now(),
                window_bytes: 0,
                flooded_windows: 0,
            },
            progress,
            progress_sent: 0,
            log_written: 0,
            log_capped: false,
            stdout: Utf8Decoder::default(),
            stderr: Utf8Decoder::default(),
            memory: Vec::new(),
            total_bytes: 0,
            newlines: 0,
            ends_with_newline: false,
            log: Log::None,
        }
    }

    /// Adds one chunk from `stream`.
    pub(crate) async fn push(&mut self, stream: Stream, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.report(stream, bytes);
        self.measure(bytes.len());
        self.total_bytes += bytes.len();
        self.newlines += bytes.iter().filter(|&&byte| byte == b'\n').count();
        self.ends_with_newline = bytes.last() == Some(&b'\n');
        self.memory.extend_from_slice(bytes);
        match &mut self.log {
            Log::None if self.total_bytes > MAX_BYTES => self.spill().await,
            Log::Open { .. } => self.append_to_log(bytes).await,
            Log::None | Log::Failed => {}
        }
        if !matches!(self.log, Log::None) && self.memory.len() > TAIL_BYTES {
            let excess = self.memory.len() - TAIL_BYTES;
            self.memory.drain(..excess);
        }
    }

    /// Whether the output has been a flood: above the flood rate for
    /// `flood_windows` consecutive windows.
    pub(crate) fn flooded(&self) -> bool {
        self.rate.flooded_windows >= self.limits.flood_windows
    }

    /// Counts `len` bytes into the flood check's windows.
    fn measure(&mut self, len: usize) {
        let now = Instant::now();
        let elapsed = now.duration_since(self.rate.window_start);
        if elapsed >= FLOOD_WINDOW {
            let windows = u32::try_from(elapsed.as_secs()).unwrap_or(u32::MAX);
            let flooded = windows == 1 && self.rate.window_bytes > self.limits.flood_rate;
            self.rate.flooded_windows = if flooded {
                self.rate.flooded_windows.saturating_add(1)
            } else {
                0
            };
            self.rate.window_start = now;
            self.rate.window_bytes = 0;
        }
        self.rate.window_bytes = self.rate.window_bytes.saturating_add(len as u64);
    }

    /// Appends to the open log, up to its cap; past it, writes the marker once.
    async fn append_to_log(&mut self, bytes: &[u8]) {
        let Log::Open { file, path, .. } = &mut self.log else {
            return;
        };
        if self.log_capped {
            return;
        }
        let room = self.limits.log_bytes.saturating_sub(self.log_written);
        let (kept, capped) = if bytes.len() as u64 > room {
            (&bytes[..usize::try_from(room).unwrap_or(bytes.len())], true)
        } else {
            (bytes, false)
        };
        let mut result = file.write_all(kept).await;
        self.log_written += kept.len() as u64;
        if capped && result.is_ok() {
            let marker = format!(
                "\n[keel: the log is capped at {} bytes; later output was not kept]\n",
                self.limits.log_bytes
            );
            result = file.write_all(marker.as_bytes()).await;
            self.log_capped = true;
        }
        if let Err(error) = result {
            tracing::warn!(path = %path.display(), %error, "writing the bash log failed");
            self.log = Log::Failed;
        }
    }

    /// The final output: the tail, with a note naming the full log if cut.
    pub(crate) async fn finish(mut self) -> Collected {
        let text = String::from_utf8_lossy(&self.memory).into_owned();
        let tail = truncate_tail(&text, MAX_LINES, MAX_BYTES);
        let truncated = tail.truncated || !matches!(self.log, Log::None);
        if truncated && matches!(self.log, Log::None) {
            self.spill().await;
        }
        let full_output_path = match &mut self.log {
            Log::Open { file, path, .. } => match file.flush().await {
                Ok(()) => Some(path.clone()),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "flushing the bash log failed");
                    None
                }
            },
            Log::None | Log::Failed => None,
        };
        let full_output = match (&self.log, &full_output_path) {
            (Log::Open { reference, .. }, Some(_)) => Some(reference.clone()),
            _ => None,
        };
        let shown = tail.content.strip_suffix('\n').unwrap_or(&tail.content);
        let text = if truncated {
            format!("{}\n{shown}", self.note(&tail, full_output_path.as_ref()))
        } else {
            shown.to_owned()
        };
        Collected {
            text,
            truncated,
            full_output_path,
            full_output,
        }
    }

    /// The truncation note that precedes the shown tail.
    fn note(&self, tail: &crate::truncate::Truncated, path: Option<&PathBuf>) -> String {
        let total_lines =
            self.newlines + usize::from(self.total_bytes > 0 && !self.ends_with_newline);
        let shown = if tail.last_line_partial {
            format!(
                "the last {} bytes of line {total_lines}",
                tail.content.len()
            )
        } else {
            format!("the last {} lines of {total_lines}", tail.shown_lines)
        };
        let full = match &self.log {
            Log::Open { reference, .. } if path.is_some() => {
                format!("Full output: read path `{reference}`")
            }
            _ => "The full output could not be saved".to_owned(),
        };
        format!("[Output truncated: showing {shown}. {full}]")
    }

    /// Streams a chunk as progress, decoded as UTF-8 (lossily).
    fn report(&mut self, stream: Stream, bytes: &[u8]) {
        let decoder = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        let text = decoder.decode(bytes);
        if text.is_empty() || self.progress_sent >= self.limits.progress_bytes {
            return;
        }
        self.progress_sent += text.len() as u64;
        self.progress.send(stream.name(), text);
        if self.progress_sent >= self.limits.progress_bytes {
            self.progress.send(
                stream.name(),
                format!(
                    "\n[keel: progress stops after {} bytes; the result keeps the tail]\n",
                    self.limits.progress_bytes
                ),
            );
        }
    }

    /// Starts the log file with everything in memory (all output so far).
    async fn spill(&mut self) {
        let Some((reference, path)) = self.outputs.reserve("bash") else {
            self.log = Log::Failed;
            return;
        };
        self.log = match create_log(&path).await {
            Ok(file) => Log::Open {
                file,
                path,
                reference,
            },
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "creating the bash log failed");
                Log::Failed
            }
        };
        let memory = std::mem::take(&mut self.memory);
        self.append_to_log(&memory).await;
        self.memory = memory;
    }
}

async fn create_log(path: &PathBuf) -> std::io::Result<tokio::fs::File> {
    tokio::fs::File::create(path).await
}

/// Decodes a byte stream chunk by chunk without splitting a character
/// across chunks; invalid bytes become U+FFFD.
#[derive(Debug, Default)]
struct Utf8Decoder {
    pending: Vec<u8>,
}

impl Utf8Decoder {
    fn decode(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let keep = incomplete_suffix(&self.pending);
        let rest = self.pending.split_off(self.pending.len() - keep);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        text
    }
}

/// Length of an incomplete UTF-8 sequence at the end of `bytes`.
fn incomplete_suffix(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 != 0x80 {
            let width = match byte {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            return if width > back { back } else { 0 };
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store the tests' logs go to; alive for the whole test binary,
    /// so a test reads its log after its collector is gone.
    static OUTPUTS: std::sync::LazyLock<crate::outputs::OutputStore> =
        std::sync::LazyLock::new(crate::outputs::OutputStore::default);

    #[test]
    fn decoder_keeps_split_characters_whole() {
        let mut decoder = Utf8Decoder::default();
        let bytes = "héllo €".as_bytes();
        let mut text = String::new();
        for byte in bytes {
            text.push_str(&decoder.decode(std::slice::from_ref(byte)));
        }
        assert_eq!(text, "héllo €");
        assert_eq!(decoder.decode(&[0xff, b'a']), "\u{fffd}a");
    }

    const GENEROUS: Limits = Limits {
        log_bytes: 1 << 30,
        progress_bytes: 1 << 30,
        flood_rate: 1 << 40,
        flood_windows: 2,
    };

    #[tokio::test]
    async fn small_output_stays_in_memory() {
        let mut collector = Collector::new(ProgressSink::discard(), GENEROUS, OUTPUTS.clone());
        collector.push(Stream::Stdout, b"out\n").await;
        collector.push(Stream::Stderr, b"err\n").await;
        let collected = collector.finish().await;
        assert_eq!(collected.text, "out\nerr");
        assert!(!collected.truncated);
        assert_eq!(collected.full_output_path, None);
    }

    #[tokio::test]
    async fn big_output_spills_and_keeps_a_bounded_tail() {
        let mut collector = Collector::new(ProgressSink::discard(), GENEROUS, OUTPUTS.clone());
        let mut expected = Vec::new();
        for n in 0..20_000 {
            let line = format!("line {n}\n");
            expected.extend_from_slice(line.as_bytes());
            collector.push(Stream::Stdout, line.as_bytes()).await;
            assert!(collector.memory.len() <= TAIL_BYTES + line.len());
        }
        let collected = collector.finish().await;
        let path = collected.full_output_path.clone().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        std::fs::remove_file(&path).unwrap();
        assert!(
            collected
                .text
                .starts_with("[Output truncated: showing the last 2000 lines of 20000.")
        );
        assert!(collected.text.ends_with("line 19999"));
    }

    #[tokio::test]
    async fn the_log_stops_at_its_cap_with_a_marker() {
        let limits = Limits {
            log_bytes: 200_000,
            ..GENEROUS
        };
        let mut collector = Collector::new(ProgressSink::discard(), limits, OUTPUTS.clone());
        let line = [b'x'; 999]
            .iter()
            .chain(b"\n")
            .copied()
            .collect::<Vec<u8>>();
        for _ in 0..1000 {
            collector.push(Stream::Stdout, &line).await;
        }
        let collected = collector.finish().await;
        let path = collected.full_output_path.clone().unwrap();
        let log = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let marker = "\n[keel: the log is capped at 200000 bytes; later output was not kept]\n";
        assert_eq!(log.len(), 200_000 + marker.len());
        assert!(log.ends_with(marker.as_bytes()));
        assert!(collected.text.contains("of 1000."), "{}", collected.text);
    }

    #[tokio::test]
    async fn progress_stops_at_its_cap() {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let limits = Limits {
            progress_bytes: 10,
            ..GENEROUS
        };
        let mut collector = Collector::new(ProgressSink::new("c", sender), limits, OUTPUTS.clone());
        for _ in 0..5 {
            collector.push(Stream::Stdout, b"abcdef\n").await;
        }
        let mut streamed = String::new();
        while let Ok((_, progress)) = receiver.try_recv() {
            streamed.push_str(&progress.data);
        }
        assert!(streamed.starts_with("abcdef\nabcdef\n\n[keel: progress stops after 10 bytes"));
        assert_eq!(collector.finish().await.text.lines().count(), 5);
    }

    #[tokio::test]
    async fn a_sustained_rate_is_a_flood_and_a_burst_is_not() {
        let limits = Limits {
            flood_rate: 1000,
            flood_windows: 2,
            ..GENEROUS
        };
        let mut collector = Collector::new(ProgressSink::discard(), limits, OUTPUTS.clone());
        collector.push(Stream::Stdout, &[b'x'; 5000]).await;
        assert!(!collector.flooded(), "one burst");
        for _ in 0..3 {
            collector.rate.window_start -= FLOOD_WINDOW;
            collector.push(Stream::Stdout, &[b'x'; 5000]).await;
        }
        assert!(collector.flooded());
        collector.rate.window_start -= 3 * FLOOD_WINDOW;
        collector.push(Stream::Stdout, b"quiet").await;
        assert!(!collector.flooded(), "a pause resets the check");
        let _ = collector.finish().await;
    }
}
