//! Namespace holders: one set of namespaces and one view per run, so that a
//! sandboxed call costs about a fork instead of creating and tearing down a
//! user, mount, network, IPC and UTS namespace and ~45 mounts.
//!
//! [`HolderPool::spawn`] finds (or starts) the holder for a sandbox and
//! workspace in that pool and asks it to start the command (see [`super::zygote`] for its side). A
//! holder serves one *view*: it is keyed by the host's
//! `Arc<SandboxConfig>` (by identity: the rlimits, readable, writable and
//! masked paths), the level (the network and its seccomp filter), whether
//! the call may write git's and Keel's metadata, the workspace, and a
//! fingerprint of the view as it would be planned now — its mount plan and
//! the identity (device, inode, and for files the change time) of every
//! path it mounts or masks. A call whose view differs (an approved network
//! call, a secret file that appeared or was replaced on the host, a
//! directory replaced, a `.git` made or replaced) gets a holder of its own,
//! built afresh, so the holder's masks and binds always match the host as
//! it is at the call. Everything else that confines a call is its own: the
//! Landlock ruleset is built here for each call, as for a per-call command.
//!
//! Ownership: holders live in a [`HolderPool`], a value the kernel owns
//! (one per kernel, never shared between kernels; nothing is kept per
//! process). Two pools never share a holder, even for the same workspace.
//!
//! Lifetime: a run holds a [`RunHolders`] guard on its kernel's pool
//! ([`HolderPool::hold`]); when the last guard of that pool is dropped,
//! every holder of the pool stops (other pools are untouched). Dropping
//! the pool itself (the kernel) stops all of its holders once no call
//! uses them. Without a guard (a library user), a holder lives while its
//! `Arc<SandboxConfig>` and its pool do and stops at the next call in the
//! pool after its configuration is gone. A holder replaced by
//! another (its view changed) stops once its last running [`Call`] is
//! dropped. Stopping closes the holder's socket: it exits, which ends its
//! PID namespace, and is reaped. If the kernel process dies instead, its
//! relay dies with the thread that spawned it, and the holder with the
//! relay. No command outlives its call either way: each call has its own
//! PID namespace, emptied before its end is reported.
//!
//! What calls of one holder share: the view's host-backed mounts (as
//! per-call namespaces would), the read-only root, the UTS namespace and,
//! without the network, one network namespace — two calls running at the
//! same time could meet on its loopback or abstract sockets. Nothing else:
//! `/tmp`, `/dev/shm`, `/dev/pts` and `/proc` are mounted afresh for each
//! call, and each call has its own PID and IPC namespaces.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, Weak, mpsc};

use super::namespaces::Launch;
use super::reexec::{self, HandOver};
use super::view::{Step, View};
use super::zygote;
use super::{Sandbox, SandboxConfig, SandboxError, SandboxLevel, passing, sys};

/// A command to start in a holder.
#[derive(Debug)]
#[non_exhaustive]
pub struct CallSpec {
    /// The program to execute: a path, not searched in `PATH`.
    pub program: PathBuf,
    /// Its arguments, its own name first (`argv`).
    pub args: Vec<OsString>,
    /// Its whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// Where its standard output goes (standard input is `/dev/null`).
    pub stdout: OwnedFd,
    /// Where its standard error goes.
    pub stderr: OwnedFd,
}

impl CallSpec {
    /// `program` run with `args` (its own name first) in exactly `env`,
    /// its output written to `stdout` and `stderr`.
    pub fn new(
        program: PathBuf,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        stdout: OwnedFd,
        stderr: OwnedFd,
    ) -> Self {
        Self {
            program,
            args,
            env,
            stdout,
            stderr,
        }
    }
}

/// A started call: a pidfd of its init and the read end of its status
/// pipe. Dropping it kills the call.
#[derive(Debug)]
pub struct Call {
    pidfd: OwnedFd,
    status: OwnedFd,
    /// The holder the call runs in: a holder replaced meanwhile (the view
    /// changed) stops only once its last call has ended, so a change
    /// another call brings about never kills this one.
    _holder: Arc<Holder>,
}

impl Call {
    /// Kills the call: its init and, with its PID namespace, every process
    /// it started. Harmless once the call has ended.
    pub fn kill(&self) {
        if let Err(error) = sys::pidfd_send_signal(self.pidfd.as_raw_fd(), libc::SIGKILL)
            && error.raw_os_error() != Some(libc::ESRCH)
        {
            tracing::warn!(%error, "killing a sandboxed call failed");
        }
    }

