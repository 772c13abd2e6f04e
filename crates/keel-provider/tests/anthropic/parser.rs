//! The parser alone: malformed data, unknown events, and any re-chunking of a
//! transcript.

use super::*;

fn replay_now(chunks: Vec<Vec<u8>>) -> Vec<ProviderEvent> {
    keel_provider::testing::replay_now(chunks, AnthropicFormat::new())
}

#[test]
fn malformed_data_is_a_protocol_error() {
    let cases = [
        format!(
            "{}event: content_block_delta\ndata: {{\"type\":\n\n",
            message_start(small_usage())
        ),
        format!(
            "{}{}",
            message_start(small_usage()),
            text_delta(3, "no such block")
        ),
        format!(
            "{}{}{}",
            message_start(small_usage()),
            block_start(
                0,
                json!({"type": "tool_use", "id": "t", "name": "read", "input": {}})
            ),
            text_delta(0, "wrong kind"),
        ),
        format!(
            "{}{}",
            message_start(small_usage()),
            block_start(0, json!({"type": "tool_use"}))
        ),
    ];
    for case in cases {
        let events = replay_now(vec![case.clone().into_bytes()]);
        assert_eq!(
            last_error(&events).kind,
            ProviderErrorKind::Protocol,
            "{case}"
        );
    }
}

#[test]
fn unknown_events_and_blocks_are_ignored() {
    let transcript = [
        message_start(small_usage()),
        event("future_event", json!({"type": "future_event", "x": 1})),
        block_start(
            0,
            json!({"type": "server_tool_use", "id": "srv", "name": "web_search"}),
        ),
        json_delta(0, "{\"query\":"),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        delta(1, json!({"type": "citations_delta", "citation": {}})),
        text_delta(1, "ok"),
        block_stop(1),
        message_delta("pause_turn", 2),
        message_stop(),
    ]
    .concat();
    let events = replay_now(vec![transcript.into_bytes()]);
    let message = assemble(&events);
    assert_eq!(
        message.content,
        vec![ContentBlock::Text { text: "ok".into() }]
    );
    assert_eq!(message.stop_reason, StopReason::Stop);
}

/// A transcript touching every mapped event, with multi-byte characters.
fn full_transcript() -> Vec<u8> {
    [
        message_start(json!({"input_tokens": 5, "cache_read_input_tokens": 7, "output_tokens": 1})),
        ping(),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "Ünïcödé 思考"}),
        ),
        delta(
            0,
            json!({"type": "signature_delta", "signature": "c2lnbmF0dXJl"}),
        ),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        text_delta(1, "Grüße, 世界 🌍"),
        block_stop(1),
        block_start(
            2,
            json!({"type": "tool_use", "id": "toolu_9", "name": "write", "input": {}}),
        ),
        json_delta(2, r#"{"text":"a\"b\\"#),
        json_delta(2, r#"c 🌍"}"#),
        block_stop(2),
        message_delta("tool_use", 20),
        message_stop(),
    ]
    .concat()
    .into_bytes()
}

#[test]
fn the_full_transcript_parses() {
    let events = replay_now(vec![full_transcript()]);
    let message = assemble(&events);
    assert_eq!(message.stop_reason, StopReason::ToolUse);
    assert_eq!(message.usage.cache_read_tokens, 7);
    let arguments = &message.tool_calls().next().unwrap().arguments;
    assert_eq!(arguments, &json!({"text": "a\"b\\c 🌍"}));
}

proptest! {
    #[test]
    fn any_rechunking_yields_the_same_events(cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..24)) {
        let bytes = full_transcript();
        let whole = replay_now(vec![bytes.clone()]);
        let chunks = rechunk(&bytes, cuts.iter().map(|cut| cut.index(bytes.len())));
        prop_assert_eq!(replay_now(chunks), whole);
    }
}
