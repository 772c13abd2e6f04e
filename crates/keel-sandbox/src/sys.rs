//! Thin, safe wrappers around the system calls the forked child makes.
//!
//! They run between `fork` and `exec` of a multi-threaded parent, so each is
//! a single system call on memory prepared beforehand: no allocation, no
//! lock, nothing but async-signal-safe calls. Every wrapper turns a failure
//! into `io::Error::last_os_error()`, which does not allocate either.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;

/// `MOUNT_ATTR_RDONLY` of `mount_setattr(2)`.
const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's UAPI).
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: libc::c_int = 1;

fn check(status: libc::c_int) -> io::Result<()> {
    if status < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_long(status: libc::c_long) -> io::Result<libc::c_long> {
    if status < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(status)
    }
}

/// `mount(2)`; `None` arguments are passed as null pointers.
pub(crate) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let pointer = |text: Option<&CStr>| text.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is null or a NUL-terminated string alive for
    // the call; the kernel only reads them.
    check(unsafe {
        libc::mount(
            pointer(source),
            target.as_ptr(),
            pointer(fstype),
            flags,
            pointer(data).cast(),
        )
    })
}

/// Makes the mount at `target` read-only, with everything beneath it when `recursive`.
pub(crate) fn mount_read_only(target: &CStr, recursive: bool) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: `target` is NUL-terminated and `attr` a live `struct
    // mount_attr` whose size is passed; the kernel only reads both.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            flags,
            &raw const attr,
            size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// `mkdir(2)`; an existing entry is not an error.
pub(crate) fn mkdir(path: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated and alive for the call.
    match check(unsafe { libc::mkdir(path.as_ptr(), mode) }) {
        Err(error) if error.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other,
    }
}

/// Creates an empty regular file; an existing entry is not an error.
pub(crate) fn make_file(path: &CStr) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; mknod of a regular file takes no device.
    match check(unsafe { libc::mknod(path.as_ptr(), libc::S_IFREG | 0o644, 0) }) {
        Err(error) if error.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other,
    }
}

/// `symlink(2)`; an existing entry is not an error.
pub(crate) fn symlink(target: &CStr, link: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated and alive for the call.
    match check(unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) }) {
        Err(error) if error.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other,
    }
}

/// Writes `contents` to the existing file `path` in one `write`.
pub(crate) fn write_file(path: &CStr, contents: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; the returned descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    check(fd)?;
    // SAFETY: `contents` is a live buffer of the given length; `fd` is open.
    let written = unsafe { libc::write(fd, contents.as_ptr().cast(), contents.len()) };
    let result = if written < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    };
    close(fd);
    result
}

/// `close(2)`, ignoring errors (nothing can be done about them here).
pub(crate) fn close(fd: RawFd) {
    // SAFETY: closing a descriptor this process owns; no memory is involved.
    unsafe {
        libc::close(fd);
    }
}

/// Closes every descriptor from `first` on (`CLOSE_RANGE_CLOEXEC`: at exec).
pub(crate) fn close_from(first: libc::c_uint, at_exec: bool) -> io::Result<()> {
    let flags = if at_exec {
        libc::CLOSE_RANGE_CLOEXEC
    } else {
        0
    };
    // SAFETY: close_range takes plain integers.
    check_long(unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, flags) })
        .map(drop)
}

/// Closes descriptors `first..=last`.
pub(crate) fn close_range(first: libc::c_uint, last: libc::c_uint) {
    if first > last {
        return;
    }
    // SAFETY: close_range takes plain integers; failure leaves fds open,
    // which only delays end-of-file on pipes.
    unsafe {
        libc::syscall(libc::SYS_close_range, first, last, 0);
    }
}

/// `fork` without glibc's at-fork handlers: a raw `clone(SIGCHLD)`.
/// Returns 0 in the child and the child's PID in the parent.
pub(crate) fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: clone without CLONE_VM and with a null stack behaves as
    // fork: the child gets a copy of this single-threaded process.
    let pid = check_long(unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    })?;
    Ok(libc::pid_t::try_from(pid).unwrap_or(libc::pid_t::MAX))
}

/// `unshare(2)`.
pub(crate) fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes flags only.
    check(unsafe { libc::unshare(flags) })
}

/// `pivot_root(new_root, put_old)`, then `chdir("/")`.
pub(crate) fn pivot_root(new_root: &CStr, put_old: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated and alive; the kernel only reads them.
    check_long(unsafe {
        libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr())
    })?;
    // SAFETY: a NUL-terminated literal.
    check(unsafe { libc::chdir(c"/".as_ptr()) })
}

