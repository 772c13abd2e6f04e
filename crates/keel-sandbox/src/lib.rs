//! The OS sandbox for commands the model runs: Linux namespaces with
//! Landlock and seccomp inside, and the allowlisted environment a child
//! process starts from.
//!
//! The permission policy decides *whether* a command runs; the sandbox makes
//! the operating system enforce *what* it may touch, so that a command the
//! shell analysis misjudged (a `python3 -c` opening a socket, say) still
//! cannot read the user's keys, write outside the workspace, reach the
//! network, talk to the terminal or outlive its call. [`spawn`] starts a
//! command at a [`SandboxLevel`] in namespaces held for the run (the `bash`
//! tool's path: [`hold`] keeps them for a run); [`confine`] prepares one
//! command on its own and [`Confinement::apply`] installs it on a
//! [`std::process::Command`]; [`env`](mod@env) builds the child's
//! environment; [`probe`] tells `keel doctor` what this machine can enforce;
//! [`confine_helper`] confines Keel's own helper processes (its git).
//!
//! Each confined command runs in new PID, mount and IPC namespaces, inside
//! user, mount, UTS and (unless the network was approved) network
//! namespaces that a holder keeps per run and view (`holder`, `zygote`;
//! per command with [`confine`]), in a constructed view of the filesystem
//! ([`view`]) where git's and Keel's metadata — and the nested repositories
//! the host names ([`Sandbox::nested_git`]) — stay read-only unless the host
//! approved writing them ([`metadata`]), in a new session with no
//! controlling terminal, with rlimits ([`ResourceLimits`]), no capabilities,
//! `no_new_privs`, a Landlock ruleset and a seccomp filter; when it exits,
//! its PID namespace and everything left in it die ([`namespaces`]).
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
//! - Everything that allocates or opens files on the host happens in the
//!   parent ([`confine`], [`spawn`]); the children make only system calls
//!   on data prepared there, which is safe after `fork`. A holder is not a
//!   fork of the kernel process: it is the executable re-executed in a
//!   holder mode (`reexec`), which starts with an empty environment and
//!   none of the kernel process's memory, and builds its namespaces from a
//!   plan the kernel process hands it (`plan`).
//! - Fail closed: a level other than [`SandboxLevel::Unsandboxed`] that
//!   cannot be enforced makes [`confine`] fail, and nothing runs. Only the
//!   host can choose to run without Keel's sandbox, with
//!   [`SandboxMode::External`] or by granting `full`.
//! - A child's environment holds only allowlisted variables ([`env`]).

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod capabilities;
pub mod env;
mod holder;
mod landlock_rules;
pub mod limits;
mod metadata;
mod namespaces;
mod passing;
mod plan;
pub mod probe;
mod reexec;
mod seccomp;
mod sys;
mod view;
mod zygote;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use holder::{
    Call, CallEnd, CallSpec, END_LEN, HolderPool, RunHolders, read_end, wait_until_gone,
};
pub use keel_protocol::{SandboxLevel, SandboxMode};
pub use limits::{ResourceLimits, default_tmp_size};
pub use metadata::PROTECTED as PROTECTED_METADATA;

use namespaces::{Launch, Parts};

/// The Landlock ABI the sandbox needs: filesystem rules including truncate
/// (ABI 3) and TCP bind/connect rules (ABI 4, Linux 6.7).
pub const REQUIRED_LANDLOCK_ABI: i32 = 4;

/// The host's sandbox settings for a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SandboxConfig {
    /// Who enforces the sandbox.
    pub mode: SandboxMode,
    /// Directories and files sandboxed commands may read (and execute) besides
    /// the workspace and the private temp dir.
    pub readable: Vec<PathBuf>,
    /// Extra directories sandboxed commands may write (in workspace-write levels).
    pub writable: Vec<PathBuf>,
    /// Keel's own configuration directories (the user's `config.toml` and
    /// global `AGENTS.md`, resolved by the host): read-only to every
    /// sandboxed command wherever a writable root holds them, even for a
    /// call approved to write git's metadata; one that does not exist yet
    /// is created empty first, so that no command can create it (see
    /// `metadata`).
    pub protected: Vec<PathBuf>,
    /// Files and directories hidden from sandboxed commands even where a
    /// readable location holds them (a file reads as empty, a directory as
    /// an empty one).
    pub masked: Vec<PathBuf>,
    /// Environment variables a child receives besides [`env::ALLOWED`].
    pub env: Vec<String>,
    /// The host's environment, captured once by the host: the only place
    /// a child's variables (and the `PATH` and `HOME` looked up for it)
    /// come from ([`env::child_env`]). Empty by default — a library reads
    /// no environment — so commands then get only Keel's fixed defaults
    /// ([`env::DEFAULT_PATH`]); keel-host passes its process environment.
    pub host_env: env::HostEnv,
    /// Resource limits of each sandboxed command.
    pub limits: ResourceLimits,
}

