//! What this machine can enforce, for the sandbox and for `keel doctor`.
//!
//! The Landlock ABI is asked of the kernel directly
//! (`landlock_create_ruleset` with the version flag), never guessed from
//! `/sys/kernel/security/lsm`, which lists Landlock even where a container's
//! seccomp profile blocks its system calls.

use std::path::Path;
use std::process::Command;

use super::{REQUIRED_LANDLOCK_ABI, Sandbox, SandboxError, SandboxLevel, confine};

/// `LANDLOCK_CREATE_RULESET_VERSION`: ask for the ABI instead of creating a ruleset.
const CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The Landlock ABI version this kernel offers, or the reason there is none.
pub fn landlock_abi() -> Result<i32, String> {
    // SAFETY: with a null attribute pointer, size 0 and the version flag,
    // the call only returns a number; no memory is read or written.
    #[allow(unsafe_code)]
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if abi >= 0 {
        return Ok(i32::try_from(abi).unwrap_or(i32::MAX));
    }
    let error = std::io::Error::last_os_error();
    Err(match error.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no Landlock system calls (built without it, or a seccomp profile blocks them)".into(),
        Some(libc::EOPNOTSUPP) => "Landlock is built into the kernel but not enabled at boot (add `landlock` to the `lsm=` boot parameter)".into(),
        _ => format!("asking the kernel for its Landlock ABI failed: {error}"),
    })
}

/// Fails with an explanation unless Landlock can enforce what the sandbox needs.
pub(super) fn require_landlock() -> Result<(), SandboxError> {
    match landlock_abi() {
        Ok(abi) if abi >= REQUIRED_LANDLOCK_ABI => Ok(()),
        Ok(abi) => Err(SandboxError::Unavailable {
            reason: format!(
                "the kernel offers Landlock ABI {abi}, but the sandbox needs ABI {REQUIRED_LANDLOCK_ABI} (Linux 6.7) to restrict TCP"
            ),
        }),
        Err(reason) => Err(SandboxError::Unavailable { reason }),
    }
}

/// Whether the kernel supports seccomp filters.
pub fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP takes no pointers and only reads this thread's mode.
    #[allow(unsafe_code)]
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    mode >= 0
}

/// The limit on user namespaces (`/proc/sys/user/max_user_namespaces`), if readable.
pub fn max_user_namespaces() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Runs `/bin/sh -c true` confined at `level` in `workspace`: proves the
/// sandbox can actually be applied here, not only that its parts exist.
pub fn try_level(sandbox: &Sandbox, workspace: &Path) -> Result<(), String> {
    let confinement = confine(sandbox, workspace).map_err(|error| error.to_string())?;
    let mut command = Command::new("/bin/sh");
    command.args(["-c", "true"]).current_dir(workspace);
    confinement.apply(&mut command);
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("a confined `/bin/sh -c true` exited with {status}")),
        Err(error) => Err(format!("a confined command could not start: {error}")),
    }
}

/// The levels a sandboxed shell uses, in the order `keel doctor` lists them.
pub const LEVELS: [SandboxLevel; 2] = [SandboxLevel::ReadOnly, SandboxLevel::WorkspaceWrite];
