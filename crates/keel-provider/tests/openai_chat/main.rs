//! The Chat Completions adapter against a local server speaking its wire
//! format: requests as sent, streams as parsed, failures as classified.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use std::sync::Arc;

use keel_protocol::{
    AssistantMessage, ContentBlock, ImageContent, Message, ProviderErrorKind, ProviderEvent,
    StopReason, ToolCall, ToolResultMessage, ToolSpec, ToolStatus, Usage, UserContent, UserMessage,
};
use keel_provider::conformance::{self, WireAdapter};
use keel_provider::openai_chat::{ChatFormat, ChatOptions, OpenAiChat};
use keel_provider::testing::{
    RecordedRequest, Reply, TestServer, assemble, last_error, rechunk, replay_now,
};
use keel_provider::{Endpoint, ModelRequest, Provider};
use proptest::prelude::*;
use serde_json::{Value, json};

mod parser;

const MODEL: &str = "deepseek-chat";
const DONE: &str = "data: [DONE]\n\n";

// ---------------------------------------------------------------- helpers

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }],
        "usage": null,
    })
}

fn usage_chunk(usage: Value) -> Value {
    json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": MODEL, "choices": [], "usage": usage })
}

fn sse(chunks: &[Value]) -> String {
    chunks
        .iter()
        .map(|chunk| format!("data: {chunk}\n\n"))
        .collect()
}

fn user_request(text: &str) -> ModelRequest {
    {
        let mut model_request = ModelRequest::new(
            MODEL,
            String::new(),
            vec![Message::User(UserMessage::text(text)).into()],
        );
        model_request.tools = vec![];
        model_request.max_output_tokens = None;
        model_request
    }
}

fn simple_body(text: &str) -> Value {
    json!({
        "model": MODEL,
        "messages": [{ "role": "user", "content": text }],
        "stream": true,
        "stream_options": { "include_usage": true },
    })
}

fn adapter(server: &TestServer, options: ChatOptions) -> OpenAiChat {
    OpenAiChat::new(
        Endpoint::new("test", server.url(), Some("sk-test".into())),
        options,
    )
}

async fn collect(provider: &OpenAiChat, request: ModelRequest) -> Vec<ProviderEvent> {
    keel_provider::testing::collect(provider, request, Duration::from_secs(10)).await
}

/// Every request went to `/chat/completions` with the key, carrying `bodies`.
fn assert_sent(server: &TestServer, bodies: &[Value]) {
    let requests = server.requests();
    assert_eq!(requests.len(), bodies.len(), "number of requests");
    for (request, body) in requests.iter().zip(bodies) {
        assert_sent_with(request, "sk-test", body);
    }
}

