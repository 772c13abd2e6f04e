//! Per-call receipts of `bash` commands, in a session's private journal
//! directory (docs/recovery.md): what lets a resumed run tell a command that
//! finished before a crash from one the crash cut short.
//!
//! Keel's own process writes them — it spawns and reaps the command — never
//! a wrapper inside the sandbox: a directory the command could write would
//! let it forge its own receipt. Each call's receipts are named by the
//! SHA-256 of its **key**: the id of the call's `effect_started` journal
//! entry, unique in the session (never the call id: a provider may reuse
//! one, and ids are chosen by the model, never used as file names):
//!
//! - `<hash>.started`: at spawn, the process id, its process group, the
//!   process's start time (`/proc/<pid>/stat` field 22) and the wall time;
//! - `<hash>.out`: the command's combined output as it arrives, up to the
//!   tool's log cap;
//! - `<hash>.exit`: after the command is reaped and its output written, its
//!   exit status (or how it was stopped) and what its ToolResult needs.
//!
//! **The journal is Keel's alone** (issue 21). Keel refuses to run when a
//! sandboxed command could write the session directory (keel-kernel), and
//! still treats every receipt as hostile input: the directory is opened
//! with `O_NOFOLLOW` and trusted only when it is a directory owned by
//! Keel's uid and not group- or world-writable; each receipt is created
//! and opened through the directory's descriptor (`openat`) with
//! `O_NOFOLLOW`, `O_EXCL` where created, `O_NONBLOCK`, and is used only when
//! it is a regular file owned by Keel's uid with one link and (for
//! `.started` and `.exit`) at most [`MAX_RECEIPT_BYTES`]. Whatever fails a
//! check is a [`ReceiptDamage`], which recovery reports by cause; it never
//! makes Keel read or write a file outside the journal.
//!
//! `.started` and `.exit` are written to a temporary file and renamed, so a
//! crash of Keel never leaves one half-written. They are not fsynced: they
//! serve a resume after Keel's process died (`kill -9`, OOM), when the page
//! cache survives; after a power loss the command's own effects on the
//! workspace were not fsynced either, so a durable receipt would vouch for
//! effects that may be gone — and three fsyncs per command would double a
//! run's fsync count. A receipt a power loss tore or emptied does not parse
//! and is reported as damage (the call counts as interrupted).
//!
//! Invariant: an `.exit` exists only for a command that ended; a crash
//! between the command's exit and the rename leaves none, and the command
//! then counts as interrupted (its outcome unknown).

use std::fs::{DirBuilder, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel_protocol::ToolErrorCode;
use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::signal::{Signal, killpg};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat};
use nix::unistd::{Pid, UnlinkatFlags, geteuid, unlinkat};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::tool::{ToolError, ToolOutput};
use crate::truncate::{MAX_BYTES, MAX_LINES, truncate_tail};

/// How long [`Receipts::kill_leftover`] waits for a killed group to go.
const GONE_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest `.started` or `.exit` receipt read: Keel writes a few
/// hundred bytes; anything larger was not written by it.
pub const MAX_RECEIPT_BYTES: u64 = 64 * 1024;

/// What a command's `.started` receipt records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Started {
    /// The shell's process id, when Keel spawned it directly (`None` for a
    /// sandboxed call: its PID namespace dies with Keel's holder).
    pub pid: Option<i32>,
    /// The process group the command runs in (its shell leads it, so it
    /// equals `pid`; a receipt where it differs is not Keel's).
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
#[non_exhaustive]
pub struct ExitReceipt {
    /// How it ended, in words (`exited`, `timed_out`, `cancelled`, …).
    pub ending: String,
    /// Its exit code, when it exited with one.
    pub exit_code: Option<i32>,
    /// The result's error code and message, `None` for a success.
    pub error: Option<(ToolErrorCode, String)>,
    /// The `.out` file holding its output (informative: recovery reads the
    /// call's own `.out` in the journal, never a path a receipt names).
    pub output_path: PathBuf,
    /// Bytes of output the `.out` file holds.
    pub output_bytes: u64,
    /// When it ended, milliseconds since the Unix epoch.
    pub ended_ms: u64,
}

