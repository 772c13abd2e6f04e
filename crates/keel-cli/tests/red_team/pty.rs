//! Real pseudo-terminals for the terminal attacks: one becomes `keel`'s
//! controlling terminal, another stands for some other terminal of the
//! user. Both are put in raw mode, so that any byte pushed into their input
//! (`TIOCSTI`) or written to them can be read back without waiting for a
//! line, and both ends are non-blocking, so that "nothing there" is an
//! immediate `EAGAIN`.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// A pty pair held by the test.
pub struct Pty {
    master: File,
    slave: File,
    /// The slave's path (`/dev/pts/N`).
    pub path: PathBuf,
}

impl Pty {
    /// Opens a new pty pair in raw mode.
    pub fn open() -> Pty {
        let (mut master, mut slave) = (-1, -1);
        // SAFETY: openpty writes the two descriptors; the name, termios and
        // winsize arguments are null (not wanted).
        #[allow(unsafe_code)]
        let status = unsafe {
            libc::openpty(
                &raw mut master,
                &raw mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(status, 0, "openpty failed");
        // SAFETY: both descriptors were just returned by openpty and are owned here.
        #[allow(unsafe_code)]
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        for fd in [master.as_raw_fd(), slave.as_raw_fd()] {
            set_flags(fd);
        }
        make_raw(slave.as_raw_fd());
        let path = std::fs::read_link(format!("/proc/self/fd/{}", slave.as_raw_fd())).unwrap();
        Pty {
            master: File::from(master),
            slave: File::from(slave),
            path,
        }
    }

    /// The slave's descriptor (to make it a controlling terminal).
    pub fn slave_fd(&self) -> RawFd {
        self.slave.as_raw_fd()
    }

    /// Whatever is waiting on either side: input pushed into the terminal
    /// (read from the slave) or output written to it (read from the master).
    pub fn pending(&self) -> Vec<u8> {
        let mut pending = Vec::new();
        for mut side in [&self.slave, &self.master] {
            let mut buffer = [0u8; 4096];
            while let Ok(read) = side.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                pending.extend_from_slice(&buffer[..read]);
            }
        }
        pending
    }
}

/// Non-blocking and close-on-exec: only `keel`'s own terminal setup uses the slave.
fn set_flags(fd: RawFd) {
    // SAFETY: fcntl on a descriptor this test owns, integer arguments only.
    #[allow(unsafe_code)]
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        assert!(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0);
        assert!(libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0);
    }
}

/// Raw mode: no line buffering, no echo, no signals from input bytes.
fn make_raw(fd: RawFd) {
    // SAFETY: `termios` is a plain C struct the calls fill in and read.
    #[allow(unsafe_code)]
    unsafe {
        let mut termios: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(fd, &raw mut termios), 0);
        libc::cfmakeraw(&raw mut termios);
        assert_eq!(libc::tcsetattr(fd, libc::TCSANOW, &raw const termios), 0);
    }
}

/// In the forked `keel` before exec: a new session whose controlling
/// terminal is `slave`, and `secret` as descriptor 9, not close-on-exec.
pub fn become_session_leader_on(slave: RawFd, secret: RawFd) -> std::io::Result<()> {
    // SAFETY: setsid, ioctl(TIOCSCTTY) and dup2 take integers only and are
    // async-signal-safe.
    #[allow(unsafe_code)]
    unsafe {
        if libc::setsid() < 0
            || libc::ioctl(slave, libc::TIOCSCTTY, 0) < 0
            || libc::dup2(secret, 9) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
