//! The scripted provider: plays a JSON script of turns, deterministically.
//!
//! Each provider request consumes the next turn of the script. A turn streams
//! its content blocks (text, thinking, tool calls) split into small deltas, so
//! that the kernel's streaming and accumulation are really exercised, and may
//! end in a provider error instead of `done`. A turn may also state what the
//! request must contain (`expect`); a request that does not match fails the
//! stream loudly with a `protocol` error, so a wrong model context cannot pass
//! unnoticed. The format is documented in `docs/scripts.md`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use keel_protocol::{
    Message, ProviderError, ProviderErrorKind, ProviderEvent, StopReason, Usage, UserContent,
};
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{ModelRequest, Provider, ProviderStream};

/// A script: the turns the scripted model will play, in order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Script {
    /// The turns; each provider request consumes one.
    pub turns: Vec<ScriptTurn>,
    /// Characters per streamed delta (default 8).
    #[serde(default)]
    pub chunk_chars: Option<usize>,
    /// Play the turn whose index is the number of assistant messages in the
    /// request, instead of the next one, so that a new process continuing a
    /// session (`keel resume`) plays on from where the session is.
    #[serde(default)]
    pub by_history: bool,
}

/// One scripted model response.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ScriptTurn {
    /// What the request for this turn must contain.
    #[serde(default)]
    pub expect: Option<Expectation>,
    /// Delay before each streamed event, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
    /// The content blocks to stream.
    #[serde(default)]
    pub content: Vec<ScriptBlock>,
    /// When set, the stream fails with this error after the content.
    #[serde(default)]
    pub error: Option<ScriptedError>,
    /// The stop reason (default: `tool_use` when there are tool calls, else `stop`).
    #[serde(default)]
    pub stop_reason: Option<StopReason>,
    /// Usage to report.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// The response id to report in `start` (a real provider's
    /// `msg_…`/`chatcmpl-…`/`resp_…`).
    #[serde(default)]
    pub response_id: Option<String>,
}

/// A scripted content block.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum ScriptBlock {
    /// Visible text.
    Text {
        /// The text.
        text: String,
    },
    /// Reasoning.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// An optional signature.
        #[serde(default)]
        signature: Option<String>,
    },
    /// A tool call.
    ToolCall {
        /// The call id (default `call_<turn>_<n>`).
        #[serde(default)]
        id: Option<String>,
        /// The tool's name.
        name: String,
        /// The arguments, streamed as their JSON text.
        #[serde(default)]
        arguments: Option<Value>,
        /// Raw argument text streamed verbatim instead (may be malformed JSON).
        #[serde(default)]
        arguments_raw: Option<String>,
    },
}

/// A scripted provider failure.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ScriptedError {
    /// The class of failure.
    pub kind: ProviderErrorKind,
    /// The message.
    pub message: String,
    /// A retry-after hint in milliseconds.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
    /// The most times the failure may be retried (as for a refused
    /// connection).
    #[serde(default)]
    pub max_retries: Option<u32>,
}

/// What a request must contain; every field set is checked.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Expectation {
    /// Total number of messages in the request.
    #[serde(default)]
    pub messages: Option<usize>,
    /// Number of tool-result messages after the last assistant message.
    #[serde(default)]
    pub tool_results: Option<usize>,
    /// Text that the last user message must contain.
    #[serde(default)]
    pub last_user_contains: Option<String>,
    /// Text that some tool result after the last assistant message must contain.
    #[serde(default)]
    pub tool_result_contains: Option<String>,
    /// Names of the tools offered, in order.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

/// Why a script could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script {path}: {message}")]
    Read {
        /// The path.
        path: String,
        /// The OS error.
        message: String,
    },
    /// The JSON does not match the script format.
    #[error("malformed script: {0}")]
    Malformed(String),
    /// The script is well-formed but unusable.
    #[error("invalid script: {0}")]
    Invalid(String),
}

impl Script {
    /// Parses and checks a script from JSON text.
    pub fn from_json(text: &str) -> Result<Self, ScriptError> {
        let script: Script = serde_json::from_str(text)
            .map_err(|error| ScriptError::Malformed(error.to_string()))?;
        script.check()?;
        Ok(script)
    }

