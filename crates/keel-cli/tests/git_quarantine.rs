//! Repository code a confined command plants, through `keel run` as a
//! process: in `auto`, with stdin closed, a command the shell analysis
//! cannot resolve (python3) runs confined without asking, and
//!
//! - writing a hook into an existing nested repository fails (its `.git`
//!   is read-only in the sandbox), the hook absent afterwards;
//! - renaming that repository's parent away and making a fresh `.git` with
//!   a hook in its place, creating a top-level `.git` with `core.fsmonitor`
//!   where there was none, or `sub/.git` with a hook: each new repository
//!   is moved aside to `….keel-quarantined-…` (git no longer finds it), and
//!   the `git_code` warning, the `workspace_changes.git_code` entries and
//!   the call's result say so;
//! - a scratch `git init` without code is left in place;
//! - a `.git` write the host approved (`ask`, answered `always`) is not
//!   moved.
//!
//! The tests need user namespaces and Landlock (what `keel doctor` checks):
//! without them they say so and pass, except on CI (`CI` set), where a
//! machine that cannot enforce the sandbox fails them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod live;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use live::{Live, command};
use serde_json::{Value, json};

/// A workspace `ws` beside a fake home.
struct World {
    base: tempfile::TempDir,
}

/// What one run printed.
struct Run {
    /// Every line, in order.
    seen: Vec<Value>,
    stderr: String,
}

impl Run {
    fn of_type(&self, kind: &str) -> Vec<&Value> {
        self.seen
            .iter()
            .filter(|line| line["type"] == kind)
            .collect()
    }

    /// The one call's end.
    fn end(&self) -> &Value {
        let ends = self.of_type("tool_execution_end");
        assert_eq!(ends.len(), 1, "{:#?}\n{}", self.seen, self.stderr);
        ends[0]
    }