/// System locations that every sandboxed command may read (docs/security.md).
pub const SYSTEM_READABLE: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Secrets among the system locations, masked by default.
pub const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/etc/security/opasswd",
    "/etc/krb5.keytab",
];

/// Credential files inside the toolchain locations, masked by default.
pub const TOOLCHAIN_SECRETS: &[&str] = &[
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".config/git/credentials",
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
    ".config/git",
];

impl Default for SandboxConfig {
    /// [`SandboxConfig::system_only`]: a library reads no environment, so
    /// the environment snapshot is empty and the user's toolchains come
    /// from the host
    /// ([`SandboxConfig::with_toolchains`]; keel-host passes its `HOME` and
    /// `CARGO_HOME`).
    fn default() -> Self {
        SandboxConfig::system_only()
    }
}

impl SandboxConfig {
    /// Settings that also read the toolchains under `home`
    /// ([`HOME_TOOLCHAINS`]), their credentials masked
    /// ([`TOOLCHAIN_SECRETS`]), and mask Cargo's credentials in
    /// `cargo_home` (Cargo's home may live elsewhere). Empty paths count
    /// as absent.
    pub fn with_toolchains(home: Option<&Path>, cargo_home: Option<&Path>) -> Self {
        let mut config = SandboxConfig::system_only();
        let (readable, masked) = (&mut config.readable, &mut config.masked);
        if let Some(home) = home.filter(|home| !home.as_os_str().is_empty()) {
            readable.extend(HOME_TOOLCHAINS.iter().map(|dir| home.join(dir)));
            masked.extend(TOOLCHAIN_SECRETS.iter().map(|file| home.join(file)));
        }
        if let Some(cargo) = cargo_home.filter(|dir| !dir.as_os_str().is_empty()) {
            masked.extend(["credentials", "credentials.toml"].map(|file| cargo.join(file)));
        }
        config
    }

    /// Settings that read only the system locations, their secrets masked:
    /// no toolchain and nothing of the home directory.
    pub fn system_only() -> Self {
        let mut masked: Vec<PathBuf> = SYSTEM_SECRETS.iter().map(PathBuf::from).collect();
        masked.extend(ssh_host_keys());
        Self {
            mode: SandboxMode::Os,
            readable: SYSTEM_READABLE.iter().map(PathBuf::from).collect(),
            writable: Vec::new(),
            protected: Vec::new(),
            masked,
            env: Vec::new(),
            host_env: env::HostEnv::empty(),
            limits: ResourceLimits::default(),
        }
    }
}

/// The SSH host's private keys (`/etc/ssh/ssh_host_*_key`).
fn ssh_host_keys() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/etc/ssh") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("ssh_host_") && name.ends_with("_key"))
        })
        .collect()
}

/// Why a sandboxed command cannot run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// An operation of the sandbox's set-up failed (creating a pipe, a
    /// socket or a thread, reading a symlink of the view).
    #[error("Setting up the sandbox failed: {what}: {source}")]
    Io {
        /// What was being done, with the path it was done on, if any.
        what: String,
        /// What the operating system reported.
        #[source]
        source: std::io::Error,
    },
    /// Setting the sandbox up failed for a reason the operating system did
    /// not report (the namespace holder stopped, a hand-over broke off).
    #[error("Setting up the sandbox failed: {0}")]
    Setup(String),
    /// The command cannot be started as given (a NUL byte in its program,
    /// an argument or a variable; no arguments); nothing ran.
    #[error("The command cannot be started: {0}")]
    InvalidCommand(String),
}

/// The shared sandbox settings handed to every tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sandbox {
    /// The level this call runs at.
    pub level: SandboxLevel,
    /// The host's settings.
    pub config: Arc<SandboxConfig>,
    /// Whether this call may write git's and Keel's metadata in the
    /// workspace ([`PROTECTED_METADATA`]): only when the host approved a
    /// call whose intent said it writes them. Otherwise they are read-only
    /// at every level Keel enforces.
    pub metadata_writable: bool,
    /// Git directories and `.git` files below the top of the writable roots
    /// (a nested repository's `.git`, a bare repository, a submodule's
    /// `.git` file), absolute: bound read-only over themselves like the
    /// top-level `.git` unless [`Sandbox::metadata_writable`]. The host
    /// finds them (Keel's kernel with its walk before each command); each
    /// is bound only where it is its own canonical path (no symlink on the
    /// way or at its end), a directory or a regular file, strictly inside a
    /// writable root (see `metadata`). Empty by default.
    pub nested_git: Vec<PathBuf>,
}

