//! The parser alone, through `http::replay`: malformed chunks, server dialects,
//! and any re-chunking of a transcript.

use super::*;

#[test]
fn malformed_json_is_a_protocol_error() {
    let text = sse(&[chunk(json!({ "content": "a" }), None)]) + "data: {\"choices\": [\n\n";
    let events = replay_now(vec![text.into_bytes()], ChatFormat::new());
    let error = last_error(&events);
    assert_eq!(error.kind, ProviderErrorKind::Protocol);
    assert!(error.message.contains("malformed"), "{error:?}");
}

#[test]
fn openrouter_reasoning_and_comments_are_understood() {
    let text = format!(
        ": OPENROUTER PROCESSING\n\n{}data: \n\n{DONE}",
        sse(&[
            chunk(json!({ "reasoning": "hmm", "future_field": [1, 2] }), None),
            chunk(json!({ "content": "yes" }), Some("stop")),
        ])
    );
    let events = replay_now(vec![text.clone().into_bytes()], ChatFormat::new());
    assert_eq!(
        events[1..3],
        [
            ProviderEvent::ThinkingStart { index: 0 },
            ProviderEvent::ThinkingDelta {
                index: 0,
                delta: "hmm".into()
            }
        ]
    );
    let plain = ChatFormat::new().with_reasoning(false);
    let events = replay_now(vec![text.into_bytes()], plain);
    assert_eq!(events[1], ProviderEvent::TextStart { index: 0 });
}

/// Text, thinking, two tool calls, usage and `[DONE]`.
fn transcript() -> Vec<u8> {
    let tool = |index: u64, first: bool, arguments: &str| {
        let mut entry = json!({ "index": index, "function": { "arguments": arguments } });
        if first {
            entry["id"] = json!(format!("call_{index}"));
            entry["function"]["name"] = json!("edit");
        }
        chunk(json!({ "tool_calls": [entry] }), None)
    };
    let text = sse(&[
        chunk(
            json!({ "role": "assistant", "reasoning_content": "Plan: é → ü" }),
            None,
        ),
        chunk(json!({ "reasoning_content": " then edit." }), None),
        chunk(json!({ "content": "Editing 東京 files." }), None),
        tool(0, true, "{\"old\":\"\\u00e9"),
        tool(0, false, "\",\"new\":\"ü\"}"),
        tool(1, true, "{\"old\":\"a\","),
        tool(1, false, "\"new\":\"b\"}"),
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(json!({ "prompt_tokens": 10, "completion_tokens": 5 })),
    ]) + DONE;
    text.into_bytes()
}

#[test]
fn the_transcript_parses_into_the_expected_message() {
    let events = replay_now(vec![transcript()], ChatFormat::new());
    let message = assemble(&events);
    assert_eq!(message.stop_reason, StopReason::ToolUse);
    assert_eq!(message.content.len(), 4);
    assert_eq!(message.text(), "Editing 東京 files.");
    let arguments: Vec<&Value> = message.tool_calls().map(|call| &call.arguments).collect();
    assert_eq!(
        arguments,
        [
            &json!({ "old": "é", "new": "ü" }),
            &json!({ "old": "a", "new": "b" })
        ]
    );
}

proptest! {
    #[test]
    fn any_rechunking_yields_the_same_events(cuts in prop::collection::vec(0usize..4096, 0..24)) {
        let bytes = transcript();
        let whole = replay_now(vec![bytes.clone()], ChatFormat::new());
        let cuts: Vec<usize> = cuts.into_iter().map(|cut| cut % bytes.len()).collect();
        let split = replay_now(rechunk(&bytes, cuts), ChatFormat::new());
        prop_assert_eq!(split, whole);
    }
}

#[test]
fn tool_calls_without_index_are_keyed_by_id() {
    // Gemini's compatibility layer has sent whole calls without `index`.
    let call = |id: &str, arguments: &str| {
        let entry = json!({ "id": id, "type": "function",
            "function": { "name": "read", "arguments": arguments } });
        chunk(json!({ "tool_calls": [entry] }), None)
    };
    let text = sse(&[
        call("a", "{\"path\":\"x\"}"),
        call("b", "{\"path\":\"y\"}"),
        chunk(json!({}), Some("stop")),
    ]) + DONE;
    let events = replay_now(vec![text.into_bytes()], ChatFormat::new());
    let message = assemble(&events);
    assert_eq!(message.stop_reason, StopReason::ToolUse);
    let ids: Vec<&str> = message.tool_calls().map(|call| call.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
}

#[test]
fn calls_a_server_sent_without_ids_get_none_invented() {
    // Some OpenAI-compatible servers send no `id`: the adapter leaves it
    // empty for the kernel to assign one unique in the session (a per-turn
    // `call_0` would name a call of every turn alike).
    let call = |index: u64, arguments: &str| {
        let entry = json!({ "index": index, "type": "function",
            "function": { "name": "read", "arguments": arguments } });
        chunk(json!({ "tool_calls": [entry] }), None)
    };
    // The second call's first fragment has neither id nor name; its id
    // comes with its name.
    let unnamed = json!({ "tool_calls": [{ "index": 1, "function": { "arguments": "" } }] });
    let late = json!({ "tool_calls": [{ "index": 1, "id": "late", "type": "function",
        "function": { "name": "read", "arguments": "{\"path\":\"y\"}" } }] });
    let text = sse(&[
        call(0, "{\"path\":\"x\"}"),
        chunk(unnamed, None),
        chunk(late, None),
        chunk(json!({}), Some("tool_calls")),
    ]) + DONE;
    let events = replay_now(vec![text.into_bytes()], ChatFormat::new());
    let ids: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            ProviderEvent::ToolCallStart { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    // An id that comes before the call is started is still taken.
    assert_eq!(ids, ["", "late"]);
}

proptest! {
    #[test]
    fn arbitrary_bytes_end_in_exactly_one_terminal_event(
        lines in prop::collection::vec(
            prop_oneof![
                Just("data: [DONE]\n\n".to_owned()),
                Just("data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n".to_owned()),
                Just("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3}]}}]}\n\n".to_owned()),
                "data: [ -~]{0,40}\n\n",
                "[ -~]{0,40}",
            ],
            0..8,
        )
    ) {
        let events = replay_now(vec![lines.concat().into_bytes()], ChatFormat::new());
        let terminal = events
            .iter()
            .filter(|event| matches!(event, ProviderEvent::Done { .. } | ProviderEvent::Error { .. }))
            .count();
        prop_assert_eq!(terminal, 1);
        let last_is_terminal = matches!(
            events.last(),
            Some(ProviderEvent::Done { .. } | ProviderEvent::Error { .. })
        );
        prop_assert!(last_is_terminal, "{:?}", events);
    }
}
