//! Per-call receipts of `bash` commands, in a session's private journal
//! directory (SPEC §8): what lets a resumed run tell a command that
//! finished before a crash from one the crash cut short.
//!
//! Keel's own process writes them — it spawns and reaps the command — never
//! a wrapper inside the sandbox: a directory the command could write would
//! let it forge its own receipt. For each call, named by the SHA-256 of its
//! call id (ids are chosen by the model, never used as file names):
//!
//! - `<hash>.started`: at spawn, the process id, its process group, the
//!   process's start time (`/proc/<pid>/stat` field 22) and the wall time;
//! - `<hash>.out`: the command's combined output as it arrives, up to the
//!   tool's log cap;
//! - `<hash>.exit`: after the command is reaped and its output written, its
//!   exit status (or how it was stopped) and what its ToolResult needs.
//!
//! `.started` and `.exit` are written to a temporary file and renamed, so a
//! crash of Keel never leaves one half-written. They are not fsynced: they
//! serve a resume after Keel's process died (`kill -9`, OOM), when the page
//! cache survives; after a power loss the command's own effects on the
//! workspace were not fsynced either, so a durable receipt would vouch for
//! effects that may be gone — and three fsyncs per command would double a
//! run's fsync count. A receipt a power loss tore or emptied does not parse
//! and counts as absent.
//!
//! Invariant: an `.exit` exists only for a command that ended; a crash
//! between the command's exit and the rename leaves none, and the command
//! then counts as interrupted (its outcome unknown).

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel_protocol::ToolErrorCode;
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::tool::{ToolError, ToolOutput};
use crate::truncate::{MAX_BYTES, MAX_LINES, truncate_tail};

/// How long [`Receipts::kill_leftover`] waits for a killed group to go.
const GONE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a command's `.started` receipt records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The shell's process id, when Keel spawned it directly (`None` for a
    /// sandboxed call: its PID namespace dies with Keel's holder).
    pub pid: Option<i32>,
    /// The process group the command runs in (its shell leads it).
    pub pgid: Option<i32>,
    /// The leader's start time in clock ticks since boot
    /// (`/proc/<pid>/stat` field 22): tells it from a later process that
    /// reused the pid.
    pub start_time: Option<u64>,
    /// When the command started, milliseconds since the Unix epoch.
    pub started_ms: u64,
}

/// What a command's `.exit` receipt records: the ToolResult it would give.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitReceipt {
    /// How it ended, in words (`exited`, `timed_out`, `cancelled`, …).
    pub ending: String,
    /// Its exit code, when it exited with one.
    pub exit_code: Option<i32>,
    /// The result's error code and message, `None` for a success.
    pub error: Option<(ToolErrorCode, String)>,
    /// The `.out` file holding its output.
    pub output_path: PathBuf,
    /// Bytes of output the `.out` file holds.
    pub output_bytes: u64,
    /// When it ended, milliseconds since the Unix epoch.
    pub ended_ms: u64,
}

/// What became of a leftover process group named by a `.started` receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// No `.started` receipt, or it names no process group.
    None,
    /// The group no longer exists.
    Gone,
    /// The pid now belongs to another process (its start time differs): left alone.
    Reused,
    /// The group was alive: it was killed and is gone.
    Killed,
    /// It was killed but had not gone when the wait ended.
    StillAlive,
}

/// The receipts of one session's commands, in its journal directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipts {
    dir: PathBuf,
}

impl Receipts {
    /// Receipts kept in `dir` (created 0700 on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The journal directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `call_id`'s receipt with this suffix.
    fn path(&self, call_id: &str, suffix: &str) -> PathBuf {
        let hash: String = Sha256::digest(call_id.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        self.dir.join(format!("{hash}.{suffix}"))
    }

    /// Where `call_id`'s output goes.
    pub fn out_path(&self, call_id: &str) -> PathBuf {
        self.path(call_id, "out")
    }

    fn ensure_dir(&self) -> io::Result<()> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
    }

    /// Records that `call_id`'s command started.
    pub fn write_started(&self, call_id: &str, started: &Started) -> io::Result<()> {
        self.ensure_dir()?;
        let bytes = serde_json::to_vec(started).map_err(io::Error::other)?;
        replace(&self.path(call_id, "started"), &bytes)
    }

    /// Creates (truncates) `call_id`'s output file.
    pub fn create_out(&self, call_id: &str) -> io::Result<File> {
        self.ensure_dir()?;
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(self.out_path(call_id))
    }

    /// Records how `call_id`'s command ended (see the module docs).
    pub fn write_exit(&self, call_id: &str, exit: &ExitReceipt) -> io::Result<()> {
        self.ensure_dir()?;
        let bytes = serde_json::to_vec(exit).map_err(io::Error::other)?;
        replace(&self.path(call_id, "exit"), &bytes)
    }

