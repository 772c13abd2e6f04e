//! What this machine can enforce, for the sandbox and for `keel doctor`.
//!
//! The Landlock ABI is asked of the kernel directly
//! (`landlock_create_ruleset` with the version flag), never guessed from
//! `/sys/kernel/security/lsm`, which lists Landlock even where a container's
//! seccomp profile blocks its system calls. Namespaces are probed the same
//! way: a forked child tries `unshare` and reports the kernel's answer; the
//! result is kept for the life of the process.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use super::namespaces::NAMESPACES;
use super::{REQUIRED_LANDLOCK_ABI, Sandbox, SandboxError, SandboxLevel, confine, sys};

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

/// Fails with an explanation unless Landlock can enforce what the sandbox
/// needs; the kernel's ABI when it can.
pub(super) fn require_landlock() -> Result<i32, SandboxError> {
    match landlock_abi() {
        Ok(abi) if abi >= REQUIRED_LANDLOCK_ABI => Ok(abi),
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

/// The namespaces `keel doctor` lists, with the `unshare` flag of each.
pub const NAMESPACE_KINDS: [(&str, libc::c_int); 6] = [
    ("user", libc::CLONE_NEWUSER),
    ("mount", libc::CLONE_NEWNS),
    ("pid", libc::CLONE_NEWPID),
    ("network", libc::CLONE_NEWNET),
    ("ipc", libc::CLONE_NEWIPC),
    ("uts", libc::CLONE_NEWUTS),
];

/// Whether a forked child can `unshare(flags)` (from inside a new user
/// namespace, as the sandbox does); the kernel's error if not.
fn try_unshare(flags: libc::c_int) -> Result<(), String> {
    let mut command = Command::new("keel-namespace-probe");
    // SAFETY: the closure runs in the forked child and only makes the
    // unshare and _exit system calls; it never returns on success, so
    // nothing is executed.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            sys::unshare(libc::CLONE_NEWUSER | flags)?;
            sys::exit(0)
        });
    }
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("the probe exited with {status}")),
        Err(error) => Err(error.to_string()),
    }
}

/// Each namespace the sandbox uses, and whether this process may create it.
pub fn namespaces() -> Vec<(&'static str, Result<(), String>)> {
    NAMESPACE_KINDS
        .iter()
        .map(|&(name, flag)| (name, try_unshare(flag)))
        .collect()
}

/// Fails with an explanation unless every namespace of the sandbox can be created.
pub(super) fn require_namespaces() -> Result<(), SandboxError> {
    static PROBED: OnceLock<Result<(), String>> = OnceLock::new();
    PROBED
        .get_or_init(|| {
            if try_unshare(NAMESPACES | libc::CLONE_NEWNET).is_ok() {
                return Ok(());
            }
            let mut missing: Vec<String> = namespaces()
                .into_iter()
                .filter_map(|(name, outcome)| {
                    outcome
                        .err()
                        .map(|error| format!("{name} namespaces ({error})"))
                })
                .collect();
            // Without user namespaces nothing else can be tried.
            if missing
                .first()
                .is_some_and(|first| first.starts_with("user "))
            {
                missing.truncate(1);
            }
            Err(format!(
                "Keel runs every sandboxed command in its own Linux namespaces, and this \
                 process cannot create {}",
                if missing.is_empty() {
                    "them all at once".to_owned()
                } else {
                    missing.join(", ")
                }
            ))
        })
        .clone()
        .map_err(|reason| SandboxError::Unavailable { reason })
}

/// The kernel's `dev.tty.legacy_tiocsti` setting: whether any process may
/// push input into a terminal with `TIOCSTI` (the sandbox's seccomp filter
/// refuses it either way).
pub fn legacy_tiocsti() -> Option<bool> {
    let value = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").ok()?;
    Some(value.trim() == "1")
}

/// The limit on user namespaces (`/proc/sys/user/max_user_namespaces`), if readable.
pub fn max_user_namespaces() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Runs `/bin/sh -c true` confined at `level` in `workspace`, once on its
/// own ([`confine`]) and once through a namespace holder (the `bash` tool's
/// path, [`super::HolderPool`]): proves the sandbox can actually be applied
/// here, not only that its parts exist.
pub fn try_level(sandbox: &Sandbox, workspace: &Path) -> Result<(), String> {
    let confinement = confine(sandbox, workspace).map_err(|error| error.to_string())?;
    let mut command = Command::new("/bin/sh");
    command.args(["-c", "true"]).current_dir(workspace);
    confinement.apply(&mut command);
    match command.status() {
        Ok(status) if status.success() => {}
        Ok(status) => return Err(format!("a confined `/bin/sh -c true` exited with {status}")),
        Err(error) => return Err(format!("a confined command could not start: {error}")),
    }
    try_holder(sandbox, workspace)
}

/// Runs `/bin/sh -c true` through a namespace holder of a pool of its own.
fn try_holder(sandbox: &Sandbox, workspace: &Path) -> Result<(), String> {
    use std::io::Read;
    let pool = super::HolderPool::new();
    let _run = pool.hold();
    let pipes = std::io::pipe().and_then(|out| Ok((out, std::io::pipe()?)));
    let ((_out, out_write), (_err, err_write)) =
        pipes.map_err(|error| format!("creating pipes for a probe: {error}"))?;
    let spec = super::CallSpec {
        program: "/bin/sh".into(),
        args: ["sh", "-c", "true"].map(std::ffi::OsString::from).to_vec(),
        env: Vec::new(),
        stdout: out_write.into(),
        stderr: err_write.into(),
    };
    let call = pool
        .spawn(sandbox, workspace, spec)
        .map_err(|error| format!("the namespace holder `bash` runs commands in: {error}"))?;
    let mut record = Vec::new();
    let status = call
        .status()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|mut status| status.read_to_end(&mut record));
    status.map_err(|error| format!("reading a probe's end through a holder: {error}"))?;
    match super::read_end(&record) {
        super::CallEnd::Exited(status) if status.success() => Ok(()),
        super::CallEnd::Exited(status) => Err(format!(
            "`/bin/sh -c true` through a namespace holder exited with {status}"
        )),
        super::CallEnd::NotStarted(error) => Err(format!(
            "`/bin/sh -c true` could not start through a namespace holder: {error}"
        )),
        super::CallEnd::Killed => {
            Err("`/bin/sh -c true` through a namespace holder was killed".into())
        }
    }
}

/// The levels a sandboxed shell uses, in the order `keel doctor` lists them.
pub const LEVELS: [SandboxLevel; 2] = [SandboxLevel::ReadOnly, SandboxLevel::WorkspaceWrite];

/// Runs `script` with `/bin/sh` confined by `sandbox` in `workspace`; its
/// standard output, or why it could not run or failed.
pub fn confined_output(
    sandbox: &Sandbox,
    workspace: &Path,
    script: &str,
) -> Result<String, String> {
    let confinement = confine(sandbox, workspace).map_err(|error| error.to_string())?;
    let mut command = Command::new("/bin/sh");
    command.args(["-c", script]).current_dir(workspace);
    confinement.apply(&mut command);
    match command.output() {
        Ok(output) if output.status.success() => {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        }
        Ok(output) => Err(format!(
            "a confined `/bin/sh -c {script}` exited with {}",
            output.status
        )),
        Err(error) => Err(format!("a confined command could not start: {error}")),
    }
}
