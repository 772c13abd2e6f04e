//! Request bodies written one item at a time, as the connection takes them.
//!
//! Why: a request carries the whole history, so its body is as large as the
//! history. Built as one `serde_json::Value` and then serialised into one
//! string, it held two more copies of the history's text while it was sent
//! (docs/benchmarks.md). Here an adapter describes its body as a few small
//! fields (the head) and one long list (`messages`, `input`) whose items it
//! produces one history message at a time ([`WireItems`]); [`JsonBody`]
//! serialises the items into chunks while the request is sent, so the body
//! never exists whole in memory.
//!
//! Invariants:
//! - The bytes are one JSON object: the head's fields in the map's order,
//!   then the list.
//! - Producing the body is deterministic. A first pass counts its bytes for
//!   `Content-Length` (a server may refuse a chunked upload), the second
//!   sends them; both produce the same bytes, so the length is exact.
//! - Memory while sending: one chunk and the items of one history message
//!   (for the Messages API, of one run of same-role messages), whatever the
//!   history's length.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use keel_protocol::Message;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE};
use serde_json::{Map, Value};

use crate::ModelRequest;

/// The size a chunk grows to before it is handed to the connection.
const CHUNK_BYTES: usize = 64 * 1024;

/// How one API turns a request's history into the items of its list.
///
/// A value holds the adapter's options and its state between messages; the
/// body clones the fresh value for each pass.
pub(crate) trait WireItems: Clone + Send + Sync + 'static {
    /// Pushes the items that come before the history (e.g. a system message).
    fn start(&mut self, _request: &ModelRequest, _out: &mut Vec<Value>) {}

    /// Pushes the items for `message`, the next message of the history, or,
    /// called once with `None` after the last one, those still held back.
    fn step(&mut self, message: Option<&Message>, out: &mut Vec<Value>);
}

/// A JSON request body: small fields, and one list produced item by item.
pub(crate) struct JsonBody<W> {
    request: ModelRequest,
    head: Map<String, Value>,
    list: &'static str,
    items: W,
}

impl<W: WireItems> JsonBody<W> {
    /// The body `{head…, list: [items…]}` for `request`.
    pub(crate) fn new(
        request: ModelRequest,
        head: Map<String, Value>,
        list: &'static str,
        items: W,
    ) -> Self {
        Self {
            request,
            head,
            list,
            items,
        }
    }

    /// The whole body as one value (for tests and inspection; sending uses
    /// [`JsonBody::attach`]).
    pub(crate) fn to_value(&self) -> Value {
        let mut items = Items::new(self.items.clone());
        let mut list = Vec::new();
        while let Some(item) = items.next(&self.request) {
            list.push(item);
        }
        let mut body = self.head.clone();
        body.insert(self.list.to_owned(), Value::Array(list));
        Value::Object(body)
    }

    /// `builder` with this body, streamed, and its exact `Content-Length`.
    pub(crate) fn attach(self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let body = Arc::new(self);
        let length: u64 = Chunks::new(body.clone())
            .map(|chunk| chunk.len() as u64)
            .sum();
        let chunks = Chunks::new(body).map(Ok::<_, Infallible>);
        builder
            .header(CONTENT_TYPE, "application/json")
            .header(CONTENT_LENGTH, length)
            .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
    }
}

/// The list's items in order: the adapter's state and what it has pushed
/// but not yet handed out.
struct Items<W> {
    items: W,
    started: bool,
    next: usize,
    ended: bool,
    queue: VecDeque<Value>,
    scratch: Vec<Value>,
}

impl<W: WireItems> Items<W> {
    fn new(items: W) -> Self {
        Self {
            items,
            started: false,
            next: 0,
            ended: false,
            queue: VecDeque::new(),
            scratch: Vec::new(),
        }
    }

    fn next(&mut self, request: &ModelRequest) -> Option<Value> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            if !self.started {
                self.started = true;
                self.items.start(request, &mut self.scratch);
            } else if let Some(message) = request.messages.get(self.next) {
                self.next += 1;
                self.items.step(Some(message.as_ref()), &mut self.scratch);
            } else if !self.ended {
                self.ended = true;
                self.items.step(None, &mut self.scratch);
            } else {
                return None;
            }
            self.queue.extend(self.scratch.drain(..));
        }
    }
}

/// Where the serialisation is.
enum Stage {
    Head,
    List { first: bool },
    Done,
}

/// The body's bytes, in chunks of about [`CHUNK_BYTES`].
struct Chunks<W> {
    body: Arc<JsonBody<W>>,
    items: Items<W>,
    stage: Stage,
}

impl<W: WireItems> Chunks<W> {
    fn new(body: Arc<JsonBody<W>>) -> Self {
        let items = Items::new(body.items.clone());
        Self {
            body,
            items,
            stage: Stage::Head,
        }
    }
}

