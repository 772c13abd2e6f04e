//! Starting a command (or a namespace holder) inside its own Linux
//! namespaces.
//!
//! `std::process::Command` forks a child of the kernel process and, before
//! it execs the shell, runs [`Launch::run_in_child`]. That child becomes a
//! chain of three processes:
//!
//! 1. the **relay** (in the host's PID namespace) creates new user, mount,
//!    PID, IPC and UTS namespaces (and network, unless the level allows it),
//!    maps its own uid and gid, forks the init, closes every descriptor and
//!    waits; it ends exactly as the command ended (same code or signal), so
//!    the kernel process sees an ordinary child;
//! 2. the **init** (PID 1 of the new PID namespace) pivots into a tmpfs,
//!    builds the filesystem view there ([`super::view`]), detaches the
//!    host's root, sets the PID namespace's process limit and the user
//!    namespace's inotify limits, forks the
//!    command, then reaps whatever is orphaned; when the command exits it
//!    kills and reaps every process left in the namespace and only then
//!    reports the command's status, so nothing survives a call;
//! 3. the **command** starts a new session (no controlling terminal), sets
//!    its rlimits, marks every inherited descriptor close-on-exec, drops its
//!    capabilities, enforces Landlock and seccomp, and returns to `std`,
//!    which execs the shell.
//!
//! A namespace holder ([`Launch::hold_in_child`]) is the same chain without
//! a command of its own: its init builds the view once and then serves the
//! run's calls ([`super::zygote`]), each of which mounts
//! [`Launch::fresh_mounts`] and runs the command's restrictions in two
//! halves ([`Launch::command_session`] before its request,
//! [`Launch::command_restrictions`] after).
//!
//! The relay and the init die with their parent (`PR_SET_PDEATHSIG`), so
//! killing the relay (a timeout, a cancellation, the kernel process dying)
//! tears the whole namespace down. The signal follows the *thread* that
//! spawned the relay: spawn from a thread that outlives the command (a
//! runtime's worker, the main thread), never from a short-lived one. A failure before the command execs is
//! returned from the closure in whichever process has it, and `std` reports
//! it to the spawner through its close-on-exec pipe: nothing runs.
//!
//! Invariant: everything here runs after `fork` in a copy of a
//! multi-threaded process, so it only calls the wrappers of [`super::sys`]
//! on data prepared by [`Launch::new`]; it never allocates.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use seccompiler::BpfProgram;

use std::ffi::CStr;

use super::sys;
use super::view::{Beneath, Step, View, c_path};

/// Where the new root's tmpfs is mounted in the child's mount namespace
/// (covering the host's `/tmp` there only; nothing is written on the host).
const STAGING: &CStr = c"/tmp";
/// [`super::view::OLD_ROOT`] as a C string, inside the new root.
const OLD_ROOT: &CStr = c"/.keel-old-root";
/// [`OLD_ROOT`] under [`STAGING`], before the pivot.
const STAGED_OLD_ROOT: &CStr = c"/tmp/.keel-old-root";
use super::{SandboxError, limits::ResourceLimits};

/// The hostname inside the sandbox.
const HOSTNAME: &[u8] = b"keel-sandbox";

/// Everything the child chain needs, prepared in the parent.
#[derive(Debug)]
pub(crate) struct Launch {
    /// The kernel process's PID, to notice having been orphaned already.
    parent: libc::pid_t,
    flags: libc::c_int,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    view: View,
    pid_max: Option<(CString, Vec<u8>)>,
    /// The user namespace's own limits (inotify): files under
    /// `/proc/sys/user` and their values.
    user_limits: Vec<(CString, Vec<u8>)>,
    workspace: CString,
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    /// The Landlock ruleset and the access bits for the view's own mounts.
    landlock: OwnedFd,
    landlock_extra: Vec<(CString, u64)>,
    filter: BpfProgram,
}

/// The parts of a [`Launch`] built elsewhere.
pub(crate) struct Parts {
    pub network: bool,
    pub view: View,
    pub workspace: CString,
    pub limits: ResourceLimits,
    pub landlock: OwnedFd,
    pub landlock_extra: Vec<(CString, u64)>,
    pub filter: BpfProgram,
}

/// The namespaces every sandboxed command gets (network added unless allowed).
pub(crate) const NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS;

impl Launch {
    /// Prepares the launch; allocates everything the child will use.
    pub(crate) fn new(parts: Parts) -> Result<Self, SandboxError> {
        // SAFETY: getuid and getgid cannot fail and take no arguments.
        #[allow(unsafe_code)]
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let mut flags = NAMESPACES;
        if !parts.network {
            flags |= libc::CLONE_NEWNET;
        }
        let pid_max = match parts.limits.pid_max() {
            Some(max) => Some((
                c_path("/proc/sys/kernel/pid_max".as_ref())?,
                max.to_string().into_bytes(),
            )),
            None => None,
        };
        let user_limits = parts
            .limits
            .user_namespace_limits()
            .into_iter()
            .map(|(name, value)| {
                let path = std::path::Path::new("/proc/sys/user").join(name);
                Ok((c_path(&path)?, value.to_string().into_bytes()))
            })
            .collect::<Result<_, SandboxError>>()?;
        Ok(Self {
            parent: i32::try_from(std::process::id()).unwrap_or(0),
            user_limits,
            flags,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            view: parts.view,
            pid_max,
            workspace: parts.workspace,
            rlimits: parts.limits.rlimits(),
            landlock: parts.landlock,
            landlock_extra: parts.landlock_extra,
            filter: parts.filter,
        })
    }

