//! Git, run by the evaluator (never by the model): checking a workspace out
//! at `base_commit`, and reading the prediction from it.
//!
//! Every command runs hermetically — an empty environment but `PATH`, no
//! system or global configuration, no system attributes — and with hooks,
//! filters and fsmonitor off: `core.hooksPath` `/dev/null`, `core.fsmonitor`
//! off, attributes read from the empty tree (`--attr-source`) and
//! `core.attributesFile` `/dev/null`; `diff` is given `--no-ext-diff
//! --no-textconv` as well. The patch is read through a private repository
//! that borrows the workspace's objects, so the workspace's own
//! configuration (where an agent, or the repository, could define clean,
//! smudge, textconv or diff drivers, hooks or an fsmonitor), its hooks and
//! its `info/attributes` are never read at all.
//!
//! The checkout fetches only `base_commit` and its history from the mirror,
//! so the commits after it (the fix among them) are not in the workspace.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::SwebenchError;

/// Git's empty tree: attributes are read from it, so there are none.
pub const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// A git command in `dir`, hermetic, with hooks, filters and fsmonitor off.
pub fn git(dir: &Path) -> Command {
    let mut command = Command::new("git");
    command.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    command
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("HOME", "/nonexistent")
        .env("LC_ALL", "C")
        .arg("--no-pager")
        .arg(format!("--attr-source={EMPTY_TREE}"))
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.untrackedCache=false",
            "-c",
            "core.attributesFile=/dev/null",
            "-c",
            "core.autocrlf=false",
            "-c",
            "core.safecrlf=false",
            "-c",
            "core.symlinks=true",
            "-c",
            "diff.noprefix=false",
            "-c",
            "diff.mnemonicPrefix=false",
            "-c",
            "diff.relative=false",
            "-c",
            "color.ui=false",
            "-c",
            "safe.directory=*",
        ])
        .current_dir(dir)
        .stdin(Stdio::null());
    command
}

/// How long an evaluator git command may take by default before it is
/// killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs `command` in a process group of its own, killed (the whole group)
/// when it has not finished within `timeout`; its stdout when it succeeds.
fn run(mut command: Command, what: &str, timeout: Duration) -> Result<Vec<u8>, SwebenchError> {
    let failed = |message: String| SwebenchError::Git {
        what: what.to_owned(),
        message,
    };
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|error| failed(format!("git could not start: {error}")))?;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(pipe) = stdout.as_mut() {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => return Err(failed(format!("git could not be waited for: {error}"))),
        }
    };
    let Some(status) = status else {
        // The whole group: whatever git started (a pager, a helper) too.
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
        return Err(failed(format!(
            "`git {what}` did not finish within {} s and was killed",
            timeout.as_secs()
        )));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&stderr);
    Err(failed(stderr.trim().chars().take(2000).collect()))
}

/// Whether `commit` looks like a full object id (40 or 64 hex digits).
pub fn is_full_id(commit: &str) -> bool {
    matches!(commit.len(), 40 | 64) && commit.bytes().all(|byte| byte.is_ascii_hexdigit())
}

/// Makes `workspace` (absent or empty) a checkout of `source` (a local
/// repository, bare or not) at `base_commit`, holding only `base_commit`'s
/// history, detached, clean.
pub fn checkout(
    source: &Path,
    base_commit: &str,
    workspace: &Path,
    timeout: Duration,
) -> Result<(), SwebenchError> {
    if !is_full_id(base_commit) {
        return Err(SwebenchError::Git {
            what: "checkout".to_owned(),
            message: format!("base_commit `{base_commit}` is not a full commit id"),
        });
    }
    if !source.is_dir() {
        return Err(SwebenchError::Git {
            what: "checkout".to_owned(),
            message: format!("no repository at {}", source.display()),
        });
    }
    std::fs::create_dir_all(workspace).map_err(|error| SwebenchError::Io {
        path: workspace.display().to_string(),
        source: error,
    })?;
    init_with(source, base_commit, workspace, timeout)?;
    let mut checkout = git(workspace);
    checkout.args(["checkout", "-q", "--detach", base_commit]);
    run(checkout, "checkout", timeout)?;
    let head = head(workspace, timeout)?;
    if !head.eq_ignore_ascii_case(base_commit) {
        return Err(SwebenchError::Git {
            what: "checkout".to_owned(),
            message: format!("HEAD is {head}, not {base_commit}"),
        });
    }
    Ok(())
}

