//! Edges of `keel run` as a process: `-o FILE` refused before the run when
//! the final message could not be written; a reply cut at the model's
//! output limit reported as cut; a fork inside a tool batch continued; the
//! view counting retries as attempts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Output;

use serde_json::json;

/// `keel ARGS` with the test's own HOME, XDG directories and session
/// directory, standard input closed.
fn keel(dir: &Path, args: &[&str]) -> Output {
    common::keel_command()
        .args(args)
        .arg("--session-dir")
        .arg(dir.join("sessions"))
        .current_dir(dir)
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"))
        .env("XDG_DATA_HOME", dir.join("xdg-data"))
        .env_remove("KEEL_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// A workspace and a one-turn script whose answer is `text`.
fn fixture(turns: serde_json::Value) -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
    let ws = dir.path().join("ws").display().to_string();
    (dir, script.display().to_string(), ws)
}

fn sessions_written(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("sessions"))
        .map(|entries| entries.count())
        .unwrap_or(0)
}

#[test]
fn an_o_file_that_cannot_be_written_is_refused_before_the_run() {
    let (dir, script, ws) = fixture(json!([{"content": [{"type": "text", "text": "done"}]}]));
    std::fs::create_dir(dir.path().join("a-directory")).unwrap();
    for (target, why) in [
        ("missing/last.txt", "missing"),
        ("a-directory", "it is a directory"),
        ("script.json/last.txt", "ot a directory"),
    ] {
        let output = keel(
            dir.path(),
            &[
                "run",
                "-q",
                "--script",
                &script,
                "--workspace",
                &ws,
                "-o",
                target,
                "go",
            ],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(2), "{target}: {stdout}{stderr}");
        let said = format!("{stdout}{stderr}");
        assert!(
            said.contains("output_last_message") || said.contains("cannot write the final message"),
            "{target}: {said}"
        );
        assert!(said.contains(why), "{target}: {said}");
        assert_eq!(sessions_written(dir.path()), 0, "{target}: no run started");
    }
    // A writable place: the run goes, and the file holds the answer.
    let output = keel(
        dir.path(),
        &[
            "run",
            "-q",
            "--script",
            &script,
            "--workspace",
            &ws,
            "-o",
            "last.txt",
            "go",
        ],
    );
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("last.txt")).unwrap(),
        "done"
    );
}

#[test]
fn a_reply_cut_at_the_output_limit_is_reported_as_cut() {
    let cut = json!([{
        "content": [{"type": "text", "text": "The answer is forty"}],
        "stop_reason": "length",
        "usage": {"input_tokens": 10, "output_tokens": 64}
    }]);
    let (dir, script, ws) = fixture(cut);
    let base = ["run", "--script", &script, "--workspace", &ws];
    let with = |more: &[&'static str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(more);
        keel(dir.path(), &args)
    };

    // The event stream: a `reply_cut` warning, and the result's message
    // stopped at `length`.
    let output = with(&["--output-format", "stream-json", "go"]);
    assert_eq!(output.status.code(), Some(0));
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let warning = lines
        .iter()
        .find(|line| line["type"] == "warning" && line["code"] == "reply_cut")
        .unwrap_or_else(|| panic!("no reply_cut warning in {lines:?}"));
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("cut at its output limit (64 output tokens)"),
        "{warning}"
    );
    let result = lines.iter().find(|line| line["type"] == "result").unwrap();
    assert_eq!(result["message"]["stop_reason"], "length", "{result}");

    // The view's closing line, and `-q`'s stderr.
    let output = with(&["--output-format", "text", "go"]);
    let view = String::from_utf8(output.stdout).unwrap();
    assert!(
        view.contains("settled, the answer cut at the model's output limit"),
        "{view}"
    );
    let output = with(&["-q", "go"]);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "The answer is forty\n"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("the answer was cut at the model's output limit"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The entries of session file `path`, as JSON (records of kind `entry`).
fn session_entries(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|record| {
            let record = record.get("r")?.clone();
            (record["type"] == "entry").then(|| record["entry"].clone())
        })
        .collect()
}

