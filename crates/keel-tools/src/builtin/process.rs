//! Process plumbing for `bash`: group killing and pipe reading.
//!
//! [`GroupKiller`] sends SIGKILL to a command's whole process group exactly
//! once, at the latest when dropped, so that even an abandoned call leaves no
//! process behind. [`Pipes`] reads stdout and stderr concurrently in arrival
//! order; reading is cancel-safe, so it can sit in a `select!` loop.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdout};

use super::output::Stream;

/// Bytes read from a pipe at a time.
const READ_CHUNK: usize = 8 * 1024;

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
    pub(super) stdout: Option<ChildStdout>,
    pub(super) stderr: Option<ChildStderr>,
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