    /// Reads and parses a script file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|error| ScriptError::Read {
            path: path.display().to_string(),
            message: error.to_string(),
        })?;
        Self::from_json(&text)
    }

    fn check(&self) -> Result<(), ScriptError> {
        if self.turns.is_empty() {
            return Err(ScriptError::Invalid("the script has no turns".into()));
        }
        if self.chunk_chars == Some(0) {
            return Err(ScriptError::Invalid(
                "chunk_chars must be at least 1".into(),
            ));
        }
        for (turn, spec) in self.turns.iter().enumerate() {
            for block in &spec.content {
                if let ScriptBlock::ToolCall {
                    name,
                    arguments,
                    arguments_raw,
                    ..
                } = block
                    && arguments.is_some() == arguments_raw.is_some()
                {
                    return Err(ScriptError::Invalid(format!(
                        "turn {}: tool call `{name}` needs exactly one of `arguments` and `arguments_raw`",
                        turn + 1
                    )));
                }
            }
        }
        Ok(())
    }
}

/// A provider that plays a [`Script`].
#[derive(Debug)]
pub struct ScriptedProvider {
    script: Script,
    next_turn: Mutex<usize>,
}

impl ScriptedProvider {
    /// A provider that will play `script` from its first turn.
    pub fn new(script: Script) -> Self {
        Self {
            script,
            next_turn: Mutex::new(0),
        }
    }

    /// How many requests have been served.
    pub fn requests_served(&self) -> usize {
        self.next_turn
            .lock()
            .map(|guard| *guard)
            .unwrap_or_default()
    }