impl Sandbox {
    /// A sandbox at `level` with the default settings, metadata read-only.
    pub fn new(level: SandboxLevel) -> Self {
        Self {
            level,
            config: Arc::new(SandboxConfig::default()),
            metadata_writable: false,
            nested_git: Vec::new(),
        }
    }

    /// This sandbox with `config` as its settings.
    #[must_use]
    pub fn with_config(mut self, config: Arc<SandboxConfig>) -> Self {
        self.config = config;
        self
    }

    /// This sandbox with git's metadata writable (`true`) or read-only.
    #[must_use]
    pub fn with_metadata_writable(mut self, writable: bool) -> Self {
        self.metadata_writable = writable;
        self
    }

    /// This sandbox with `paths` as the nested git directories and `.git`
    /// files to keep read-only ([`Sandbox::nested_git`]).
    #[must_use]
    pub fn with_nested_git(mut self, paths: Vec<PathBuf>) -> Self {
        self.nested_git = paths;
        self
    }

    /// Whether Keel enforces this sandbox itself (a confined level in
    /// [`SandboxMode::Os`]).
    pub fn is_enforced(&self) -> bool {
        self.level != SandboxLevel::Unsandboxed && self.config.mode == SandboxMode::Os
    }
}

/// A prepared confinement for one command: apply it to the command.
#[derive(Debug)]
pub struct Confinement {
    launch: Option<Arc<Launch>>,
}

/// Where `TMPDIR` points inside the sandbox: its private tmpfs.
pub const SANDBOX_TMPDIR: &str = "/tmp";

/// Prepares the confinement of one command run with `workspace` as root.
pub fn confine(sandbox: &Sandbox, workspace: &Path) -> Result<Confinement, SandboxError> {
    if !sandbox.is_enforced() {
        return Ok(Confinement { launch: None });
    }
    let launch = Launch::new(prepare(sandbox, workspace)?)?;
    Ok(Confinement {
        launch: Some(Arc::new(launch)),
    })
}

/// Everything a confined command needs, planned on the host now: the view,
/// a fresh Landlock ruleset, the seccomp filter. Fails closed.
fn prepare(sandbox: &Sandbox, workspace: &Path) -> Result<Parts, SandboxError> {
    let abi = probe::require_landlock()?;
    probe::require_namespaces()?;
    let metadata = metadata::find(sandbox, workspace);
    let mut view = view::build(sandbox, workspace, &metadata)?;
    let landlock_extra = std::mem::take(&mut view.landlock)
        .into_iter()
        .map(|(path, grant)| (path, landlock_rules::grant_bits(grant, abi)))
        .collect();
    Ok(Parts {
        network: sandbox.level.allows_network(),
        view,
        workspace: view::c_path(workspace)?,
        limits: sandbox.config.limits,
        landlock: landlock_rules::build(sandbox, workspace, &metadata)?,
        landlock_extra,
        filter: seccomp::filter(sandbox.level.allows_network())?,
    })
}

/// Prepares the confinement of one of Keel's own helper processes (its
/// git): it reads the system locations ([`SandboxConfig::system_only`]) and
/// `readable`, writes only `writable` (where it also starts) and its private
/// `/tmp`, has no network, and sees nothing else — no workspace, no home.
/// Fails like [`confine`] where the sandbox cannot be enforced.
pub fn confine_helper(readable: &[PathBuf], writable: &Path) -> Result<Confinement, SandboxError> {
    let mut config = SandboxConfig::system_only();
    config.readable.extend(readable.iter().cloned());
    let sandbox = Sandbox {
        level: SandboxLevel::WorkspaceWrite,
        config: Arc::new(config),
        metadata_writable: false,
        nested_git: Vec::new(),
    };
    confine(&sandbox, writable)
}

impl Confinement {
    /// Whether the command runs in Keel's sandbox.
    pub fn is_enforced(&self) -> bool {
        self.launch.is_some()
    }

    /// The temp dir the confined command sees (`TMPDIR`), when confined.
    pub fn temp_dir(&self) -> Option<&Path> {
        self.launch.as_ref().map(|_| Path::new(SANDBOX_TMPDIR))
    }

    /// Points TMPDIR at the sandbox's `/tmp` and installs what the child
    /// does before exec: the namespaces, the view and the restrictions.
    pub fn apply(&self, command: &mut std::process::Command) {
        let Some(launch) = &self.launch else { return };
        command.env("TMPDIR", SANDBOX_TMPDIR);
        let launch = Arc::clone(launch);
        // SAFETY: the closure runs in the forked child before exec. It
        // only reads memory prepared in the parent and makes system calls
        // through `sys` (see `namespaces`); it allocates nothing and takes
        // no locks.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || launch.run_in_child());
        }
    }
}
