//! The red team against Keel's command journal (issue 21): the `bash`
//! receipts a resumed run reads (`keel_tools::receipt`). Each attack runs
//! `keel` as a process and is judged by its effect — no secret in anything
//! the resume printed or recorded (what the model is sent is built from the
//! session), no file written outside, no process killed, no hang — never
//! only by an exit code.
//!
//! - A command plants a link where its next call's `.out` goes, in a
//!   session directory inside the workspace (`--session-dir` in the
//!   project, or the default data directory when the workspace is `$HOME`):
//!   Keel refuses such a session directory at start.
//! - Forged receipts in the journal (whoever planted them): an `.out` link
//!   to `~/.ssh/id_rsa` with a forged `.exit`; a `.started` whose `pid` is a
//!   live process and whose `pgid` is an unrelated group; an `.exit` that
//!   is a FIFO. `keel resume` reads none of them as Keel's.
//!
//! The allowed counterpart: a command that finished before the crash is
//! recovered from its receipt, its output intact.
#![allow(dead_code)]

use crate::common::{sleepers, wait_until};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::attacks::SSH_SECRET;

/// How long a `keel resume` may take before it counts as hung.
const HANG_BOUND: Duration = Duration::from_secs(60);

/// What the journal attacks found.
#[derive(Default)]
pub struct Outcome {
    pub tried: usize,
    pub blocked: usize,
    pub allowed: usize,
    pub allowed_ok: usize,
    pub failures: Vec<String>,
}

impl Outcome {
    fn attack(&mut self, name: &str, blocked: Result<(), String>) {
        self.tried += 1;
        match blocked {
            Ok(()) => self.blocked += 1,
            Err(why) => self
                .failures
                .push(format!("journal: {name} was NOT blocked: {why}")),
        }
    }

    fn allowed(&mut self, name: &str, succeeded: Result<(), String>) {
        self.allowed += 1;
        match succeeded {
            Ok(()) => self.allowed_ok += 1,
            Err(why) => self
                .failures
                .push(format!("journal: allowed `{name}` did not succeed: {why}")),
        }
    }
}

/// Runs every journal attack and the allowed counterpart.
pub fn run() -> Outcome {
    let mut outcome = Outcome::default();
    for (name, sessions_in) in [
        (
            "a link planted where the next receipt goes (--session-dir in the workspace)",
            SessionsIn::Workspace,
        ),
        (
            "a link planted where the next receipt goes (workspace = $HOME, default data dir)",
            SessionsIn::HomeWorkspace,
        ),
    ] {
        outcome.attack(name, planted_link(sessions_in));
    }
    outcome.attack(
        "forged .exit and an .out link to ~/.ssh/id_rsa",
        forged_output_link(),
    );
    outcome.attack(
        "a forged .started naming an unrelated process group",
        forged_started(),
    );
    outcome.attack("an .exit receipt that is a FIFO", fifo_receipt());
    outcome.allowed(
        "a receipt written and recovered normally",
        recovered_normally(),
    );
    outcome
}

/// One attacker's world: a workspace, a home holding an SSH key, and
/// Keel's sessions outside both (unless an attack puts them inside).
struct World {
    base: tempfile::TempDir,
    marker: String,
}

impl World {
    fn new() -> World {
        let base = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(base.path().join("ws")).unwrap();
        std::fs::create_dir_all(base.path().join("home/.ssh")).unwrap();
        std::fs::write(base.path().join("home/.ssh/id_rsa"), SSH_SECRET).unwrap();
        std::fs::write(base.path().join("victim.txt"), "the user's file\n").unwrap();
        // A `sleep` argument unique to this world, to find its command.
        let marker = format!(
            "77.{}{}",
            std::process::id() % 1000,
            base.path().to_string_lossy().len()
                + usize::try_from(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .subsec_nanos()
                        % 1000
                )
                .unwrap()
        );
        World { base, marker }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.base.path().join(relative)
    }