    /// A pidfd of the call's init: readable once it has exited, and with it
    /// every process of the call.
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// The read end of the call's status pipe: [`END_LEN`] bytes for
    /// [`read_end`] once the command and everything it started are gone,
    /// or end of file if the call was killed.
    pub fn status(&self) -> BorrowedFd<'_> {
        self.status.as_fd()
    }
}

/// Blocks until the process behind `pidfd` (a call's init,
/// [`Call::pidfd`]) has exited — and with it, for a call, every process of
/// its PID namespace.
pub fn wait_until_gone(pidfd: BorrowedFd<'_>) {
    sys::wait_exited(pidfd.as_raw_fd());
}

impl Drop for Call {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Bytes of a call's end record.
pub const END_LEN: usize = zygote::END_LEN;

/// How a call ended.
#[derive(Debug)]
pub enum CallEnd {
    /// The command ran and exited (or was killed by a signal).
    Exited(ExitStatus),
    /// Setting the command up failed: nothing ran.
    NotStarted(io::Error),
    /// The call was killed before it reported (its status pipe closed).
    Killed,
}

/// Decodes what a call's status pipe yielded: [`END_LEN`] bytes, or
/// anything else (end of file) for a killed call.
pub fn read_end(record: &[u8]) -> CallEnd {
    let (Some(kind), Some(value)) = (record.get(..4), record.get(4..END_LEN)) else {
        return CallEnd::Killed;
    };
    if record.len() != END_LEN {
        return CallEnd::Killed;
    }
    let mut word = [0u8; 4];
    word.copy_from_slice(kind);
    let kind = u32::from_ne_bytes(word);
    word.copy_from_slice(value);
    let value = i32::from_ne_bytes(word);
    match kind {
        zygote::END_EXITED => CallEnd::Exited(ExitStatus::from_raw(value)),
        _ => CallEnd::NotStarted(io::Error::from_raw_os_error(value)),
    }
}

/// The namespace holders of one kernel; see the module docs. A cheap
/// handle: clones share the holders.
#[derive(Clone, Default)]
pub struct HolderPool {
    inner: Arc<Pool>,
}

impl std::fmt::Debug for HolderPool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("HolderPool")
            .field("holders", &self.len())
            .finish_non_exhaustive()
    }
}

/// What a pool holds.
#[derive(Default)]
struct Pool {
    /// Holders alive, at most one per configuration, level, metadata
    /// access and workspace.
    holders: Mutex<Vec<Entry>>,
    /// Runs holding the holders ([`HolderPool::hold`]).
    runs: Mutex<usize>,
}

