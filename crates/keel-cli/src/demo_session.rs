//! `keel demo session-tree`: sessions that branch, fork and refuse bad input.
//!
//! `success` runs three prompts against one JSONL store: a first run; a
//! second run after moving the leaf back to the root, which starts a sibling
//! branch; a third run in a fork taken at the first run's answer. It prints
//! every run's events, the branch and fork operations, and the drawn trees.
//! `invalid-entry` holds the session's writer lease (as a live run does),
//! appends an entry whose parent does not exist, and writes the session from
//! a second store (as another process would): both are refused with typed
//! errors, and the session is unchanged.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use keel_kernel::{AgentKernel, RunSpec};
use keel_protocol::{
    Entry, EntryPayload, Message, PermissionMode, RunResult, RunState, UserMessage,
};
use keel_session::{JsonlStore, SessionStore};
use serde_json::json;

use crate::demo::demo_kernel;
use crate::host;
use crate::output::Output;
use crate::session_cmd::draw_tree;
use crate::startup::StartupError;

pub async fn run(case: &str, workspace: &Path, output: &Output) -> Result<ExitCode, StartupError> {
    let sessions = tempfile::Builder::new()
        .prefix("keel-demo-sessions-")
        .tempdir()
        .map_err(|error| StartupError::new("session_dir", error.to_string()))?;
    let store = Arc::new(JsonlStore::new(sessions.path())?);
    let kernel = demo_kernel(
        include_str!("../demos/session-tree.json"),
        workspace,
        store.clone(),
        None,
    )?;
    match case {
        "success" => success(&kernel, &store, output).await,
        "invalid-entry" => invalid_entry(&kernel, &store, output).await,
        other => Err(StartupError::new(
            "unknown_case",
            format!("unknown case `{other}`; cases: success, invalid-entry"),
        )),
    }
}

async fn one_run(
    kernel: &AgentKernel,
    prompt: &str,
    session_id: Option<String>,
    output: &Output,
) -> Result<RunResult, StartupError> {
    let spec = RunSpec::new(prompt)
        .session_opt(session_id)
        .mode(PermissionMode::Auto)
        .max_turns(10);
    let run = kernel.create_run(spec).await?;
    host::drive_and_finish(&run, output, async |_, _| {}).await
}

async fn success(
    kernel: &AgentKernel,
    store: &JsonlStore,
    output: &Output,
) -> Result<ExitCode, StartupError> {
    let first = one_run(kernel, "What does calc.sh do?", None, output).await?;
    let session = first.session_id.clone();
    let entries = store.entries(&session).await?;
    let root = entries
        .first()
        .map(|entry| entry.id.clone())
        .unwrap_or_default();
    let answer = entries
        .last()
        .map(|entry| entry.id.clone())
        .unwrap_or_default();

    store.set_leaf(&session, &root).await?;
    output.note(
        "branch",
        json!({"session_id": session, "leaf": root}),
        || format!("── leaf moved back to {root}"),
    );
    let second = one_run(
        kernel,
        "Summarise the README.",
        Some(session.clone()),
        output,
    )
    .await?;

    let fork = keel_host::sessions::fork(store, &session, &answer)
        .await?
        .session_id;
    output.note(
        "fork",
        json!({"session_id": fork, "parent_session": session, "forked_at": answer}),
        || format!("── forked {session} at {answer} into {fork}"),
    );
    let third = one_run(kernel, "How do I fix it?", Some(fork.clone()), output).await?;

    for id in [&session, &fork] {
        let snapshot = store.snapshot(id)?;
        let lines = draw_tree(&snapshot);
        output.note("tree", json!({"session_id": id, "lines": lines}), || {
            format!("session {id}:\n{}", lines.join("\n"))
        });
    }
    let settled = [first, second, third]
        .iter()
        .all(|result| result.state == RunState::Settled);
    Ok(if settled {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn invalid_entry(
    kernel: &AgentKernel,
    store: &JsonlStore,
    output: &Output,
) -> Result<ExitCode, StartupError> {
    let _ = one_run(kernel, "What does calc.sh do?", None, output).await?;
    let listed = store.list().await?;
    let session = listed
        .first()
        .map(|info| info.id.clone())
        .unwrap_or_default();
    let before = store.entries(&session).await?.len();
    let orphan = Entry::new(
        "orphan",
        Some("no-such-entry".into()),
        0,
        EntryPayload::Message {
            message: Message::User(UserMessage::text("I have no parent")),
        },
    );
    // Held as a live run holds it: the file is locked for as long.
    let lease = store.open_writer(&session).await?;
    let refused = store.append(&session, vec![orphan]).await;
    let second_writer = JsonlStore::new(store.dir())?;
    let intruder = Entry::new(
        "intruder",
        store.leaf(&session).await?,
        0,
        EntryPayload::Message {
            message: Message::User(UserMessage::text("a second writer")),
        },
    );
    let locked = second_writer.append(&session, vec![intruder]).await;
    drop(lease);
    let after = store.entries(&session).await?.len();
    for outcome in [refused.err(), locked.err()].into_iter().flatten() {
        let error = StartupError::from(outcome);
        output.note(
            "session_error",
            json!({"code": error.code(), "message": error.message()}),
            || format!("refused ({}): {}", error.code(), error.message()),
        );
    }
    output.note("entries", json!({"before": before, "after": after}), || {
        format!("entries before: {before}, after: {after}")
    });
    Ok(ExitCode::from(1))
}