/// Which receipt of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReceiptFile {
    /// `<hash>.started`.
    Started,
    /// `<hash>.out`.
    Out,
    /// `<hash>.exit`.
    Exit,
}

impl ReceiptFile {
    /// The file name suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Out => "out",
            Self::Exit => "exit",
        }
    }
}

impl std::fmt::Display for ReceiptFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, ".{}", self.suffix())
    }
}

/// Why the journal or a call's receipts cannot be trusted: recovery treats
/// the call as interrupted and reports this cause (issue 22). The messages
/// never quote a receipt's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptDamage {
    /// The journal directory does not exist (deleted).
    #[error("the journal directory {0} is missing")]
    JournalMissing(PathBuf),
    /// The journal directory is a symbolic link (dangling or not).
    #[error("the journal directory {0} is a symbolic link, not Keel's directory")]
    JournalSymlink(PathBuf),
    /// The journal directory is a file or another non-directory.
    #[error("the journal directory {0} is not a directory")]
    JournalNotDirectory(PathBuf),
    /// The journal directory cannot be opened.
    #[error("the journal directory {path} cannot be read ({errno})")]
    JournalUnreadable {
        /// The directory.
        path: PathBuf,
        /// Why.
        errno: Errno,
    },
    /// The journal directory is not owned by Keel's uid, or others may
    /// write it.
    #[error("the journal directory {path} is not trusted: {why}")]
    JournalUntrusted {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A receipt is not a regular file.
    #[error("the {file} receipt is a {kind}, not a regular file")]
    WrongType {
        /// Which receipt.
        file: ReceiptFile,
        /// What it is instead (`symbolic link`, `FIFO`, `directory`, …).
        kind: &'static str,
    },
    /// A receipt is not owned by Keel's uid, or has other hard links.
    #[error("the {file} receipt was not written by Keel: {why}")]
    Foreign {
        /// Which receipt.
        file: ReceiptFile,
        /// What gives it away.
        why: &'static str,
    },
    /// A receipt larger than Keel ever writes.
    #[error("the {file} receipt is larger than Keel writes ({bytes} bytes)")]
    TooLarge {
        /// Which receipt.
        file: ReceiptFile,
        /// Its size.
        bytes: u64,
    },
    /// A receipt that cannot be opened or read.
    #[error("the {file} receipt cannot be read ({errno})")]
    Unreadable {
        /// Which receipt.
        file: ReceiptFile,
        /// Why.
        errno: Errno,
    },
    /// A receipt that does not parse: torn by a power loss, or garbage.
    #[error("the {file} receipt is torn or garbage (it does not parse)")]
    Torn {
        /// Which receipt.
        file: ReceiptFile,
    },
    /// The `.exit` receipt says the command printed output that its `.out`
    /// no longer holds.
    #[error("output lost: the command printed {printed} bytes, its .out receipt holds {kept}")]
    OutputLost {
        /// Bytes the `.exit` receipt says were written.
        printed: u64,
        /// Bytes the `.out` file holds (0 when it is missing).
        kept: u64,
    },
}

impl ReceiptDamage {
    /// A stable snake_case name of the cause, for warnings.
    pub fn code(&self) -> &'static str {
        match self {
            Self::JournalMissing(_) => "journal_missing",
            Self::JournalSymlink(_) => "journal_symlink",
            Self::JournalNotDirectory(_) => "journal_not_directory",
            Self::JournalUnreadable { .. } => "journal_unreadable",
            Self::JournalUntrusted { .. } => "journal_untrusted",
            Self::WrongType { .. } => "receipt_wrong_type",
            Self::Foreign { .. } => "receipt_foreign",
            Self::TooLarge { .. } => "receipt_too_large",
            Self::Unreadable { .. } => "receipt_unreadable",
            Self::Torn { .. } => "receipt_torn",
            Self::OutputLost { .. } => "output_lost",
        }
    }
}

