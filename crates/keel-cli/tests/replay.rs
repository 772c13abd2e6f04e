//! `keel replay` as a user meets it, through `keel` as a process: a stored
//! session driven again through the kernel, by the recorded model answers,
//! with tool results from the record or (`--live-tools`) the real tools in
//! a copy of the recorded start workspace, and compared entry by entry.
//!
//! The `keel demo` scenarios keep their sessions in memory or in a
//! temporary directory, so each demo's run is stored here as a user would
//! store it: `keel run --script` with the demo's script, fixture, prompt
//! and flags, in the default store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::home::{Home, assert_success};
use serde_json::{Value, json};

/// The demos' fixture project (`keel demo`'s FIXTURE).
const FIXTURE: &[(&str, &str)] = &[
    (
        "README.md",
        "# calc\n\nA tiny shell calculator. Run `bash check.sh` to test it.\n",
    ),
    (
        "calc.sh",
        "#!/usr/bin/env bash\n# Adds two integers.\nadd() {\n  echo $(( $1 - $2 ))\n}\n",
    ),
    (
        "check.sh",
        "#!/usr/bin/env bash\nsource ./calc.sh\nresult=$(add 2 3)\nif [ \"$result\" = \"5\" ]; then\n  echo \"check passed: add 2 3 = 5\"\nelse\n  echo \"check failed: add 2 3 = $result (expected 5)\"\n  exit 1\nfi\n",
    ),
];

const FIX_PROMPT: &str = "The check in check.sh fails. Fix the bug.";

/// A home whose workspace holds the demo fixture.
fn fixture_home() -> Home {
    let home = Home::new();
    for (path, content) in FIXTURE {
        std::fs::write(home.workspace().join(path), content).unwrap();
    }
    home
}

/// The path of demo script `name`.
fn demo_script(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("demos/{name}.json"))
}

/// `keel run` (stream-json) of demo script `name` with `flags` and `prompt`
/// in `home`: its output, whatever its exit code.
fn run_demo(home: &Home, name: &str, flags: &[&str], prompt: &str) -> std::process::Output {
    let mut args = vec!["run", "--mode", "auto"];
    args.extend_from_slice(flags);
    args.push(prompt);
    home.run_script(&args, &demo_script(name), &[])
}

/// `keel replay ID --json [EXTRA]`: its exit code and document.
fn replay(home: &Home, id: &str, extra: &[&str]) -> (Option<i32>, Value) {
    let output = home
        .command(&["replay", id, "--json"])
        .args(extra)
        .output()
        .unwrap();
    let document = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "no JSON: {} {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), document)
}

/// The session file of `id`.
fn session_file(home: &Home, id: &str) -> std::path::PathBuf {
    home.sessions().join(format!("{id}.jsonl"))
}

/// A record line with its checksum recomputed over its bytes before
/// `,"crc":` (docs/session-format.md, "Checksums").
fn reframe(line: &str) -> String {
    let at = line
        .rfind(",\"crc\":\"")
        .expect("a record line ends in its crc");
    let framed = &line[..at];
    format!(
        "{framed},\"crc\":\"{:08x}\"}}",
        crc32fast::hash(framed.as_bytes())
    )
}

