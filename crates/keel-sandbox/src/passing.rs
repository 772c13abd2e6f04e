//! Messages with file descriptors over a Unix socket (`SCM_RIGHTS`): how
//! the kernel process hands a command's pipes to the namespace holder and
//! gets a pidfd back.
//!
//! Used on both sides: the holder runs after `fork` in a copy of a
//! multi-threaded process, so these wrappers allocate nothing and make only
//! system calls on buffers the caller provides. Received descriptors are
//! close-on-exec; `send` never raises SIGPIPE.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

/// The most descriptors one message carries.
pub(crate) const MAX_FDS: usize = 8;

/// Room for a control message of [`MAX_FDS`] descriptors, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 64]);

const _: () = assert!(size_of::<libc::cmsghdr>() + MAX_FDS * size_of::<RawFd>() <= 64);

/// Sends `bytes` (all of them, or fails) with `fds` attached to the first byte.
pub(crate) fn send(socket: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS || bytes.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut control = Control([0; 64]);
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; an all-zero value is valid.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &raw mut iov;
    header.msg_iovlen = 1;
    if !fds.is_empty() {
        let data_len = u32::try_from(size_of_val(fds)).unwrap_or(u32::MAX);
        header.msg_control = control.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size.
        header.msg_controllen = unsafe { libc::CMSG_SPACE(data_len) } as usize;
        // SAFETY: `header` points at `control`, which has room for one
        // cmsghdr and MAX_FDS descriptors (checked above); CMSG_FIRSTHDR
        // and CMSG_DATA return pointers into it, written within bounds.
        unsafe {
            let message = libc::CMSG_FIRSTHDR(&raw const header);
            (*message).cmsg_level = libc::SOL_SOCKET;
            (*message).cmsg_type = libc::SCM_RIGHTS;
            (*message).cmsg_len = libc::CMSG_LEN(data_len) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(message),
                size_of_val(fds),
            );
        }
    }
    let sent = loop {
        // SAFETY: `header` and everything it points at are live for the call.
        let sent = unsafe { libc::sendmsg(socket, &raw const header, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            break usize::try_from(sent).unwrap_or(0);
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINTR) {
            return Err(error);
        }
    };
    // The descriptors went with the first byte; the rest is plain data.
    write_all(socket, bytes.get(sent..).unwrap_or_default())
}

/// Receives up to `bytes.len()` bytes and the descriptors attached to them
/// into `fds`: (bytes read, descriptors received); (0, 0) at end of file.
/// Descriptors beyond `fds.len()` are closed.
pub(crate) fn receive(
    socket: RawFd,
    bytes: &mut [u8],
    fds: &mut [RawFd],
) -> io::Result<(usize, usize)> {
    let mut control = Control([0; 64]);
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; an all-zero value is valid.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &raw mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.0.as_mut_ptr().cast();
    header.msg_controllen = control.0.len();
    let read = loop {
        // SAFETY: `header` and the buffers it points at are live and writable.
        let read = unsafe { libc::recvmsg(socket, &raw mut header, libc::MSG_CMSG_CLOEXEC) };
        if read >= 0 {
            break usize::try_from(read).unwrap_or(0);
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINTR) {
            return Err(error);
        }
    };
    let mut count = 0;
    // SAFETY: the kernel filled `control` up to `msg_controllen`; the CMSG
    // macros walk it within those bounds, and each SCM_RIGHTS payload is
    // an array of ints read unaligned.
    unsafe {
        let mut message = libc::CMSG_FIRSTHDR(&raw const header);
        while !message.is_null() {
            if (*message).cmsg_level == libc::SOL_SOCKET && (*message).cmsg_type == libc::SCM_RIGHTS
            {
                let payload = (*message).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(message).cast::<RawFd>();
                for index in 0..payload / size_of::<RawFd>() {
                    let fd = data.add(index).read_unaligned();
                    match fds.get_mut(count) {
                        Some(slot) => {
                            *slot = fd;
                            count += 1;
                        }
                        None => {
                            libc::close(fd);
                        }
                    }
                }
            }
            message = libc::CMSG_NXTHDR(&raw const header, message);
        }
    }
    Ok((read, count))
}

/// Reads exactly `buffer.len()` bytes; fails at an early end of file.
pub(crate) fn read_exact(fd: RawFd, buffer: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while let Some(rest) = buffer.get_mut(done..).filter(|rest| !rest.is_empty()) {
        // SAFETY: `rest` is live and writable for its length.
        let read = unsafe { libc::read(fd, rest.as_mut_ptr().cast(), rest.len()) };
        match read {
            0 => return Err(io::Error::from_raw_os_error(libc::EPIPE)),
            read if read > 0 => done += usize::try_from(read).unwrap_or(0),
            _ => {
                let error = io::Error::last_os_error();
                if error.raw_os_error() != Some(libc::EINTR) {
                    return Err(error);
                }
            }
        }
    }
    Ok(())
}

/// Writes all of `bytes` to a socket, without raising SIGPIPE.
pub(crate) fn write_all(fd: RawFd, bytes: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while let Some(rest) = bytes.get(done..).filter(|rest| !rest.is_empty()) {
        // SAFETY: `rest` is a live buffer of the given length.
        let written =
            unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
        if written >= 0 {
            done += usize::try_from(written).unwrap_or(0);
            continue;
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINTR) {
            return Err(error);
        }
    }
    Ok(())
}