    fn script(&self, turns: Value) -> PathBuf {
        let path = self.path("script.json");
        std::fs::write(
            &path,
            json!({"by_history": true, "turns": turns}).to_string(),
        )
        .unwrap();
        path
    }

    /// `keel ARGS` with the world's home, data and no configuration (a run
    /// asking for JSON Lines).
    fn keel(&self, args: &[&str]) -> Command {
        let mut command = crate::common::keel_command();
        command
            .args(crate::common::with_stream_json(args))
            .env("HOME", self.path("home"))
            .env("XDG_DATA_HOME", self.path("data"))
            .env("XDG_CONFIG_HOME", "/nonexistent/keel-test-config")
            .env_remove("KEEL_FAILPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    fn sessions(&self) -> PathBuf {
        self.path("sessions")
    }

    /// A `keel run` in `auto` killed while its command sleeps: the session
    /// ends in a dangling `bash` call whose `.started` and `.out` exist.
    /// Returns the session id and its journal directory.
    fn killed_mid_command(&self, first: &str) -> (String, PathBuf) {
        let command = format!("{first}sleep {}", self.marker);
        let script = self.script(json!([
            {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": command}}]},
            {"content": [{"type": "text", "text": "done"}]}
        ]));
        let mut child = self
            .keel(&["run", "--mode", "auto", "--script"])
            .arg(&script)
            .arg("--workspace")
            .arg(self.path("ws"))
            .arg("--session-dir")
            .arg(self.sessions())
            .arg("go")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The command's output reaches its `.out` receipt through Keel's
        // reader, after the shell runs on to `sleep`: when `first` prints,
        // wait for it there too, or a loaded machine kills Keel before the
        // receipt holds it.
        let printed = !first.is_empty();
        assert!(
            wait_until(Duration::from_secs(30), || !sleepers(&self.marker)
                .is_empty()
                && (!printed || self.output_received())),
            "the command never started"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(wait_until(Duration::from_secs(10), || sleepers(
            &self.marker
        )
        .is_empty()));
        let file = std::fs::read_dir(self.sessions())
            .unwrap()
            .flatten()
            .map(|entry| entry.path())
            .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
            .expect("a session file");
        let id = file.file_stem().unwrap().to_str().unwrap().to_owned();
        let journal = self.sessions().join(format!("{id}.journal"));
        (id, journal)
    }

    /// Whether a session's journal holds a non-empty `.out` receipt.
    fn output_received(&self) -> bool {
        let Ok(entries) = std::fs::read_dir(self.sessions()) else {
            return false;
        };
        entries
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "journal"))
            .filter_map(|journal| std::fs::read_dir(journal).ok())
            .flat_map(|receipts| receipts.flatten())
            .any(|receipt| {
                receipt.path().extension().is_some_and(|ext| ext == "out")
                    && receipt.metadata().is_ok_and(|meta| meta.len() > 0)
            })
    }

    /// `keel resume ID`, bounded by [`HANG_BOUND`]: whether it ended, and
    /// everything it printed and recorded.
    fn resume(&self, id: &str) -> (bool, String) {
        let script = self.path("script.json");
        let mut child = self
            .keel(&["resume", id, "--mode", "auto", "--script"])
            .arg(&script)
            .arg("--workspace")
            .arg(self.path("ws"))
            .arg("--session-dir")
            .arg(self.sessions())
            .spawn()
            .unwrap();
        let ended = wait_child(&mut child, HANG_BOUND);
        let mut printed = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut printed)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut printed)
            .unwrap();
        printed.push_str(
            &std::fs::read_to_string(self.sessions().join(format!("{id}.jsonl"))).unwrap(),
        );
        (ended, printed)
    }
}

/// The one file of `dir` with this suffix.
fn receipt(dir: &Path, suffix: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == suffix))
        .unwrap_or_else(|| panic!("no .{suffix} receipt in {}", dir.display()))
}

/// The `.exit` path beside `started` (the same call's).
fn exit_beside(started: &Path) -> PathBuf {
    started.with_extension("exit")
}