impl Pool {
    fn holders(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        // A panic while holding the lock leaves consistent data: recover it.
        self.holders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl HolderPool {
    /// An empty pool: holders start on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps this pool's holders until the guard is dropped; the last
    /// guard's drop stops them all (their processes exit and are reaped
    /// before it returns).
    pub fn hold(&self) -> RunHolders {
        *self
            .inner
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        RunHolders {
            pool: Arc::clone(&self.inner),
        }
    }

    /// How many holders the pool keeps now.
    pub fn len(&self) -> usize {
        self.inner.holders().len()
    }

    /// Whether the pool keeps no holder.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The host process ids of the pool's holders' relays (for
    /// measurements and tests; each holder runs beneath its relay).
    pub fn relay_pids(&self) -> Vec<u32> {
        self.inner
            .holders()
            .iter()
            .map(|entry| entry.holder.relay_pid)
            .collect()
    }

    /// Starts `spec` confined by `sandbox` in `workspace`, in the
    /// namespaces this pool holds for this sandbox (started on first use).
    /// Fails closed like [`super::confine`]; a sandbox that is not
    /// enforced is refused (spawn such commands directly).
    pub fn spawn(
        &self,
        sandbox: &Sandbox,
        workspace: &Path,
        spec: CallSpec,
    ) -> Result<Call, SandboxError> {
        spawn(&self.inner, sandbox, workspace, spec)
    }
}

/// [`HolderPool::spawn`].
fn spawn(
    pool: &Pool,
    sandbox: &Sandbox,
    workspace: &Path,
    spec: CallSpec,
) -> Result<Call, SandboxError> {
    if !sandbox.is_enforced() {
        return Err(SandboxError::Setup(
            "this sandbox is not enforced by Keel: start the command directly".into(),
        ));
    }
    let message = encode(&spec)?;
    let parts = super::prepare(sandbox, workspace)?;
    let mut fingerprint = Fingerprint::of(&parts.view);
    let ruleset = parts
        .landlock
        .try_clone()
        .map_err(|source| SandboxError::Io {
            what: "duplicating the Landlock ruleset".into(),
            source,
        })?;
    let (status_read, status_write) = sys::pipe().map_err(|source| SandboxError::Io {
        what: "creating a status pipe".into(),
        source,
    })?;
    // SAFETY: `pipe` returned two fresh descriptors that nothing else owns.
    #[allow(unsafe_code)]
    let (status_read, status_write) = unsafe {
        (
            OwnedFd::from_raw_fd(status_read),
            OwnedFd::from_raw_fd(status_write),
        )
    };
    let fds = [
        spec.stdout.as_raw_fd(),
        spec.stderr.as_raw_fd(),
        status_write.as_raw_fd(),
        ruleset.as_raw_fd(),
    ];
    let mut parts = Some(parts);
    for attempt in 0..2 {
        let holder = holder_for(pool, sandbox, workspace, &fingerprint, &mut parts)?;
        match holder.call(&message, &fds) {
            Ok(pidfd) => {
                return Ok(Call {
                    pidfd,
                    status: status_read,
                    _holder: holder,
                });
            }
            Err(Failure::Gone(error)) => {
                tracing::debug!(%error, attempt, "a sandbox holder is gone; starting another");
                forget(pool, &holder);
                if parts.is_none() {
                    // Planned afresh, so fingerprinted afresh: the new
                    // holder is keyed by the view it is built from.
                    let fresh = super::prepare(sandbox, workspace)?;
                    fingerprint = Fingerprint::of(&fresh.view);
                    parts = Some(fresh);
                }
            }
            Err(Failure::Refused(error)) => {
                return Err(SandboxError::Io {
                    what: "starting the command's namespaces".into(),
                    source: error,
                });
            }
        }
    }
    Err(SandboxError::Setup(
        "the namespace holder stopped twice in a row".into(),
    ))
}

/// The request bytes: header and body (see [`super::zygote`]).
fn encode(spec: &CallSpec) -> Result<Vec<u8>, SandboxError> {
    let mut body = Vec::new();
    let mut push = |text: &OsStr| -> Result<(), SandboxError> {
        if text.as_bytes().contains(&0) {
            return Err(SandboxError::InvalidCommand(
                "a command, argument or variable holds a NUL byte".into(),
            ));
        }
        body.extend_from_slice(text.as_bytes());
        body.push(0);
        Ok(())
    };
    push(spec.program.as_os_str())?;
    for argument in &spec.args {
        push(argument)?;
    }
    for (name, value) in &spec.env {
        let mut pair = name.clone();
        pair.push("=");
        pair.push(value);
        push(&pair)?;
    }
    let strings = 1 + spec.args.len() + spec.env.len();
    if spec.args.is_empty() || body.len() > zygote::MAX_BODY || strings > zygote::MAX_STRINGS {
        return Err(SandboxError::InvalidCommand(if spec.args.is_empty() {
            "it has no arguments, not even its own name".into()
        } else {
            format!(
                "{} (its program, arguments and environment are longer than a command may be)",
                io::Error::from_raw_os_error(libc::E2BIG)
            )
        }));
    }
    let word = |value: usize| u32::try_from(value).unwrap_or(u32::MAX).to_ne_bytes();
    let mut message = Vec::with_capacity(zygote::HEADER_LEN + body.len());
    message.extend_from_slice(&zygote::MAGIC.to_ne_bytes());
    message.extend_from_slice(&word(body.len()));
    message.extend_from_slice(&word(spec.args.len()));
    message.extend_from_slice(&word(spec.env.len()));
    message.extend_from_slice(&body);
    Ok(message)
}

/// The view as planned now, and the identity of every host path it mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    view: View,
    identities: Vec<Option<(u64, u64, i64, i64)>>,
}

impl Fingerprint {
    fn of(view: &View) -> Self {
        let identities = view
            .steps
            .iter()
            .filter_map(|step| match step {
                Step::Bind { target, .. } | Step::Tmpfs { target, .. } => Some(target),
                _ => None,
            })
            .map(|target| identity(Path::new(OsStr::from_bytes(target.as_bytes()))))
            .collect();
        Self {
            view: view.clone(),
            identities,
        }
    }
}

/// Device and inode of `path` on the host, and for anything but a
/// directory its change time (a directory's changes with every file
/// created in it; a replaced one has another inode).
fn identity(path: &Path) -> Option<(u64, u64, i64, i64)> {
    let metadata = std::fs::symlink_metadata(path).ok()?;
    let (seconds, nanoseconds) = if metadata.is_dir() {
        (0, 0)
    } else {
        (metadata.ctime(), metadata.ctime_nsec())
    };
    Some((metadata.dev(), metadata.ino(), seconds, nanoseconds))
}

/// A run's hold on its kernel's namespace holders; see the module docs.
#[must_use = "the holders stop when the last guard is dropped"]
pub struct RunHolders {
    pool: Arc<Pool>,
}

impl std::fmt::Debug for RunHolders {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RunHolders").finish_non_exhaustive()
    }
}