/// Detaches the mount at `path` with everything beneath it, then removes the directory.
pub(crate) fn detach(path: &CStr) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated and alive for both calls.
    check(unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) })?;
    // SAFETY: as above.
    check(unsafe { libc::rmdir(path.as_ptr()) })
}

/// Sends SIGKILL to every process this one may signal but itself: from the
/// init of a PID namespace, every other process in it.
pub(crate) fn kill_all_others() {
    // SAFETY: kill takes integers only.
    unsafe {
        libc::kill(-1, libc::SIGKILL);
    }
}

/// `chdir(2)`.
pub(crate) fn chdir(path: &CStr) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated and alive for the call.
    check(unsafe { libc::chdir(path.as_ptr()) })
}

/// `sethostname(2)`.
pub(crate) fn set_hostname(name: &[u8]) -> io::Result<()> {
    // SAFETY: `name` is a live buffer of the given length.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) })
}

/// `setsid(2)`: a new session without a controlling terminal.
pub(crate) fn setsid() -> io::Result<()> {
    // SAFETY: setsid takes no arguments.
    check(unsafe { libc::setsid() })
}

/// `setrlimit(2)`.
pub(crate) fn set_rlimit(
    resource: libc::__rlimit_resource_t,
    limit: &libc::rlimit,
) -> io::Result<()> {
    // SAFETY: `limit` is a live `struct rlimit` the kernel only reads.
    check(unsafe { libc::setrlimit(resource, limit) })
}

/// `prctl(2)` with integer arguments.
pub(crate) fn prctl(option: libc::c_int, argument: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the options used here take integers, no pointers.
    check(unsafe { libc::prctl(option, argument, 0, 0, 0) })
}

/// The parent's PID.
pub(crate) fn parent_pid() -> libc::pid_t {
    // SAFETY: getppid takes no arguments and cannot fail.
    unsafe { libc::getppid() }
}

/// A pidfd of this process, to learn later whether it is still alive.
pub(crate) fn pidfd_of_self() -> io::Result<RawFd> {
    // SAFETY: getpid cannot fail and takes no arguments.
    pidfd_open(unsafe { libc::getpid() })
}

/// Whether the process behind `pidfd` has exited.
pub(crate) fn has_exited(pidfd: RawFd) -> bool {
    let mut poll = libc::pollfd {
        fd: pidfd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd; a zero timeout never blocks.
    let ready = unsafe { libc::poll(&raw mut poll, 1, 0) };
    ready != 0
}

/// Blocks until the process behind `pidfd` has exited (or polling it fails).
pub(crate) fn wait_exited(pidfd: RawFd) {
    let mut poll = libc::pollfd {
        fd: pidfd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one live pollfd; a negative timeout blocks until ready.
        let ready = unsafe { libc::poll(&raw mut poll, 1, -1) };
        if ready != 0
            && !(ready < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR))
        {
            return;
        }
    }
}

/// A pipe, both ends close-on-exec: (read, write).
pub(crate) fn pipe() -> io::Result<(RawFd, RawFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((fds[0], fds[1]))
}

/// Reads up to `buffer.len()` bytes, retrying on EINTR; 0 at end of file.
pub(crate) fn read(fd: RawFd, buffer: &mut [u8]) -> usize {
    loop {
        // SAFETY: `buffer` is live and writable for its length.
        let read = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
        if read >= 0 {
            return usize::try_from(read).unwrap_or(0);
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 0;
        }
    }
}

/// Writes `bytes` (small enough for one atomic pipe write).
pub(crate) fn write(fd: RawFd, bytes: &[u8]) {
    // SAFETY: `bytes` is a live buffer of the given length.
    unsafe {
        libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    }
}

/// Waits for `pid` (any child when -1), retrying on EINTR: (pid, status).
pub(crate) fn wait(pid: libc::pid_t) -> io::Result<(libc::pid_t, libc::c_int)> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a live int the kernel writes.
        let reaped = unsafe { libc::waitpid(pid, &raw mut status, 0) };
        if reaped >= 0 {
            return Ok((reaped, status));
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINTR) {
            return Err(error);
        }
    }
}

/// Ends this process with a wait status: the same exit code, or death by
/// the same signal.
pub(crate) fn exit_like(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: resetting a disposition, emptying the signal mask and
        // signalling oneself take no pointers but the live, empty set.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut set);
            libc::sigprocmask(libc::SIG_SETMASK, &raw const set, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
        }
        exit(128 + signal);
    }
    exit(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        1
    })
}

/// `_exit(2)`: ends the process without running any of the parent's cleanup.
pub(crate) fn exit(code: libc::c_int) -> ! {
    // SAFETY: _exit never returns and touches no memory of this process.
    unsafe { libc::_exit(code) }
}

