//! The terminal view escapes control characters: `keel run` on a pseudo
//! terminal (util-linux `script`), where it prints its human view, with a
//! model whose text and a `bash` call whose output carry OSC 52 (write the
//! clipboard) and SGR 8 (hide text). Judged by the bytes that reached the
//! terminal: neither sequence arrives raw, both are shown escaped.
//! docs/security.md lists this case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::json;

/// Quotes `text` for `sh -c`.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[test]
fn osc_52_and_sgr_8_reach_the_terminal_escaped() {
    if Command::new("script").arg("--version").output().is_err() {
        panic!("util-linux `script` is needed to give keel a terminal");
    }
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let command = "printf '\\033]52;c;Q0xJUEJPQVJE\\007 shown \\033[8mHIDDEN-TOOL\\033[0m\\n'";
    let script = json!({"turns": [
        {"content": [
            {"type": "text", "text": "model says \u{1b}]52;c;TU9ERUw=\u{7} and \u{1b}[8mHIDDEN-MODEL\u{1b}[0m \u{9b}31m"},
            {"type": "tool_call", "name": "bash", "arguments": {"command": command}}
        ]},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let script_path = base.path().join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let keel = assert_cmd::cargo::cargo_bin!("keel");
    let line = [
        keel.display().to_string(),
        "run".into(),
        "--provider".into(),
        "scripted".into(),
        "--mode".into(),
        "auto".into(),
        "--script".into(),
        script_path.display().to_string(),
        "--workspace".into(),
        ws.display().to_string(),
        "--session-dir".into(),
        base.path().join("sessions").display().to_string(),
        "show me".into(),
    ]
    .iter()
    .map(|arg| quoted(arg))
    .collect::<Vec<_>>()
    .join(" ");
    let output = Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env("XDG_DATA_HOME", base.path().join("data"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(screen.contains("HIDDEN-TOOL"), "no human view: {screen:?}");
    for raw in ["\u{1b}]52", "\u{1b}[8m", "\u{7}", "\u{9b}"] {
        assert!(
            !screen.contains(raw),
            "{raw:?} reached the terminal: {screen:?}"
        );
    }
    for shown in [
        "\\x1b]52;c;TU9ERUw=\\x07",
        "\\x1b[8mHIDDEN-MODEL",
        "\\u{9b}31m",
        "\\x1b]52;c;Q0xJUEJPQVJE\\x07",
        "\\x1b[8mHIDDEN-TOOL",
    ] {
        assert!(screen.contains(shown), "{shown} not shown: {screen:?}");
    }
}
