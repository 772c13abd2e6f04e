//! The output forms as people and programs expect them, as a process:
//! piped, `keel run` and `keel demo` print only the final message; every
//! command that prints data takes `--output-format` (text by default, `json`
//! one document, `stream-json` JSON Lines); startup errors are text on
//! stderr with clap's hints unless JSON was asked; `-q` with a JSON format
//! is a usage error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::keel_plain;
use serde_json::{Value, json};

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

const ANSWER: &str = "The Answer:\nFile a.txt says Hello World.";

/// A home with a workspace `ws` and a script whose run reads a file and
/// answers [`ANSWER`]; the arguments of `keel run` on it (sessions under
/// the home's data directory).
fn fixture() -> (tempfile::TempDir, Vec<String>) {
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "Hello World\n").unwrap();
    let script = json!({"turns": [
        {"content": [{"type": "tool_call", "name": "read", "arguments": {"path": "a.txt"}}]},
        {"content": [{"type": "text", "text": ANSWER}]}
    ]});
    std::fs::write(home.path().join("script.json"), script.to_string()).unwrap();
    let d = home.path().display().to_string();
    let args = vec![
        "run".into(),
        "--script".into(),
        format!("{d}/script.json"),
        "--workspace".into(),
        format!("{d}/ws"),
    ];
    (home, args)
}

fn with<'a>(args: &'a [String], more: &[&'a str]) -> Vec<&'a str> {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend_from_slice(more);
    all
}

#[test]
fn a_piped_run_prints_only_its_final_message() {
    let (home, args) = fixture();
    let output = keel_plain(&with(&args, &["go"]), home.path(), "");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), format!("{ANSWER}\n"));
    // The other forms are asked for by name.
    let stream = keel_plain(
        &with(&args, &["--output-format", "stream-json", "go"]),
        home.path(),
        "",
    );
    let lines: Vec<Value> = text(&stream.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "run_started");
    assert!(lines.iter().any(|line| line["type"] == "result"));
    let json = keel_plain(
        &with(&args, &["--output-format", "json", "go"]),
        home.path(),
        "",
    );
    let document: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(document["type"], "result");
}

#[test]
fn a_piped_demo_prints_its_final_message_and_failures_go_to_stderr() {
    let home = tempfile::tempdir().unwrap();
    let output = keel_plain(&["demo", "streamed-run"], home.path(), "");
    assert_eq!(output.status.code(), Some(0));
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("Hello! I am Keel"), "{stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let failed = keel_plain(
        &["demo", "streamed-run", "--case", "provider-error"],
        home.path(),
        "",
    );
    assert_eq!(failed.status.code(), Some(1));
    assert!(!text(&failed.stdout).contains('{'), "no JSON on stdout");
    let stderr = text(&failed.stderr);
    assert!(stderr.starts_with("keel: the run failed ("), "{stderr}");
}

/// What a data command printed, checked against its form: text is lines
/// and not JSON; `json` one document; `stream-json` one object per line,
/// each with a `type`.
fn check_forms(args: &[&str], home: &Path) {
    let run = |format: Option<&str>| {
        let mut all = args.to_vec();
        if let Some(format) = format {
            all.extend(["--output-format", format]);
        }
        let output = keel_plain(&all, home, "");
        assert!(
            matches!(output.status.code(), Some(0 | 1)),
            "keel {all:?}: {}",
            text(&output.stderr)
        );
        text(&output.stdout)
    };
    let piped = run(None);
    assert!(!piped.is_empty(), "{args:?}");
    for line in piped.lines() {
        assert!(
            serde_json::from_str::<Value>(line).is_err() || line.trim().is_empty(),
            "{args:?}: a JSON line in the text: {line}"
        );
    }
    assert_eq!(
        strip_times(&run(Some("text"))),
        strip_times(&piped),
        "{args:?}"
    );
    let document = run(Some("json"));
    let value: Value = serde_json::from_str(&document)
        .unwrap_or_else(|error| panic!("{args:?}: not one JSON document: {error}: {document}"));
    assert!(value.is_object(), "{args:?}: {document}");
    let lines = run(Some("stream-json"));
    assert!(!lines.is_empty(), "{args:?}");
    for line in lines.lines() {
        let value: Value = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("{args:?}: not a JSON line: {error}: {line}"));
        assert!(value["type"].is_string(), "{args:?}: no type: {line}");
    }
}

