//! The Anthropic Messages adapter against a local server speaking its wire
//! format: request bodies and headers, stream parsing, errors, timeouts and
//! cancellation, and robustness to any re-chunking of the byte stream.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use keel_protocol::{
    AssistantMessage, ContentBlock, ImageContent, Message, ProviderErrorKind, ProviderEvent,
    StopReason, ToolCall, ToolErrorCode, ToolResultError, ToolResultMessage, ToolSpec, ToolStatus,
    Usage, UserContent, UserMessage,
};
use keel_provider::anthropic::{
    Anthropic, AnthropicFormat, AnthropicOptions, REDACTED_THINKING_PREFIX,
};
use keel_provider::conformance::{self, WireAdapter};
use keel_provider::http::HttpTimeouts;
use keel_provider::testing::{RecordedRequest, Reply, TestServer, assemble, last_error, rechunk};
use keel_provider::{Endpoint, ModelRequest, Provider};
use proptest::prelude::*;
use serde_json::{Value, json};

mod parser;
mod request;

// ---------------------------------------------------------------------------
// Transcript builders

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn message_start(usage: Value) -> String {
    event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_01", "type": "message", "role": "assistant", "content": [],
            "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null,
            "usage": usage,
        }}),
    )
}

fn block_start(index: usize, block: Value) -> String {
    event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn delta(index: usize, delta: Value) -> String {
    event(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn text_delta(index: usize, text: &str) -> String {
    delta(index, json!({"type": "text_delta", "text": text}))
}

fn json_delta(index: usize, partial: &str) -> String {
    delta(
        index,
        json!({"type": "input_json_delta", "partial_json": partial}),
    )
}

fn block_stop(index: usize) -> String {
    event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

fn message_delta(stop_reason: &str, output_tokens: u64) -> String {
    event(
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": output_tokens}}),
    )
}

fn message_stop() -> String {
    event("message_stop", json!({"type": "message_stop"}))
}

fn ping() -> String {
    event("ping", json!({"type": "ping"}))
}

fn small_usage() -> Value {
    json!({"input_tokens": 10, "output_tokens": 1})
}

/// A plain text answer: "Hello, world".
fn text_transcript() -> String {
    [
        message_start(small_usage()),
        block_start(0, json!({"type": "text", "text": ""})),
        ping(),
        text_delta(0, "Hello"),
        text_delta(0, ", world"),
        block_stop(0),
        message_delta("end_turn", 5),
        message_stop(),
    ]
    .concat()
}

// ---------------------------------------------------------------------------
// Harness

fn provider(server: &TestServer, options: AnthropicOptions) -> Anthropic {
    let endpoint = Endpoint::new("anthropic", server.url(), Some("sk-ant-test".into()));
    Anthropic::new(endpoint, options)
}

fn request(messages: Vec<Message>) -> ModelRequest {
    {
        let mut model_request = ModelRequest::new(
            "claude-sonnet-4-5",
            String::new(),
            messages.into_iter().map(Arc::new).collect(),
        );
        model_request.tools = Vec::new();
        model_request.max_output_tokens = None;
        model_request
    }
}

fn ask(text: &str) -> ModelRequest {
    request(vec![Message::User(UserMessage::text(text))])
}

async fn collect(provider: &Anthropic, request: ModelRequest) -> Vec<ProviderEvent> {
    keel_provider::testing::collect(provider, request, Duration::from_secs(20)).await
}

/// Serves `reply` to one request (default options) and returns its events
/// and the recorded request, whose path and headers are already checked.
async fn exchange(reply: Reply, request: ModelRequest) -> (Vec<ProviderEvent>, RecordedRequest) {
    let server = TestServer::start(vec![reply]).await.unwrap();
    let events = collect(&provider(&server, AnthropicOptions::default()), request).await;
    let recorded = only_request(&server);
    (events, recorded)
}

fn only_request(server: &TestServer) -> RecordedRequest {
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "exactly one request");
    let request = requests.into_iter().next().unwrap();
    assert_request_basics(&request);
    request
}

fn assert_request_basics(request: &RecordedRequest) {
    assert_request_basics_with(request, "sk-ant-test");
}

fn assert_request_basics_with(request: &RecordedRequest, key: &str) {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some(key));
    assert_eq!(
        request.header("user-agent"),
        Some(keel_provider::endpoint::USER_AGENT)
    );
    assert!(keel_provider::endpoint::USER_AGENT.starts_with("keel/"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.json()["stream"], json!(true));
}

// ---------------------------------------------------------------------------
// Conformance

/// The Messages API wire format, for the shared adapter suite.
struct Messages;

impl WireAdapter for Messages {
    fn name(&self) -> &str {
        "anthropic"
    }

    fn provider(&self, endpoint: Endpoint) -> Arc<dyn Provider> {
        Arc::new(Anthropic::new(endpoint, AnthropicOptions::default()))
    }

    fn request(&self) -> ModelRequest {
        ask("hi")
    }

    fn check_request(&self, recorded: &RecordedRequest, key: &str) {
        assert_request_basics_with(recorded, key);
        assert_eq!(
            recorded.json()["messages"],
            json!([{"role": "user", "content": [
                {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
            ]}])
        );
    }

    fn response_id(&self) -> Option<String> {
        Some("msg_01".into())
    }

    fn stream_head(&self, text: &str) -> String {
        [
            message_start(small_usage()),
            block_start(0, json!({"type": "text", "text": ""})),
            text_delta(0, text),
        ]
        .concat()
    }

    fn text_stream(&self, text: &str) -> String {
        self.stream_head(text) + &block_stop(0) + &message_delta("end_turn", 5) + &message_stop()
    }

    fn stream_error(&self, error_type: &str, message: &str) -> String {
        event(
            "error",
            json!({"type": "error", "error": {"type": error_type, "message": message}}),
        )
    }

    fn error_body(&self, error_type: &str, message: &str) -> String {
        json!({"type": "error", "error": {"type": error_type, "message": message}}).to_string()
    }

    fn overflow_message(&self) -> &str {
        "prompt is too long: 215000 tokens > 200000 maximum"
    }
}

#[tokio::test]
async fn the_adapter_passes_the_conformance_suite() {
    conformance::run_all(&Messages).await;
}

// ---------------------------------------------------------------------------
// Streaming

/// Anthropic's `ping` events keep a connection open but carry no output:
/// a stream of pings after its first text fails at the idle timeout, as a
/// stream of SSE comments does (issue 22).
#[tokio::test]
async fn pings_are_not_progress() {
    let mut chunks = vec![(
        Duration::ZERO,
        [
            message_start(small_usage()),
            block_start(0, json!({"type": "text", "text": ""})),
            text_delta(0, "Hello"),
        ]
        .concat()
        .into_bytes(),
    )];
    // Pings every 50 ms for far longer than the hang bound of `collect`.
    chunks.extend((0..800).map(|_| (Duration::from_millis(50), ping().into_bytes())));
    let server = TestServer::start(vec![Reply::Sse { chunks }])
        .await
        .unwrap();
    let endpoint = Endpoint::new("anthropic", server.url(), None).with_timeouts({
        let mut http_timeouts = HttpTimeouts::default();
        http_timeouts.idle = Duration::from_millis(400);
        http_timeouts
    });
    let events = collect(
        &Anthropic::new(endpoint, AnthropicOptions::default()),
        ask("hi"),
    )
    .await;
    let error = last_error(&events);
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error:?}");
    assert_eq!(
        error.message,
        "the stream made no progress for 0.4 s (idle_timeout_sec; keep-alive comments do not count)"
    );
}

#[tokio::test]
async fn streams_text_and_sends_a_minimal_body() {
    let server = TestServer::start(vec![Reply::sse(&text_transcript())])
        .await
        .unwrap();
    let options = {
        let mut anthropic_options = AnthropicOptions::default();
        anthropic_options.cache = false;
        anthropic_options
    };
    let anthropic = provider(&server, options);
    assert_eq!(anthropic.name(), "anthropic");
    let mut request = ask("Hi");
    request.system_prompt = "Be brief.".into();
    request.max_output_tokens = Some(1000);
    let events = collect(&anthropic, request).await;
    assert_eq!(
        events,
        vec![
            ProviderEvent::Start {
                model: Some("claude-sonnet-4-5".into()),
                response_id: Some("msg_01".into()),
            },
            ProviderEvent::TextStart { index: 0 },
            ProviderEvent::TextDelta {
                index: 0,
                delta: "Hello".into()
            },
            ProviderEvent::TextDelta {
                index: 0,
                delta: ", world".into()
            },
            ProviderEvent::TextEnd { index: 0 },
            ProviderEvent::Usage {
                usage: {
                    let mut usage = Usage::default();
                    usage.input_tokens = 10;
                    usage.output_tokens = 5;
                    usage
                }
            },
            ProviderEvent::Done {
                stop_reason: StopReason::Stop
            },
        ]
    );
    let recorded = only_request(&server);
    assert_eq!(
        recorded.json(),
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1000,
            "stream": true,
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        })
    );
}

#[tokio::test]
async fn thinking_signature_is_sent_back_unchanged() {
    let signature_a = "EqQBCkgIARABGAIiQL+";
    let signature_b = "zW2x/9==";
    let transcript = [
        message_start(small_usage()),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "Let me think… "}),
        ),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "about 日本"}),
        ),
        delta(
            0,
            json!({"type": "signature_delta", "signature": signature_a}),
        ),
        delta(
            0,
            json!({"type": "signature_delta", "signature": signature_b}),
        ),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        text_delta(1, "Answer"),
        block_stop(1),
        message_delta("end_turn", 30),
        message_stop(),
    ]
    .concat();
    let server = TestServer::start(vec![
        Reply::sse(&transcript),
        Reply::sse(&text_transcript()),
    ])
    .await
    .unwrap();
    let anthropic = provider(&server, AnthropicOptions::default());
    let question = Message::User(UserMessage::text("Why?"));
    let events = collect(&anthropic, request(vec![question.clone()])).await;
    let signature = format!("{signature_a}{signature_b}");
    assert!(events.contains(&ProviderEvent::ThinkingEnd {
        index: 0,
        signature: Some(signature.clone())
    }));
    let answer = assemble(&events);
    assert_eq!(answer.stop_reason, StopReason::Stop);

    let follow_up = vec![
        question,
        Message::Assistant(answer),
        Message::User(UserMessage::text("And then?")),
    ];
    let events = collect(&anthropic, request(follow_up)).await;
    assert!(matches!(events.last(), Some(ProviderEvent::Done { .. })));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    requests.iter().for_each(assert_request_basics);
    assert_eq!(
        requests[1].json()["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Let me think… about 日本", "signature": signature},
            {"type": "text", "text": "Answer"},
        ]})
    );
}