/// A forged `.exit` claiming a success that printed nothing.
fn forged_exit(path: &Path) {
    let exit = json!({
        "ending": "exited", "exit_code": 0, "error": null,
        "output_path": "/forged", "output_bytes": 0, "ended_ms": 0
    });
    std::fs::write(path, exit.to_string()).unwrap();
}

/// Waits for `child` up to `limit`; kills it when it has not ended.
fn wait_child(child: &mut Child, limit: Duration) -> bool {
    let ended = wait_until(limit, || child.try_wait().unwrap().is_some());
    if !ended {
        let _ = child.kill();
        let _ = child.wait();
    }
    ended
}

enum SessionsIn {
    /// `--session-dir` inside the workspace.
    Workspace,
    /// The workspace is `$HOME`, the sessions in the default data directory.
    HomeWorkspace,
}

/// Turn 1's command links the `.out` of turn 2's call (its name is the
/// SHA-256 of the call id on older Keels) to a file outside the workspace;
/// turn 2's output would then overwrite it. Blocked: Keel refuses the
/// session directory at start, and the file is intact.
fn planted_link(sessions_in: SessionsIn) -> Result<(), String> {
    let world = World::new();
    let (workspace, sessions, home) = match sessions_in {
        SessionsIn::Workspace => {
            let ws = world.path("ws");
            (ws.clone(), Some(ws.join(".sessions")), world.path("home"))
        }
        SessionsIn::HomeWorkspace => (world.path("home"), None, world.path("home")),
    };
    let victim = world.path("victim.txt");
    // Python, so that `auto` runs it without asking (the shell analysis
    // would ask about `ln` with a target outside); the victim is beside the
    // workspace, the journal anywhere below it.
    let plant = "python3 -c \"import os,hashlib\nfor r,ds,fs in os.walk('.'):\n  for d in ds:\n    \
                 if d.endswith('.journal'): os.symlink(os.path.dirname(os.getcwd())+'/victim.txt', \
                 os.path.join(r,d,hashlib.sha256(b'call_next').hexdigest()+'.out'))\"";
    let script = world.script(json!([
        {"content": [{"type": "tool_call", "id": "call_plant", "name": "bash", "arguments": {"command": plant}}]},
        {"content": [{"type": "tool_call", "id": "call_next", "name": "bash", "arguments": {"command": "echo OVERWRITTEN"}}]},
        {"content": [{"type": "text", "text": "done"}]}
    ]));
    let mut command = world.keel(&["run", "--mode", "auto", "--script"]);
    command
        .arg(&script)
        .arg("--workspace")
        .arg(&workspace)
        .current_dir(&workspace);
    match &sessions {
        Some(sessions) => {
            command.arg("--session-dir").arg(sessions);
        }
        None => {
            command.env_remove("XDG_DATA_HOME").env("HOME", &home);
        }
    }
    let output = command.arg("go").output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let content = std::fs::read_to_string(&victim).unwrap_or_default();
    if content != "the user's file\n" {
        return Err(format!("the file outside now holds {content:?}: {printed}"));
    }
    if !printed.contains("session_dir_writable") {
        return Err(format!("the session directory was not refused: {printed}"));
    }
    Ok(())
}

/// The dangling call's `.out` becomes a link to `~/.ssh/id_rsa` and a
/// forged `.exit` claims it finished: the key must reach neither the
/// resumed run's output nor its session (what the model is sent).
fn forged_output_link() -> Result<(), String> {
    let world = World::new();
    let (id, journal) = world.killed_mid_command("echo partial; ");
    let out = receipt(&journal, "out");
    std::fs::remove_file(&out).unwrap();
    std::os::unix::fs::symlink(world.path("home/.ssh/id_rsa"), &out).unwrap();
    forged_exit(&exit_beside(&out));
    let (ended, printed) = world.resume(&id);
    if !ended {
        return Err("keel resume hung".into());
    }
    if printed.contains(SSH_SECRET) {
        return Err("the SSH key reached the resumed run".into());
    }
    if !printed.contains("journal_damaged") {
        return Err(format!("the damage was not reported: {printed}"));
    }
    Ok(())
}

