//! `keel run --image FILE`: the image reaches the request of each wire
//! format (local servers speaking openai-chat, openai-responses and
//! anthropic) as an image block after the text, with the file's exact
//! base64; hostile files (a FIFO, a too-large file, text named `.png`) are
//! refused at startup (exit 2) and no session is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use keel_provider::testing::{Reply, TestServer};
use serde_json::{Value, json};

/// The test image: a PNG signature and a tail (types come from magic bytes).
const PNG: &[u8] = b"\x89PNG\r\n\x1a\nkeel-image-test";
/// `PNG` in standard base64, computed independently of Keel's encoder.
const PNG_BASE64: &str = "iVBORw0KGgprZWVsLWltYWdlLXRlc3Q=";

fn chat_answer() -> Reply {
    let chunk = |delta: Value, finish: Option<&str>| {
        let body = json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {body}\n\n")
    };
    let mut sse = chunk(
        json!({"role": "assistant", "content": "A small image."}),
        None,
    );
    sse += &chunk(json!({}), Some("stop"));
    sse += "data: [DONE]\n\n";
    Reply::sse(&sse)
}

fn responses_answer() -> Reply {
    let events = [
        json!({"type": "response.created", "sequence_number": 0,
               "response": {"id": "resp_1", "object": "response", "status": "in_progress", "model": "m", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
               "content_index": 0, "delta": "A small image."}),
        json!({"type": "response.output_text.done", "item_id": "msg_1", "output_index": 0,
               "content_index": 0, "text": "A small image."}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": "A small image.", "annotations": []}]}}),
        json!({"type": "response.completed",
               "response": {"id": "resp_1", "status": "completed", "model": "m",
                            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                                      "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                                      "total_tokens": 15}}}),
    ];
    let sse: String = events
        .iter()
        .map(|data| {
            format!(
                "event: {}\ndata: {data}\n\n",
                data["type"].as_str().unwrap()
            )
        })
        .collect();
    Reply::sse(&sse)
}

fn anthropic_answer() -> Reply {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let sse = [
        event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": "msg_01", "type": "message", "role": "assistant", "content": [],
                "model": "m", "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "A small image."}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                   "usage": {"output_tokens": 5}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ]
    .concat();
    Reply::sse(&sse)
}

/// A workspace, a config naming `api` at `url`, and an isolated home.
fn setup(api: &str, url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["ws", "home", "sessions"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "[providers.local]\napi = \"{api}\"\nbase_url = \"{url}\"\napi_key_env = \"KEEL_TEST_IMAGES_KEY\"\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("a.png"), PNG).unwrap();
    dir
}

fn keel(dir: &Path, args: &[&str]) -> std::process::Output {
    common::keel_command()
        .args(["run", "--provider", "local", "--model", "m", "-q"])
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--session-dir")
        .arg(dir.join("sessions"))
        .arg("--workspace")
        .arg(dir.join("ws"))
        .args(args)
        .current_dir(dir.join("ws"))
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"))
        .env("XDG_DATA_HOME", dir.join("xdg-data"))
        .env("KEEL_TEST_IMAGES_KEY", "sk-test")
        .env_remove("KEEL_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Runs `keel run --image a.png describe` against a server answering
/// `reply` and returns the one request body it recorded.
fn image_request(api: &str, reply: Reply) -> Value {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(TestServer::start(vec![reply])).unwrap();
    let dir = setup(api, &server.url());
    let image = dir.path().join("a.png");
    let output = keel(
        dir.path(),
        &["--image", image.to_str().unwrap(), "describe"],
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    requests[0].json()
}

/// The content of the body's last user message (`messages` or `input`).
fn last_user_content(items: &Value) -> Value {
    items
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|item| item["role"] == "user")
        .map(|item| item["content"].clone())
        .unwrap()
}

#[test]
fn an_image_prompt_reaches_a_chat_completions_request_as_an_image_part() {
    let body = image_request("openai-chat", chat_answer());
    assert_eq!(
        last_user_content(&body["messages"]),
        json!([
            {"type": "text", "text": "describe"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_BASE64}")}},
        ])
    );
}

#[test]
fn an_image_prompt_reaches_a_responses_request_as_an_input_image() {
    let body = image_request("openai-responses", responses_answer());
    assert_eq!(
        last_user_content(&body["input"]),
        json!([
            {"type": "input_text", "text": "describe"},
            {"type": "input_image", "image_url": format!("data:image/png;base64,{PNG_BASE64}")},
        ])
    );
}

#[test]
fn an_image_prompt_reaches_an_anthropic_request_as_an_image_block() {
    let body = image_request("anthropic", anthropic_answer());
    let content = last_user_content(&body["messages"]);
    // Anthropic's adapter may mark the last block for caching; compare
    // the blocks without their cache marks.
    let blocks: Vec<Value> = content
        .as_array()
        .unwrap()
        .iter()
        .map(|block| {
            let mut block = block.clone();
            block.as_object_mut().unwrap().remove("cache_control");
            block
        })
        .collect();
    assert_eq!(
        Value::Array(blocks),
        json!([
            {"type": "text", "text": "describe"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}},
        ])
    );
}

/// Runs `keel run --image FILE describe` with no server behind it and
/// returns the startup error's code and everything printed; no session
/// may be written.
fn refused(dir: &Path, image: &Path) -> (String, String) {
    let output = keel(dir, &["--image", image.to_str().unwrap(), "describe"]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let sessions: Vec<_> = std::fs::read_dir(dir.join("sessions")).unwrap().collect();
    assert!(sessions.is_empty(), "no session is written: {sessions:?}");
    assert!(
        stderr.contains(&image.display().to_string())
            || stdout.contains(&image.display().to_string()),
        "the error names the file: {stdout}{stderr}"
    );
    let code = stderr
        .rsplit_once('[')
        .and_then(|(_, tail)| tail.split_once(']'))
        .map(|(code, _)| code.to_owned());
    let code = code.unwrap_or_else(|| {
        let line: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
        line["code"].as_str().unwrap().to_owned()
    });
    (code, stdout + &stderr)
}

#[test]
fn a_fifo_is_refused_without_being_read() {
    let dir = setup("openai-chat", "http://127.0.0.1:9");
    let fifo = dir.path().join("pipe.png");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert_eq!(refused(dir.path(), &fifo).0, "image_unreadable");
}

#[test]
fn an_image_over_the_cap_is_refused() {
    let dir = setup("openai-chat", "http://127.0.0.1:9");
    let big = dir.path().join("big.png");
    let mut bytes = PNG.to_vec();
    bytes.resize(10 * 1024 * 1024 + 1, 0);
    std::fs::write(&big, bytes).unwrap();
    assert_eq!(refused(dir.path(), &big).0, "image_too_large");
}

#[test]
fn a_text_file_named_png_is_refused() {
    let dir = setup("openai-chat", "http://127.0.0.1:9");
    let text = dir.path().join("notes.png");
    std::fs::write(&text, "secret text, not an image\n").unwrap();
    let (code, printed) = refused(dir.path(), &text);
    assert_eq!(code, "image_unsupported");
    assert!(!printed.contains("secret text"), "{printed}");
}

#[test]
fn an_image_needs_a_text_prompt_and_a_prompt_taking_input_format() {
    let dir = setup("openai-chat", "http://127.0.0.1:9");
    let image = dir.path().join("a.png");
    let image = image.to_str().unwrap();
    for (args, code) in [
        (vec!["--image", image, "  "], "no_prompt"),
        (
            vec![
                "--image",
                image,
                "--input-format",
                "stream-json",
                "describe",
            ],
            "usage",
        ),
    ] {
        let output = keel(dir.path(), &args);
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(output.status.code(), Some(2), "{printed}");
        assert!(printed.contains(code), "{args:?}: {printed}");
        let sessions: Vec<_> = std::fs::read_dir(dir.path().join("sessions"))
            .unwrap()
            .collect();
        assert!(sessions.is_empty(), "{sessions:?}");
    }
}
