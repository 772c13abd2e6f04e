//! A request shares the kernel's messages instead of copying them.
//!
//! The context branch of a long session is most of a run's memory. The kernel
//! keeps each message once and every `ModelRequest` holds the same `Arc`s, so
//! a resumed session costs one copy of its branch however many turns run
//! (docs/benchmarks.md). These tests fail if building a request copies the
//! history again: a copied message would be a fresh `Arc` held by nothing but
//! the request (strong count 1), and a different allocation on every turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use keel_kernel::{AgentKernel, RunSpec};
use keel_protocol::{
    AssistantMessage, ContentBlock, Entry, EntryPayload, Message, RunState, StopReason, Usage,
    UserMessage,
};
use keel_provider::{ModelRequest, Provider, ProviderStream, Script, ScriptedProvider};
use keel_session::{MemoryStore, NewSession, SessionStore};
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, default_tools};
use tokio_util::sync::CancellationToken;

/// What the provider saw: the request, and each message's strong count at
/// the moment the request reached it.
struct Seen {
    request: ModelRequest,
    counts: Vec<usize>,
}

/// The scripted provider, recording every request it is given.
struct Recording {
    inner: ScriptedProvider,
    seen: Mutex<Vec<Seen>>,
}

impl Provider for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> ProviderStream {
        let counts = request.messages.iter().map(Arc::strong_count).collect();
        self.seen.lock().unwrap().push(Seen {
            request: request.clone(),
            counts,
        });
        self.inner.stream(request, cancel)
    }
}

fn entry(id: usize, payload: EntryPayload) -> Entry {
    Entry::new(
        format!("e{id}"),
        id.checked_sub(1).map(|parent| format!("e{parent}")),
        1,
        payload,
    )
}

fn message(message: Message) -> EntryPayload {
    EntryPayload::Message { message }
}

/// An answer with some thinking, written by `model` of `provider`.
fn answer(text: &str, provider: &str, model: &str) -> Message {
    Message::Assistant({
        let mut assistant_message = AssistantMessage::default();
        assistant_message.content = vec![
            ContentBlock::Thinking {
                thinking: format!("thinking about {text}"),
                signature: Some("signed".into()),
            },
            ContentBlock::Text { text: text.into() },
        ];
        assistant_message.stop_reason = StopReason::Stop;
        assistant_message.usage = Usage::default();
        assistant_message.model = Some(model.into());
        assistant_message.provider = Some(provider.into());
        assistant_message
    })
}

/// A session of `exchanges` user/assistant pairs (answered by the scripted
/// model), then `extra` entries.
async fn session(store: &MemoryStore, exchanges: usize, extra: Vec<EntryPayload>) -> String {
    session_by(store, exchanges, extra, ("scripted", "scripted")).await
}

async fn session_by(
    store: &MemoryStore,
    exchanges: usize,
    extra: Vec<EntryPayload>,
    (provider, model): (&str, &str),
) -> String {
    let id = store.create(NewSession::default()).await.unwrap();
    let mut payloads = Vec::new();
    for n in 0..exchanges {
        payloads.push(message(Message::User(UserMessage::text(format!(
            "question {n}: {}",
            "x".repeat(1000)
        )))));
        payloads.push(message(answer(&format!("answer {n}"), provider, model)));
    }
    payloads.extend(extra);
    let entries = payloads
        .into_iter()
        .enumerate()
        .map(|(position, payload)| entry(position, payload))
        .collect();
    store.append(&id, entries).await.unwrap();
    id
}

/// Resumes `session_id` for a run of two turns (a tool call, then an
/// answer) and returns what the provider saw.
async fn resume(store: Arc<MemoryStore>, session_id: &str) -> Vec<Seen> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "contents").unwrap();
    let script = r#"{"turns":[
        {"content":[{"type":"tool_call","name":"read","arguments":{"path":"a.txt"}}]},
        {"expect":{"tool_results":1},"content":[{"type":"text","text":"done"}]}]}"#;
    let provider = Arc::new(Recording {
        inner: ScriptedProvider::new(Script::from_json(script).unwrap()),
        seen: Mutex::new(Vec::new()),
    });
    let kernel = AgentKernel::builder()
        .provider(provider.clone())
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(store)
        .tools(default_tools(BashOptions::default()))
        .build()
        .unwrap();
    let run = kernel
        .create_run(RunSpec::new("continue").session(session_id))
        .await
        .unwrap();
    let result = run.result().await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
    std::mem::take(&mut *provider.seen.lock().unwrap())
}

#[tokio::test]
async fn every_request_shares_the_branch_messages_the_kernel_holds() {
    let store = Arc::new(MemoryStore::new());
    let id = session(&store, 50, Vec::new()).await;
    let seen = resume(store, &id).await;
    assert_eq!(seen.len(), 2, "two turns, two requests");
    let (first, second) = (&seen[0], &seen[1]);
    // The resumed branch, the configuration's absence aside: 100 messages
    // and the new prompt; then the tool call and its result.
    assert_eq!(first.request.messages.len(), 101);
    assert_eq!(second.request.messages.len(), 103);
    for seen in [first, second] {
        for (position, count) in seen.counts.iter().enumerate() {
            assert!(
                *count >= 2,
                "message {position} of a request is held by the request alone \
                 (strong count {count}): the projection copied it"
            );
        }
    }
    for (position, (earlier, later)) in first
        .request
        .messages
        .iter()
        .zip(&second.request.messages)
        .enumerate()
    {
        assert!(
            Arc::ptr_eq(earlier, later),
            "message {position} was copied again for the second turn"
        );
    }
}

#[tokio::test]
async fn messages_kept_after_a_checkpoint_are_shared_too() {
    let store = Arc::new(MemoryStore::new());
    let checkpoint = EntryPayload::checkpoint("fifty questions were answered", "e96");
    let id = session(&store, 50, vec![checkpoint]).await;
    let seen = resume(store, &id).await;
    let first = &seen[0];
    // The summary, the four kept messages (e96..e99) and the new prompt.
    assert_eq!(first.request.messages.len(), 6);
    let Message::User(summary) = first.request.messages[0].as_ref() else {
        panic!("the summary comes first: {:?}", first.request.messages[0]);
    };
    assert!(summary.plain_text().contains("fifty questions"));
    for (position, count) in first.counts.iter().enumerate().skip(1) {
        assert!(
            *count >= 2,
            "kept message {position} was copied (strong count {count})"
        );
    }
}

/// A session another model wrote is adapted for this run's model once, when
/// it is resumed: its thinking reaches every request as text, and no request
/// copies it again.
#[tokio::test]
async fn another_models_history_is_adapted_once_not_per_request() {
    let store = Arc::new(MemoryStore::new());
    let id = session_by(&store, 50, Vec::new(), ("anthropic", "claude-sonnet-4-5")).await;
    let seen = resume(store, &id).await;
    let (first, second) = (&seen[0], &seen[1]);
    let Message::Assistant(answer) = first.request.messages[1].as_ref() else {
        panic!("an answer: {:?}", first.request.messages[1]);
    };
    assert_eq!(
        answer.content,
        [
            ContentBlock::Text {
                text: "thinking about answer 0".into()
            },
            ContentBlock::Text {
                text: "answer 0".into()
            }
        ],
        "another model's thinking goes as text"
    );
    for (position, count) in first.counts.iter().enumerate() {
        assert!(
            *count >= 2,
            "message {position} was copied to adapt it (strong count {count})"
        );
    }
    for (earlier, later) in first.request.messages.iter().zip(&second.request.messages) {
        assert!(Arc::ptr_eq(earlier, later), "adapted again on turn two");
    }
}
