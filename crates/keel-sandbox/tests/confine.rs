//! The engine's own seam: [`confine`] a plain `std::process::Command` and
//! check what the child could do, by its effects on the file system. The
//! thorough cases (network, ptrace, secrets) run through the `bash` tool in
//! keel-tools' `tests/sandbox.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use keel_sandbox::{Sandbox, SandboxConfig, SandboxLevel, SandboxMode, confine, probe};

/// Runs `script` with `/bin/sh` in `workspace`, confined by `sandbox`;
/// whether it exited successfully, and the private temp dir it had.
fn run(sandbox: &Sandbox, workspace: &Path, script: &str) -> (bool, Option<std::path::PathBuf>) {
    let confinement = confine(sandbox, workspace).unwrap();
    let mut command = Command::new("/bin/sh");
    command.args(["-c", script]).current_dir(workspace);
    confinement.apply(&mut command);
    let status = command.status().unwrap();
    (
        status.success(),
        confinement.temp_dir().map(Path::to_path_buf),
    )
}

#[test]
fn unsandboxed_and_external_confine_nothing() {
    let workspace = tempfile::tempdir().unwrap();
    let unsandboxed = Sandbox::new(SandboxLevel::Unsandboxed);
    assert!(
        confine(&unsandboxed, workspace.path())
            .unwrap()
            .temp_dir()
            .is_none()
    );
    let external = Sandbox::new(SandboxLevel::ReadOnly)
        .with_config(Arc::new({
            let mut sandbox_config = SandboxConfig::default();
            sandbox_config.mode = SandboxMode::External;
            sandbox_config
        }))
        .with_metadata_writable(false);
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("written");
    let (ok, temp) = run(
        &external,
        workspace.path(),
        &format!("echo x > {}", target.display()),
    );
    assert!(ok && target.exists() && temp.is_none());
}

#[test]
fn read_only_writes_only_its_private_temp_dir() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxLevel::ReadOnly);
    let (ok, _) = run(&sandbox, workspace.path(), "echo x > new.txt");
    assert!(!ok);
    assert!(!workspace.path().join("new.txt").exists());
    let (ok, temp) = run(
        &sandbox,
        workspace.path(),
        "echo t > \"$TMPDIR/t\" && test \"$(cat \"$TMPDIR/t\")\" = t",
    );
    assert!(ok);
    // The private temp dir is the sandbox's own tmpfs, gone with the command.
    assert_eq!(temp.as_deref(), Some(Path::new("/tmp")));
    let (ok, _) = run(&sandbox, workspace.path(), "test ! -e \"$TMPDIR/t\"");
    assert!(ok, "a second command saw the first one's temp file");
}

#[test]
fn workspace_write_writes_the_workspace_and_nothing_outside() {
    let workspace = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxLevel::WorkspaceWrite);
    let (ok, _) = run(&sandbox, workspace.path(), "mkdir d && echo x > d/new.txt");
    assert!(ok);
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("d/new.txt")).unwrap(),
        "x\n"
    );
    let target = outside.path().join("written");
    let (ok, _) = run(
        &sandbox,
        workspace.path(),
        &format!("echo x > {}", target.display()),
    );
    assert!(!ok);
    assert!(!target.exists());
}

#[test]
fn the_probe_applies_every_level_doctor_lists() {
    let workspace = tempfile::tempdir().unwrap();
    for level in probe::LEVELS {
        probe::try_level(&Sandbox::new(level), workspace.path()).unwrap();
    }
}
