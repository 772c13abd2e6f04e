//! The user's permission rules through `AgentKernel`: deny rules win over
//! every mode, ask rules make an allowed call a question, allow rules
//! answer a question the mode would ask (never a mode's denial); commands
//! are matched on each parsed simple command's words, file tools on the
//! canonical path the kernel resolved, so a re-pointed symlink no longer
//! matches; the rules are recorded in the run's configuration entry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;
use std::sync::Arc;

use keel_kernel::{AgentKernel, RunSpec, UserRules};
use keel_protocol::{
    EntryPayload, PermissionAnswer, PermissionDecision, PermissionMode, PermissionResolution,
    PermissionRuleLists, RunEventKind, RunResult, ToolStatus,
};
use keel_provider::{Script, ScriptedProvider};
use keel_session::{MemoryStore, SessionStore};
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, default_tools};
use serde_json::{Value, json};

fn call(name: &str, arguments: Value) -> Value {
    json!({"type": "tool_call", "name": name, "arguments": arguments})
}

fn bash(command: &str) -> Value {
    call("bash", json!({ "command": command }))
}

fn turn(calls: &[Value]) -> Value {
    json!({"content": calls})
}

fn done() -> Value {
    json!({"content": [{"type": "text", "text": "done"}]})
}

fn lists(allow: &[&str], ask: &[&str], deny: &[&str]) -> PermissionRuleLists {
    let owned = |list: &[&str]| list.iter().map(|rule| (*rule).to_owned()).collect();
    let mut lists = PermissionRuleLists::default();
    lists.allow = owned(allow);
    lists.ask = owned(ask);
    lists.deny = owned(deny);
    lists
}

struct Fixture {
    base: tempfile::TempDir,
    store: Arc<MemoryStore>,
    kernel: AgentKernel,
}

impl Fixture {
    fn ws(&self) -> std::path::PathBuf {
        self.base.path().join("ws")
    }

    /// A directory beside the workspace (outside it).
    fn outside(&self) -> std::path::PathBuf {
        self.base.path().canonicalize().unwrap().join("outside")
    }
}

/// A workspace `ws` and a directory `outside` beside it, holding
/// `allowed.txt`, `other.txt` and `secret.txt`; rules built from `rules`
/// (and the script's turns) with `{out}` standing for `outside`.
fn fixture(turns: Vec<Value>, rules: (&[&str], &[&str], &[&str])) -> Fixture {
    let base = tempfile::tempdir().unwrap();
    std::fs::create_dir(base.path().join("ws")).unwrap();
    let outside = base.path().canonicalize().unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    for name in ["allowed.txt", "other.txt", "secret.txt"] {
        std::fs::write(outside.join(name), format!("contents of {name}")).unwrap();
    }
    let out = outside.display().to_string();
    let fill = |list: &[&str]| -> Vec<String> {
        list.iter()
            .map(|rule| rule.replace("{out}", &out))
            .collect()
    };
    let (allow, ask, deny) = (fill(rules.0), fill(rules.1), fill(rules.2));
    let mut lists = PermissionRuleLists::default();
    (lists.allow, lists.ask, lists.deny) = (allow, ask, deny);
    let rules = UserRules::new(lists).unwrap();
    let store = Arc::new(MemoryStore::new());
    let script = json!({ "turns": turns });
    let kernel = AgentKernel::builder()
        .provider(Arc::new(ScriptedProvider::new(
            Script::from_json(&script.to_string().replace("{out}", &out)).unwrap(),
        )))
        .workspace(Workspace::new(base.path().join("ws")).unwrap())
        .store(store.clone())
        .tools(default_tools(BashOptions::default()))
        .user_rules(rules)
        .build()
        .unwrap();
    Fixture {
        base,
        store,
        kernel,
    }
}

/// What one run saw: the arguments asked about, each call's status, the result.
struct Seen {
    asked: Vec<String>,
    statuses: Vec<ToolStatus>,
    result: RunResult,
}

