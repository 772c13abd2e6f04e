//! When the OS sandbox cannot be enforced, nothing runs unsandboxed.
//!
//! The `keel` process is started under a seccomp filter that takes one
//! layer away for real: the Landlock system calls fail with ENOSYS (a
//! kernel without Landlock, or a container profile blocking it), or
//! creating a user namespace fails with EPERM (a container that forbids
//! them; `clone3` answers ENOSYS there, as Docker's profile does, so that
//! its flags can be checked). A shell call must then fail with
//! `sandbox_unavailable`, name what is missing and leave no trace, and
//! `keel doctor` must say so and exit 1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
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

/// Filters under which no user namespace can be created: `unshare` and
/// `clone` with CLONE_NEWUSER fail with EPERM; `clone3`, whose flags seccomp
/// cannot read, fails with ENOSYS so that callers fall back to `clone`.
fn no_user_namespaces() -> Vec<BpfProgram> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).unwrap();
    let new_user = || {
        let flag = libc::CLONE_NEWUSER as u64;
        let condition = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .unwrap();
        vec![SeccompRule::new(vec![condition]).unwrap()]
    };
    let rules = [
        (libc::SYS_unshare, new_user()),
        (libc::SYS_clone, new_user()),
    ];
    let namespaces = SeccompFilter::new(
        rules.into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .unwrap();
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .unwrap();
    vec![namespaces.try_into().unwrap(), clone3.try_into().unwrap()]
}

/// Runs `keel ARGS` with Landlock taken away.
fn keel_without_landlock(args: &[&str]) -> Output {
    keel_under(vec![no_landlock()], args)
}

/// Runs `keel ARGS` under `filters`.
fn keel_under(filters: Vec<BpfProgram>, args: &[&str]) -> Output {
    let mut command = common::keel_command();
    command.args(args).stdin(std::process::Stdio::null());
    // SAFETY: runs in the forked child before exec; apply_filter only makes
    // the prctl and seccomp system calls on the already-built program.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            for filter in &filters {
                seccompiler::apply_filter(filter).map_err(|_| std::io::Error::last_os_error())?;
            }
            Ok(())
        });
    }
    command.output().unwrap()
}

/// Runs one `echo ran > marker.txt` call in `plan` and `auto` under
/// `filters` and checks it failed closed with a message naming `missing`.
fn shell_calls_fail_closed(filters: fn() -> Vec<BpfProgram>, missing: &str) {
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
        let output = keel_under(
            filters(),
            &[
                "run",
                "--output-format",
                "stream-json",
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
            ],
        );
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
        for needed in [missing, "keel doctor", "--sandbox external"] {
            assert!(message.contains(needed), "{needed}: {message}");
        }
        assert!(
            !workspace.join("marker.txt").exists(),
            "{mode}: the command ran"
        );
    }
}

#[test]
fn without_landlock_shell_calls_fail_closed_and_nothing_runs() {
    shell_calls_fail_closed(|| vec![no_landlock()], "Landlock");
}

#[test]
fn without_user_namespaces_shell_calls_fail_closed_and_nothing_runs() {
    shell_calls_fail_closed(no_user_namespaces, "user namespaces");
}

#[test]
fn doctor_reports_an_unenforceable_sandbox() {
    let output = keel_without_landlock(&["doctor"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("landlock:        unavailable"), "{stdout}");
    assert!(stdout.contains("NOT enforceable"), "{stdout}");
    assert!(stdout.contains("--sandbox external"), "{stdout}");

    let output = keel_under(no_user_namespaces(), &["doctor"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("namespace user    unavailable"), "{stdout}");
    assert!(stdout.contains("NOT enforceable"), "{stdout}");
    assert!(stdout.contains("--sandbox external"), "{stdout}");
}

/// The dynamic loader the test binary was loaded by, from its mappings.
fn dynamic_loader() -> std::path::PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("/ld-linux"))
        .map(std::path::PathBuf::from)
        .expect("a dynamically linked test binary has a loader mapped")
}

/// Started as `ld.so keel`, `/proc/self/exe` is the loader, so no
/// namespace holder can start: doctor must say the sandbox is not
/// enforceable (it probes the holder path `bash` uses, not only a per-call
/// confinement), rather than "enforced" while every `bash` call fails.
#[test]
fn doctor_probes_the_namespace_holder_that_bash_uses() {
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(dynamic_loader())
        .arg(assert_cmd::cargo::cargo_bin!("keel"))
        .arg("doctor")
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env_remove("KEEL_LOG")
        .current_dir(home.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("namespace holder"), "{stdout}");
    assert!(stdout.contains("NOT enforceable"), "{stdout}");
}

/// `auto` leaves a command the analysis cannot resolve to the sandbox only
/// where the sandbox confines it: without user namespaces (or Landlock),
/// `echo $HOME` is asked about as before, and with nobody to answer it is
/// denied, never run.
#[test]
fn without_the_sandbox_auto_still_asks_about_unresolved_commands() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "echo $HOME > marker.txt"}}]},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let filters: [fn() -> Vec<BpfProgram>; 2] = [no_user_namespaces, || vec![no_landlock()]];
    for filters in filters {
        let output = keel_under(
            filters(),
            &[
                "run",
                "--output-format",
                "stream-json",
                "--provider",
                "scripted",
                "--mode",
                "auto",
                "--script",
                script_path.to_str().unwrap(),
                "--workspace",
                workspace.to_str().unwrap(),
                "--session-dir",
                dir.path().join("sessions").to_str().unwrap(),
                "make a marker",
            ],
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        let events: Vec<Value> = stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .collect();
        let asked = events
            .iter()
            .filter(|event| event["type"] == "permission_requested")
            .count();
        assert_eq!(asked, 1, "{stdout}");
        let end = events
            .iter()
            .find(|event| event["type"] == "tool_execution_end")
            .unwrap();
        assert_eq!(end["result"]["error"]["code"], "permission_denied", "{end}");
        assert!(!workspace.join("marker.txt").exists(), "the command ran");
    }
}
