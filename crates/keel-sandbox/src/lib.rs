//! The OS sandbox for commands the model runs: Landlock and seccomp on
//! Linux, and the scrubbed environment a child process starts from.
//!
//! The permission policy decides *whether* a command runs; the sandbox makes
//! the operating system enforce *what* it may touch, so that a command the
//! shell analysis misjudged (a `python3 -c` opening a socket, say) still
//! cannot read the user's keys, write outside the workspace or reach the
//! network. [`confine`] prepares the restrictions of one command at a
//! [`SandboxLevel`]; [`Confinement::apply`] installs them on a
//! [`std::process::Command`]; [`env`](mod@env) builds the child's environment;
//! [`probe`] tells `keel doctor` what this machine can enforce.
//!
//! This is an engine crate under `keel-tools`, which re-exports it as
//! `keel_tools::sandbox`. It knows nothing of tools, the workspace type or
//! the policy: it takes a level and a root directory.
//!
//! Invariants:
//! - This is the only crate of the workspace that holds `unsafe` code. Each
//!   block is allowed where it stands (the workspace denies `unsafe_code`)
//!   and carries a `// SAFETY:` note, which clippy checks; every unsafe
//!   operation sits behind a safe function.
//! - Restrictions are applied in the child, between fork and exec, never in
//!   the kernel process: Landlock binds only the calling thread and its
//!   future children.
//! - Everything that allocates or opens files happens in the parent
//!   ([`confine`]); the child makes only system calls (no_new_privs,
//!   dropping capabilities, `landlock_restrict_self`, `seccomp`), which is
//!   safe after `fork`.
//! - Fail closed: a level other than [`SandboxLevel::Unsandboxed`] that
//!   cannot be enforced makes [`confine`] fail, and nothing runs. Only the
//!   host can choose to run without Keel's sandbox, with
//!   [`SandboxMode::External`] or by granting `full`.
//! - A child's environment holds none of the kernel's secrets unless the
//!   host named them ([`env::scrub`]).

#![deny(clippy::undocumented_unsafe_blocks)]

mod capabilities;
pub mod env;
mod landlock_rules;
pub mod probe;
mod seccomp;
mod temp;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use seccompiler::BpfProgram;

pub use keel_protocol::{SandboxLevel, SandboxMode};
pub use temp::PrivateTemp;

/// The Landlock ABI the sandbox needs: filesystem rules including truncate
/// (ABI 3) and TCP bind/connect rules (ABI 4, Linux 6.7).
pub const REQUIRED_LANDLOCK_ABI: i32 = 4;

/// The host's sandbox settings for a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Who enforces the sandbox.
    pub mode: SandboxMode,
    /// Directories and files sandboxed commands may read (and execute) besides
    /// the workspace and the private temp dir.
    pub readable: Vec<PathBuf>,
    /// Extra directories sandboxed commands may write (in workspace-write levels).
    pub writable: Vec<PathBuf>,
}

/// System locations that every sandboxed command may read (SPEC §7).
pub const SYSTEM_READABLE: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/dev", "/proc",
];

/// Toolchain locations under the home directory that sandboxed commands may read.
pub const HOME_TOOLCHAINS: &[&str] = &[
    ".cargo",
    ".rustup",
    ".pyenv",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    ".sdkman",
    ".local/bin",
    ".local/lib",
    "go",
    ".gitconfig",
    ".config/git",
];

impl Default for SandboxConfig {
    fn default() -> Self {
        let mut readable: Vec<PathBuf> = SYSTEM_READABLE.iter().map(PathBuf::from).collect();
        if let Some(home) = std::env::var_os("HOME").filter(|home| !home.is_empty()) {
            let home = PathBuf::from(home);
            readable.extend(HOME_TOOLCHAINS.iter().map(|dir| home.join(dir)));
        }
        Self {
            mode: SandboxMode::Os,
            readable,
            writable: Vec::new(),
        }
    }
}

