//! Helpers shared by the context tests: a provider that records every
//! request and answers from a queue, entry builders, and a plain-text
//! rendering of a request for snapshots.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;

use futures::StreamExt;
use keel_protocol::{
    AssistantMessage, ContentBlock, Entry, EntryPayload, Message, ProviderError, ProviderEvent,
    StopReason, ToolCall, ToolResultMessage, ToolStatus, Usage, UserContent, UserMessage,
};
use keel_provider::{ModelRequest, Provider, ProviderStream};
use tokio_util::sync::CancellationToken;

/// One scripted answer of the [`Recorder`].
#[derive(Debug, Clone)]
pub enum Reply {
    /// A text answer.
    Text(String),
    /// One tool call: id, name, JSON arguments.
    Call(String, String, String),
    /// A provider error.
    Error(ProviderError),
}

impl Reply {
    pub fn text(text: &str) -> Self {
        Self::Text(text.into())
    }

    pub fn call(id: &str, name: &str, arguments: &str) -> Self {
        Self::Call(id.into(), name.into(), arguments.into())
    }

    /// The provider events of this reply, with `usage` reported.
    pub fn events(&self, usage: Option<Usage>) -> Vec<ProviderEvent> {
        let mut events = vec![ProviderEvent::Start {
            model: None,
            response_id: None,
        }];
        let stop = match self {
            Self::Text(text) => {
                events.push(ProviderEvent::TextStart { index: 0 });
                events.push(ProviderEvent::TextDelta {
                    index: 0,
                    delta: text.clone(),
                });
                events.push(ProviderEvent::TextEnd { index: 0 });
                StopReason::Stop
            }
            Self::Call(id, name, arguments) => {
                events.push(ProviderEvent::ToolCallStart {
                    index: 0,
                    id: id.clone(),
                    name: name.clone(),
                });
                events.push(ProviderEvent::ToolCallDelta {
                    index: 0,
                    delta: arguments.clone(),
                });
                events.push(ProviderEvent::ToolCallEnd { index: 0 });
                StopReason::ToolUse
            }
            Self::Error(error) => {
                return vec![ProviderEvent::Error {
                    error: error.clone(),
                }];
            }
        };
        if let Some(usage) = usage {
            events.push(ProviderEvent::Usage { usage });
        }
        events.push(ProviderEvent::Done { stop_reason: stop });
        events
    }
}

/// Records every request; answers from a queue (`done.` once it is empty).
pub struct Recorder {
    requests: Mutex<Vec<ModelRequest>>,
    replies: Mutex<VecDeque<Reply>>,
}

impl Recorder {
    pub fn new(replies: Vec<Reply>) -> Self {
        Self {
            requests: Mutex::new(Vec::new()),
            replies: Mutex::new(replies.into()),
        }
    }

    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().unwrap().clone()
    }
}

impl Provider for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    fn stream(&self, request: ModelRequest, _cancel: CancellationToken) -> ProviderStream {
        self.requests.lock().unwrap().push(request);
        let reply = self
            .replies
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Reply::text("done."));
        futures::stream::iter(reply.events(None)).boxed()
    }
}

pub fn entry(id: &str, parent: Option<&str>, payload: EntryPayload) -> Entry {
    Entry::new(id, parent.map(str::to_owned), 0, payload)
}

pub fn user(text: &str) -> EntryPayload {
    EntryPayload::Message {
        message: Message::User(UserMessage::text(text)),
    }
}

pub fn assistant(text: &str) -> EntryPayload {
    EntryPayload::Message {
        message: Message::Assistant({
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = vec![ContentBlock::Text { text: text.into() }];
            assistant_message.provider = Some("recorder".into());
            assistant_message.model = Some("recorder-1".into());
            assistant_message
        }),
    }
}

pub fn assistant_call(id: &str, name: &str, arguments: &str) -> EntryPayload {
    EntryPayload::Message {
        message: Message::Assistant({
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = vec![ContentBlock::ToolCall(ToolCall::new(
                id,
                name,
                serde_json::from_str(arguments).unwrap(),
            ))];
            assistant_message.stop_reason = StopReason::ToolUse;
            assistant_message.provider = Some("recorder".into());
            assistant_message.model = Some("recorder-1".into());
            assistant_message
        }),
    }
}

pub fn tool_result(call_id: &str, name: &str, text: &str) -> EntryPayload {
    EntryPayload::Message {
        message: Message::ToolResult({
            let mut tool_result_message = ToolResultMessage::new(
                call_id,
                name,
                ToolStatus::Success,
                vec![UserContent::Text { text: text.into() }],
            );
            tool_result_message.error = None;
            tool_result_message.details = None;
            tool_result_message
        }),
    }
}