/// Runs `spec`, denying every permission request once.
async fn run(fixture: &Fixture, spec: RunSpec) -> Seen {
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
                run.resolve_permission(
                    &request_id,
                    PermissionAnswer::once(PermissionResolution::Denied),
                )
                .unwrap();
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

async fn decisions(store: &MemoryStore, session: &str) -> Vec<PermissionDecision> {
    store
        .entries(session)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|entry| match entry.payload {
            EntryPayload::PermissionDecision { decision } => Some(decision),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn deny_wins_ask_turns_an_allow_into_a_question_allow_answers_one() {
    let f = fixture(
        vec![
            turn(&[call(
                "write",
                json!({"path": "notes/a.txt", "content": "x"}),
            )]),
            turn(&[call("write", json!({"path": "other.txt", "content": "x"}))]),
            turn(&[call("read", json!({"path": "private.txt"}))]),
            turn(&[bash("rm -f notes/a.txt")]),
            done(),
        ],
        (
            &["write(notes/*)", "bash"],
            &["read(private.txt)"],
            &["bash(rm *)"],
        ),
    );
    std::fs::write(f.ws().join("private.txt"), "p").unwrap();
    let seen = run(&f, RunSpec::new("go").mode(PermissionMode::Ask)).await;
    // Asked: the write the allow rule does not cover, and the read the ask
    // rule turned into a question (reads are allowed in `ask` mode).
    assert_eq!(seen.asked.len(), 2, "{:?}", seen.asked);
    assert!(seen.asked[0].contains("other.txt"), "{:?}", seen.asked);
    assert!(seen.asked[1].contains("private.txt"), "{:?}", seen.asked);
    assert_eq!(
        seen.statuses,
        [
            ToolStatus::Success,
            ToolStatus::Error,
            ToolStatus::Error,
            ToolStatus::Error
        ]
    );
    assert!(f.ws().join("notes/a.txt").exists(), "rm was denied");
    let decisions = decisions(&f.store, &seen.result.session_id).await;
    let reasons: Vec<&str> = decisions.iter().map(|d| d.reason.as_str()).collect();
    assert!(
        reasons.contains(&"allowed by rule allow[0] \"write(notes/*)\" (sandbox: workspace_write)"),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"denied by rule deny[0] \"bash(rm *)\""),
        "deny wins over the `bash` allow rule: {reasons:?}"
    );
}

#[tokio::test]
async fn a_deny_rule_holds_in_full_mode_and_an_allow_rule_never_undoes_plan() {
    let f = fixture(
        vec![
            turn(&[bash("git status; curl -s https://example.com")]),
            turn(&[call("write", json!({"path": "a.txt", "content": "x"}))]),
            done(),
        ],
        (&["write"], &[], &["bash(curl *)"]),
    );
    let seen = run(&f, RunSpec::new("go").mode(PermissionMode::Full)).await;
    assert!(seen.asked.is_empty());
    assert_eq!(seen.statuses, [ToolStatus::Error, ToolStatus::Success]);
    let decisions = decisions(&f.store, &seen.result.session_id).await;
    assert_eq!(
        decisions[0].reason,
        "denied by rule deny[0] \"bash(curl *)\""
    );

    let f = fixture(
        vec![
            turn(&[call("write", json!({"path": "a.txt", "content": "x"}))]),
            done(),
        ],
        (&["write"], &[], &[]),
    );
    let seen = run(&f, RunSpec::new("go").mode(PermissionMode::Plan)).await;
    assert_eq!(seen.statuses, [ToolStatus::Error]);
    assert!(!f.ws().join("a.txt").exists());
}

#[tokio::test]
async fn a_compound_command_is_allowed_only_when_every_simple_command_matches() {
    let f = fixture(
        vec![
            turn(&[bash("echo one > a.txt && echo two >> a.txt")]),
            turn(&[bash("echo three >> a.txt; touch b.txt")]),
            turn(&[bash("echo $UNKNOWN_WORD >> a.txt")]),
            done(),
        ],
        (&["bash(echo *)"], &[], &[]),
    );
    let seen = run(&f, RunSpec::new("go").mode(PermissionMode::Ask)).await;
    assert_eq!(seen.asked.len(), 2, "{:?}", seen.asked);
    assert!(seen.asked[0].contains("touch b.txt"), "{:?}", seen.asked);
    assert!(seen.asked[1].contains("UNKNOWN_WORD"), "{:?}", seen.asked);
    assert_eq!(
        std::fs::read_to_string(f.ws().join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert!(!f.ws().join("b.txt").exists());
}

#[tokio::test]
async fn a_path_rule_matches_the_canonical_path_not_the_text() {
    let f = fixture(
        vec![
            turn(&[call("read", json!({"path": "link"}))]),
            turn(&[call("read", json!({"path": "hidden"}))]),
            done(),
            turn(&[call("read", json!({"path": "link"}))]),
            done(),
        ],
        (&["read({out}/allowed.txt)"], &[], &["read({out}/secret*)"]),
    );
    let outside = f.outside();
    symlink(outside.join("allowed.txt"), f.ws().join("link")).unwrap();
    symlink(outside.join("secret.txt"), f.ws().join("hidden")).unwrap();
    let seen = run(&f, RunSpec::new("go").mode(PermissionMode::Auto)).await;
    assert!(seen.asked.is_empty(), "{:?}", seen.asked);
    assert_eq!(seen.statuses, [ToolStatus::Success, ToolStatus::Error]);
    let decisions = decisions(&f.store, &seen.result.session_id).await;
    assert!(
        decisions[0].reason.starts_with("allowed by rule allow[0]"),
        "{}",
        decisions[0].reason
    );
    assert!(
        decisions[1].reason.starts_with("denied by rule deny[0]"),
        "through the symlink `hidden`: {}",
        decisions[1].reason
    );
    // Re-pointed elsewhere, the link no longer matches the allow rule.
    std::fs::remove_file(f.ws().join("link")).unwrap();
    symlink(outside.join("other.txt"), f.ws().join("link")).unwrap();
    let again = run(
        &f,
        RunSpec::new("again")
            .session(seen.result.session_id.clone())
            .mode(PermissionMode::Auto),
    )
    .await;
    assert_eq!(again.asked.len(), 1, "{:?}", again.asked);
    assert_eq!(again.statuses, [ToolStatus::Error]);
}

#[tokio::test]
async fn the_rules_are_recorded_in_the_runs_configuration_entry() {
    let f = fixture(
        vec![done()],
        (&["bash(cargo test *)"], &[], &["read(~/.ssh/**)"]),
    );
    let seen = run(&f, RunSpec::new("go")).await;
    let configuration = f
        .store
        .entries(&seen.result.session_id)
        .await
        .unwrap()
        .into_iter()
        .find_map(|entry| match entry.payload {
            EntryPayload::Configuration { permissions, .. } => Some(permissions),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        configuration,
        lists(&["bash(cargo test *)"], &[], &["read(~/.ssh/**)"])
    );
}

/// Attacks an attacker's review found, each now asked or denied.
#[tokio::test]
async fn a_planted_symlink_never_moves_what_an_allow_rule_covers() {
    let f = fixture(
        vec![
            // The command makes `notes` a link out of the workspace…
            turn(&[bash("rm -rf notes && ln -s {out} notes")]),
            // …and a write under `notes/` would land outside.
            turn(&[call(
                "write",
                json!({"path": "notes/planted.txt", "content": "x"}),
            )]),
            // In one batch: re-point `link` at the secret, then read it.
            turn(&[
                bash("ln -sfn {out}/secret.txt link"),
                call("read", json!({"path": "link"})),
            ]),
            done(),
        ],
        (
            &["write(notes/*)", "read({out}/allowed.txt)", "bash"],
            &[],
            &[],
        ),
    );
    let outside = f.outside();
    std::fs::create_dir(f.ws().join("notes")).unwrap();
    symlink(outside.join("allowed.txt"), f.ws().join("link")).unwrap();
    let seen = run(&f, RunSpec::new("go").mode(PermissionMode::Ask)).await;
    assert!(!outside.join("planted.txt").exists(), "{:?}", seen.asked);
    assert!(
        seen.asked.iter().any(|asked| asked.contains("planted.txt")),
        "{:?}",
        seen.asked
    );
    let entries = f.store.entries(&seen.result.session_id).await.unwrap();
    let read_secret = entries.iter().any(|entry| {
        serde_json::to_string(&entry.payload)
            .unwrap()
            .contains("contents of secret.txt")
    });
    assert!(
        !read_secret,
        "the re-pointed link was read under the allow rule"
    );
}

#[tokio::test]
async fn allow_rules_never_cover_redirections_assignments_or_program_options() {
    let f = fixture(
        vec![
            turn(&[bash("echo '[core]' >> .git/config")]),
            turn(&[bash("echo leak > /dev/tcp/127.0.0.1/9")]),
            turn(&[bash("GIT_CONFIG_COUNT=1 git status")]),
            turn(&[bash("git fetch --upload-pack='touch ran' .")]),
            turn(&[bash("echo fine > a.txt")]),
            done(),
        ],
        (
            &["bash(echo *)", "bash(git status *)", "bash(git fetch *)"],
            &[],
            &[],
        ),
    );
    std::fs::create_dir(f.ws().join(".git")).unwrap();
    let seen = run(&f, RunSpec::new("go").mode(PermissionMode::Ask)).await;
    assert_eq!(seen.asked.len(), 4, "{:?}", seen.asked);
    assert_eq!(
        std::fs::read_to_string(f.ws().join("a.txt")).unwrap(),
        "fine\n",
        "a plain redirection inside the workspace is still allowed"
    );
    assert!(!f.ws().join("ran").exists());
}

#[tokio::test]
async fn a_deny_rule_matches_a_program_named_by_its_path() {
    let f = fixture(
        vec![turn(&[bash("/bin/rm -f keep.txt")]), done()],
        (&[], &[], &["bash(rm *)"]),
    );
    std::fs::write(f.ws().join("keep.txt"), "k").unwrap();
    let seen = run(&f, RunSpec::new("go").mode(PermissionMode::Full)).await;
    assert_eq!(seen.statuses, [ToolStatus::Error]);
    assert!(f.ws().join("keep.txt").exists());
}

#[test]
fn rules_are_bounded_in_length_and_number() {
    let long = format!("bash({})", "a".repeat(2000));
    assert!(UserRules::new(lists(&[], &[], &[&long])).is_err());
    let many: Vec<String> = (0..300).map(|n| format!("bash(x{n})")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(UserRules::new(lists(&many, &[], &[])).is_err());
}
