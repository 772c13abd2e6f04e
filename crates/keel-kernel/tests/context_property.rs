//! A property over random session trees and random checkpoints: no
//! request ever holds an entry outside the active branch (nor one a
//! checkpoint covers), a queued message, a partial message, or a tool call
//! without its result.
//!
//! Each case builds a tree in a `MemoryStore` — turns (a user message, an
//! assistant message with 0–3 tool calls, their permission decisions and
//! results, a final answer) hung under random earlier turns — with
//! checkpoints written by the kernel's own manual compaction (random kept
//! budgets, so the planner picks the cuts) at random points. It then picks
//! a random leaf and runs a prompt there: the model's first attempt streams
//! a partial answer and drops; the host queues a follow-up at once. Every
//! text in the tree is a unique tag, so the test can say which entry a
//! request shows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::{Reply, assistant, assistant_call, entry, tool_result, user};
use keel_kernel::{AgentKernel, CompactionSettings, Instructions, RetryPolicy, RunSpec};
use keel_protocol::{
    ContentBlock, Entry, EntryPayload, IntentKind, IntentScope, Message, OperationIntent,
    PermissionDecision, PermissionMode, PermissionResolution, ProviderError, ProviderErrorKind,
    ProviderEvent, RunState, ToolCall, UserContent,
};
use keel_provider::{ModelRequest, Provider, ProviderStream};
use keel_session::{MemoryStore, SessionStore};
use keel_tools::Workspace;
use proptest::prelude::*;
use tokio_util::sync::CancellationToken;

/// A model whose first answer is cut off mid-stream (a retryable drop),
/// then answers `done.`; summary requests get a one-letter summary.
struct Flaky {
    sim: common::Sim,
    dropped: std::sync::atomic::AtomicBool,
}

impl Provider for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> ProviderStream {
        use futures::StreamExt;
        if !common::is_summary_request(&request)
            && !self.dropped.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            self.sim.requests.lock().unwrap().push(request);
            return futures::stream::iter(vec![
                ProviderEvent::Start {
                    model: None,
                    response_id: None,
                },
                ProviderEvent::TextStart { index: 0 },
                ProviderEvent::TextDelta {
                    index: 0,
                    delta: "PARTIAL".into(),
                },
                ProviderEvent::Error {
                    error: ProviderError::new(ProviderErrorKind::StreamDropped, "dropped"),
                },
            ])
            .boxed();
        }
        self.sim.stream(request, cancel)
    }
}

/// The tree under construction.
struct Tree {
    entries: Vec<Entry>,
    /// Entries a new turn (or a checkpoint) may hang under.
    ends: Vec<String>,
    next: usize,
}

impl Tree {
    fn tag(&mut self, kind: &str) -> String {
        self.next += 1;
        format!("{kind}{}", self.next)
    }

    fn push(&mut self, parent: Option<&str>, payload: EntryPayload) -> String {
        let id = self.tag("e");
        self.entries.push(entry(&id, parent, payload));
        id
    }

    /// A turn under `parent`: user, assistant with `calls` tool calls, a
    /// decision and a result per call, and a final answer.
    fn turn(&mut self, parent: Option<&str>, calls: usize) -> String {
        let text = self.tag("U");
        let mut last = self.push(parent, user(&text));
        if calls > 0 {
            let mut message = assistant_call("x", "read", "{}");
            let mut ids = Vec::new();
            if let EntryPayload::Message {
                message: Message::Assistant(assistant),
            } = &mut message
            {
                assistant.content.clear();
                for _ in 0..calls {
                    let id = self.tag("C");
                    assistant.content.push(ContentBlock::ToolCall(ToolCall::new(
                        id.clone(),
                        "read",
                        serde_json::json!({ "path": format!("{id}.txt") }),
                    )));
                    ids.push(id);
                }
            }
            last = self.push(Some(&last), message);
            for id in &ids {
                let decision = EntryPayload::PermissionDecision {
                    decision: {
                        let mut permission_decision = PermissionDecision::new(
                            id.clone(),
                            "read",
                            PermissionMode::Auto,
                            PermissionResolution::Approved,
                            keel_protocol::DecisionSource::Policy,
                            OperationIntent::new(IntentKind::Read, IntentScope::Workspace),
                        );
                        permission_decision.arguments_sha256 = "0".repeat(64);
                        permission_decision.reason = "read inside the workspace".into();
                        permission_decision
                    },
                };
                last = self.push(Some(&last), decision);
            }
            for id in &ids {
                let text = format!("R{id} {}", "padding ".repeat(30));
                last = self.push(Some(&last), tool_result(id, "read", &text));
            }
        }
        let answer = self.tag("A");
        let end = self.push(Some(&last), assistant(&answer));
        self.ends.push(end.clone());
        end
    }
}