impl From<ReceiptDamage> for io::Error {
    fn from(damage: ReceiptDamage) -> Self {
        io::Error::other(damage)
    }
}

/// What a call's receipts show, read as hostile input.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Examined {
    /// No receipt: the command never started, or none is kept.
    Absent,
    /// The command started; no `.exit`.
    Started(Started),
    /// The command ended before the crash: its `.exit` (its `.out`
    /// checked against it).
    Exited(ExitReceipt),
    /// The journal or a receipt cannot be trusted.
    Damaged(ReceiptDamage),
}

/// What became of a leftover process group named by a `.started` receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leftover {
    /// No usable `.started` receipt, or it names no process group.
    None,
    /// The group's leader no longer exists.
    Gone,
    /// The pid now belongs to another process (its start time differs), or
    /// no longer leads the group: left alone.
    Reused,
    /// The receipt names a group its process does not lead: not a receipt
    /// Keel wrote; nothing is signalled.
    NotLeader,
    /// The group was alive: it was killed and is gone.
    Killed,
    /// It was killed but had not gone when the wait ended.
    StillAlive,
}

/// One call's receipts: the session's journal and the call's key (the id
/// of its `effect_started` entry). What the kernel hands the `bash` tool.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallReceipt {
    /// The session's journal.
    pub receipts: Receipts,
    /// The call's key.
    pub key: String,
}

impl CallReceipt {
    /// The receipts of the call keyed `key` in `receipts`.
    pub fn new(receipts: Receipts, key: impl Into<String>) -> Self {
        Self {
            receipts,
            key: key.into(),
        }
    }
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