#[tokio::test]
async fn parallel_tool_calls_survive_awkward_splits() {
    // Fragments end inside a `\"` escape and inside a `\u00e9` escape.
    let first = r#"{"path":"src/日本.rs","note":"say \"hi\"\n"}"#;
    let first_parts = [
        r#"{"path":"src/日"#,
        r#"本.rs","note":"say \"#,
        r#""hi\"\n"}"#,
    ];
    let second = r#"{"text":"caf\u00e9 ✓"}"#;
    let second_parts = [r#"{"text":"caf\u00"#, r#"e9 ✓"}"#];
    assert_eq!(first_parts.concat(), first);
    assert_eq!(second_parts.concat(), second);
    let mut transcript = vec![
        message_start(small_usage()),
        block_start(0, json!({"type": "text", "text": ""})),
        text_delta(0, "Reading."),
        block_stop(0),
        block_start(
            1,
            json!({"type": "tool_use", "id": "toolu_01", "name": "read", "input": {}}),
        ),
    ];
    transcript.extend(first_parts.iter().map(|part| json_delta(1, part)));
    transcript.push(block_stop(1));
    transcript.push(block_start(
        2,
        json!({"type": "tool_use", "id": "toolu_02", "name": "echo", "input": {}}),
    ));
    transcript.extend(second_parts.iter().map(|part| json_delta(2, part)));
    transcript.extend([block_stop(2), message_delta("tool_use", 80), message_stop()]);
    let bytes = transcript.concat().into_bytes();

    // Cut the bytes in the middle of the three-byte `日` and of `✓`.
    let cut_a = find(&bytes, "日".as_bytes()) + 1;
    let cut_b = find(&bytes, "✓".as_bytes()) + 2;
    let pause = Duration::from_millis(40);
    let chunks = vec![
        (Duration::ZERO, bytes[..cut_a].to_vec()),
        (pause, bytes[cut_a..cut_b].to_vec()),
        (pause, bytes[cut_b..].to_vec()),
    ];
    let (events, _) = exchange(Reply::Sse { chunks }, ask("read")).await;

    let message = assemble(&events);
    assert_eq!(message.stop_reason, StopReason::ToolUse);
    let calls: Vec<(&str, &str, &Value)> = message
        .tool_calls()
        .map(|call| (call.id.as_str(), call.name.as_str(), &call.arguments))
        .collect();
    let first_value: Value = serde_json::from_str(first).unwrap();
    let second_value = json!({"text": "café ✓"});
    assert_eq!(
        calls,
        vec![
            ("toolu_01", "read", &first_value),
            ("toolu_02", "echo", &second_value)
        ]
    );
    assert_eq!(first_value["note"], json!("say \"hi\"\n"));
    assert!(events.contains(&ProviderEvent::ToolCallEnd { index: 1 }));
    assert!(events.contains(&ProviderEvent::ToolCallEnd { index: 2 }));
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
        .unwrap()
}

#[tokio::test]
async fn usage_reports_cache_reads_and_writes() {
    let usage = json!({
        "input_tokens": 12, "output_tokens": 1,
        "cache_creation_input_tokens": 300, "cache_read_input_tokens": 1500,
    });
    let transcript = [
        message_start(usage),
        block_start(0, json!({"type": "text", "text": ""})),
        text_delta(0, "ok"),
        block_stop(0),
        message_delta("max_tokens", 42),
        message_stop(),
    ]
    .concat();
    let (events, _) = exchange(Reply::sse(&transcript), ask("hi")).await;
    let tail = &events[events.len() - 2..];
    assert_eq!(
        tail,
        [
            ProviderEvent::Usage {
                usage: {
                    let mut usage = Usage::default();
                    usage.input_tokens = 12;
                    usage.output_tokens = 42;
                    usage.cache_read_tokens = 1500;
                    usage.cache_write_tokens = 300;
                    usage.cost_usd = None;
                    usage
                }
            },
            ProviderEvent::Done {
                stop_reason: StopReason::Length
            },
        ]
    );
}