fn assert_sent_with(request: &RecordedRequest, key: &str, body: &Value) {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/chat/completions");
    let bearer = format!("Bearer {key}");
    assert_eq!(request.header("authorization"), Some(bearer.as_str()));
    assert_eq!(
        request.header("user-agent"),
        Some(keel_provider::endpoint::USER_AGENT)
    );
    assert!(keel_provider::endpoint::USER_AGENT.starts_with("keel/"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(&request.json(), body);
}

// ------------------------------------------------------------ conformance

/// The Chat Completions wire format, for the shared adapter suite.
struct Chat;

impl WireAdapter for Chat {
    fn name(&self) -> &str {
        "openai_chat"
    }

    fn provider(&self, endpoint: Endpoint) -> Arc<dyn Provider> {
        Arc::new(OpenAiChat::new(endpoint, ChatOptions::default()))
    }

    fn request(&self) -> ModelRequest {
        user_request("q")
    }

    fn check_request(&self, recorded: &RecordedRequest, key: &str) {
        assert_sent_with(recorded, key, &simple_body("q"));
    }

    fn response_id(&self) -> Option<String> {
        Some("chatcmpl-1".into())
    }

    fn stream_head(&self, text: &str) -> String {
        sse(&[chunk(json!({ "content": text }), None)])
    }

    fn text_stream(&self, text: &str) -> String {
        self.stream_head(text) + &sse(&[chunk(json!({}), Some("stop"))]) + DONE
    }

    fn stream_error(&self, error_type: &str, message: &str) -> String {
        sse(&[json!({ "error": { "message": message, "type": error_type } })])
    }

    fn error_body(&self, error_type: &str, message: &str) -> String {
        json!({ "error": { "message": message, "type": error_type, "param": null, "code": null } })
            .to_string()
    }

    fn overflow_message(&self) -> &str {
        "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens."
    }
}

#[tokio::test]
async fn the_adapter_passes_the_conformance_suite() {
    conformance::run_all(&Chat).await;
}

// ------------------------------------------------------------------ tests

#[tokio::test]
async fn streams_text_with_usage_and_done() {
    let body = sse(&[
        chunk(json!({ "role": "assistant", "content": "" }), None),
        chunk(json!({ "content": "Hel" }), None),
        chunk(json!({ "content": "lo" }), None),
        chunk(json!({}), Some("stop")),
        usage_chunk(json!({ "prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14 })),
    ]) + DONE;
    let server = TestServer::start(vec![Reply::sse(&body)]).await.unwrap();
    let events = collect(
        &adapter(&server, ChatOptions::default()),
        user_request("hi"),
    )
    .await;
    assert_eq!(
        events,
        [
            ProviderEvent::Start {
                model: Some(MODEL.into()),
                response_id: Some("chatcmpl-1".into()),
            },
            ProviderEvent::TextStart { index: 0 },
            ProviderEvent::TextDelta {
                index: 0,
                delta: "Hel".into()
            },
            ProviderEvent::TextDelta {
                index: 0,
                delta: "lo".into()
            },
            ProviderEvent::TextEnd { index: 0 },
            ProviderEvent::Usage {
                usage: {
                    let mut usage = Usage::default();
                    usage.input_tokens = 12;
                    usage.output_tokens = 2;
                    usage
                }
            },
            ProviderEvent::Done {
                stop_reason: StopReason::Stop
            },
        ]
    );
    assert_sent(&server, &[simple_body("hi")]);
}

#[tokio::test]
async fn deepseek_reasoning_becomes_thinking_and_is_never_sent_back() {
    let reasoning = "Compare 9.11 and 9.80 — the tenths decide.";
    let first = sse(&[
        chunk(
            json!({ "role": "assistant", "content": null, "reasoning_content": "" }),
            None,
        ),
        chunk(
            json!({ "content": null, "reasoning_content": &reasoning[..18] }),
            None,
        ),
        chunk(
            json!({ "content": null, "reasoning_content": &reasoning[18..] }),
            None,
        ),
        chunk(json!({ "content": "9.8", "reasoning_content": null }), None),
        chunk(json!({ "content": "" }), Some("stop")),
        usage_chunk(json!({
            "prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42,
            "prompt_cache_hit_tokens": 8, "prompt_cache_miss_tokens": 4,
            "completion_tokens_details": { "reasoning_tokens": 25 },
        })),
    ]) + DONE;
    let second = sse(&[chunk(json!({ "content": "ok" }), Some("stop"))]) + DONE;
    let server = TestServer::start(vec![Reply::sse(&first), Reply::sse(&second)])
        .await
        .unwrap();
    let provider = adapter(&server, ChatOptions::default());
    let events = collect(&provider, user_request("9.11 or 9.8?")).await;
    assert_eq!(
        events[1..4],
        [
            ProviderEvent::ThinkingStart { index: 0 },
            ProviderEvent::ThinkingDelta {
                index: 0,
                delta: reasoning[..18].into()
            },
            ProviderEvent::ThinkingDelta {
                index: 0,
                delta: reasoning[18..].into()
            },
        ]
    );
    assert_eq!(
        events[4..],
        [
            ProviderEvent::ThinkingEnd {
                index: 0,
                signature: None
            },
            ProviderEvent::TextStart { index: 1 },
            ProviderEvent::TextDelta {
                index: 1,
                delta: "9.8".into()
            },
            ProviderEvent::TextEnd { index: 1 },
            ProviderEvent::Usage {
                usage: {
                    let mut usage = Usage::default();
                    usage.input_tokens = 4;
                    usage.output_tokens = 30;
                    usage.cache_read_tokens = 8;
                    usage.cache_write_tokens = 0;
                    usage.cost_usd = None;
                    usage
                }
            },
            ProviderEvent::Done {
                stop_reason: StopReason::Stop
            },
        ]
    );
    let answer = assemble(&events);
    assert_eq!(
        answer.content[0],
        ContentBlock::Thinking {
            thinking: reasoning.into(),
            signature: None
        }
    );

    let mut next = user_request("9.11 or 9.8?");
    next.messages.push(Message::Assistant(answer).into());
    next.messages
        .push(Message::User(UserMessage::text("Why?")).into());
    collect(&provider, next).await;
    let sent = &server.requests()[1];
    assert!(!sent.body.contains("reasoning"), "{}", sent.body);
    assert!(!sent.body.contains("tenths"), "{}", sent.body);
    let mut expected = simple_body("9.11 or 9.8?");
    expected["messages"] = json!([
        { "role": "user", "content": "9.11 or 9.8?" },
        { "role": "assistant", "content": "9.8" },
        { "role": "user", "content": "Why?" },
    ]);
    assert_sent(&server, &[simple_body("9.11 or 9.8?"), expected]);
}

#[tokio::test]
async fn parallel_tool_calls_survive_awkward_splits() {
    // Call 0's fragments split inside `\u00e9` and between `\` and `"`.
    let read_parts = [r#"{"path":"caf\u00"#, r#"e9 \"#, r#""q\".txt"}"#];
    let note_parts = ["{\"text\":\"naï", "ve — 東京\"}"];
    let call = |index: u64, id: Option<&str>, name: Option<&str>, arguments: &str| {
        let mut function = json!({ "arguments": arguments });
        let mut entry = json!({ "index": index });
        if let (Some(id), Some(name)) = (id, name) {
            function["name"] = json!(name);
            entry["id"] = json!(id);
            entry["type"] = json!("function");
        }
        entry["function"] = function;
        chunk(json!({ "tool_calls": [entry] }), None)
    };
    let text = sse(&[
        chunk(json!({ "role": "assistant", "content": null }), None),
        call(0, Some("call_a"), Some("read"), ""),
        call(0, None, None, read_parts[0]),
        call(0, None, None, read_parts[1]),
        call(0, None, None, read_parts[2]),
        call(1, Some("call_b"), Some("note"), note_parts[0]),
        call(1, None, None, note_parts[1]),
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(json!({ "prompt_tokens": 50, "completion_tokens": 20,
            "prompt_tokens_details": { "cached_tokens": 0 } })),
    ]) + DONE;
    // Split the bytes inside the three-byte `東`, sent 50 ms apart.
    let bytes = text.as_bytes();
    let split = text.find('東').unwrap() + 1;
    let reply = Reply::Sse {
        chunks: vec![
            (Duration::ZERO, bytes[..split].to_vec()),
            (Duration::from_millis(50), bytes[split..].to_vec()),
        ],
    };
    let server = TestServer::start(vec![reply]).await.unwrap();
    let mut request = user_request("read it and note it");
    request.tools = vec![ToolSpec::new(
        "read",
        "Read a file.",
        json!({ "type": "object", "properties": { "path": { "type": "string" } } }),
    )];
    let events = collect(&adapter(&server, ChatOptions::default()), request).await;

    let delta = |index: usize, part: &str| ProviderEvent::ToolCallDelta {
        index,
        delta: part.into(),
    };
    assert_eq!(
        events[1..10],
        [
            ProviderEvent::ToolCallStart {
                index: 0,
                id: "call_a".into(),
                name: "read".into()
            },
            delta(0, read_parts[0]),
            delta(0, read_parts[1]),
            delta(0, read_parts[2]),
            ProviderEvent::ToolCallStart {
                index: 1,
                id: "call_b".into(),
                name: "note".into()
            },
            delta(1, note_parts[0]),
            delta(1, note_parts[1]),
            ProviderEvent::ToolCallEnd { index: 0 },
            ProviderEvent::ToolCallEnd { index: 1 },
        ]
    );
    let message = assemble(&events);
    assert_eq!(message.stop_reason, StopReason::ToolUse);
    let arguments: Vec<&Value> = message.tool_calls().map(|call| &call.arguments).collect();
    assert_eq!(
        arguments,
        [
            &json!({ "path": "café \"q\".txt" }),
            &json!({ "text": "naïve — 東京" })
        ]
    );
    let mut expected = simple_body("read it and note it");
    expected["tools"] = json!([{ "type": "function", "function": {
        "name": "read", "description": "Read a file.",
        "parameters": { "type": "object", "properties": { "path": { "type": "string" } } },
    } }]);
    assert_sent(&server, &[expected]);
}

#[tokio::test]
async fn usage_splits_cached_tokens_out_of_the_prompt() {
    let body = sse(&[
        chunk(json!({ "content": "x" }), Some("length")),
        usage_chunk(json!({
            "prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
            "prompt_tokens_details": { "cached_tokens": 1920, "audio_tokens": 0 },
        })),
    ]) + DONE;
    let server = TestServer::start(vec![Reply::sse(&body)]).await.unwrap();
    let events = collect(&adapter(&server, ChatOptions::default()), user_request("u")).await;
    let tail = &events[events.len() - 2..];
    assert_eq!(
        tail,
        [
            ProviderEvent::Usage {
                usage: {
                    let mut usage = Usage::default();
                    usage.input_tokens = 86;
                    usage.output_tokens = 300;
                    usage.cache_read_tokens = 1920;
                    usage.cache_write_tokens = 0;
                    usage.cost_usd = None;
                    usage
                }
            },
            ProviderEvent::Done {
                stop_reason: StopReason::Length
            },
        ]
    );
    assert_sent(&server, &[simple_body("u")]);
}

#[tokio::test]
async fn a_finished_stream_without_done_marker_still_completes() {
    let body = sse(&[
        chunk(json!({ "content": "hi" }), None),
        chunk(json!({}), Some("stop")),
    ]);
    let server = TestServer::start(vec![Reply::sse(&body)]).await.unwrap();
    let events = collect(
        &adapter(&server, ChatOptions::default()),
        user_request("hi"),
    )
    .await;
    assert_eq!(
        events[events.len() - 2..],
        [
            ProviderEvent::TextEnd { index: 0 },
            ProviderEvent::Done {
                stop_reason: StopReason::Stop
            }
        ]
    );
    assert_sent(&server, &[simple_body("hi")]);
}

#[tokio::test]
async fn the_request_body_matches_the_snapshot() {
    let body = sse(&[chunk(json!({ "content": "Done." }), Some("stop"))]) + DONE;
    let server = TestServer::start(vec![Reply::sse(&body)]).await.unwrap();
    collect(
        &adapter(&server, ChatOptions::default()),
        representative_request(),
    )
    .await;
    let expected = json!({
        "model": MODEL,
        "stream": true,
        "stream_options": { "include_usage": true },
        "max_tokens": 4096,
        "messages": [
            { "role": "system", "content": "You are Keel." },
            { "role": "user", "content": [
                { "type": "text", "text": "What does this screenshot show?" },
                { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=" } },
            ] },
            { "role": "assistant", "content": "Let me look at the code.", "tool_calls": [
                { "id": "call_1", "type": "function",
                  "function": { "name": "read", "arguments": "{\"path\":\"src/main.rs\"}" } },
                { "id": "call_2", "type": "function",
                  "function": { "name": "screenshot", "arguments": "{}" } },
            ] },
            { "role": "tool", "tool_call_id": "call_1", "content": "fn main() {}" },
            { "role": "tool", "tool_call_id": "call_2", "content": "(the result is the image attached below)" },
            { "role": "user", "content": [
                { "type": "text", "text": "Image(s) from the result of tool call call_2:" },
                { "type": "image_url", "image_url": { "url": "data:image/jpeg;base64,/9j/4AAQ" } },
            ] },
            { "role": "user", "content": "Thanks." },
        ],
        "tools": [
            { "type": "function", "function": {
                "name": "read",
                "description": "Read a file.",
                "parameters": { "type": "object", "properties": { "path": { "type": "string" } }, "required": ["path"] },
            } },
        ],
    });
    assert_sent(&server, &[expected]);
}

fn representative_request() -> ModelRequest {
    let image = |mime: &str, data: &str| UserContent::Image(ImageContent::new(mime, data));
    let result = |id: &str, name: &str, content: Vec<UserContent>| {
        Message::ToolResult({
            let mut tool_result_message =
                ToolResultMessage::new(id, name, ToolStatus::Success, content);
            tool_result_message.error = None;
            tool_result_message.details = None;
            tool_result_message
        })
    };
    let assistant = {
        let mut assistant_message = AssistantMessage::default();
        assistant_message.content = vec![
            ContentBlock::Thinking {
                thinking: "The user wants the code.".into(),
                signature: None,
            },
            ContentBlock::Text {
                text: "Let me look at the code.".into(),
            },
            ContentBlock::ToolCall(ToolCall::new(
                "call_1",
                "read",
                json!({ "path": "src/main.rs" }),
            )),
            ContentBlock::ToolCall(ToolCall::new("call_2", "screenshot", json!({}))),
        ];
        assistant_message.stop_reason = StopReason::ToolUse;
        assistant_message
    };
    {
        let mut model_request = ModelRequest::new(
            MODEL,
            "You are Keel.",
            [
                Message::User(UserMessage::new(vec![
                    UserContent::Text {
                        text: "What does this screenshot show?".into(),
                    },
                    image("image/png", "iVBORw0KGgo="),
                ])),
                Message::Assistant(assistant),
                result(
                    "call_1",
                    "read",
                    vec![UserContent::Text {
                        text: "fn main() {}".into(),
                    }],
                ),
                result(
                    "call_2",
                    "screenshot",
                    vec![image("image/jpeg", "/9j/4AAQ")],
                ),
                Message::User(UserMessage::text("Thanks.")),
            ]
            .map(std::sync::Arc::new)
            .into(),
        );
        model_request.tools = vec![ToolSpec::new(
            "read",
            "Read a file.",
            json!({ "type": "object", "properties": { "path": { "type": "string" } }, "required": ["path"] }),
        )];
        model_request.max_output_tokens = Some(4096);
        model_request
    }
}

#[test]
fn options_rename_the_limit_and_send_reasoning_back() {
    let endpoint = Endpoint::new("vllm", "http://127.0.0.1:1", None);
    let options = {
        let mut chat_options = ChatOptions::default();
        chat_options.send_reasoning_back = true;
        chat_options.max_tokens_field = "max_completion_tokens";
        chat_options
    };
    let provider = OpenAiChat::new(endpoint, options);
    assert_eq!(provider.name(), "vllm");
    let body = provider.request_body(&representative_request());
    assert_eq!(body["max_completion_tokens"], json!(4096));
    assert!(body.get("max_tokens").is_none());
    assert_eq!(
        body["messages"][2]["reasoning_content"],
        json!("The user wants the code.")
    );
}
