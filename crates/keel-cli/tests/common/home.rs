//! An isolated home for `keel` as a user runs it: HOME and the XDG
//! directories in a temporary directory, a workspace `ws` in it (the
//! current directory of every command), sessions in the default store
//! (`data/keel/sessions`, outside the workspace), stdin null.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The temporary home.
pub struct Home {
    home: tempfile::TempDir,
}

impl Home {
    /// A new home with an empty workspace `ws`.
    pub fn new() -> Self {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join("ws")).unwrap();
        Self { home }
    }

    /// The home directory.
    pub fn path(&self) -> &Path {
        self.home.path()
    }

    /// The workspace.
    pub fn workspace(&self) -> PathBuf {
        self.path().join("ws")
    }

    /// The default session store.
    pub fn sessions(&self) -> PathBuf {
        self.path().join("data/keel/sessions")
    }

    /// Writes `script` (a scripted-provider script) as `NAME.json`; its path.
    pub fn script(&self, name: &str, script: Value) -> PathBuf {
        let path = self.path().join(format!("{name}.json"));
        std::fs::write(&path, script.to_string()).unwrap();
        path
    }

    /// `keel ARGS` in the workspace, stdout and stderr piped.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = super::isolated_keel(self.path());
        command
            .args(args)
            .current_dir(self.workspace())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// `keel ARGS --output-format stream-json --script SCRIPT`, run to its end.
    pub fn run_script(
        &self,
        args: &[&str],
        script: &Path,
        env: &[(&str, &str)],
    ) -> std::process::Output {
        self.command(args)
            .args(["--output-format", "stream-json", "--script"])
            .arg(script)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    /// `keel SUBCOMMAND --output-format json ARGS`, which must exit 0: the
    /// document it printed.
    pub fn json(&self, subcommand: &[&str], args: &[&str]) -> Value {
        let output = self
            .command(subcommand)
            .args(["--output-format", "json"])
            .args(args)
            .output()
            .unwrap();
        assert_success(&output);
        serde_json::from_slice(&output.stdout).unwrap()
    }

    /// The session ids of the store, oldest file first.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<(std::time::SystemTime, String)> = std::fs::read_dir(self.sessions())
            .unwrap()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let id = name.strip_suffix(".jsonl")?.to_owned();
                Some((entry.metadata().ok()?.modified().ok()?, id))
            })
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// The newest session's id.
    pub fn newest_id(&self) -> String {
        self.ids().pop().unwrap()
    }
}

/// Asserts that the process of `output` exited 0, showing its stderr if not.
pub fn assert_success(output: &std::process::Output) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `result` line of a stream-json run.
pub fn final_result(output: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["type"] == "result")
        .unwrap_or_else(|| {
            panic!(
                "no result: {stdout} {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
}

/// A script of one text answer.
pub fn text_turns(answer: &str) -> Value {
    json!([{"content": [{"type": "text", "text": answer}]}])
}
