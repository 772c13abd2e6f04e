//! Command hooks: `[[hooks]]` in the user's `config.toml`, programs the
//! user wrote that Keel runs at hook points, as Claude Code users write
//! them.
//!
//! ```toml
//! [[hooks]]
//! event = "tool_call"          # a hook point (docs/extensions.md)
//! matcher = "write|edit"       # tool names, at tool_call and tool_result
//! command = ["/home/me/bin/guard", "--strict"]
//! timeout_sec = 5              # default 30, at most 600
//! fail_closed = true           # block when the hook fails (default false)
//! ```
//!
//! The command gets the event as one JSON object on stdin (`point`,
//! `run_id`, `session_id`, `cwd` and the point's payload) and answers on
//! stdout with one JSON object: `{"outcome": "allow"}` (or nothing at
//! all), `{"outcome": "block", "message": "…", "code": "…"}`,
//! `{"outcome": "transform", "value": …}` or `{"outcome": "supplement",
//! "text": "…"}`. Exit status 2 blocks too, with the first line of its
//! stderr as the message; any other failure (another status, bad JSON, the
//! timeout) is a failed hook.
//!
//! Invariants: hooks are the user's own code, so they come only from the
//! user's file — the project layer cannot add one (the key is dropped with
//! a `project_key_ignored` warning, [`crate::project`]). A hook runs as
//! the user with the allowlisted environment commands get
//! (keel-sandbox's `env::child_env` of the host's snapshot), the workspace
//! as working directory, null stdin after its payload, in a process group
//! of its own that is killed whole at its timeout or when the run stops
//! waiting. Its stdout is read up to 1 MiB; nothing it prints is logged.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use keel_kernel::extension::{HookError, HookEvent, HookFuture, HookHandler, HookReply};
use keel_kernel::{Extension, Hook, HookPoint};
use keel_tools::env::{HostEnv, child_env};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::HostError;
use crate::settings::invalid;

/// The extension name command hooks are registered under.
pub const EXTENSION_NAME: &str = "config-hooks";

/// A hook's time budget unless it sets `timeout_sec`.
const DEFAULT_TIMEOUT_SEC: u64 = 30;
/// The longest `timeout_sec`.
const MAX_TIMEOUT_SEC: u64 = 600;
/// The most of a hook's stdout that is read.
const MAX_STDOUT: u64 = 1024 * 1024;

/// One `[[hooks]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct CommandHookSettings {
    /// The hook point's name (`tool_call`, `tool_result`, `input`, …).
    pub event: String,
    /// Tool names (`|`-separated, `*` wildcards) at `tool_call` and
    /// `tool_result`; every tool when absent.
    pub matcher: Option<String>,
    /// The program and its arguments (no shell).
    pub command: Vec<String>,
    /// The hook's budget in seconds (default 30, at most 600).
    pub timeout_sec: Option<u64>,
    /// Whether a failed hook blocks instead of being ignored.
    #[serde(default)]
    pub fail_closed: bool,
}

impl CommandHookSettings {
    /// Reads the `hooks` array of tables, checking each.
    pub(crate) fn from_value(value: toml::Value, place: &str) -> Result<Vec<Self>, HostError> {
        let place = format!("{place}, [[hooks]]");
        let hooks: Vec<Self> = value
            .try_into()
            .map_err(|error: toml::de::Error| invalid(&place, error.message()))?;
        for (index, hook) in hooks.iter().enumerate() {
            hook.check(&format!("{place} #{}", index + 1))?;
        }
        Ok(hooks)
    }

    fn check(&self, place: &str) -> Result<(), HostError> {
        if HookPoint::parse(&self.event).is_none() {
            let known: Vec<&str> = HookPoint::ALL.iter().map(|point| point.as_str()).collect();
            return Err(invalid(
                place,
                &format!("`event` must be one of {}", known.join(", ")),
            ));
        }
        let Some(program) = self.command.first().filter(|program| !program.is_empty()) else {
            return Err(invalid(
                place,
                "`command` must name a program: [\"program\", \"arg\", …]",
            ));
        };
        // A relative path would resolve in the workspace, which the
        // repository (and the model) controls.
        if program.contains('/') && !program.starts_with('/') && !program.starts_with("~/") {
            return Err(invalid(
                place,
                "`command`'s program must be an absolute path, one under ~/, or a name \
                 looked up on PATH — never relative to the workspace",
            ));
        }
        if let Some(point) = HookPoint::parse(&self.event)
            && self.fail_closed
            && !point.allows(keel_protocol::HookOutcomeKind::Block)
        {
            return Err(invalid(
                place,
                &format!(
                    "`fail_closed` has no effect at `{}`, which cannot block",
                    point.as_str()
                ),
            ));
        }
        if let Some(seconds) = self.timeout_sec
            && !(1..=MAX_TIMEOUT_SEC).contains(&seconds)
        {
            return Err(invalid(
                place,
                &format!("`timeout_sec` must be from 1 to {MAX_TIMEOUT_SEC}"),
            ));
        }
        Ok(())
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_sec.unwrap_or(DEFAULT_TIMEOUT_SEC))
    }
}

