//! When the OS sandbox cannot be enforced, nothing runs unsandboxed.
//!
//! The `keel` process is started under a seccomp filter that makes the
//! Landlock system calls fail with ENOSYS — exactly what a kernel without
//! Landlock, or a container profile blocking it, looks like. A shell call
//! must then fail with `sandbox_unavailable` and leave no trace, and
//! `keel doctor` must say so and exit 1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
use serde_json::{Value, json};

/// A filter under which every Landlock system call fails with ENOSYS.
fn no_landlock() -> BpfProgram {
    let rules = [
        libc::SYS_landlock_create_ruleset,
        libc::SYS_landlock_add_rule,
        libc::SYS_landlock_restrict_self,
    ]
    .into_iter()
    .map(|call| (call, Vec::new()))
    .collect::<BTreeMap<_, _>>();
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        TargetArch::try_from(std::env::consts::ARCH).unwrap(),
    )
    .unwrap()
    .try_into()
    .unwrap()
}

/// Runs `keel ARGS` with Landlock taken away.
fn keel_without_landlock(args: &[&str]) -> Output {
    let filter = no_landlock();
    let mut command = Command::new(assert_cmd::cargo::cargo_bin!("keel"));
    command.args(args).stdin(std::process::Stdio::null());
    // SAFETY: runs in the forked child before exec; apply_filter only makes
    // the prctl and seccomp system calls on the already-built program.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            seccompiler::apply_filter(&filter).map_err(|_| std::io::Error::last_os_error())
        });
    }
    command.output().unwrap()
}

#[test]
fn shell_calls_fail_closed_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "echo ran > marker.txt"}}]},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    for mode in ["plan", "auto"] {
        let output = keel_without_landlock(&[
            "run",
            "--provider",
            "scripted",
            "--mode",
            mode,
            "--script",
            script_path.to_str().unwrap(),
            "--workspace",
            workspace.to_str().unwrap(),
            "--session-dir",
            dir.path().join("sessions").to_str().unwrap(),
            "make a marker",
        ]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let end: Value = stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|event| event["type"] == "tool_execution_end")
            .unwrap_or_else(|| panic!("no tool_execution_end: {stdout}"));
        assert_eq!(end["result"]["status"], "error", "{mode}: {end}");
        assert_eq!(
            end["result"]["error"]["code"], "sandbox_unavailable",
            "{mode}: {end}"
        );
        let message = end["result"]["error"]["message"].as_str().unwrap();
        assert!(message.contains("Landlock"), "{message}");
        assert!(message.contains("keel doctor"), "{message}");
        assert!(
            !workspace.join("marker.txt").exists(),
            "{mode}: the command ran"
        );
    }
}

#[test]
fn doctor_reports_an_unenforceable_sandbox() {
    let output = keel_without_landlock(&["doctor"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("landlock:        unavailable"), "{stdout}");
    assert!(stdout.contains("NOT enforceable"), "{stdout}");
    assert!(stdout.contains("--sandbox external"), "{stdout}");
}
