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
//! A namespace holder ([`Launch::hold_as_relay`]) is the same chain without
//! a command of its own, started not as a fork of the kernel process but
//! as the executable re-executed in its holder mode ([`super::reexec`]),
//! its `Launch` read from a plan ([`Launch::to_plan`]): its init builds the view once and then serves the
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

use super::plan::{PlanError, Reader, Writer};
use super::sys;
use super::view::{Beneath, Fresh, Grant, Step, View, c_path};

/// Where the new root's tmpfs is mounted in the child's mount namespace
/// (covering the host's `/tmp` there only; nothing is written on the host).
const STAGING: &CStr = c"/tmp";
/// [`super::view::OLD_ROOT`] as a C string, inside the new root.
const OLD_ROOT: &CStr = c"/.keel-old-root";
/// [`OLD_ROOT`] under [`STAGING`], before the pivot.
const STAGED_OLD_ROOT: &CStr = c"/tmp/.keel-old-root";
use super::{SandboxError, limits::ResourceLimits};

/// What a holder's init writes on its socket once its view is built (any
/// other word is the errno that stopped the set-up).
pub(crate) const READY: i32 = 0;

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
    /// The Landlock ruleset of a per-call command (a holder's calls bring
    /// their own: it has none) and the access bits for the view's own
    /// mounts.
    landlock: Option<OwnedFd>,
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
            landlock: Some(parts.landlock),
            landlock_extra: parts.landlock_extra,
            filter: parts.filter,
        })
    }

    /// Runs in the forked child (the relay); returns only in the command
    /// process, which then execs, or with the error that stops it.
    pub(crate) fn run_in_child(&self) -> io::Result<()> {
        self.relay(|relay, status| self.init(relay, status))
    }

    /// Runs in a re-executed holder process ([`super::reexec`]), which
    /// becomes the relay of a namespace holder: its init builds the view
    /// once, writes [`READY`] on `socket` and then serves calls on it until
    /// the kernel process closes its end ([`super::zygote`]). Returns only
    /// with the error that stopped the set-up, in whichever process had it.
    pub(crate) fn hold_as_relay(&self, socket: RawFd) -> io::Result<()> {
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
        let Some(ruleset) = self.landlock.as_ref().map(AsRawFd::as_raw_fd) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let command = sys::fork()?;
        if command == 0 {
            sys::close(status);
            return self.command(ruleset);
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
        // waits for this process.
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
        // The kernel process waits for this word before its first request.
        super::passing::write_all(socket, &READY.to_ne_bytes())?;
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
    // A core dump of the relay (for a per-call command, a copy of the
    // kernel process) would help nobody.
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
            // init (for a per-call command a fork of the kernel process,
            // its memory a copy of the kernel process's).
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

/// Tags of [`Step`] in a plan.
mod tag {
    pub(super) const DIR: u8 = 1;
    pub(super) const FILE: u8 = 2;
    pub(super) const SYMLINK: u8 = 3;
    pub(super) const BIND: u8 = 4;
    pub(super) const TMPFS: u8 = 5;
    pub(super) const PROC: u8 = 6;
    pub(super) const DEVPTS: u8 = 7;
    pub(super) const READ_ONLY: u8 = 8;
    pub(super) const MAKE: u8 = 1;
    pub(super) const MOVE: u8 = 2;
}

impl Launch {
    /// The plan a re-executed holder builds its namespaces from
    /// ([`super::plan`]): everything but the Landlock ruleset, which a
    /// holder's calls bring with each request. `None` when it is larger
    /// than a plan may be.
    pub(crate) fn to_plan(&self) -> Option<Vec<u8>> {
        let mut plan = Writer::new();
        plan.i32(self.parent);
        plan.i32(self.flags);
        plan.bytes(&self.uid_map);
        plan.bytes(&self.gid_map);
        write_view(&mut plan, &self.view);
        plan.bool(self.pid_max.is_some());
        if let Some((path, value)) = &self.pid_max {
            plan.c_string(path);
            plan.bytes(value);
        }
        plan.len(self.user_limits.len());
        for (path, value) in &self.user_limits {
            plan.c_string(path);
            plan.bytes(value);
        }
        plan.c_string(&self.workspace);
        plan.len(self.rlimits.len());
        for (resource, limit) in &self.rlimits {
            plan.u32(*resource);
            plan.u64(limit.rlim_cur);
            plan.u64(limit.rlim_max);
        }
        plan.len(self.landlock_extra.len());
        for (path, access) in &self.landlock_extra {
            plan.c_string(path);
            plan.u64(*access);
        }
        plan.len(self.filter.len());
        for instruction in &self.filter {
            plan.u32(u32::from(instruction.code));
            plan.u8(instruction.jt);
            plan.u8(instruction.jf);
            plan.u32(instruction.k);
        }
        plan.finish()
    }

    /// Reads a plan [`Launch::to_plan`] wrote; refuses anything else.
    pub(crate) fn from_plan(bytes: &[u8]) -> Result<Self, PlanError> {
        let mut plan = Reader::new(bytes)?;
        let parent = plan.i32()?;
        let flags = plan.i32()?;
        // Only namespace flags: a plan never asks for anything else.
        if flags & !(NAMESPACES | libc::CLONE_NEWNET) != 0 || flags & NAMESPACES != NAMESPACES {
            return Err(PlanError::Invalid);
        }
        let uid_map = plan.bytes()?;
        let gid_map = plan.bytes()?;
        let view = read_view(&mut plan)?;
        let pid_max = if plan.bool()? {
            Some((plan.c_string()?, plan.bytes()?))
        } else {
            None
        };
        let count = plan.count(8)?;
        let user_limits = (0..count)
            .map(|_| Ok((plan.c_string()?, plan.bytes()?)))
            .collect::<Result<_, PlanError>>()?;
        let workspace = plan.c_string()?;
        let count = plan.count(20)?;
        let rlimits = (0..count)
            .map(|_| {
                let resource = plan.u32()?;
                let limit = libc::rlimit {
                    rlim_cur: plan.u64()?,
                    rlim_max: plan.u64()?,
                };
                Ok((resource, limit))
            })
            .collect::<Result<_, PlanError>>()?;
        let count = plan.count(12)?;
        let landlock_extra = (0..count)
            .map(|_| Ok((plan.c_string()?, plan.u64()?)))
            .collect::<Result<_, PlanError>>()?;
        let count = plan.count(10)?;
        let filter = (0..count)
            .map(|_| {
                let code = u16::try_from(plan.u32()?).map_err(|_| PlanError::Invalid)?;
                Ok(seccompiler::sock_filter {
                    code,
                    jt: plan.u8()?,
                    jf: plan.u8()?,
                    k: plan.u32()?,
                })
            })
            .collect::<Result<BpfProgram, PlanError>>()?;
        // A holder always confines its calls with seccomp.
        if filter.is_empty() {
            return Err(PlanError::Invalid);
        }
        plan.finish()?;
        Ok(Self {
            parent,
            flags,
            uid_map,
            gid_map,
            view,
            pid_max,
            user_limits,
            workspace,
            rlimits,
            landlock: None,
            landlock_extra,
            filter,
        })
    }
}

fn write_view(plan: &mut Writer, view: &View) {
    plan.len(view.steps.len());
    for step in &view.steps {
        write_step(plan, step);
    }
    plan.len(view.per_call.len());
    for fresh in &view.per_call {
        plan.c_string(&fresh.target);
        write_step(plan, &fresh.mount);
        plan.len(fresh.beneath.len());
        for beneath in &fresh.beneath {
            match beneath {
                Beneath::Make(step) => {
                    plan.u8(tag::MAKE);
                    write_step(plan, step);
                }
                Beneath::Move { from, to } => {
                    plan.u8(tag::MOVE);
                    plan.c_string(from);
                    plan.c_string(to);
                }
            }
        }
    }
    plan.len(view.landlock.len());
    for (path, grant) in &view.landlock {
        plan.c_string(path);
        plan.u8(match grant {
            Grant::List => 0,
            Grant::Read => 1,
            Grant::Devices => 2,
            Grant::All => 3,
        });
    }
}

fn read_view(plan: &mut Reader<'_>) -> Result<View, PlanError> {
    let count = plan.count(5)?;
    let steps = (0..count)
        .map(|_| read_step(plan))
        .collect::<Result<_, _>>()?;
    let count = plan.count(13)?;
    let per_call = (0..count)
        .map(|_| {
            let target = plan.c_string()?;
            let mount = read_step(plan)?;
            let count = plan.count(5)?;
            let beneath = (0..count)
                .map(|_| match plan.u8()? {
                    tag::MAKE => Ok(Beneath::Make(read_step(plan)?)),
                    tag::MOVE => Ok(Beneath::Move {
                        from: plan.c_string()?,
                        to: plan.c_string()?,
                    }),
                    _ => Err(PlanError::Invalid),
                })
                .collect::<Result<_, _>>()?;
            Ok(Fresh {
                target,
                mount,
                beneath,
            })
        })
        .collect::<Result<_, PlanError>>()?;
    let count = plan.count(5)?;
    let landlock = (0..count)
        .map(|_| {
            let path = plan.c_string()?;
            let grant = match plan.u8()? {
                0 => Grant::List,
                1 => Grant::Read,
                2 => Grant::Devices,
                3 => Grant::All,
                _ => return Err(PlanError::Invalid),
            };
            Ok((path, grant))
        })
        .collect::<Result<_, PlanError>>()?;
    Ok(View {
        steps,
        per_call,
        landlock,
    })
}

fn write_step(plan: &mut Writer, step: &Step) {
    match step {
        Step::Dir(path) => {
            plan.u8(tag::DIR);
            plan.c_string(path);
        }
        Step::File(path) => {
            plan.u8(tag::FILE);
            plan.c_string(path);
        }
        Step::Symlink { target, link } => {
            plan.u8(tag::SYMLINK);
            plan.c_string(target);
            plan.c_string(link);
        }
        Step::Bind {
            source,
            target,
            read_only,
        } => {
            plan.u8(tag::BIND);
            plan.c_string(source);
            plan.c_string(target);
            plan.bool(*read_only);
        }
        Step::Tmpfs { target, options } => {
            plan.u8(tag::TMPFS);
            plan.c_string(target);
            plan.c_string(options);
        }
        Step::Proc(path) => {
            plan.u8(tag::PROC);
            plan.c_string(path);
        }
        Step::Devpts(path) => {
            plan.u8(tag::DEVPTS);
            plan.c_string(path);
        }
        Step::ReadOnly(path) => {
            plan.u8(tag::READ_ONLY);
            plan.c_string(path);
        }
    }
}

fn read_step(plan: &mut Reader<'_>) -> Result<Step, PlanError> {
    Ok(match plan.u8()? {
        tag::DIR => Step::Dir(plan.c_string()?),
        tag::FILE => Step::File(plan.c_string()?),
        tag::SYMLINK => Step::Symlink {
            target: plan.c_string()?,
            link: plan.c_string()?,
        },
        tag::BIND => Step::Bind {
            source: plan.c_string()?,
            target: plan.c_string()?,
            read_only: plan.bool()?,
        },
        tag::TMPFS => Step::Tmpfs {
            target: plan.c_string()?,
            options: plan.c_string()?,
        },
        tag::PROC => Step::Proc(plan.c_string()?),
        tag::DEVPTS => Step::Devpts(plan.c_string()?),
        tag::READ_ONLY => Step::ReadOnly(plan.c_string()?),
        _ => return Err(PlanError::Invalid),
    })
}

#[cfg(test)]
mod plan_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn c(text: &str) -> CString {
        CString::new(text).unwrap()
    }

    /// A launch with one of everything a plan carries.
    fn launch() -> Launch {
        let bind = Step::Bind {
            source: c("/.keel-old-root/usr"),
            target: c("/usr"),
            read_only: true,
        };
        Launch {
            parent: 4242,
            flags: NAMESPACES | libc::CLONE_NEWNET,
            uid_map: b"1000 1000 1\n".to_vec(),
            gid_map: b"1000 1000 1\n".to_vec(),
            view: View {
                steps: vec![
                    Step::Dir(c("/usr")),
                    Step::File(c("/etc/hosts")),
                    Step::Symlink {
                        target: c("usr/bin"),
                        link: c("/bin"),
                    },
                    bind.clone(),
                    Step::Tmpfs {
                        target: c("/tmp"),
                        options: c("size=64m,mode=1777"),
                    },
                    Step::Proc(c("/proc")),
                    Step::Devpts(c("/dev/pts")),
                    Step::ReadOnly(c("/")),
                ],
                per_call: vec![Fresh {
                    target: c("/tmp"),
                    mount: Step::Tmpfs {
                        target: c("/tmp"),
                        options: c("size=64m"),
                    },
                    beneath: vec![
                        Beneath::Make(Step::Dir(c("/tmp/x"))),
                        Beneath::Move {
                            from: c("x"),
                            to: c("/tmp/x"),
                        },
                    ],
                }],
                landlock: vec![
                    (c("/"), Grant::List),
                    (c("/usr"), Grant::Read),
                    (c("/dev"), Grant::Devices),
                    (c("/tmp"), Grant::All),
                ],
            },
            pid_max: Some((c("/proc/sys/kernel/pid_max"), b"512".to_vec())),
            user_limits: vec![(c("/proc/sys/user/max_inotify_watches"), b"8192".to_vec())],
            workspace: c("/work/space"),
            rlimits: vec![(
                libc::RLIMIT_NOFILE,
                libc::rlimit {
                    rlim_cur: 1024,
                    rlim_max: 4096,
                },
            )],
            landlock: None,
            landlock_extra: vec![(c("/tmp"), 0x1fff)],
            filter: vec![
                seccompiler::sock_filter {
                    code: 0x20,
                    jt: 0,
                    jf: 0,
                    k: 4,
                },
                seccompiler::sock_filter {
                    code: 0x06,
                    jt: 1,
                    jf: 2,
                    k: 0x7fff_0000,
                },
            ],
        }
    }

    /// Every field the holder reads, compared.
    fn same(left: &Launch, right: &Launch) -> bool {
        left.parent == right.parent
            && left.flags == right.flags
            && left.uid_map == right.uid_map
            && left.gid_map == right.gid_map
            && left.view == right.view
            && left.pid_max == right.pid_max
            && left.user_limits == right.user_limits
            && left.workspace == right.workspace
            && left.rlimits.len() == right.rlimits.len()
            && left.rlimits.iter().zip(&right.rlimits).all(|(a, b)| {
                a.0 == b.0 && a.1.rlim_cur == b.1.rlim_cur && a.1.rlim_max == b.1.rlim_max
            })
            && left.landlock_extra == right.landlock_extra
            && left.filter == right.filter
    }

    #[test]
    fn a_plan_comes_back_whole() {
        let launch = launch();
        let plan = launch.to_plan().unwrap();
        let read = Launch::from_plan(&plan).unwrap();
        assert!(same(&launch, &read), "{read:?}");
        assert!(read.landlock.is_none());
    }

    #[test]
    fn every_cut_of_a_plan_is_refused() {
        let plan = launch().to_plan().unwrap();
        for length in 0..plan.len() {
            assert!(
                Launch::from_plan(&plan[..length]).is_err(),
                "a plan cut at {length} of {} bytes was read",
                plan.len()
            );
        }
        let mut long = plan.clone();
        long.push(0);
        assert_eq!(Launch::from_plan(&long).unwrap_err(), PlanError::Trailing);
    }

    #[test]
    fn a_plan_with_a_flipped_byte_never_reads_as_another() {
        let launch = launch();
        let plan = launch.to_plan().unwrap();
        for index in 0..plan.len() {
            let mut flipped = plan.clone();
            flipped[index] ^= 0xff;
            // Refused, or (a flipped value byte) read as a different plan:
            // never read as the original.
            if let Ok(read) = Launch::from_plan(&flipped) {
                assert!(!same(&launch, &read), "flipping byte {index} went unseen");
            }
        }
    }

    #[test]
    fn foreign_flags_and_an_empty_filter_are_refused() {
        let mut hostile = launch();
        hostile.flags |= libc::CLONE_NEWCGROUP;
        let plan = hostile.to_plan().unwrap();
        assert_eq!(Launch::from_plan(&plan).unwrap_err(), PlanError::Invalid);
        let mut hostile = launch();
        hostile.flags = libc::CLONE_NEWNS;
        let plan = hostile.to_plan().unwrap();
        assert_eq!(Launch::from_plan(&plan).unwrap_err(), PlanError::Invalid);
        let mut hostile = launch();
        hostile.filter.clear();
        let plan = hostile.to_plan().unwrap();
        assert_eq!(Launch::from_plan(&plan).unwrap_err(), PlanError::Invalid);
    }

    #[test]
    fn hostile_counts_reserve_nothing() {
        // A plan whose first list claims four billion steps.
        let mut plan = Writer::new();
        plan.i32(1);
        plan.i32(NAMESPACES);
        plan.bytes(b"");
        plan.bytes(b"");
        plan.u32(u32::MAX);
        let plan = plan.finish().unwrap();
        assert_eq!(Launch::from_plan(&plan).unwrap_err(), PlanError::Short);
    }
}