    /// The file name of `key`'s receipt `file`.
    fn name(key: &str, file: ReceiptFile) -> String {
        let hash: String = Sha256::digest(key.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        format!("{hash}.{}", file.suffix())
    }

    /// Where `key`'s output goes.
    pub fn out_path(&self, key: &str) -> PathBuf {
        self.dir.join(Self::name(key, ReceiptFile::Out))
    }

    /// Creates the journal directory (0700) if it does not exist, and
    /// checks that it can be trusted.
    pub fn prepare(&self) -> Result<(), ReceiptDamage> {
        self.open_dir(true).map(drop)
    }

    /// The journal directory, opened without following a link and checked
    /// (a directory owned by Keel's uid that only it may write); created
    /// first when `create`.
    fn open_dir(&self, create: bool) -> Result<OwnedFd, ReceiptDamage> {
        if create {
            // The ancestors are the store's own directories, which Keel
            // refuses to keep where a sandboxed command could write them.
            match DirBuilder::new().mode(0o700).create(&self.dir) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    if let Err(error) = DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(&self.dir)
                    {
                        return Err(ReceiptDamage::JournalUnreadable {
                            path: self.dir.clone(),
                            errno: errno_of(&error),
                        });
                    }
                }
                Err(error) => {
                    return Err(ReceiptDamage::JournalUnreadable {
                        path: self.dir.clone(),
                        errno: errno_of(&error),
                    });
                }
            }
        }
        let flags = OFlag::O_RDONLY
            | OFlag::O_DIRECTORY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC;
        let path = self.dir.clone();
        let fd = match nix::fcntl::open(&self.dir, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Err(ReceiptDamage::JournalMissing(path)),
            Err(Errno::ELOOP) => return Err(ReceiptDamage::JournalSymlink(path)),
            Err(Errno::ENOTDIR) => {
                let link = std::fs::symlink_metadata(&self.dir)
                    .is_ok_and(|meta| meta.file_type().is_symlink());
                return Err(if link {
                    ReceiptDamage::JournalSymlink(path)
                } else {
                    ReceiptDamage::JournalNotDirectory(path)
                });
            }
            Err(errno) => return Err(ReceiptDamage::JournalUnreadable { path, errno }),
        };
        let stat = fstat(&fd).map_err(|errno| ReceiptDamage::JournalUnreadable {
            path: self.dir.clone(),
            errno,
        })?;
        let untrusted = |why| ReceiptDamage::JournalUntrusted {
            path: self.dir.clone(),
            why,
        };
        if stat.st_uid != geteuid().as_raw() {
            return Err(untrusted("it is not owned by Keel's user"));
        }
        if stat.st_mode & 0o022 != 0 {
            return Err(untrusted("its group or other users may write it"));
        }
        Ok(fd)
    }

    /// Records that `key`'s command started.
    pub fn write_started(&self, key: &str, started: &Started) -> io::Result<()> {
        let dir = self.open_dir(true)?;
        let bytes = serde_json::to_vec(started).map_err(io::Error::other)?;
        replace(&dir, &Self::name(key, ReceiptFile::Started), &bytes)
    }

    /// Creates `key`'s output file afresh: whatever held its name is
    /// removed (never followed), and the file is created exclusively.
    pub fn create_out(&self, key: &str) -> io::Result<File> {
        let dir = self.open_dir(true)?;
        let name = Self::name(key, ReceiptFile::Out);
        remove_entry(&dir, &name)?;
        create_new(&dir, &name)
    }

    /// Records how `key`'s command ended (see the module docs).
    pub fn write_exit(&self, key: &str, exit: &ExitReceipt) -> io::Result<()> {
        let dir = self.open_dir(true)?;
        let bytes = serde_json::to_vec(exit).map_err(io::Error::other)?;
        replace(&dir, &Self::name(key, ReceiptFile::Exit), &bytes)
    }

    /// Removes `key`'s receipt files, once its result is durable in the
    /// session (a missing file is fine; a failure is only logged).
    pub fn remove(&self, key: &str) {
        let dir = match self.open_dir(false) {
            Ok(dir) => dir,
            Err(ReceiptDamage::JournalMissing(_)) => return,
            Err(damage) => {
                tracing::warn!(%damage, "not removing command receipts");
                return;
            }
        };
        for file in [ReceiptFile::Started, ReceiptFile::Out, ReceiptFile::Exit] {
            if let Err(error) = remove_entry(&dir, &Self::name(key, file)) {
                tracing::warn!(%error, "removing a command receipt failed");
            }
        }
    }

    /// Opens `key`'s receipt `file` as hostile input: `None` when absent.
    fn open(
        &self,
        dir: &OwnedFd,
        key: &str,
        file: ReceiptFile,
    ) -> Result<Option<(File, u64)>, ReceiptDamage> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = match openat(dir, Self::name(key, file).as_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => {
                return Err(ReceiptDamage::WrongType {
                    file,
                    kind: "symbolic link",
                });
            }
            Err(errno) => return Err(ReceiptDamage::Unreadable { file, errno }),
        };
        let stat = fstat(&fd).map_err(|errno| ReceiptDamage::Unreadable { file, errno })?;
        check_receipt(file, &stat)?;
        let bytes = u64::try_from(stat.st_size).unwrap_or(0);
        if file != ReceiptFile::Out && bytes > MAX_RECEIPT_BYTES {
            return Err(ReceiptDamage::TooLarge { file, bytes });
        }
        Ok(Some((File::from(fd), bytes)))
    }

    /// Reads and parses `key`'s `.started` or `.exit` receipt.
    fn parsed<T: serde::de::DeserializeOwned>(
        &self,
        dir: &OwnedFd,
        key: &str,
        file: ReceiptFile,
    ) -> Result<Option<T>, ReceiptDamage> {
        let Some((opened, _)) = self.open(dir, key, file)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        opened
            .take(MAX_RECEIPT_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|error| ReceiptDamage::Unreadable {
                file,
                errno: errno_of(&error),
            })?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|_| ReceiptDamage::Torn { file })
    }

    /// What `key`'s receipts show (see [`Examined`]).
    pub fn examine(&self, key: &str) -> Examined {
        match self.examined(key) {
            Ok(examined) => examined,
            Err(damage) => Examined::Damaged(damage),
        }
    }

    fn examined(&self, key: &str) -> Result<Examined, ReceiptDamage> {
        let dir = self.open_dir(false)?;
        if let Some(exit) = self.parsed::<ExitReceipt>(&dir, key, ReceiptFile::Exit)? {
            let kept = self
                .open(&dir, key, ReceiptFile::Out)?
                .map_or(0, |(_, bytes)| bytes);
            if kept < exit.output_bytes {
                return Err(ReceiptDamage::OutputLost {
                    printed: exit.output_bytes,
                    kept,
                });
            }
            return Ok(Examined::Exited(exit));
        }
        // What was captured so far must be readable as well.
        self.open(&dir, key, ReceiptFile::Out)?;
        Ok(
            match self.parsed::<Started>(&dir, key, ReceiptFile::Started)? {
                Some(started) => Examined::Started(started),
                None => Examined::Absent,
            },
        )
    }

    /// `key`'s `.started` receipt, if complete and trusted.
    pub fn started(&self, key: &str) -> Option<Started> {
        let dir = self.open_dir(false).ok()?;
        self.parsed(&dir, key, ReceiptFile::Started).ok()?
    }

    /// `key`'s `.exit` receipt, if complete and trusted.
    pub fn exit(&self, key: &str) -> Option<ExitReceipt> {
        let dir = self.open_dir(false).ok()?;
        self.parsed(&dir, key, ReceiptFile::Exit).ok()?
    }

    /// The tail of `key`'s output as the tool shows it (at most
    /// [`MAX_LINES`] lines / [`MAX_BYTES`] bytes, with a note naming the
    /// `.out` file when cut), `None` when there is no output file.
    pub fn output_tail(&self, key: &str) -> Result<Option<String>, ReceiptDamage> {
        Ok(self.tail(key)?.map(|(text, _)| text))
    }

    /// [`Receipts::output_tail`], and whether it was cut.
    fn tail(&self, key: &str) -> Result<Option<(String, bool)>, ReceiptDamage> {
        let file = ReceiptFile::Out;
        let dir = self.open_dir(false)?;
        let Some((mut opened, len)) = self.open(&dir, key, file)? else {
            return Ok(None);
        };
        let unreadable = |error: io::Error| ReceiptDamage::Unreadable {
            file,
            errno: errno_of(&error),
        };
        let keep = (2 * MAX_BYTES) as u64;
        let start = len.saturating_sub(keep);
        opened.seek(SeekFrom::Start(start)).map_err(unreadable)?;
        let mut bytes = Vec::new();
        opened
            .take(keep)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
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
                self.out_path(key).display()
            ));
        }
        Ok(Some((shown, truncated)))
    }

    /// The result `key`'s command gave, rebuilt from its `.exit` receipt
    /// and output; `Ok(None)` without an `.exit`, the damage when its
    /// receipts cannot be trusted (a missing `.out` for a command that
    /// printed is [`ReceiptDamage::OutputLost`], never "(no output)").
    pub fn recovered_result(
        &self,
        key: &str,
    ) -> Result<Option<Result<ToolOutput, ToolError>>, ReceiptDamage> {
        let exit = match self.examined(key)? {
            Examined::Exited(exit) => exit,
            _ => return Ok(None),
        };
        let (text, truncated) = self.tail(key)?.unwrap_or_default();
        let mut details = json!({
            "exit_code": exit.exit_code,
            "truncated": truncated,
            "recovered_from_receipt": true,
        });
        if truncated {
            details["full_output_path"] = json!(self.out_path(key).display().to_string());
        }
        let note = "(recovered after a crash from the command's receipt)";
        Ok(Some(match exit.error {
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
        }))
    }

    /// Kills the process group a dead run's `.started` receipt names, only
    /// when its leader is alive with the recorded start time and still
    /// leads that group (`pgid == pid`), and waits until it is gone. A
    /// reused pid, or a group the named process does not lead, is never
    /// signalled.
    pub fn kill_leftover(&self, key: &str) -> Leftover {
        let Some(started) = self.started(key) else {
            return Leftover::None;
        };
        let (Some(pid), Some(pgid), Some(start_time)) =
            (started.pid, started.pgid, started.start_time)
        else {
            return Leftover::None;
        };
        if pid <= 1 || pgid != pid {
            return Leftover::NotLeader;
        }
        let Some(leader) = process_stat(pid) else {
            return Leftover::Gone;
        };
        if leader.start_time != start_time || leader.pgrp != pgid {
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

/// Checks that an opened receipt is a regular file Keel wrote.
fn check_receipt(file: ReceiptFile, stat: &FileStat) -> Result<(), ReceiptDamage> {
    let kind = match SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG => None,
        SFlag::S_IFDIR => Some("directory"),
        SFlag::S_IFIFO => Some("FIFO"),
        SFlag::S_IFSOCK => Some("socket"),
        SFlag::S_IFCHR | SFlag::S_IFBLK => Some("device"),
        SFlag::S_IFLNK => Some("symbolic link"),
        _ => Some("special file"),
    };
    if let Some(kind) = kind {
        return Err(ReceiptDamage::WrongType { file, kind });
    }
    if stat.st_uid != geteuid().as_raw() {
        return Err(ReceiptDamage::Foreign {
            file,
            why: "it is not owned by Keel's user",
        });
    }
    if stat.st_nlink != 1 {
        return Err(ReceiptDamage::Foreign {
            file,
            why: "it has other hard links",
        });
    }
    Ok(())
}

/// The errno of an I/O error (`EIO` when it has none).
fn errno_of(error: &io::Error) -> Errno {
    error.raw_os_error().map_or(Errno::EIO, Errno::from_raw)
}

/// Removes the entry `name` of `dir` (a link is removed, never followed);
/// a missing one is fine.
fn remove_entry(dir: &OwnedFd, name: &str) -> io::Result<()> {
    match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// Creates `name` in `dir`: a new regular file, 0600, never through a link.
fn create_new(dir: &OwnedFd, name: &str) -> io::Result<File> {
    let flags = OFlag::O_WRONLY
        | OFlag::O_CREAT
        | OFlag::O_EXCL
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_CLOEXEC;
    let fd = openat(dir, name, flags, Mode::from_bits_truncate(0o600))?;
    Ok(File::from(fd))
}

/// Writes `name` in `dir` by write-to-temp and rename: a reader sees the
/// old file or the whole new one, never a part (see the module docs on
/// fsync). The temporary file is created exclusively; the rename replaces
/// whatever held the name (a link is replaced, never followed).
fn replace(dir: &OwnedFd, name: &str, bytes: &[u8]) -> io::Result<()> {
    let temp = format!("{name}.tmp");
    remove_entry(dir, &temp)?;
    let mut file = create_new(dir, &temp)?;
    file.write_all(bytes)?;
    drop(file);
    renameat(dir, temp.as_str(), dir, name)?;
    Ok(())
}

/// Whether process group `pgid` has a member (zombies count until reaped).
fn group_exists(pgid: i32) -> bool {
    pgid > 0 && !matches!(killpg(Pid::from_raw(pgid), None), Err(Errno::ESRCH))
}

/// What `/proc/<pid>/stat` says of a process.
struct ProcStat {
    /// Field 5: its process group.
    pgrp: i32,
    /// Field 22: its start time in clock ticks since boot.
    start_time: u64,
}

fn process_stat(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (the command name) is in parentheses and may hold anything;
    // the fields after its last `)` start at field 3.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        pgrp: fields.get(5 - 3)?.parse().ok()?,
        start_time: fields.get(22 - 3)?.parse().ok()?,
    })
}