    fn take_turn(&self) -> Result<(usize, ScriptTurn), ProviderError> {
        let mut next = self.next_turn.lock().map_err(|_| {
            ProviderError::new(
                ProviderErrorKind::Protocol,
                "scripted provider state poisoned",
            )
        })?;
        let index = *next;
        let turn = self.script.turns.get(index).cloned().ok_or_else(|| {
            ProviderError::new(
                ProviderErrorKind::Protocol,
                format!(
                    "script exhausted: request {} but the script has {} turn(s)",
                    index + 1,
                    self.script.turns.len()
                ),
            )
        })?;
        *next += 1;
        Ok((index, turn))
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> ProviderStream {
        let chunk = self.script.chunk_chars.unwrap_or(8);
        if self.script.by_history {
            let played = request
                .messages
                .iter()
                .filter(|message| matches!(message.as_ref(), Message::Assistant(_)))
                .count();
            if let Ok(mut next) = self.next_turn.lock() {
                *next = played;
            }
        }
        let (events, delay) = match self.take_turn() {
            Ok((index, turn)) => match check_expectation(index, &turn, &request) {
                Ok(()) => (turn_events(index, &turn, chunk), turn.delay_ms),
                Err(error) => (vec![ProviderEvent::Error { error }], 0),
            },
            Err(error) => (vec![ProviderEvent::Error { error }], 0),
        };
        play(events, Duration::from_millis(delay), cancel)
    }
}

/// Streams `events`, sleeping `delay` before each, ending early on cancel.
fn play(events: Vec<ProviderEvent>, delay: Duration, cancel: CancellationToken) -> ProviderStream {
    let state = (events.into_iter(), cancel, false);
    futures::stream::unfold(state, move |(mut events, cancel, finished)| async move {
        if finished {
            return None;
        }
        if cancel.is_cancelled() {
            return Some((cancelled_event(), (events, cancel, true)));
        }
        if !delay.is_zero() {
            tokio::select! {
                () = cancel.cancelled() => return Some((cancelled_event(), (events, cancel, true))),
                () = tokio::time::sleep(delay) => {}
            }
        }
        let event = events.next()?;
        Some((event, (events, cancel, false)))
    })
    .boxed()
}

fn cancelled_event() -> ProviderEvent {
    ProviderEvent::Error {
        error: ProviderError::new(ProviderErrorKind::Cancelled, "request cancelled"),
    }
}

/// Expands one turn into the provider events it streams.
fn turn_events(turn_index: usize, turn: &ScriptTurn, chunk: usize) -> Vec<ProviderEvent> {
    let mut events = vec![ProviderEvent::Start {
        model: Some("scripted".into()),
        response_id: turn.response_id.clone(),
    }];
    let mut calls = 0;
    for (index, block) in turn.content.iter().enumerate() {
        match block {
            ScriptBlock::Text { text } => {
                events.push(ProviderEvent::TextStart { index });
                for delta in chunks(text, chunk) {
                    events.push(ProviderEvent::TextDelta { index, delta });
                }
                events.push(ProviderEvent::TextEnd { index });
            }
            ScriptBlock::Thinking {
                thinking,
                signature,
            } => {
                events.push(ProviderEvent::ThinkingStart { index });
                for delta in chunks(thinking, chunk) {
                    events.push(ProviderEvent::ThinkingDelta { index, delta });
                }
                events.push(ProviderEvent::ThinkingEnd {
                    index,
                    signature: signature.clone(),
                });
            }
            ScriptBlock::ToolCall {
                id,
                name,
                arguments,
                arguments_raw,
            } => {
                calls += 1;
                let id = id
                    .clone()
                    .unwrap_or_else(|| format!("call_{}_{}", turn_index + 1, calls));
                events.push(ProviderEvent::ToolCallStart {
                    index,
                    id,
                    name: name.clone(),
                });
                let text = match (arguments, arguments_raw) {
                    (_, Some(raw)) => raw.clone(),
                    (Some(value), None) => value.to_string(),
                    (None, None) => String::new(),
                };
                for delta in chunks(&text, chunk) {
                    events.push(ProviderEvent::ToolCallDelta { index, delta });
                }
                events.push(ProviderEvent::ToolCallEnd { index });
            }
        }
    }
    if let Some(error) = &turn.error {
        events.push(ProviderEvent::Error {
            error: {
                let mut provider_error = ProviderError::new(error.kind, error.message.clone());
                provider_error.retry_after_ms = error.retry_after_ms;
                provider_error.max_retries = error.max_retries;
                provider_error
            },
        });
        return events;
    }
    if let Some(usage) = turn.usage {
        events.push(ProviderEvent::Usage { usage });
    }
    let default_stop = if calls > 0 {
        StopReason::ToolUse
    } else {
        StopReason::Stop
    };
    events.push(ProviderEvent::Done {
        stop_reason: turn.stop_reason.unwrap_or(default_stop),
    });
    events
}

/// Splits `text` into pieces of at most `size` characters.
fn chunks(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size.max(1))
        .map(|piece| piece.iter().collect())
        .collect()
}

/// Checks the request against the turn's expectation.
fn check_expectation(
    index: usize,
    turn: &ScriptTurn,
    request: &ModelRequest,
) -> Result<(), ProviderError> {
    let Some(expect) = &turn.expect else {
        return Ok(());
    };
    let fail = |what: String| {
        Err(ProviderError::new(
            ProviderErrorKind::Protocol,
            format!("script turn {} expectation failed: {what}", index + 1),
        ))
    };
    if let Some(count) = expect.messages
        && request.messages.len() != count
    {
        return fail(format!(
            "expected {count} messages, request has {}",
            request.messages.len()
        ));
    }
    let trailing = trailing_tool_results(&request.messages);
    if let Some(count) = expect.tool_results
        && trailing.len() != count
    {
        return fail(format!(
            "expected {count} tool results, request has {}",
            trailing.len()
        ));
    }
    if let Some(needle) = &expect.tool_result_contains
        && !trailing.iter().any(|text| text.contains(needle.as_str()))
    {
        return fail(format!("no tool result contains {needle:?}"));
    }
    if let Some(needle) = &expect.last_user_contains {
        let last_user = request
            .messages
            .iter()
            .rev()
            .find_map(|message| match message.as_ref() {
                Message::User(user) => Some(user.plain_text()),
                _ => None,
            });
        if !last_user.is_some_and(|text| text.contains(needle.as_str())) {
            return fail(format!("the last user message does not contain {needle:?}"));
        }
    }
    if let Some(names) = &expect.tools {
        let offered: Vec<&str> = request
            .tools
            .iter()
            .map(|tool| tool.name.as_str())
            .collect();
        if offered != names.iter().map(String::as_str).collect::<Vec<_>>() {
            return fail(format!(
                "expected tools {names:?}, request offers {offered:?}"
            ));
        }
    }
    Ok(())
}