/// Rewrites the one record line of session `id` that contains `marker`,
/// replacing `from` by `to` in it, with its checksum recomputed.
fn edit_record(home: &Home, id: &str, marker: &str, from: &str, to: &str) {
    let path = session_file(home, id);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut edited = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            if line.contains(marker) && line.contains(from) {
                edited += 1;
                reframe(&line.replacen(from, to, 1))
            } else {
                line.to_owned()
            }
        })
        .collect();
    assert_eq!(edited, 1, "exactly one record holds {marker} and {from}");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn every_demo_run_stored_as_a_session_replays_identically_both_ways() {
    // (script, flags, prompt) as the demo host runs them.
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "streamed-run-success",
            &[],
            "Introduce yourself in two sentences.",
        ),
        (
            "streamed-run-provider-error",
            &[],
            "Introduce yourself in two sentences.",
        ),
        ("tool-loop-success", &[], FIX_PROMPT),
        (
            "tool-loop-mixed-batch",
            &[],
            "Read the project, then write a plan to notes/plan.md.",
        ),
        ("tool-loop-failure", &[], FIX_PROMPT),
        ("run-control-retry-success", &[], "Say something."),
        (
            "context-compaction-success",
            &["--context-window", "8192"],
            FIX_PROMPT,
        ),
        ("context-compaction-overflow", &[], FIX_PROMPT),
        ("context-compaction-summary-error", &[], FIX_PROMPT),
        ("permissions-standard", &[], FIX_PROMPT),
    ];
    for (script, flags, prompt) in cases {
        let home = fixture_home();
        run_demo(&home, script, flags, prompt);
        let id = home.newest_id();
        let before = std::fs::read(session_file(&home, &id)).unwrap();
        for extra in [&[][..], &["--live-tools"][..]] {
            let (code, document) = replay(&home, &id, extra);
            assert_eq!(
                (code, &document["identical"]),
                (Some(0), &json!(true)),
                "{script} {extra:?}: {document:#}"
            );
            assert_eq!(document["session_id"], id);
            assert!(document["compared_entries"].as_u64().unwrap() > 3);
        }
        // The recorded session is only read.
        assert_eq!(std::fs::read(session_file(&home, &id)).unwrap(), before);
    }
}

#[test]
fn a_session_of_two_runs_replays_each_run_in_order() {
    let home = fixture_home();
    let first = home.script(
        "first",
        json!({"turns": [
            {"content": [{"type": "tool_call", "name": "write",
                          "arguments": {"path": "notes.txt", "content": "one\n"}}]},
            {"content": [{"type": "text", "text": "wrote it"}]},
        ]}),
    );
    let second = home.script(
        "second",
        json!({"turns": [
            {"content": [{"type": "tool_call", "name": "bash",
                          "arguments": {"command": "cat notes.txt; echo two >> notes.txt"}}]},
            {"content": [{"type": "text", "text": "appended"}]},
        ]}),
    );
    assert_success(&home.run_script(&["run", "write notes"], &first, &[]));
    let id = home.newest_id();
    assert_success(&home.run_script(&["resume", &id, "append to them"], &second, &[]));
    for extra in [&[][..], &["--live-tools"][..]] {
        let (code, document) = replay(&home, &id, extra);
        assert_eq!(code, Some(0), "{document:#}");
        assert_eq!(document["runs"].as_array().unwrap().len(), 2);
        assert!(
            document["runs"]
                .as_array()
                .unwrap()
                .iter()
                .all(|run| run["state"] == "settled")
        );
    }
}

