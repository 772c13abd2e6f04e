//! `keel run` as a process against a local OpenAI-compatible server that
//! speaks the Chat Completions SSE format: a multi-turn task that reads,
//! edits and runs a command; the API key reaches only the auth header.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use keel_provider::testing::{Reply, TestServer};
use serde_json::{Value, json};

/// One SSE `data:` line for a Chat Completions chunk.
fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({"id": "c1", "object": "chat.completion.chunk", "model": "local-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {body}\n\n")
}

/// A streamed reply that calls one tool, its arguments split in two deltas.
fn tool_call(id: &str, name: &str, arguments: Value) -> Reply {
    let text = arguments.to_string();
    let (head, tail) = text.split_at(text.len() / 2);
    let mut sse = chunk(
        json!({"role": "assistant", "content": null,
        "tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": head}}]}),
        None,
    );
    sse += &chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": tail}}]}),
        None,
    );
    sse += &chunk(json!({}), Some("tool_calls"));
    sse += "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20,\"total_tokens\":120}}\n\n";
    sse += "data: [DONE]\n\n";
    Reply::sse(&sse)
}

fn answer(text: &str) -> Reply {
    let mut sse = chunk(json!({"role": "assistant", "content": text}), None);
    sse += &chunk(json!({}), Some("stop"));
    sse += "data: [DONE]\n\n";
    Reply::sse(&sse)
}

fn tool_messages(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_multi_turn_task_against_a_local_chat_completions_server() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(TestServer::start(vec![
            tool_call("call_a", "read", json!({"path": "calc.sh"})),
            tool_call("call_b", "edit", json!({"path": "calc.sh", "edits": [{"old_text": "$1 - $2", "new_text": "$1 + $2"}]})),
            tool_call("call_c", "bash", json!({"command": "bash check.sh"})),
            answer("Fixed: add now adds."),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("calc.sh"),
        "add() { echo $(( $1 - $2 )); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("check.sh"),
        "source ./calc.sh\n[ \"$(add 2 3)\" = 5 ] && echo passed || { echo failed; exit 1; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        "[providers.local]\napi = \"openai-chat\"\napi_key_env = \"KEEL_TEST_PROVIDER_KEY\"\n\n[providers.local.models.local-model]\ninput_price = 1.0\noutput_price = 2.0\n",
    )
    .unwrap();
    let secret = "sk-very-secret-4c0ffee";
    // Outside the workspace: Keel refuses a session directory that a
    // sandboxed command could write.
    let sessions = tempfile::tempdir().unwrap();
    let output = common::keel_command()
        .args([
            "run",
            "--output-format",
            "stream-json",
            "--provider",
            "local",
            "--base-url",
            &server.url(),
            "--model",
            "local-model",
            "--mode",
            "full",
        ])
        .arg("--config")
        .arg(dir.path().join("config.toml"))
        .arg("--workspace")
        .arg(dir.path())
        .arg("--session-dir")
        .arg(sessions.path())
        .arg("Make check.sh pass")
        .env("KEEL_TEST_PROVIDER_KEY", secret)
        .env("KEEL_LOG", "debug")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("calc.sh")).unwrap(),
        "add() { echo $(( $1 + $2 )); }\n"
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 4, "one request per turn");
    for request in &requests {
        assert_eq!(request.path, "/chat/completions");
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {secret}").as_str())
        );
        assert_eq!(
            request.header("user-agent"),
            Some(concat!("keel/", env!("CARGO_PKG_VERSION")))
        );
        assert_eq!(request.json()["model"], "local-model");
        assert_eq!(request.json()["stream"], true);
    }
    let last = requests[3].json();
    let results = tool_messages(&last);
    assert_eq!(results.len(), 3, "every tool result went back to the model");
    assert!(
        results[0].contains("$1 - $2") && results[2].contains("passed"),
        "{results:?}"
    );

    // The key is in the auth header and nowhere else.
    assert!(
        !stdout.contains(secret) && !stderr.contains(secret),
        "the key leaked into output"
    );
    // The session files, and the receipts in each session's journal directory.
    let mut paths: Vec<_> = std::fs::read_dir(sessions.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    while let Some(path) = paths.pop() {
        if path.is_dir() {
            paths.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains(secret),
            "the key leaked into {}",
            path.display()
        );
    }
    // Usage events carry the cost from the configured prices: 100 in x $1/M + 20 out x $2/M.
    let usage: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "message_update" && event["delta"]["type"] == "usage")
        .collect();
    assert_eq!(usage.len(), 3);
    let cost = usage[0]["delta"]["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.00014).abs() < 1e-12, "{cost}");
}

#[test]
fn a_missing_key_is_a_startup_error_naming_the_variable() {
    let output = common::keel_command()
        .args([
            "run",
            "--output-format",
            "stream-json",
            "--provider",
            "deepseek",
            "--workspace",
            ".",
            "hello",
        ])
        .env_remove("DEEPSEEK_API_KEY")
        .env("XDG_CONFIG_HOME", "/nonexistent-keel-config")
        .env(
            "XDG_DATA_HOME",
            std::env::temp_dir().join("keel-test-missing-key"),
        )
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let line: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(line["type"], "startup_error");
    assert_eq!(line["code"], "missing_api_key");
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .contains("DEEPSEEK_API_KEY")
    );
}
