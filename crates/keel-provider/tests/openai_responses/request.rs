//! The request body: the whole context mapped onto input items, and what a
//! minimal request leaves out.

use super::*;

fn tool_result(call_id: &str, content: Vec<UserContent>) -> Message {
    Message::ToolResult({
        let mut tool_result_message =
            ToolResultMessage::new(call_id, "read", ToolStatus::Success, content);
        tool_result_message.error = None;
        tool_result_message.details = None;
        tool_result_message
    })
}

fn text(text: &str) -> UserContent {
    UserContent::Text { text: text.into() }
}

fn image(data: &str) -> UserContent {
    UserContent::Image(ImageContent::new("image/png", data))
}
#[tokio::test]
async fn the_whole_context_is_mapped_onto_input_items() {
    let server = TestServer::start(vec![Reply::sse(&text_stream(&["ok"]))])
        .await
        .unwrap();
    let options = {
        let mut responses_options = ResponsesOptions::default();
        responses_options.reasoning_effort = Some("medium".into());
        responses_options
    };
    let provider = OpenAiResponses::new(endpoint(&server), options);
    let assistant = {
        let mut assistant_message = AssistantMessage::default();
        assistant_message.content = vec![
            ContentBlock::Thinking {
                thinking: "plan".into(),
                signature: Some(ENCRYPTED.into()),
            },
            ContentBlock::Text {
                text: "Let me look.".into(),
            },
            ContentBlock::ToolCall(ToolCall::new("call_1", "read", json!({"path": "a.txt"}))),
            // Unsigned reasoning and another provider's signature are dropped.
            ContentBlock::Thinking {
                thinking: "unsigned".into(),
                signature: None,
            },
            ContentBlock::Thinking {
                thinking: "from Claude".into(),
                signature: Some("EqQBCkgIARABGAIiQL".into()),
            },
            ContentBlock::ToolCall(ToolCall::new(
                "call_2",
                "bash",
                Value::String("{not json".into()),
            )),
        ];
        assistant_message.stop_reason = StopReason::ToolUse;
        assistant_message.usage = Usage::default();
        assistant_message.model = Some("gpt-5-2025-08-07".into());
        assistant_message.provider = None;
        assistant_message
    };
    let request = {
        let mut model_request = ModelRequest::new(
            "gpt-5",
            "You are Keel.",
            [
                Message::User(UserMessage::new(vec![
                    text("Describe this"),
                    image("aGVsbG8="),
                ])),
                Message::Assistant(assistant),
                tool_result("call_1", vec![text("contents"), image("aW1n")]),
                tool_result("call_2", vec![text("invalid arguments")]),
                Message::User(UserMessage::text("thanks")),
            ]
            .map(std::sync::Arc::new)
            .into(),
        );
        model_request.tools = vec![ToolSpec::new(
            "read",
            "Read a file",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        )];
        model_request.max_output_tokens = Some(4096);
        model_request
    };
    let events = collect(&provider, request).await;
    assert!(matches!(events.last(), Some(ProviderEvent::Done { .. })));
    let requests = server.requests();
    assert_sent(&requests[0]);
    assert_eq!(
        requests[0].json(),
        json!({
            "model": "gpt-5",
            "instructions": "You are Keel.",
            "input": [
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "Describe this"},
                    {"type": "input_image", "image_url": "data:image/png;base64,aGVsbG8="},
                ]},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}],
                 "encrypted_content": ENCRYPTED},
                {"type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": "Let me look."},
                ]},
                {"type": "function_call", "call_id": "call_1", "name": "read",
                 "arguments": "{\"path\":\"a.txt\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "bash",
                 "arguments": "{not json"},
                {"type": "function_call_output", "call_id": "call_1", "output": "contents"},
                {"type": "function_call_output", "call_id": "call_2", "output": "invalid arguments"},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_image", "image_url": "data:image/png;base64,aW1n"},
                ]},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "thanks"},
                ]},
            ],
            "tools": [{
                "type": "function",
                "name": "read",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                "strict": false,
            }],
            "max_output_tokens": 4096,
            "reasoning": {"effort": "medium", "summary": "auto"},
            "include": ["reasoning.encrypted_content"],
            "stream": true,
            "store": false,
        })
    );
}

#[tokio::test]
async fn a_minimal_request_omits_what_is_unset() {
    let server = TestServer::start(vec![Reply::sse(&text_stream(&["ok"]))])
        .await
        .unwrap();
    collect(&provider(&server), hello()).await;
    let body = server.requests()[0].json();
    assert_eq!(
        body,
        json!({
            "model": "gpt-5",
            "input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "hello"}]}],
            "stream": true,
            "store": false,
        })
    );
}
