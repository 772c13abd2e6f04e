//! "Always" approvals and repository code through `keel run` as a process
//! (issue 21):
//!
//! - an answer with scope `always` binds to what its target resolved to:
//!   after a sandboxed command re-points the workspace symlink the approved
//!   command went through, the identical command is asked about again and
//!   the secret behind the new target never reaches the output, while the
//!   unchanged target is still decided by the rule; re-pointed while the
//!   host decides, the approved call does not run; the same holds for a
//!   `~/…` path, expanded with the `HOME` the command gets;
//! - a session holding such a rule can be continued (`keel run --session`);
//! - a command that plants git code — `git init` in a new directory with a
//!   hook (approved), a `.git` file naming a directory given
//!   `core.fsmonitor` with python — yields a `warning` event naming it, and
//!   the run's `workspace_changes` lists it under `git_code`; the unapproved
//!   new `.git` file is moved aside (quarantined), and writing
//!   `core.fsmonitor` into an existing nested repository with python fails
//!   (the sandbox keeps its `.git` read-only).
//!
//! Permission requests are answered on stdin (`--input-format stream-json`)
//! by the request id the test reads from the event stream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod live;

use std::path::{Path, PathBuf};

use live::{Live, command};
use serde_json::{Value, json};

const AWS_SECRET: &str = "AKIA-KEEL-APPROVALS-SECRET";

fn script(dir: &Path, name: &str, turns: Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, json!({ "turns": turns }).to_string()).unwrap();
    path.display().to_string()
}

fn call(tool: &str, arguments: Value) -> Value {
    json!({"content": [{"type": "tool_call", "name": tool, "arguments": arguments}]})
}

fn bash(command: &str) -> Value {
    call("bash", json!({ "command": command }))
}

fn done() -> Value {
    json!({"content": [{"type": "text", "text": "done"}]})
}

fn answer(request: &Value, decision: &str, scope: &str) -> String {
    json!({
        "type": "permission_answer",
        "request_id": request["request_id"],
        "decision": decision,
        "scope": scope,
    })
    .to_string()
}

/// A workspace `ws` beside an approved directory and a fake home holding
/// an AWS credential; `ws/link` points at the approved directory.
struct World {
    base: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let base = tempfile::tempdir().unwrap();
        let root = base.path();
        for dir in ["ws", "approved", "home/.aws", "data"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("approved/credentials"), "harmless\n").unwrap();
        std::fs::write(
            root.join("home/.aws/credentials"),
            format!("[default]\naws_secret_access_key = {AWS_SECRET}\n"),
        )
        .unwrap();
        std::os::unix::fs::symlink(root.join("approved"), root.join("ws/link")).unwrap();
        World { base }
    }

    fn root(&self) -> &Path {
        self.base.path()
    }

    fn ws(&self) -> PathBuf {
        self.root().join("ws")
    }

    /// `keel run` in `mode` with stream-json input and output.
    fn keel(&self, mode: &str, script: &str, session: Option<&str>) -> Live {
        self.keel_at_home(mode, script, session, &self.root().join("home"))
    }

    /// As [`World::keel`], with `HOME` set to `home`.
    fn keel_at_home(&self, mode: &str, script: &str, session: Option<&str>, home: &Path) -> Live {
        let mut keel = command(&self.root().join("data"));
        keel.args(["run", "--input-format", "stream-json"])
            .args(["--output-format", "stream-json", "--mode", mode])
            .args(["--provider", "scripted", "--script", script])
            .arg("--workspace")
            .arg(self.ws())
            .env("HOME", home)
            .env("GIT_CONFIG_NOSYSTEM", "1");
        if let Some(session) = session {
            keel.args(["--session", session]);
        }
        // python3 lives in the real home's toolchains on these machines.
        let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
        for dir in [".pyenv", ".local/bin", ".local/lib"] {
            if home.join(dir).exists() {
                keel.arg("--sandbox-read").arg(home.join(dir));
            }
        }
        keel.arg("go");
        Live::start(keel)
    }
}

/// The next permission request or call end, whichever comes first.
fn next_step(live: &mut Live) -> Value {
    live.wait_for("a permission request or a call's end", |value| {
        value["type"] == "permission_requested" || value["type"] == "tool_execution_end"
    })
}

