//! Ids and the clock: the only place the kernel reads either.
//!
//! Every entry id, run id, tool-call id and timestamp the kernel produces
//! comes from here, so a test (or a future replay) has one seam to reason
//! about.
//!
//! Tool-call ids are unique within a session (docs/recovery.md: the effect journal,
//! the receipts and the ToolResults are matched to calls by them). A
//! provider's id is kept when the session has not used it; a missing one
//! (an OpenAI-compatible server that sends none) and one the session
//! already used (a server that numbers its calls per turn) are replaced by
//! a fresh id. The provider's repeated id is kept beside it
//! ([`ToolCall::wire_id`]) and [`for_wire`] puts it back in every request,
//! so the provider sees the ids it issued; a missing id has nothing to put
//! back, and the fresh id goes on the wire.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use keel_protocol::{AssistantMessage, Message, ProviderEvent, TimestampMs};

/// A time-ordered unique id (UUID v7).
pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> TimestampMs {
    keel_protocol::now_ms()
}

/// A fresh tool-call id: `call_` and a UUID v7 in hex, which every
/// provider API accepts (`[A-Za-z0-9_-]`, at most 64 characters).
fn new_call_id() -> String {
    format!("call_{}", uuid::Uuid::now_v7().simple())
}

/// The tool-call ids of `message` (none for anything but an assistant
/// message).
pub(crate) fn call_ids(message: &Message) -> impl Iterator<Item = &str> {
    let calls = match message {
        Message::Assistant(assistant) => Some(assistant.tool_calls()),
        _ => None,
    };
    calls.into_iter().flatten().map(|call| call.id.as_str())
}

/// Gives the tool calls of one streamed response ids unique in the session.
pub(crate) struct ResponseIds {
    /// The ids the session used before this response.
    used: Arc<HashSet<String>>,
    /// The ids given to this response's calls.
    given: HashSet<String>,
    /// The ids this response's calls carry on the wire.
    on_wire: HashSet<String>,
    /// Replaced ids: the id given → the provider's id to send back.
    wire: HashMap<String, String>,
}

impl ResponseIds {
    /// The assigner of a response in a session that used `used`.
    pub(crate) fn new(used: Arc<HashSet<String>>) -> Self {
        Self {
            used,
            given: HashSet::new(),
            on_wire: HashSet::new(),
            wire: HashMap::new(),
        }
    }

    /// The event with its call id made unique in the session (any other
    /// event is returned as it is).
    pub(crate) fn assign(&mut self, event: ProviderEvent) -> ProviderEvent {
        let ProviderEvent::ToolCallStart { index, id, name } = event else {
            return event;
        };
        let id = self.give(id);
        ProviderEvent::ToolCallStart { index, id, name }
    }

    fn give(&mut self, provider_id: String) -> String {
        let taken = |id: &str| self.used.contains(id) || self.given.contains(id);
        if !provider_id.is_empty() && !taken(&provider_id) {
            self.on_wire.insert(provider_id.clone());
            self.given.insert(provider_id.clone());
            return provider_id;
        }
        let mut fresh = new_call_id();
        while taken(&fresh) {
            fresh = new_call_id();
        }
        self.given.insert(fresh.clone());
        // The provider's id goes back on the wire unless it is missing or
        // another call of this response already carries it there (then it
        // could not tell the two results apart, and the fresh id is sent).
        if !provider_id.is_empty() && self.on_wire.insert(provider_id.clone()) {
            self.wire.insert(fresh.clone(), provider_id);
        } else {
            self.on_wire.insert(fresh.clone());
        }
        fresh
    }

    /// Records on the finished message's calls the provider ids that were
    /// replaced.
    pub(crate) fn attach(&self, message: &mut AssistantMessage) {
        if self.wire.is_empty() {
            return;
        }
        for block in &mut message.content {
            if let keel_protocol::ContentBlock::ToolCall(call) = block {
                call.wire_id = self.wire.get(&call.id).cloned();
            }
        }
    }
}