/// An unsandboxed `sleep` in its own process group.
fn sleeper() -> Child {
    Command::new("sleep")
        .arg("300")
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A process's start time (`/proc/<pid>/stat` field 22).
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace()
        .nth(22 - 3)
        .unwrap()
        .parse()
        .unwrap()
}

/// A forged `.started` names a live process (start time right) as `pid`
/// and an unrelated process group as `pgid`: nothing may be killed.
fn forged_started() -> Result<(), String> {
    let world = World::new();
    let (id, journal) = world.killed_mid_command("");
    let mut victim = sleeper();
    let mut decoy = sleeper();
    let forged = json!({
        "pid": decoy.id(), "pgid": victim.id(),
        "start_time": start_time(decoy.id()), "started_ms": 0
    });
    std::fs::write(receipt(&journal, "started"), forged.to_string()).unwrap();
    let (ended, printed) = world.resume(&id);
    let victim_alive = victim.try_wait().unwrap().is_none();
    let decoy_alive = decoy.try_wait().unwrap().is_none();
    for child in [&mut victim, &mut decoy] {
        let _ = child.kill();
        let _ = child.wait();
    }
    if !ended {
        return Err("keel resume hung".into());
    }
    if !victim_alive || !decoy_alive {
        return Err(format!(
            "an unrelated process was killed (group leader alive: {victim_alive}, \
             named pid alive: {decoy_alive}): {printed}"
        ));
    }
    Ok(())
}

/// The dangling call's `.exit` is a FIFO nobody writes: `keel resume` must
/// end (reporting the damage), never wait on it holding the session lock.
fn fifo_receipt() -> Result<(), String> {
    let world = World::new();
    let (id, journal) = world.killed_mid_command("echo partial; ");
    let exit = exit_beside(&receipt(&journal, "started"));
    nix::unistd::mkfifo(&exit, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let (ended, printed) = world.resume(&id);
    if !ended {
        return Err(format!("keel resume hung for {HANG_BOUND:?} on the FIFO"));
    }
    if !printed.contains("journal_damaged") {
        return Err(format!("the damage was not reported: {printed}"));
    }
    Ok(())
}

/// A command that finished before the crash (the batch's second command
/// was still running) is recovered from its receipt, with its output.
fn recovered_normally() -> Result<(), String> {
    let world = World::new();
    let sleep = format!("sleep {}", world.marker);
    let script = world.script(json!([
        {"content": [
            {"type": "tool_call", "name": "bash", "arguments": {"command": "echo RECOVERED-OUTPUT; exit 0"}},
            {"type": "tool_call", "name": "bash", "arguments": {"command": sleep}}
        ]},
        {"content": [{"type": "text", "text": "done"}]}
    ]));
    let mut child = world
        .keel(&["run", "--mode", "auto", "--script"])
        .arg(&script)
        .arg("--workspace")
        .arg(world.path("ws"))
        .arg("--session-dir")
        .arg(world.sessions())
        .arg("go")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if !wait_until(Duration::from_secs(30), || {
        !sleepers(&world.marker).is_empty()
    }) {
        let _ = child.kill();
        let _ = child.wait();
        return Err("the second command never started".into());
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let id = std::fs::read_dir(world.sessions())
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .and_then(|path| Some(path.file_stem()?.to_str()?.to_owned()))
        .unwrap();
    let (ended, printed) = world.resume(&id);
    if !ended {
        return Err("keel resume hung".into());
    }
    let recovered = printed.lines().any(|line| {
        serde_json::from_str::<Value>(line).is_ok_and(|value| {
            value.pointer("/r/entry/action") == Some(&json!("recovered_from_receipt"))
        })
    });
    if !recovered || !printed.contains("RECOVERED-OUTPUT") || printed.contains("journal_damaged") {
        return Err(format!("the finished command was not recovered: {printed}"));
    }
    Ok(())
}
