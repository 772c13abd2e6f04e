//! Process plumbing for `bash`: the running command, and pipe reading.
//!
//! A [`Process`] is either a plain child in its own process group (an
//! unsandboxed command), whose group [`GroupKiller`] sends SIGKILL exactly
//! once, at the latest when dropped; or a call in the namespaces the
//! sandbox holds for the run ([`crate::sandbox::spawn`]), killed through
//! the pidfd of its init, which ends its PID namespace — also when
//! dropped. Either way an abandoned call leaves no process behind.
//! [`Pipes`] reads stdout and stderr concurrently in arrival order; reading
//! and waiting are cancel-safe, so both can sit in a `select!` loop.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::unix::pipe;
use tokio::process::Child;

use super::output::Stream;
use crate::sandbox::{Call, CallEnd, END_LEN, read_end};

/// Bytes read from a pipe at a time.
const READ_CHUNK: usize = 8 * 1024;

/// One of the command's output pipes.
pub(super) type Reader = Box<dyn AsyncRead + Unpin + Send>;

/// How a command ended, when it ran.
pub(super) enum Exit {
    /// It exited, or was killed by a signal.
    Status(ExitStatus),
    /// Setting it up in the sandbox failed: nothing ran.
    NotStarted(io::Error),
}

/// A running command.
pub(super) enum Process {
    /// An unsandboxed child, in its own process group.
    Plain { child: Child, group: GroupKiller },
    /// A call in the sandbox's held namespaces.
    Confined(Box<Confined>),
}

impl Process {
    /// Waits for the command to end. Cancel-safe.
    pub(super) async fn wait(&mut self) -> io::Result<Exit> {
        match self {
            Self::Plain { child, .. } => child.wait().await.map(Exit::Status),
            Self::Confined(confined) => confined.wait().await,
        }
    }

    /// The pid of a plain child (it leads its own process group); `None`
    /// for a sandboxed call, whose PID namespace Keel's holder owns.
    pub(super) fn pid(&self) -> Option<i32> {
        match self {
            Self::Plain { child, .. } => child.id().and_then(|id| i32::try_from(id).ok()),
            Self::Confined(_) => None,
        }
    }

    /// Kills the command and everything it started, once.
    pub(super) fn kill(&mut self) {
        match self {
            Self::Plain { group, .. } => group.kill(),
            Self::Confined(confined) => confined.call.kill(),
        }
    }

    /// After [`Process::kill`]: waits until the command's processes are
    /// gone (and reaped), so none outlives the call.
    pub(super) async fn reap(&mut self) {
        match self {
            Self::Plain { child, .. } => {
                let _ = child.wait().await;
            }
            Self::Confined(confined) => confined.gone().await,
        }
    }
}

/// A call in the sandbox's held namespaces, being waited for.
pub(super) struct Confined {
    /// Kills the call when dropped.
    call: Call,
    /// The call's status pipe (a duplicate of the call's).
    status: pipe::Receiver,
    /// The call init's pidfd (a duplicate): readable once every process of
    /// the call is gone.
    pidfd: OwnedFd,
    /// The end record read so far.
    record: [u8; END_LEN],
    read: usize,
}

impl Confined {
    /// Wraps a started call for waiting on this runtime.
    pub(super) fn new(call: Call) -> io::Result<Self> {
        let status = pipe::Receiver::from_owned_fd(call.status().try_clone_to_owned()?)?;
        let pidfd = call.pidfd().try_clone_to_owned()?;
        Ok(Self {
            call,
            status,
            pidfd,
            record: [0; END_LEN],
            read: 0,
        })
    }

    /// Reads the call's end record; at end of file (the call was killed)
    /// waits until its processes are gone. Cancel-safe: what was read is
    /// kept.
    async fn wait(&mut self) -> io::Result<Exit> {
        while let Some(rest) = self
            .record
            .get_mut(self.read..)
            .filter(|rest| !rest.is_empty())
        {
            match self.status.read(rest).await? {
                0 => break,
                read => self.read += read,
            }
        }
        let record = self.record.get(..self.read).unwrap_or_default();
        match read_end(record) {
            CallEnd::Exited(status) => Ok(Exit::Status(status)),
            CallEnd::NotStarted(error) => Ok(Exit::NotStarted(error)),
            CallEnd::Killed => {
                self.gone().await;
                // The wait status of a process killed by SIGKILL.
                Ok(Exit::Status(ExitStatus::from_raw(Signal::SIGKILL as i32)))
            }
        }
    }

    /// Waits until every process of the call is gone (the rare path of a
    /// killed call: a blocking poll on the pidfd, off the runtime).
    async fn gone(&self) {
        let Ok(pidfd) = self.pidfd.try_clone() else {
            return;
        };
        let _ = tokio::task::spawn_blocking(move || {
            crate::sandbox::wait_until_gone(pidfd.as_fd());
        })
        .await;
    }
}

/// Kills the command's process group, at the latest when dropped.
pub(super) struct GroupKiller {
    pgid: Option<Pid>,
}

impl GroupKiller {
    pub(super) fn of(child: &Child) -> Self {
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        Self { pgid }
    }

    /// Sends SIGKILL to the whole group, once.
    pub(super) fn kill(&mut self) {
        let Some(pgid) = self.pgid.take() else { return };
        match killpg(pgid, Signal::SIGKILL) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(error) => {
                tracing::warn!(%pgid, %error, "failed to kill the command's process group")
            }
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The command's output pipes; a pipe becomes `None` at end of file.
pub(super) struct Pipes {
    pub(super) stdout: Option<Reader>,
    pub(super) stderr: Option<Reader>,
}

impl Pipes {
    pub(super) fn is_open(&self) -> bool {
        self.stdout.is_some() || self.stderr.is_some()
    }

    /// The next chunk from either pipe, or `None` once both are closed.
    /// Cancel-safe: a dropped call loses no data.
    pub(super) async fn next(&mut self) -> Option<(Stream, Vec<u8>)> {
        loop {
            if !self.is_open() {
                return None;
            }
            let (stdout, stderr) = (&mut self.stdout, &mut self.stderr);
            // Biased: when both pipes hold data, the order they were written
            // in is unknown; stdout first keeps a command's output stable.
            tokio::select! {
                biased;
                chunk = read_chunk(stdout), if stdout.is_some() => match chunk {
                    Some(bytes) => return Some((Stream::Stdout, bytes)),
                    None => *stdout = None,
                },
                chunk = read_chunk(stderr), if stderr.is_some() => match chunk {
                    Some(bytes) => return Some((Stream::Stderr, bytes)),
                    None => *stderr = None,
                },
            }
        }
    }
}

/// Reads one chunk; `None` at end of file or on a read error.
async fn read_chunk<R: AsyncRead + Unpin>(reader: &mut Option<R>) -> Option<Vec<u8>> {
    let reader = reader.as_mut()?;
    let mut buffer = vec![0; READ_CHUNK];
    match reader.read(&mut buffer).await {
        Ok(0) => None,
        Ok(read) => {
            buffer.truncate(read);
            Some(buffer)
        }
        Err(error) => {
            tracing::debug!(%error, "reading command output failed");
            None
        }
    }
}