/// A fresh repository in `workspace` holding only `base_commit` and its
/// history, fetched from `source`.
fn init_with(
    source: &Path,
    base_commit: &str,
    workspace: &Path,
    timeout: Duration,
) -> Result<(), SwebenchError> {
    let mut init = git(workspace);
    init.args([
        "-c",
        "init.defaultBranch=keel-base",
        "init",
        "-q",
        "--template=",
    ]);
    run(init, "init", timeout)?;
    let mut fetch = git(workspace);
    fetch
        .args(["fetch", "-q", "--no-tags", "--no-write-fetch-head"])
        // Upload-pack of a local repository, allowed to send one commit by id.
        .arg("--upload-pack=git -c uploadpack.allowAnySHA1InWant=true upload-pack")
        .arg("--")
        .arg(source)
        .arg(base_commit);
    run(fetch, "fetch", timeout).map(drop)
}

/// Replaces the repository of `workspace` (a copied checkout, its `.git` a
/// directory) by a fresh one holding only `base_commit` and its history,
/// `HEAD` detached at it; the files are not touched. The old repository's
/// other commits (tags, branches, reflogs: the fix among them) are gone.
pub fn rebuild(
    workspace: &Path,
    base_commit: &str,
    aside: &Path,
    timeout: Duration,
) -> Result<(), SwebenchError> {
    if !is_full_id(base_commit) {
        return Err(SwebenchError::Git {
            what: "rebuild".to_owned(),
            message: format!("base_commit `{base_commit}` is not a full commit id"),
        });
    }
    let dot_git = workspace.join(".git");
    let is_dir = std::fs::symlink_metadata(&dot_git).is_ok_and(|meta| meta.is_dir());
    if !is_dir {
        return Err(SwebenchError::Git {
            what: "rebuild".to_owned(),
            message: format!("{} is not a repository directory", dot_git.display()),
        });
    }
    let io = |path: &Path, error: std::io::Error| SwebenchError::Io {
        path: path.display().to_string(),
        source: error,
    };
    if std::fs::symlink_metadata(aside).is_ok() {
        std::fs::remove_dir_all(aside).map_err(|error| io(aside, error))?;
    }
    std::fs::rename(&dot_git, aside).map_err(|error| io(&dot_git, error))?;
    let rebuilt = init_with(aside, base_commit, workspace, timeout).and_then(|()| {
        let mut reset = git(workspace);
        reset.args(["reset", "-q", "--mixed", base_commit]);
        run(reset, "reset", timeout).map(drop)
    });
    let removed = std::fs::remove_dir_all(aside).map_err(|error| io(aside, error));
    rebuilt.and(removed)
}

/// The commit `HEAD` names.
pub fn head(workspace: &Path, timeout: Duration) -> Result<String, SwebenchError> {
    let mut command = git(workspace);
    command.args(["rev-parse", "--verify", "HEAD^{commit}"]);
    Ok(
        String::from_utf8_lossy(&run(command, "rev-parse", timeout)?)
            .trim()
            .to_owned(),
    )
}

/// Whether `path` (relative to the workspace) lies under a test directory
/// (`test`, `tests`, `testing`, any case) — dropped from the patch with
/// `--exclude-tests` when the agent added it.
pub fn under_tests(path: &str) -> bool {
    let components: Vec<&str> = path.split('/').collect();
    components[..components.len().saturating_sub(1)]
        .iter()
        .any(|component| {
            matches!(
                component.to_ascii_lowercase().as_str(),
                "test" | "tests" | "testing"
            )
        })
}

/// A prediction read from a workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Prediction {
    /// The patch against `base_commit` (empty: no change).
    pub patch: String,
    /// Directories left out because they hold a repository of their own (a
    /// `.git` entry), relative to the workspace.
    pub nested: Vec<String>,
}

