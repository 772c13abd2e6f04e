//! The OpenAI Responses adapter against a local server that speaks the API:
//! the exact request it sends, the events it makes of what the server
//! streams, and how it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use keel_protocol::{
    AssistantMessage, ContentBlock, ImageContent, Message, ProviderErrorKind, ProviderEvent,
    StopReason, ToolCall, ToolResultMessage, ToolSpec, ToolStatus, Usage, UserContent, UserMessage,
};
use keel_provider::conformance::{self, WireAdapter};
use keel_provider::openai_responses::{OpenAiResponses, ResponsesFormat, ResponsesOptions};
use keel_provider::testing::{RecordedRequest, Reply, TestServer, assemble, last_error, rechunk};
use keel_provider::{Endpoint, ModelRequest, Provider};
use proptest::prelude::*;
use serde_json::{Value, json};

mod parser;
mod request;

const ENCRYPTED: &str = "gAAAAABpSi4X1CPuupBD-encrypted-reasoning_blob==";

// ---------------------------------------------------------------- helpers

/// One SSE event as OpenAI sends it: `event:` line, then the JSON `data:`.
fn event(data: Value) -> String {
    let kind = data["type"].as_str().unwrap_or_default().to_owned();
    format!("event: {kind}\ndata: {data}\n\n")
}

fn transcript(events: Vec<Value>) -> String {
    events.into_iter().map(event).collect()
}

fn created(model: &str) -> Value {
    json!({"type": "response.created", "sequence_number": 0,
           "response": {"id": "resp_1", "object": "response", "status": "in_progress", "model": model, "output": []}})
}

fn completed(usage: Value) -> Value {
    json!({"type": "response.completed",
           "response": {"id": "resp_1", "status": "completed", "model": "gpt-5-2025-08-07", "usage": usage}})
}

fn usage(input: u64, cached: u64, output: u64) -> Value {
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
           "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
           "total_tokens": input + output})
}

fn message_added(output: u64) -> Value {
    json!({"type": "response.output_item.added", "output_index": output,
           "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}})
}

fn text_delta(output: u64, delta: &str) -> Value {
    json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": output,
           "content_index": 0, "delta": delta})
}

fn text_done(output: u64, text: &str) -> Value {
    json!({"type": "response.output_text.done", "item_id": "msg_1", "output_index": output,
           "content_index": 0, "text": text})
}

fn message_done(output: u64, text: &str) -> Value {
    json!({"type": "response.output_item.done", "output_index": output,
           "item": {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}})
}

fn call_added(output: u64, call_id: &str, name: &str) -> Value {
    json!({"type": "response.output_item.added", "output_index": output,
           "item": {"id": format!("fc_{output}"), "type": "function_call", "status": "in_progress",
                    "call_id": call_id, "name": name, "arguments": ""}})
}

fn arguments_delta(output: u64, delta: &str) -> Value {
    json!({"type": "response.function_call_arguments.delta", "item_id": format!("fc_{output}"),
           "output_index": output, "delta": delta})
}

fn call_done(output: u64, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "response.output_item.done", "output_index": output,
           "item": {"id": format!("fc_{output}"), "type": "function_call", "status": "completed",
                    "call_id": call_id, "name": name, "arguments": arguments}})
}

fn text_stream(text_parts: &[&str]) -> String {
    let full: String = text_parts.concat();
    let mut events = vec![created("gpt-5-2025-08-07"), message_added(0)];
    events.extend(text_parts.iter().map(|part| text_delta(0, part)));
    events.extend([
        text_done(0, &full),
        message_done(0, &full),
        completed(usage(10, 0, 5)),
    ]);
    transcript(events)
}

fn endpoint(server: &TestServer) -> Endpoint {
    Endpoint::new("openai", server.url(), Some("sk-test".into()))
}

fn provider(server: &TestServer) -> OpenAiResponses {
    OpenAiResponses::new(endpoint(server), ResponsesOptions::default())
}

fn request(messages: Vec<Message>) -> ModelRequest {
    {
        let mut model_request = ModelRequest::new(
            "gpt-5",
            String::new(),
            messages.into_iter().map(Arc::new).collect(),
        );
        model_request.tools = Vec::new();
        model_request.max_output_tokens = None;
        model_request
    }
}

fn hello() -> ModelRequest {
    request(vec![Message::User(UserMessage::text("hello"))])
}

async fn collect(provider: &OpenAiResponses, request: ModelRequest) -> Vec<ProviderEvent> {
    keel_provider::testing::collect(provider, request, Duration::from_secs(10)).await
}

/// Every request goes to `/responses` with the key as a bearer token.
fn assert_sent(request: &RecordedRequest) {
    assert_sent_with(request, "sk-test");
}

