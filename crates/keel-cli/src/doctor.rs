//! `keel doctor`: what this machine can enforce, and what each mode does here.
//!
//! It asks the kernel for its Landlock ABI, checks seccomp and user
//! namespaces, then proves the sandbox by running a confined `/bin/sh -c
//! true` at each level in a scratch workspace, so "enforced" below means
//! "was just applied", not "the parts seem present". Exit code 0 when the
//! sandbox works, 1 when sandboxed commands would fail closed.

use std::process::ExitCode;

use keel_host::modes;
use keel_tools::sandbox::probe::{self, LEVELS};
use keel_tools::sandbox::{REQUIRED_LANDLOCK_ABI, Sandbox, SandboxConfig};
use serde_json::json;

use crate::output::say;
use crate::startup::StartupError;

pub fn run(json_output: bool) -> Result<ExitCode, StartupError> {
    let landlock = probe::landlock_abi();
    let seccomp = probe::seccomp_available();
    let namespaces = probe::max_user_namespaces();
    let scratch = tempfile::Builder::new()
        .prefix("keel-doctor-")
        .tempdir()
        .map_err(|error| StartupError::new("workspace", error.to_string()))?;
    let live: Vec<(&str, Result<(), String>)> = LEVELS
        .iter()
        .map(|&level| {
            let sandbox = Sandbox {
                level,
                config: std::sync::Arc::new(SandboxConfig::default()),
            };
            (level.as_str(), probe::try_level(&sandbox, scratch.path()))
        })
        .collect();
    let enforced = live.iter().all(|(_, outcome)| outcome.is_ok());
    if json_output {
        say(json!({
            "landlock_abi": landlock.as_ref().ok(),
            "landlock_error": landlock.as_ref().err(),
            "landlock_required_abi": REQUIRED_LANDLOCK_ABI,
            "seccomp": seccomp,
            "max_user_namespaces": namespaces,
            "levels": live.iter().map(|(level, outcome)| json!({
                "level": level,
                "enforced": outcome.is_ok(),
                "error": outcome.as_ref().err(),
            })).collect::<Vec<_>>(),
            "sandbox_enforced": enforced,
        }));
    } else {
        report(&landlock, seccomp, namespaces, &live, enforced);
    }
    Ok(if enforced {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn report(
    landlock: &Result<i32, String>,
    seccomp: bool,
    namespaces: Option<u64>,
    live: &[(&str, Result<(), String>)],
    enforced: bool,
) {
    match landlock {
        Ok(abi) if *abi >= REQUIRED_LANDLOCK_ABI => say(format!(
            "landlock:        ABI {abi} (Keel needs {REQUIRED_LANDLOCK_ABI}): ok"
        )),
        Ok(abi) => say(format!(
            "landlock:        ABI {abi}: too old, Keel needs {REQUIRED_LANDLOCK_ABI} (Linux 6.7) to restrict TCP"
        )),
        Err(reason) => say(format!("landlock:        unavailable: {reason}")),
    }
    say(format!(
        "seccomp:         {}",
        if seccomp { "available" } else { "unavailable" }
    ));
    say(format!(
        "user namespaces: {} (Keel does not need them)",
        namespaces.map_or("unknown".to_owned(), |max| format!("up to {max}"))
    ));
    for (level, outcome) in live {
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
        say(format!("  {}", modes::describe(mode, enforced)));
    }
    if !enforced {
        say("");
        say(
            "to proceed: run on a kernel with Landlock ABI 4+ enabled; inside an isolating container, \
             pass `--sandbox external`; or grant `--mode full` to run unsandboxed",
        );
    }
}
