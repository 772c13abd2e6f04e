//! The parser alone: items that arrive whole, protocol errors, and any
//! re-chunking of a transcript.

use super::*;

#[test]
fn items_that_arrive_whole_are_emitted_whole() {
    // Some Responses-compatible servers skip the incremental events.
    let stream = transcript(vec![
        created("local-model"),
        json!({"type": "response.some_future_event", "output_index": 9}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}],
                        "encrypted_content": ENCRYPTED}}),
        message_done(1, "answer"),
        call_done(2, "call_1", "read", r#"{"path":"a"}"#),
        completed(Value::Null),
    ]);
    let events = replay_chunks(vec![stream.into_bytes()]);
    assert_eq!(
        events,
        vec![
            ProviderEvent::Start {
                model: Some("local-model".into()),
                response_id: Some("resp_1".into()),
            },
            ProviderEvent::ThinkingStart { index: 0 },
            ProviderEvent::ThinkingDelta {
                index: 0,
                delta: "think".into()
            },
            ProviderEvent::ThinkingEnd {
                index: 0,
                signature: Some(ENCRYPTED.into())
            },
            ProviderEvent::TextStart { index: 1 },
            ProviderEvent::TextDelta {
                index: 1,
                delta: "answer".into()
            },
            ProviderEvent::TextEnd { index: 1 },
            ProviderEvent::ToolCallStart {
                index: 2,
                id: "call_1".into(),
                name: "read".into()
            },
            ProviderEvent::ToolCallDelta {
                index: 2,
                delta: r#"{"path":"a"}"#.into()
            },
            ProviderEvent::ToolCallEnd { index: 2 },
            ProviderEvent::Done {
                stop_reason: StopReason::ToolUse
            },
        ]
    );
}

#[test]
fn arguments_for_an_unknown_call_are_a_protocol_error() {
    let stream = transcript(vec![created("gpt-5"), arguments_delta(0, "{}")]);
    let events = replay_chunks(vec![stream.into_bytes()]);
    assert_eq!(last_error(&events).kind, ProviderErrorKind::Protocol);
}

// -------------------------------------------------------------- property

/// A transcript with reasoning, multi-byte text and two calls.
fn replay_chunks(chunks: Vec<Vec<u8>>) -> Vec<ProviderEvent> {
    keel_provider::testing::replay_now(chunks, ResponsesFormat::new())
}

fn fixed_transcript() -> String {
    let mut text = reasoning_stream();
    text = text.replace(&event(completed(usage(30, 0, 80))), "");
    let calls = parallel_calls_stream();
    let start = calls.find("event: response.output_item.added").unwrap();
    let calls = calls[start..]
        .replace("\"output_index\":0", "\"output_index\":2")
        .replace("\"output_index\":1", "\"output_index\":3");
    text + &calls
}

#[test]
fn the_fixed_transcript_parses_to_a_complete_message() {
    let events = replay_chunks(vec![fixed_transcript().into_bytes()]);
    let message = assemble(&events);
    assert_eq!(message.stop_reason, StopReason::ToolUse);
    assert_eq!(message.content.len(), 4, "{:?}", message.content);
    assert_eq!(message.tool_calls().count(), 2);
    assert_eq!(message.text(), "42");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_rechunking_yields_the_same_events(cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12)) {
        let bytes = fixed_transcript().into_bytes();
        let whole = replay_chunks(vec![bytes.clone()]);
        let chunks = rechunk(&bytes, cuts.iter().map(|cut| cut.index(bytes.len() + 1)));
        prop_assert_eq!(replay_chunks(chunks), whole);
    }
}
