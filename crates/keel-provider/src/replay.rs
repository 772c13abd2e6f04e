//! The replay provider: answers from a recorded run instead of a model.
//!
//! A [`Recording`] is plain data — the assistant messages a session
//! recorded, in order, the provider failures it implies (a compaction
//! after a context overflow), and the summaries its compactions recorded — so
//! this crate needs nothing of the session store; the host that reads a
//! session builds it (`keel replay`, keel-host's `replay` module).
//!
//! Each request takes the next recorded answer of its kind, told apart by
//! the request's explicit [`RequestPurpose`] (never by its content): a
//! [`RequestPurpose::Turn`] the next turn answer, a
//! [`RequestPurpose::Summary`] the next summary. A message streams as a
//! provider would stream it — `start`, each content block as a
//! `*_start`/`*_delta`/`*_end` triple, `usage`, `done` with the recorded
//! stop reason — so the kernel's accumulator rebuilds the same message; a
//! recorded failure streams as that one error event. A
//! request past the end of the recording fails its stream with a
//! `protocol` error saying so ([`ReplayError`]), which ends the run like
//! any provider failure that is not retried.

use std::sync::Mutex;

use futures::StreamExt;
use keel_protocol::{
    AssistantMessage, ContentBlock, ProviderError, ProviderErrorKind, ProviderEvent,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{ModelRequest, Provider, ProviderStream, RequestPurpose};

/// What a replay answers with: the recorded answers of each purpose, in the
/// order they were given.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Recording {
    /// The answers to the conversation's turn requests, oldest first.
    pub turns: Vec<Answer>,
    /// The answers to the compactions' summary requests, oldest first.
    pub summaries: Vec<Answer>,
}

impl Recording {
    /// A recording of `turns` and `summaries`.
    pub fn new(turns: Vec<Answer>, summaries: Vec<Answer>) -> Self {
        Self { turns, summaries }
    }
}

/// One recorded answer to a request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Answer {
    /// The model answered with this message.
    Message(AssistantMessage),
    /// The provider refused the request with this error (e.g. a context
    /// overflow the session records by the compaction that followed it).
    Failure(ProviderError),
}

impl From<AssistantMessage> for Answer {
    fn from(message: AssistantMessage) -> Self {
        Self::Message(message)
    }
}

/// Why a replayed request has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The run made more requests of this purpose than the recording holds.
    #[error(
        "replay: {purpose} request {request} is beyond the recording, which holds {recorded} \
         {purpose} answer(s)"
    )]
    BeyondRecording {
        /// `turn` or `summary`.
        purpose: &'static str,
        /// The request's number among those of its purpose, from 1.
        request: usize,
        /// How many answers of that purpose the recording holds.
        recorded: usize,
    },
    /// The provider's state was poisoned by a panicking thread.
    #[error("replay: the provider's state is poisoned")]
    Poisoned,
}

impl From<ReplayError> for ProviderError {
    fn from(error: ReplayError) -> Self {
        ProviderError::new(ProviderErrorKind::Protocol, error.to_string())
    }
}

/// How many answers of each purpose a [`ReplayProvider`] has given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Served {
    /// Turn requests answered.
    pub turns: usize,
    /// Summary requests answered.
    pub summaries: usize,
}

/// A provider that plays a [`Recording`] back, named as the recorded
/// provider was (the kernel adapts history and stamps messages by name).
#[derive(Debug)]
pub struct ReplayProvider {
    name: String,
    recording: Recording,
    served: Mutex<Served>,
}

impl ReplayProvider {
    /// A provider called `name` that answers from `recording`.
    pub fn new(name: impl Into<String>, recording: Recording) -> Self {
        Self {
            name: name.into(),
            recording,
            served: Mutex::new(Served::default()),
        }
    }

    /// How many answers of each purpose were given so far.
    pub fn served(&self) -> Served {
        self.served.lock().map(|guard| *guard).unwrap_or_default()
    }

    /// The next answer for a request of `purpose`, counted as served.
    fn next(&self, purpose: RequestPurpose) -> Result<Answer, ReplayError> {
        let mut served = self.served.lock().map_err(|_| ReplayError::Poisoned)?;
        let (label, answers, count) = match purpose {
            RequestPurpose::Summary => {
                ("summary", &self.recording.summaries, &mut served.summaries)
            }
            RequestPurpose::Turn => ("turn", &self.recording.turns, &mut served.turns),
        };
        let answer = answers
            .get(*count)
            .cloned()
            .ok_or(ReplayError::BeyondRecording {
                purpose: label,
                request: *count + 1,
                recorded: answers.len(),
            })?;
        *count += 1;
        Ok(answer)
    }
}

