//! No secrets in entries: a model calls `bash` with credentials in URLs
//! (`https://user:TOKEN@host/?access_token=…`, a token in a clone URL, in a
//! fragment, after `--url=`); in `plan`, `ask` and `auto` (the host denying
//! by closing its input) every file of the session directory is scanned for
//! the secrets. Only the assistant's own tool-call arguments — the model's
//! words, which it needs in its history — may hold them. The host's
//! permission request still says why it is asked (the analysis's reasons,
//! redacted). docs/security.md lists this case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use serde_json::{Value, json};

const SECRETS: [&str; 4] = [
    "TOKEN-5e1f-userinfo",
    "SECRET-77aa-query",
    "TOKEN-0b3c-clone",
    "SECRET-9d0e-fragment",
];

const COMMANDS: [&str; 4] = [
    "curl -s https://user:TOKEN-5e1f-userinfo@api.example.invalid/v1/items?access_token=SECRET-77aa-query",
    "git clone https://x-access-token:TOKEN-0b3c-clone@git.example.invalid/o/r.git",
    "wget -q 'https://files.example.invalid/f.tgz#SECRET-9d0e-fragment'",
    "curl --url=https://TOKEN-5e1f-userinfo@api.example.invalid/ -d key=SECRET-77aa-query",
];

fn run(base: &Path, mode: &str) -> String {
    let calls: Vec<Value> = COMMANDS
        .iter()
        .map(|command| json!({"type": "tool_call", "name": "bash", "arguments": {"command": command}}))
        .collect();
    let script = json!({"turns": [
        {"content": calls},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let script_path = base.join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let output = common::keel_command()
        .args([
            "run",
            "--output-format",
            "stream-json",
            "--provider",
            "scripted",
            "--mode",
            mode,
        ])
        .arg("--script")
        .arg(&script_path)
        .arg("--workspace")
        .arg(base.join("ws"))
        .arg("--session-dir")
        .arg(base.join("sessions"))
        .env("XDG_DATA_HOME", base.join("data"))
        .stdin(std::process::Stdio::null())
        .arg("fetch the items")
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Removes the assistant's tool-call arguments (the model's own words).
fn without_call_arguments(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) == Some("tool_call") {
                map.remove("arguments");
                map.remove("arguments_raw");
            }
            map.values_mut().for_each(without_call_arguments);
        }
        Value::Array(items) => items.iter_mut().for_each(without_call_arguments),
        _ => {}
    }
}

#[test]
fn no_entry_stores_a_secret_from_a_command() {
    for mode in ["plan", "ask", "auto"] {
        let base = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(base.path().join("ws")).unwrap();
        let printed = run(base.path(), mode);
        assert!(
            printed.contains("\"type\":\"run_settled\""),
            "{mode}: {printed}"
        );

        let mut scanned_entries = 0;
        let mut decisions = 0;
        for file in std::fs::read_dir(base.path().join("sessions")).unwrap() {
            let path = file.unwrap().path();
            if path.is_dir() && path.extension().is_some_and(|e| e == "snapshots") {
                // Workspace snapshots: every object is scanned as it is.
                let mut objects = vec![path.clone()];
                while let Some(dir) = objects.pop() {
                    for item in std::fs::read_dir(&dir).unwrap() {
                        let item = item.unwrap().path();
                        if item.is_dir() {
                            objects.push(item);
                            continue;
                        }
                        let bytes =
                            String::from_utf8_lossy(&std::fs::read(&item).unwrap()).into_owned();
                        for secret in SECRETS {
                            assert!(
                                !bytes.contains(secret),
                                "{mode}: {} stores {secret}",
                                item.display()
                            );
                        }
                    }
                }
                continue;
            }
            if path.is_dir() {
                // A session's journal: its commands' receipts are deleted
                // once their results are stored (and scanned here).
                let left: Vec<_> = std::fs::read_dir(&path).unwrap().collect();
                assert!(left.is_empty(), "{mode}: receipts left: {left:?}");
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines() {
                let mut record: Value = serde_json::from_str(line).unwrap();
                if record["r"]["type"] == "entry" {
                    scanned_entries += 1;
                    if record["r"]["entry"]
                        .to_string()
                        .contains("permission_decision")
                    {
                        decisions += 1;
                    }
                }
                without_call_arguments(&mut record);
                let shown = record.to_string();
                for secret in SECRETS {
                    assert!(
                        !shown.contains(secret),
                        "{mode}: {} stores {secret}: {shown}",
                        path.display()
                    );
                }
            }
        }
        assert!(scanned_entries > 4, "{mode}: {scanned_entries} entries");
        assert!(decisions >= COMMANDS.len(), "{mode}: {decisions} decisions");

        // The host is told why it is asked, without the secrets.
        if mode != "plan" {
            let requests: Vec<Value> = printed
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .filter(|event| event["type"] == "permission_requested")
                .collect();
            assert_eq!(requests.len(), COMMANDS.len(), "{mode}: {printed}");
            let reason = requests[0]["reason"].as_str().unwrap();
            assert!(
                reason.contains("`https://api.example.invalid/v1/items` is a network address"),
                "{mode}: {reason}"
            );
            for request in &requests {
                let mut request = request.clone();
                request.as_object_mut().unwrap().remove("arguments");
                for secret in SECRETS {
                    assert!(!request.to_string().contains(secret), "{mode}: {request}");
                }
            }
        }
    }
}
