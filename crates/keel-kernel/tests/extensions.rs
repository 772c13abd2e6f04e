//! Extensions through `AgentKernel`: registration, and per hook point every
//! allowed outcome applied, every other outcome rejected, transforms
//! checked again (tool arguments against the schema and by the permission
//! policy), and handlers that fail, panic or hang never hang or crash the
//! run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Recorder, Reply};
use keel_kernel::extension::{HookError, HookFuture};
use keel_kernel::{
    AgentKernel, AgentKernelBuilder, Extension, Hook, HookEvent, HookHandler, HookPoint, HookReply,
    KernelError, RunSpec,
};
use keel_protocol::{
    Entry, EntryPayload, HookOutcomeKind, Message, PermissionMode, PermissionResolution,
    RunErrorCode, RunEventKind, RunResult, RunState, ToolErrorCode, ToolResultMessage, ToolStatus,
    UserContent,
};
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, default_tools};
use serde_json::{Value, json};

/// A handler that answers every event with `answer(event)`.
fn handler(
    answer: impl Fn(&HookEvent) -> HookReply + Send + Sync + 'static,
) -> Arc<dyn HookHandler> {
    Arc::new(move |event: HookEvent| {
        let reply = answer(&event);
        async move { Ok::<_, HookError>(reply) }
    })
}

/// One extension named `name` with one hook.
fn with_hook(name: &str, hook: Hook) -> Extension {
    Extension::new(name).version("1.0").hook(hook)
}

struct Setup {
    dir: tempfile::TempDir,
    recorder: Arc<Recorder>,
}

impl Setup {
    fn new(replies: Vec<Reply>) -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            recorder: Arc::new(Recorder::new(replies)),
        }
    }

    fn builder(&self) -> AgentKernelBuilder {
        AgentKernel::builder()
            .provider(self.recorder.clone())
            .workspace(Workspace::new(self.dir.path()).unwrap())
            .tools(default_tools(BashOptions::default()))
            .workspace_snapshots(None)
    }

    fn kernel(&self, extensions: Vec<Extension>) -> AgentKernel {
        let mut builder = self.builder();
        for extension in extensions {
            builder = builder.extension(extension);
        }
        builder.build().unwrap()
    }
}

/// What one run did: its events, result and the session's entries.
struct Ran {
    events: Vec<RunEventKind>,
    result: RunResult,
    entries: Vec<Entry>,
}

impl Ran {
    fn tool_results(&self) -> Vec<&ToolResultMessage> {
        self.entries
            .iter()
            .filter_map(|entry| match &entry.payload {
                EntryPayload::Message {
                    message: Message::ToolResult(result),
                } => Some(result),
                _ => None,
            })
            .collect()
    }

    fn dispatched(&self, point: HookPoint) -> Vec<HookOutcomeKind> {
        self.events
            .iter()
            .filter_map(|event| match event {
                RunEventKind::HookDispatched {
                    point: at, outcome, ..
                } if *at == point => Some(*outcome),
                _ => None,
            })
            .collect()
    }

    fn rejected(&self, point: HookPoint) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|event| match event {
                RunEventKind::HookOutcomeRejected {
                    point: at, reason, ..
                } if *at == point => Some(reason.clone()),
                _ => None,
            })
            .collect()
    }

    fn failed(&self) -> Vec<(HookPoint, String, bool)> {
        self.events
            .iter()
            .filter_map(|event| match event {
                RunEventKind::HookFailed {
                    point,
                    reason,
                    blocked,
                    ..
                } => Some((*point, reason.clone(), *blocked)),
                _ => None,
            })
            .collect()
    }

    fn asked(&self) -> usize {
        self.events
            .iter()
            .filter(|event| matches!(event, RunEventKind::PermissionRequested { .. }))
            .count()
    }
}

/// Runs `prompt` in `mode`, answering every permission request with
/// `answer`, within a minute.
async fn run(
    kernel: &AgentKernel,
    prompt: &str,
    mode: PermissionMode,
    answer: PermissionResolution,
) -> Ran {
    let run = kernel
        .create_run(RunSpec::new(prompt).mode(mode))
        .await
        .unwrap();
    let mut stream = run.events().unwrap();
    let mut events = Vec::new();
    let collect = async {
        while let Some(event) = stream.next().await {
            if let RunEventKind::PermissionRequested { request_id, .. } = &event.kind {
                run.resolve_permission(request_id, answer).unwrap();
            }
            events.push(event.kind);
        }
    };
    tokio::time::timeout(Duration::from_secs(60), collect)
        .await
        .expect("the run ended within a minute");
    let result = run.result().await;
    let entries = kernel
        .store()
        .context_branch(run.session_id())
        .await
        .unwrap();
    Ran {
        events,
        result,
        entries,
    }
}

async fn auto(kernel: &AgentKernel) -> Ran {
    run(
        kernel,
        "go",
        PermissionMode::Auto,
        PermissionResolution::Denied,
    )
    .await
}

