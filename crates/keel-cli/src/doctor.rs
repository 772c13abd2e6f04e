//! `keel doctor`: what this machine can enforce, and what each mode does here.
//!
//! It asks the kernel for its Landlock ABI, checks seccomp, tries to create
//! each namespace the sandbox uses, reads the terminal-injection setting,
//! then proves the sandbox by running a confined `/bin/sh` at each level in
//! a scratch workspace (which also reports the limits a command gets), so
//! "enforced" below means "was just applied", not "the parts seem present".
//! It also reads the configuration as `keel run` would (config.toml,
//! `--profile`, `-c`, the project layer of the current directory), names
//! the provider and model it chooses and whether that provider's key
//! variable is set, and with `--network` whether its base URL answers.
//! Exit code 0 when the sandbox works and the configuration is usable, 1
//! when sandboxed commands would fail closed, the configuration does not
//! load, the chosen provider's key is missing or (with `--network`) its
//! server does not answer. Readable lines by default (`--output-format
//! text`), one JSON object with `json`, one JSON line per check with
//! `stream-json`.

use std::process::ExitCode;

use keel_host::modes;
use keel_tools::sandbox::probe::{self, LEVELS};
use keel_tools::sandbox::{REQUIRED_LANDLOCK_ABI, Sandbox};
use serde_json::json;

use crate::args::{DataFormat, DoctorArgs};
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
    config: ConfigFindings,
}

/// What the doctor found of the configuration.
#[derive(Default)]
struct ConfigFindings {
    /// The user's file, when there is one to read.
    path: Option<String>,
    /// Why the configuration does not load.
    error: Option<String>,
    /// The provider it chooses, with its model (`None`: the provider's
    /// default).
    provider: Option<(String, Option<String>)>,
    /// The chosen provider's key variable, and whether it is set (`None`:
    /// the provider needs no key).
    key: Option<(String, bool)>,
    /// With `--network`: the base URL and whether (with which status) it
    /// answered.
    network: Option<(String, Result<u16, String>)>,
    /// The permission rules in force after every layer.
    permissions: keel_protocol::PermissionRuleLists,
    /// What the layers could not do (a project's `allow` rules, …).
    warnings: Vec<String>,
}

impl ConfigFindings {
    /// Whether a run with this configuration can start.
    fn usable(&self) -> bool {
        self.error.is_none()
            && self.key.as_ref().is_none_or(|(_, set)| *set)
            && self
                .network
                .as_ref()
                .is_none_or(|(_, answered)| answered.is_ok())
    }
}

/// Reads the configuration as `keel run` would and checks the provider it
/// chooses.
async fn check_config(args: &DoctorArgs) -> ConfigFindings {
    let mut findings = ConfigFindings {
        path: args
            .settings
            .config
            .clone()
            .or_else(keel_host::user_config_path)
            .filter(|path| args.settings.config.is_some() || path.exists())
            .map(|path| path.display().to_string()),
        ..ConfigFindings::default()
    };
    let mut sources = args.settings.sources();
    sources.workspace = std::env::current_dir().ok();
    let settings = match keel_host::Settings::load(&sources) {
        Ok(settings) => settings,
        Err(error) => {
            findings.error = Some(format!("{error} [{}]", error.code()));
            return findings;
        }
    };
    findings.permissions = settings
        .defaults
        .permissions
        .as_ref()
        .map(keel_host::Permissions::lists)
        .unwrap_or_default();
    findings.warnings = settings
        .warnings
        .iter()
        .map(|warning| {
            format!(
                "{} [{}]",
                crate::escape::one_line(&warning.message),
                warning.code
            )
        })
        .collect();
    let Some(name) = settings.defaults.provider.clone() else {
        return findings;
    };
    findings.provider = Some((name.clone(), settings.defaults.model.clone()));
    let Some(provider) = settings.catalog.providers.get(&name) else {
        if name != "scripted" {
            findings.error = Some(format!(
                "provider `{name}` is not configured (`keel models` lists the known ones)"
            ));
        }
        return findings;
    };
    findings.key = provider.api_key_env.as_ref().map(|variable| {
        let set = std::env::var_os(variable).is_some_and(|value| !value.is_empty());
        (variable.clone(), set)
    });
    if args.network
        && let Some(url) = &provider.base_url
    {
        let answered =
            keel_provider::endpoint::answers(url, std::time::Duration::from_secs(10)).await;
        findings.network = Some((url.clone(), answered));
    }
    findings
}