    /// Removes `call_id`'s receipt files, once its result is durable in
    /// the session (a missing file is fine; a failure is only logged).
    pub fn remove(&self, call_id: &str) {
        for suffix in ["started", "out", "exit"] {
            match fs::remove_file(self.path(call_id, suffix)) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => tracing::warn!(%error, "removing a command receipt failed"),
            }
        }
    }

    /// `call_id`'s `.started` receipt, if complete.
    pub fn started(&self, call_id: &str) -> Option<Started> {
        let bytes = fs::read(self.path(call_id, "started")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// `call_id`'s `.exit` receipt, if complete.
    pub fn exit(&self, call_id: &str) -> Option<ExitReceipt> {
        let bytes = fs::read(self.path(call_id, "exit")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The tail of `call_id`'s output as the tool shows it (at most
    /// [`MAX_LINES`] lines / [`MAX_BYTES`] bytes, with a note naming the
    /// `.out` file when cut), `None` when there is no output file.
    pub fn output_tail(&self, call_id: &str) -> Option<String> {
        self.tail(call_id).map(|(text, _)| text)
    }

    /// [`Receipts::output_tail`], and whether it was cut.
    fn tail(&self, call_id: &str) -> Option<(String, bool)> {
        let mut file = File::open(self.out_path(call_id)).ok()?;
        let len = file.metadata().ok()?.len();
        let keep = (2 * MAX_BYTES) as u64;
        let start = len.saturating_sub(keep);
        file.seek(SeekFrom::Start(start)).ok()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).ok()?;
        let text = String::from_utf8_lossy(&bytes);
        let tail = truncate_tail(&text, MAX_LINES, MAX_BYTES);
        // As the tool shows it: without the output's final newline.
        let mut shown = tail.content;
        if shown.ends_with('\n') {
            shown.pop();
        }
        let truncated = tail.truncated || start > 0;
        if truncated {
            shown.push_str(&format!(
                "\n\n[Output truncated; the full output ({len} bytes) is in {}]",
                self.out_path(call_id).display()
            ));
        }
        Some((shown, truncated))
    }

    /// The result `call_id`'s command gave, rebuilt from its `.exit`
    /// receipt and output; `None` without a complete `.exit`.
    pub fn recovered_result(&self, call_id: &str) -> Option<Result<ToolOutput, ToolError>> {
        let exit = self.exit(call_id)?;
        let (text, truncated) = self.tail(call_id).unwrap_or_default();
        let mut details = json!({
            "exit_code": exit.exit_code,
            "truncated": truncated,
            "recovered_from_receipt": true,
        });
        if truncated {
            details["full_output_path"] = json!(exit.output_path.display().to_string());
        }
        let note = "(recovered after a crash from the command's receipt)";
        Some(match exit.error {
            None => {
                let shown = if text.is_empty() {
                    format!("(no output)\n\n{note}")
                } else {
                    format!("{text}\n\n{note}")
                };
                Ok(ToolOutput::text(shown).with_details(details))
            }
            Some((code, message)) => {
                let shown = if text.is_empty() {
                    format!("{message}\n\n{note}")
                } else {
                    format!("{text}\n\n{message}\n\n{note}")
                };
                Err(ToolError::new(code, message)
                    .with_output(ToolOutput::text(shown).with_details(details)))
            }
        })
    }

    /// Kills the process group a dead run's `.started` receipt names, if it
    /// still exists and its leader is the same process (same start time),
    /// and waits until it is gone. A reused pid is never signalled.
    pub fn kill_leftover(&self, call_id: &str) -> Leftover {
        let Some(started) = self.started(call_id) else {
            return Leftover::None;
        };
        let (Some(pid), Some(pgid), Some(start_time)) =
            (started.pid, started.pgid, started.start_time)
        else {
            return Leftover::None;
        };
        if !group_exists(pgid) {
            return Leftover::Gone;
        }
        if process_start_time(pid) != Some(start_time) {
            return Leftover::Reused;
        }
        match killpg(Pid::from_raw(pgid), Signal::SIGKILL) {
            Ok(()) => {}
            Err(Errno::ESRCH) => return Leftover::Gone,
            Err(error) => {
                tracing::warn!(pgid, %error, "failed to kill a leftover process group");
                return Leftover::StillAlive;
            }
        }
        let deadline = Instant::now() + GONE_TIMEOUT;
        while group_exists(pgid) {
            if Instant::now() >= deadline {
                tracing::warn!(pgid, "a killed leftover process group has not gone");
                return Leftover::StillAlive;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Leftover::Killed
    }
}

/// Writes `path` by write-to-temp and rename: a reader sees the old file
/// or the whole new one, never a part (see the module docs on fsync).
fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temp = path.with_extension("tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(bytes)?;
    drop(file);
    fs::rename(&temp, path)
}

/// Whether process group `pgid` has a member (zombies count until reaped).
fn group_exists(pgid: i32) -> bool {
    pgid > 0 && !matches!(killpg(Pid::from_raw(pgid), None), Err(Errno::ESRCH))
}

/// A process's start time in clock ticks since boot (`/proc/<pid>/stat`
/// field 22), `None` when it does not exist.
pub fn process_start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (the command name) is in parentheses and may hold anything;
    // the fields after its last `)` start at field 3.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}
