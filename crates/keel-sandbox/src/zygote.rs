//! The namespace holder's side of a call: a long-lived process that keeps
//! one run's namespaces and view, and starts each command in namespaces of
//! its own inside them.
//!
//! A holder is the init (PID 1) of a relay chain like a per-call command's
//! (see [`super::namespaces`]): new user, mount, PID, IPC, UTS and (unless
//! the level allows it) network namespaces, the view built once. It then
//! waits on a Unix socket for requests from the kernel process. For each
//! one it forks a *call init* into new mount, PID and IPC namespaces (with a
//! pidfd the kernel process gets back, to kill the call), which mounts a
//! fresh `/tmp`, `/dev/shm` and `/proc` over the holder's
//! ([`super::view::View::per_call`]), starts the command sharing its memory
//! (`CLONE_VM | CLONE_VFORK`: nothing is copied), waits for it, kills and
//! reaps whatever it left, and only then writes how it ended to the call's
//! status pipe. When the call init dies, its PID namespace dies with it; so
//! a command and everything it started never outlive their call, as with
//! per-call namespaces. When the kernel process closes its end of the
//! socket (its run is over, or it died), the holder exits, and with it
//! every process of its PID namespace.
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
//! multi-threaded process. It allocates nothing: requests are read into
//! [`Buffers`] allocated before the fork, and only the wrappers of
//! [`super::sys`] and [`super::passing`] are called.

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

/// Memory the holder works in, allocated before it is forked.
pub(crate) struct Buffers {
    body: Vec<u8>,
    /// Pointers into `body` (as integers, so the buffers can be moved
    /// between threads): the path, argv and a null, the environment and a null.
    strings: Vec<usize>,
    stack: Vec<u8>,
}

impl Buffers {
    /// Room for the largest request. Untouched pages cost no memory.
    pub(crate) fn new() -> Self {
        Self {
            body: vec![0; MAX_BODY],
            strings: vec![0; MAX_STRINGS + 2],
            stack: vec![0; COMMAND_STACK],
        }
    }
}

/// One request, as the call init and its command see it.
struct Request {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    stdout: RawFd,
    stderr: RawFd,
    status: RawFd,
    ruleset: RawFd,
}

/// The holder's loop: one request at a time, until end of file.
pub(crate) fn serve(launch: &Launch, socket: RawFd, buffers: &mut Buffers) -> ! {
    sys::reset_signals();
    // Call inits are reaped by the kernel as they exit; their end goes to
    // the kernel process through their status pipes.
    sys::reap_children_automatically(true);
    loop {
        let mut header = [0u8; HEADER_LEN];
        let mut fds = [-1; REQUEST_FDS];
        let received = match passing::receive(socket, &mut header, &mut fds) {
            Ok((0, _)) => sys::exit(0),
            Ok((read, count)) => read_rest(socket, &mut header, read).map(|()| count),
            Err(error) => Err(error),
        };
        let errno =
            match received.and_then(|count| read_request(socket, &header, &fds, count, buffers)) {
                Ok(request) => start_call(launch, socket, &request, &mut buffers.stack),
                // The stream cannot be resynchronised: the kernel process sees
                // the holder gone and starts another.
                Err(_) => sys::exit(1),
            };
        for fd in fds.into_iter().filter(|fd| *fd >= 0) {
            sys::close(fd);
        }
        if let Some(errno) = errno {
            let _ = passing::write_all(socket, &errno.to_ne_bytes());
        }
    }
}

/// Reads the rest of a header a stream delivered in parts.
fn read_rest(socket: RawFd, header: &mut [u8; HEADER_LEN], read: usize) -> io::Result<()> {
    match header.get_mut(read..) {
        Some(rest) => passing::read_exact(socket, rest),
        None => Ok(()),
    }
}

/// Checks the header, reads the body and lays out argv and envp.
fn read_request(
    socket: RawFd,
    header: &[u8; HEADER_LEN],
    fds: &[RawFd; REQUEST_FDS],
    count: usize,
    buffers: &mut Buffers,
) -> io::Result<Request> {
    let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
    let word = |index: usize| {
        let mut bytes = [0u8; 4];
        bytes.copy_from_slice(&header[index * 4..index * 4 + 4]);
        usize::try_from(u32::from_ne_bytes(bytes)).unwrap_or(usize::MAX)
    };
    let (magic, length, argc, envc) = (word(0), word(1), word(2), word(3));
    let strings = 1usize.saturating_add(argc).saturating_add(envc);
    if magic != MAGIC as usize
        || count != REQUEST_FDS
        || argc == 0
        || length == 0
        || length > buffers.body.len()
        || strings.saturating_add(2) > buffers.strings.len()
    {
        return Err(invalid());
    }
    let body = buffers.body.get_mut(..length).ok_or_else(invalid)?;
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
            buffers.strings[slot] = 0;
            slot += 1;
        }
        let target = buffers.strings.get_mut(slot).ok_or_else(invalid)?;
        *target = base + start;
        slot += 1;
        start = index + 1;
    }
    if slot == 1 + argc {
        buffers.strings[slot] = 0;
        slot += 1;
    }
    if slot != strings + 1 {
        return Err(invalid());
    }
    *buffers.strings.get_mut(slot).ok_or_else(invalid)? = 0;
    let pointer = |index: usize| buffers.strings.as_ptr().wrapping_add(index).cast();
    Ok(Request {
        path: buffers.strings[0] as *const libc::c_char,
        argv: pointer(1),
        envp: pointer(argc + 2),
        stdout: fds[0],
        stderr: fds[1],
        status: fds[2],
        ruleset: fds[3],
    })
}

