//! Starting a namespace holder as a fresh process image: the running
//! executable (`/proc/self/exe`) re-executed in a hidden holder mode, its
//! launch plan handed over its socket.
//!
//! A holder forked from the kernel process would be a copy of it: every
//! page table of the kernel process (hundreds of MiB inside `keel serve`),
//! every page the kernel process writes after the fork pinned twice, and
//! every secret on its heap (keys, tokens, other runs' prompts) readable in
//! the copy. A re-executed holder starts from the executable's image
//! alone: its command line is [`NAME`] and [`MARKER`], its environment is
//! empty, its working directory `/`, its only descriptor besides
//! `/dev/null` the socket (as standard input), and it is the leader of a
//! process group of its own, so a terminal's Ctrl-C for Keel does not reach
//! the calls it runs. It is spawned without a fork of the kernel process's
//! memory (`posix_spawn`).
//!
//! The hook: a function in `.init_array`, which glibc calls with `argc`,
//! `argv` and `envp` before `main` in every process of an executable that
//! links this crate (Keel itself, and test binaries). It marks that it ran
//! ([`available`]: only then can a holder be started), and when `argv` is
//! exactly `[NAME, MARKER]` it never returns: the process reads its plan
//! ([`super::plan`]) from standard input and becomes the holder's relay
//! ([`super::namespaces::Launch::hold_as_relay`]). It refuses to act in a
//! process started with elevated privileges (`AT_SECURE`), where it would
//! otherwise be a way into a privileged copy of Keel.
//!
//! Hand-over: the kernel process writes a `u32` length (little-endian)
//! and the plan; the holder answers one `i32`: [`READY`] once its view is
//! built, or the errno that stopped the set-up (nothing was built, and the
//! holder exits). End of file instead of an answer means the holder died.

use std::ffi::{CStr, c_char, c_int};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::namespaces::{Launch, READY};
use super::plan::MAX_PLAN;
use super::{passing, sys};

/// The holder's `argv[0]`: what `ps` shows for it.
pub(crate) const NAME: &str = "keel-sandbox-holder";
/// The holder's only argument, which selects the holder mode. Versioned:
/// a holder and its kernel process are the same executable, but the
/// executable on disk may be replaced meanwhile (`/proc/self/exe` still
/// names the running one).
pub(crate) const MARKER: &str = "--keel-sandbox-holder-v1";
/// How long a holder may take to build its view before it is given up.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Set by the hook in every process where it ran.
static HOOKED: AtomicBool = AtomicBool::new(false);

/// Whether this process's executable carries the hook (so re-executing
/// it with [`MARKER`] starts a holder, not the program's `main`).
pub(crate) fn available() -> bool {
    HOOKED.load(Ordering::Relaxed)
}

/// The hook glibc calls before `main`.
// SAFETY: `.init_array` holds pointers to functions glibc calls with
// (argc, argv, envp) before `main`; `enter` has exactly that signature and
// returns normally except in a holder, which never returns.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
#[used]
#[unsafe(link_section = ".init_array")]
static ENTER: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = enter;

/// See the module docs: marks the hook as present and, in a holder,
/// becomes the holder.
extern "C" fn enter(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) {
    HOOKED.store(true, Ordering::Relaxed);
    if argc != 2 || argv.is_null() {
        return;
    }
    // SAFETY: glibc passes `main`'s arguments to `.init_array` functions:
    // `argv` holds `argc` (here 2) pointers to NUL-terminated strings,
    // valid for the life of the process.
    #[allow(unsafe_code)]
    let (name, marker) = unsafe {
        let name = *argv;
        let marker = *argv.add(1);
        if name.is_null() || marker.is_null() {
            return;
        }
        (CStr::from_ptr(name), CStr::from_ptr(marker))
    };
    if name.to_bytes() != NAME.as_bytes() || marker.to_bytes() != MARKER.as_bytes() {
        return;
    }
    hold()
}

/// The holder's life: refuse a privileged start, read the plan from
/// standard input, become the relay. Never returns.
fn hold() -> ! {
    const SOCKET: RawFd = 0;
    // SAFETY: getauxval reads the process's auxiliary vector; no pointers.
    #[allow(unsafe_code)]
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) };
    if secure != 0 {
        sys::exit(126);
    }
    // Whatever Keel's own parent left open without close-on-exec goes
    // before anything is read or built: only the socket stays.
    sys::close_range(1, u32::MAX);
    let error = match receive(SOCKET) {
        Ok(launch) => match launch.hold_as_relay(SOCKET) {
            // Only an error comes back; the holder's processes exit
            // rather than return.
            Ok(()) => io::Error::from_raw_os_error(libc::EPROTO),
            Err(error) => error,
        },
        Err(error) => error,
    };
    let errno = error.raw_os_error().unwrap_or(libc::EIO);
    let errno = if errno == READY { libc::EIO } else { errno };
    let _ = passing::write_all(SOCKET, &errno.to_ne_bytes());
    sys::exit(1)
}

