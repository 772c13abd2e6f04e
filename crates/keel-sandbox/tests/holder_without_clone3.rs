//! Where a container's seccomp profile refuses `clone3` with ENOSYS (as
//! older Docker profiles do), the holder forks its calls with `clone`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use keel_sandbox::{CallEnd, CallSpec, Sandbox, SandboxConfig, SandboxLevel, read_end};

/// The pool every call of this file runs in (a kernel owns one).
static POOL: std::sync::LazyLock<keel_sandbox::HolderPool> =
    std::sync::LazyLock::new(keel_sandbox::HolderPool::new);
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

#[test]
fn calls_run_where_clone3_is_refused() {
    let outcome = std::thread::spawn(|| {
        // Installed on this thread only; every process it starts inherits it.
        let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            TargetArch::try_from(std::env::consts::ARCH).unwrap(),
        )
        .unwrap();
        let program: BpfProgram = filter.try_into().unwrap();
        seccompiler::apply_filter(&program).unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::new(SandboxLevel::WorkspaceWrite)
            .with_config(Arc::new(SandboxConfig::default()))
            .with_metadata_writable(false);
        let mut outputs = Vec::new();
        for _ in 0..2 {
            let (mut out, out_write) = std::io::pipe().unwrap();
            let (_err, err_write) = std::io::pipe().unwrap();
            let spec = CallSpec::new(
                PathBuf::from("/bin/sh"),
                ["sh", "-c", "echo $$"].map(OsString::from).to_vec(),
                Vec::new(),
                OwnedFd::from(out_write),
                OwnedFd::from(err_write),
            );
            let call = POOL.spawn(&sandbox, workspace.path(), spec).unwrap();
            let mut text = String::new();
            out.read_to_string(&mut text).unwrap();
            let mut status = std::fs::File::from(call.status().try_clone_to_owned().unwrap());
            let mut record = Vec::new();
            status.read_to_end(&mut record).unwrap();
            let CallEnd::Exited(end) = read_end(&record) else {
                panic!("the call did not run");
            };
            assert!(end.success());
            outputs.push(text);
        }
        outputs
    })
    .join()
    .unwrap();
    // The shell is PID 2 of its call's namespace, under the call's init.
    assert_eq!(outcome, ["2\n", "2\n"]);
}