fn session_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("sessions"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    files.sort();
    files
}

#[test]
fn a_fork_inside_a_tool_batch_continues_with_its_calls_closed_as_not_run() {
    let (dir, script, ws) = fixture(json!([
        {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "echo hi > made.txt"}}]},
        {"content": [{"type": "text", "text": "done"}]}
    ]));
    let output = keel(
        dir.path(),
        &["run", "-q", "--script", &script, "--workspace", &ws, "go"],
    );
    assert_eq!(output.status.code(), Some(0));
    let parent = session_files(dir.path()).remove(0);
    let parent_id = parent.file_stem().unwrap().to_string_lossy().into_owned();
    let before = std::fs::read(&parent).unwrap();
    let entries = session_entries(&parent);
    let id_of = |kind: &str| -> String {
        entries
            .iter()
            .find(|entry| match kind {
                "calls" => entry["message"]["content"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_call")),
                other => entry["kind"] == other,
            })
            .unwrap_or_else(|| panic!("no {kind} entry in {entries:?}"))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let continued = dir.path().join("continued.json");
    std::fs::write(
        &continued,
        json!({"turns": [{"expect": {"last_user_contains": "go on"},
            "content": [{"type": "text", "text": "continued"}]}]})
        .to_string(),
    )
    .unwrap();
    let continued = continued.display().to_string();

    // At the assistant message that made the call: not run, `cancelled`;
    // at its `effect_started`: it may have run in the parent, `interrupted`.
    for (at, status, code, says) in [
        (
            id_of("calls"),
            "cancelled",
            "cancelled",
            "before this call ran",
        ),
        (
            id_of("effect_started"),
            "error",
            "interrupted",
            "may have changed the workspace",
        ),
    ] {
        let known = session_files(dir.path());
        let output = keel(
            dir.path(),
            &[
                "run",
                "-q",
                "--script",
                &continued,
                "--workspace",
                &ws,
                "--session",
                &parent_id,
                "--fork",
                &at,
                "go on",
            ],
        );
        assert_eq!(
            output.status.code(),
            Some(0),
            "fork at {at}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&output.stdout), "continued\n");
        let fork = session_files(dir.path())
            .into_iter()
            .find(|path| !known.contains(path))
            .unwrap();
        let closed: Vec<_> = session_entries(&fork)
            .into_iter()
            .filter(|entry| entry["message"]["role"] == "tool_result")
            .collect();
        assert_eq!(closed.len(), 1, "{closed:?}");
        let result = &closed[0]["message"];
        assert_eq!(result["status"], status, "{result}");
        assert_eq!(result["error"]["code"], code, "{result}");
        assert!(
            result["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains(says),
            "{result}"
        );
    }
    // The parent session is never written.
    assert_eq!(std::fs::read(&parent).unwrap(), before);
}

/// The view counts a provider's retries as the run's failure does:
/// attempts out of all allowed.
#[test]
fn retries_are_counted_as_attempts_in_the_view_and_the_failure() {
    let dir = tempfile::tempdir().unwrap();
    let output = common::keel_command()
        .args([
            "demo",
            "run-control",
            "--case",
            "retry-failure",
            "--output-format",
            "text",
        ])
        .env("HOME", dir.path().join("home"))
        .env("XDG_CONFIG_HOME", dir.path().join("xdg-config"))
        .env("XDG_DATA_HOME", dir.path().join("xdg-data"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let view = String::from_utf8_lossy(&output.stdout);
    for shown in [
        "↻ attempt 1 of 4 failed: HTTP 500",
        "↻ attempt 3 of 4 failed: HTTP 503",
        "(after 4 attempts)",
    ] {
        assert!(view.contains(shown), "{shown:?} missing:\n{view}");
    }
    assert!(!view.contains("attempt 4 of 4 failed"), "{view}");
}