/// The tags of every text a request shows, in order.
fn tags(request: &ModelRequest) -> Vec<String> {
    let mut out = Vec::new();
    let mut words = |text: &str| out.extend(text.split_whitespace().map(str::to_owned));
    for message in &request.messages {
        match message.as_ref() {
            Message::User(user) => user.content.iter().for_each(|block| {
                if let UserContent::Text { text } = block {
                    words(text);
                }
            }),
            Message::Assistant(assistant) => {
                assistant.content.iter().for_each(|block| match block {
                    ContentBlock::Text { text } => words(text),
                    ContentBlock::ToolCall(call) => words(&call.id),
                    ContentBlock::Thinking { thinking, .. } => words(thinking),
                })
            }
            Message::ToolResult(result) => words(&result.call_id),
        }
    }
    out
}

/// Every tool call is answered by a result before the next non-result message.
fn calls_have_results(request: &ModelRequest) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    for message in &request.messages {
        match message.as_ref() {
            Message::ToolResult(result) => open.retain(|id| *id != result.call_id),
            other => {
                if !open.is_empty() {
                    return Err(format!("calls {open:?} have no result"));
                }
                if let Message::Assistant(assistant) = other {
                    open = assistant
                        .tool_calls()
                        .map(|call| call.id.as_str())
                        .collect();
                }
            }
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("calls {open:?} have no result"))
    }
}