#[test]
fn an_always_answer_never_follows_a_repointed_symlink() {
    let world = World::new();
    let read = "cat link/credentials";
    // Written as a script and run, the re-pointing is plain shell inside the
    // workspace to the analysis: it runs sandboxed in `auto` without asking.
    let repoint = format!(
        "printf '%s\\n' 'ln -sfn {}/home/.aws link' > s.sh && bash s.sh",
        world.root().display()
    );
    let script = script(
        world.root(),
        "script.json",
        json!([bash(read), bash(read), bash(&repoint), bash(read), done()]),
    );
    let mut live = world.keel("auto", &script, None);
    let request = live.event("permission_requested");
    assert!(
        request["reason"].as_str().unwrap().contains("outside"),
        "{request}"
    );
    live.send(&answer(&request, "approve", "always"));
    let first = live.event("tool_execution_end");
    assert!(first.to_string().contains("harmless"), "{first}");
    // The same target: the rule decides without asking.
    let second = next_step(&mut live);
    assert_eq!(second["type"], "tool_execution_end", "{second}");
    assert!(second.to_string().contains("harmless"), "{second}");
    let third = next_step(&mut live);
    assert_eq!(
        third["type"], "tool_execution_end",
        "re-pointing ran sandboxed: {third}"
    );
    assert_eq!(third["result"]["status"], "success", "{third}");
    // The identical text now resolves into the home directory: asked again.
    let again = next_step(&mut live);
    assert_eq!(
        again["type"], "permission_requested",
        "asked again: {again}"
    );
    assert!(
        again["reason"]
            .as_str()
            .unwrap()
            .contains("resolves differently now"),
        "{again}"
    );
    live.send(&answer(&again, "deny", "once"));
    let result = live.result();
    assert_eq!(result["state"], "settled", "{result}");
    let (code, stderr, seen) = live.finish();
    assert_eq!(code, 0, "{stderr}");
    let printed = serde_json::to_string(&seen).unwrap();
    assert!(
        !printed.contains(AWS_SECRET),
        "the secret leaked: {printed}"
    );
    assert!(!stderr.contains(AWS_SECRET));
}

#[test]
fn an_always_answer_for_a_home_path_never_follows_a_repointed_symlink() {
    // The workspace lies under HOME, as it usually does: `~/ws/link` is the
    // workspace symlink, named through `~`.
    let world = World::new();
    let read = "cat ~/ws/link/credentials";
    let repoint = format!(
        "printf '%s\\n' 'ln -sfn {}/home/.aws link' > s.sh && bash s.sh",
        world.root().display()
    );
    let script = script(
        world.root(),
        "script.json",
        json!([bash(read), bash(read), bash(&repoint), bash(read), done()]),
    );
    let mut live = world.keel_at_home("auto", &script, None, world.root());
    let request = live.event("permission_requested");
    assert!(
        request["reason"]
            .as_str()
            .unwrap()
            .contains("home directory"),
        "{request}"
    );
    live.send(&answer(&request, "approve", "always"));
    let first = live.event("tool_execution_end");
    assert!(first.to_string().contains("harmless"), "{first}");
    // The same target: the rule decides without asking.
    let second = next_step(&mut live);
    assert_eq!(second["type"], "tool_execution_end", "{second}");
    assert!(second.to_string().contains("harmless"), "{second}");
    let third = next_step(&mut live);
    assert_eq!(third["type"], "tool_execution_end", "{third}");
    assert_eq!(third["result"]["status"], "success", "{third}");
    // The identical `~/…` text now resolves into `.aws`: asked again.
    let again = next_step(&mut live);
    assert_eq!(
        again["type"], "permission_requested",
        "asked again: {again}"
    );
    assert!(
        again["reason"]
            .as_str()
            .unwrap()
            .contains("resolves differently now"),
        "{again}"
    );
    live.send(&answer(&again, "deny", "once"));
    let result = live.result();
    assert_eq!(result["state"], "settled", "{result}");
    let (code, stderr, seen) = live.finish();
    assert_eq!(code, 0, "{stderr}");
    let printed = serde_json::to_string(&seen).unwrap();
    assert!(
        !printed.contains(AWS_SECRET),
        "the secret leaked: {printed}"
    );
    assert!(!stderr.contains(AWS_SECRET));
}

