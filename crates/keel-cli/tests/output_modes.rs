//! `keel run`'s output modes as a process: `json` (one object), `-q` (the
//! final message only), `-o FILE`, `text` off a terminal (plain, no JSON),
//! the budget, errors as text or JSON, the help texts, completions, the man
//! page and `--log-file`. (`stream-json` is what every other test parses:
//! `common::keel` checks that every line has a `type` and parses as a
//! `RunEvent` or a `HostLine`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Output;

use serde_json::{Value, json};

fn keel(args: &[&str], dir: &std::path::Path) -> Output {
    common::keel_command()
        .args(args)
        .current_dir(dir)
        .env("XDG_DATA_HOME", dir.join("data"))
        .env_remove("KEEL_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A workspace with a script of `turns` (each read turn costs `cost`);
/// the arguments of a run on it.
fn fixture(cost: f64) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "Hello World\n").unwrap();
    let usage = json!({"input_tokens": 1000, "output_tokens": 50, "cost_usd": cost});
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "cat a.txt; echo More > b.txt"}}], "usage": usage},
        {"content": [{"type": "tool_call", "name": "read", "arguments": {"path": "b.txt"}}], "usage": usage},
        {"content": [{"type": "text", "text": "The Answer:\nFile a.txt says Hello World."}], "usage": usage}
    ]});
    std::fs::write(dir.path().join("script.json"), script.to_string()).unwrap();
    let d = dir.path().display().to_string();
    let args = vec![
        "run".into(),
        "--script".into(),
        format!("{d}/script.json"),
        "--workspace".into(),
        format!("{d}/ws"),
        "--session-dir".into(),
        format!("{d}/sessions"),
    ];
    (dir, args)
}

fn with<'a>(args: &'a [String], more: &[&'a str]) -> Vec<&'a str> {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend_from_slice(more);
    all
}

#[test]
fn json_is_one_result_object_with_totals_changes_and_session() {
    let (dir, args) = fixture(0.01);
    let output = keel(&with(&args, &["--output-format", "json", "go"]), dir.path());
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let line: Value = serde_json::from_str(&stdout).unwrap();
    let parsed: keel_protocol::HostLine = serde_json::from_value(line.clone()).unwrap();
    assert!(matches!(parsed, keel_protocol::HostLine::Result(_)));
    assert_eq!(line["type"], "result");
    assert_eq!(line["state"], "settled");
    assert_eq!(line["totals"]["turns"], 3);
    assert_eq!(line["totals"]["input_tokens"], 3000);
    assert!((line["totals"]["cost_usd"].as_f64().unwrap() - 0.03).abs() < 1e-9);
    assert_eq!(line["workspace_changes"]["changed_paths"][0], "b.txt");
    assert!(
        line["session"]["path"]
            .as_str()
            .unwrap()
            .ends_with(".jsonl")
    );
}

#[test]
fn quiet_prints_only_the_final_message_and_o_writes_it() {
    let (dir, args) = fixture(0.0);
    let file = dir.path().join("last.txt");
    let file_arg = file.display().to_string();
    let output = keel(&with(&args, &["-q", "-o", &file_arg, "go"]), dir.path());
    assert_eq!(output.status.code(), Some(0));
    let expected = "The Answer:\nFile a.txt says Hello World.";
    assert_eq!(text(&output.stdout), format!("{expected}\n"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), expected);
    // -o beside stream-json: the stream is unchanged, the file written.
    std::fs::remove_file(dir.path().join("ws/b.txt")).unwrap();
    let output = common::keel(&with(&args, &["-o", &file_arg, "again"]), None, "");
    assert_eq!(output.result["state"], "settled");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), expected);
}

#[test]
fn text_off_a_terminal_is_plain_words_without_json_or_escapes() {
    let (dir, args) = fixture(0.004);
    let output = keel(&with(&args, &["--output-format", "text", "go"]), dir.path());
    assert_eq!(output.status.code(), Some(0));
    let view = text(&output.stdout);
    assert!(!view.contains('\u{1b}'), "{view:?}");
    assert!(!view.contains("{\""), "no JSON in the view: {view}");
    for shown in [
        "→ bash cat a.txt; echo More > b.txt",
        "│ Hello World",
        "✓ bash",
        "→ read b.txt",
        "The Answer:\nFile a.txt says Hello World.",
        "── settled · 3 turns · 3.0k in / 150 out tokens · $0.0120 · ",
        "── changed 1 file\n  A b.txt  +1 −0\n",
        "+More",
        "── session ",
    ] {
        assert!(view.contains(shown), "{shown:?} missing:\n{view}");
    }
}

#[test]
fn the_budget_stops_the_run_before_it_spends_more() {
    let (dir, args) = fixture(0.02);
    let output = common::keel(&with(&args, &["--max-budget-usd", "0.03", "go"]), None, "");
    assert_eq!(output.code, 1);
    assert_eq!(output.result["state"], "failed");
    assert_eq!(output.result["error"]["code"], "budget_exceeded");
    assert_eq!(output.result["totals"]["turns"], 2, "no third request");
    let bad = common::keel(&with(&args, &["--max-budget-usd", "-1", "go"]), None, "");
    assert_eq!(bad.startup_error.unwrap()["code"], "usage");
    drop(dir);
}