/// The prediction: `git diff --binary` of the working tree (tracked and
/// untracked files, `.gitignore` honoured) against `base_commit` itself,
/// through a private index (the workspace's own is not touched). With
/// `exclude_tests`, files the agent added under test directories are left
/// out. Directories holding a repository of their own are left out (git
/// would read that repository's configuration); every git command is
/// killed after `timeout`.
pub fn patch(
    workspace: &Path,
    base_commit: &str,
    exclude_tests: bool,
    timeout: Duration,
) -> Result<Prediction, SwebenchError> {
    let scratch = tempfile::tempdir().map_err(|error| SwebenchError::Io {
        path: std::env::temp_dir().display().to_string(),
        source: error,
    })?;
    // A private repository whose objects are the workspace's (alternates):
    // the workspace's own configuration (where filter, textconv and diff
    // drivers, hooks and fsmonitor are defined), its hooks and its
    // `info/attributes` are never read.
    let private = scratch.path().join("git");
    let mut init = git(scratch.path());
    init.args(["init", "-q", "--bare", "--template="])
        .arg(&private);
    run(init, "init", timeout)?;
    let objects = objects_of(workspace)?;
    let alternates = private.join("objects/info/alternates");
    std::fs::create_dir_all(private.join("objects/info"))
        .and_then(|()| std::fs::write(&alternates, format!("{}\n", objects.display())))
        .map_err(|error| SwebenchError::Io {
            path: alternates.display().to_string(),
            source: error,
        })?;
    let index: PathBuf = scratch.path().join("index");
    let with_index = |args: &[&str]| {
        let mut command = git(workspace);
        command
            .env("GIT_DIR", &private)
            .env("GIT_WORK_TREE", workspace)
            .env("GIT_INDEX_FILE", &index)
            .args(args);
        command
    };
    run(
        with_index(&["read-tree", base_commit]),
        "read-tree",
        timeout,
    )?;
    let nested = nested_repositories(workspace)?;
    let mut add = with_index(&["add", "-A", "--", "."]);
    for directory in &nested {
        add.arg(format!(":(top,literal,exclude){directory}"));
    }
    run(add, "add", timeout)?;
    if exclude_tests {
        let added = run(
            with_index(&[
                "diff",
                "--cached",
                "--name-only",
                "--no-renames",
                "--diff-filter=A",
                "-z",
                base_commit,
            ]),
            "diff --name-only",
            timeout,
        )?;
        let dropped: Vec<&[u8]> = added
            .split(|byte| *byte == 0)
            .filter(|path| !path.is_empty())
            .filter(|path| under_tests(&String::from_utf8_lossy(path)))
            .collect();
        if !dropped.is_empty() {
            let mut remove = with_index(&["rm", "-q", "--cached", "--"]);
            for path in dropped {
                remove.arg(<OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
            }
            run(remove, "rm --cached", timeout)?;
        }
    }
    let diff = run(
        with_index(&[
            "diff",
            "--cached",
            "--binary",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--full-index",
            base_commit,
        ]),
        "diff",
        timeout,
    )?;
    let patch = String::from_utf8(diff).map_err(|_| SwebenchError::Git {
        what: "diff".to_owned(),
        message: "the patch is not UTF-8 text".to_owned(),
    })?;
    Ok(Prediction { patch, nested })
}

/// The directories below `workspace` (never the workspace itself) that hold
/// a `.git` entry of any kind, relative and `/`-separated; links are not
/// followed and such directories are not entered.
fn nested_repositories(workspace: &Path) -> Result<Vec<String>, SwebenchError> {
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let directory = workspace.join(&relative);
        let entries = std::fs::read_dir(&directory).map_err(|error| SwebenchError::Io {
            path: directory.display().to_string(),
            source: error,
        })?;
        let mut children = Vec::new();
        let mut holds_git = false;
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name == ".git" {
                holds_git = true;
                continue;
            }
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                children.push(relative.join(name));
            }
        }
        if holds_git && !relative.as_os_str().is_empty() {
            found.push(relative.to_string_lossy().into_owned());
            continue;
        }
        pending.extend(children);
    }
    found.sort();
    Ok(found)
}

/// The workspace repository's object directory, absolute.
fn objects_of(workspace: &Path) -> Result<PathBuf, SwebenchError> {
    // Only a real directory: a `.git` file or link would have git (or this
    // evaluator) follow it wherever the agent pointed it.
    let dot_git = workspace.join(".git");
    if !std::fs::symlink_metadata(&dot_git).is_ok_and(|meta| meta.is_dir()) {
        return Err(SwebenchError::Git {
            what: "objects".to_owned(),
            message: format!("{} is not a repository directory", dot_git.display()),
        });
    }
    let objects = dot_git.join("objects");
    std::fs::canonicalize(&objects).map_err(|error| SwebenchError::Io {
        path: objects.display().to_string(),
        source: error,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn test_directories() {
        assert!(under_tests("tests/test_x.py"));
        assert!(under_tests("pkg/Testing/data.txt"));
        assert!(!under_tests("test_x.py"));
        assert!(!under_tests("pkg/testsuite.py"));
        assert!(!under_tests("src/x.py"));
    }

    #[test]
    fn a_command_past_its_deadline_is_killed_with_its_group() {
        let mut command = Command::new("sh");
        command.args(["-c", "sleep 30 & sleep 30; exit 0"]);
        let error = run(command, "wait", Duration::from_millis(200)).unwrap_err();
        assert!(
            error.to_string().contains("`git wait` did not finish"),
            "{error}"
        );
    }

    #[test]
    fn full_ids() {
        assert!(is_full_id(&"a".repeat(40)));
        assert!(!is_full_id("abc123"));
        assert!(!is_full_id(&"g".repeat(40)));
    }
}