    /// The call's result text, all blocks joined.
    fn result_text(&self) -> String {
        self.end()["result"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn git_code_warnings(&self) -> Vec<String> {
        self.of_type("warning")
            .into_iter()
            .filter(|line| line["code"] == "git_code")
            .map(|line| line["message"].as_str().unwrap().to_owned())
            .collect()
    }

    fn git_code(&self) -> Vec<Value> {
        self.of_type("workspace_changes")
            .first()
            .and_then(|line| line["git_code"].as_array().cloned())
            .unwrap_or_default()
    }
}

impl World {
    fn new() -> World {
        let base = tempfile::tempdir().unwrap();
        for dir in ["ws", "home", "data"] {
            std::fs::create_dir_all(base.path().join(dir)).unwrap();
        }
        World { base }
    }

    fn root(&self) -> &Path {
        self.base.path()
    }

    fn ws(&self) -> PathBuf {
        self.root().join("ws")
    }

    /// `git init` of `dir` (inside the workspace) by the test itself.
    fn git_init(&self, dir: &str) {
        let path = self.ws().join(dir);
        std::fs::create_dir_all(&path).unwrap();
        let status = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&path)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.root().join("home"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// `keel run` in `mode` of one `bash` call; with `answer`, every
    /// permission request is answered `approve` with that scope, else
    /// stdin is closed at once and nobody answers.
    fn run(&self, mode: &str, bash: &str, answer: Option<&str>) -> Run {
        let turns = json!({"turns": [
            {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": bash}}]},
            {"content": [{"type": "text", "text": "done"}]},
        ]});
        let script = self.root().join("script.json");
        std::fs::write(&script, turns.to_string()).unwrap();
        let mut keel = command(&self.root().join("data"));
        keel.args(["run", "--input-format", "stream-json"])
            .args(["--output-format", "stream-json", "--mode", mode])
            .args(["--provider", "scripted", "--script"])
            .arg(&script)
            .arg("--workspace")
            .arg(self.ws())
            .arg("--session-dir")
            .arg(self.root().join("sessions"))
            .env("HOME", self.root().join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1");
        // python3 lives in the real home's toolchains on these machines.
        let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
        for dir in [".pyenv", ".local/bin", ".local/lib"] {
            if home.join(dir).exists() {
                keel.arg("--sandbox-read").arg(home.join(dir));
            }
        }
        keel.arg("go");
        let mut live = Live::start(keel);
        match answer {
            None => live.close(),
            Some(scope) => loop {
                let line = live.wait_for("a permission request or the result", |value| {
                    value["type"] == "permission_requested" || live::result_of(value).is_some()
                });
                if line["type"] != "permission_requested" {
                    break;
                }
                live.send(
                    &json!({
                        "type": "permission_answer",
                        "request_id": line["request_id"],
                        "decision": "approve",
                        "scope": scope,
                    })
                    .to_string(),
                );
            },
        }
        let (_, stderr, seen) = live.finish();
        Run { seen, stderr }
    }

    /// The names in `dir` (inside the workspace) that are quarantined entrances.
    fn quarantined_in(&self, dir: &str) -> Vec<String> {
        std::fs::read_dir(self.ws().join(dir))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.contains(".keel-quarantined-"))
            .collect()
    }
}

/// A python3 command writing `text` to `path` (parents made).
fn python_writes(path: &str, text: &str) -> String {
    format!(
        "python3 -c \"import os; os.makedirs(os.path.dirname('{path}'), exist_ok=True); \
         open('{path}', 'w').write('{text}')\""
    )
}

/// Asserts the call ran unasked, in `auto`, left to the sandbox.
fn unasked(run: &Run) {
    assert!(
        run.of_type("permission_requested").is_empty(),
        "{:#?}",
        run.seen
    );
}

/// Asserts the warning, the `git_code` entries and the result name the
/// quarantine of `entrance` to `moved` (`…/.git.keel-quarantined-…`).
fn says_quarantined(run: &Run, entrance: &str, moved: &str) {
    let warnings = run.git_code_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("quarantined")
            && warnings[0].contains(&format!("`{entrance}`"))
            && warnings[0].contains(moved),
        "{}",
        warnings[0]
    );
    let git_code = run.git_code();
    assert!(!git_code.is_empty(), "{:#?}", run.seen);
    for change in &git_code {
        assert_eq!(change["quarantined"], moved, "{change}");
    }
    let text = run.result_text();
    assert!(
        text.contains("quarantined") && text.contains("approval to write `.git`"),
        "{text}"
    );
}

#[test]
fn a_hook_written_into_an_existing_nested_repository_is_refused() {
    if !common::sandbox_enforced("a_hook_written_into_an_existing_nested_repository_is_refused") {
        return;
    }
    let world = World::new();
    world.git_init("vendor/lib");
    let hook = "vendor/lib/.git/hooks/pre-commit";
    let run = world.run("auto", &python_writes(hook, "#!/bin/sh\\n"), None);
    unasked(&run);
    assert_eq!(run.end()["result"]["status"], "error", "{}", run.end());
    assert!(
        run.result_text().contains("Read-only file system"),
        "{}",
        run.result_text()
    );
    assert!(!world.ws().join(hook).exists());
    assert!(run.git_code_warnings().is_empty(), "{:#?}", run.seen);
}

#[test]
fn a_fresh_git_made_where_a_nested_repository_was_moved_away_is_quarantined() {
    if !common::sandbox_enforced(
        "a_fresh_git_made_where_a_nested_repository_was_moved_away_is_quarantined",
    ) {
        return;
    }
    let world = World::new();
    world.git_init("vendor/lib");
    let command = "python3 -c \"import os; os.rename('vendor/lib', 'vendor/old'); \
         os.makedirs('vendor/lib/.git/hooks'); \
         open('vendor/lib/.git/HEAD', 'w').write('ref: refs/heads/main\\n'); \
         open('vendor/lib/.git/hooks/pre-commit', 'w').write('#!/bin/sh\\n')\"";
    let run = world.run("auto", command, None);
    unasked(&run);
    assert_eq!(run.end()["result"]["status"], "success", "{}", run.end());
    assert!(!world.ws().join("vendor/lib/.git").exists());
    let moved = world.quarantined_in("vendor/lib");
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert!(
        world
            .ws()
            .join("vendor/lib")
            .join(&moved[0])
            .join("hooks/pre-commit")
            .is_file()
    );
    says_quarantined(&run, "vendor/lib/.git", &format!("vendor/lib/{}", moved[0]));
}

#[test]
fn a_top_level_git_with_fsmonitor_made_where_there_was_none_is_quarantined() {
    if !common::sandbox_enforced(
        "a_top_level_git_with_fsmonitor_made_where_there_was_none_is_quarantined",
    ) {
        return;
    }
    let world = World::new();
    let command = python_writes(".git/config", "[core]\\n\\tfsmonitor = touch /tmp/x\\n");
    let run = world.run("auto", &command, None);
    unasked(&run);
    assert_eq!(run.end()["result"]["status"], "success", "{}", run.end());
    assert!(!world.ws().join(".git").exists(), "{:#?}", run.seen);
    let moved = world.quarantined_in(".");
    assert_eq!(moved.len(), 1, "{moved:?}");
    let config = std::fs::read_to_string(world.ws().join(&moved[0]).join("config")).unwrap();
    assert!(config.contains("fsmonitor"), "{config}");
    says_quarantined(&run, ".git", &moved[0]);
    assert_eq!(run.git_code()[0]["item"], "core.fsmonitor");
}

#[test]
fn a_sub_git_with_a_hook_is_quarantined() {
    if !common::sandbox_enforced("a_sub_git_with_a_hook_is_quarantined") {
        return;
    }
    let world = World::new();
    let command = python_writes("sub/.git/hooks/post-checkout", "#!/bin/sh\\n");
    let run = world.run("auto", &command, None);
    unasked(&run);
    assert!(!world.ws().join("sub/.git").exists(), "{:#?}", run.seen);
    let moved = world.quarantined_in("sub");
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert!(
        world
            .ws()
            .join("sub")
            .join(&moved[0])
            .join("hooks/post-checkout")
            .is_file()
    );
    says_quarantined(&run, "sub/.git", &format!("sub/{}", moved[0]));
}

#[test]
fn a_scratch_repository_without_code_is_left_in_place() {
    if !common::sandbox_enforced("a_scratch_repository_without_code_is_left_in_place") {
        return;
    }
    let world = World::new();
    // A script in the workspace: the analysis does not read into it.
    std::fs::write(world.ws().join("make.sh"), "git init -q scratch\n").unwrap();
    let run = world.run("auto", "sh make.sh", None);
    unasked(&run);
    assert_eq!(run.end()["result"]["status"], "success", "{}", run.end());
    assert!(world.ws().join("scratch/.git/HEAD").is_file());
    assert!(world.quarantined_in("scratch").is_empty());
    assert!(run.git_code_warnings().is_empty(), "{:#?}", run.seen);
    assert!(!run.result_text().contains("quarantined"));
}

#[test]
fn an_approved_git_write_is_not_quarantined() {
    if !common::sandbox_enforced("an_approved_git_write_is_not_quarantined") {
        return;
    }
    let world = World::new();
    let command = "git init -q sub && printf '#!/bin/sh\\n' > sub/.git/hooks/post-checkout";
    let run = world.run("ask", command, Some("always"));
    let asked = run.of_type("permission_requested");
    assert_eq!(asked.len(), 1, "{:#?}", run.seen);
    assert_eq!(asked[0]["intent"]["scope"], "metadata", "{}", asked[0]);
    assert_eq!(run.end()["result"]["status"], "success", "{}", run.end());
    assert!(world.ws().join("sub/.git/hooks/post-checkout").is_file());
    assert!(world.quarantined_in("sub").is_empty());
    // Still reported, never moved.
    let git_code = run.git_code();
    assert_eq!(git_code.len(), 1, "{:#?}", run.seen);
    assert_eq!(git_code[0]["item"], "hooks/post-checkout");
    assert!(git_code[0].get("quarantined").is_none(), "{}", git_code[0]);
    assert!(!run.result_text().contains("quarantined"));
}

#[test]
fn a_git_file_pointing_back_at_a_quarantined_repository_is_quarantined_too() {
    if !common::sandbox_enforced(
        "a_git_file_pointing_back_at_a_quarantined_repository_is_quarantined_too",
    ) {
        return;
    }
    let world = World::new();
    // What a quarantined `git init` with a hook leaves: a repository (it
    // looks bare) under another name, its code in place.
    let aside = world.ws().join("sub/.git.keel-quarantined-earlier");
    for dir in ["objects", "refs/heads", "hooks"] {
        std::fs::create_dir_all(aside.join(dir)).unwrap();
    }
    std::fs::write(aside.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(aside.join("hooks/post-checkout"), "#!/bin/sh\n").unwrap();
    // A call links a new `.git` file to it: a new way into a repository
    // holding code, though the repository is older than the call.
    let link = "gitdir: .git.keel-quarantined-earlier\\n";
    let run = world.run("auto", &python_writes("sub/.git", link), None);
    unasked(&run);
    assert!(!world.ws().join("sub/.git").exists(), "{:#?}", run.seen);
    assert_eq!(world.quarantined_in("sub").len(), 2, "{:#?}", run.seen);
}

#[test]
fn a_new_repository_with_a_key_no_list_names_is_quarantined() {
    if !common::sandbox_enforced("a_new_repository_with_a_key_no_list_names_is_quarantined") {
        return;
    }
    let world = World::new();
    // gpg.ssh.defaultKeyCommand runs at the user's next signed commit; no
    // denylist named it, so every key but the known-inert ones is code.
    let command = python_writes(
        "sub/.git/config",
        "[core]\\n\\tbare = false\\n[gpg.ssh]\\n\\tdefaultKeyCommand = touch /tmp/x\\n",
    );
    let run = world.run("auto", &command, None);
    unasked(&run);
    let config = world.quarantined_in("sub");
    assert!(!world.ws().join("sub/.git").exists(), "{:#?}", run.seen);
    assert_eq!(config.len(), 1);
    let written =
        std::fs::read_to_string(world.ws().join("sub").join(&config[0]).join("config")).unwrap();
    assert!(
        written.contains("[gpg.ssh]\n\tdefaultKeyCommand"),
        "{written:?}"
    );
}

#[test]
fn a_workspace_root_made_a_bare_repository_with_symlinked_objects_loses_its_head() {
    if !common::sandbox_enforced(
        "a_workspace_root_made_a_bare_repository_with_symlinked_objects_loses_its_head",
    ) {
        return;
    }
    let world = World::new();
    // git follows symlinked `objects` and `refs` when it decides that a
    // directory is a repository; so does Keel's walk.
    let command = "mkdir -p store/objects store/refs hooks && ln -s store/objects objects \
         && ln -s store/refs refs && printf 'ref: refs/heads/main\\n' > HEAD \
         && printf '#!/bin/sh\\n' > hooks/post-checkout";
    let run = world.run("auto", command, None);
    unasked(&run);
    assert_eq!(run.end()["result"]["status"], "success", "{}", run.end());
    assert!(!world.ws().join("HEAD").exists(), "{:#?}", run.seen);
    let moved = world.quarantined_in(".");
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert!(moved[0].starts_with("HEAD.keel-quarantined-"), "{moved:?}");
    says_quarantined(&run, ".", &moved[0]);
}