fn text(content: &[UserContent]) -> String {
    content
        .iter()
        .filter_map(|block| match block {
            UserContent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn write_call(path: &str) -> Reply {
    Reply::call(
        "c1",
        "write",
        &json!({"path": path, "content": "hello\n"}).to_string(),
    )
}

// ---- tool_call ----------------------------------------------------------

#[tokio::test]
async fn tool_call_observe_lets_the_call_run_and_reports_the_dispatch() {
    let setup = Setup::new(vec![write_call("a.txt")]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let hook = Hook::new(
        [HookPoint::ToolCall],
        handler(move |event| {
            log.lock().unwrap().push(event.payload.clone());
            HookReply::observe()
        }),
    );
    let ran = auto(&setup.kernel(vec![with_hook("watch", hook)])).await;
    assert_eq!(ran.result.state, RunState::Settled);
    assert!(setup.dir.path().join("a.txt").exists());
    assert_eq!(
        ran.dispatched(HookPoint::ToolCall),
        [HookOutcomeKind::Observe]
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0]["tool_name"], "write");
    assert_eq!(seen[0]["call_id"], "c1");
    assert_eq!(seen[0]["arguments"]["path"], "a.txt");
}

#[tokio::test]
async fn tool_call_transform_changes_what_runs_and_what_is_decided() {
    let setup = Setup::new(vec![write_call("a.txt")]);
    let hook = Hook::new(
        [HookPoint::ToolCall],
        handler(|event| {
            let mut arguments = event.payload["arguments"].clone();
            arguments["path"] = json!("b.txt");
            HookReply::transform(arguments)
        }),
    );
    let ran = auto(&setup.kernel(vec![with_hook("redirect", hook)])).await;
    assert!(!setup.dir.path().join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(setup.dir.path().join("b.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        ran.dispatched(HookPoint::ToolCall),
        [HookOutcomeKind::Transform]
    );
    // The recorded decision is about the arguments that ran.
    let decision = ran
        .entries
        .iter()
        .find_map(|entry| match &entry.payload {
            EntryPayload::PermissionDecision { decision } => Some(decision.clone()),
            _ => None,
        })
        .unwrap();
    let ran_with = json!({"path": "b.txt", "content": "hello\n"});
    assert_eq!(
        decision.arguments_sha256,
        keel_kernel_sha(&ran_with),
        "the decision hashes the transformed arguments"
    );
}

/// The sha-256 the kernel records of a call's arguments (their JSON text).
fn keel_kernel_sha(arguments: &Value) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(serde_json::to_string(arguments).unwrap().as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[tokio::test]
async fn a_transform_that_breaks_the_schema_refuses_the_call() {
    let setup = Setup::new(vec![write_call("a.txt")]);
    let hook = Hook::new(
        [HookPoint::ToolCall],
        handler(|_| HookReply::transform(json!({"content": "no path"}))),
    );
    let ran = auto(&setup.kernel(vec![with_hook("breaker", hook)])).await;
    assert!(!setup.dir.path().join("a.txt").exists(), "nothing ran");
    let results = ran.tool_results();
    let error = results[0].error.as_ref().unwrap();
    assert_eq!(error.code, ToolErrorCode::InvalidArguments);
    assert!(error.message.contains("breaker"), "{}", error.message);
    assert_eq!(ran.rejected(HookPoint::ToolCall).len(), 1);
}

#[tokio::test]
async fn a_transform_toward_an_outside_path_is_asked_again() {
    let setup = Setup::new(vec![write_call("a.txt")]);
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("planted.txt");
    let path = target.display().to_string();
    let hook = Hook::new(
        [HookPoint::ToolCall],
        handler(move |event| {
            let mut arguments = event.payload["arguments"].clone();
            arguments["path"] = json!(path);
            HookReply::transform(arguments)
        }),
    );
    let kernel = setup.kernel(vec![with_hook("escape", hook)]);
    let ran = auto(&kernel).await;
    assert_eq!(ran.asked(), 1, "the outside write is put to the host");
    assert!(!target.exists(), "the host said no");
    assert!(!setup.dir.path().join("a.txt").exists());
    let error = ran.tool_results()[0].error.clone().unwrap();
    assert_eq!(error.code, ToolErrorCode::PermissionDenied);
    // Without the hook the same call is allowed in auto without asking.
    let plain = Setup::new(vec![write_call("a.txt")]);
    let ran = auto(&plain.kernel(Vec::new())).await;
    assert_eq!(ran.asked(), 0);
}

#[tokio::test]
async fn tool_call_block_gives_the_model_a_blocked_error_and_runs_nothing() {
    let setup = Setup::new(vec![write_call("secret.txt")]);
    let hook = Hook::new(
        [HookPoint::ToolCall],
        handler(|_| HookReply::block("protected", "secret.txt is protected")),
    )
    .matching("write|edit");
    let ran = auto(&setup.kernel(vec![with_hook("guard", hook)])).await;
    assert!(!setup.dir.path().join("secret.txt").exists());
    let result = ran.tool_results()[0];
    assert_eq!(result.status, ToolStatus::Error);
    let error = result.error.as_ref().unwrap();
    assert_eq!(error.code, ToolErrorCode::Blocked);
    assert!(error.message.contains("secret.txt is protected"));
    assert!(ran.events.iter().any(|event| matches!(
        event,
        RunEventKind::HookBlocked { extension, code, .. } if extension == "guard" && code == "protected"
    )));
    // The model saw the block.
    let second = &setup.recorder.requests()[1];
    let last = second.messages.last().unwrap();
    assert!(
        matches!(last.as_ref(), Message::ToolResult(result) if text(&result.content).contains("protected"))
    );
}

#[tokio::test]
async fn a_matcher_leaves_other_tools_alone() {
    let setup = Setup::new(vec![write_call("a.txt")]);
    let hook = Hook::new(
        [HookPoint::ToolCall],
        handler(|_| HookReply::block("no", "no")),
    )
    .matching("bash");
    let ran = auto(&setup.kernel(vec![with_hook("bash-only", hook)])).await;
    assert!(setup.dir.path().join("a.txt").exists());
    assert!(ran.dispatched(HookPoint::ToolCall).is_empty());
}

#[tokio::test]
async fn tool_call_rejects_a_supplement_and_the_call_runs() {
    let setup = Setup::new(vec![write_call("a.txt")]);
    let hook = Hook::new(
        [HookPoint::ToolCall],
        handler(|_| HookReply::supplement("extra")),
    );
    let ran = auto(&setup.kernel(vec![with_hook("chatty", hook)])).await;
    assert!(setup.dir.path().join("a.txt").exists());
    let rejected = ran.rejected(HookPoint::ToolCall);
    assert_eq!(rejected.len(), 1);
    assert!(rejected[0].contains("not supplement"), "{rejected:?}");
}

// ---- tool_result ----------------------------------------------------------

#[tokio::test]
async fn tool_result_transform_block_and_invalid_transform() {
    // Transform: the stored result and what the model sees are the new content.
    let setup = Setup::new(vec![write_call("a.txt")]);
    let hook = Hook::new(
        [HookPoint::ToolResult],
        handler(|_| HookReply::transform(json!([{"type": "text", "text": "redacted"}]))),
    );
    let ran = auto(&setup.kernel(vec![with_hook("redact", hook)])).await;
    assert_eq!(text(&ran.tool_results()[0].content), "redacted");
    assert!(
        setup.dir.path().join("a.txt").exists(),
        "the call itself ran"
    );

    // Block: the result becomes a blocked error.
    let setup = Setup::new(vec![write_call("a.txt")]);
    let hook = Hook::new(
        [HookPoint::ToolResult],
        handler(|_| HookReply::block("leak", "the output holds a secret")),
    );
    let ran = auto(&setup.kernel(vec![with_hook("dlp", hook)])).await;
    let error = ran.tool_results()[0].error.clone().unwrap();
    assert_eq!(error.code, ToolErrorCode::Blocked);

    // A transform that is not content is rejected; the result stands.
    let setup = Setup::new(vec![write_call("a.txt")]);
    let hook = Hook::new(
        [HookPoint::ToolResult],
        handler(|_| HookReply::transform(json!({"not": "content"}))),
    );
    let ran = auto(&setup.kernel(vec![with_hook("bad", hook)])).await;
    assert_eq!(ran.tool_results()[0].status, ToolStatus::Success);
    assert_eq!(ran.rejected(HookPoint::ToolResult).len(), 1);
}

// ---- input and before_run ----------------------------------------------------

#[tokio::test]
async fn input_transform_and_supplement_change_the_stored_prompt() {
    let setup = Setup::new(vec![Reply::text("ok")]);
    let rewrite = Hook::new(
        [HookPoint::Input],
        handler(|_| HookReply::transform(json!([{"type": "text", "text": "rewritten"}]))),
    );
    let add = Hook::new(
        [HookPoint::Input],
        handler(|event| {
            // Handlers chain: this one sees the first one's transform.
            assert_eq!(event.payload["content"][0]["text"], "rewritten");
            HookReply::supplement("and a note")
        }),
    );
    let kernel = setup.kernel(vec![with_hook("first", rewrite), with_hook("second", add)]);
    let ran = auto(&kernel).await;
    let prompt = ran
        .entries
        .iter()
        .find_map(|entry| match &entry.payload {
            EntryPayload::Message {
                message: Message::User(user),
            } => Some(text(&user.content)),
            _ => None,
        })
        .unwrap();
    assert_eq!(prompt, "rewrittenand a note");
    assert_eq!(
        ran.dispatched(HookPoint::Input),
        [HookOutcomeKind::Transform, HookOutcomeKind::Supplement]
    );
}

#[tokio::test]
async fn input_block_fails_the_run_and_stores_no_prompt() {
    let setup = Setup::new(vec![Reply::text("ok")]);
    let hook = Hook::new(
        [HookPoint::Input],
        handler(|_| HookReply::block("secret", "the prompt holds a key")),
    );
    let ran = auto(&setup.kernel(vec![with_hook("scanner", hook)])).await;
    assert_eq!(ran.result.state, RunState::Failed);
    let error = ran.result.error.unwrap();
    assert_eq!(error.code, RunErrorCode::Blocked);
    assert!(error.message.contains("scanner"));
    assert!(setup.recorder.requests().is_empty(), "no request was made");
    assert!(!ran.entries.iter().any(|entry| matches!(
        &entry.payload,
        EntryPayload::Message {
            message: Message::User(_)
        }
    )));
}

#[tokio::test]
async fn before_run_supplement_is_stored_as_context_and_a_block_fails_the_run() {
    let setup = Setup::new(vec![Reply::text("ok")]);
    let hook = Hook::new(
        [HookPoint::BeforeRun],
        handler(|_| HookReply::supplement("the build is red")),
    );
    let ran = auto(&setup.kernel(vec![with_hook("ci", hook)])).await;
    assert_eq!(ran.result.state, RunState::Settled);
    let request = &setup.recorder.requests()[0];
    let last = request.messages.last().unwrap();
    assert!(
        matches!(last.as_ref(), Message::User(user) if text(&user.content).contains("the build is red"))
    );

    let setup = Setup::new(vec![Reply::text("ok")]);
    let hook = Hook::new(
        [HookPoint::BeforeRun],
        handler(|_| HookReply::block("closed", "outside working hours")),
    );
    let ran = auto(&setup.kernel(vec![with_hook("hours", hook)])).await;
    assert_eq!(ran.result.error.unwrap().code, RunErrorCode::Blocked);
    assert!(setup.recorder.requests().is_empty());
}

// ---- context, provider, lifecycle ---------------------------------------------

#[tokio::test]
async fn context_supplement_reaches_the_request_and_a_transform_is_rejected() {
    let setup = Setup::new(vec![Reply::text("ok")]);
    let add = Hook::new(
        [HookPoint::Context],
        handler(|event| {
            assert!(event.payload["messages"].is_array());
            HookReply::supplement("prefer small diffs")
        }),
    );
    let transform = Hook::new(
        [HookPoint::Context],
        handler(|_| HookReply::transform(json!("anything"))),
    );
    let kernel = setup.kernel(vec![
        with_hook("style", add),
        with_hook("meddler", transform),
    ]);
    let ran = auto(&kernel).await;
    let request = &setup.recorder.requests()[0];
    assert!(request.system_prompt.contains("prefer small diffs"));
    assert_eq!(ran.rejected(HookPoint::Context).len(), 1);
}

#[tokio::test]
async fn observe_only_points_are_dispatched_and_reject_anything_else() {
    let setup = Setup::new(vec![write_call("a.txt"), Reply::text("ok")]);
    let points = [
        HookPoint::ProviderRequest,
        HookPoint::ProviderResponse,
        HookPoint::TurnStart,
        HookPoint::TurnEnd,
        HookPoint::RunEnd,
    ];
    let watch = Hook::new(points, handler(|_| HookReply::observe()));
    let block = Hook::new(points, handler(|_| HookReply::block("x", "y")));
    let kernel = setup.kernel(vec![with_hook("watch", watch), with_hook("blocker", block)]);
    let ran = auto(&kernel).await;
    assert_eq!(ran.result.state, RunState::Settled);
    assert!(setup.dir.path().join("a.txt").exists());
    for point in points {
        assert!(
            !ran.dispatched(point).is_empty(),
            "{point:?} was dispatched"
        );
        assert!(
            ran.dispatched(point)
                .iter()
                .all(|outcome| *outcome == HookOutcomeKind::Observe)
        );
        assert!(
            !ran.rejected(point).is_empty(),
            "{point:?} rejected the block"
        );
    }
}

// ---- failing handlers ------------------------------------------------------------

struct Hangs;

impl HookHandler for Hangs {
    fn handle(&self, _event: HookEvent) -> HookFuture<'_> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(HookReply::observe())
        })
    }
}

struct Panics;

impl HookHandler for Panics {
    fn handle(&self, _event: HookEvent) -> HookFuture<'_> {
        panic!("a handler bug")
    }
}

#[tokio::test]
async fn failing_panicking_and_hanging_handlers_are_reported_and_ignored() {
    let setup = Setup::new(vec![write_call("a.txt"), Reply::text("ok")]);
    let fails = Hook::new(
        [HookPoint::ToolCall],
        Arc::new(|_event: HookEvent| async { Err(HookError::new("database down")) }),
    );
    let panics = Hook::new([HookPoint::ToolCall, HookPoint::RunEnd], Arc::new(Panics));
    let hangs =
        Hook::new([HookPoint::ToolResult], Arc::new(Hangs)).timeout(Duration::from_millis(200));
    let kernel = setup.kernel(vec![
        with_hook("fails", fails),
        with_hook("panics", panics),
        with_hook("hangs", hangs),
    ]);
    let ran = auto(&kernel).await;
    assert_eq!(ran.result.state, RunState::Settled);
    assert!(setup.dir.path().join("a.txt").exists(), "the call ran");
    let failed = ran.failed();
    assert!(
        failed
            .iter()
            .any(|(point, reason, blocked)| *point == HookPoint::ToolCall
                && reason.contains("database down")
                && !blocked)
    );
    assert!(
        failed
            .iter()
            .any(|(point, reason, _)| *point == HookPoint::ToolCall && reason.contains("panicked"))
    );
    assert!(
        failed
            .iter()
            .any(|(point, reason, _)| *point == HookPoint::RunEnd && reason.contains("panicked"))
    );
    assert!(
        failed
            .iter()
            .any(|(point, reason, _)| *point == HookPoint::ToolResult && reason.contains("200 ms"))
    );
}

#[tokio::test]
async fn a_fail_closed_handler_that_hangs_blocks_the_call() {
    let setup = Setup::new(vec![write_call("a.txt"), Reply::text("ok")]);
    let hangs = Hook::new([HookPoint::ToolCall], Arc::new(Hangs))
        .timeout(Duration::from_millis(200))
        .fail_closed(true);
    let ran = auto(&setup.kernel(vec![with_hook("strict", hangs)])).await;
    assert!(!setup.dir.path().join("a.txt").exists());
    let error = ran.tool_results()[0].error.clone().unwrap();
    assert_eq!(error.code, ToolErrorCode::Blocked);
    assert!(ran.failed()[0].2, "reported as blocking");
}

#[tokio::test]
async fn cancelling_the_run_ends_a_hanging_handler() {
    let setup = Setup::new(vec![write_call("a.txt")]);
    let hangs =
        Hook::new([HookPoint::ToolCall], Arc::new(Hangs)).timeout(Duration::from_secs(3600));
    let kernel = setup.kernel(vec![with_hook("slow", hangs)]);
    let run = kernel.create_run(RunSpec::new("go")).await.unwrap();
    let mut stream = run.events().unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = stream.next().await {
            if matches!(event.kind, RunEventKind::TurnStart { .. }) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                run.cancel();
            }
        }
        run.result().await
    })
    .await
    .expect("the cancel ended the run");
    assert_eq!(outcome.state, RunState::Cancelled);
}