/// The texts of the tool results after the last assistant message.
fn trailing_tool_results(messages: &[Arc<Message>]) -> Vec<String> {
    let mut texts = Vec::new();
    for message in messages.iter().rev() {
        match message.as_ref() {
            Message::ToolResult(result) => texts.push(
                result
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        UserContent::Text { text } => Some(text.as_str()),
                        UserContent::Image(_) => None,
                    })
                    .collect::<String>(),
            ),
            Message::Assistant(_) => break,
            Message::User(_) => {}
        }
    }
    texts.reverse();
    texts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            system_prompt: String::new(),
            messages: vec![Arc::new(Message::User(keel_protocol::UserMessage::text(
                "hi",
            )))],
            tools: vec![],
            max_output_tokens: None,
            purpose: crate::RequestPurpose::Turn,
        }
    }

    async fn collect(provider: &ScriptedProvider) -> Vec<ProviderEvent> {
        provider
            .stream(request(), CancellationToken::new())
            .collect()
            .await
    }

    #[tokio::test]
    async fn streams_text_in_chunks_and_ends_with_done() {
        let script = Script::from_json(
            r#"{"chunk_chars":2,"turns":[{"content":[{"type":"text","text":"héllo"}]}]}"#,
        )
        .unwrap();
        let provider = ScriptedProvider::new(script);
        let events = collect(&provider).await;
        let deltas: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                ProviderEvent::TextDelta { delta, .. } => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, ["hé", "ll", "o"]);
        assert_eq!(
            events.last(),
            Some(&ProviderEvent::Done {
                stop_reason: StopReason::Stop
            })
        );
    }

    #[tokio::test]
    async fn exhausted_script_is_a_protocol_error() {
        let script = Script::from_json(r#"{"turns":[{"content":[]}]}"#).unwrap();
        let provider = ScriptedProvider::new(script);
        collect(&provider).await;
        let events = collect(&provider).await;
        assert!(
            matches!(&events[..], [ProviderEvent::Error { error }] if error.kind == ProviderErrorKind::Protocol)
        );
    }

    #[tokio::test]
    async fn failed_expectation_is_a_protocol_error() {
        let script =
            Script::from_json(r#"{"turns":[{"expect":{"messages":3},"content":[]}]}"#).unwrap();
        let events = collect(&ScriptedProvider::new(script)).await;
        let ProviderEvent::Error { error } = &events[0] else {
            panic!("expected error")
        };
        assert!(
            error.message.contains("expected 3 messages, request has 1"),
            "{}",
            error.message
        );
    }

    #[test]
    fn malformed_scripts_are_refused() {
        assert!(matches!(
            Script::from_json("{"),
            Err(ScriptError::Malformed(_))
        ));
        assert!(matches!(
            Script::from_json(r#"{"turns":[],"x":1}"#),
            Err(ScriptError::Malformed(_))
        ));
        assert!(matches!(
            Script::from_json(r#"{"turns":[]}"#),
            Err(ScriptError::Invalid(_))
        ));
        let both = r#"{"turns":[{"content":[{"type":"tool_call","name":"read","arguments":{},"arguments_raw":"{}"}]}]}"#;
        assert!(matches!(
            Script::from_json(both),
            Err(ScriptError::Invalid(_))
        ));
    }

    #[tokio::test]
    async fn cancel_ends_the_stream_with_cancelled() {
        let script = Script::from_json(
            r#"{"turns":[{"delay_ms":50,"content":[{"type":"text","text":"long text here"}]}]}"#,
        )
        .unwrap();
        let provider = ScriptedProvider::new(script);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let events: Vec<_> = provider.stream(request(), cancel).collect().await;
        assert!(
            matches!(&events[..], [ProviderEvent::Error { error }] if error.kind == ProviderErrorKind::Cancelled)
        );
    }
}
