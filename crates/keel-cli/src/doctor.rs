//! `keel doctor`: what this machine can enforce, and what each mode does here.
//!
//! It asks the kernel for its Landlock ABI, checks seccomp, tries to create
//! each namespace the sandbox uses, reads the terminal-injection setting,
//! then proves the sandbox by running a confined `/bin/sh` at each level in
//! a scratch workspace (which also reports the limits a command gets), so
//! "enforced" below means "was just applied", not "the parts seem present".
//! Exit code 0 when the sandbox works, 1 when sandboxed commands would fail
//! closed. Readable lines by default (`--output-format text`), one JSON
//! object with `json`, one JSON line per check with `stream-json`.

use std::process::ExitCode;

use keel_host::modes;
use keel_tools::sandbox::probe::{self, LEVELS};
use keel_tools::sandbox::{REQUIRED_LANDLOCK_ABI, Sandbox};
use serde_json::json;

use crate::args::DataFormat;
use crate::output::say;
use crate::startup::StartupError;

/// What a confined shell reports of its own limits and session.
const LIMITS_SCRIPT: &str = "echo \"processes $(( $(cat /proc/sys/kernel/pid_max) - 1 )) \
     file-size-kb $(ulimit -f) address-space-kb $(ulimit -v) cpu-s $(ulimit -t) \
     tmp-kb $(df -k /tmp | awk 'NR == 2 { print $2 }') \
     inotify-instances $(cat /proc/sys/user/max_inotify_instances) \
     inotify-watches $(cat /proc/sys/user/max_inotify_watches) \
     controlling-terminal $(if tty -s; then tty; else echo none; fi)\"";