/// Adds a Landlock rule granting `access` beneath `path` to `ruleset`.
pub(crate) fn landlock_allow(ruleset: RawFd, path: &CStr, access: u64) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; the O_PATH descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    check(fd)?;
    let rule = PathBeneath {
        allowed_access: access,
        parent_fd: fd,
    };
    // SAFETY: `rule` is a live, packed `struct landlock_path_beneath_attr`
    // the kernel only reads; the flags argument is 0.
    let status = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_PATH_BENEATH,
            &raw const rule,
            0u32,
        )
    };
    close(fd);
    check_long(status).map(drop)
}

/// Enforces the Landlock `ruleset` on this thread and its future children.
pub(crate) fn landlock_restrict(ruleset: RawFd) -> io::Result<()> {
    // SAFETY: the ruleset fd is open; the flags argument is 0; no pointers.
    check_long(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) }).map(drop)
}

/// `struct clone_args` of `clone3(2)`.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `fork` into new namespaces (`flags`, `CLONE_NEW*`) with a pidfd of the
/// child: `(0, -1)` in the child, `(pid, pidfd)` in the parent. Uses
/// `clone3`, or `clone` where a container's seccomp profile refuses
/// `clone3` with ENOSYS.
pub(crate) fn fork_into(flags: libc::c_int) -> io::Result<(libc::pid_t, RawFd)> {
    let mut pidfd: RawFd = -1;
    let flags = flags | libc::CLONE_PIDFD;
    let args = CloneArgs {
        flags: u64::from(flags.cast_unsigned()),
        pidfd: (&raw mut pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    // SAFETY: without CLONE_VM and with no stack, clone3 behaves as fork:
    // the child runs on a copy of this single-threaded process. `args` is
    // a live `struct clone_args` of the size passed; the kernel writes the
    // pidfd into `pidfd`, which outlives the call.
    let pid = match check_long(unsafe {
        libc::syscall(libc::SYS_clone3, &raw const args, size_of::<CloneArgs>())
    }) {
        Err(error) if error.raw_os_error() == Some(libc::ENOSYS) => {
            legacy_fork_into(flags, &mut pidfd)?
        }
        other => other?,
    };
    Ok((
        libc::pid_t::try_from(pid).unwrap_or(libc::pid_t::MAX),
        pidfd,
    ))
}

/// [`fork_into`] with `clone(2)`, where the pidfd goes to the third
/// argument (`parent_tid`) on x86-64 and AArch64.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn legacy_fork_into(flags: libc::c_int, pidfd: &mut RawFd) -> io::Result<libc::c_long> {
    // SAFETY: without CLONE_VM and with a null stack, clone behaves as
    // fork; the kernel writes the pidfd through the live `pidfd`.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::c_ulong::from((flags | libc::SIGCHLD).cast_unsigned()),
            0usize,
            std::ptr::from_mut(pidfd),
            0usize,
            0usize,
        )
    })
}

/// [`fork_into`] without `clone3`: not provided on this architecture.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn legacy_fork_into(_flags: libc::c_int, _pidfd: &mut RawFd) -> io::Result<libc::c_long> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// Runs `entry(argument)` in a child that shares this process's memory
/// and descriptor table (`CLONE_VM | CLONE_FILES`, as a thread would, but a
/// process of its own), on `stack`: no page table is copied. Returns the
/// child's PID.
///
/// # Safety
///
/// `entry` must only make system calls through this module and must end
/// in `execve` or [`exit`]; it must not return. Until it execs or exits,
/// this process must not run (it waits in a system call), `argument` must
/// stay valid, and nothing else may use `stack`.
pub(crate) unsafe fn spawn_sharing_memory(
    stack: &mut [u8],
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    argument: *mut libc::c_void,
) -> io::Result<libc::pid_t> {
    // The stack grows down on every architecture Keel runs on; keep the
    // top 16-byte aligned.
    let top = stack.as_mut_ptr().wrapping_add(stack.len());
    let top = top.wrapping_sub(top as usize % 16);
    // SAFETY: `top` is the aligned end of a live buffer nothing else uses
    // while the child runs; the caller guarantees `entry`, `argument` and
    // that this process does not run meanwhile.
    let pid = unsafe {
        libc::clone(
            entry,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_FILES | libc::SIGCHLD,
            argument,
        )
    };
    check(pid)?;
    Ok(pid)
}

