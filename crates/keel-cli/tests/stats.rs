//! `keel session stats` as a process: a session's tokens, cost, runs,
//! turns, tool calls and permission decisions, and the store's totals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::home::{Home, assert_success, final_result};
use serde_json::{Value, json};

/// `keel session stats ARGS --output-format json`: the document.
fn stats(home: &Home, args: &[&str]) -> Value {
    home.json(&["session", "stats"], args)
}

#[test]
fn stats_count_what_the_session_records() {
    let home = Home::new();
    let priced = json!({"input_tokens": 1000, "output_tokens": 50, "cache_read_tokens": 200, "cost_usd": 0.004});
    let script = home.script(
        "script",
        json!({"by_history": true, "turns": [
            {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "exit 3"}}], "usage": priced},
            {"content": [{"type": "tool_call", "name": "ls", "arguments": {}}], "usage": priced},
            {"content": [{"type": "text", "text": "done"}], "usage": priced},
            {"content": [{"type": "text", "text": "again"}], "usage": {"input_tokens": 10, "output_tokens": 5}}
        ]}),
    );
    let first = home.run_script(&["run", "--tools", "bash,ls", "go"], &script, &[]);
    let id = final_result(&first)["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = home.run_script(
        &["resume", &id, "--tools", "bash,ls", "and again"],
        &script,
        &[],
    );
    assert_success(&second);

    let one = stats(&home, &[&id[..13]]);
    assert_eq!(one["sessions"], 1);
    assert_eq!(one["runs"], json!({"settled": 2}));
    assert_eq!(one["turns"], 4);
    assert_eq!(one["input_tokens"], 3010);
    assert_eq!(one["output_tokens"], 155);
    assert_eq!(one["cache_read_tokens"], 600);
    assert!(
        (one["cost_usd"].as_f64().unwrap() - 0.012).abs() < 1e-9,
        "{one}"
    );
    assert_eq!(one["turns_without_cost"], 1);
    assert_eq!(one["tool_calls"]["bash"], json!({"calls": 1, "failed": 1}));
    assert_eq!(one["tool_calls"]["ls"], json!({"calls": 1, "failed": 0}));
    assert_eq!(one["permissions"]["by_policy"], 2, "{one}");
    assert_eq!(one["permissions"]["asked"], 0);
    assert_eq!(one["compactions"], 0);

    let text = home.command(&["session", "stats", &id]).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    for shown in [
        "2 runs (2 settled)",
        "turns        4",
        "$0.0120 (1 turn without prices)",
        "bash 1 (1 failed), ls 1",
    ] {
        assert!(text.contains(shown), "{shown:?} missing: {text}");
    }

    let other = home.script("other", json!({"turns": common::home::text_turns("x")}));
    let output = home.run_script(&["run", "other"], &other, &[]);
    assert_eq!(output.status.code(), Some(0));
    let all = stats(&home, &["--all"]);
    assert_eq!(all["sessions"], 2);
    assert_eq!(all["turns"], 5);
    assert_eq!(all["runs"], json!({"settled": 3}));
    // Neither a session nor --all: a usage error.
    let neither = home.command(&["session", "stats"]).output().unwrap();
    assert_eq!(neither.status.code(), Some(2));
}