pub async fn run(args: DoctorArgs) -> Result<ExitCode, StartupError> {
    let format = args.format.data();
    let config = check_config(&args).await;
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
        config,
    };
    match format {
        DataFormat::Text => report(&findings),
        DataFormat::Json => say(to_json(&findings)),
        DataFormat::StreamJson => to_json_lines(&findings).into_iter().for_each(say),
    }
    Ok(if findings.enforced && findings.config.usable() {
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
        "config": config_json(&findings.config),
    })
}

fn config_json(config: &ConfigFindings) -> serde_json::Value {
    json!({
        "path": config.path,
        "error": config.error,
        "provider": config.provider.as_ref().map(|(name, _)| name),
        "model": config.provider.as_ref().and_then(|(_, model)| model.as_ref()),
        "api_key_env": config.key.as_ref().map(|(variable, _)| variable),
        "api_key_set": config.key.as_ref().map(|(_, set)| set),
        "base_url": config.network.as_ref().map(|(url, _)| url),
        "answered_status": config.network.as_ref().and_then(|(_, answered)| answered.as_ref().ok()),
        "network_error": config.network.as_ref().and_then(|(_, answered)| answered.as_ref().err()),
        "permissions": {
            "allow": config.permissions.allow,
            "ask": config.permissions.ask,
            "deny": config.permissions.deny,
        },
        "warnings": config.warnings,
        "usable": config.usable(),
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
    let mut config = config_json(&findings.config);
    config["type"] = json!("config");
    lines.push(config);
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
    report_config(&findings.config);
    if !findings.enforced {
        say("");
        say(
            "to proceed: run on a kernel with Landlock ABI 4+ enabled where this user may create \
             user, mount, PID, network, IPC and UTS namespaces; inside an isolating container, \
             pass `--sandbox external`; or grant `--mode full` to run unsandboxed",
        );
    }
}

fn report_config(config: &ConfigFindings) {
    say("");
    match &config.path {
        Some(path) => say(format!("config:          {path}")),
        None => say("config:          none (built-in defaults)"),
    }
    if let Some(error) = &config.error {
        say(format!("config:          does not load: {error}"));
        return;
    }
    for warning in &config.warnings {
        say(format!("config warning:  {warning}"));
    }
    let rules = &config.permissions;
    if rules.is_empty() {
        say("permissions:     no rules (`[permissions]` allow, ask, deny)");
    }
    for (list, rules) in [
        ("allow", &rules.allow),
        ("ask", &rules.ask),
        ("deny", &rules.deny),
    ] {
        for (index, rule) in rules.iter().enumerate() {
            say(format!("permissions:     {list}[{index}] {rule:?}"));
        }
    }
    match &config.provider {
        None => say(
            "provider:        none chosen (`keel run` needs --provider, or `provider` in \
             config.toml)",
        ),
        Some((name, model)) => say(format!(
            "provider:        {name}, model {}",
            model.as_deref().unwrap_or("(the provider's default)")
        )),
    }
    match &config.key {
        None if config.provider.is_some() => say("key:             none needed"),
        None => {}
        Some((variable, true)) => say(format!("key:             {variable} is set")),
        Some((variable, false)) => say(format!(
            "key:             {variable} is NOT set: export it before `keel run`"
        )),
    }
    match &config.network {
        None => {}
        Some((url, Ok(status))) => say(format!("network:         {url} answers (HTTP {status})")),
        Some((url, Err(reason))) => {
            say(format!("network:         {url} does NOT answer: {reason}"))
        }
    }
}