/// The request as text: model and limits, tool specs (JSON), the system
/// prompt, then each message. `root` becomes `<workspace>`; the date, OS
/// and shell lines of the environment become placeholders.
pub fn render(request: &ModelRequest, root: &Path) -> String {
    let mut out = format!(
        "model: {}\nmax_output_tokens: {:?}\n\n=== tools\n",
        request.model, request.max_output_tokens
    );
    for tool in &request.tools {
        out.push_str(&serde_json::to_string(tool).unwrap());
        out.push('\n');
    }
    out.push_str("\n=== system\n");
    for line in request.system_prompt.lines() {
        let line = if line.starts_with("- Date: ") {
            "- Date: <date>".to_owned()
        } else if line.starts_with("- Operating system: ") {
            "- Operating system: <os>".to_owned()
        } else if line.starts_with("- Shell: ") {
            "- Shell: <shell>".to_owned()
        } else {
            line.to_owned()
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("\n=== messages\n");
    for message in &request.messages {
        match message.as_ref() {
            Message::User(user) => out.push_str(&format!("[user] {}\n", user.plain_text())),
            Message::Assistant(assistant) => {
                for block in &assistant.content {
                    match block {
                        ContentBlock::Text { text } => {
                            out.push_str(&format!("[assistant] {text}\n"));
                        }
                        ContentBlock::Thinking {
                            thinking,
                            signature,
                        } => out.push_str(&format!(
                            "[assistant thinking{}] {thinking}\n",
                            if signature.is_some() { ", signed" } else { "" }
                        )),
                        ContentBlock::ToolCall(call) => out.push_str(&format!(
                            "[assistant calls {} {}] {}\n",
                            call.name, call.id, call.arguments
                        )),
                    }
                }
            }
            Message::ToolResult(result) => out.push_str(&format!(
                "[result {} {} {:?}] {}\n",
                result.tool_name,
                result.call_id,
                result.status,
                result.text()
            )),
        }
    }
    out.replace(&root.display().to_string(), "<workspace>")
}

/// Whether `request` is a compaction's summary request.
pub fn is_summary_request(request: &ModelRequest) -> bool {
    request.tools.is_empty() && request.system_prompt.contains("checkpoint summaries")
}

/// A valid summary (all eight headings) naming itself `label`.
pub fn valid_summary(label: &str) -> String {
    [
        "Goal",
        "Constraints and preferences",
        "Done and verified",
        "In progress",
        "Blocked",
        "Key decisions",
        "Exact files, symbols, commands and errors",
        "Next steps",
    ]
    .iter()
    .map(|heading| format!("## {heading}\n- {label}\n"))
    .collect()
}

/// A simulated model: plays conversation replies from one queue and
/// summary replies from another (a valid summary once it is empty),
/// records both kinds of request, may refuse conversation requests above
/// `limit` o200k tokens with a context-length error (as a real server does),
/// and reports the o200k count as its input tokens.
pub struct Sim {
    pub requests: Mutex<Vec<ModelRequest>>,
    pub summaries: Mutex<Vec<ModelRequest>>,
    replies: Mutex<VecDeque<Reply>>,
    summary_replies: Mutex<VecDeque<Reply>>,
    /// Refuse conversation requests above this many tokens.
    pub limit: Option<u64>,
    /// Token counts of every conversation request, refused ones included.
    pub sizes: Mutex<Vec<u64>>,
}

impl Sim {
    pub fn new(replies: Vec<Reply>, summary_replies: Vec<Reply>, limit: Option<u64>) -> Self {
        Self {
            requests: Mutex::new(Vec::new()),
            summaries: Mutex::new(Vec::new()),
            replies: Mutex::new(replies.into()),
            summary_replies: Mutex::new(summary_replies.into()),
            limit,
            sizes: Mutex::new(Vec::new()),
        }
    }

    pub fn overflow_error(tokens: u64, limit: u64) -> ProviderError {
        ProviderError::new(
            keel_protocol::ProviderErrorKind::ContextOverflow,
            format!(
                "This model's maximum context length is {limit} tokens. \
                 However, your messages resulted in {tokens} tokens."
            ),
        )
    }
}

impl Provider for Sim {
    fn name(&self) -> &str {
        "sim"
    }

    fn stream(&self, request: ModelRequest, _cancel: CancellationToken) -> ProviderStream {
        let tokens = keel_kernel::tokens::request_tokens(
            &request.system_prompt,
            &request.tools,
            &request.messages,
        );
        let usage = Some({
            let mut usage = Usage::default();
            usage.input_tokens = tokens;
            usage.output_tokens = 10;
            usage
        });
        if is_summary_request(&request) {
            let label = format!("summary {}", self.summaries.lock().unwrap().len() + 1);
            self.summaries.lock().unwrap().push(request);
            let reply = self
                .summary_replies
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Reply::Text(valid_summary(&label)));
            return futures::stream::iter(reply.events(usage)).boxed();
        }
        self.sizes.lock().unwrap().push(tokens);
        self.requests.lock().unwrap().push(request);
        if let Some(limit) = self.limit
            && tokens > limit
        {
            let error = Self::overflow_error(tokens, limit);
            return futures::stream::iter(vec![ProviderEvent::Error { error }]).boxed();
        }
        let reply = self
            .replies
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Reply::text("done."));
        futures::stream::iter(reply.events(usage)).boxed()
    }
}
