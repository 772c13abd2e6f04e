//! `keel session`: list, show, draw, fork and export stored sessions.
//!
//! Everything here reads through `JsonlStore::snapshot`, which takes no lock
//! and never repairs, so inspecting a session is safe while a run writes to
//! it. Only `fork` writes, and only to the new session.

use std::io::IsTerminal;
use std::process::ExitCode;

use keel_host::sessions;
use keel_protocol::{ContentBlock, Entry, EntryPayload, Message};
use keel_session::{JsonlStore, SessionStore, Snapshot};
use serde_json::json;

use crate::args::{SessionCommand, StoreArgs};
use crate::output::say;
use crate::startup::StartupError;

pub async fn run(command: SessionCommand) -> Result<ExitCode, StartupError> {
    match command {
        SessionCommand::List { store } => list(&open_store(&store)?).await,
        SessionCommand::Show { id, store } => show(&open_store(&store)?, &id),
        SessionCommand::Tree { id, store } => tree(&open_store(&store)?, &id),
        SessionCommand::Fork { id, entry, store } => fork(&open_store(&store)?, &id, &entry).await,
        SessionCommand::Export { id, output, store } => {
            export(&open_store(&store)?, &id, output.as_deref())
        }
    }
}

/// The store named by `--session-dir`, or the default one.
pub fn open_store(args: &StoreArgs) -> Result<JsonlStore, StartupError> {
    Ok(sessions::open_store(args.session_dir.as_deref())?)
}

/// Turns a store error into a startup error with a stable code.
pub fn session_error(error: keel_session::SessionError) -> StartupError {
    StartupError::new(error.code(), error.to_string())
}

