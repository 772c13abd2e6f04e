//! Dropping every Linux capability in a sandboxed child.
//!
//! A command run by root would otherwise keep capabilities that lift some of
//! Landlock's checks: with CAP_SYS_PTRACE it may still read another
//! process's `/proc/<pid>/environ`. Root regains its capabilities at every
//! exec from the bounding set, so the bounding set is emptied first, then
//! the ambient, effective, permitted and inheritable sets. For an
//! unprivileged user there is nothing to drop and the calls that need
//! privilege fail harmlessly.
//!
//! Runs between fork and exec: system calls only, no allocation.

use std::io;

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit capability sets in two words.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The highest capability number any kernel defines is below this.
const CAPABILITY_LIMIT: libc::c_ulong = 64;

#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Empties the bounding, ambient, effective, permitted and inheritable sets.
pub(super) fn drop_all() -> io::Result<()> {
    for capability in 0..CAPABILITY_LIMIT {
        // SAFETY: PR_CAPBSET_DROP takes a capability number, no pointers.
        // EINVAL (no such capability) and EPERM (unprivileged: nothing to
        // drop) are expected and ignored.
        #[allow(unsafe_code)]
        unsafe {
            libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0);
        }
    }
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes no pointers.
    #[allow(unsafe_code)]
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    let header = Header {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let empty = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: both pointers refer to live, correctly laid out structures
    // (`struct __user_cap_header_struct` and two `__user_cap_data_struct`
    // for version 3) that the kernel only reads.
    #[allow(unsafe_code)]
    let status = unsafe { libc::syscall(libc::SYS_capset, &header, empty.as_ptr()) };
    if status != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