impl<W: WireItems> Iterator for Chunks<W> {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        let mut chunk = Vec::with_capacity(CHUNK_BYTES);
        loop {
            match self.stage {
                Stage::Head => {
                    chunk.push(b'{');
                    for (key, value) in &self.body.head {
                        write_json(&mut chunk, &Value::String(key.clone()));
                        chunk.push(b':');
                        write_json(&mut chunk, value);
                        chunk.push(b',');
                    }
                    write_json(&mut chunk, &Value::String(self.body.list.to_owned()));
                    chunk.extend_from_slice(b":[");
                    self.stage = Stage::List { first: true };
                }
                Stage::List { first } => match self.items.next(&self.body.request) {
                    Some(item) => {
                        if !first {
                            chunk.push(b',');
                        }
                        write_json(&mut chunk, &item);
                        self.stage = Stage::List { first: false };
                        if chunk.len() >= CHUNK_BYTES {
                            return Some(chunk);
                        }
                    }
                    None => {
                        chunk.extend_from_slice(b"]}");
                        self.stage = Stage::Done;
                        return Some(chunk);
                    }
                },
                Stage::Done => return None,
            }
        }
    }
}

/// Appends `value` as JSON. Serialising a `Value` cannot fail (its keys are
/// strings) and writing into a `Vec` cannot either; the error arm writes
/// `null` only so that the body stays well-formed without a panic.
fn write_json(out: &mut Vec<u8>, value: &Value) {
    let before = out.len();
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(before);
        out.extend_from_slice(b"null");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_protocol::{ToolResultMessage, ToolStatus, UserContent, UserMessage};
    use serde_json::json;

    /// One item per message, its text; a tool result's item waits for the
    /// next message, and the end flushes it, so `step(None)` matters.
    #[derive(Clone, Default)]
    struct Texts {
        held: Option<Value>,
    }

    impl WireItems for Texts {
        fn start(&mut self, request: &ModelRequest, out: &mut Vec<Value>) {
            out.push(json!({ "system": request.system_prompt }));
        }

        fn step(&mut self, message: Option<&Message>, out: &mut Vec<Value>) {
            out.extend(self.held.take());
            match message {
                Some(Message::User(user)) => out.push(json!(user.plain_text())),
                Some(Message::ToolResult(result)) => self.held = Some(json!(result.text())),
                Some(Message::Assistant(_)) | None => {}
            }
        }
    }

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            system_prompt: "be brief \"always\"".into(),
            messages: messages.into_iter().map(Arc::new).collect(),
            tools: Vec::new(),
            max_output_tokens: None,
            purpose: crate::RequestPurpose::Turn,
        }
    }

    fn result(text: &str) -> Message {
        Message::ToolResult({
            let mut tool_result_message = ToolResultMessage::new(
                "c",
                "t",
                ToolStatus::Success,
                vec![UserContent::Text { text: text.into() }],
            );
            tool_result_message.error = None;
            tool_result_message.details = None;
            tool_result_message
        })
    }

    fn body(messages: Vec<Message>) -> JsonBody<Texts> {
        let mut head = Map::new();
        head.insert("model".into(), json!("m"));
        head.insert("stream".into(), json!(true));
        JsonBody::new(request(messages), head, "list", Texts::default())
    }

    fn bytes(body: JsonBody<Texts>) -> (Vec<Vec<u8>>, Vec<u8>) {
        let chunks: Vec<Vec<u8>> = Chunks::new(Arc::new(body)).collect();
        let all = chunks.concat();
        (chunks, all)
    }

    #[test]
    fn the_streamed_bytes_are_the_body_value() {
        let messages = vec![
            Message::User(UserMessage::text("hé \"quoted\"\n")),
            result("held back"),
            Message::User(UserMessage::text("next")),
            result("flushed at the end"),
        ];
        let value = body(messages.clone()).to_value();
        assert_eq!(
            value,
            json!({
                "model": "m",
                "stream": true,
                "list": [
                    {"system": "be brief \"always\""},
                    "hé \"quoted\"\n",
                    "held back",
                    "next",
                    "flushed at the end",
                ],
            })
        );
        let (_, all) = bytes(body(messages));
        let parsed: Value = serde_json::from_slice(&all).unwrap();
        assert_eq!(parsed, value);
    }

    #[test]
    fn an_empty_history_is_an_empty_list() {
        let mut head = Map::new();
        head.insert("model".into(), json!("m"));
        let body = JsonBody::new(request(Vec::new()), head, "list", Texts::default());
        let (_, all) = bytes(body);
        assert_eq!(
            serde_json::from_slice::<Value>(&all).unwrap(),
            json!({"model": "m", "list": [{"system": "be brief \"always\""}]})
        );
    }

    /// A long history is cut into chunks near the chunk size: the body is
    /// never produced whole.
    #[test]
    fn a_long_history_streams_in_bounded_chunks() {
        let text = "x".repeat(10_000);
        let messages: Vec<Message> = (0..200)
            .map(|_| Message::User(UserMessage::text(text.clone())))
            .collect();
        let (chunks, all) = bytes(body(messages));
        assert!(all.len() > 2_000_000);
        assert!(chunks.len() > 20, "{} chunks", chunks.len());
        for chunk in &chunks {
            assert!(chunk.len() < CHUNK_BYTES + 11_000, "{}", chunk.len());
        }
        let parsed: Value = serde_json::from_slice(&all).unwrap();
        assert_eq!(parsed["list"].as_array().unwrap().len(), 201);
    }
}