/// Reads the plan: a length and that many bytes.
fn receive(socket: RawFd) -> io::Result<Launch> {
    let mut length = [0u8; 4];
    passing::read_exact(socket, &mut length)?;
    let length = usize::try_from(u32::from_le_bytes(length)).unwrap_or(usize::MAX);
    if length > MAX_PLAN {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    }
    let mut plan = vec![0u8; length];
    passing::read_exact(socket, &mut plan)?;
    Launch::from_plan(&plan).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Why a holder did not start.
#[derive(Debug)]
pub(crate) enum HandOver {
    /// It could not be started, or its set-up failed with this error:
    /// the machine (or this build) cannot give commands this view.
    Refused(io::Error),
    /// The hand-over itself failed (the holder died without an answer, or
    /// gave none in time).
    Broken(io::Error),
}

/// Spawns a holder process with `theirs` as its standard input. Call from
/// a thread that outlives the holder: its relay's parent-death signal
/// follows the spawning thread.
pub(crate) fn spawn(theirs: UnixStream) -> Result<Child, HandOver> {
    if !available() {
        return Err(HandOver::Refused(io::Error::new(
            io::ErrorKind::Unsupported,
            "this executable cannot re-execute itself as a sandbox holder \
             (its start-up hook needs Linux with glibc)",
        )));
    }
    if !*EXECUTABLE_CARRIES_HOOK.get_or_init(executable_carries_hook) {
        return Err(HandOver::Refused(io::Error::new(
            io::ErrorKind::Unsupported,
            "this process's executable (/proc/self/exe) is not the file that carries the \
             sandbox holder's start-up hook: Keel was started through the dynamic loader, \
             or the sandbox is linked into a library of another program",
        )));
    }
    Command::new("/proc/self/exe")
        .arg0(NAME)
        .arg(MARKER)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(HandOver::Refused)
}

/// Whether `/proc/self/exe` is the file the hook was loaded from: it is
/// not when Keel was started as `ld.so keel` (the executable is then the
/// loader) or when this crate is linked into a shared library, and
/// re-executing `/proc/self/exe` would start another program. Checked
/// once per process.
static EXECUTABLE_CARRIES_HOOK: OnceLock<bool> = OnceLock::new();

/// See [`EXECUTABLE_CARRIES_HOOK`]: the device and inode of the mapping
/// that holds [`enter`], against those of `/proc/self/exe`.
fn executable_carries_hook() -> bool {
    let Ok(executable) = std::fs::metadata("/proc/self/exe") else {
        return false;
    };
    let hook = enter as *const () as usize;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    maps.lines().any(|line| {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(device), Some(inode)) =
            (fields.next(), fields.nth(2), fields.next())
        else {
            return false;
        };
        let hex = |text: &str| u64::from_str_radix(text, 16).ok();
        let Some((start, end)) = range.split_once('-') else {
            return false;
        };
        let Some((major, minor)) = device.split_once(':') else {
            return false;
        };
        let (Some(start), Some(end)) = (hex(start), hex(end)) else {
            return false;
        };
        (start..end).contains(&(hook as u64))
            && inode.parse::<u64>().ok() == Some(executable.ino())
            && hex(major) == Some(u64::from(libc::major(executable.dev())))
            && hex(minor) == Some(u64::from(libc::minor(executable.dev())))
    })
}

/// Hands `launch`'s plan to a just-spawned holder over `ours` and waits
/// (at most [`SETUP_TIMEOUT`]) until it has built its view.
pub(crate) fn hand_over(ours: &UnixStream, launch: &Launch) -> Result<(), HandOver> {
    let Some(plan) = launch.to_plan() else {
        return Err(HandOver::Refused(io::Error::from_raw_os_error(libc::E2BIG)));
    };
    let length = u32::try_from(plan.len()).unwrap_or(u32::MAX).to_le_bytes();
    // Without SIGPIPE, whatever the host does with that signal.
    passing::write_all(ours.as_raw_fd(), &length)
        .and_then(|()| passing::write_all(ours.as_raw_fd(), &plan))
        .map_err(HandOver::Broken)?;
    ours.set_read_timeout(Some(SETUP_TIMEOUT))
        .map_err(HandOver::Broken)?;
    let mut word = [0u8; 4];
    let mut reader = ours;
    let answer = reader.read_exact(&mut word);
    ours.set_read_timeout(None).map_err(HandOver::Broken)?;
    match answer {
        Ok(()) => match i32::from_ne_bytes(word) {
            READY => Ok(()),
            errno => Err(HandOver::Refused(io::Error::from_raw_os_error(errno))),
        },
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
            Err(HandOver::Broken(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the holder exited without an answer",
            )))
        }
        Err(error) => Err(HandOver::Broken(error)),
    }
}
