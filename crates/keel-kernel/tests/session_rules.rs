//! Session rules through `AgentKernel`: a host answer with scope `always`
//! is recorded as a `permission_rule` entry and decides later calls of the
//! same tool, intent and exact target (command or path) without asking —
//! later in the same batch, in later turns and in later runs on the same
//! branch — while other targets still ask, the mode's denials still hold,
//! and a branch without the rule asks again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use keel_kernel::{AgentKernel, RunSpec};
use keel_protocol::{
    DecisionSource, EntryPayload, PermissionAnswer, PermissionDecision, PermissionMode,
    PermissionResolution, PermissionRule, PermissionScope, RunEventKind, RunResult, ToolStatus,
};
use keel_provider::{Script, ScriptedProvider};
use keel_session::{MemoryStore, SessionStore};
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, default_tools};
use serde_json::{Value, json};

fn write(path: &str, content: &str) -> Value {
    json!({"type": "tool_call", "name": "write", "arguments": {"path": path, "content": content}})
}

fn bash(command: &str) -> Value {
    json!({"type": "tool_call", "name": "bash", "arguments": {"command": command}})
}

fn turn(calls: &[Value]) -> Value {
    json!({"content": calls})
}

fn done() -> Value {
    json!({"content": [{"type": "text", "text": "done"}]})
}

struct Fixture {
    dir: tempfile::TempDir,
    store: Arc<MemoryStore>,
    kernel: AgentKernel,
}

fn fixture(turns: Vec<Value>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemoryStore::new());
    let script = json!({ "turns": turns });
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(&script.to_string()).unwrap(),
        )))
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(store.clone())
        .tools(default_tools(BashOptions::default()))
        .build()
        .unwrap();
    Fixture { dir, store, kernel }
}

/// What one run saw: the tools asked about (in order), each tool's status,
/// and the result.
struct Seen {
    asked: Vec<String>,
    statuses: Vec<ToolStatus>,
    result: RunResult,
}

/// Runs `spec`, answering every permission request with `answer`.
async fn run(fixture: &Fixture, spec: RunSpec, answer: PermissionAnswer) -> Seen {
    let run = fixture.kernel.create_run(spec).await.unwrap();
    let mut events = run.events().unwrap();
    let (mut asked, mut statuses) = (Vec::new(), Vec::new());
    while let Some(event) = events.next().await {
        match event.kind {
            RunEventKind::PermissionRequested {
                request_id,
                arguments,
                ..
            } => {
                asked.push(arguments.to_string());
                run.resolve_permission(&request_id, answer).unwrap();
            }
            RunEventKind::ToolExecutionEnd { result } => statuses.push(result.status),
            _ => {}
        }
    }
    Seen {
        asked,
        statuses,
        result: run.result().await,
    }
}

fn always(resolution: PermissionResolution) -> PermissionAnswer {
    PermissionAnswer::new(resolution, PermissionScope::Always)
}

async fn recorded(
    store: &MemoryStore,
    session: &str,
) -> (Vec<PermissionDecision>, Vec<PermissionRule>) {
    let mut decisions = Vec::new();
    let mut rules = Vec::new();
    for entry in store.entries(session).await.unwrap() {
        match entry.payload {
            EntryPayload::PermissionDecision { decision } => decisions.push(decision),
            EntryPayload::PermissionRule { rule } => rules.push(rule),
            _ => {}
        }
    }
    (decisions, rules)
}

#[tokio::test]
async fn an_always_answer_is_recorded_and_decides_later_calls_of_the_same_path() {
    let f = fixture(vec![
        turn(&[write("a.txt", "one")]),
        turn(&[write("a.txt", "two")]),
        turn(&[write("b.txt", "other path")]),
        done(),
    ]);
    let seen = run(
        &f,
        RunSpec::new("go").mode(PermissionMode::Ask),
        always(PermissionResolution::Approved),
    )
    .await;
    assert_eq!(seen.result.state, keel_protocol::RunState::Settled);
    assert_eq!(
        seen.asked.len(),
        2,
        "a.txt once, b.txt once: {:?}",
        seen.asked
    );
    assert!(seen.asked[0].contains("one") && seen.asked[1].contains("b.txt"));
    assert_eq!(seen.statuses, [ToolStatus::Success; 3]);
    assert_eq!(
        std::fs::read_to_string(f.dir.path().join("a.txt")).unwrap(),
        "two"
    );
    let (decisions, rules) = recorded(&f.store, &seen.result.session_id).await;
    let sources: Vec<_> = decisions.iter().map(|d| d.source).collect();
    assert_eq!(
        sources,
        [
            DecisionSource::Host,
            DecisionSource::SessionRule,
            DecisionSource::Host
        ]
    );
    assert!(
        decisions[1].reason.contains(&rules[0].call_id),
        "{}",
        decisions[1].reason
    );
    assert_eq!(rules.len(), 2, "each always answer made a rule");
    assert_eq!(rules[0].tool_name, "write");
    assert_eq!(rules[0].resolution, PermissionResolution::Approved);
    let stored = serde_json::to_string(&rules).unwrap();
    assert!(
        !stored.contains("a.txt"),
        "rules hold a hash of the target: {stored}"
    );
}

