//! Reading an adapter's events in tests: collect them within a time limit,
//! take the terminal error, build the assistant message they describe, and
//! cut a byte stream into chunks.
//!
//! These helpers panic with a message naming what was expected: they are
//! assertions, for tests only. [`assemble`] is strict on purpose — a delta or
//! end for a block that is not open, or an `error` event, fails the test —
//! so a test that builds a message also checks the event grammar.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use keel_protocol::{AssistantMessage, ContentBlock, ProviderError, ProviderEvent, ToolCall};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{ModelRequest, Provider};

/// Every event `provider` streams for `request`; panics when the stream has
/// not ended within `limit`.
pub async fn collect(
    provider: &dyn Provider,
    request: ModelRequest,
    limit: Duration,
) -> Vec<ProviderEvent> {
    let stream = provider.stream(request, CancellationToken::new());
    tokio::time::timeout(limit, stream.collect())
        .await
        .unwrap_or_else(|_| panic!("the stream did not end within {limit:?}"))
}

/// The error that ends `events`; panics when they end otherwise.
pub fn last_error(events: &[ProviderEvent]) -> ProviderError {
    match events.last() {
        Some(ProviderEvent::Error { error }) => error.clone(),
        other => panic!("expected a final error, got {other:?} in {events:?}"),
    }
}

/// The assistant message `events` describe, as the kernel would build it:
/// blocks in index order, tool arguments parsed (kept as a string when they
/// are not JSON), the model, usage and stop reason. Panics on an `error`
/// event and on any event for a block that is not open with that kind.
pub fn assemble(events: &[ProviderEvent]) -> AssistantMessage {
    let mut message = AssistantMessage::default();
    let mut blocks: BTreeMap<usize, ContentBlock> = BTreeMap::new();
    let mut arguments: BTreeMap<usize, String> = BTreeMap::new();
    for event in events {
        match event {
            ProviderEvent::Start { model, response_id } => {
                message.model.clone_from(model);
                message.response_id.clone_from(response_id);
            }
            ProviderEvent::TextStart { index } => open(
                &mut blocks,
                *index,
                ContentBlock::Text {
                    text: String::new(),
                },
            ),
            ProviderEvent::ThinkingStart { index } => open(
                &mut blocks,
                *index,
                ContentBlock::Thinking {
                    thinking: String::new(),
                    signature: None,
                },
            ),
            ProviderEvent::ToolCallStart { index, id, name } => {
                open(
                    &mut blocks,
                    *index,
                    ContentBlock::ToolCall(ToolCall::new(id.clone(), name.clone(), Value::Null)),
                );
                arguments.insert(*index, String::new());
            }
            ProviderEvent::Usage { usage } => message.usage = *usage,
            ProviderEvent::Done { stop_reason } => message.stop_reason = *stop_reason,
            ProviderEvent::Error { error } => panic!("unexpected error {error:?}"),
            block_event => apply(&mut blocks, &mut arguments, block_event),
        }
    }
    for (index, text) in arguments {
        if let Some(ContentBlock::ToolCall(call)) = blocks.get_mut(&index) {
            call.arguments = serde_json::from_str(&text).unwrap_or(Value::String(text));
        }
    }
    message.content = blocks.into_values().collect();
    message
}

/// Opens block `index`; it must not exist yet.
fn open(blocks: &mut BTreeMap<usize, ContentBlock>, index: usize, block: ContentBlock) {
    let previous = blocks.insert(index, block);
    assert!(previous.is_none(), "block {index} started twice");
}

/// A delta or end event, applied to its open block.
fn apply(
    blocks: &mut BTreeMap<usize, ContentBlock>,
    arguments: &mut BTreeMap<usize, String>,
    event: &ProviderEvent,
) {
    match (
        event,
        event_index(event).and_then(|index| blocks.get_mut(&index)),
    ) {
        (ProviderEvent::TextDelta { delta, .. }, Some(ContentBlock::Text { text })) => {
            text.push_str(delta);
        }
        (
            ProviderEvent::ThinkingDelta { delta, .. },
            Some(ContentBlock::Thinking { thinking, .. }),
        ) => {
            thinking.push_str(delta);
        }
        (
            ProviderEvent::ThinkingEnd { signature, .. },
            Some(ContentBlock::Thinking {
                signature: kept, ..
            }),
        ) => kept.clone_from(signature),
        (ProviderEvent::ToolCallDelta { index, delta }, Some(ContentBlock::ToolCall(_))) => {
            arguments.entry(*index).or_default().push_str(delta);
        }
        (ProviderEvent::TextEnd { .. }, Some(ContentBlock::Text { .. }))
        | (ProviderEvent::ToolCallEnd { .. }, Some(ContentBlock::ToolCall(_))) => {}
        (event, block) => panic!("{event:?} does not fit block {block:?}"),
    }
}