/// The extension that runs `hooks` in `workspace` with the allowlisted part
/// of `env`; `None` when there are none.
pub fn extension(
    hooks: &[CommandHookSettings],
    workspace: &Path,
    env: &HostEnv,
) -> Option<Extension> {
    if hooks.is_empty() {
        return None;
    }
    let env = child_env(env, &[]);
    let mut extension = Extension::new(EXTENSION_NAME);
    for settings in hooks {
        let Some(point) = HookPoint::parse(&settings.event) else {
            // Checked when the settings were read.
            continue;
        };
        let mut command = settings.command.clone();
        if let Some(program) = command.first_mut() {
            *program = crate::settings::expand_home(Path::new(program))
                .display()
                .to_string();
        }
        let handler = CommandHook {
            command,
            cwd: workspace.to_path_buf(),
            env: env.clone(),
            timeout: settings.timeout(),
        };
        // The kernel's budget is a little longer than the hook's own, so a
        // hook that runs out reports its own timeout, not the kernel's.
        let mut hook = Hook::new([point], Arc::new(handler))
            .timeout(settings.timeout() + Duration::from_secs(1))
            .fail_closed(settings.fail_closed);
        if let Some(matcher) = &settings.matcher {
            hook = hook.matching(matcher);
        }
        extension = extension.hook(hook);
    }
    Some(extension)
}

/// One command hook.
struct CommandHook {
    command: Vec<String>,
    cwd: PathBuf,
    env: Vec<(String, String)>,
    timeout: Duration,
}

/// What a hook answers on stdout.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    outcome: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    value: Option<Value>,
    #[serde(default)]
    text: Option<String>,
}

impl HookHandler for CommandHook {
    fn handle(&self, event: HookEvent) -> HookFuture<'_> {
        Box::pin(async move {
            let mut input = match event.payload {
                Value::Object(map) => map,
                other => {
                    let mut map = serde_json::Map::new();
                    map.insert("payload".into(), other);
                    map
                }
            };
            input.insert("point".into(), Value::from(event.point.as_str()));
            input.insert("run_id".into(), Value::from(event.run_id));
            input.insert("session_id".into(), Value::from(event.session_id));
            input.insert("cwd".into(), Value::from(self.cwd.display().to_string()));
            let input = serde_json::to_vec(&Value::Object(input)).map_err(|error| {
                HookError::new(format!("the event could not be encoded: {error}"))
            })?;
            let (status, stdout, stderr) = self.run(&input).await?;
            answer(status, &stdout, &stderr)
        })
    }
}

impl CommandHook {
    /// Runs the command with `input` on stdin: its exit status, stdout and
    /// stderr, or why it could not run or finish.
    async fn run(&self, input: &[u8]) -> Result<(i32, Vec<u8>, Vec<u8>), HookError> {
        let program = &self.command[0];
        let mut child = tokio::process::Command::new(program)
            .args(&self.command[1..])
            .env_clear()
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .current_dir(&self.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| HookError::new(format!("`{program}` could not start: {error}")))?;
        // The whole group dies with this call, however it ends.
        let group = child.id().map(KillGroup);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let work = async {
            let feed = async move {
                if let Some(mut pipe) = stdin {
                    // A hook that does not read its input closes the pipe
                    // (or dies) early: that is its business.
                    let _ = pipe.write_all(input).await;
                }
            };
            let read_out = async move {
                let mut out = Vec::new();
                if let Some(pipe) = stdout {
                    let _ = pipe.take(MAX_STDOUT).read_to_end(&mut out).await;
                }
                out
            };
            let read_err = async move {
                let mut err = Vec::new();
                if let Some(pipe) = stderr {
                    let _ = pipe.take(64 * 1024).read_to_end(&mut err).await;
                }
                err
            };
            let exit = async {
                let status = child.wait().await;
                // The hook has answered. What it left running goes now —
                // which also closes the pipes such a child still holds, so
                // the reads above end with what the hook wrote.
                if let Some(group) = &group {
                    group.kill();
                }
                status
            };
            let ((), out, err, status) = tokio::join!(feed, read_out, read_err, exit);
            (status, out, err)
        };
        let (status, out, err) = match tokio::time::timeout(self.timeout, work).await {
            Ok(done) => done,
            Err(_) => {
                drop(group);
                return Err(HookError::new(format!(
                    "`{program}` did not finish within its {} s timeout and was killed",
                    self.timeout.as_secs()
                )));
            }
        };
        drop(group);
        let status = status.map_err(|error| {
            HookError::new(format!("`{program}` could not be waited for: {error}"))
        })?;
        // Killed by a signal: no code.
        Ok((status.code().unwrap_or(-1), out, err))
    }
}

/// A hook's process group, killed when dropped.
struct KillGroup(u32);