#[tokio::test]
async fn a_rule_holds_for_later_runs_on_the_branch_but_not_before_it() {
    let f = fixture(vec![
        turn(&[write("a.txt", "one")]),
        done(),
        turn(&[write("a.txt", "two")]),
        done(),
        turn(&[write("a.txt", "three")]),
        done(),
    ]);
    let approve_always = always(PermissionResolution::Approved);
    let first = run(
        &f,
        RunSpec::new("go").mode(PermissionMode::Ask),
        approve_always,
    )
    .await;
    assert_eq!(first.asked.len(), 1);
    let session = first.result.session_id.clone();
    let deny = PermissionAnswer::once(PermissionResolution::Denied);
    let second = run(
        &f,
        RunSpec::new("again")
            .session(session.clone())
            .mode(PermissionMode::Ask),
        deny,
    )
    .await;
    assert!(
        second.asked.is_empty(),
        "the rule answered: {:?}",
        second.asked
    );
    assert_eq!(second.statuses, [ToolStatus::Success]);
    // Back at the root, the branch holds no rule: the kernel asks again.
    let root = f.store.entries(&session).await.unwrap()[0].id.clone();
    f.store.set_leaf(&session, &root).await.unwrap();
    let sibling = run(
        &f,
        RunSpec::new("sibling")
            .session(session.clone())
            .mode(PermissionMode::Ask),
        deny,
    )
    .await;
    assert_eq!(sibling.asked.len(), 1, "no rule on this branch");
    assert_eq!(sibling.statuses, [ToolStatus::Error]);
}

#[tokio::test]
async fn a_rule_never_allows_what_the_mode_denies() {
    let f = fixture(vec![
        turn(&[write("a.txt", "one")]),
        done(),
        turn(&[write("a.txt", "two")]),
        done(),
    ]);
    let first = run(
        &f,
        RunSpec::new("go").mode(PermissionMode::Ask),
        always(PermissionResolution::Approved),
    )
    .await;
    let plan = run(
        &f,
        RunSpec::new("plan")
            .session(first.result.session_id.clone())
            .mode(PermissionMode::Plan),
        PermissionAnswer::once(PermissionResolution::Approved),
    )
    .await;
    assert!(plan.asked.is_empty());
    assert_eq!(plan.statuses, [ToolStatus::Error], "plan denies writes");
    let (decisions, _) = recorded(&f.store, &first.result.session_id).await;
    let last = decisions.last().unwrap();
    assert_eq!(last.source, DecisionSource::Policy);
    assert_eq!(last.resolution, PermissionResolution::Denied);
    assert_eq!(
        std::fs::read_to_string(f.dir.path().join("a.txt")).unwrap(),
        "one"
    );
}

#[tokio::test]
async fn an_always_denial_denies_the_same_command_later_in_the_batch_without_asking() {
    // bash is sequential, so the second call is decided after the first's answer.
    let f = fixture(vec![
        turn(&[bash("echo same"), bash("echo same"), bash("echo other")]),
        done(),
    ]);
    let seen = run(
        &f,
        RunSpec::new("go").mode(PermissionMode::Ask),
        always(PermissionResolution::Denied),
    )
    .await;
    assert_eq!(
        seen.asked.len(),
        2,
        "echo same once, echo other once: {:?}",
        seen.asked
    );
    assert!(seen.asked[1].contains("echo other"));
    assert_eq!(seen.statuses, [ToolStatus::Error; 3]);
    let (decisions, rules) = recorded(&f.store, &seen.result.session_id).await;
    assert_eq!(decisions[1].source, DecisionSource::SessionRule);
    assert_eq!(decisions[1].resolution, PermissionResolution::Denied);
    assert_eq!(rules.len(), 2);
    assert!(
        rules
            .iter()
            .all(|r| r.resolution == PermissionResolution::Denied)
    );
}

/// What each permission request's reason said, in order.
async fn run_reasons(
    fixture: &Fixture,
    spec: RunSpec,
    answer: PermissionAnswer,
) -> (Vec<String>, Vec<ToolStatus>) {
    let run = fixture.kernel.create_run(spec).await.unwrap();
    let mut events = run.events().unwrap();
    let (mut reasons, mut statuses) = (Vec::new(), Vec::new());
    while let Some(event) = events.next().await {
        match event.kind {
            RunEventKind::PermissionRequested {
                request_id, reason, ..
            } => {
                reasons.push(reason);
                run.resolve_permission(&request_id, answer).unwrap();
            }
            RunEventKind::ToolExecutionEnd { result } => statuses.push(result.status),
            _ => {}
        }
    }
    run.result().await;
    (reasons, statuses)
}

