//! The configuration's layers as `keel` resolves them, as processes against
//! local Chat Completions servers: a profile or `-c provider=…` that
//! switches provider sends that provider's default model (never the model or
//! alias the layer below paired with another provider), and
//! `keel session compact` resolves config.toml, `--profile` and `-c` exactly
//! as `keel run` does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use keel_provider::testing::{Reply, TestServer};
use serde_json::json;

/// A streamed Chat Completions answer.
fn answer(text: &str) -> Reply {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        let body = json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {body}\n\n")
    };
    let mut sse = chunk(json!({"role": "assistant", "content": text}), None);
    sse += &chunk(json!({}), Some("stop"));
    sse += "data: [DONE]\n\n";
    Reply::sse(&sse)
}

const SUMMARY: &str = "## Goal\n- answer\n## Constraints and preferences\n- none\n## Done and verified\n- one answer\n## In progress\n- none\n## Blocked\n- none\n## Key decisions\n- none\n## Exact files, symbols, commands and errors\n- none\n## Next steps\n- none";

/// config.toml: the default provider `other` (unreachable) with a model
/// alias; profiles that switch to `local` (with or without a model) and to
/// `second`; `local` and `second` at the test's servers.
fn config(dir: &Path, local: &str, second: &str) {
    let text = format!(
        r#"
provider = "other"
model = "coder"

[profiles.switch]
provider = "local"

[profiles.second]
provider = "second"

[providers.other]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "KEEL_TEST_LAYERS_KEY"
[providers.other.aliases]
coder = "other-coder"

[providers.local]
api = "openai-chat"
base_url = "{local}"
api_key_env = "KEEL_TEST_LAYERS_KEY"
default_model = "local-default"

[providers.second]
api = "openai-chat"
base_url = "{second}"
api_key_env = "KEEL_TEST_LAYERS_KEY"
default_model = "second-default"
"#
    );
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

fn keel(dir: &Path, args: &[&str]) -> std::process::Output {
    common::keel_command()
        .args(args)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--session-dir")
        .arg(dir.join("sessions"))
        .current_dir(dir.join("ws"))
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"))
        .env("XDG_DATA_HOME", dir.join("xdg-data"))
        .env("KEEL_TEST_LAYERS_KEY", "sk-test")
        .env_remove("KEEL_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn models(server: &TestServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|request| request.json()["model"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn a_profile_or_override_that_switches_provider_sends_that_providers_default_model() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let local = runtime
        .block_on(TestServer::start(vec![
            answer("one"),
            answer("two"),
            answer("three"),
        ]))
        .unwrap();
    let second = runtime.block_on(TestServer::start(vec![])).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    config(dir.path(), &local.url(), &second.url());

    for args in [
        &["--profile", "switch"][..],
        &["-c", "provider=local"][..],
        &["--profile", "second", "-c", "provider=local"][..],
    ] {
        let mut all = vec!["run", "-q"];
        all.extend_from_slice(args);
        all.push("hello");
        let output = keel(dir.path(), &all);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(
        models(&local),
        ["local-default", "local-default", "local-default"]
    );
    assert!(second.requests().is_empty());
}

/// The ids of the sessions under `dir` (the stems of its `.jsonl` files).
fn session_ids(dir: &Path) -> Vec<String> {
    let mut ids = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|ext| ext == "jsonl") {
                ids.push(path.file_stem().unwrap().to_string_lossy().into_owned());
            }
        }
    }
    ids.sort();
    ids
}

fn succeeded(output: &std::process::Output) -> bool {
    if output.status.code() != Some(0) {
        eprintln!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output.status.code() == Some(0)
}

#[test]
fn session_compact_resolves_profiles_and_overrides_as_run_does() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let local = runtime
        .block_on(TestServer::start(vec![answer("first"), answer("second")]))
        .unwrap();
    // Where `-c` points `local` for the compaction.
    let moved = runtime
        .block_on(TestServer::start(vec![answer(SUMMARY)]))
        .unwrap();
    let second = runtime
        .block_on(TestServer::start(vec![answer(SUMMARY)]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    config(dir.path(), &local.url(), &second.url());

    // Two sessions whose prompt is what a summary replaces.
    let prompt = format!(
        "first: {}",
        "keep this long note about the answers in mind; ".repeat(40)
    );
    for _ in 0..2 {
        let output = keel(dir.path(), &["run", "-q", "--profile", "switch", &prompt]);
        assert!(succeeded(&output));
    }
    let ids = session_ids(&dir.path().join("sessions"));
    assert_eq!(ids.len(), 2, "{ids:?}");

    // The session's own provider (`local`), at the address `-c` gives it.
    let url = format!("providers.local.base_url={}", moved.url());
    let output = keel(dir.path(), &["session", "compact", &ids[0], "-c", &url]);
    assert!(succeeded(&output));
    assert_eq!(models(&moved), ["local-default"]);
    assert_eq!(local.requests().len(), 2, "only the runs' requests");

    // A profile that chooses another provider wins over the session's.
    let output = keel(
        dir.path(),
        &["session", "compact", &ids[1], "--profile", "second"],
    );
    assert!(succeeded(&output));
    assert_eq!(models(&second), ["second-default"]);
}