#[test]
fn a_session_with_an_always_rule_can_be_continued_and_the_rule_still_holds() {
    let world = World::new();
    let write = |content: &str| call("write", json!({"path": "notes.txt", "content": content}));
    let first = script(world.root(), "first.json", json!([write("one\n"), done()]));
    let mut live = world.keel("ask", &first, None);
    let request = live.event("permission_requested");
    live.send(&answer(&request, "approve", "always"));
    let result = live.result();
    assert_eq!(result["state"], "settled", "{result}");
    let session = result["session_id"].as_str().unwrap().to_owned();
    let (code, stderr, _) = live.finish();
    assert_eq!(code, 0, "{stderr}");
    let second = script(world.root(), "second.json", json!([write("two\n"), done()]));
    let mut live = world.keel("ask", &second, Some(&session));
    // Nobody answers: only the rule can allow the write.
    live.close();
    let result = live.result();
    let (code, stderr, seen) = live.finish();
    assert_eq!(result["state"], "settled", "{result} {stderr}");
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !seen
            .iter()
            .any(|line| line["type"] == "permission_requested"),
        "the rule decided: {seen:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(world.ws().join("notes.txt")).unwrap(),
        "two\n"
    );
}

/// Runs one `bash` call in `auto` (anything asked is approved once) and
/// returns the warnings and the `workspace_changes` line.
fn plant(world: &World, command: &str) -> (Vec<Value>, Value) {
    let script = script(world.root(), "plant.json", json!([bash(command), done()]));
    let mut live = world.keel("auto", &script, None);
    loop {
        let step = next_step(&mut live);
        if step["type"] == "tool_execution_end" {
            assert_eq!(step["result"]["status"], "success", "{step}");
            break;
        }
        live.send(&answer(&step, "approve", "once"));
    }
    let result = live.result();
    assert_eq!(result["state"], "settled", "{result}");
    let (code, stderr, seen) = live.finish();
    assert_eq!(code, 0, "{stderr}");
    let warnings = seen
        .iter()
        .filter(|line| line["type"] == "warning" && line["code"] == "git_code")
        .cloned()
        .collect();
    let changes = seen
        .iter()
        .find(|line| line["type"] == "workspace_changes")
        .cloned()
        .unwrap_or(Value::Null);
    (warnings, changes)
}

#[test]
fn git_init_in_a_new_directory_with_a_hook_is_reported() {
    let world = World::new();
    let (warnings, changes) = plant(
        &world,
        "git init -q sub && printf '#!/bin/sh\\n' > sub/.git/hooks/post-checkout",
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let message = warnings[0]["message"].as_str().unwrap();
    assert!(
        message.contains("sub/.git") && message.contains("hooks/post-checkout"),
        "{message}"
    );
    let git_code = &changes["git_code"];
    assert_eq!(
        git_code,
        &json!([{
            "repository": "sub/.git",
            "item": "hooks/post-checkout",
            "change": "added",
            "call_id": git_code[0]["call_id"],
        }]),
        "{changes}"
    );
}

#[test]
fn a_nested_repositorys_fsmonitor_written_with_python_is_refused() {
    let world = World::new();
    let nested = world.ws().join("vendor/lib");
    std::fs::create_dir_all(&nested).unwrap();
    let init = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&nested)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", world.root().join("home"))
        .status()
        .unwrap();
    assert!(init.success());
    let command = "python3 -c \"open('vendor/lib/.git/config', 'a').write('[core]\\n\\tfsmonitor = touch /tmp/x\\n')\"";
    let script = script(world.root(), "plant.json", json!([bash(command), done()]));
    let mut live = world.keel("auto", &script, None);
    live.close();
    let (code, stderr, seen) = live.finish();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !seen
            .iter()
            .any(|line| line["type"] == "permission_requested"),
        "left to the sandbox: {seen:#?}"
    );
    let end = seen
        .iter()
        .find(|line| line["type"] == "tool_execution_end")
        .unwrap();
    // The sandbox keeps the nested repository's `.git` read-only.
    assert_eq!(end["result"]["status"], "error", "{end}");
    let config = std::fs::read_to_string(nested.join(".git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(
        !seen
            .iter()
            .any(|line| line["type"] == "warning" && line["code"] == "git_code"),
        "{seen:#?}"
    );
}