#[test]
fn an_edited_tool_result_is_reported_at_its_call() {
    let home = fixture_home();
    assert_success(&run_demo(&home, "tool-loop-success", &[], FIX_PROMPT));
    let id = home.newest_id();
    // The first `bash check.sh` printed "= -1"; the edited record says "= -7".
    edit_record(
        &home,
        &id,
        "\"role\":\"tool_result\",\"call_id\":\"call_1_1\"",
        "add 2 3 = -1",
        "add 2 3 = -7",
    );
    let (code, document) = replay(&home, &id, &["--live-tools"]);
    assert_eq!(code, Some(1), "{document:#}");
    let divergence = &document["divergence"];
    assert_eq!(divergence["call_id"], "call_1_1", "{document:#}");
    assert_eq!(divergence["tool_name"], "bash");
    assert_eq!(divergence["pointer"], "/message/content/0/text");
    let text = |side: &str| {
        divergence[side]["message"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(text("recorded").contains("= -7"), "{document:#}");
    assert!(text("replayed").contains("= -1"), "{document:#}");

    // The text form names the call and shows both sides.
    let output = home
        .command(&["replay", &id, "--live-tools"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("replay diverged at entry"), "{stdout}");
    assert!(stdout.contains("tool call call_1_1 (bash)"), "{stdout}");
    assert!(stdout.contains("  recorded: ") && stdout.contains("  replayed: "));
}

#[test]
fn edited_call_arguments_diverge_at_that_call_with_results_from_the_record() {
    let home = fixture_home();
    assert_success(&run_demo(&home, "tool-loop-success", &[], FIX_PROMPT));
    let id = home.newest_id();
    // The recorded `read` of calc.sh now reads README.md: the digest the
    // recorded decision holds was made from the original arguments.
    edit_record(
        &home,
        &id,
        "\"id\":\"call_2_1\",\"name\":\"read\"",
        "\"path\":\"calc.sh\"",
        "\"path\":\"README.md\"",
    );
    let (code, document) = replay(&home, &id, &[]);
    assert_eq!(code, Some(1), "{document:#}");
    let divergence = &document["divergence"];
    assert_eq!(divergence["call_id"], "call_2_1", "{document:#}");
    assert_eq!(divergence["tool_name"], "read");
    assert_eq!(divergence["pointer"], "/decision/arguments_sha256");
    // The served tool saw the recorded call and the replayed one agree
    // (both come from the edited record).
    assert_eq!(document["tool_notes"], json!([]));
}

#[test]
fn live_tools_reproduce_the_tool_loop_workspace_patch() {
    let home = fixture_home();
    let output = run_demo(&home, "tool-loop-success", &[], FIX_PROMPT);
    assert_success(&output);
    let recorded_patch = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["type"] == "workspace_changes")
        .map(|line| line["patch"].as_str().unwrap().to_owned())
        .expect("the run reports its workspace changes");
    assert!(recorded_patch.contains("+  echo $(( $1 + $2 ))"));
    let id = home.newest_id();
    let workspace = std::fs::read(home.workspace().join("calc.sh")).unwrap();

    let (code, document) = replay(&home, &id, &["--live-tools"]);
    assert_eq!(code, Some(0), "{document:#}");
    assert_eq!(document["runs"][0]["patch"], recorded_patch);
    // The run-end snapshots (compared under --live-tools) agree, and the
    // recorded workspace was not touched.
    assert_eq!(
        std::fs::read(home.workspace().join("calc.sh")).unwrap(),
        workspace
    );
    // Served from the record, nothing changes the workspace.
    let (code, document) = replay(&home, &id, &[]);
    assert_eq!(code, Some(0), "{document:#}");
    assert_eq!(document["runs"][0]["patch"], "");
}

#[test]
fn random_bytes_diverge_under_live_tools_at_their_call() {
    let home = Home::new();
    let script = home.script(
        "random",
        json!({"turns": [
            {"content": [{"type": "tool_call", "id": "call_random", "name": "bash",
                          "arguments": {"command": "head -c 16 /dev/urandom | od -x"}}]},
            {"content": [{"type": "text", "text": "done"}]},
        ]}),
    );
    assert_success(&home.run_script(&["run", "print random bytes"], &script, &[]));
    let id = home.newest_id();
    // From the record, the same bytes come back.
    let (code, document) = replay(&home, &id, &[]);
    assert_eq!(code, Some(0), "{document:#}");
    // Run again, the command prints other bytes.
    let (code, document) = replay(&home, &id, &["--live-tools"]);
    assert_eq!(code, Some(1), "{document:#}");
    let divergence = &document["divergence"];
    assert_eq!(divergence["call_id"], "call_random", "{document:#}");
    assert_eq!(divergence["tool_name"], "bash");
    assert_eq!(divergence["recorded"]["message"]["role"], "tool_result");
}

#[test]
fn an_unknown_or_unreadable_session_is_an_error() {
    let home = Home::new();
    let output = home
        .command(&["replay", "no-such-session"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not found"));

    let script = home.script("hello", json!({"turns": common::home::text_turns("hi")}));
    assert_success(&home.run_script(&["run", "hello"], &script, &[]));
    let id = home.newest_id();
    // Damage in the middle of the file (not a torn tail) is not read.
    let path = session_file(&home, &id);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{\"damaged\": true}";
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let output = home.command(&["replay", &id]).output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}