impl Provider for ReplayProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> ProviderStream {
        let events = match self.next(request.purpose) {
            Ok(Answer::Message(message)) => message_events(&message),
            Ok(Answer::Failure(error)) => vec![ProviderEvent::Error { error }],
            Err(error) => vec![ProviderEvent::Error {
                error: error.into(),
            }],
        };
        let state = (events.into_iter(), cancel, false);
        futures::stream::unfold(state, |(mut events, cancel, finished)| async move {
            if finished {
                return None;
            }
            if cancel.is_cancelled() {
                let error = ProviderError::new(ProviderErrorKind::Cancelled, "request cancelled");
                return Some((ProviderEvent::Error { error }, (events, cancel, true)));
            }
            let event = events.next()?;
            Some((event, (events, cancel, false)))
        })
        .boxed()
    }
}

/// The events a provider streams for `message`, block by block, each
/// block's content in one delta.
pub fn message_events(message: &AssistantMessage) -> Vec<ProviderEvent> {
    let mut events = vec![ProviderEvent::Start {
        model: message.model.clone(),
        response_id: message.response_id.clone(),
    }];
    for (index, block) in message.content.iter().enumerate() {
        match block {
            ContentBlock::Text { text } => {
                events.push(ProviderEvent::TextStart { index });
                events.push(ProviderEvent::TextDelta {
                    index,
                    delta: text.clone(),
                });
                events.push(ProviderEvent::TextEnd { index });
            }
            ContentBlock::Thinking {
                thinking,
                signature,
            } => {
                events.push(ProviderEvent::ThinkingStart { index });
                events.push(ProviderEvent::ThinkingDelta {
                    index,
                    delta: thinking.clone(),
                });
                events.push(ProviderEvent::ThinkingEnd {
                    index,
                    signature: signature.clone(),
                });
            }
            ContentBlock::ToolCall(call) => {
                // The session's id, so that results and decisions recorded
                // under it still name the same call.
                events.push(ProviderEvent::ToolCallStart {
                    index,
                    id: call.id.clone(),
                    name: call.name.clone(),
                });
                // Arguments that were not a JSON object were kept as the
                // text the model sent: send that text again, verbatim.
                let text = match &call.arguments {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                events.push(ProviderEvent::ToolCallDelta { index, delta: text });
                events.push(ProviderEvent::ToolCallEnd { index });
            }
        }
    }
    events.push(ProviderEvent::Usage {
        usage: message.usage,
    });
    events.push(ProviderEvent::Done {
        stop_reason: message.stop_reason,
    });
    events
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use keel_protocol::{Message, StopReason, ToolCall, Usage, UserMessage};
    use serde_json::json;

    use super::*;

    fn assistant(content: Vec<ContentBlock>, stop_reason: StopReason) -> AssistantMessage {
        let mut message = AssistantMessage::default();
        message.content = content;
        message.stop_reason = stop_reason;
        message.model = Some("recorded-model".into());
        message
    }

    fn request(purpose: RequestPurpose) -> ModelRequest {
        let mut request = ModelRequest::new(
            "m",
            "system",
            vec![Arc::new(Message::User(UserMessage::text("hi")))],
        );
        request.purpose = purpose;
        request
    }

    async fn play(provider: &ReplayProvider, purpose: RequestPurpose) -> Vec<ProviderEvent> {
        provider
            .stream(request(purpose), CancellationToken::new())
            .collect()
            .await
    }

    fn error_of(events: &[ProviderEvent]) -> &ProviderError {
        match events {
            [ProviderEvent::Error { error }] => error,
            other => panic!("expected one error event, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_recorded_message_streams_block_by_block_and_ends_with_its_stop_reason() {
        let mut call = ToolCall::new("call_7", "bash", json!({"command": "ls"}));
        call.wire_id = Some("wire".into());
        let mut message = assistant(
            vec![
                ContentBlock::Thinking {
                    thinking: "hm".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::Text { text: "ok".into() },
                ContentBlock::ToolCall(call),
            ],
            StopReason::ToolUse,
        );
        message.usage.input_tokens = 12;
        let provider = ReplayProvider::new(
            "deepseek",
            Recording::new(vec![message.clone().into()], Vec::new()),
        );
        assert_eq!(provider.name(), "deepseek");
        let events = play(&provider, RequestPurpose::Turn).await;
        let mut usage = Usage::default();
        usage.input_tokens = 12;
        assert_eq!(
            events,
            vec![
                ProviderEvent::Start {
                    model: Some("recorded-model".into()),
                    response_id: None,
                },
                ProviderEvent::ThinkingStart { index: 0 },
                ProviderEvent::ThinkingDelta {
                    index: 0,
                    delta: "hm".into()
                },
                ProviderEvent::ThinkingEnd {
                    index: 0,
                    signature: Some("sig".into())
                },
                ProviderEvent::TextStart { index: 1 },
                ProviderEvent::TextDelta {
                    index: 1,
                    delta: "ok".into()
                },
                ProviderEvent::TextEnd { index: 1 },
                ProviderEvent::ToolCallStart {
                    index: 2,
                    id: "call_7".into(),
                    name: "bash".into()
                },
                ProviderEvent::ToolCallDelta {
                    index: 2,
                    delta: r#"{"command":"ls"}"#.into()
                },
                ProviderEvent::ToolCallEnd { index: 2 },
                ProviderEvent::Usage { usage },
                ProviderEvent::Done {
                    stop_reason: StopReason::ToolUse
                },
            ]
        );
        assert_eq!(
            provider.served(),
            Served {
                turns: 1,
                summaries: 0
            }
        );
    }

    #[tokio::test]
    async fn arguments_kept_as_text_are_sent_verbatim() {
        let call = ToolCall::new("c", "read", Value::String("{not json".into()));
        let provider = ReplayProvider::new(
            "p",
            Recording::new(
                vec![assistant(vec![ContentBlock::ToolCall(call)], StopReason::ToolUse).into()],
                Vec::new(),
            ),
        );
        let events = play(&provider, RequestPurpose::Turn).await;
        assert!(events.contains(&ProviderEvent::ToolCallDelta {
            index: 0,
            delta: "{not json".into()
        }));
    }

    #[tokio::test]
    async fn summary_requests_take_summaries_and_turn_requests_take_turns_by_purpose() {
        let turn = assistant(
            vec![ContentBlock::Text {
                text: "turn".into(),
            }],
            StopReason::Stop,
        );
        let summary = assistant(
            vec![ContentBlock::Text {
                text: "## Goal".into(),
            }],
            StopReason::Stop,
        );
        let provider =
            ReplayProvider::new("p", Recording::new(vec![turn.into()], vec![summary.into()]));
        // The summary comes first although the turn was recorded first:
        // the purpose decides, not the order or the content.
        let first = play(&provider, RequestPurpose::Summary).await;
        assert!(first.contains(&ProviderEvent::TextDelta {
            index: 0,
            delta: "## Goal".into()
        }));
        let second = play(&provider, RequestPurpose::Turn).await;
        assert!(second.contains(&ProviderEvent::TextDelta {
            index: 0,
            delta: "turn".into()
        }));
    }

    #[tokio::test]
    async fn a_request_beyond_the_recording_fails_with_a_protocol_error_naming_it() {
        let provider = ReplayProvider::new(
            "p",
            Recording::new(
                vec![assistant(Vec::new(), StopReason::Stop).into()],
                Vec::new(),
            ),
        );
        play(&provider, RequestPurpose::Turn).await;
        let events = play(&provider, RequestPurpose::Turn).await;
        let error = error_of(&events);
        assert_eq!(error.kind, ProviderErrorKind::Protocol);
        assert_eq!(
            error.message,
            ReplayError::BeyondRecording {
                purpose: "turn",
                request: 2,
                recorded: 1
            }
            .to_string()
        );
        let events = play(&provider, RequestPurpose::Summary).await;
        assert!(
            error_of(&events)
                .message
                .contains("summary request 1 is beyond the recording, which holds 0"),
            "{events:?}"
        );
    }

    #[tokio::test]
    async fn a_recorded_failure_is_streamed_as_that_error() {
        let overflow = ProviderError::new(
            ProviderErrorKind::ContextOverflow,
            "maximum context length is 6144 tokens",
        );
        let provider = ReplayProvider::new(
            "p",
            Recording::new(
                vec![
                    Answer::Failure(overflow.clone()),
                    assistant(Vec::new(), StopReason::Stop).into(),
                ],
                Vec::new(),
            ),
        );
        let events = play(&provider, RequestPurpose::Turn).await;
        assert_eq!(error_of(&events), &overflow);
        let events = play(&provider, RequestPurpose::Turn).await;
        assert!(matches!(events.last(), Some(ProviderEvent::Done { .. })));
    }

    #[tokio::test]
    async fn a_cancelled_request_ends_with_cancelled() {
        let provider = ReplayProvider::new(
            "p",
            Recording::new(
                vec![assistant(Vec::new(), StopReason::Stop).into()],
                Vec::new(),
            ),
        );
        let cancel = CancellationToken::new();
        cancel.cancel();
        let events: Vec<_> = provider
            .stream(request(RequestPurpose::Turn), cancel)
            .collect()
            .await;
        assert_eq!(error_of(&events).kind, ProviderErrorKind::Cancelled);
    }
}