/// A fresh private anonymous mapping of `count` zeroed `T`s, never
/// unmapped (it lasts as long as the process). Its pages cost memory only
/// once touched. `T` must be valid when all bits are zero.
fn map_zeroed<T: Copy>(count: usize) -> io::Result<&'static mut [T]> {
    let length = count
        .checked_mul(size_of::<T>())
        .filter(|length| *length > 0);
    let Some(length) = length else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    // SAFETY: an anonymous private mapping at an address the kernel picks
    // touches no existing memory.
    let address = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if address == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the mapping is page-aligned (so aligned for `T`), `length`
    // bytes long, zero-filled (valid `T`s, the callers' types being plain
    // integers), referenced by nothing else and never unmapped.
    Ok(unsafe { std::slice::from_raw_parts_mut(address.cast::<T>(), count) })
}

/// [`map_zeroed`] bytes.
pub(crate) fn map_bytes(count: usize) -> io::Result<&'static mut [u8]> {
    map_zeroed(count)
}

/// [`map_zeroed`] machine words.
pub(crate) fn map_words(count: usize) -> io::Result<&'static mut [usize]> {
    map_zeroed(count)
}

/// Blocks until one of `fds` is readable (or hung up); a bit per
/// descriptor, in order, set for those that are.
pub(crate) fn wait_readable(fds: &[RawFd; 2]) -> u32 {
    let mut polls = fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    loop {
        // SAFETY: two live pollfds; a negative timeout blocks until ready.
        let ready = unsafe { libc::poll(polls.as_mut_ptr(), 2, -1) };
        if ready > 0 {
            return polls
                .iter()
                .enumerate()
                .filter(|(_, poll)| poll.revents != 0)
                .fold(0, |bits, (index, _)| bits | (1 << index));
        }
        if ready < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 0;
        }
    }
}

/// A pidfd of the process `pid` (as this process's PID namespace numbers it).
pub(crate) fn pidfd_open(pid: libc::pid_t) -> io::Result<RawFd> {
    // SAFETY: pidfd_open takes integers.
    let fd = check_long(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    Ok(RawFd::try_from(fd).unwrap_or(-1))
}

/// Moves the mount at `from` (relative to the directory `from_dir`) with
/// everything beneath it to `to` (`move_mount(2)`).
pub(crate) fn move_mount(from_dir: RawFd, from: &CStr, to: &CStr) -> io::Result<()> {
    // SAFETY: both paths are NUL-terminated and alive for the call; the
    // other arguments are integers.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from_dir,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            0u32,
        )
    })
    .map(drop)
}

/// `dup2(2)`: `from` also as `to` (without close-on-exec).
pub(crate) fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: dup2 takes integers only.
    check(unsafe { libc::dup2(from, to) })
}

/// A close-on-exec duplicate of `fd` numbered `lowest` or above.
pub(crate) fn dup_above(fd: RawFd, lowest: RawFd) -> io::Result<RawFd> {
    // SAFETY: fcntl with F_DUPFD_CLOEXEC takes integers only.
    let duplicate = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, lowest) };
    check(duplicate)?;
    Ok(duplicate)
}

/// Opens `path` (inside the view) with `flags`.
pub(crate) fn open(path: &CStr, flags: libc::c_int) -> io::Result<RawFd> {
    // SAFETY: `path` is NUL-terminated and alive for the call.
    let fd = unsafe { libc::open(path.as_ptr(), flags) };
    check(fd)?;
    Ok(fd)
}

/// `execve(2)`; returns only with the reason it failed.
///
/// # Safety
///
/// `argv` and `envp` must be arrays of pointers to NUL-terminated strings,
/// each ending with a null pointer, alive for the call.
pub(crate) unsafe fn execve(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> io::Error {
    // SAFETY: guaranteed by the caller.
    unsafe {
        libc::execve(path, argv, envp);
    }
    io::Error::last_os_error()
}

/// Resets every signal's disposition to the default and empties the
/// signal mask, so that a command starts as if from a fresh process
/// (Rust ignores SIGPIPE, and ignored signals survive exec).
pub(crate) fn reset_signals() {
    for signal in 1..libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: setting a disposition to SIG_DFL takes no pointers;
        // numbers the kernel does not accept fail harmlessly.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
    // SAFETY: a live, emptied set the kernel only reads.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &raw const set, std::ptr::null_mut());
    }
}

/// Sets SIGCHLD to be ignored when `automatic` (the kernel reaps children
/// as they exit), or back to the default (children wait to be reaped).
pub(crate) fn reap_children_automatically(automatic: bool) {
    let disposition = if automatic {
        libc::SIG_IGN
    } else {
        libc::SIG_DFL
    };
    // SAFETY: setting a disposition takes no pointers.
    unsafe {
        libc::signal(libc::SIGCHLD, disposition);
    }
}

/// Sends `signal` to the process behind `pidfd`.
pub(crate) fn pidfd_send_signal(pidfd: RawFd, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: integers and a null siginfo pointer, which the kernel allows.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    })
    .map(drop)
}