impl Drop for RunHolders {
    fn drop(&mut self) {
        let mut runs = self
            .pool
            .runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *runs = runs.saturating_sub(1);
        if *runs > 0 {
            return;
        }
        let stopped: Vec<Entry> = std::mem::take(&mut *self.pool.holders());
        drop(runs);
        // Stopping a holder waits for its relay: outside the pool's lock.
        drop(stopped);
    }
}

struct Entry {
    config: Weak<SandboxConfig>,
    level: SandboxLevel,
    metadata_writable: bool,
    workspace: PathBuf,
    fingerprint: Fingerprint,
    holder: Arc<Holder>,
}

/// The holder of this view, started from `parts` if there is none.
fn holder_for(
    pool: &Pool,
    sandbox: &Sandbox,
    workspace: &Path,
    fingerprint: &Fingerprint,
    parts: &mut Option<super::namespaces::Parts>,
) -> Result<Arc<Holder>, SandboxError> {
    let mut dropped = Vec::new();
    let mut holders = pool.holders();
    // Holders of dead configurations, and a stale holder of this one, go.
    let same = |entry: &Entry| {
        entry
            .config
            .upgrade()
            .is_some_and(|config| Arc::ptr_eq(&config, &sandbox.config))
            && entry.level == sandbox.level
            && entry.metadata_writable == sandbox.metadata_writable
            && entry.workspace == workspace
    };
    let mut index = 0;
    while index < holders.len() {
        let entry = &holders[index];
        let stale =
            entry.config.strong_count() == 0 || (same(entry) && entry.fingerprint != *fingerprint);
        if stale {
            dropped.push(holders.swap_remove(index));
        } else {
            index += 1;
        }
    }
    let found = holders
        .iter()
        .find(|entry| same(entry))
        .map(|entry| Arc::clone(&entry.holder));
    let holder = match found {
        Some(holder) => holder,
        None => {
            let Some(parts) = parts.take() else {
                return Err(SandboxError::Setup(
                    "no plan for a new namespace holder".into(),
                ));
            };
            let holder = Arc::new(Holder::start(&Launch::new(parts)?)?);
            holders.push(Entry {
                config: Arc::downgrade(&sandbox.config),
                level: sandbox.level,
                metadata_writable: sandbox.metadata_writable,
                workspace: workspace.to_path_buf(),
                fingerprint: fingerprint.clone(),
                holder: Arc::clone(&holder),
            });
            holder
        }
    };
    drop(holders);
    // Stopping a holder waits for its relay: outside the lock.
    drop(dropped);
    Ok(holder)
}

/// Forgets `holder` (it stopped serving).
fn forget(pool: &Pool, holder: &Arc<Holder>) {
    let mut holders = pool.holders();
    let gone: Vec<Entry> = holders
        .iter()
        .position(|entry| Arc::ptr_eq(&entry.holder, holder))
        .map(|index| holders.swap_remove(index))
        .into_iter()
        .collect();
    drop(holders);
    drop(gone);
}

/// Why a request failed.
enum Failure {
    /// The holder is gone (its socket closed): start another.
    Gone(io::Error),
    /// The holder could not start the call.
    Refused(io::Error),
}

/// The kernel process's end of one holder.
#[derive(Debug)]
struct Holder {
    /// Closed first when the holder stops: the holder exits at end of file.
    socket: Option<Mutex<UnixStream>>,
    /// Dropping it tells the keeper thread to kill and reap the relay.
    stop: Option<mpsc::Sender<()>>,
    keeper: Option<std::thread::JoinHandle<()>>,
    /// The relay's process id (0 if it did not start).
    relay_pid: u32,
}

