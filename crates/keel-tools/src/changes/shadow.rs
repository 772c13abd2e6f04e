//! Keel's private git repository, and the only way Keel runs git.
//!
//! The workspace's own repository is the model's to write: its
//! `.git/config` can name filter drivers, an fsmonitor, a hooks directory or
//! include files, and its hooks run on index writes. So Keel never runs git
//! in it. Snapshots live in a *shadow* repository that Keel creates in a
//! private (0700) directory under the scratch directory its caller names
//! ([`SnapshotLimits::spill_under`](super::SnapshotLimits::spill_under),
//! else [`DEFAULT_SCRATCH`]) and removes on drop; git runs there with:
//! - `GIT_DIR` set to the shadow, no work tree, and the shadow as working
//!   directory: git never reads the workspace (Keel feeds it bytes it read
//!   itself, see `scan`);
//! - a configuration Keel wrote (`core.hooksPath=/dev/null`,
//!   `core.fsmonitor=false`, no attributes or excludes files, no automatic
//!   gc), `GIT_CONFIG_NOSYSTEM=1` and `GIT_CONFIG_GLOBAL=/dev/null`, so no
//!   system, user or repository configuration is read at all;
//! - `GIT_ATTR_NOSYSTEM=1` and `GIT_ATTR_SOURCE` set to the empty tree, so no
//!   `.gitattributes` applies;
//! - an environment cleared of everything else (no `GIT_*` from the parent),
//!   but for the `PATH` git is found on, which is the host's snapshot's
//!   ([`HostEnv::search_path`]), never read from this process;
//! - stdout and stderr written to private files (no pipe can fill and stall
//!   git), and a deadline after which the process is killed;
//! - inside Keel's sandbox whenever this machine can enforce it
//!   ([`keel_sandbox::confine_helper`]): git sees the system locations
//!   read-only and this private directory read-write, and nothing else —
//!   not the workspace, not the home directory — with no network, in its own
//!   namespaces with Landlock and seccomp. Git never needs the workspace:
//!   Keel feeds it the bytes. Where the sandbox cannot be enforced, git runs
//!   unconfined with the pinned configuration and environment above, and a
//!   `debug` trace says so once per repository ([`Shadow::is_confined`]).

use std::ffi::OsStr;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{ChangesError, Deadline, io_err};
use crate::env::HostEnv;
use crate::sandbox::{Confinement, SYSTEM_READABLE, confine_helper};

/// Where the shadow repository goes when the caller names no scratch
/// directory (a library reads no environment, so not `$TMPDIR`).
pub(super) const DEFAULT_SCRATCH: &str = "/tmp";

/// The id of git's empty tree (SHA-1), which every repository has.
pub(super) const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e0bf8e1df3b3f6b9b7f5";

/// The shadow repository's whole configuration.
const CONFIG: &str = "[core]
\trepositoryformatversion = 0
\tbare = true
\thooksPath = /dev/null
\tfsmonitor = false
\tattributesFile = /dev/null
\texcludesFile = /dev/null
\tquotePath = false
\tautocrlf = false
\tuntrackedCache = false
[color]
\tui = false
[diff]
\tnoprefix = false
\tmnemonicPrefix = false
\tsubmodule = short
[gc]
\tauto = 0
[maintenance]
\tauto = false
";

/// A private git repository, removed with its directory on drop.
#[derive(Debug)]
pub(super) struct Shadow {
    dir: PathBuf,
    git_dir: PathBuf,
    next: AtomicU64,
    /// The `PATH` git is found on (the host's).
    search_path: std::ffi::OsString,
    /// The sandbox every git command runs in, when it can be enforced.
    confinement: Option<Confinement>,
}

/// What a finished git command printed.
pub(super) struct Output {
    pub(super) status: ExitStatus,
    pub(super) stdout: Vec<u8>,
    pub(super) stderr: Vec<u8>,
}

