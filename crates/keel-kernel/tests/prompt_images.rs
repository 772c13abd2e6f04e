//! A run's prompt is content blocks: text and images reach the session's
//! user message in order, an image-only prompt is a prompt, and a prompt
//! with neither non-blank text nor an image is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use keel_kernel::{AgentKernel, KernelError, RunSpec};
use keel_protocol::{EntryPayload, ImageContent, Message, RunState, UserContent};
use keel_provider::{Script, ScriptedProvider};
use keel_session::{MemoryStore, SessionStore};
use keel_tools::Workspace;

fn png(tag: &str) -> ImageContent {
    ImageContent::new("image/png", format!("iVBORw0KGgo{tag}"))
}

/// Runs `spec` against a scripted answer and returns the content of the
/// session's first user message.
async fn stored_prompt(spec: RunSpec) -> Vec<UserContent> {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::new());
    let script = r#"{"turns": [{"content": [{"type": "text", "text": "seen"}]}]}"#;
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(script).unwrap(),
        )))
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(store.clone())
        .build()
        .unwrap();
    let run = kernel.create_run(spec).await.unwrap();
    let result = run.result().await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
    let entries = store.entries(&result.session_id).await.unwrap();
    entries
        .into_iter()
        .find_map(|entry| match entry.payload {
            EntryPayload::Message {
                message: Message::User(user),
            } => Some(user.content),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn a_text_and_image_prompt_is_stored_in_order() {
    let spec = RunSpec::new("describe these")
        .image(png("A"))
        .image(png("B"));
    assert_eq!(
        stored_prompt(spec).await,
        [
            UserContent::Text {
                text: "describe these".into()
            },
            UserContent::Image(png("A")),
            UserContent::Image(png("B")),
        ]
    );
}

#[tokio::test]
async fn an_image_only_prompt_is_stored_without_a_blank_text_block() {
    let spec = RunSpec::new("").image(png("A"));
    assert_eq!(stored_prompt(spec).await, [UserContent::Image(png("A"))]);
    let blocks = vec![
        UserContent::Image(png("A")),
        UserContent::Text {
            text: "after".into(),
        },
    ];
    let spec = RunSpec::new("ignored").content(blocks.clone());
    assert_eq!(stored_prompt(spec).await, blocks);
}

#[tokio::test]
async fn a_prompt_without_text_or_image_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(r#"{"turns": [{"content": [{"type": "text", "text": "x"}]}]}"#)
                .unwrap(),
        )))
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    for spec in [RunSpec::new("  \n"), RunSpec::new("x").content(Vec::new())] {
        let error = kernel.create_run(spec).await.err().unwrap();
        assert!(matches!(error, KernelError::EmptyPrompt), "{error:?}");
    }
}