/// Everything the doctor found.
struct Findings {
    landlock: Result<i32, String>,
    seccomp: bool,
    namespaces: Vec<(&'static str, Result<(), String>)>,
    tiocsti: Option<bool>,
    live: Vec<(&'static str, Result<(), String>)>,
    limits: Result<String, String>,
    enforced: bool,
}

pub fn run(format: DataFormat) -> Result<ExitCode, StartupError> {
    let scratch = tempfile::Builder::new()
        .prefix("keel-doctor-")
        .tempdir()
        .map_err(|error| StartupError::new("workspace", error.to_string()))?;
    let sandbox = |level| {
        Sandbox::new(level)
            .with_config(std::sync::Arc::new(keel_host::host_sandbox()))
            .with_metadata_writable(false)
    };
    let live: Vec<(&str, Result<(), String>)> = LEVELS
        .iter()
        .map(|&level| {
            (
                level.as_str(),
                probe::try_level(&sandbox(level), scratch.path()),
            )
        })
        .collect();
    let enforced = live.iter().all(|(_, outcome)| outcome.is_ok());
    let findings = Findings {
        landlock: probe::landlock_abi(),
        seccomp: probe::seccomp_available(),
        namespaces: probe::namespaces(),
        tiocsti: probe::legacy_tiocsti(),
        limits: probe::confined_output(&sandbox(LEVELS[0]), scratch.path(), LIMITS_SCRIPT)
            .map(|text| text.trim().to_owned()),
        live,
        enforced,
    };
    match format {
        DataFormat::Text => report(&findings),
        DataFormat::Json => say(to_json(&findings)),
        DataFormat::StreamJson => to_json_lines(&findings).into_iter().for_each(say),
    }
    Ok(if findings.enforced {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn to_json(findings: &Findings) -> serde_json::Value {
    json!({
        "landlock_abi": findings.landlock.as_ref().ok(),
        "landlock_error": findings.landlock.as_ref().err(),
        "landlock_required_abi": REQUIRED_LANDLOCK_ABI,
        "seccomp": findings.seccomp,
        "namespaces": findings.namespaces.iter().map(|(name, outcome)| json!({
            "namespace": name,
            "available": outcome.is_ok(),
            "error": outcome.as_ref().err(),
        })).collect::<Vec<_>>(),
        "max_user_namespaces": probe::max_user_namespaces(),
        "legacy_tiocsti": findings.tiocsti,
        "command_limits": findings.limits.as_ref().ok(),
        "levels": findings.live.iter().map(|(level, outcome)| json!({
            "level": level,
            "enforced": outcome.is_ok(),
            "error": outcome.as_ref().err(),
        })).collect::<Vec<_>>(),
        "sandbox_enforced": findings.enforced,
    })
}

/// One object per check, each tagged `"type": "check"` with its `check`
/// name, then the verdict (`"type": "sandbox"`).
fn to_json_lines(findings: &Findings) -> Vec<serde_json::Value> {
    let mut lines = vec![
        json!({
            "type": "check", "check": "landlock",
            "abi": findings.landlock.as_ref().ok(),
            "error": findings.landlock.as_ref().err(),
            "required_abi": REQUIRED_LANDLOCK_ABI,
        }),
        json!({"type": "check", "check": "seccomp", "available": findings.seccomp}),
    ];
    lines.extend(findings.namespaces.iter().map(|(name, outcome)| {
        json!({
            "type": "check", "check": "namespace", "namespace": name,
            "available": outcome.is_ok(), "error": outcome.as_ref().err(),
        })
    }));
    lines.push(json!({
        "type": "check", "check": "max_user_namespaces",
        "value": probe::max_user_namespaces(),
    }));
    lines.push(json!({
        "type": "check", "check": "legacy_tiocsti", "value": findings.tiocsti,
    }));
    lines.push(json!({
        "type": "check", "check": "command_limits",
        "value": findings.limits.as_ref().ok(),
        "error": findings.limits.as_ref().err(),
    }));
    lines.extend(findings.live.iter().map(|(level, outcome)| {
        json!({
            "type": "check", "check": "level", "level": level,
            "enforced": outcome.is_ok(), "error": outcome.as_ref().err(),
        })
    }));
    lines.push(json!({"type": "sandbox", "sandbox_enforced": findings.enforced}));
    lines
}

fn report(findings: &Findings) {
    match &findings.landlock {
        Ok(abi) if *abi >= REQUIRED_LANDLOCK_ABI => say(format!(
            "landlock:        ABI {abi} (Keel needs {REQUIRED_LANDLOCK_ABI}): ok"
        )),
        Ok(abi) => say(format!(
            "landlock:        ABI {abi}: too old, Keel needs {REQUIRED_LANDLOCK_ABI} (Linux 6.7) to restrict TCP"
        )),
        Err(reason) => say(format!("landlock:        unavailable: {reason}")),
    }
    say(format!(
        "seccomp:         {} (refuses TIOCSTI/TIOCLINUX ioctls and x32 system calls)",
        if findings.seccomp {
            "available"
        } else {
            "unavailable"
        }
    ));
    for (name, outcome) in &findings.namespaces {
        match outcome {
            Ok(()) => say(format!("namespace {name:<7} ok")),
            Err(reason) => say(format!("namespace {name:<7} unavailable: {reason}")),
        }
    }
    say(format!(
        "terminal:        {} (sandboxed commands get no terminal: a new session, stdin from /dev/null)",
        match findings.tiocsti {
            Some(true) =>
                "the kernel lets any process push input with TIOCSTI (dev.tty.legacy_tiocsti = 1)",
            Some(false) =>
                "the kernel refuses TIOCSTI to unprivileged processes (dev.tty.legacy_tiocsti = 0)",
            None => "TIOCSTI setting unknown",
        }
    ));
    match &findings.limits {
        Ok(limits) => say(format!("command limits:  {limits}")),
        Err(reason) => say(format!("command limits:  unknown: {reason}")),
    }
    for (level, outcome) in &findings.live {
        match outcome {
            Ok(()) => say(format!(
                "sandbox {level}: enforced (a confined command just ran)"
            )),
            Err(reason) => say(format!("sandbox {level}: NOT enforceable: {reason}")),
        }
    }
    say("");
    say("what each mode does on this machine (read off the permission policy):");
    for mode in modes::MODES {
        say(format!("  {}", modes::describe(mode, findings.enforced)));
    }
    if !findings.enforced {
        say("");
        say(
            "to proceed: run on a kernel with Landlock ABI 4+ enabled where this user may create \
             user, mount, PID, network, IPC and UTS namespaces; inside an isolating container, \
             pass `--sandbox external`; or grant `--mode full` to run unsandboxed",
        );
    }
}