impl Shadow {
    /// Creates the private directory under `scratch` and an empty
    /// repository in it; git is found on the `PATH` of `env`.
    pub(super) fn create(scratch: &Path, env: &HostEnv) -> Result<Shadow, ChangesError> {
        let dir = scratch.join(format!("keel-git-{}", uuid::Uuid::now_v7()));
        let search_path = env.search_path().to_owned();
        let shown = dir.display().to_string();
        let context = || format!("creating {shown}");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io_err(context(), e))?;
        let confinement = match confine_helper(&git_location(&search_path), &dir) {
            Ok(confinement) => Some(confinement),
            Err(err) => {
                tracing::debug!(%err, "Keel's own git runs unconfined: the sandbox is unavailable");
                None
            }
        };
        let shadow = Shadow {
            git_dir: dir.join("repo"),
            dir,
            next: AtomicU64::new(0),
            search_path,
            confinement,
        };
        for sub in ["repo", "repo/objects", "repo/refs", "repo/refs/heads", "io"] {
            std::fs::create_dir(shadow.dir.join(sub)).map_err(|e| io_err(context(), e))?;
        }
        let files = [("HEAD", "ref: refs/heads/main\n"), ("config", CONFIG)];
        for (name, text) in files {
            std::fs::write(shadow.git_dir.join(name), text).map_err(|e| io_err(context(), e))?;
        }
        Ok(shadow)
    }

    /// Whether git runs inside Keel's sandbox.
    pub(super) fn is_confined(&self) -> bool {
        self.confinement
            .as_ref()
            .is_some_and(Confinement::is_enforced)
    }

    /// A fresh private path for a scratch file (`tag` names its use).
    pub(super) fn scratch(&self, tag: &str) -> PathBuf {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.dir.join("io").join(format!("{n}.{tag}"))
    }

    /// A number unique within this repository (for ref names).
    pub(super) fn unique(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// `git <args>` set up as the module docs say; stdin is null.
    fn command<S: AsRef<OsStr>>(&self, args: &[S], env: &[(&str, &OsStr)]) -> Command {
        let mut command = Command::new("git");
        command
            .current_dir(self.dir.join("io"))
            .env_clear()
            .env("PATH", &self.search_path)
            .env("HOME", &self.dir)
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_ATTR_SOURCE", EMPTY_TREE)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("LC_ALL", "C");
        for (name, value) in env {
            command.env(name, value);
        }
        command.args(args).stdin(Stdio::null());
        if let Some(confinement) = &self.confinement {
            confinement.apply(&mut command);
        }
        command
    }

    /// Runs git to completion before `deadline`, feeding it `stdin`.
    pub(super) fn run<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        env: &[(&str, &OsStr)],
        stdin: Option<&[u8]>,
        deadline: &Deadline,
    ) -> Result<Output, ChangesError> {
        let mut running = self.spawn(args, env, stdin.is_some())?;
        if let (Some(bytes), Some(mut pipe)) = (stdin, running.child.stdin.take()) {
            use std::io::Write as _;
            let written = pipe.write_all(bytes);
            drop(pipe);
            if let Err(e) = written {
                let context = format!("writing to git {}", running.name);
                let _ = running.finish(deadline);
                return Err(io_err(context, e));
            }
        }
        running.finish(deadline)
    }

    /// Runs git and returns its stdout, failing on a non-zero exit.
    pub(super) fn run_ok<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        stdin: Option<&[u8]>,
        deadline: &Deadline,
    ) -> Result<Vec<u8>, ChangesError> {
        let out = self.run(args, &[], stdin, deadline)?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(failure(&describe(args), &out))
        }
    }

    /// Starts git with stdout and stderr going to scratch files.
    pub(super) fn spawn<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        env: &[(&str, &OsStr)],
        piped_stdin: bool,
    ) -> Result<Running, ChangesError> {
        let name = describe(args);
        let (out_path, err_path) = (self.scratch("out"), self.scratch("err"));
        let create = |path: &Path| {
            std::fs::File::create(path).map_err(|e| io_err(format!("running git {name}"), e))
        };
        let (out, err) = (create(&out_path)?, create(&err_path)?);
        let mut command = self.command(args, env);
        command.stdout(out).stderr(err);
        if piped_stdin {
            command.stdin(Stdio::piped());
        }
        let child = command
            .spawn()
            .map_err(|e| io_err(format!("running git {name}"), e))?;
        Ok(Running {
            child,
            name,
            out_path,
            err_path,
        })
    }
}

/// Where the `git` on `search_path` lives, when that is not a system
/// location the sandbox reads anyway (a git in `~/.local/bin`, say): its
/// directory.
fn git_location(search_path: &OsStr) -> Vec<PathBuf> {
    let found = std::env::split_paths(search_path)
        .map(|dir| dir.join("git"))
        .find(|candidate| candidate.is_file())
        .and_then(|git| std::fs::canonicalize(git).ok());
    let Some(dir) = found.as_deref().and_then(Path::parent) else {
        return Vec::new();
    };
    match SYSTEM_READABLE.iter().any(|system| dir.starts_with(system)) {
        true => Vec::new(),
        false => vec![dir.to_path_buf()],
    }
}

impl Drop for Shadow {
    fn drop(&mut self) {
        if let Err(err) = std::fs::remove_dir_all(&self.dir) {
            tracing::debug!(dir = %self.dir.display(), %err, "could not remove the shadow repository");
        }
    }
}