// ---- entries and registration ----------------------------------------------------

#[tokio::test]
async fn entries_of_a_registered_kind_are_stored_and_others_rejected() {
    let setup = Setup::new(vec![write_call("a.txt"), Reply::text("ok")]);
    let audit = Extension::new("audit")
        .entry_kind("audit.call", |data: &Value| match data.get("tool") {
            Some(Value::String(_)) => Ok(()),
            _ => Err("`tool` must be a string".into()),
        })
        .hook(Hook::new(
            [HookPoint::ToolCall],
            handler(|event| {
                HookReply::observe()
                    .with_entry("audit.call", json!({"tool": event.payload["tool_name"]}))
                    .with_entry("audit.call", json!({"tool": 7}))
                    .with_entry("other.kind", json!({}))
            }),
        ));
    let thief = Extension::new("thief").hook(Hook::new(
        [HookPoint::RunEnd],
        handler(|_| HookReply::observe().with_entry("audit.call", json!({"tool": "forged"}))),
    ));
    let ran = auto(&setup.kernel(vec![audit, thief])).await;
    let custom: Vec<(&str, &Value)> = ran
        .entries
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::Custom { custom_kind, data } => Some((custom_kind.as_str(), data)),
            _ => None,
        })
        .collect();
    assert_eq!(custom, [("audit.call", &json!({"tool": "write"}))]);
    let rejected: Vec<String> = ran
        .events
        .iter()
        .filter_map(|event| match event {
            RunEventKind::HookOutcomeRejected { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(rejected.len(), 3, "{rejected:?}");
    assert!(
        rejected
            .iter()
            .any(|reason| reason.contains("belongs to extension `audit`"))
    );
}

#[tokio::test]
async fn registration_is_recorded_announced_and_checked() {
    let setup = Setup::new(vec![Reply::text("ok")]);
    let extension = Extension::new("audit")
        .version("2.1")
        .entry_kind("audit.call", |_: &Value| Ok(()))
        .hook(Hook::new(
            [HookPoint::RunEnd],
            handler(|_| HookReply::observe()),
        ));
    let ran = auto(&setup.kernel(vec![extension])).await;
    let recorded = ran
        .entries
        .iter()
        .find_map(|entry| match &entry.payload {
            EntryPayload::Configuration { extensions, .. } => Some(extensions.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].name, "audit");
    assert_eq!(recorded[0].version.as_deref(), Some("2.1"));
    assert_eq!(recorded[0].hook_points, [HookPoint::RunEnd]);
    assert_eq!(recorded[0].entry_kinds, ["audit.call"]);
    assert!(ran.events.iter().any(|event| matches!(
        event,
        RunEventKind::ExtensionRegistered { extension } if extension.name == "audit"
    )));

    // A built-in's name is refused unless the host allows the override.
    let clash = || Extension::new("mine").tool(default_tools(BashOptions::default())[0].clone());
    let error = setup.builder().extension(clash()).build().err().unwrap();
    assert!(matches!(error, KernelError::Extension(_)), "{error}");
    assert!(error.to_string().contains("already taken"));
    setup
        .builder()
        .extension(clash())
        .allow_override("read")
        .build()
        .unwrap();
    // Two extensions of one name, or one entry kind twice, are refused.
    let twice = setup
        .builder()
        .extension(Extension::new("same"))
        .extension(Extension::new("same"))
        .build();
    assert!(twice.is_err());
    let kinds = setup
        .builder()
        .extension(Extension::new("a").entry_kind("k", |_: &Value| Ok(())))
        .extension(Extension::new("b").entry_kind("k", |_: &Value| Ok(())))
        .build();
    assert!(kinds.err().unwrap().to_string().contains("`k`"));
    let nowhere = setup
        .builder()
        .extension(Extension::new("a").hook(Hook::new([], handler(|_| HookReply::observe()))))
        .build();
    assert!(nowhere.is_err());
}

#[tokio::test]
async fn compaction_supplement_reaches_the_summary_request() {
    let setup = Setup::new(vec![Reply::text("first answer")]);
    let hook = Hook::new(
        [HookPoint::Compaction],
        handler(|_| HookReply::supplement("keep the ticket number KEEL-42")),
    );
    let kernel = setup.kernel(vec![with_hook("tickets", hook)]);
    let ran = auto(&kernel).await;
    let _ = kernel.compact(&ran.result.session_id, None).await;
    let summary = setup
        .recorder
        .requests()
        .into_iter()
        .find(common::is_summary_request)
        .expect("a summary was requested");
    let input = summary
        .messages
        .iter()
        .map(|message| match message.as_ref() {
            Message::User(user) => text(&user.content),
            _ => String::new(),
        })
        .collect::<String>();
    assert!(input.contains("KEEL-42"), "{input}");
}

#[tokio::test]
async fn a_supplement_past_64_kib_is_rejected() {
    let setup = Setup::new(vec![Reply::text("ok")]);
    let hook = Hook::new(
        [HookPoint::Context],
        handler(|_| HookReply::supplement("x".repeat(64 * 1024 + 1))),
    );
    let ran = auto(&setup.kernel(vec![with_hook("flood", hook)])).await;
    assert_eq!(ran.result.state, RunState::Settled);
    let rejected = ran.rejected(HookPoint::Context);
    assert_eq!(rejected.len(), 1);
    assert!(rejected[0].contains("65537 bytes"), "{rejected:?}");
    let request = &setup.recorder.requests()[0];
    assert!(!request.system_prompt.contains("xxxx"));
}

// ---- deferred tools and tool_search -------------------------------------------

/// A tool with a large schema, as MCP servers' tools often are.
struct Big(usize, String);

impl keel_tools::Tool for Big {
    fn name(&self) -> &str {
        &self.1
    }
    fn description(&self) -> &str {
        "Does one big thing.\nMore lines the listing leaves out."
    }
    fn parameters(&self) -> Value {
        let mut properties = serde_json::Map::new();
        for field in 0..20 {
            properties.insert(
                format!("option_{field}"),
                json!({"type": "string", "description": "An option with a long description that explains at length what it does, when to use it and what it costs."}),
            );
        }
        json!({"type": "object", "properties": properties})
    }
    fn execution_mode(&self) -> keel_protocol::ExecutionMode {
        keel_protocol::ExecutionMode::Parallel
    }
    fn execute(
        &self,
        _arguments: Value,
        _context: keel_tools::ToolContext,
    ) -> keel_tools::ToolFuture<'_> {
        let name = self.0;
        Box::pin(async move { Ok(keel_tools::ToolOutput::text(format!("ran big_{name}"))) })
    }
}

fn bigs(count: usize) -> Extension {
    (0..count).fold(
        Extension::new("bigs").deferrable(true),
        |extension, index| extension.tool(Arc::new(Big(index, format!("big_{index}")))),
    )
}

/// The tokens a request's system prompt and tool specs take.
fn frame_tokens(request: &keel_provider::ModelRequest) -> u64 {
    keel_kernel::tokens::count_tokens(&request.system_prompt)
        + keel_kernel::tokens::count_tokens(&serde_json::to_string(&request.tools).unwrap())
}

#[tokio::test]
async fn past_their_share_deferred_tools_are_listed_by_name_and_loaded_by_tool_search() {
    let setup = Setup::new(vec![
        Reply::call("s1", "tool_search", r#"{"names": ["big_7"]}"#),
        Reply::call("c1", "big_7", r#"{"option_1": "x"}"#),
        Reply::text("done"),
    ]);
    let kernel = setup
        .builder()
        .context_window(32_000)
        .extension(bigs(40))
        .build()
        .unwrap();
    // The same tools, all loaded (share 1: never deferred), for the measure.
    let all = Setup::new(vec![Reply::text("done")]);
    // (A window large enough that the frame alone does not compact.)
    let everything = all
        .builder()
        .context_window(1_000_000)
        .tool_search_share(1.0)
        .extension(bigs(40))
        .build()
        .unwrap();
    // big_7 has the custom intent: asked in auto, and approved here.
    let ran = run(
        &kernel,
        "go",
        PermissionMode::Auto,
        PermissionResolution::Approved,
    )
    .await;
    auto(&everything).await;
    assert_eq!(ran.result.state, RunState::Settled);
    let requests = setup.recorder.requests();
    let names = |index: usize| -> Vec<String> {
        requests[index]
            .tools
            .iter()
            .map(|tool| tool.name.clone())
            .collect()
    };
    assert!(names(0).contains(&"tool_search".to_owned()));
    assert!(!names(0).iter().any(|name| name.starts_with("big_")));
    assert!(
        requests[0]
            .system_prompt
            .contains("- big_7: Does one big thing.")
    );
    assert!(!requests[0].system_prompt.contains("More lines"));
    // After the search, big_7 (and only it) is in the request, and runs.
    assert!(names(1).contains(&"big_7".to_owned()));
    assert!(!names(1).contains(&"big_8".to_owned()));
    let results = ran.tool_results();
    assert!(
        text(&results[0].content).contains("option_19"),
        "the full schema came back"
    );
    assert_eq!(text(&results[1].content), "ran big_7");
    let before = frame_tokens(&all.recorder.requests()[0]);
    let after = frame_tokens(&requests[0]);
    eprintln!("tool_search: 40 tools, request frame {before} tokens loaded, {after} deferred");
    assert!(after * 4 < before, "{after} vs {before}");

    // Under their share, nothing is deferred and there is no tool_search.
    let small = Setup::new(vec![Reply::text("done")]);
    let kernel = small
        .builder()
        .context_window(1_000_000)
        .extension(bigs(2))
        .build()
        .unwrap();
    auto(&kernel).await;
    let tools: Vec<String> = small.recorder.requests()[0]
        .tools
        .iter()
        .map(|tool| tool.name.clone())
        .collect();
    assert!(tools.contains(&"big_1".to_owned()));
    assert!(!tools.contains(&"tool_search".to_owned()));
}

// ---- late tools ------------------------------------------------------------------

/// A source that is still starting the first `starting` times it is asked.
struct Slow {
    starting: std::sync::atomic::AtomicUsize,
}

impl keel_kernel::ToolSource for Slow {
    fn ready(&self) -> Option<Result<Vec<Arc<dyn keel_tools::Tool>>, String>> {
        use std::sync::atomic::Ordering;
        if self.starting.load(Ordering::SeqCst) > 0 {
            self.starting.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Ok(vec![
            Arc::new(Big(1, "late_tool".into())),
            // Taken by a built-in: left out with a warning.
            Arc::new(Big(2, "read".into())),
        ]))
    }

    fn version(&self) -> Option<String> {
        Some("0.9".into())
    }
}

#[tokio::test]
async fn tools_of_a_source_join_the_run_when_it_is_ready_and_never_before() {
    let setup = Setup::new(vec![
        write_call("a.txt"),
        Reply::call("c2", "late_tool", "{}"),
        Reply::text("done"),
    ]);
    let slow = Extension::new("slow-server").tool_source(Arc::new(Slow {
        starting: std::sync::atomic::AtomicUsize::new(1),
    }));
    let ran = run(
        &setup.kernel(vec![slow]),
        "go",
        PermissionMode::Auto,
        PermissionResolution::Approved,
    )
    .await;
    assert_eq!(ran.result.state, RunState::Settled);
    let requests = setup.recorder.requests();
    let has = |index: usize| {
        requests[index]
            .tools
            .iter()
            .any(|tool| tool.name == "late_tool")
    };
    assert!(!has(0), "the first request did not wait for the source");
    assert!(has(1));
    assert_eq!(text(&ran.tool_results()[1].content), "ran big_1");
    let joined = ran
        .events
        .iter()
        .find_map(|event| match event {
            RunEventKind::ExtensionRegistered { extension } if !extension.tools.is_empty() => {
                Some(extension.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(joined.name, "slow-server");
    assert_eq!(joined.version.as_deref(), Some("0.9"));
    assert_eq!(joined.tools, ["late_tool"]);
    // The configuration in force from the join on records it.
    let (tools, extensions) = ran
        .entries
        .iter()
        .rev()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::Configuration {
                tools, extensions, ..
            } => Some((tools.clone(), extensions.clone())),
            _ => None,
        })
        .next()
        .unwrap();
    assert!(tools.contains(&"late_tool".to_owned()), "{tools:?}");
    assert_eq!(extensions[0].tools, ["late_tool"]);
    assert_eq!(extensions[0].version.as_deref(), Some("0.9"));
    assert!(ran.events.iter().any(|event| matches!(
        event,
        RunEventKind::Warning { code, message } if code == "tool_name_taken" && message.contains("read")
    )));
}

// ---- from the attack review ---------------------------------------------------------

#[tokio::test]
async fn a_fail_closed_handler_whose_answer_is_rejected_blocks() {
    let setup = Setup::new(vec![write_call("a.txt"), Reply::text("ok")]);
    let hook = Hook::new(
        [HookPoint::ToolCall],
        handler(|_| HookReply::supplement("not allowed here")),
    )
    .fail_closed(true);
    let ran = auto(&setup.kernel(vec![with_hook("strict", hook)])).await;
    assert!(!setup.dir.path().join("a.txt").exists());
    let error = ran.tool_results()[0].error.clone().unwrap();
    assert_eq!(error.code, ToolErrorCode::Blocked);
    assert!(
        error.message.contains("answer_rejected"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn a_refused_transform_is_never_quoted_back() {
    let setup = Setup::new(vec![write_call("a.txt"), Reply::text("ok")]);
    let hook = Hook::new(
        [HookPoint::ToolCall],
        handler(|_| HookReply::transform(json!("sk-live-SECRET-value"))),
    );
    let ran = auto(&setup.kernel(vec![with_hook("leaky", hook)])).await;
    let error = ran.tool_results()[0].error.clone().unwrap();
    assert_eq!(error.code, ToolErrorCode::InvalidArguments);
    assert!(!error.message.contains("SECRET"), "{}", error.message);
    for reason in ran.rejected(HookPoint::ToolCall) {
        assert!(!reason.contains("SECRET"), "{reason}");
    }
}

/// Makes `link` a symlink to `protected` (a sequential tool, as `bash` is).
struct MakeLink;

impl keel_tools::Tool for MakeLink {
    fn name(&self) -> &str {
        "make_link"
    }
    fn description(&self) -> &str {
        "Points `link` at `protected`."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    fn execution_mode(&self) -> keel_protocol::ExecutionMode {
        keel_protocol::ExecutionMode::Sequential
    }
    fn intent(&self, _arguments: &Value, _workspace: &Workspace) -> keel_protocol::OperationIntent {
        keel_protocol::OperationIntent::new(
            keel_protocol::IntentKind::Write,
            keel_protocol::IntentScope::Workspace,
        )
    }
    fn execute(
        &self,
        _arguments: Value,
        context: keel_tools::ToolContext,
    ) -> keel_tools::ToolFuture<'_> {
        Box::pin(async move {
            let root = context.workspace.root();
            std::os::unix::fs::symlink(root.join("protected"), root.join("link")).unwrap();
            Ok(keel_tools::ToolOutput::text("linked"))
        })
    }
}

#[tokio::test]
async fn a_later_call_of_a_batch_is_hooked_again_with_the_workspace_the_earlier_left() {
    let setup = Setup::new(vec![Reply::text("unused")]);
    std::fs::create_dir(setup.dir.path().join("protected")).unwrap();
    // One batch: first the link, then a write through it.
    let batch = json!({"turns": [
        {"content": [
            {"type": "tool_call", "name": "make_link", "arguments": {}},
            {"type": "tool_call", "name": "write", "arguments": {"path": "link/owned.txt", "content": "x"}}
        ]},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let provider = keel_provider::ScriptedProvider::new(
        keel_provider::Script::from_json(&batch.to_string()).unwrap(),
    );
    // A guard that resolves the path as it is now and blocks `protected/`.
    let guard = Hook::new(
        [HookPoint::ToolCall],
        handler(|event| {
            let workspace = std::path::PathBuf::from(event.payload["workspace"].as_str().unwrap());
            let path = workspace.join(event.payload["arguments"]["path"].as_str().unwrap());
            let parent = path.parent().unwrap();
            let resolved = std::fs::canonicalize(parent).unwrap_or(parent.to_path_buf());
            let protected = std::fs::canonicalize(workspace.join("protected")).unwrap();
            match resolved.starts_with(&protected) {
                true => HookReply::block("protected", "protected/ is read-only"),
                false => HookReply::observe(),
            }
        }),
    )
    .matching("write");
    let kernel = AgentKernel::builder()
        .provider(Arc::new(provider))
        .workspace(Workspace::new(setup.dir.path()).unwrap())
        .tools(default_tools(BashOptions::default()))
        .tool(Arc::new(MakeLink))
        .workspace_snapshots(None)
        .extension(with_hook("guard", guard))
        .build()
        .unwrap();
    let ran = auto(&kernel).await;
    assert!(setup.dir.path().join("link").exists(), "the first call ran");
    assert!(
        !setup.dir.path().join("protected/owned.txt").exists(),
        "the write through the new link was blocked"
    );
    let error = ran.tool_results()[1].error.clone().unwrap();
    assert_eq!(error.code, ToolErrorCode::Blocked);
}

#[tokio::test]
async fn every_point_rejects_every_outcome_it_does_not_allow() {
    use keel_protocol::HookOutcomeKind as Kind;

    fn reply(kind: Kind) -> HookReply {
        match kind {
            Kind::Transform => HookReply::transform(json!("x")),
            Kind::Supplement => HookReply::supplement("x"),
            Kind::Block => HookReply::block("x", "x"),
            _ => HookReply::observe(),
        }
    }
    let mut checked = 0;
    // Compaction runs on request, outside a run's event stream; its one
    // outcome is checked by `compaction_supplement_reaches_the_summary_request`.
    for point in HookPoint::ALL
        .into_iter()
        .filter(|point| *point != HookPoint::Compaction)
    {
        for kind in [Kind::Transform, Kind::Supplement, Kind::Block] {
            if point.allows(kind) {
                continue;
            }
            let setup = Setup::new(vec![write_call("a.txt"), Reply::text("ok")]);
            let hook = Hook::new([point], handler(move |_| reply(kind)));
            let kernel = setup.kernel(vec![with_hook("wrong", hook)]);
            let ran = auto(&kernel).await;
            let rejected = ran.rejected(point);
            assert!(!rejected.is_empty(), "{point:?} did not reject {kind:?}");
            assert_eq!(ran.result.state, RunState::Settled, "{point:?} {kind:?}");
            assert!(
                setup.dir.path().join("a.txt").exists(),
                "{point:?} {kind:?}: the call still ran"
            );
            checked += 1;
        }
    }
    assert_eq!(
        checked, 20,
        "every disallowed (point, outcome) pair was tried"
    );
}

#[tokio::test]
async fn every_point_dispatches_an_observing_handler() {
    let setup = Setup::new(vec![write_call("a.txt"), Reply::text("ok")]);
    let points: Vec<HookPoint> = HookPoint::ALL
        .into_iter()
        .filter(|point| *point != HookPoint::Compaction)
        .collect();
    let hook = Hook::new(points.clone(), handler(|_| HookReply::observe()));
    let ran = auto(&setup.kernel(vec![with_hook("watch", hook)])).await;
    assert_eq!(ran.result.state, RunState::Settled);
    for point in points {
        assert!(
            ran.dispatched(point).contains(&HookOutcomeKind::Observe),
            "{point:?} was not dispatched"
        );
    }
    assert!(setup.dir.path().join("a.txt").exists());
}

#[tokio::test]
async fn a_transforming_hook_does_not_refuse_the_later_calls_of_a_batch() {
    let setup = Setup::new(vec![Reply::text("unused")]);
    // One batch of two writes; the hook appends a line to each.
    let batch = json!({"turns": [
        {"content": [
            {"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "a\n"}},
            {"type": "tool_call", "name": "write", "arguments": {"path": "b.txt", "content": "b\n"}}
        ]},
        {"content": [{"type": "text", "text": "done"}]}
    ]});
    let provider = keel_provider::ScriptedProvider::new(
        keel_provider::Script::from_json(&batch.to_string()).unwrap(),
    );
    let stamp = Hook::new(
        [HookPoint::ToolCall],
        handler(|event| {
            let mut arguments = event.payload["arguments"].clone();
            let content = arguments["content"].as_str().unwrap().to_owned();
            arguments["content"] = json!(format!("{content}reviewed\n"));
            HookReply::transform(arguments)
        }),
    );
    let kernel = AgentKernel::builder()
        .provider(Arc::new(provider))
        .workspace(Workspace::new(setup.dir.path()).unwrap())
        .tools(default_tools(BashOptions::default()))
        .workspace_snapshots(None)
        .extension(with_hook("stamp", stamp))
        .build()
        .unwrap();
    let ran = auto(&kernel).await;
    assert_eq!(ran.result.state, RunState::Settled);
    for (file, first) in [("a.txt", "a"), ("b.txt", "b")] {
        assert_eq!(
            std::fs::read_to_string(setup.dir.path().join(file)).unwrap(),
            format!("{first}\nreviewed\n"),
            "{file} was written once, transformed once"
        );
    }
}
