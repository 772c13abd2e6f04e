//! The namespace holder's side of a call: a long-lived process that keeps
//! one run's namespaces and view, and a call ready in namespaces of its own
//! inside them before the kernel process asks for it.
//!
//! A holder is the init (PID 1) of a relay chain like a per-call command's
//! (see [`super::namespaces`]): new user, mount, PID, IPC, UTS and (unless
//! the level allows it) network namespaces, the view built once. It then
//! keeps one call *ready*: it forks a **call init** into new mount, PID and
//! IPC namespaces, which mounts a fresh `/tmp`, `/dev/shm` and `/proc` over
//! the holder's ([`super::view::View::per_call`]) and starts the **command**
//! sharing its memory and descriptors (`CLONE_VM | CLONE_FILES`: nothing is
//! copied), in its own session with its rlimits. The command waits on the
//! holder's Unix socket for a request from the kernel process, tells the
//! holder (which forks the next ready call), answers with a pidfd of its
//! init (to kill the call: its PID namespace dies with it), puts the
//! request's descriptors in place, enforces the rest of its restrictions
//! and execs. The call init waits for it, kills and reaps whatever it left,
//! and only then writes how it ended to the call's status pipe. A ready
//! call serves exactly one request; so a command and everything it started
//! never outlive their call, and each call's `/tmp` is new, as with
//! per-call namespaces — but the fork, the mounts and half of the
//! restrictions happen before the request, off its path.
//!
//! When the kernel process closes its end of the socket (its run is over,
//! or it died), the ready command reads end of file, tells the holder, and
//! the holder exits: every process of its PID namespace dies with it.
//!
//! Request: a header of four native-endian `u32` (magic, body length,
//! argument count, environment count) carrying the descriptors stdout,
//! stderr, the status pipe's write end and the call's Landlock ruleset,
//! then the body: the program path, the arguments and the environment
//! (`NAME=value`), each NUL-terminated. Reply: an `i32` errno, 0 with the
//! call init's pidfd attached. End record on the status pipe: a `u32` kind
//! and an `i32` value ([`END_EXITED`] with the wait status, or
//! [`END_NOT_STARTED`] with an errno: nothing ran).
//!
//! Invariant: everything here runs after `fork` in a copy of a
//! multi-threaded process. It allocates nothing on the heap: requests are
//! read into [`Buffers`], pages the holder maps for itself, and only the
//! wrappers of
//! [`super::sys`] and [`super::passing`] are called. While the command runs
//! in the call init's memory, the init waits in a system call.

use std::io;
use std::os::fd::RawFd;

use super::namespaces::{Launch, wait_for_all};
use super::{passing, sys};

/// First word of every request.
pub(crate) const MAGIC: u32 = 0x4b45_454c;
/// Bytes of a request header.
pub(crate) const HEADER_LEN: usize = 16;
/// Descriptors of a request: stdout, stderr, status, Landlock ruleset.
pub(crate) const REQUEST_FDS: usize = 4;
/// The largest request body (execve refuses a single argument over 128 KiB).
pub(crate) const MAX_BODY: usize = 1 << 20;
/// The most strings (path, arguments, environment) of one request.
pub(crate) const MAX_STRINGS: usize = 4096;
/// Bytes of an end record.
pub(crate) const END_LEN: usize = 8;
/// End record kind: the command ran; the value is its wait status.
pub(crate) const END_EXITED: u32 = 0;
/// End record kind: the command could not start; the value is the errno.
pub(crate) const END_NOT_STARTED: u32 = 1;

/// Namespaces each call gets of its own inside the holder's.
const CALL_NAMESPACES: libc::c_int = libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
/// Stack of the command between its start and its exec.
const COMMAND_STACK: usize = 256 << 10;

/// Memory the holder works in: anonymous pages it maps for itself (so the
/// kernel process never holds them), touched only as used.
pub(crate) struct Buffers {
    body: &'static mut [u8],
    /// Pointers into `body` (as integers): the path, argv and a null, the
    /// environment and a null.
    strings: &'static mut [usize],
    stack: &'static mut [u8],
}

impl Buffers {
    /// Maps room for the largest request and the command's stack.
    pub(crate) fn map() -> io::Result<Self> {
        Ok(Self {
            body: sys::map_bytes(MAX_BODY)?,
            strings: sys::map_words(MAX_STRINGS + 2)?,
            stack: sys::map_bytes(COMMAND_STACK)?,
        })
    }
}

/// One request, as the command sees it.
struct Request {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    stdout: RawFd,
    stderr: RawFd,
    status: RawFd,
    ruleset: RawFd,
}

/// Notices from a ready call to the holder, one byte each.
const NEXT: u8 = b'n';
/// The kernel process closed its end: the run is over.
const QUIT: u8 = b'q';
/// A request could not be read: the stream is out of step.
const BROKEN: u8 = b'x';