fn event_index(event: &ProviderEvent) -> Option<usize> {
    match event {
        ProviderEvent::TextDelta { index, .. }
        | ProviderEvent::TextEnd { index }
        | ProviderEvent::ThinkingDelta { index, .. }
        | ProviderEvent::ThinkingEnd { index, .. }
        | ProviderEvent::ToolCallDelta { index, .. }
        | ProviderEvent::ToolCallEnd { index } => Some(*index),
        _ => None,
    }
}

/// `bytes` cut at `cuts` (in any order; points past the end cut at the
/// end). Repeated points and points at either end give empty chunks, which
/// a decoder must take in its stride too.
pub fn rechunk(bytes: &[u8], cuts: impl IntoIterator<Item = usize>) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.into_iter().map(|cut| cut.min(bytes.len())).collect();
    points.sort_unstable();
    let mut chunks = Vec::with_capacity(points.len() + 1);
    let mut from = 0;
    for point in points {
        chunks.push(bytes[from..point].to_vec());
        from = point;
    }
    chunks.push(bytes[from..].to_vec());
    chunks
}

/// The events `format` makes of `chunks`, through [`crate::http::replay`],
/// on a runtime of its own (for synchronous tests and property tests).
#[cfg(feature = "http")]
pub fn replay_now<F: crate::http::WireFormat>(
    chunks: Vec<Vec<u8>>,
    format: F,
) -> Vec<ProviderEvent> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime")
        .block_on(crate::http::replay(chunks, format))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_protocol::StopReason;
    use serde_json::json;

    #[test]
    fn events_assemble_into_the_message_they_describe() {
        let events = [
            ProviderEvent::Start {
                model: Some("m".into()),
                response_id: None,
            },
            ProviderEvent::ThinkingStart { index: 0 },
            ProviderEvent::ThinkingDelta {
                index: 0,
                delta: "hm".into(),
            },
            ProviderEvent::ThinkingEnd {
                index: 0,
                signature: Some("sig".into()),
            },
            ProviderEvent::ToolCallStart {
                index: 1,
                id: "c".into(),
                name: "read".into(),
            },
            ProviderEvent::ToolCallDelta {
                index: 1,
                delta: "{\"a\":".into(),
            },
            ProviderEvent::ToolCallDelta {
                index: 1,
                delta: "1}".into(),
            },
            ProviderEvent::ToolCallEnd { index: 1 },
            ProviderEvent::Done {
                stop_reason: StopReason::ToolUse,
            },
        ];
        let message = assemble(&events);
        assert_eq!(message.model.as_deref(), Some("m"));
        assert_eq!(message.stop_reason, StopReason::ToolUse);
        assert_eq!(
            message.content[0],
            ContentBlock::Thinking {
                thinking: "hm".into(),
                signature: Some("sig".into())
            }
        );
        let calls: Vec<&Value> = message.tool_calls().map(|call| &call.arguments).collect();
        assert_eq!(calls, [&json!({"a": 1})]);
        let stray = std::panic::catch_unwind(|| {
            assemble(&[ProviderEvent::TextDelta {
                index: 3,
                delta: "x".into(),
            }])
        });
        assert!(stray.is_err(), "a delta for a block never started fails");
    }

    #[test]
    fn rechunking_keeps_every_byte() {
        let chunks = rechunk(b"abcdef", [4, 1, 1, 99]);
        assert_eq!(chunks, [&b"a"[..], b"", b"bcd", b"ef", b""]);
        assert_eq!(rechunk(b"ab", []), [b"ab".to_vec()]);
    }
}