    /// Runs in the forked child (the relay); returns only in the command
    /// process, which then execs, or with the error that stops it.
    pub(crate) fn run_in_child(&self) -> io::Result<()> {
        self.relay(|relay, status| self.init(relay, status))
    }

    /// Runs in the forked child (the relay) of a namespace holder: its init
    /// builds the view once and then serves calls on `socket` until the
    /// kernel process closes its end ([`super::zygote`]). Returns only with
    /// the error that stopped the set-up.
    pub(crate) fn hold_in_child(&self, socket: RawFd) -> io::Result<()> {
        self.relay(|relay, status| self.hold(relay, status, socket))
    }

    /// The relay: new namespaces, then `child` in the forked init (PID 1),
    /// given a pidfd of the relay and the write end of the status pipe.
    fn relay(&self, child: impl FnOnce(RawFd, RawFd) -> io::Result<()>) -> io::Result<()> {
        sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)?;
        if sys::parent_pid() != self.parent {
            sys::exit(1);
        }
        sys::unshare(self.flags)?;
        sys::write_file(c"/proc/self/setgroups", b"deny")?;
        sys::write_file(c"/proc/self/uid_map", &self.uid_map)?;
        sys::write_file(c"/proc/self/gid_map", &self.gid_map)?;
        let relay = sys::pidfd_of_self()?;
        let (status_read, status_write) = sys::pipe()?;
        let init = sys::fork()?;
        if init == 0 {
            sys::close(status_read);
            return child(relay, status_write);
        }
        relay_until_exit(init, status_read)
    }

    /// PID 1 of the new PID namespace: builds the view, forks the command
    /// and waits for it.
    fn init(&self, relay: RawFd, status: RawFd) -> io::Result<()> {
        sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)?;
        if sys::has_exited(relay) {
            sys::exit(1);
        }
        sys::close(relay);
        self.build_view()?;
        let command = sys::fork()?;
        if command == 0 {
            sys::close(status);
            return self.command(self.landlock.as_raw_fd());
        }
        // Only the status pipe stays open: the spawner's pipes must see end
        // of file as soon as the command and its children are gone.
        keep_only(status);
        let code = wait_for_all(command);
        sys::write(status, &code.to_ne_bytes());
        sys::exit(0)
    }

    /// PID 1 of a holder's PID namespace: builds the view, keeps only the
    /// socket and serves calls, each in PID, mount and IPC namespaces of
    /// its own ([`super::zygote::serve`]).
    fn hold(&self, relay: RawFd, status: RawFd, socket: RawFd) -> io::Result<()> {
        sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)?;
        if sys::has_exited(relay) {
            sys::exit(1);
        }
        sys::close(relay);
        self.build_view()?;
        let mut buffers = super::zygote::Buffers::map()?;
        // The relay's status pipe closes with the rest; the relay then
        // waits for this process. Closing the spawner's error pipe tells it
        // the view is built.
        sys::close(status);
        // Standard descriptors point at /dev/null, so descriptors received
        // later never land on 0, 1 or 2.
        let socket = if socket < 3 {
            sys::dup_above(socket, 3)?
        } else {
            socket
        };
        keep_only(socket);
        for fd in 0..3 {
            let null = sys::open(c"/dev/null", libc::O_RDWR)?;
            if null != fd {
                sys::dup2(null, fd)?;
                sys::close(null);
            }
        }
        super::zygote::serve(self, socket, &mut buffers)
    }

    /// What a holder's call needs afresh in its own mount namespace: a
    /// private `/tmp` and `/dev/shm`, and a `/proc` of its PID namespace
    /// (with its process limit), mounted over the holder's.
    pub(crate) fn fresh_mounts(&self) -> io::Result<()> {
        for fresh in &self.view.per_call {
            // The covered mount stays reachable through this descriptor,
            // and what the view mounted beneath it moves to the new one.
            let covered = sys::open(
                &fresh.target,
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )?;
            let renewed = run_step(&fresh.mount).and_then(|()| {
                fresh.beneath.iter().try_for_each(|beneath| match beneath {
                    Beneath::Make(step) => run_step(step),
                    Beneath::Move { from, to } => sys::move_mount(covered, from, to),
                })
            });
            sys::close(covered);
            renewed?;
        }
        if let Some((path, value)) = &self.pid_max {
            let _ = sys::write_file(path, value);
        }
        Ok(())
    }

    /// Pivots into a tmpfs, builds the view there and detaches the host's root.
    fn build_view(&self) -> io::Result<()> {
        sys::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;
        sys::mount(
            Some(c"tmpfs"),
            STAGING,
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(c"mode=755"),
        )?;
        sys::mkdir(STAGED_OLD_ROOT, 0o700)?;
        sys::pivot_root(STAGING, STAGED_OLD_ROOT)?;
        for step in &self.view.steps {
            run_step(step)?;
        }
        if let Some((path, value)) = &self.pid_max {
            // Kernels before 6.14 share one pid_max: RLIMIT_NPROC remains.
            let _ = sys::write_file(path, value);
        }
        // The user namespace's inotify limits, through the view's own
        // `/proc` (writable even where the host's `/proc/sys` is mounted
        // read-only). Every kernel with the Landlock ABI the sandbox needs
        // has them, so a failure stops the set-up: nothing runs unbounded.
        for (path, value) in &self.user_limits {
            sys::write_file(path, value)?;
        }
        sys::set_hostname(HOSTNAME)?;
        sys::detach(OLD_ROOT)?;
        sys::mount_read_only(c"/", false)
    }

    /// The command's own restrictions, enforcing the Landlock `ruleset`
    /// (with the view's own grants added); then the command is exec'd.
    pub(crate) fn command(&self, ruleset: RawFd) -> io::Result<()> {
        self.command_session()?;
        self.command_restrictions(ruleset)
    }

    /// The first half of [`Launch::command`], which needs nothing of the
    /// command itself: a new session without a terminal, rlimits, the
    /// workspace as working directory.
    pub(crate) fn command_session(&self) -> io::Result<()> {
        sys::setsid()?;
        for (resource, limit) in &self.rlimits {
            sys::set_rlimit(*resource, limit)?;
        }
        sys::chdir(&self.workspace)
    }

    /// The second half of [`Launch::command`], once the command's
    /// descriptors are in place: every other descriptor closes at exec,
    /// `no_new_privs`, no capabilities, Landlock, seccomp.
    pub(crate) fn command_restrictions(&self, ruleset: RawFd) -> io::Result<()> {
        sys::close_from(3, true)?;
        sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1)?;
        super::capabilities::drop_all()?;
        for (path, access) in &self.landlock_extra {
            sys::landlock_allow(ruleset, path, *access)?;
        }
        sys::landlock_restrict(ruleset)?;
        seccompiler::apply_filter(&self.filter).map_err(|_| io::Error::last_os_error())
    }
}