/// The holder's loop: keeps one call ready, until the run is over.
pub(crate) fn serve(launch: &Launch, socket: RawFd, buffers: &mut Buffers) -> ! {
    sys::reset_signals();
    // Call inits are reaped by the kernel as they exit; their end goes to
    // the kernel process through their status pipes.
    sys::reap_children_automatically(true);
    let Ok((notices, notify)) = sys::pipe() else {
        sys::exit(1)
    };
    loop {
        let init = match sys::fork_into(CALL_NAMESPACES) {
            Ok((0, _)) => {
                sys::close(notices);
                call_init(launch, socket, notify, buffers)
            }
            Ok((_, init)) => init,
            Err(_) => sys::exit(1),
        };
        let ready = sys::wait_readable(&[notices, init]);
        let mut notice = [0u8; 1];
        if ready & 1 == 0 || sys::read(notices, &mut notice) != 1 {
            // The ready call ended without a word: stop, so the kernel
            // process sees the holder gone and starts another.
            sys::exit(1);
        }
        sys::close(init);
        match notice[0] {
            NEXT => {}
            QUIT => sys::exit(0),
            _ => sys::exit(1),
        }
    }
}

/// What the call init shares with its command (which runs in the init's
/// memory until it execs). The command writes the last three fields.
struct Shared<'a> {
    launch: &'a Launch,
    socket: RawFd,
    notify: RawFd,
    body: &'a mut [u8],
    strings: &'a mut [usize],
    /// Why the fresh mounts failed; 0 if they did not.
    setup: i32,
    /// Whether the command took a request.
    taken: bool,
    /// The request's status pipe.
    status: RawFd,
    /// Why the command could not start; 0 if it exec'd.
    failure: i32,
}

/// PID 1 of a ready call's PID namespace: fresh mounts, the command
/// (waiting for its request), then its end.
fn call_init(launch: &Launch, socket: RawFd, notify: RawFd, buffers: &mut Buffers) -> ! {
    sys::reap_children_automatically(false);
    let setup = launch.fresh_mounts().err().map_or(0, |error| errno(&error));
    let Buffers {
        body,
        strings,
        stack,
    } = buffers;
    let mut shared = Shared {
        launch,
        socket,
        notify,
        body,
        strings,
        setup,
        taken: false,
        status: -1,
        failure: 0,
    };
    // SAFETY: `command_entry` only makes system calls through `sys` and
    // `passing` and ends in execve or _exit; this process only waits in
    // `wait_for_all` (a system call) until the command has exec'd or
    // exited; `shared` and `stack` outlive it and nothing else uses them.
    #[allow(unsafe_code)]
    let started = unsafe {
        sys::spawn_sharing_memory(
            stack,
            command_entry,
            (&raw mut shared).cast::<libc::c_void>(),
        )
    };
    let Ok(command) = started else {
        sys::write(notify, &[BROKEN]);
        sys::exit(1)
    };
    let code = wait_for_all(command);
    // SAFETY: the command wrote these (if at all) before it exec'd or
    // exited; it no longer runs in this memory.
    #[allow(unsafe_code)]
    let (taken, status, failure) = unsafe {
        (
            std::ptr::read_volatile(&raw const shared.taken),
            std::ptr::read_volatile(&raw const shared.status),
            std::ptr::read_volatile(&raw const shared.failure),
        )
    };
    if !taken {
        sys::exit(0);
    }
    let status_u32 = u32::try_from(status).unwrap_or(0);
    sys::close_range(0, status_u32.saturating_sub(1));
    sys::close_range(status_u32 + 1, u32::MAX);
    let (kind, value) = if failure != 0 {
        (END_NOT_STARTED, failure)
    } else {
        (END_EXITED, code)
    };
    let mut record = [0u8; END_LEN];
    record[..4].copy_from_slice(&kind.to_ne_bytes());
    record[4..].copy_from_slice(&value.to_ne_bytes());
    sys::write(status, &record);
    sys::exit(0)
}

