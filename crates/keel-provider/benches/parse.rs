//! Parsing cost per streamed event, for each wire format.
//!
//! Each benchmark replays a recorded-format transcript of 2,000 text deltas,
//! a 400-fragment tool call and the closing events through the adapter's
//! parser (SSE decoding included, via `http::replay`), and divan reports the
//! time per SSE event. Run with `cargo bench -p keel-provider`.
// A benchmark may panic on setup failure: a broken fixture must stop it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use divan::Bencher;
use divan::counter::ItemsCount;
use keel_provider::anthropic::AnthropicFormat;
use keel_provider::http::{WireFormat, replay};
use keel_provider::openai_chat::ChatFormat;
use keel_provider::openai_responses::ResponsesFormat;
use serde_json::json;

/// Runs the benchmarks.
fn main() {
    divan::main();
}

const TEXT_DELTAS: usize = 2_000;
const ARGUMENT_DELTAS: usize = 400;

/// A Chat Completions transcript and its number of SSE events.
fn chat_transcript() -> (Vec<u8>, usize) {
    let mut sse = String::new();
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        let body = json!({"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
        format!("data: {body}\n\n")
    };
    for n in 0..TEXT_DELTAS {
        sse += &chunk(json!({"content": format!("word{n} ")}), None);
    }
    sse += &chunk(
        json!({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read","arguments":""}}]}),
        None,
    );
    for _ in 0..ARGUMENT_DELTAS {
        sse += &chunk(
            json!({"tool_calls":[{"index":0,"function":{"arguments":"ab"}}]}),
            None,
        );
    }
    sse += &chunk(json!({}), Some("tool_calls"));
    sse += "data: [DONE]\n\n";
    (sse.into_bytes(), TEXT_DELTAS + ARGUMENT_DELTAS + 3)
}

/// An Anthropic Messages transcript and its number of SSE events.
fn anthropic_transcript() -> (Vec<u8>, usize) {
    let mut sse = String::new();
    let mut event =
        |name: &str, data: serde_json::Value| sse += &format!("event: {name}\ndata: {data}\n\n");
    event(
        "message_start",
        json!({"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"claude","usage":{"input_tokens":10,"output_tokens":1}}}),
    );
    event(
        "content_block_start",
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    );
    for n in 0..TEXT_DELTAS {
        event(
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("word{n} ")}}),
        );
    }
    event(
        "content_block_stop",
        json!({"type":"content_block_stop","index":0}),
    );
    event(
        "content_block_start",
        json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"read","input":{}}}),
    );
    for _ in 0..ARGUMENT_DELTAS {
        event(
            "content_block_delta",
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ab"}}),
        );
    }
    event(
        "content_block_stop",
        json!({"type":"content_block_stop","index":1}),
    );
    event(
        "message_delta",
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":50}}),
    );
    event("message_stop", json!({"type":"message_stop"}));
    (sse.into_bytes(), TEXT_DELTAS + ARGUMENT_DELTAS + 7)
}

/// An OpenAI Responses transcript and its number of SSE events.
fn responses_transcript() -> (Vec<u8>, usize) {
    let mut sse = String::new();
    let mut event = |data: serde_json::Value| {
        sse += &format!(
            "event: {}\ndata: {data}\n\n",
            data["type"].as_str().unwrap()
        )
    };
    event(json!({"type":"response.created","response":{"id":"r","model":"gpt"}}));
    event(
        json!({"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}),
    );
    for n in 0..TEXT_DELTAS {
        event(
            json!({"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":format!("word{n} ")}),
        );
    }
    event(
        json!({"type":"response.output_item.done","output_index":0,"item":{"type":"message","id":"msg_1"}}),
    );
    event(
        json!({"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"read","arguments":""}}),
    );
    for _ in 0..ARGUMENT_DELTAS {
        event(
            json!({"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"ab"}),
        );
    }
    event(
        json!({"type":"response.output_item.done","output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"read","arguments":"ab"}}),
    );
    event(
        json!({"type":"response.completed","response":{"id":"r","model":"gpt","usage":{"input_tokens":10,"output_tokens":50}}}),
    );
    (sse.into_bytes(), TEXT_DELTAS + ARGUMENT_DELTAS + 6)
}

fn run<F: WireFormat>(bencher: Bencher, transcript: (Vec<u8>, usize), make: fn() -> F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (bytes, events) = transcript;
    // Deliver the bytes in 16 KiB chunks, as a socket would.
    let chunks: Vec<Vec<u8>> = bytes.chunks(16 * 1024).map(<[u8]>::to_vec).collect();
    bencher
        .counter(ItemsCount::new(events))
        .bench_local(|| runtime.block_on(replay(chunks.clone(), make())));
}

/// Chat Completions: per SSE event.
#[divan::bench(sample_count = 30)]
fn openai_chat(bencher: Bencher) {
    run(bencher, chat_transcript(), ChatFormat::new);
}

/// Anthropic Messages: per SSE event.
#[divan::bench(sample_count = 30)]
fn anthropic(bencher: Bencher) {
    run(bencher, anthropic_transcript(), AnthropicFormat::new);
}

/// OpenAI Responses: per SSE event.
#[divan::bench(sample_count = 30)]
fn openai_responses(bencher: Bencher) {
    run(bencher, responses_transcript(), ResponsesFormat::new);
}

/// A parser that only counts events: the cost of SSE decoding alone.
struct Count;

impl WireFormat for Count {
    fn on_event(
        &mut self,
        _: &str,
        data: &str,
    ) -> Result<Vec<keel_protocol::ProviderEvent>, keel_protocol::ProviderError> {
        if data == "[DONE]" {
            return Ok(vec![keel_protocol::ProviderEvent::Done {
                stop_reason: keel_protocol::StopReason::Stop,
            }]);
        }
        Ok(Vec::new())
    }
}

/// SSE decoding alone, on the Chat Completions transcript: per SSE event.
#[divan::bench(sample_count = 30)]
fn sse_decoding_only(bencher: Bencher) {
    run(bencher, chat_transcript(), || Count);
}