/// Text with the "N s ago" of `session list` made equal between two runs.
fn strip_times(text: &str) -> String {
    text.lines()
        .map(|line| {
            line.split("  ")
                .filter(|part| !part.ends_with(" ago"))
                .collect::<Vec<_>>()
                .join("  ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_data_command_prints_text_json_or_json_lines() {
    let (home, args) = fixture();
    let output = keel_plain(
        &with(&args, &["--output-format", "json", "go"]),
        home.path(),
        "",
    );
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    let id = result["session"]["id"].as_str().unwrap().to_owned();
    let entry = keel_plain(
        &["session", "show", &id, "--output-format", "json"],
        home.path(),
        "",
    );
    let shown: Value = serde_json::from_slice(&entry.stdout).unwrap();
    let first = shown["branch"][0]["id"].as_str().unwrap().to_owned();
    for command in [
        &["session", "list", "--all"][..],
        &["session", "show", &id],
        &["session", "tree", &id],
        &["models"],
        &["version"],
        &["doctor"],
    ] {
        check_forms(command, home.path());
    }
    // A fork writes a new session each time: its forms one by one.
    let fork = |format: &[&str]| {
        let mut all = vec!["session", "fork", &id, &first];
        all.extend_from_slice(format);
        let output = keel_plain(&all, home.path(), "");
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        text(&output.stdout)
    };
    let prefix = format!("forked session {id} at entry {first} into new session ");
    for forked in [fork(&[]), fork(&["--output-format", "text"])] {
        assert!(forked.starts_with(&prefix), "{forked}");
        assert_eq!(forked.lines().count(), 1, "{forked}");
    }
    for format in ["json", "stream-json"] {
        let line: Value = serde_json::from_str(&fork(&["--output-format", format])).unwrap();
        assert_eq!(line["type"], "fork");
        assert_eq!(line["session"]["parent_session"], id.as_str());
    }
    // One object per item in JSON Lines: a session, an entry, a provider.
    let lines = |args: &[&str]| -> Vec<Value> {
        let mut all = args.to_vec();
        all.extend(["--output-format", "stream-json"]);
        text(&keel_plain(&all, home.path(), "").stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    let sessions = lines(&["session", "list", "--all"]);
    assert!(
        sessions
            .iter()
            .all(|line| line["type"] == "session_summary")
    );
    assert!(sessions.len() >= 2, "the run's and the fork's");
    let branch = lines(&["session", "show", &id]);
    assert_eq!(branch.last().unwrap()["type"], "session_detail");
    assert_eq!(branch.len(), shown["branch"].as_array().unwrap().len() + 1);
    let tree = lines(&["session", "tree", &id]);
    assert!(tree.iter().all(|line| line["type"] == "tree_entry"));
    assert_eq!(tree.iter().filter(|line| line["leaf"] == true).count(), 1);
    let providers = lines(&["models"]);
    assert!(providers.iter().any(|line| line["provider"] == "anthropic"));
    // The text names each wire format as config.toml does.
    let models = text(&keel_plain(&["models"], home.path(), "").stdout);
    assert!(
        models.contains("anthropic  (anthropic, ") && models.contains("(openai-chat, "),
        "{models}"
    );
    assert!(!models.contains("OpenaiChat"), "{models}");
}

#[test]
fn startup_errors_are_text_with_clap_hints_unless_json_was_asked() {
    let home = tempfile::tempdir().unwrap();
    let refused = |args: &[&str]| {
        let output = keel_plain(args, home.path(), "");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            output.stdout.is_empty(),
            "{args:?}: {}",
            text(&output.stdout)
        );
        text(&output.stderr)
    };
    let stderr = refused(&["run", "--mode", "autoo", "x"]);
    assert!(
        stderr.starts_with("error: invalid value 'autoo' for '--mode <MODE>'")
            && stderr.contains("[possible values: plan, ask, auto, full]"),
        "{stderr}"
    );
    let stderr = refused(&["run", "--outpt-format", "json", "x"]);
    assert!(
        stderr.contains("a similar argument exists: '--output-format'")
            && stderr.contains("Usage: keel run"),
        "{stderr}"
    );
    let stderr = refused(&["session", "list", "--output-format", "jsn"]);
    assert!(stderr.contains("possible values"), "{stderr}");
    // A problem found after parsing: text too, with its stable code.
    let stderr = refused(&["run", "--provider", "nope", "x"]);
    assert!(
        stderr.starts_with("keel: ") && stderr.contains("[unknown_provider]"),
        "{stderr}"
    );
    // Asked for JSON: one line on stdout, nothing on stderr.
    for format in ["json", "stream-json"] {
        for args in [
            &["run", "--bogus", "--output-format", format, "x"][..],
            &["run", "--provider", "nope", "--output-format", format, "x"],
            &["models", "-c", "=", "--output-format", format],
        ] {
            let output = keel_plain(args, home.path(), "");
            assert_eq!(output.status.code(), Some(2), "{args:?}");
            let line: Value = serde_json::from_slice(&output.stdout)
                .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&output.stdout)));
            assert_eq!(line["type"], "startup_error", "{args:?}");
            assert!(output.stderr.is_empty(), "{args:?}");
        }
    }
}

#[test]
fn a_broken_config_names_the_line_and_column_on_stderr() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("config/keel")).unwrap();
    std::fs::write(
        home.path().join("config/keel/config.toml"),
        "provider = \"scripted\"\nmodel = = 3\n",
    )
    .unwrap();
    for args in [&["models"][..], &["run", "x"]] {
        let output = keel_plain(args, home.path(), "");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.starts_with("keel: invalid configuration in ")
                && stderr.contains("config.toml: line 2, column 9: ")
                && stderr.contains("[config_invalid]"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn quiet_with_a_json_format_is_a_usage_error() {
    let home = tempfile::tempdir().unwrap();
    for format in ["json", "stream-json"] {
        for args in [
            &["run", "-q", "--output-format", format, "x"][..],
            &["demo", "streamed-run", "--quiet", "--output-format", format],
            &["resume", "some-id", "--output-format", format, "-q"],
        ] {
            let output = keel_plain(args, home.path(), "");
            assert_eq!(output.status.code(), Some(2), "{args:?}");
            assert!(output.stdout.is_empty(), "{args:?}");
            let stderr = text(&output.stderr);
            assert!(
                stderr.starts_with("error: the argument '--quiet' cannot be used with")
                    && stderr.contains("Usage: keel "),
                "{args:?}: {stderr}"
            );
        }
    }
    // -q alone, and -q with text, still print the final message.
    let output = keel_plain(&["demo", "streamed-run", "-q"], home.path(), "");
    assert_eq!(output.status.code(), Some(0));
    assert!(text(&output.stdout).starts_with("Hello! I am Keel"));
}