/// The command's first function, on its own stack in the call init's
/// memory: waits for a request, answers it, execs.
extern "C" fn command_entry(argument: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `argument` is the `Shared` of `call_init`, alive until this
    // process execs or exits; the call init does not touch it meanwhile.
    #[allow(unsafe_code)]
    let shared = unsafe { &mut *argument.cast::<Shared<'_>>() };
    // What needs nothing of the request happens before it arrives.
    let early = if shared.setup != 0 {
        shared.setup
    } else {
        shared
            .launch
            .command_session()
            .err()
            .map_or(0, |error| errno(&error))
    };
    let request = match read_request(shared.socket, shared.body, shared.strings) {
        Ok(Some(request)) => request,
        Ok(None) => {
            sys::write(shared.notify, &[QUIT]);
            sys::exit(0)
        }
        Err(_) => {
            sys::write(shared.notify, &[BROKEN]);
            sys::exit(1)
        }
    };
    // SAFETY: as above; read by the call init once this process is gone
    // from its memory.
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::write_volatile(&raw mut shared.taken, true);
        std::ptr::write_volatile(&raw mut shared.status, request.status);
    }
    sys::write(shared.notify, &[NEXT]);
    let failure = match answer(shared.socket) {
        Err(error) => errno(&error),
        Ok(()) if early != 0 => early,
        Ok(()) => errno(&exec_command(shared.launch, &request)),
    };
    // SAFETY: as above.
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::write_volatile(&raw mut shared.failure, failure);
    }
    sys::exit(127)
}

/// Answers a request with a pidfd of this call's init (PID 1 here).
fn answer(socket: RawFd) -> io::Result<()> {
    match sys::pidfd_open(1) {
        Ok(pidfd) => {
            let sent = passing::send(socket, &0i32.to_ne_bytes(), &[pidfd]);
            sys::close(pidfd);
            sent
        }
        Err(error) => {
            let _ = passing::write_all(socket, &errno(&error).to_ne_bytes());
            Err(error)
        }
    }
}

/// The errno of `error`, never 0.
fn errno(error: &io::Error) -> i32 {
    error.raw_os_error().unwrap_or(libc::EINVAL).max(1)
}

/// Reads one request (`None` at end of file), checks it and lays out argv
/// and envp in `strings`, pointing into `body`.
fn read_request(
    socket: RawFd,
    body: &mut [u8],
    strings: &mut [usize],
) -> io::Result<Option<Request>> {
    let mut header = [0u8; HEADER_LEN];
    let mut fds = [-1; REQUEST_FDS];
    let (read, count) = passing::receive(socket, &mut header, &mut fds)?;
    if read == 0 {
        return Ok(None);
    }
    if let Some(rest) = header.get_mut(read..) {
        passing::read_exact(socket, rest)?;
    }
    let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
    let word = |index: usize| {
        let mut bytes = [0u8; 4];
        bytes.copy_from_slice(&header[index * 4..index * 4 + 4]);
        usize::try_from(u32::from_ne_bytes(bytes)).unwrap_or(usize::MAX)
    };
    let (magic, length, argc, envc) = (word(0), word(1), word(2), word(3));
    let total = 1usize.saturating_add(argc).saturating_add(envc);
    if magic != MAGIC as usize
        || count != REQUEST_FDS
        || argc == 0
        || length == 0
        || length > body.len()
        || total.saturating_add(2) > strings.len()
    {
        return Err(invalid());
    }
    let body = body.get_mut(..length).ok_or_else(invalid)?;
    passing::read_exact(socket, body)?;
    if body.last() != Some(&0) {
        return Err(invalid());
    }
    // Slots: path, argv (argc), null, environment (envc), null.
    let base = body.as_ptr() as usize;
    let mut slot = 0;
    let mut start = 0;
    for (index, byte) in body.iter().enumerate() {
        if *byte != 0 {
            continue;
        }
        if slot == 1 + argc {
            strings[slot] = 0;
            slot += 1;
        }
        *strings.get_mut(slot).ok_or_else(invalid)? = base + start;
        slot += 1;
        start = index + 1;
    }
    if slot == 1 + argc {
        strings[slot] = 0;
        slot += 1;
    }
    if slot != total + 1 {
        return Err(invalid());
    }
    *strings.get_mut(slot).ok_or_else(invalid)? = 0;
    let pointer = |index: usize| strings.as_ptr().wrapping_add(index).cast();
    Ok(Some(Request {
        path: strings[0] as *const libc::c_char,
        argv: pointer(1),
        envp: pointer(argc + 2),
        stdout: fds[0],
        stderr: fds[1],
        status: fds[2],
        ruleset: fds[3],
    }))
}

/// Standard descriptors, the rest of the command's restrictions, exec;
/// returns only with the reason it failed.
fn exec_command(launch: &Launch, request: &Request) -> io::Error {
    let prepared = (|| -> io::Result<()> {
        let null = sys::open(c"/dev/null", libc::O_RDONLY | libc::O_CLOEXEC)?;
        sys::dup2(null, 0)?;
        sys::dup2(request.stdout, 1)?;
        sys::dup2(request.stderr, 2)?;
        launch.command_restrictions(request.ruleset)
    })();
    if let Err(error) = prepared {
        return error;
    }
    // SAFETY: `read_request` laid out argv and envp as null-terminated
    // arrays of pointers into the request body, which stays alive (the
    // call init waits until this exec).
    #[allow(unsafe_code)]
    unsafe {
        sys::execve(request.path, request.argv, request.envp)
    }
}