/// A process's start time in clock ticks since boot (`/proc/<pid>/stat`
/// field 22), `None` when it does not exist.
pub fn process_start_time(pid: i32) -> Option<u64> {
    process_stat(pid).map(|stat| stat.start_time)
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn exit_receipt(output_bytes: u64) -> ExitReceipt {
        ExitReceipt {
            ending: "exited".into(),
            exit_code: Some(0),
            error: None,
            output_path: PathBuf::from("ignored"),
            output_bytes,
            ended_ms: 1,
        }
    }

    /// A journal with one finished call keyed `key` that printed `hi\n`.
    fn finished(key: &str) -> (tempfile::TempDir, Receipts) {
        let base = tempfile::tempdir().unwrap();
        let receipts = Receipts::new(base.path().join("s.journal"));
        let started = Started {
            pid: None,
            pgid: None,
            start_time: None,
            started_ms: 0,
        };
        receipts.write_started(key, &started).unwrap();
        receipts
            .create_out(key)
            .unwrap()
            .write_all(b"hi\n")
            .unwrap();
        receipts.write_exit(key, &exit_receipt(3)).unwrap();
        (base, receipts)
    }

    fn path_of(receipts: &Receipts, key: &str, file: ReceiptFile) -> PathBuf {
        receipts.dir().join(Receipts::name(key, file))
    }

    #[test]
    fn a_receipt_written_by_keel_is_recovered() {
        let (_base, receipts) = finished("entry-1");
        assert!(matches!(receipts.examine("entry-1"), Examined::Exited(_)));
        let result = receipts.recovered_result("entry-1").unwrap().unwrap();
        let text = match &result.unwrap().content[..] {
            [keel_protocol::UserContent::Text { text }] => text.clone(),
            other => panic!("{other:?}"),
        };
        assert!(text.starts_with("hi\n\n(recovered"), "{text}");
        // Another key (another call, even with the same call id) has none.
        assert_eq!(receipts.examine("entry-2"), Examined::Absent);
    }

    #[test]
    fn receipts_are_written_through_no_link() {
        let base = tempfile::tempdir().unwrap();
        let receipts = Receipts::new(base.path().join("s.journal"));
        receipts.prepare().unwrap();
        let outside = base.path().join("outside");
        std::fs::write(&outside, "precious").unwrap();
        for file in [ReceiptFile::Started, ReceiptFile::Out, ReceiptFile::Exit] {
            std::os::unix::fs::symlink(&outside, path_of(&receipts, "k", file)).unwrap();
        }
        let temp = receipts
            .dir()
            .join(format!("{}.tmp", Receipts::name("k", ReceiptFile::Exit)));
        std::os::unix::fs::symlink(&outside, temp).unwrap();
        let started = Started {
            pid: None,
            pgid: None,
            start_time: None,
            started_ms: 0,
        };
        receipts.write_started("k", &started).unwrap();
        receipts.create_out("k").unwrap().write_all(b"out").unwrap();
        receipts.write_exit("k", &exit_receipt(3)).unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious");
        assert!(matches!(receipts.examine("k"), Examined::Exited(_)));
    }

    #[test]
    fn a_linked_receipt_is_damage_and_is_never_read() {
        let (base, receipts) = finished("k");
        let secret = base.path().join("id_rsa");
        std::fs::write(&secret, "SECRET KEY").unwrap();
        let out = path_of(&receipts, "k", ReceiptFile::Out);
        std::fs::remove_file(&out).unwrap();
        std::os::unix::fs::symlink(&secret, &out).unwrap();
        let damage = receipts.recovered_result("k").unwrap_err();
        assert_eq!(
            damage,
            ReceiptDamage::WrongType {
                file: ReceiptFile::Out,
                kind: "symbolic link"
            }
        );
        assert!(!damage.to_string().contains("SECRET"));
        assert!(receipts.output_tail("k").is_err());
        // A hard link to a file Keel's user owns is not Keel's receipt either.
        std::fs::remove_file(&out).unwrap();
        std::fs::hard_link(&secret, &out).unwrap();
        assert!(matches!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::Foreign { .. })
        ));
    }

    #[test]
    fn a_fifo_receipt_is_damage_not_a_hang() {
        let (_base, receipts) = finished("k");
        let exit = path_of(&receipts, "k", ReceiptFile::Exit);
        std::fs::remove_file(&exit).unwrap();
        nix::unistd::mkfifo(&exit, Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::WrongType {
                file: ReceiptFile::Exit,
                kind: "FIFO"
            })
        );
    }

    #[test]
    fn each_receipt_damage_is_named_by_its_cause() {
        // Torn or garbage `.exit`.
        let (_base, receipts) = finished("k");
        let exit = path_of(&receipts, "k", ReceiptFile::Exit);
        std::fs::write(&exit, b"{\"ending\":\"exi").unwrap();
        assert_eq!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::Torn {
                file: ReceiptFile::Exit
            })
        );
        // Too large to be Keel's.
        std::fs::write(&exit, vec![b' '; 70 * 1024]).unwrap();
        assert!(matches!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::TooLarge { .. })
        ));
        // A missing `.out` of a command that printed: output lost.
        let (_base, receipts) = finished("k");
        std::fs::remove_file(path_of(&receipts, "k", ReceiptFile::Out)).unwrap();
        assert_eq!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::OutputLost {
                printed: 3,
                kept: 0
            })
        );
        // A missing `.out` of a command that printed nothing is no damage.
        let (_base, receipts) = finished("k");
        receipts.write_exit("k", &exit_receipt(0)).unwrap();
        std::fs::remove_file(path_of(&receipts, "k", ReceiptFile::Out)).unwrap();
        assert!(matches!(receipts.examine("k"), Examined::Exited(_)));
        // A torn `.started`.
        let (_base, receipts) = finished("k");
        std::fs::remove_file(path_of(&receipts, "k", ReceiptFile::Exit)).unwrap();
        std::fs::write(path_of(&receipts, "k", ReceiptFile::Started), b"garbage").unwrap();
        assert_eq!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::Torn {
                file: ReceiptFile::Started
            })
        );
    }

    #[test]
    fn each_journal_directory_damage_is_named_by_its_cause() {
        let (base, receipts) = finished("k");
        let dir = receipts.dir().to_path_buf();
        // Group- or world-writable.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::JournalUntrusted { .. })
        ));
        assert!(receipts.write_exit("k", &exit_receipt(0)).is_err());
        // Deleted.
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::JournalMissing(dir.clone()))
        );
        // A file.
        std::fs::write(&dir, b"").unwrap();
        assert_eq!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::JournalNotDirectory(dir.clone()))
        );
        std::fs::remove_file(&dir).unwrap();
        // A dangling link, and a link to a real directory.
        std::os::unix::fs::symlink(base.path().join("nowhere"), &dir).unwrap();
        assert_eq!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::JournalSymlink(dir.clone()))
        );
        std::fs::remove_file(&dir).unwrap();
        let elsewhere = base.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        assert_eq!(
            receipts.examine("k"),
            Examined::Damaged(ReceiptDamage::JournalSymlink(dir.clone()))
        );
        assert!(
            receipts.create_out("k").is_err(),
            "nothing is written through it"
        );
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    #[test]
    fn a_started_receipt_naming_a_group_its_process_does_not_lead_kills_nothing() {
        let base = tempfile::tempdir().unwrap();
        let receipts = Receipts::new(base.path().join("s.journal"));
        // This test process is alive with this start time, but the group
        // named is another one (here: a group that cannot exist).
        let pid = i32::try_from(std::process::id()).unwrap();
        let started = Started {
            pid: Some(pid),
            pgid: Some(pid + 1),
            start_time: process_start_time(pid),
            started_ms: 0,
        };
        receipts.write_started("k", &started).unwrap();
        assert_eq!(receipts.kill_leftover("k"), Leftover::NotLeader);
    }
}