/// Forks the call init and answers the kernel process: `None` when the
/// pidfd went with a success reply, or the errno to reply.
fn start_call(launch: &Launch, socket: RawFd, request: &Request, stack: &mut [u8]) -> Option<i32> {
    match sys::fork_into(CALL_NAMESPACES) {
        Ok((0, _)) => {
            sys::close(socket);
            call_init(launch, request, stack)
        }
        Ok((_, pidfd)) => {
            let sent = passing::send(socket, &0i32.to_ne_bytes(), &[pidfd]);
            sys::close(pidfd);
            if sent.is_err() {
                sys::exit(1);
            }
            None
        }
        Err(error) => Some(error.raw_os_error().unwrap_or(libc::EAGAIN)),
    }
}

/// PID 1 of the call's PID namespace: fresh mounts, the command, its end.
fn call_init(launch: &Launch, request: &Request, stack: &mut [u8]) -> ! {
    sys::reap_children_automatically(false);
    let started = launch
        .fresh_mounts()
        .and_then(|()| start_command(launch, request, stack));
    // Only the status pipe stays open: the kernel process's output pipes
    // must see end of file once the command and its children are gone.
    let status = request.status;
    let status_u32 = u32::try_from(status).unwrap_or(0);
    sys::close_range(0, status_u32.saturating_sub(1));
    sys::close_range(status_u32 + 1, u32::MAX);
    let (kind, value) = match started {
        Ok(command) => (END_EXITED, wait_for_all(command)),
        Err(error) => (
            END_NOT_STARTED,
            error.raw_os_error().unwrap_or(libc::EINVAL),
        ),
    };
    let mut record = [0u8; END_LEN];
    record[..4].copy_from_slice(&kind.to_ne_bytes());
    record[4..].copy_from_slice(&value.to_ne_bytes());
    sys::write(status, &record);
    sys::exit(0)
}

/// What the command's start shares with the call init.
struct Shared<'a> {
    launch: &'a Launch,
    request: &'a Request,
    /// The errno that stopped the command before its exec; 0 if it exec'd.
    failure: i32,
}

/// Starts the command sharing this process's memory; its PID once it has
/// exec'd, or why it could not.
fn start_command(launch: &Launch, request: &Request, stack: &mut [u8]) -> io::Result<libc::pid_t> {
    let mut shared = Shared {
        launch,
        request,
        failure: 0,
    };
    // SAFETY: `command_entry` only makes system calls through `sys` and
    // ends in execve or _exit; `shared` outlives the call, which returns
    // only once the child has exec'd or exited; `stack` is used by nobody
    // else meanwhile.
    #[allow(unsafe_code)]
    let pid = unsafe {
        sys::spawn_sharing_memory(
            stack,
            command_entry,
            (&raw mut shared).cast::<libc::c_void>(),
        )
    }?;
    // SAFETY: the child wrote `failure` (if at all) before it exited; it
    // no longer runs in this memory.
    #[allow(unsafe_code)]
    let failure = unsafe { std::ptr::read_volatile(&raw const shared.failure) };
    if failure != 0 {
        let _ = sys::wait(pid);
        return Err(io::Error::from_raw_os_error(failure));
    }
    Ok(pid)
}

/// The command's first function, on its own stack in the call init's memory.
extern "C" fn command_entry(argument: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `argument` is the `Shared` of `start_command`, alive until
    // this process execs or exits (the call init is suspended until then).
    #[allow(unsafe_code)]
    let shared = unsafe { &mut *argument.cast::<Shared<'_>>() };
    let error = exec_command(shared.launch, shared.request);
    let errno = error.raw_os_error().unwrap_or(libc::EINVAL).max(1);
    // SAFETY: as above; written before this process exits.
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::write_volatile(&raw mut shared.failure, errno);
    }
    sys::exit(127)
}

/// Standard descriptors, the command's restrictions, exec; returns only
/// with the reason it failed.
fn exec_command(launch: &Launch, request: &Request) -> io::Error {
    let prepared = (|| -> io::Result<()> {
        let null = sys::open(c"/dev/null", libc::O_RDONLY | libc::O_CLOEXEC)?;
        sys::dup2(null, 0)?;
        sys::dup2(request.stdout, 1)?;
        sys::dup2(request.stderr, 2)?;
        launch.command(request.ruleset)
    })();
    if let Err(error) = prepared {
        return error;
    }
    // SAFETY: `read_request` laid out argv and envp as null-terminated
    // arrays of pointers into the request body, which stays alive (the
    // call init is suspended until this exec).
    #[allow(unsafe_code)]
    unsafe {
        sys::execve(request.path, request.argv, request.envp)
    }
}