async fn list(store: &JsonlStore) -> Result<ExitCode, StartupError> {
    let sessions = store.list().await.map_err(session_error)?;
    let terminal = std::io::stdout().is_terminal();
    if terminal {
        say(format!(
            "{:<36}  {:>7}  {:>9}  {:<20}  TITLE",
            "ID", "ENTRIES", "SIZE", "LAST ACTIVITY"
        ));
    }
    for info in sessions {
        if terminal {
            let title = info
                .problem
                .as_deref()
                .map(|p| format!("(damaged: {p})"))
                .or(info.title)
                .unwrap_or_default();
            say(format!(
                "{:<36}  {:>7}  {:>9}  {:<20}  {title}",
                info.id,
                info.entries,
                human_size(info.bytes),
                human_time(info.last_activity)
            ));
        } else {
            let line = json!({
                "id": info.id, "title": info.title, "entries": info.entries, "bytes": info.bytes,
                "created": info.created, "last_activity": info.last_activity,
                "parent_session": info.parent_session, "problem": info.problem,
            });
            say(line);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn snapshot(store: &JsonlStore, wanted: &str) -> Result<Snapshot, StartupError> {
    let id = sessions::resolve_session(store, wanted)?;
    store.snapshot(&id).map_err(session_error)
}

fn show(store: &JsonlStore, wanted: &str) -> Result<ExitCode, StartupError> {
    let snapshot = snapshot(store, wanted)?;
    let branch = active_branch(&snapshot);
    let summary = json!({
        "id": snapshot.id,
        "parent_session": snapshot.parent_session,
        "workspace": snapshot.workspace,
        "created": snapshot.created,
        "entries": snapshot.entries.len(),
        "leaf": snapshot.leaf,
        "torn_tail": snapshot.torn.as_ref().map(|t| json!({"line": t.line, "bytes": t.bytes, "reason": t.reason})),
        "branch": branch.iter().map(|entry| json!({
            "id": entry.id, "parent_id": entry.parent_id, "kind": entry.kind(), "summary": describe(entry),
        })).collect::<Vec<_>>(),
    });
    if std::io::stdout().is_terminal() {
        say(format!(
            "session {}  ({} entries, leaf {})",
            snapshot.id,
            snapshot.entries.len(),
            snapshot.leaf.as_deref().unwrap_or("-")
        ));
        if let Some(parent) = &snapshot.parent_session {
            say(format!("forked from {parent}"));
        }
        for entry in branch {
            say(format!("  {}  {}", short_id(&entry.id), describe(entry)));
        }
    } else {
        say(summary);
    }
    Ok(ExitCode::SUCCESS)
}

fn tree(store: &JsonlStore, wanted: &str) -> Result<ExitCode, StartupError> {
    let snapshot = snapshot(store, wanted)?;
    for line in draw_tree(&snapshot) {
        say(line);
    }
    Ok(ExitCode::SUCCESS)
}

async fn fork(store: &JsonlStore, wanted: &str, entry: &str) -> Result<ExitCode, StartupError> {
    let snapshot = snapshot(store, wanted)?;
    let entry = sessions::resolve_entry(&snapshot, entry)?;
    let id = store
        .fork(&snapshot.id, &entry)
        .await
        .map_err(session_error)?;
    say(format!(
        "{}",
        json!({"session": {"id": id, "parent_session": snapshot.id, "forked_at": entry}})
    ));
    Ok(ExitCode::SUCCESS)
}

fn export(
    store: &JsonlStore,
    wanted: &str,
    output: Option<&std::path::Path>,
) -> Result<ExitCode, StartupError> {
    let snapshot = snapshot(store, wanted)?;
    let document = json!({
        "id": snapshot.id,
        "parent_session": snapshot.parent_session,
        "workspace": snapshot.workspace,
        "created": snapshot.created,
        "leaf": snapshot.leaf,
        "entries": snapshot.entries,
    });
    let text = document.to_string() + "\n";
    match output {
        Some(path) => std::fs::write(path, text)
            .map_err(|error| StartupError::new("export", format!("{}: {error}", path.display())))?,
        None => say(text.trim_end()),
    }
    Ok(ExitCode::SUCCESS)
}

/// The entries from the root to the leaf.
fn active_branch(snapshot: &Snapshot) -> Vec<&Entry> {
    let by_id: std::collections::HashMap<&str, &Entry> = snapshot
        .entries
        .iter()
        .map(|e| (e.id.as_str(), e))
        .collect();
    let mut branch = Vec::new();
    let mut cursor = snapshot.leaf.as_deref();
    while let Some(entry) = cursor.and_then(|id| by_id.get(id)) {
        branch.push(*entry);
        cursor = entry.parent_id.as_deref();
    }
    branch.reverse();
    branch
}

/// The session tree as text: `*` marks the active branch; a chain without
/// branch points stays at one indentation.
pub fn draw_tree(snapshot: &Snapshot) -> Vec<String> {
    let mut children: std::collections::HashMap<Option<&str>, Vec<&Entry>> =
        std::collections::HashMap::new();
    for entry in &snapshot.entries {
        children
            .entry(entry.parent_id.as_deref())
            .or_default()
            .push(entry);
    }
    let active: std::collections::HashSet<&str> = active_branch(snapshot)
        .iter()
        .map(|e| e.id.as_str())
        .collect();
    let mut lines = Vec::new();
    // (entry, prefix for its line, prefix for its children)
    let mut stack: Vec<(&Entry, String, String)> = Vec::new();
    push_children(&children, None, String::new(), &mut stack);
    while let Some((entry, line_prefix, child_prefix)) = stack.pop() {
        let mark = if active.contains(entry.id.as_str()) {
            '*'
        } else {
            ' '
        };
        let leaf = if snapshot.leaf.as_deref() == Some(entry.id.as_str()) {
            "  ← leaf"
        } else {
            ""
        };
        lines.push(format!(
            "{line_prefix}{mark} {} {}{leaf}",
            short_id(&entry.id),
            describe(entry)
        ));
        push_children(&children, Some(&entry.id), child_prefix, &mut stack);
    }
    lines
}

fn push_children<'a>(
    children: &std::collections::HashMap<Option<&str>, Vec<&'a Entry>>,
    parent: Option<&str>,
    prefix: String,
    stack: &mut Vec<(&'a Entry, String, String)>,
) {
    let Some(kids) = children.get(&parent) else {
        return;
    };
    if let [only] = kids.as_slice() {
        stack.push((only, prefix.clone(), prefix));
        return;
    }
    for (position, kid) in kids.iter().enumerate().rev() {
        let last = position + 1 == kids.len();
        let line = format!("{prefix}{}", if last { "└─" } else { "├─" });
        let below = format!("{prefix}{}", if last { "  " } else { "│ " });
        stack.push((kid, line, below));
    }
}

/// A one-line description of an entry.
pub fn describe(entry: &Entry) -> String {
    let text = match &entry.payload {
        EntryPayload::Configuration { model, mode, .. } => {
            format!("configuration: {model}, {}", mode.as_str())
        }
        EntryPayload::Message {
            message: Message::User(user),
        } => format!("user: {}", user.plain_text()),
        EntryPayload::Message {
            message: Message::Assistant(assistant),
        } => {
            let calls: Vec<&str> = assistant
                .tool_calls()
                .map(|call| call.name.as_str())
                .collect();
            let text = assistant.text();
            match (text.is_empty(), calls.is_empty()) {
                (_, false) if text.is_empty() => format!("assistant: calls {}", calls.join(", ")),
                (_, false) => format!("assistant: {text} [calls {}]", calls.join(", ")),
                _ if assistant
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Thinking { .. }))
                    && text.is_empty() =>
                {
                    "assistant: (thinking only)".into()
                }
                _ => format!("assistant: {text}"),
            }
        }
        EntryPayload::Message {
            message: Message::ToolResult(result),
        } => format!(
            "{} result ({:?}): {}",
            result.tool_name,
            result.status,
            result.text()
        )
        .to_lowercase(),
        EntryPayload::Checkpoint { summary, .. } => format!("checkpoint: {summary}"),
        EntryPayload::PermissionDecision { decision } => format!(
            "permission: {} {:?} by {:?}",
            decision.tool_name, decision.resolution, decision.source
        )
        .to_lowercase(),
        EntryPayload::BranchSummary { summary, .. } => format!("branch summary: {summary}"),
        EntryPayload::Label { target_id, label } => {
            format!("label {}: {label}", short_id(target_id))
        }
        EntryPayload::Custom { custom_kind, .. } => format!("custom: {custom_kind}"),
        // Kinds added later show their name until described here.
        other => other.kind().to_owned(),
    };
    one_line(&text, 90)
}

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// The last 8 characters of an id: the random part of a UUIDv7.
pub fn short_id(id: &str) -> &str {
    let start = id.len().saturating_sub(8);
    id.get(start..).unwrap_or(id)
}

fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / f64::from(1 << 20)),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn human_time(ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default();
    let ago = now.saturating_sub(ms) / 1000;
    match ago {
        s if s < 60 => format!("{s} s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} days ago", s / 86_400),
    }
}