/// A git process started by [`Shadow::spawn`].
pub(super) struct Running {
    /// The process; its stdin is piped when asked for.
    pub(super) child: Child,
    /// The arguments, for messages.
    pub(super) name: String,
    out_path: PathBuf,
    err_path: PathBuf,
}

impl Running {
    /// Waits for the process until `deadline`, killing it then, and
    /// collects what it printed.
    pub(super) fn finish(mut self, deadline: &Deadline) -> Result<Output, ChangesError> {
        drop(self.child.stdin.take());
        let mut pause = Duration::from_millis(1);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => return Err(io_err(format!("waiting for git {}", self.name), e)),
            }
            if let Err(err) = deadline.check(&format!("running git {}", self.name)) {
                self.kill();
                return Err(err);
            }
            std::thread::sleep(pause.min(deadline.remaining()));
            pause = (pause * 2).min(Duration::from_millis(20));
        };
        let read = |path: &Path| {
            let bytes = std::fs::read(path);
            let _ = std::fs::remove_file(path);
            bytes
        };
        let context = || format!("reading the output of git {}", self.name);
        let stdout = read(&self.out_path).map_err(|e| io_err(context(), e))?;
        let stderr = read(&self.err_path).map_err(|e| io_err(context(), e))?;
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }

    /// Kills and reaps the process.
    pub(super) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.out_path);
        let _ = std::fs::remove_file(&self.err_path);
    }
}

/// The arguments joined by spaces, for messages (lossy).
fn describe<S: AsRef<OsStr>>(args: &[S]) -> String {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    args.join(" ")
}

/// The error for a git command that exited unsuccessfully.
pub(super) fn failure(command: &str, out: &Output) -> ChangesError {
    ChangesError::Git {
        command: command.to_owned(),
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::net::TcpListener;
    use std::time::Duration;

    use super::*;
    use crate::sandbox::{Sandbox, SandboxLevel, probe};

    fn deadline() -> Deadline {
        Deadline::new(Duration::from_secs(30))
    }

    /// `git hash-object <path>`: whether git could read the file.
    fn reads(shadow: &Shadow, path: &Path) -> bool {
        let out = shadow.run(
            &[OsStr::new("hash-object"), path.as_os_str()],
            &[],
            None,
            &deadline(),
        );
        out.unwrap().status.success()
    }

    #[test]
    fn git_runs_confined_to_the_shadow_repository_where_the_sandbox_works() {
        let probe_dir = tempfile::tempdir().unwrap();
        let available = probe::try_level(
            &Sandbox::new(SandboxLevel::WorkspaceWrite),
            probe_dir.path(),
        )
        .is_ok();
        let scratch = tempfile::tempdir().unwrap();
        let shadow = Shadow::create(scratch.path(), &HostEnv::empty()).unwrap();
        assert!(shadow.dir.starts_with(scratch.path()));
        assert_eq!(shadow.is_confined(), available);
        let workspace = tempfile::tempdir().unwrap();
        let file = workspace.path().join("a.txt");
        std::fs::write(&file, "workspace file\n").unwrap();
        let own = shadow.scratch("own");
        std::fs::write(&own, "scratch\n").unwrap();
        // Its own directory is git's; the workspace is not, when confined.
        assert!(reads(&shadow, &own));
        assert_eq!(reads(&shadow, &file), !available);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!(
            "http://127.0.0.1:{}/r",
            listener.local_addr().unwrap().port()
        );
        let _ = shadow.run(&["ls-remote", url.as_str()], &[], None, &deadline());
        assert_eq!(listener.accept().is_ok(), !available, "the network");
        // Control: the same git, unconfined, reads the workspace.
        let mut open = Shadow::create(scratch.path(), &HostEnv::empty()).unwrap();
        open.confinement = None;
        assert!(reads(&open, &file));
    }

    #[test]
    fn git_is_found_on_the_snapshots_path_not_the_process_path() {
        let scratch = tempfile::tempdir().unwrap();
        let version = |env: &HostEnv| {
            let shadow = Shadow::create(scratch.path(), env).unwrap();
            shadow.run(&["--version"], &[], None, &deadline()).is_ok()
        };
        // This process's PATH finds git (the other tests need it); a
        // snapshot whose PATH holds no git does not.
        let nowhere = scratch.path().join("no-git-here");
        std::fs::create_dir(&nowhere).unwrap();
        assert!(!version(&HostEnv::new([("PATH", &nowhere)])));
        assert!(version(&HostEnv::new([(
            "PATH",
            "/usr/local/bin:/usr/bin:/bin"
        )])));
    }
}