#[tokio::test]
async fn a_rule_holds_only_while_its_symlinked_target_resolves_to_what_was_approved() {
    let f = fixture(vec![
        turn(&[write("link/config", "one")]),
        done(),
        turn(&[write("link/config", "two")]),
        done(),
        turn(&[write("link/config", "Host *\n  ProxyCommand evil\n")]),
        done(),
    ]);
    let outside = tempfile::tempdir().unwrap();
    let (approved, secret) = (outside.path().join("approved"), outside.path().join("ssh"));
    std::fs::create_dir(&approved).unwrap();
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("config"), "Host mine\n").unwrap();
    std::os::unix::fs::symlink(&approved, f.dir.path().join("link")).unwrap();
    let first = run(
        &f,
        RunSpec::new("go").mode(PermissionMode::Ask),
        always(PermissionResolution::Approved),
    )
    .await;
    assert_eq!(first.asked.len(), 1);
    let session = first.result.session_id.clone();
    let deny = PermissionAnswer::once(PermissionResolution::Denied);
    // Unchanged target: the rule still decides.
    let (reasons, statuses) = run_reasons(
        &f,
        RunSpec::new("again")
            .session(session.clone())
            .mode(PermissionMode::Ask),
        deny,
    )
    .await;
    assert!(reasons.is_empty(), "the rule answered: {reasons:?}");
    assert_eq!(statuses, [ToolStatus::Success]);
    assert_eq!(
        std::fs::read_to_string(approved.join("config")).unwrap(),
        "two"
    );
    // A sandboxed command re-points the symlink: the same text asks again.
    std::fs::remove_file(f.dir.path().join("link")).unwrap();
    std::os::unix::fs::symlink(&secret, f.dir.path().join("link")).unwrap();
    let (reasons, statuses) = run_reasons(
        &f,
        RunSpec::new("re-pointed")
            .session(session.clone())
            .mode(PermissionMode::Ask),
        deny,
    )
    .await;
    assert_eq!(reasons.len(), 1, "asked again");
    assert!(
        reasons[0].contains("resolves differently now"),
        "{}",
        reasons[0]
    );
    assert_eq!(statuses, [ToolStatus::Error]);
    assert_eq!(
        std::fs::read_to_string(secret.join("config")).unwrap(),
        "Host mine\n"
    );
}

#[tokio::test]
async fn a_rule_recorded_before_bindings_existed_reads_and_asks_again() {
    let f = fixture(vec![
        turn(&[write("a.txt", "one")]),
        done(),
        turn(&[write("a.txt", "two")]),
        done(),
    ]);
    let first = run(
        &f,
        RunSpec::new("go").mode(PermissionMode::Ask),
        PermissionAnswer::once(PermissionResolution::Approved),
    )
    .await;
    let session = first.result.session_id.clone();
    // A rule for this very call as an older Keel wrote it: no binding.
    let (_, rules) = recorded(&f.store, &session).await;
    assert!(rules.is_empty());
    let leaf = f.store.leaf(&session).await.unwrap().unwrap();
    let old_rule: PermissionRule = serde_json::from_value(json!({
        "tool_name": "write",
        "kind": "write",
        "scope": "workspace",
        "target_sha256": "0".repeat(64),
        "resolution": "approved",
        "call_id": "old-call",
    }))
    .unwrap();
    // Its target hash as the kernel computes it: taken from a fresh rule.
    let probe = fixture(vec![turn(&[write("a.txt", "x")]), done()]);
    let made = run(
        &probe,
        RunSpec::new("probe").mode(PermissionMode::Ask),
        always(PermissionResolution::Approved),
    )
    .await;
    let (_, made_rules) = recorded(&probe.store, &made.result.session_id).await;
    let old_rule = {
        let mut permission_rule = old_rule;
        permission_rule.target_sha256 = made_rules[0].target_sha256.clone();
        permission_rule
    };
    assert!(old_rule.binding_sha256.is_none());
    f.store
        .append(
            &session,
            vec![keel_protocol::Entry::new(
                "old-rule",
                Some(leaf),
                1,
                EntryPayload::PermissionRule { rule: old_rule },
            )],
        )
        .await
        .unwrap();
    let second = run(
        &f,
        RunSpec::new("again")
            .session(session.clone())
            .mode(PermissionMode::Ask),
        PermissionAnswer::once(PermissionResolution::Denied),
    )
    .await;
    assert_eq!(second.asked.len(), 1, "the old rule matches nothing");
    assert_eq!(second.statuses, [ToolStatus::Error]);
}