async fn case(ops: Vec<(u8, u16, u8)>, leaf: u16, keep: u64) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    let store = Arc::new(MemoryStore::new());
    let provider = Arc::new(Flaky {
        sim: common::Sim::new(
            vec![Reply::text("done."), Reply::text("done again.")],
            // A summary shorter than any span it covers (the turns here are
            // small, and a summary that does not shrink the context is
            // refused): free text, after its corrective request.
            vec![Reply::text("S"); 64],
            None,
        ),
        dropped: false.into(),
    });
    let kernel = AgentKernel::builder()
        .provider(provider.clone())
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(store.clone())
        .system_prompt("test")
        .project_instructions(Instructions::none())
        .retry({
            let mut retry_policy = RetryPolicy::default();
            retry_policy.base_delay = Duration::from_millis(1);
            retry_policy
        })
        .compaction({
            let mut compaction_settings = CompactionSettings::default();
            compaction_settings.keep_recent_tokens = keep;
            compaction_settings
        })
        .build()
        .unwrap();
    let session = store
        .create(keel_session::NewSession::default())
        .await
        .unwrap();
    let mut tree = Tree {
        entries: Vec::new(),
        ends: Vec::new(),
        next: 0,
    };
    tree.turn(None, 1);
    store.append(&session, tree.entries.clone()).await.unwrap();
    for (kind, pick, calls) in ops {
        let parent = tree.ends[usize::from(pick) % tree.ends.len()].clone();
        if kind < 4 {
            let before = tree.entries.len();
            tree.turn(Some(&parent), usize::from(calls % 4));
            store
                .append(&session, tree.entries[before..].to_vec())
                .await
                .unwrap();
        } else {
            store.set_leaf(&session, &parent).await.unwrap();
            if let Ok(report) = kernel.compact(&session, None).await {
                tree.ends.push(report.checkpoint_id);
            }
        }
    }
    let leaf = tree.ends[usize::from(leaf) % tree.ends.len()].clone();
    store.set_leaf(&session, &leaf).await.unwrap();
    let path = store.active_branch(&session).await.unwrap();
    let all = store.entries(&session).await.unwrap();

    let run = kernel
        .create_run(
            RunSpec::new("PROMPT")
                .session(&session)
                .mode(PermissionMode::Auto),
        )
        .await
        .unwrap();
    run.follow_up("QUEUED").unwrap();
    let mut events = run.events().unwrap();
    while events.next().await.is_some() {}
    prop_assert_eq!(run.result().await.state, RunState::Settled);

    // What the active branch may show: from the latest checkpoint's first
    // kept entry (the checkpoint's summary stands in for the rest).
    let visible: HashSet<String> = {
        let from = keel_session::from_latest_checkpoint(path.clone());
        from.iter().flat_map(text_tags).collect()
    };
    let everything: HashSet<String> = all.iter().flat_map(text_tags).collect();
    let requests = provider.sim.requests.lock().unwrap().clone();
    prop_assert_eq!(requests.len(), 3);
    for (index, request) in requests.iter().enumerate() {
        for tag in tags(request) {
            if everything.contains(&tag) {
                prop_assert!(
                    visible.contains(&tag),
                    "request {} shows {} from outside the visible branch",
                    index,
                    tag
                );
            }
            prop_assert!(
                tag != "PARTIAL",
                "request {} holds a partial message",
                index
            );
            prop_assert!(
                tag != "QUEUED" || index == 2,
                "request {} holds the queued message",
                index
            );
        }
        calls_have_results(request).map_err(TestCaseError::fail)?;
    }
    // The kernel's cuts never separate a call from its result.
    for checkpoint in &all {
        let EntryPayload::Checkpoint {
            covered_entry_ids,
            first_kept_entry_id,
            ..
        } = &checkpoint.payload
        else {
            continue;
        };
        let covered: HashSet<&str> = covered_entry_ids.iter().map(String::as_str).collect();
        for entry in &all {
            if let EntryPayload::Message {
                message: Message::Assistant(assistant),
            } = &entry.payload
            {
                for call in assistant.tool_calls() {
                    let result = all.iter().find(|e| matches!(&e.payload,
                        EntryPayload::Message { message: Message::ToolResult(r) } if r.call_id == call.id)).unwrap();
                    prop_assert_eq!(
                        covered.contains(entry.id.as_str()),
                        covered.contains(result.id.as_str()),
                        "checkpoint {} separates call {} from its result",
                        checkpoint.id,
                        call.id
                    );
                }
            }
        }
        let kept = all.iter().find(|e| &e.id == first_kept_entry_id).unwrap();
        prop_assert!(
            kept.id == checkpoint.id
                || matches!(
                    &kept.payload,
                    EntryPayload::Message {
                        message: Message::User(_) | Message::Assistant(_)
                    }
                ),
            "checkpoint {} keeps from {:?}",
            checkpoint.id,
            kept.payload.kind()
        );
    }
    // The two attempts of the first turn sent the same request.
    prop_assert_eq!(&requests[0], &requests[1]);
    Ok(())
}

/// The tags an entry's payload holds (texts, call ids, summaries).
fn text_tags(entry: &Entry) -> Vec<String> {
    match &entry.payload {
        EntryPayload::Message { message } => tags(&ModelRequest::new(
            "",
            "",
            vec![std::sync::Arc::new(message.clone())],
        )),
        _ => Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn requests_hold_only_the_visible_active_branch(
        ops in prop::collection::vec((0u8..6, any::<u16>(), any::<u8>()), 0..24),
        leaf in any::<u16>(),
        keep in prop_oneof![Just(0u64), 50u64..400, Just(20_000u64)],
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(case(ops, leaf, keep))?;
    }
}
