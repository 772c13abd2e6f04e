//! A terminal's Ctrl-C (SIGINT) or a SIGTERM sent to the process group of
//! the process that runs Keel never reaches a namespace holder: holders lead
//! process groups of their own, so a call that is running when the host
//! gets the signal is not killed behind the host's back — the host decides
//! (it cancels the run, which kills the call through its pidfd).
#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use keel_sandbox::{
    CallEnd, CallSpec, END_LEN, HolderPool, Sandbox, SandboxConfig, SandboxLevel, read_end,
};

/// A host's signal handler: notes nothing, lets the host decide.
extern "C" fn noticed(_signal: libc::c_int) {}

#[test]
fn signals_to_the_hosts_process_group_leave_running_calls_alone() {
    // SAFETY: setpgid takes no pointers, and `noticed` is a handler that
    // does nothing: this test binary's only test makes itself the leader
    // of a new group (so the signals below reach neither cargo nor
    // anything else) and handles both signals as a host does (a handler,
    // not SIG_IGN: a handler is reset by exec, an ignored signal stays
    // ignored, which would hide what a host's group signal does).
    unsafe {
        assert_eq!(libc::setpgid(0, 0), 0);
        let handler = noticed as extern "C" fn(libc::c_int) as libc::sighandler_t;
        assert_ne!(libc::signal(libc::SIGINT, handler), libc::SIG_ERR);
        assert_ne!(libc::signal(libc::SIGTERM, handler), libc::SIG_ERR);
    }
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxLevel::WorkspaceWrite)
        .with_config(Arc::new(SandboxConfig::default()))
        .with_metadata_writable(false);
    let pool = HolderPool::new();
    let _run = pool.hold();
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let (mut out, out_write) = std::io::pipe().unwrap();
        let (_err, err_write) = std::io::pipe().unwrap();
        let spec = CallSpec::new(
            PathBuf::from("/bin/sh"),
            // Says it started, then outlives the signal.
            ["sh", "-c", "echo started; sleep 1; echo finished"]
                .map(OsString::from)
                .to_vec(),
            vec![("PATH".into(), "/usr/bin:/bin".into())],
            OwnedFd::from(out_write),
            OwnedFd::from(err_write),
        );
        let call = pool.spawn(&sandbox, workspace.path(), spec).unwrap();
        let mut started = [0u8; 8];
        out.read_exact(&mut started).unwrap();
        assert_eq!(&started, b"started\n");
        // SAFETY: kill takes no pointers; 0 is this test's own group.
        assert_eq!(unsafe { libc::kill(0, signal) }, 0);
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        let mut status = std::fs::File::from(call.status().as_fd().try_clone_to_owned().unwrap());
        let mut record = Vec::new();
        status.read_to_end(&mut record).unwrap();
        assert_eq!(
            record.len(),
            END_LEN,
            "the call was killed by signal {signal}"
        );
        assert!(
            matches!(read_end(&record), CallEnd::Exited(status) if status.success()),
            "signal {signal}"
        );
        assert_eq!(rest, "finished\n", "signal {signal}");
    }
}