#[test]
fn errors_are_text_for_people_and_json_for_programs() {
    let dir = tempfile::tempdir().unwrap();
    let run = ["run", "--provider", "nope", "hi"];
    let asked = keel(
        &[&run[..], &["--output-format", "stream-json"]].concat(),
        dir.path(),
    );
    assert_eq!(asked.status.code(), Some(2));
    let line: Value = serde_json::from_slice(&asked.stdout).unwrap();
    assert_eq!(line["type"], "startup_error");
    for format in [&[][..], &["--output-format", "text"]] {
        let plain = keel(&[&run[..], format].concat(), dir.path());
        assert_eq!(plain.status.code(), Some(2));
        assert!(plain.stdout.is_empty());
        let stderr = text(&plain.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("keel: ") && !stderr.contains('{'),
            "{stderr}"
        );
    }
    let usage = keel(
        &["run", "--bogus", "--output-format", "text", "x"],
        dir.path(),
    );
    let stderr = text(&usage.stderr);
    assert!(
        stderr.starts_with("error: unexpected argument '--bogus' found")
            && stderr.contains("Usage: keel run"),
        "{stderr}"
    );
}

#[test]
fn demo_permissions_in_the_view_shows_no_json() {
    let dir = tempfile::tempdir().unwrap();
    for case in ["standard", "host-disconnect", "resume"] {
        let args = [
            "demo",
            "permissions",
            "--case",
            case,
            "--output-format",
            "text",
        ];
        let output = keel(&args, dir.path());
        let view = text(&output.stdout);
        assert!(!view.contains("{\""), "{case}: {view}");
        assert!(view.contains("decision: "), "{case}: {view}");
    }
}

#[test]
fn help_explains_the_modes_and_lists_cases_and_schema_names() {
    let dir = tempfile::tempdir().unwrap();
    let help = text(&keel(&["--help"], dir.path()).stdout);
    for shown in [
        "keel run -q PROMPT",
        "stream-json",
        "plan ",
        "ask ",
        "auto ",
        "full ",
        "KEEL_LOG",
        "Examples:",
    ] {
        assert!(help.contains(shown), "{shown:?} missing from --help");
    }
    let demo_help = text(&keel(&["demo", "--help"], dir.path()).stdout);
    for name in [
        "streamed-run",
        "tool-loop",
        "run-control",
        "session-tree",
        "permissions",
    ] {
        let refused = keel(&["demo", name, "--case", "nope"], dir.path());
        let message = text(&refused.stderr);
        let cases = message
            .trim_end()
            .trim_end_matches(" [unknown_case]")
            .rsplit("cases: ")
            .next()
            .unwrap();
        for case in cases.split(", ") {
            assert!(
                demo_help.contains(case),
                "{name} --case {case} missing from demo --help"
            );
        }
    }
    let schema_help = text(&keel(&["schema", "--help"], dir.path()).stdout);
    let all: Value = serde_json::from_slice(&keel(&["schema"], dir.path()).stdout).unwrap();
    for name in all.as_object().unwrap().keys() {
        assert!(
            schema_help.contains(&format!("  {name} ")),
            "{name} missing from schema --help"
        );
    }
}

#[test]
fn completions_and_the_man_page_are_generated() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let output = keel(&["completion", shell], dir.path());
        assert!(output.status.success());
        let script = text(&output.stdout);
        assert!(
            script.contains("keel") && script.contains("output-format"),
            "{shell}"
        );
    }
    let man = keel(&["man"], dir.path());
    assert!(man.status.success());
    assert!(
        text(&man.stdout).starts_with(".ie \\n(.g .ds Aq")
            || text(&man.stdout).contains(".TH keel")
    );
}

#[test]
fn the_log_file_gets_diagnostics_without_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("keel.log");
    let output = common::keel_command()
        .args(["--log-file", log.to_str().unwrap(), "demo", "streamed-run"])
        .env("KEEL_LOG", "debug")
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .output()
        .unwrap();
    assert!(output.status.success());
    let written = std::fs::read_to_string(&log).unwrap();
    assert!(
        written.contains("DEBUG") || written.contains("INFO"),
        "{written}"
    );
    assert!(!written.contains('\u{1b}'), "{written:?}");
    assert!(
        text(&output.stderr).is_empty(),
        "diagnostics went to the file"
    );
}

#[test]
fn steering_is_noted_at_a_line_boundary_and_shown_between_turns() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "demo",
        "run-control",
        "--case",
        "steering",
        "--output-format",
        "text",
    ];
    let view = text(&keel(&args, dir.path()).stdout);
    let lines: Vec<&str> = view.lines().collect();
    // The model was streaming its first sentence when the host steered.
    assert!(
        lines.contains(&"I'll look at the project layout first."),
        "{view}"
    );
    let queued = lines
        .iter()
        .position(|l| l.starts_with("+ queued steering: Focus"))
        .unwrap();
    let injected = lines
        .iter()
        .position(|l| l.starts_with("› you (steering): Focus"))
        .unwrap();
    let tool_end = lines
        .iter()
        .position(|l| l.starts_with("✓ read README.md"))
        .unwrap();
    assert!(queued < tool_end && tool_end < injected, "{view}");
}