fn assert_sent_with(request: &RecordedRequest, key: &str) {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/responses");
    let bearer = format!("Bearer {key}");
    assert_eq!(request.header("authorization"), Some(bearer.as_str()));
    assert_eq!(
        request.header("user-agent"),
        Some(keel_provider::endpoint::USER_AGENT)
    );
    assert!(keel_provider::endpoint::USER_AGENT.starts_with("keel/"));
    let body = request.json();
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["store"], json!(false));
}

// ------------------------------------------------------------ conformance

/// The Responses wire format, for the shared adapter suite.
struct Responses;

impl WireAdapter for Responses {
    fn name(&self) -> &str {
        "openai_responses"
    }

    fn provider(&self, endpoint: Endpoint) -> Arc<dyn Provider> {
        Arc::new(OpenAiResponses::new(endpoint, ResponsesOptions::default()))
    }

    fn request(&self) -> ModelRequest {
        hello()
    }

    fn check_request(&self, recorded: &RecordedRequest, key: &str) {
        assert_sent_with(recorded, key);
        assert_eq!(
            recorded.json()["input"],
            json!([{"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": "hello"}]}])
        );
    }

    fn response_id(&self) -> Option<String> {
        Some("resp_1".into())
    }

    fn stream_head(&self, text: &str) -> String {
        transcript(vec![
            created("gpt-5"),
            message_added(0),
            text_delta(0, text),
        ])
    }

    fn text_stream(&self, text: &str) -> String {
        self.stream_head(text)
            + &transcript(vec![
                text_done(0, text),
                message_done(0, text),
                completed(usage(10, 0, 5)),
            ])
    }

    fn stream_error(&self, error_type: &str, message: &str) -> String {
        event(json!({"type": "error", "code": error_type, "message": message, "param": null}))
    }

    fn error_body(&self, error_type: &str, message: &str) -> String {
        json!({"error": {"message": message, "type": error_type, "param": null, "code": null}})
            .to_string()
    }

    fn overflow_message(&self) -> &str {
        "Your input exceeds the context window of this model. Please adjust your input and try again."
    }
}

#[tokio::test]
async fn the_adapter_passes_the_conformance_suite() {
    conformance::run_all(&Responses).await;
}

// ------------------------------------------------------------------ tests

#[tokio::test]
async fn streamed_text_becomes_one_text_block() {
    let server = TestServer::start(vec![Reply::sse(&text_stream(&["Hel", "lo, ", "wörld"]))])
        .await
        .unwrap();
    let events = collect(&provider(&server), hello()).await;
    assert_eq!(
        events,
        vec![
            ProviderEvent::Start {
                model: Some("gpt-5-2025-08-07".into()),
                response_id: Some("resp_1".into()),
            },
            ProviderEvent::TextStart { index: 0 },
            ProviderEvent::TextDelta {
                index: 0,
                delta: "Hel".into()
            },
            ProviderEvent::TextDelta {
                index: 0,
                delta: "lo, ".into()
            },
            ProviderEvent::TextDelta {
                index: 0,
                delta: "wörld".into()
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
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_sent(&requests[0]);
}

fn reasoning_stream() -> String {
    transcript(vec![
        created("o4-mini-2025-04-16"),
        json!({"type": "response.in_progress", "response": {"id": "resp_1"}}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
        json!({"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "output_index": 0,
               "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0,
               "summary_index": 0, "delta": "**Planning**"}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0,
               "summary_index": 0, "delta": " the answer"}),
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0,
               "summary_index": 1, "delta": "Then check"}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"id": "rs_1", "type": "reasoning", "encrypted_content": ENCRYPTED,
                        "summary": [{"type": "summary_text", "text": "**Planning** the answer"},
                                    {"type": "summary_text", "text": "Then check"}]}}),
        message_added(1),
        json!({"type": "response.content_part.added", "item_id": "msg_1", "output_index": 1,
               "content_index": 0, "part": {"type": "output_text", "text": ""}}),
        text_delta(1, "42"),
        text_done(1, "42"),
        message_done(1, "42"),
        completed(usage(30, 0, 80)),
    ])
}