/// The messages of a request with each call's wire id (and its result's)
/// in place of Keel's id. Messages without a replaced id are passed on as
/// the same `Arc`; when none has one, nothing is copied.
pub(crate) fn for_wire(messages: Vec<Arc<Message>>) -> Vec<Arc<Message>> {
    let replaced = |message: &Message| match message {
        Message::Assistant(assistant) => assistant.tool_calls().any(|call| call.wire_id.is_some()),
        _ => false,
    };
    if !messages.iter().any(|message| replaced(message)) {
        return messages;
    }
    let mut wire: HashMap<String, String> = HashMap::new();
    messages
        .into_iter()
        .map(|message| match message.as_ref() {
            Message::Assistant(assistant) if replaced(&message) => {
                let mut sent = assistant.clone();
                for block in &mut sent.content {
                    if let keel_protocol::ContentBlock::ToolCall(call) = block
                        && let Some(wire_id) = call.wire_id.take()
                    {
                        wire.insert(std::mem::replace(&mut call.id, wire_id.clone()), wire_id);
                    }
                }
                Arc::new(Message::Assistant(sent))
            }
            Message::ToolResult(result) => match wire.get(&result.call_id) {
                Some(wire_id) => Arc::new(Message::ToolResult({
                    let mut tool_result_message = result.clone();
                    tool_result_message.call_id = wire_id.clone();
                    tool_result_message
                })),
                None => message,
            },
            _ => message,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_protocol::{ContentBlock, ToolCall, ToolStatus};

    fn start(id: &str) -> ProviderEvent {
        ProviderEvent::ToolCallStart {
            index: 0,
            id: id.into(),
            name: "bash".into(),
        }
    }

    fn given(event: ProviderEvent) -> String {
        match event {
            ProviderEvent::ToolCallStart { id, .. } => id,
            other => panic!("not a call start: {other:?}"),
        }
    }

    #[test]
    fn new_ids_are_kept_and_missing_or_repeated_ones_replaced() {
        let used = Arc::new(HashSet::from(["call_0".to_owned()]));
        let mut ids = ResponseIds::new(used);
        let fresh_id = given(ids.assign(start("a")));
        assert_eq!(fresh_id, "a");
        let repeated = given(ids.assign(start("call_0")));
        assert!(repeated.starts_with("call_") && repeated != "call_0");
        let missing = given(ids.assign(start("")));
        assert!(missing.starts_with("call_") && !missing.is_empty());
        let twice = given(ids.assign(start("a")));
        assert!(twice != "a" && twice != repeated && twice != missing);
        let mut message = {
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = [&fresh_id, &repeated, &missing, &twice]
                .iter()
                .map(|id| ContentBlock::ToolCall(ToolCall::new(*id, "bash", serde_json::json!({}))))
                .collect();
            assistant_message
        };
        ids.attach(&mut message);
        let wire: Vec<Option<&str>> = message
            .tool_calls()
            .map(|call| call.wire_id.as_deref())
            .collect();
        // A repeated id goes back on the wire; a missing one has none, and
        // a second `a` in one response cannot be told apart from the first.
        assert_eq!(wire, [None, Some("call_0"), None, None]);
    }

    #[test]
    fn requests_carry_the_provider_ids_in_calls_and_results() {
        let mut call = ToolCall::new("call_unique", "bash", serde_json::json!({}));
        call.wire_id = Some("call_0".into());
        let assistant = Arc::new(Message::Assistant({
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = vec![ContentBlock::ToolCall(call)];
            assistant_message
        }));
        let result = Arc::new(Message::ToolResult(keel_protocol::ToolResultMessage::new(
            "call_unique",
            "bash",
            ToolStatus::Success,
            Vec::new(),
        )));
        let untouched = Arc::new(Message::User(keel_protocol::UserMessage::text("hi")));
        let sent = for_wire(vec![untouched.clone(), assistant, result]);
        assert!(Arc::ptr_eq(&sent[0], &untouched));
        let Message::Assistant(assistant) = sent[1].as_ref() else {
            panic!("an assistant message")
        };
        let call = assistant.tool_calls().next().unwrap();
        assert_eq!(
            (call.id.as_str(), call.wire_id.as_deref()),
            ("call_0", None)
        );
        let Message::ToolResult(result) = sent[2].as_ref() else {
            panic!("a result")
        };
        assert_eq!(result.call_id, "call_0");
    }
}