#[test]
fn an_fsmonitor_behind_an_absolute_gitdir_written_with_python_is_quarantined() {
    let world = World::new();
    let hidden = world.ws().canonicalize().unwrap().join("hidden");
    let command = format!(
        "python3 -c \"import os; os.makedirs('sub'); os.makedirs('hidden'); \
         open('sub/.git', 'w').write('gitdir: {}\\n'); \
         open('hidden/config', 'w').write('[core]\\n\\tfsmonitor = touch /tmp/x\\n')\"",
        hidden.display()
    );
    let (warnings, changes) = plant(&world, &command);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let message = warnings[0]["message"].as_str().unwrap();
    assert!(message.contains("core.fsmonitor"), "{message}");
    // The new `.git` file is moved aside: git no longer finds `hidden`
    // from `sub`, and `hidden` itself is left as it was.
    let moved = changes["git_code"][0]["quarantined"]
        .as_str()
        .unwrap_or_default();
    assert!(moved.starts_with("sub/.git.keel-quarantined-"), "{changes}");
    assert_eq!(
        changes["git_code"],
        json!([{
            "repository": "hidden",
            "item": "core.fsmonitor",
            "change": "added",
            "call_id": changes["git_code"][0]["call_id"],
            "quarantined": moved,
        }]),
        "{changes}"
    );
    assert!(message.contains("quarantined"), "{message}");
    assert!(!world.ws().join("sub/.git").exists());
    assert!(world.ws().join(moved).is_file());
    assert!(hidden.join("config").is_file());
}

#[test]
fn a_rule_is_checked_after_the_earlier_calls_of_its_batch_ran() {
    let world = World::new();
    let read = "cat link/credentials";
    let repoint = format!(
        "printf '%s\\n' 'ln -sfn {}/home/.aws link' > s.sh && bash s.sh",
        world.root().display()
    );
    let both = json!({"content": [
        {"type": "tool_call", "name": "bash", "arguments": {"command": repoint}},
        {"type": "tool_call", "name": "bash", "arguments": {"command": read}},
    ]});
    let script = script(
        world.root(),
        "script.json",
        json!([bash(read), both, done()]),
    );
    let mut live = world.keel("auto", &script, None);
    let request = live.event("permission_requested");
    live.send(&answer(&request, "approve", "always"));
    live.event("tool_execution_end");
    let repointed = next_step(&mut live);
    assert_eq!(repointed["type"], "tool_execution_end", "{repointed}");
    // Decided when the batch began, the rule would still have matched.
    let again = next_step(&mut live);
    assert_eq!(
        again["type"], "permission_requested",
        "asked again: {again}"
    );
    live.send(&answer(&again, "deny", "once"));
    let result = live.result();
    assert_eq!(result["state"], "settled", "{result}");
    let (_, stderr, seen) = live.finish();
    let printed = serde_json::to_string(&seen).unwrap();
    assert!(
        !printed.contains(AWS_SECRET),
        "the secret leaked: {printed}"
    );
    assert!(!stderr.contains(AWS_SECRET));
}

#[test]
fn an_approval_is_not_run_when_its_target_moved_while_the_host_decided() {
    let world = World::new();
    let script = script(
        world.root(),
        "script.json",
        json!([bash("cat link/credentials"), done()]),
    );
    let mut live = world.keel("auto", &script, None);
    let request = live.event("permission_requested");
    // While the host reads the request, the symlink is re-pointed.
    std::fs::remove_file(world.ws().join("link")).unwrap();
    std::os::unix::fs::symlink(world.root().join("home/.aws"), world.ws().join("link")).unwrap();
    live.send(&answer(&request, "approve", "always"));
    let end = live.event("tool_execution_end");
    assert_eq!(end["result"]["status"], "error", "{end}");
    assert!(
        end.to_string()
            .contains("resolved differently after the host approved"),
        "{end}"
    );
    let result = live.result();
    assert_eq!(result["state"], "settled", "{result}");
    let (_, stderr, seen) = live.finish();
    let printed = serde_json::to_string(&seen).unwrap();
    assert!(
        !printed.contains(AWS_SECRET),
        "the secret leaked: {printed}"
    );
    assert!(!stderr.contains(AWS_SECRET));
}