#[tokio::test]
async fn reasoning_keeps_its_encrypted_content_and_goes_back_on_the_next_request() {
    let server = TestServer::start(vec![
        Reply::sse(&reasoning_stream()),
        Reply::sse(&text_stream(&["fine"])),
    ])
    .await
    .unwrap();
    let options = {
        let mut responses_options = ResponsesOptions::default();
        responses_options.reasoning_effort = Some("high".into());
        responses_options
    };
    let provider = OpenAiResponses::new(endpoint(&server), options);
    let question = Message::User(UserMessage::text("What is 6 x 7?"));
    let events = collect(&provider, request(vec![question.clone()])).await;
    assert_eq!(
        events,
        vec![
            ProviderEvent::Start {
                model: Some("o4-mini-2025-04-16".into()),
                response_id: Some("resp_1".into()),
            },
            ProviderEvent::ThinkingStart { index: 0 },
            ProviderEvent::ThinkingDelta {
                index: 0,
                delta: "**Planning**".into()
            },
            ProviderEvent::ThinkingDelta {
                index: 0,
                delta: " the answer".into()
            },
            ProviderEvent::ThinkingDelta {
                index: 0,
                delta: "\n\n".into()
            },
            ProviderEvent::ThinkingDelta {
                index: 0,
                delta: "Then check".into()
            },
            ProviderEvent::ThinkingEnd {
                index: 0,
                signature: Some(ENCRYPTED.into())
            },
            ProviderEvent::TextStart { index: 1 },
            ProviderEvent::TextDelta {
                index: 1,
                delta: "42".into()
            },
            ProviderEvent::TextEnd { index: 1 },
            ProviderEvent::Usage {
                usage: {
                    let mut usage = Usage::default();
                    usage.input_tokens = 30;
                    usage.output_tokens = 80;
                    usage
                }
            },
            ProviderEvent::Done {
                stop_reason: StopReason::Stop
            },
        ]
    );

    let answer = assemble(&events);
    let follow_up = request(vec![
        question,
        Message::Assistant(answer),
        Message::User(UserMessage::text("Sure?")),
    ]);
    collect(&provider, follow_up).await;
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_sent(&requests[0]);
    assert_sent(&requests[1]);
    let first = requests[0].json();
    assert_eq!(
        first["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    let input = requests[1].json()["input"].clone();
    assert_eq!(
        input[1],
        json!({"type": "reasoning",
               "summary": [{"type": "summary_text", "text": "**Planning** the answer\n\nThen check"}],
               "encrypted_content": ENCRYPTED})
    );
    assert_eq!(
        input[2],
        json!({"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": "42"}]})
    );
    assert_eq!(input.as_array().unwrap().len(), 4);
}

