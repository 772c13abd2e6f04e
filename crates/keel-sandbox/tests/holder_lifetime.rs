//! When the last run's guard on a pool ([`keel_sandbox::HolderPool::hold`])
//! is dropped, that pool's namespace holders stop: no process is left in
//! the namespaces they held, and the next call gets new ones. Another
//! pool's holders (another kernel's) are untouched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_sandbox::{CallSpec, HolderPool, Sandbox, SandboxConfig, SandboxLevel};

/// The network namespace a call ran in (`net:[inode]`).
fn network_namespace(pool: &HolderPool, sandbox: &Sandbox, workspace: &Path) -> String {
    let (mut out, out_write) = std::io::pipe().unwrap();
    let (_err, err_write) = std::io::pipe().unwrap();
    let spec = CallSpec::new(
        PathBuf::from("/bin/sh"),
        ["sh", "-c", "readlink /proc/self/ns/net"]
            .map(OsString::from)
            .to_vec(),
        Vec::new(),
        OwnedFd::from(out_write),
        OwnedFd::from(err_write),
    );
    let call = pool.spawn(sandbox, workspace, spec).unwrap();
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

fn sandbox() -> Sandbox {
    Sandbox::new(SandboxLevel::WorkspaceWrite)
        .with_config(Arc::new(SandboxConfig::default()))
        .with_metadata_writable(false)
}

#[test]
fn the_last_runs_guard_stops_every_holder() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = sandbox();
    let pool = HolderPool::new();
    let guard = pool.hold();
    let first = network_namespace(&pool, &sandbox, workspace.path());
    assert!(first.starts_with("net:["), "{first}");
    assert_eq!(network_namespace(&pool, &sandbox, workspace.path()), first);
    assert!(!processes_in(&first).is_empty(), "the holder keeps {first}");
    drop(guard);
    assert_eq!(processes_in(&first), Vec::<String>::new());
    assert!(pool.is_empty());
    let _guard = pool.hold();
    assert_ne!(network_namespace(&pool, &sandbox, workspace.path()), first);
}

#[test]
fn a_pools_last_run_stops_its_holders_and_no_other_pools() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = sandbox();
    let (a, b) = (HolderPool::new(), HolderPool::new());
    let (guard_a, _guard_b) = (a.hold(), b.hold());
    let second_run_a = a.hold();
    let held_by_a = network_namespace(&a, &sandbox, workspace.path());
    let held_by_b = network_namespace(&b, &sandbox, workspace.path());
    assert_ne!(held_by_a, held_by_b, "two pools never share a holder");
    drop(guard_a);
    assert!(
        !processes_in(&held_by_a).is_empty(),
        "a run of A still holds its holders"
    );
    drop(second_run_a);
    assert_eq!(processes_in(&held_by_a), Vec::<String>::new());
    assert!(a.is_empty());
    assert!(
        !processes_in(&held_by_b).is_empty(),
        "B's holder is untouched"
    );
    assert_eq!(network_namespace(&b, &sandbox, workspace.path()), held_by_b);
}

#[test]
fn dropping_a_pool_stops_its_holders() {
    let workspace = tempfile::tempdir().unwrap();
    let pool = HolderPool::new();
    let held = network_namespace(&pool, &sandbox(), workspace.path());
    assert!(!processes_in(&held).is_empty(), "the holder keeps {held}");
    drop(pool);
    assert_eq!(processes_in(&held), Vec::<String>::new());
}