/// Why a sandboxed command cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The OS cannot enforce the level asked for; nothing ran.
    #[error(
        "The OS sandbox cannot be enforced on this machine: {reason}. Nothing was run. \
         Run `keel doctor` to see what this machine supports; a host already inside an \
         isolating container can pass `--sandbox external`, and `--mode full` runs commands \
         unsandboxed."
    )]
    Unavailable {
        /// What is missing.
        reason: String,
    },
    /// Setting the sandbox up failed (creating the private temp dir, say).
    #[error("Setting up the sandbox failed: {0}")]
    Io(String),
}

/// The shared sandbox settings handed to every tool call.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The level this call runs at.
    pub level: SandboxLevel,
    /// The host's settings.
    pub config: Arc<SandboxConfig>,
}

impl Sandbox {
    /// A sandbox at `level` with the default settings.
    pub fn new(level: SandboxLevel) -> Self {
        Self {
            level,
            config: Arc::new(SandboxConfig::default()),
        }
    }
}

/// A prepared confinement for one command: apply it to the command, keep it
/// alive until the command has exited (it owns the private temp dir).
#[derive(Debug)]
pub struct Confinement {
    temp: Option<PrivateTemp>,
    restrictions: Option<Arc<ChildRestrictions>>,
}

/// What the child applies to itself before exec.
#[derive(Debug)]
struct ChildRestrictions {
    ruleset: OwnedFd,
    filter: BpfProgram,
}

/// Prepares the confinement of one command run with `workspace` as root.
pub fn confine(sandbox: &Sandbox, workspace: &Path) -> Result<Confinement, SandboxError> {
    let enforced =
        sandbox.level != SandboxLevel::Unsandboxed && sandbox.config.mode == SandboxMode::Os;
    if !enforced {
        return Ok(Confinement {
            temp: None,
            restrictions: None,
        });
    }
    probe::require_landlock()?;
    let temp = PrivateTemp::create()?;
    let ruleset = landlock_rules::build(sandbox, workspace, temp.path())?;
    let filter = seccomp::filter(sandbox.level.allows_network())?;
    Ok(Confinement {
        temp: Some(temp),
        restrictions: Some(Arc::new(ChildRestrictions { ruleset, filter })),
    })
}

impl Confinement {
    /// The private temp dir, when the command is confined.
    pub fn temp_dir(&self) -> Option<&Path> {
        self.temp.as_ref().map(PrivateTemp::path)
    }

    /// Points TMPDIR at the private temp dir and installs the restrictions
    /// to be applied in the child before exec.
    pub fn apply(&self, command: &mut std::process::Command) {
        if let Some(temp) = &self.temp {
            command.env("TMPDIR", temp.path());
        }
        if let Some(restrictions) = &self.restrictions {
            let restrictions = Arc::clone(restrictions);
            // SAFETY: the closure runs in the forked child before exec. It
            // only reads memory prepared in the parent and makes the
            // async-signal-safe system calls prctl, landlock_restrict_self
            // and seccomp; it allocates nothing and takes no locks.
            #[allow(unsafe_code)]
            unsafe {
                command.pre_exec(move || restrictions.apply_in_child());
            }
        }
    }
}

impl ChildRestrictions {
    /// Runs in the child: no_new_privs, no capabilities, then Landlock,
    /// then seccomp.
    fn apply_in_child(&self) -> io::Result<()> {
        // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1) takes no pointers.
        #[allow(unsafe_code)]
        let status = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
        if status != 0 {
            return Err(io::Error::last_os_error());
        }
        capabilities::drop_all()?;
        // SAFETY: the ruleset fd is owned by `self`, alive for this call;
        // the flags argument is 0; no pointers are passed.
        #[allow(unsafe_code)]
        let status = unsafe {
            libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.ruleset.as_raw_fd(),
                0u32,
            )
        };
        if status != 0 {
            return Err(io::Error::last_os_error());
        }
        seccompiler::apply_filter(&self.filter).map_err(|_| io::Error::last_os_error())
    }
}