/// Two parallel calls; the first one's arguments are split inside a JSON
/// escape (`\n`, `\"`, `\u00e9`), the second one's hold multi-byte text.
fn parallel_calls_stream() -> String {
    transcript(vec![
        created("gpt-5-2025-08-07"),
        call_added(0, "call_a", "write"),
        arguments_delta(0, r#"{"path":"notes.txt","text":"line1\"#),
        arguments_delta(0, r#"nline2 \"quoted\" caf\u00"#),
        arguments_delta(0, r#"e9"}"#),
        call_done(
            0,
            "call_a",
            "write",
            r#"{"path":"notes.txt","text":"line1\nline2 \"quoted\" caf\u00e9"}"#,
        ),
        call_added(1, "call_b", "read"),
        arguments_delta(1, r#"{"path":"crab 🦀 é"#),
        arguments_delta(1, r#".rs"}"#),
        call_done(1, "call_b", "read", r#"{"path":"crab 🦀 é.rs"}"#),
        completed(usage(100, 0, 40)),
    ])
}

/// A byte offset `into` bytes inside the first `character` of `text`.
fn cut_inside(text: &str, character: char, into: usize) -> usize {
    let at = text.find(character).unwrap() + into;
    assert!(
        !text.is_char_boundary(at),
        "the cut must split the character"
    );
    at
}

#[tokio::test]
async fn parallel_calls_survive_awkward_splits() {
    let stream = parallel_calls_stream();
    let bytes = stream.as_bytes();
    let crab = cut_inside(&stream, '🦀', 2);
    let accent = crab + stream[crab + 2..].find('é').unwrap() + 2 + 1;
    assert!(!stream.is_char_boundary(accent), "the cut must split 'é'");
    let chunks = vec![
        (Duration::ZERO, bytes[..crab].to_vec()),
        (Duration::from_millis(50), bytes[crab..accent].to_vec()),
        (Duration::from_millis(50), bytes[accent..].to_vec()),
    ];
    let server = TestServer::start(vec![Reply::Sse { chunks }])
        .await
        .unwrap();
    let events = collect(&provider(&server), hello()).await;
    let message = assemble(&events);
    assert_eq!(message.stop_reason, StopReason::ToolUse);
    let calls: Vec<_> = message.tool_calls().cloned().collect();
    assert_eq!(
        calls,
        vec![
            {
                let mut tool_call = ToolCall::new(
                    "call_a",
                    "write",
                    json!({"path": "notes.txt", "text": "line1\nline2 \"quoted\" café"}),
                );
                tool_call.wire_id = None;
                tool_call
            },
            {
                let mut tool_call =
                    ToolCall::new("call_b", "read", json!({"path": "crab 🦀 é.rs"}));
                tool_call.wire_id = None;
                tool_call
            },
        ]
    );
    let starts: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            ProviderEvent::ToolCallStart { index, .. } => Some(*index),
            ProviderEvent::ToolCallEnd { index } => Some(100 + *index),
            _ => None,
        })
        .collect();
    assert_eq!(starts, vec![0, 100, 1, 101]);
    assert_sent(&server.requests()[0]);
}

#[tokio::test]
async fn usage_counts_cached_input_separately() {
    let stream = transcript(vec![
        created("gpt-5-2025-08-07"),
        message_added(0),
        text_delta(0, "hi"),
        text_done(0, "hi"),
        message_done(0, "hi"),
        completed(usage(1200, 1000, 50)),
    ]);
    let server = TestServer::start(vec![Reply::sse(&stream)]).await.unwrap();
    let events = collect(&provider(&server), hello()).await;
    let n = events.len();
    assert_eq!(
        events[n - 2..],
        [
            ProviderEvent::Usage {
                usage: {
                    let mut usage = Usage::default();
                    usage.input_tokens = 200;
                    usage.output_tokens = 50;
                    usage.cache_read_tokens = 1000;
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
    assert_sent(&server.requests()[0]);
}

#[tokio::test]
async fn the_end_says_why_the_model_stopped() {
    let incomplete = |event_type: &str| {
        transcript(vec![
            created("gpt-5"),
            message_added(0),
            text_delta(0, "cut sh"),
            json!({"type": event_type,
                   "response": {"id": "resp_1", "status": "incomplete",
                                "incomplete_details": {"reason": "max_output_tokens"},
                                "usage": usage(10, 0, 16)}}),
        ])
    };
    let server = TestServer::start(vec![
        Reply::sse(&incomplete("response.incomplete")),
        Reply::sse(&incomplete("response.completed")),
    ])
    .await
    .unwrap();
    let provider = provider(&server);
    for _ in 0..2 {
        let events = collect(&provider, hello()).await;
        let n = events.len();
        assert_eq!(
            events[n - 3..],
            [
                // The open text block is closed before the end.
                ProviderEvent::TextEnd { index: 0 },
                ProviderEvent::Usage {
                    usage: {
                        let mut usage = Usage::default();
                        usage.input_tokens = 10;
                        usage.output_tokens = 16;
                        usage
                    }
                },
                ProviderEvent::Done {
                    stop_reason: StopReason::Length
                },
            ]
        );
    }
    for request in server.requests() {
        assert_sent(&request);
    }
}

#[tokio::test]
async fn errors_inside_the_stream_are_classified() {
    let failed = |code: &str, message: &str| {
        transcript(vec![
            created("gpt-5"),
            message_added(0),
            text_delta(0, "partial"),
            json!({"type": "response.failed",
                   "response": {"id": "resp_1", "status": "failed",
                                "error": {"code": code, "message": message}}}),
        ])
    };
    let server = TestServer::start(vec![
        Reply::sse(&failed(
            "server_error",
            "The model produced invalid content.",
        )),
        Reply::sse(&failed(
            "context_length_exceeded",
            "Your input exceeds the context window of this model.",
        )),
        Reply::sse(&transcript(vec![
            created("gpt-5"),
            json!({"type": "error", "code": "rate_limit_exceeded",
                   "message": "Rate limit reached", "param": null, "sequence_number": 2}),
        ])),
    ])
    .await
    .unwrap();
    let provider = provider(&server);
    let first = collect(&provider, hello()).await;
    assert_eq!(
        first[..3],
        [
            ProviderEvent::Start {
                model: Some("gpt-5".into()),
                response_id: Some("resp_1".into()),
            },
            ProviderEvent::TextStart { index: 0 },
            ProviderEvent::TextDelta {
                index: 0,
                delta: "partial".into()
            },
        ]
    );
    let error = last_error(&first);
    assert_eq!(error.kind, ProviderErrorKind::ServerError);
    assert!(
        error
            .message
            .contains("The model produced invalid content.")
    );
    let overflow = last_error(&collect(&provider, hello()).await);
    assert_eq!(overflow.kind, ProviderErrorKind::ContextOverflow);
    let rate = last_error(&collect(&provider, hello()).await);
    assert_eq!(rate.kind, ProviderErrorKind::RateLimited);
    for request in server.requests() {
        assert_sent(&request);
    }
}

#[tokio::test]
async fn malformed_json_is_a_protocol_error() {
    let stream = format!(
        "{}event: response.output_text.delta\ndata: {{\"type\": \"response.output_text.delta\", \"delta\": \n\n",
        event(created("gpt-5"))
    );
    let server = TestServer::start(vec![Reply::sse(&stream)]).await.unwrap();
    let events = collect(&provider(&server), hello()).await;
    assert_eq!(last_error(&events).kind, ProviderErrorKind::Protocol);
    assert_sent(&server.requests()[0]);
}
