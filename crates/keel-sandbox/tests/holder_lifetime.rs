//! When the last run's guard ([`keel_sandbox::hold`]) is dropped, the
//! namespace holders stop: no process is left in the namespaces they held,
//! and the next call gets new ones. (A file of its own: the guard counts
//! every run of the process.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_sandbox::{CallSpec, Sandbox, SandboxConfig, SandboxLevel};

/// The network namespace a call ran in (`net:[inode]`).
fn network_namespace(sandbox: &Sandbox, workspace: &Path) -> String {
    let (mut out, out_write) = std::io::pipe().unwrap();
    let (_err, err_write) = std::io::pipe().unwrap();
    let spec = CallSpec {
        program: PathBuf::from("/bin/sh"),
        args: ["sh", "-c", "readlink /proc/self/ns/net"]
            .map(OsString::from)
            .to_vec(),
        env: Vec::new(),
        stdout: OwnedFd::from(out_write),
        stderr: OwnedFd::from(err_write),
    };
    let call = keel_sandbox::spawn(sandbox, workspace, spec).unwrap();
    let mut text = String::new();
    out.read_to_string(&mut text).unwrap();
    drop(call);
    text.trim().to_owned()
}

/// Host processes whose network namespace is `namespace`.
fn processes_in(namespace: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|entry| {
            std::fs::read_link(entry.path().join("ns/net"))
                .is_ok_and(|link| link.to_string_lossy() == namespace)
        })
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn the_last_runs_guard_stops_every_holder() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = Sandbox {
        level: SandboxLevel::WorkspaceWrite,
        config: Arc::new(SandboxConfig::default()),
        metadata_writable: false,
    };
    let guard = keel_sandbox::hold();
    let first = network_namespace(&sandbox, workspace.path());
    assert!(first.starts_with("net:["), "{first}");
    assert_eq!(network_namespace(&sandbox, workspace.path()), first);
    assert!(!processes_in(&first).is_empty(), "the holder keeps {first}");
    drop(guard);
    assert_eq!(processes_in(&first), Vec::<String>::new());
    let _guard = keel_sandbox::hold();
    assert_ne!(network_namespace(&sandbox, workspace.path()), first);
}
