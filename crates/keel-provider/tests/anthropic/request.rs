//! The request body: every kind of message mapped onto the Messages API.

use super::*;

fn image() -> ImageContent {
    ImageContent::new("image/png", "iVBORw0KGgo=")
}

fn tool_result(call_id: &str, status: ToolStatus, content: Vec<UserContent>) -> Message {
    let error = (status != ToolStatus::Success)
        .then(|| ToolResultError::new(ToolErrorCode::InvalidArguments, "invalid arguments"));
    Message::ToolResult({
        let mut tool_result_message = ToolResultMessage::new(call_id, "read", status, content);
        tool_result_message.error = error;
        tool_result_message.details = Some(json!({"not": "sent"}));
        tool_result_message
    })
}

fn representative_request() -> ModelRequest {
    let text = |text: &str| UserContent::Text { text: text.into() };
    let call =
        |id: &str, arguments: Value| ContentBlock::ToolCall(ToolCall::new(id, "read", arguments));
    let assistant = |model: &str, content: Vec<ContentBlock>, stop_reason| {
        Message::Assistant({
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = content;
            assistant_message.stop_reason = stop_reason;
            assistant_message.usage = Usage::default();
            assistant_message.model = Some(model.into());
            assistant_message.provider = None;
            assistant_message
        })
    };
    let messages = vec![
        Message::User(UserMessage::new(vec![
            text("Look at this"),
            UserContent::Image(image()),
        ])),
        assistant(
            "claude-sonnet-4-5",
            vec![
                ContentBlock::Thinking {
                    thinking: "I should read both files".into(),
                    signature: Some("sig-abc".into()),
                },
                ContentBlock::Thinking {
                    thinking: String::new(),
                    signature: Some(format!("{REDACTED_THINKING_PREFIX}ENCRYPTED")),
                },
                ContentBlock::Text {
                    text: "Reading them.".into(),
                },
                call("toolu_1", json!({"path": "a.rs"})),
                call("toolu_2", Value::String("{\"path\": broken".into())),
            ],
            StopReason::ToolUse,
        ),
        tool_result(
            "toolu_1",
            ToolStatus::Success,
            vec![text("fn main() {}"), UserContent::Image(image())],
        ),
        tool_result(
            "toolu_2",
            ToolStatus::Error,
            vec![text("invalid arguments")],
        ),
        Message::User(UserMessage::text("Now fix it")),
        assistant(
            "other-model",
            vec![
                ContentBlock::Thinking {
                    thinking: "foreign reasoning".into(),
                    signature: None,
                },
                ContentBlock::Text {
                    text: "Done.".into(),
                },
            ],
            StopReason::Stop,
        ),
        Message::User(UserMessage::text("Thanks")),
    ];
    let tool = |name: &str, description: &str| {
        ToolSpec::new(
            name,
            description,
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        )
    };
    {
        let mut model_request = ModelRequest::new(
            "claude-sonnet-4-5",
            "You are Keel.",
            messages.into_iter().map(std::sync::Arc::new).collect(),
        );
        model_request.tools = vec![tool("read", "Read a file"), tool("write", "Write a file")];
        model_request.max_output_tokens = None;
        model_request
    }
}

#[tokio::test]
async fn the_request_body_maps_every_kind_of_message() {
    let server = TestServer::start(vec![Reply::sse(&text_transcript())])
        .await
        .unwrap();
    let options = {
        let mut anthropic_options = AnthropicOptions::default();
        anthropic_options.thinking_budget = Some(4096);
        anthropic_options
    };
    let events = collect(&provider(&server, options), representative_request()).await;
    assert!(matches!(events.last(), Some(ProviderEvent::Done { .. })));
    let cached = json!({"type": "ephemeral"});
    let image = json!({"type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}});
    let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}});
    let expected = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 8192,
        "stream": true,
        "system": [{"type": "text", "text": "You are Keel.", "cache_control": cached}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Look at this"}, image]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should read both files", "signature": "sig-abc"},
                {"type": "redacted_thinking", "data": "ENCRYPTED"},
                {"type": "text", "text": "Reading them."},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.rs"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": false,
                 "content": [{"type": "text", "text": "fn main() {}"}, image]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
                 "content": [{"type": "text", "text": "invalid arguments"}]},
                {"type": "text", "text": "Now fix it"},
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "foreign reasoning"},
                {"type": "text", "text": "Done."},
            ]},
            {"role": "user", "content": [
                {"type": "text", "text": "Thanks", "cache_control": cached},
            ]},
        ],
        "tools": [
            {"name": "read", "description": "Read a file", "input_schema": schema},
            {"name": "write", "description": "Write a file", "input_schema": schema,
             "cache_control": cached},
        ],
        "thinking": {"type": "enabled", "budget_tokens": 4096},
    });
    assert_eq!(only_request(&server).json(), expected);
}

#[tokio::test]
async fn redacted_thinking_round_trips() {
    let transcript = [
        message_start(small_usage()),
        block_start(
            0,
            json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va=="}),
        ),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": "Hi"})),
        block_stop(1),
        message_delta("end_turn", 3),
        message_stop(),
    ]
    .concat();
    let (events, _) = exchange(Reply::sse(&transcript), ask("hi")).await;
    let message = assemble(&events);
    let signature = format!("{REDACTED_THINKING_PREFIX}EmwKAhgBEgy3va==");
    assert_eq!(
        message.content,
        vec![
            ContentBlock::Thinking {
                thinking: String::new(),
                signature: Some(signature)
            },
            ContentBlock::Text { text: "Hi".into() },
        ]
    );
    let follow_up = request(vec![
        Message::User(UserMessage::text("hi")),
        Message::Assistant(message),
        Message::User(UserMessage::text("more")),
    ]);
    let (_, recorded) = exchange(Reply::sse(&text_transcript()), follow_up).await;
    assert_eq!(
        recorded.json()["messages"][1]["content"][0],
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va=="})
    );
}
