//! The exact model-visible request, snapshotted, for the shapes a context
//! takes: a plain branch, after a branch switch, after one and two
//! checkpoints, with a steering message injected, after a provider switch,
//! and with two AGENTS.md files. Driven through the public seams: a
//! provider that records every request it receives, sessions built in a
//! `MemoryStore`, runs started by `AgentKernel`.
//!
//! Volatile parts of the system prompt (the workspace path, the date, the
//! OS and the shell) are replaced by placeholders before the snapshot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{Recorder, Reply, assistant, entry, render, tool_result, user};
use keel_kernel::{AgentKernel, Instructions, RunSpec};
use keel_protocol::{ContentBlock, EntryPayload, PermissionMode, RunState};
use keel_session::{MemoryStore, NewSession, SessionStore};
use keel_tools::Workspace;
use keel_tools::builtin::ReadTool;

struct Setup {
    dir: tempfile::TempDir,
    store: Arc<MemoryStore>,
    provider: Arc<Recorder>,
}

impl Setup {
    /// A workspace that is a git repository of its own (so instruction
    /// discovery stops at it), with `notes.txt`.
    fn new(replies: Vec<Reply>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "remember the milk\n").unwrap();
        Self {
            dir,
            store: Arc::new(MemoryStore::new()),
            provider: Arc::new(Recorder::new(replies)),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn builder(&self) -> keel_kernel::AgentKernelBuilder {
        AgentKernel::builder()
            .provider(self.provider.clone())
            .model("recorder-1")
            .workspace(Workspace::new(self.root()).unwrap())
            .store(self.store.clone())
            .tool(Arc::new(ReadTool::default()))
            .project_instructions({
                let mut instructions = Instructions::default();
                instructions.global_dir = Some(self.root().join("no-global-config"));
                instructions
            })
    }

    /// A kernel with a short system prompt, so snapshots show the rest.
    fn kernel(&self) -> AgentKernel {
        self.builder()
            .system_prompt("You are a test agent.")
            .append_system_prompt("Answer in one word.")
            .build()
            .unwrap()
    }

    async fn run(&self, kernel: &AgentKernel, spec: RunSpec) {
        let run = kernel
            .create_run(spec.mode(PermissionMode::Auto))
            .await
            .unwrap();
        let mut events = run.events().unwrap();
        while events.next().await.is_some() {}
        let result = run.result().await;
        assert_eq!(result.state, RunState::Settled, "{result:?}");
    }

    fn last_request(&self) -> String {
        render(
            &self.provider.requests().last().unwrap().clone(),
            self.root(),
        )
    }

    /// A session holding `entries` as given (ids and parents included).
    async fn session(&self, entries: Vec<keel_protocol::Entry>) -> String {
        let id = self.store.create(NewSession::default()).await.unwrap();
        self.store.append(&id, entries).await.unwrap();
        id
    }
}

#[tokio::test]
async fn a_plain_branch_with_the_default_prompt() {
    let setup = Setup::new(vec![
        Reply::call("call_1", "read", r#"{"path":"notes.txt"}"#),
        Reply::text("The note says to remember the milk."),
    ]);
    let kernel = setup.builder().build().unwrap();
    setup
        .run(&kernel, RunSpec::new("What does notes.txt say?"))
        .await;
    insta::assert_snapshot!("plain_branch", setup.last_request());
}

#[tokio::test]
async fn after_a_branch_switch_the_sibling_is_absent() {
    let setup = Setup::new(vec![Reply::text("Blue.")]);
    let id = setup
        .session(vec![
            entry("u1", None, user("Pick a colour.")),
            entry("a1", Some("u1"), assistant("Red.")),
            entry("u2", Some("a1"), user("Another one, sibling A.")),
            entry("a2", Some("u2"), assistant("Green.")),
            entry("u3", Some("a1"), user("Another one, sibling B.")),
            entry("a3", Some("u3"), assistant("Yellow.")),
        ])
        .await;
    setup.store.set_leaf(&id, "a2").await.unwrap();
    setup
        .run(&setup.kernel(), RunSpec::new("And a third?").session(&id))
        .await;
    let request = setup.last_request();
    assert!(!request.contains("sibling B"), "{request}");
    insta::assert_snapshot!("branch_switch", request);
}

/// Two turns, a checkpoint covering the first, and a third turn.
fn one_checkpoint() -> Vec<keel_protocol::Entry> {
    vec![
        entry("u1", None, user("Read notes.txt.")),
        entry(
            "a1",
            Some("u1"),
            common::assistant_call("c1", "read", r#"{"path":"notes.txt"}"#),
        ),
        entry(
            "r1",
            Some("a1"),
            tool_result("c1", "read", "remember the milk"),
        ),
        entry("a1b", Some("r1"), assistant("It says: remember the milk.")),
        entry("u2", Some("a1b"), user("Thanks. Now count to three.")),
        entry("a2", Some("u2"), assistant("One, two, three.")),
        keel_protocol::Entry::new(
            "k1",
            Some("a2".into()),
            0,
            EntryPayload::checkpoint("## Goal\n- read notes.txt (first summary)", "u2"),
        ),
    ]
}

#[tokio::test]
async fn after_one_checkpoint() {
    let setup = Setup::new(vec![Reply::text("Four.")]);
    let id = setup.session(one_checkpoint()).await;
    let kernel = setup.kernel();
    let preview = kernel.preview_request(&id).await.unwrap();
    setup
        .run(&kernel, RunSpec::new("And the next number?").session(&id))
        .await;
    // The preview is the run's first request without the prompt (and the
    // configuration entry the run adds, which is no message).
    let sent = setup.provider.requests().last().unwrap().clone();
    assert_eq!(preview.request.system_prompt, sent.system_prompt);
    assert_eq!(preview.request.tools, sent.tools);
    assert_eq!(
        preview.request.messages[..],
        sent.messages[..sent.messages.len() - 1]
    );
    assert!(preview.context.estimated_tokens > 0);
    let request = setup.last_request();
    assert!(!request.contains("Read notes.txt."), "{request}");
    insta::assert_snapshot!("one_checkpoint", request);
}

#[tokio::test]
async fn after_a_second_checkpoint() {
    let setup = Setup::new(vec![Reply::text("Six.")]);
    let mut entries = one_checkpoint();
    entries.extend([
        entry("u3", Some("k1"), user("And the next number?")),
        entry("a3", Some("u3"), assistant("Four.")),
        entry("u4", Some("a3"), user("Then?")),
        entry("a4", Some("u4"), assistant("Five.")),
        keel_protocol::Entry::new(
            "k2",
            Some("a4".into()),
            0,
            EntryPayload::Checkpoint {
                summary: "## Goal\n- count (second summary)".into(),
                first_kept_entry_id: "u4".into(),
                covered_entry_ids: vec![
                    "u2".into(),
                    "a2".into(),
                    "k1".into(),
                    "u3".into(),
                    "a3".into(),
                ],
                previous_checkpoint_id: Some("k1".into()),
                evidence: None,
                metrics: None,
            },
        ),
    ]);
    let id = setup.session(entries).await;
    setup
        .run(&setup.kernel(), RunSpec::new("Go on.").session(&id))
        .await;
    let request = setup.last_request();
    assert!(!request.contains("first summary"), "{request}");
    assert!(!request.contains("One, two, three."), "{request}");
    insta::assert_snapshot!("two_checkpoints", request);
}

#[tokio::test]
async fn with_a_steering_message_injected() {
    let setup = Setup::new(vec![
        Reply::call("call_1", "read", r#"{"path":"notes.txt"}"#),
        Reply::text("Milk, in French: lait."),
    ]);
    let kernel = setup.kernel();
    let run = kernel
        .create_run(RunSpec::new("What does notes.txt say?").mode(PermissionMode::Auto))
        .await
        .unwrap();
    run.steer("Answer in French.").unwrap();
    let mut events = run.events().unwrap();
    while events.next().await.is_some() {}
    assert_eq!(run.result().await.state, RunState::Settled);
    let requests = setup.provider.requests();
    assert_eq!(requests.len(), 2);
    assert!(!render(&requests[0], setup.root()).contains("French"));
    insta::assert_snapshot!("steering_injected", setup.last_request());
}

#[tokio::test]
async fn after_a_provider_switch() {
    let setup = Setup::new(vec![Reply::text("Done.")]);
    let mut thought = common::assistant_call("call:1/x", "read", r#"{"path":"notes.txt"}"#);
    if let EntryPayload::Message {
        message: keel_protocol::Message::Assistant(message),
    } = &mut thought
    {
        message.content.insert(
            0,
            ContentBlock::Thinking {
                thinking: "The user wants the note.".into(),
                signature: Some("sig-from-the-other-provider".into()),
            },
        );
        message.provider = Some("other".into());
        message.model = Some("other-model".into());
    }
    let id = setup
        .session(vec![
            entry(
                "c0",
                None,
                EntryPayload::Configuration {
                    provider: "other".into(),
                    model: "other-model".into(),
                    mode: PermissionMode::Auto,
                    tools: vec!["read".into()],
                    permissions: Default::default(),
                    extensions: Vec::new(),
                },
            ),
            entry("u1", Some("c0"), user("Read notes.txt.")),
            entry("a1", Some("u1"), thought),
            entry(
                "r1",
                Some("a1"),
                tool_result("call:1/x", "read", "remember the milk"),
            ),
            entry("a2", Some("r1"), assistant("It says to remember the milk.")),
        ])
        .await;
    setup
        .run(&setup.kernel(), RunSpec::new("Summarise it.").session(&id))
        .await;
    let request = setup.last_request();
    assert!(
        !request.contains("sig-from-the-other-provider"),
        "{request}"
    );
    insta::assert_snapshot!("provider_switch", request);
}

#[tokio::test]
async fn with_two_agents_md_files() {
    let setup = Setup::new(vec![Reply::text("Ok.")]);
    let package = setup.root().join("package");
    std::fs::create_dir(&package).unwrap();
    std::fs::write(
        setup.root().join("AGENTS.md"),
        "# Repository rules\n\nRun `make test` before you finish.\n",
    )
    .unwrap();
    std::fs::write(
        package.join("AGENTS.md"),
        "# Package rules\n\nThis package uses tabs.\n",
    )
    .unwrap();
    std::fs::write(package.join("CLAUDE.md"), "ignored: AGENTS.md is here\n").unwrap();
    let kernel = AgentKernel::builder()
        .provider(setup.provider.clone())
        .model("recorder-1")
        .workspace(Workspace::new(&package).unwrap())
        .store(setup.store.clone())
        .tool(Arc::new(ReadTool::default()))
        .system_prompt("You are a test agent.")
        .project_instructions({
            let mut instructions = Instructions::default();
            instructions.global_dir = Some(setup.root().join("no-global-config"));
            instructions
        })
        .build()
        .unwrap();
    let run = kernel
        .create_run(RunSpec::new("Hello.").mode(PermissionMode::Auto))
        .await
        .unwrap();
    let mut events = run.events().unwrap();
    let mut loaded = None;
    while let Some(event) = events.next().await {
        if let keel_protocol::RunEventKind::RunStarted { instructions, .. } = event.kind {
            loaded = Some(instructions);
        }
    }
    let loaded = loaded.unwrap();
    let paths: Vec<&str> = loaded.iter().map(|file| file.path.as_str()).collect();
    let root = setup.root().display().to_string();
    assert_eq!(
        paths,
        [
            format!("{root}/AGENTS.md").as_str(),
            format!("{root}/package/AGENTS.md").as_str()
        ]
    );
    let request = setup.last_request();
    assert!(!request.contains("ignored:"), "{request}");
    insta::assert_snapshot!("two_agents_md", request);
}