/// Closes every descriptor but `fd`.
fn keep_only(fd: RawFd) {
    let fd = u32::try_from(fd).unwrap_or(0);
    sys::close_range(0, fd.saturating_sub(1));
    sys::close_range(fd + 1, u32::MAX);
}

/// An init's wait for `command`, reaping orphans meanwhile; then everything
/// the command left behind dies and is reaped (the orphans are this init's
/// children), so that when the status is told no process of the call is
/// left. The command's wait status.
pub(crate) fn wait_for_all(command: libc::pid_t) -> libc::c_int {
    let code = loop {
        match sys::wait(-1) {
            Ok((pid, code)) if pid == command => break code,
            Ok(_) => {}
            Err(_) => sys::exit(1),
        }
    };
    sys::kill_all_others();
    while sys::wait(-1).is_ok() {}
    code
}

/// The relay's life after forking the init: close everything, wait, and
/// end as the command ended.
fn relay_until_exit(init: libc::pid_t, status: RawFd) -> ! {
    keep_only(status);
    // A core dump of this copy of the kernel process would help nobody.
    let _ = sys::set_rlimit(
        libc::RLIMIT_CORE,
        &libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        },
    );
    let mut bytes = [0u8; 4];
    let read = sys::read(status, &mut bytes);
    // The init is reaped here, not left to whoever adopts orphans (which may
    // be the kernel process itself when it runs as PID 1 of a container).
    let init_status = match sys::wait(init) {
        Ok((_, code)) => code,
        Err(_) => sys::exit(1),
    };
    if read == bytes.len() {
        sys::exit_like(i32::from_ne_bytes(bytes));
    }
    // The init died without a status (killed, or its set-up failed).
    sys::exit_like(init_status)
}

/// One step of the view.
fn run_step(step: &Step) -> io::Result<()> {
    match step {
        Step::Dir(path) => sys::mkdir(path, 0o755),
        Step::File(path) => sys::make_file(path),
        Step::Symlink { target, link } => sys::symlink(target, link),
        Step::Bind {
            source,
            target,
            read_only,
        } => {
            sys::mount(
                Some(source),
                target,
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
            )?;
            if *read_only {
                sys::mount_read_only(target, true)?;
            }
            Ok(())
        }
        Step::Tmpfs { target, options } => sys::mount(
            Some(c"tmpfs"),
            target,
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(options),
        ),
        Step::Proc(target) => sys::mount(
            Some(c"proc"),
            target,
            Some(c"proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            // Only processes the reader may ptrace are visible: not the
            // init, whose memory and argv are a copy of the kernel process's.
            Some(c"hidepid=ptraceable"),
        ),
        Step::Devpts(target) => sys::mount(
            Some(c"devpts"),
            target,
            Some(c"devpts"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some(c"newinstance,ptmxmode=0666,mode=620"),
        ),
        Step::ReadOnly(target) => sys::mount_read_only(target, false),
    }
}