impl KillGroup {
    fn kill(&self) {
        if let Ok(pid) = i32::try_from(self.0) {
            // The group may be gone already; nothing else to do then.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for KillGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `text`'s first `max` characters.
fn capped(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// The reply a hook's exit status and output make.
fn answer(status: i32, stdout: &[u8], stderr: &[u8]) -> Result<HookReply, HookError> {
    match status {
        0 => {}
        2 => {
            // The hook's own words: the first line of its stderr, capped.
            let reason = String::from_utf8_lossy(stderr);
            let reason = reason.lines().next().unwrap_or("").trim();
            let reason: String = reason.chars().take(500).collect();
            let message = match reason.is_empty() {
                true => "blocked by a command hook".to_owned(),
                false => reason,
            };
            return Ok(HookReply::block("command_hook", message));
        }
        code => {
            return Err(HookError::new(format!(
                "the hook exited with status {code}"
            )));
        }
    }
    let text = String::from_utf8_lossy(stdout);
    if text.trim().is_empty() {
        return Ok(HookReply::observe());
    }
    // Never quoted back: the output may hold anything.
    let answer: Answer = serde_json::from_str(text.trim()).map_err(|error| {
        HookError::new(format!(
            "its stdout is not the JSON answer it must be (line {}, column {})",
            error.line(),
            error.column()
        ))
    })?;
    match answer.outcome.as_str() {
        "allow" | "observe" => Ok(HookReply::observe()),
        "block" => Ok(HookReply::block(
            capped(answer.code.as_deref().unwrap_or("command_hook"), 64),
            capped(
                answer
                    .message
                    .as_deref()
                    .unwrap_or("blocked by a command hook"),
                500,
            ),
        )),
        "transform" => match answer.value {
            Some(value) => Ok(HookReply::transform(value)),
            None => Err(HookError::new("a transform answer needs a `value`")),
        },
        "supplement" => match answer.text {
            Some(text) => Ok(HookReply::supplement(text)),
            None => Err(HookError::new("a supplement answer needs a `text`")),
        },
        _ => Err(HookError::new(
            "its `outcome` must be allow, block, transform or supplement",
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use keel_kernel::HookOutcome;

    #[test]
    fn answers_map_to_replies_and_bad_ones_are_failures() {
        assert_eq!(answer(0, b"", b"").unwrap(), HookReply::observe());
        assert_eq!(
            answer(0, br#"{"outcome":"allow"}"#, b"").unwrap(),
            HookReply::observe()
        );
        let blocked = answer(0, br#"{"outcome":"block","message":"no"}"#, b"").unwrap();
        assert!(matches!(blocked.outcome, HookOutcome::Block { message, .. } if message == "no"));
        let blocked = answer(2, b"", b"protected path\nmore").unwrap();
        assert!(
            matches!(blocked.outcome, HookOutcome::Block { message, .. } if message == "protected path")
        );
        assert!(answer(1, b"", b"").is_err());
        let error = answer(0, b"{\"outcome\": \"secret-token-123", b"").unwrap_err();
        assert!(!error.to_string().contains("secret-token-123"));
        assert!(answer(0, br#"{"outcome":"transform"}"#, b"").is_err());
        assert!(answer(0, br#"{"outcome":"maybe"}"#, b"").is_err());
    }

    #[test]
    fn settings_are_checked() {
        let read = |text: &str| {
            let table: toml::Table = toml::from_str(text).unwrap();
            CommandHookSettings::from_value(table["hooks"].clone(), "config.toml")
        };
        assert!(read("[[hooks]]\nevent = \"tool_call\"\ncommand = [\"true\"]").is_ok());
        let error = read("[[hooks]]\nevent = \"PreToolUse\"\ncommand = [\"true\"]").unwrap_err();
        assert!(
            error.to_string().contains("`event` must be one of"),
            "{error}"
        );
        assert!(read("[[hooks]]\nevent = \"tool_call\"\ncommand = []").is_err());
        assert!(
            read("[[hooks]]\nevent = \"tool_call\"\ncommand = [\"true\"]\ntimeout_sec = 0")
                .is_err()
        );
        assert!(
            read("[[hooks]]\nevent = \"tool_call\"\ncommand = [\"true\"]\nshell = true").is_err()
        );
        let relative =
            read("[[hooks]]\nevent = \"tool_call\"\ncommand = [\"tools/guard.sh\"]").unwrap_err();
        assert!(
            relative.to_string().contains("never relative"),
            "{relative}"
        );
        assert!(read("[[hooks]]\nevent = \"tool_call\"\ncommand = [\"~/bin/guard\"]").is_ok());
        assert!(read("[[hooks]]\nevent = \"tool_call\"\ncommand = [\"/bin/guard\"]").is_ok());
        let useless =
            read("[[hooks]]\nevent = \"run_end\"\ncommand = [\"true\"]\nfail_closed = true")
                .unwrap_err();
        assert!(useless.to_string().contains("cannot block"), "{useless}");
    }
}