impl Holder {
    /// Starts the holder — `Keel` re-executed in its holder mode
    /// ([`reexec`]) — from a thread of its own, which lives as long as the
    /// holder (the relay's parent-death signal follows the thread that
    /// spawned it), hands it `launch`'s plan and returns once its view is
    /// built.
    fn start(launch: &Launch) -> Result<Self, SandboxError> {
        let (ours, theirs) = UnixStream::pair().map_err(|source| SandboxError::Io {
            what: "creating the holder's socket".into(),
            source,
        })?;
        let (started_send, started) = mpsc::sync_channel::<Result<u32, HandOver>>(1);
        let (stop, stopped) = mpsc::channel::<()>();
        let keeper = std::thread::Builder::new()
            .name("keel-sandbox-holder".into())
            .spawn(move || keep(theirs, &started_send, &stopped))
            .map_err(|source| SandboxError::Io {
                what: "starting the holder's thread".into(),
                source,
            })?;
        let spawned = started.recv().unwrap_or_else(|_| {
            Err(HandOver::Broken(io::Error::other(
                "the holder's thread ended before it started",
            )))
        });
        let mut holder = Self {
            socket: Some(Mutex::new(ours)),
            stop: Some(stop),
            keeper: Some(keeper),
            relay_pid: *spawned.as_ref().unwrap_or(&0),
        };
        let outcome = spawned.and_then(|_| match &holder.socket {
            Some(socket) => reexec::hand_over(
                &socket
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                launch,
            ),
            None => Err(HandOver::Broken(io::Error::from_raw_os_error(libc::EPIPE))),
        });
        match outcome {
            Ok(()) => Ok(holder),
            Err(failure) => {
                // Stops (and reaps) whatever did start.
                drop(holder.socket.take());
                drop(holder);
                Err(match failure {
                    HandOver::Refused(error) => SandboxError::Unavailable {
                        reason: format!("setting up the sandbox's namespaces failed: {error}"),
                    },
                    HandOver::Broken(source) => SandboxError::Io {
                        what: "starting the sandbox's namespace holder".into(),
                        source,
                    },
                })
            }
        }
    }

    /// Sends one request; the pidfd of the call's init.
    fn call(&self, message: &[u8], fds: &[RawFd]) -> Result<OwnedFd, Failure> {
        let Some(socket) = &self.socket else {
            return Err(Failure::Gone(io::Error::from_raw_os_error(libc::EPIPE)));
        };
        let socket = socket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let fd = socket.as_raw_fd();
        passing::send(fd, message, fds).map_err(Failure::Gone)?;
        let mut reply = [0u8; 4];
        let mut pidfd = [-1; 1];
        let (read, count) = passing::receive(fd, &mut reply, &mut pidfd).map_err(Failure::Gone)?;
        if read == 0 {
            return Err(Failure::Gone(io::Error::from_raw_os_error(libc::EPIPE)));
        }
        if let Some(rest) = reply.get_mut(read..) {
            passing::read_exact(fd, rest).map_err(Failure::Gone)?;
        }
        drop(socket);
        // SAFETY: `receive` installed this descriptor in this process and
        // nothing else owns it.
        #[allow(unsafe_code)]
        let pidfd = (count == 1).then(|| unsafe { OwnedFd::from_raw_fd(pidfd[0]) });
        match (i32::from_ne_bytes(reply), pidfd) {
            (0, Some(pidfd)) => Ok(pidfd),
            (0, None) => Err(Failure::Gone(io::Error::from_raw_os_error(libc::EPROTO))),
            (errno, _) => Err(Failure::Refused(io::Error::from_raw_os_error(errno))),
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.socket.take());
        drop(self.stop.take());
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
    }
}

/// The keeper thread: spawns the holder (its relay), reports, and when
/// told to stop (after the holder's socket was closed, so the holder exits
/// and its relay follows) reaps it — killing it if it has not ended within
/// [`STOP_GRACE`].
fn keep(
    theirs: UnixStream,
    started: &mpsc::SyncSender<Result<u32, HandOver>>,
    stopped: &mpsc::Receiver<()>,
) {
    let mut relay = match reexec::spawn(theirs) {
        Ok(relay) => relay,
        Err(failure) => {
            let _ = started.send(Err(failure));
            return;
        }
    };
    if started.send(Ok(relay.id())).is_err() {
        let _ = relay.kill();
    }
    // Blocks until the holder is dropped (its sender goes away).
    let _ = stopped.recv();
    let deadline = std::time::Instant::now() + STOP_GRACE;
    while matches!(relay.try_wait(), Ok(None)) {
        if std::time::Instant::now() >= deadline {
            let _ = relay.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let _ = relay.wait();
}

/// How long a stopping holder may take to exit before its relay is killed.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
