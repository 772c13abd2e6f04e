//! `keel session`: list, show, draw, fork, export and salvage stored sessions.
//!
//! Everything here reads through `JsonlStore::reader`, which takes no lock,
//! never repairs and never writes, so inspecting a session is safe while a
//! run writes to it; a torn tail is mentioned, not cut. Only `fork` and
//! `salvage` write, and only to the new session. `tree` and `export` read one entry at a time,
//! so their memory grows with the number of entries, not their size.
//!
//! `list`, `show`, `tree`, `fork`, `salvage` and `compact` print readable
//! lines by default (`--output-format text`, on a terminal and piped), one
//! JSON document with `json`, and JSON Lines with `stream-json`.

use std::io::Write;
use std::process::ExitCode;

use keel_host::sessions;
use keel_protocol::{ContentBlock, Entry, EntryPayload, Message};
use keel_session::{JsonlStore, Repair, SessionReader, Snapshot, TornTail};
use serde_json::json;

use crate::args::{DataFormat, SessionCommand, StoreArgs};
use crate::output::say;
use crate::startup::StartupError;

pub async fn run(command: SessionCommand) -> Result<ExitCode, StartupError> {
    match command {
        SessionCommand::List {
            store,
            all,
            workspace,
            format,
        } => {
            let workspace = match all {
                true => None,
                false => Some(sessions::workspace_root(workspace.as_deref())?),
            };
            list(&open_store(&store)?, workspace.as_deref(), format.data()).await
        }
        SessionCommand::Show { id, store, format } => {
            show(&open_store(&store)?, &id, format.data()).await
        }
        SessionCommand::Tree { id, store, format } => {
            tree(&open_store(&store)?, &id, format.data()).await
        }
        SessionCommand::Fork {
            id,
            entry,
            store,
            format,
        } => fork(&open_store(&store)?, &id, &entry, format.data()).await,
        SessionCommand::Export { id, output, store } => {
            export(&open_store(&store)?, &id, output.as_deref()).await
        }
        SessionCommand::Salvage { id, store, format } => {
            salvage(&open_store(&store)?, &id, format.data()).await
        }
        SessionCommand::Compact(args) => crate::compact_cmd::run(*args).await,
        SessionCommand::Prune(args) => prune(args).await,
        SessionCommand::Restore {
            id,
            at,
            into,
            store,
            format,
        } => {
            crate::rewind_cmd::restore(
                open_store(&store)?,
                &id,
                at.as_deref(),
                &into,
                format.data(),
            )
            .await
        }
        SessionCommand::Stats {
            id,
            all: _,
            store,
            format,
        } => stats(&open_store(&store)?, id.as_deref(), format.data()).await,
    }
}

/// `keel session stats ID|--all`: the session's (or the store's) tokens,
/// cost, runs, turns, tool calls, time and permission decisions, as lines
/// of text or one JSON document (also for `stream-json`: it is one record).
async fn stats(
    store: &JsonlStore,
    wanted: Option<&str>,
    format: DataFormat,
) -> Result<ExitCode, StartupError> {
    use keel_host::stats;
    let (stats, label, unreadable) = match wanted {
        Some(wanted) => {
            let id = resolve_session(store, wanted).await?;
            let stats = stats::of_session(store, &id).await?;
            (
                stats,
                format!("session {}", sessions::short_id(store, &id)),
                0,
            )
        }
        None => {
            let (stats, unreadable) = stats::of_store(store).await?;
            (stats, "every session".to_owned(), unreadable)
        }
    };
    if format != DataFormat::Text {
        let mut document = serde_json::to_value(&stats)
            .map_err(|error| StartupError::new("io", error.to_string()))?;
        document["mean_turn_ms"] = json!(stats.mean_turn_ms());
        document["unreadable_sessions"] = json!(unreadable);
        say(document);
        return Ok(ExitCode::SUCCESS);
    }
    let ms = |ms: u64| format!("{:.1}s", ms as f64 / 1000.0);
    let runs: Vec<String> = stats
        .runs
        .iter()
        .map(|(state, count)| format!("{count} {state}"))
        .collect();
    let run_count: u64 = stats.runs.values().sum();
    say(match stats.sessions {
        1 => format!("{label}: {run_count} runs ({})", runs.join(", ")),
        n => format!("{label} ({n}): {run_count} runs ({})", runs.join(", ")),
    });
    say(format!(
        "turns        {} · model {} · tools {} (from entry timestamps; tool time includes permission waits)",
        stats.turns,
        ms(stats.model_ms),
        ms(stats.tool_ms)
    ));
    say(format!(
        "per turn     mean {} · longest {}",
        ms(stats.mean_turn_ms()),
        ms(stats.longest_turn_ms)
    ));
    say(format!(
        "tokens       {} in (+{} cache read, {} cache write) · {} out",
        stats.input_tokens, stats.cache_read_tokens, stats.cache_write_tokens, stats.output_tokens
    ));
    let unknown = match stats.turns_without_cost {
        0 => String::new(),
        n => format!(
            " ({n} turn{} without prices)",
            if n == 1 { "" } else { "s" }
        ),
    };
    say(format!("cost         ${:.4}{unknown}", stats.cost_usd));
    let tools: Vec<String> = stats
        .tool_calls
        .iter()
        .map(|(tool, calls)| match calls.failed {
            0 => format!("{tool} {}", calls.calls),
            failed => format!("{tool} {} ({failed} failed)", calls.calls),
        })
        .collect();
    say(format!(
        "tool calls   {}",
        if tools.is_empty() {
            "none".to_owned()
        } else {
            tools.join(", ")
        }
    ));
    say(format!("compactions  {}", stats.compactions));
    let p = &stats.permissions;
    say(format!(
        "permissions  {} asked ({} approved, {} denied) · {} by the mode's policy · {} by session rules",
        p.asked, p.approved, p.denied, p.by_policy, p.by_session_rule
    ));
    if unreadable > 0 {
        say(format!(
            "({unreadable} sessions could not be read: keel session list --all)"
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// `keel session prune`: removes old sessions (keel-host's `prune` says
/// which are never removed) and prints each removed one and what it freed:
/// as text, one JSON document, or JSON Lines.
async fn prune(args: crate::args::PruneArgs) -> Result<ExitCode, StartupError> {
    use keel_host::prune::{self, PruneRequest};
    let format = args.format.data();
    let older_than = match &args.older_than {
        Some(text) => prune::parse_duration(text)
            .map_err(|message| StartupError::new("usage", format!("--older-than: {message}")))?,
        None => {
            let settings = keel_host::Settings::load(&args.settings.sources())?;
            settings.sessions.retention().ok_or_else(|| {
                StartupError::new(
                    "usage",
                    "keel session prune needs --older-than DURATION \
                     (or `retention` in config.toml's [sessions])",
                )
            })?
        }
    };
    let store = open_store(&args.store)?;
    let mut request = PruneRequest::new(older_than);
    request.keep = args.keep;
    request.dry_run = args.dry_run;
    let report = prune::prune(&store, &request, keel_protocol::now_ms()).await?;
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    match format {
        DataFormat::Text => {
            for (id, bytes) in &report.removed {
                say(format!("{verb} {id} ({})", human_size(*bytes)));
            }
            for (id, why) in &report.kept {
                say(format!("kept {id}: {}", kept_reason(*why)));
            }
            say(format!(
                "{verb} {} session{}, {} freed; {} kept as old, {} recent",
                report.removed.len(),
                if report.removed.len() == 1 { "" } else { "s" },
                human_size(report.freed()),
                report.kept.len(),
                report.recent
            ));
        }
        _ => {
            let removed: Vec<_> = report
                .removed
                .iter()
                .map(|(id, bytes)| json!({"type": "session_pruned", "id": id, "bytes": bytes}))
                .collect();
            let kept: Vec<_> = report
                .kept
                .iter()
                .map(|(id, why)| json!({"type": "session_kept", "id": id, "reason": why.as_str()}))
                .collect();
            let summary = json!({
                "type": "prune_summary", "dry_run": args.dry_run, "removed": report.removed.len(),
                "freed_bytes": report.freed(), "kept": report.kept.len(), "recent": report.recent,
            });
            if format == DataFormat::Json {
                say(json!({"removed": removed, "kept": kept, "summary": summary}));
            } else {
                for line in removed.into_iter().chain(kept).chain([summary]) {
                    say(line);
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn kept_reason(why: keel_host::prune::KeptBecause) -> &'static str {
    use keel_host::prune::KeptBecause;
    match why {
        KeptBecause::Open => "a run holds it open",
        KeptBecause::Interrupted => "a crash interrupted its last run (keel resume continues it)",
        KeptBecause::Damaged => "it does not open (keel session salvage may recover it)",
        KeptBecause::ParentOfKept => "a kept session is a fork of it",
        _ => "kept",
    }
}

/// The store named by `--session-dir`, or the default one.
pub fn open_store(args: &StoreArgs) -> Result<JsonlStore, StartupError> {
    let dir = match &args.session_dir {
        Some(dir) => dir.clone(),
        None => keel_host::sessions::default_dir().ok_or_else(|| {
            StartupError::new(
                "session_dir",
                "neither XDG_DATA_HOME nor HOME is set; pass --session-dir",
            )
        })?,
    };
    JsonlStore::new(dir).map_err(StartupError::from)
}

/// The session whose id is `wanted`, or starts or ends with it (if only one
/// does), as the store resolves it.
pub async fn resolve_session(store: &JsonlStore, wanted: &str) -> Result<String, StartupError> {
    Ok(sessions::resolve_session(store, wanted).await?)
}

/// The one line a person reads about a repair.
pub fn repaired(repair: &Repair) -> String {
    format!(
        "session {} was repaired: cut a torn tail of {} bytes from line {} ({}); no acknowledged entry was lost",
        repair.session_id, repair.torn.bytes, repair.torn.line, repair.torn.reason
    )
}

/// How a read-only command mentions a torn tail it leaves in place.
fn torn_note(torn: &TornTail) -> String {
    format!(
        "torn tail: {} bytes from line {} are an interrupted (or still running) write, left in place; the next run on this session cuts a torn one",
        torn.bytes, torn.line
    )
}

fn torn_json(torn: Option<&TornTail>) -> serde_json::Value {
    torn.map_or(
        serde_json::Value::Null,
        |torn| json!({"line": torn.line, "bytes": torn.bytes, "reason": torn.reason}),
    )
}

/// The sessions of `workspace` (every one for `None`): a table as text
/// (the workspace column only with every workspace), one JSON document
/// (`{"workspace", "sessions", "others"}`), or one JSON object per session.
async fn list(
    store: &JsonlStore,
    workspace: Option<&std::path::Path>,
    format: DataFormat,
) -> Result<ExitCode, StartupError> {
    let (sessions, others) = sessions::sessions_of(store, workspace).await?;
    let short = sessions::short_ids(store)?;
    let short_of = |id: &str| short.get(id).cloned().unwrap_or_else(|| id.to_owned());
    let width = sessions
        .iter()
        .map(|info| short_of(&info.id).len())
        .max()
        .unwrap_or(0)
        .max(2);
    let terminal = format == DataFormat::Text;
    let mut documents = Vec::new();
    if terminal {
        match workspace {
            Some(root) => say(format!("sessions of {}", root.display())),
            None => say("sessions of every workspace"),
        }
        say(format!(
            "{:<width$}  {:>7}  {:>9}  {:<20}  {}TITLE",
            "ID",
            "ENTRIES",
            "SIZE",
            "LAST ACTIVITY",
            if workspace.is_none() {
                "WORKSPACE  "
            } else {
                ""
            }
        ));
    }
    for info in sessions {
        if terminal {
            let title = info
                .problem
                .as_deref()
                .map(|p| format!("(damaged: {p})"))
                .or_else(|| {
                    let torn = info.torn.as_ref()?;
                    let title = info.title.as_deref().unwrap_or_default();
                    Some(format!("{title} ({})", torn_note(torn)))
                })
                .or(info.title)
                .unwrap_or_default();
            let place = match workspace {
                Some(_) => String::new(),
                None => format!("{}  ", info.workspace.as_deref().unwrap_or("-")),
            };
            say(format!(
                "{:<width$}  {:>7}  {:>9}  {:<20}  {place}{title}",
                short_of(&info.id),
                info.entries,
                human_size(info.bytes),
                human_time(info.last_activity)
            ));
        } else {
            let line = json!({
                "type": "session_summary", "id": info.id, "short_id": short_of(&info.id), "title": info.title, "entries": info.entries, "bytes": info.bytes,
                "created": info.created, "last_activity": info.last_activity,
                "parent_session": info.parent_session, "problem": info.problem,
                "torn_tail": torn_json(info.torn.as_ref()), "workspace": info.workspace,
            });
            match format {
                DataFormat::Json => documents.push(line),
                _ => say(line),
            }
        }
    }
    if format == DataFormat::Json {
        say(json!({
            "workspace": workspace.map(|root| root.display().to_string()),
            "sessions": documents,
            "others": others,
        }));
    }
    if terminal && others > 0 {
        say(format!(
            "({others} more in other workspaces or none: keel session list --all)"
        ));
    }
    Ok(ExitCode::SUCCESS)
}

async fn reader(store: &JsonlStore, wanted: &str) -> Result<SessionReader, StartupError> {
    let id = resolve_session(store, wanted).await?;
    store.reader(&id).map_err(StartupError::from)
}

/// The session and its active branch, one entry read at a time: a header
/// and a line per entry as text; one JSON object (keys in the order `json!`
/// sorts them) streamed as it is read; or, as JSON Lines, a `branch_entry`
/// line per entry then a `session_detail` line (the document without its
/// branch).
async fn show(
    store: &JsonlStore,
    wanted: &str,
    format: DataFormat,
) -> Result<ExitCode, StartupError> {
    let reader = reader(store, wanted).await?;
    if format == DataFormat::Text {
        say(format!(
            "session {}  ({} entries, leaf {})",
            reader.id(),
            reader.len(),
            reader.leaf().unwrap_or("-")
        ));
        if let Some(parent) = reader.parent_session() {
            say(format!("forked from {parent}"));
        }
        if let Some(torn) = reader.torn() {
            say(format!("! {}", torn_note(torn)));
        }
        let mut context = Context::default();
        for entry in reader.active_entries() {
            let entry = entry?;
            context.push(&entry);
            say(format!("  {}  {}", short_id(&entry.id), describe(&entry)));
        }
        say(context.line());
        return Ok(ExitCode::SUCCESS);
    }
    let lines = format == DataFormat::StreamJson;
    let mut context = Context::default();
    to_stdout(|sink| {
        let mut written = match lines {
            true => Ok(()),
            false => sink.write_all(b"{\"branch\":["),
        };
        for (position, entry) in reader.active_entries().enumerate() {
            let entry = entry?;
            context.push(&entry);
            let mut item = json!({
                "id": entry.id, "parent_id": entry.parent_id, "kind": entry.kind(), "summary": describe(&entry),
            });
            let separator: &[u8] = match (lines, position) {
                (true, _) => b"",
                (false, 0) => b"",
                (false, _) => b",",
            };
            if lines {
                item["type"] = json!("branch_entry");
            }
            written = written
                .and_then(|()| sink.write_all(separator))
                .and_then(|()| serde_json::to_writer(&mut *sink, &item).map_err(Into::into))
                .and_then(|()| match lines {
                    true => sink.write_all(b"\n"),
                    false => Ok(()),
                });
        }
        let head = match lines {
            true => "{\"type\":\"session_detail\",",
            false => "],",
        };
        let tail = format!(
            "{head}\"context\":{},\"created\":{},\"entries\":{},\"id\":{},\"leaf\":{},\"parent_session\":{},\"torn_tail\":{},\"workspace\":{}}}\n",
            context.json(),
            reader.created(),
            reader.len(),
            json_text(Some(reader.id())),
            json_text(reader.leaf()),
            json_text(reader.parent_session()),
            torn_json(reader.torn()),
            json_text(reader.workspace()),
        );
        Ok(written.and_then(|()| sink.write_all(tail.as_bytes())))
    })?;
    Ok(ExitCode::SUCCESS)
}

/// How full the session's model context is, gathered while `show` reads
/// the active branch: a cheap estimate (no tokenizer is loaded), the
/// tokens the provider reported for the latest response, and the window
/// the catalog gives the model the session last ran with.
#[derive(Default)]
struct Context {
    usage: keel_kernel::tokens::BranchUsage,
    model: Option<(String, String)>,
}

impl Context {
    fn push(&mut self, entry: &Entry) {
        self.usage.push(entry);
        if let EntryPayload::Configuration {
            provider, model, ..
        } = &entry.payload
        {
            self.model = Some((provider.clone(), model.clone()));
        }
    }

    fn window(&self) -> Option<u64> {
        let (provider, model) = self.model.as_ref()?;
        // The user's configuration, read as Keel reads every file it did not create.
        let settings = keel_host::Settings::load(&keel_host::Sources::default()).ok()?;
        settings
            .catalog
            .providers
            .get(provider)?
            .models
            .get(model)?
            .context_window
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "estimated_tokens": self.usage.estimated_tokens(),
            "reported_tokens": self.usage.reported_tokens(),
            "window": self.window(),
            "checkpoints": self.usage.checkpoints(),
        })
    }

    fn line(&self) -> String {
        let mut line = format!("context: ~{} tokens", self.usage.estimated_tokens());
        if let Some(window) = self.window() {
            let percent = self.usage.estimated_tokens() * 100 / window.max(1);
            line.push_str(&format!(" of {window} ({percent} %)"));
        }
        line.push_str(" in messages (estimated; a run adds its system prompt and tools)");
        if let Some(reported) = self.usage.reported_tokens() {
            line.push_str(&format!(", {reported} reported for the last response"));
        }
        match self.usage.checkpoints() {
            0 => line,
            1 => format!("{line}, 1 checkpoint"),
            count => format!("{line}, {count} checkpoints"),
        }
    }
}

/// Runs `write` against a buffered stdout; a closed stdout (e.g. `| head`)
/// is not an error. `write` returns a store error outside, a write error inside.
fn to_stdout(
    write: impl FnOnce(&mut dyn Write) -> Result<std::io::Result<()>, StartupError>,
) -> Result<(), StartupError> {
    let mut sink = std::io::BufWriter::new(std::io::stdout().lock());
    match write(&mut sink)?.and_then(|()| sink.flush()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(StartupError::new("output", format!("stdout: {error}")))
        }
        _ => Ok(()),
    }
}

/// The tree, drawn from the index (ids and parents) with each entry read
/// only to label its line: memory grows with the entry count, not payloads.
/// As JSON, every entry in append order with its parent, whether it is on
/// the active branch and whether it is the leaf: one document
/// (`{"id", "leaf", "entries", "torn_tail"}`) or a `tree_entry` line each.
async fn tree(
    store: &JsonlStore,
    wanted: &str,
    format: DataFormat,
) -> Result<ExitCode, StartupError> {
    let reader = reader(store, wanted).await?;
    let parents: Vec<Option<Option<usize>>> = reader.parent_positions().map(Some).collect();
    if format != DataFormat::Text {
        return tree_json(&reader, &parents, format);
    }
    draw(
        &parents,
        reader.leaf_position(),
        |position| {
            let entry = reader.entry_at(position)?;
            Ok::<_, StartupError>(format!("{} {}", short_id(&entry.id), describe(&entry)))
        },
        say,
    )?;
    if let Some(torn) = reader.torn() {
        say(format!("! {}", torn_note(torn)));
    }
    Ok(ExitCode::SUCCESS)
}

/// [`tree`] as JSON.
fn tree_json(
    reader: &SessionReader,
    parents: &[Option<Option<usize>>],
    format: DataFormat,
) -> Result<ExitCode, StartupError> {
    let leaf = reader.leaf_position();
    let mut active = vec![false; parents.len()];
    let branch = leaf.and_then(|tip| {
        keel_session::path_from_root(tip, parents.len(), |position| {
            parents.get(position).copied().flatten()
        })
    });
    for position in branch.unwrap_or_default() {
        if let Some(mark) = active.get_mut(position) {
            *mark = true;
        }
    }
    let mut entries = Vec::new();
    for (position, on_branch) in active.iter().enumerate() {
        let entry = reader.entry_at(position)?;
        let mut item = json!({
            "id": entry.id, "parent_id": entry.parent_id, "kind": entry.kind(),
            "summary": describe(&entry), "active": on_branch, "leaf": leaf == Some(position),
        });
        match format {
            DataFormat::StreamJson => {
                item["type"] = json!("tree_entry");
                say(item);
            }
            _ => entries.push(item),
        }
    }
    match format {
        DataFormat::StreamJson => {
            if let Some(torn) = reader.torn() {
                let mut line = torn_json(Some(torn));
                line["type"] = json!("torn_tail");
                say(line);
            }
        }
        _ => say(json!({
            "id": reader.id(), "leaf": reader.leaf(), "entries": entries,
            "torn_tail": torn_json(reader.torn()),
        })),
    }
    Ok(ExitCode::SUCCESS)
}

async fn fork(
    store: &JsonlStore,
    wanted: &str,
    entry: &str,
    format: DataFormat,
) -> Result<ExitCode, StartupError> {
    let reader = reader(store, wanted).await?;
    let entry = sessions::resolve_entry(reader.entry_ids(), entry)?;
    let source = reader.id().to_owned();
    drop(reader);
    let fork = sessions::fork(store, &source, &entry).await?;
    match format {
        DataFormat::Text => {
            say(format!(
                "forked session {source} at entry {entry} into new session {}",
                fork.session_id
            ));
            if !fork.closed_calls.is_empty() {
                say(format!(
                    "closed {} call(s) the fork point left without results, as not run: {}",
                    fork.closed_calls.len(),
                    fork.closed_calls.join(", ")
                ));
            }
        }
        _ => say(json!({"type": "fork", "session": {"id": fork.session_id,
            "parent_session": source, "forked_at": entry, "closed_calls": fork.closed_calls}})),
    }
    Ok(ExitCode::SUCCESS)
}

/// A new session from a damaged one's intact records (through keel-host):
/// what was kept and lost as text, else one JSON object.
async fn salvage(
    store: &JsonlStore,
    wanted: &str,
    format: DataFormat,
) -> Result<ExitCode, StartupError> {
    let report = sessions::salvage(store, wanted).await?;
    if format != DataFormat::Text {
        let lost: Vec<serde_json::Value> = report
            .lost
            .iter()
            .map(|span| {
                json!({"line": span.line, "offset": span.offset, "lines": span.lines,
                    "bytes": span.bytes, "damage_line": span.damage_line, "reason": span.reason})
            })
            .collect();
        say(json!({
            "type": "salvage",
            "source": {"id": report.source, "path": report.source_path},
            "session": {"id": report.session_id, "parent_session": report.source,
                "leaf": report.leaf, "leaf_on_active_branch": report.leaf_on_active_branch},
            "kept": {"entries": report.kept_entries, "records": report.kept_records,
                "groups": report.kept_groups, "later_groups": report.kept_later_groups},
            "lost": {"lines": report.lost_lines, "bytes": report.lost_bytes,
                "entries": report.lost_entries, "spans": lost},
        }));
        return Ok(ExitCode::SUCCESS);
    }
    say(format!(
        "salvaged session {} into new session {}",
        report.source, report.session_id
    ));
    say(format!(
        "kept {} entries ({} records in {} groups, {} of them after the damage)",
        report.kept_entries, report.kept_records, report.kept_groups, report.kept_later_groups
    ));
    if report.lost_anything() {
        say(format!(
            "lost {} lines ({}) holding {} readable entries:",
            report.lost_lines,
            human_size(report.lost_bytes),
            report.lost_entries
        ));
        for span in &report.lost {
            let extent = match span.lines {
                0 => format!("{} missing at the end", human_size(span.bytes)),
                1 => format!("1 line, {}", human_size(span.bytes)),
                lines => format!("{lines} lines, {}", human_size(span.bytes)),
            };
            say(format!(
                "  line {} (byte {}): {extent}; damage at line {}: {}",
                span.line,
                span.offset,
                span.damage_line,
                crate::escape::visible(&span.reason)
            ));
        }
    } else {
        say("lost nothing: the session had no damage");
    }
    match &report.leaf {
        Some(leaf) if report.leaf_on_active_branch => say(format!(
            "leaf {} (the last kept entry of the branch the session was on)",
            short_id(leaf)
        )),
        Some(leaf) => say(format!(
            "leaf {} (the latest kept entry: the branch the session was on is not known past the damage)",
            short_id(leaf)
        )),
        None => say("no entry was kept"),
    }
    say(format!(
        "the damaged file is left as it was: {}",
        crate::escape::visible(&report.source_path)
    ));
    say(format!(
        "continue with: keel run --session {} \"…\"",
        report.session_id
    ));
    Ok(ExitCode::SUCCESS)
}

/// Writes the session as one JSON document (keys in the order `json!` sorts
/// them), one entry at a time; to a file, through a temporary file renamed
/// into place, so a failed export leaves no half document.
async fn export(
    store: &JsonlStore,
    wanted: &str,
    output: Option<&std::path::Path>,
) -> Result<ExitCode, StartupError> {
    let reader = reader(store, wanted).await?;
    let failed = |error: std::io::Error| {
        let place = output.map_or("stdout".into(), |path| path.display().to_string());
        StartupError::new("export", format!("{place}: {error}"))
    };
    match output {
        Some(path) => {
            let dir = path
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            let mut file = tempfile::NamedTempFile::new_in(dir).map_err(failed)?;
            let mut sink = std::io::BufWriter::new(file.as_file_mut());
            write_document(&reader, &mut sink)?.map_err(failed)?;
            sink.flush().map_err(failed)?;
            drop(sink);
            file.persist(path).map_err(|error| failed(error.error))?;
        }
        None => to_stdout(|sink| write_document(&reader, sink))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The export document: a store error is the outer error, a write error the inner.
fn write_document(
    reader: &SessionReader,
    sink: &mut dyn Write,
) -> Result<std::io::Result<()>, StartupError> {
    let head = format!("{{\"created\":{},\"entries\":[", reader.created());
    if let Err(error) = sink.write_all(head.as_bytes()) {
        return Ok(Err(error));
    }
    for (position, entry) in reader.entries().enumerate() {
        let entry = serde_json::to_value(entry?)
            .map_err(|error| StartupError::new("export", error.to_string()))?;
        let separator: &[u8] = if position == 0 { b"" } else { b"," };
        let written = sink
            .write_all(separator)
            .and_then(|()| serde_json::to_writer(&mut *sink, &entry).map_err(std::io::Error::from));
        if let Err(error) = written {
            return Ok(Err(error));
        }
    }
    let tail = format!(
        "],\"id\":{},\"leaf\":{},\"parent_session\":{},\"workspace\":{}}}\n",
        json_text(Some(reader.id())),
        json_text(reader.leaf()),
        json_text(reader.parent_session()),
        json_text(reader.workspace()),
    );
    Ok(sink.write_all(tail.as_bytes()))
}

/// A string or absent string as JSON text (which cannot fail to encode).
fn json_text(value: Option<&str>) -> String {
    serde_json::to_string(&value).unwrap_or_else(|_| "null".into())
}

/// The session tree as text: `*` marks the active branch; a chain without
/// branch points stays at one indentation.
pub fn draw_tree(snapshot: &Snapshot) -> Vec<String> {
    let by_id: std::collections::HashMap<&str, usize> = snapshot
        .entries
        .iter()
        .enumerate()
        .map(|(position, entry)| (entry.id.as_str(), position))
        .collect();
    let parents: Vec<Option<Option<usize>>> = snapshot
        .entries
        .iter()
        .map(|entry| match entry.parent_id.as_deref() {
            None => Some(None),
            Some(parent) => by_id.get(parent).map(|&p| Some(p)),
        })
        .collect();
    let leaf = snapshot
        .leaf
        .as_deref()
        .and_then(|id| by_id.get(id).copied());
    let mut lines = Vec::new();
    let drawn = draw(
        &parents,
        leaf,
        |position| {
            let entry = &snapshot.entries[position];
            Ok::<_, std::convert::Infallible>(format!(
                "{} {}",
                short_id(&entry.id),
                describe(entry)
            ))
        },
        |line| lines.push(line),
    );
    match drawn {
        Ok(()) => lines,
        Err(never) => match never {},
    }
}

/// Draws a tree given each node's parent by position (`Some(None)` for a
/// root, `None` for a node whose parent is unknown, which is not drawn):
/// depth first, children in append order, `text` giving a node's line.
fn draw<E>(
    parents: &[Option<Option<usize>>],
    leaf: Option<usize>,
    mut text: impl FnMut(usize) -> Result<String, E>,
    mut emit: impl FnMut(String),
) -> Result<(), E> {
    let mut roots = Vec::new();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); parents.len()];
    for (position, parent) in parents.iter().enumerate() {
        match parent {
            Some(None) => roots.push(position),
            Some(Some(parent)) => {
                if let Some(kids) = children.get_mut(*parent) {
                    kids.push(position);
                }
            }
            None => {}
        }
    }
    let mut active = vec![false; parents.len()];
    let branch = leaf.and_then(|tip| {
        keel_session::path_from_root(tip, parents.len(), |position| {
            parents.get(position).copied().flatten()
        })
    });
    for position in branch.unwrap_or_default() {
        if let Some(mark) = active.get_mut(position) {
            *mark = true;
        }
    }
    // (node, prefix for its line, prefix for its children)
    let mut stack: Vec<(usize, String, String)> = Vec::new();
    push_children(&roots, String::new(), &mut stack);
    while let Some((position, line_prefix, child_prefix)) = stack.pop() {
        let mark = if active.get(position) == Some(&true) {
            '*'
        } else {
            ' '
        };
        let leaf_mark = if leaf == Some(position) {
            "  ← leaf"
        } else {
            ""
        };
        emit(format!(
            "{line_prefix}{mark} {}{leaf_mark}",
            text(position)?
        ));
        let kids = children.get(position).map_or(&[][..], Vec::as_slice);
        push_children(kids, child_prefix, &mut stack);
    }
    Ok(())
}

fn push_children(kids: &[usize], prefix: String, stack: &mut Vec<(usize, String, String)>) {
    if let [only] = kids {
        stack.push((*only, prefix.clone(), prefix));
        return;
    }
    for (position, kid) in kids.iter().enumerate().rev() {
        let last = position + 1 == kids.len();
        let line = format!("{prefix}{}", if last { "└─" } else { "├─" });
        let below = format!("{prefix}{}", if last { "  " } else { "│ " });
        stack.push((*kid, line, below));
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
            "{} result ({}): {}",
            result.tool_name,
            wire_name(&result.status),
            result.text()
        ),
        EntryPayload::Checkpoint { summary, .. } => format!("checkpoint: {summary}"),
        EntryPayload::PermissionDecision { decision } => format!(
            "permission: {} {} by {}",
            decision.tool_name,
            wire_name(&decision.resolution),
            wire_name(&decision.source)
        ),
        EntryPayload::PermissionRule { rule } => format!(
            "permission rule: {} {} always (from call {})",
            rule.tool_name,
            wire_name(&rule.resolution),
            rule.call_id
        ),
        EntryPayload::BranchSummary { summary, .. } => format!("branch summary: {summary}"),
        EntryPayload::Label { target_id, label } => {
            format!("label {}: {label}", short_id(target_id))
        }
        EntryPayload::Custom { custom_kind, .. } => format!("custom: {custom_kind}"),
        EntryPayload::WorkspaceSnapshot { snapshot } => {
            let left_out = match snapshot.excluded_count {
                0 => String::new(),
                count => format!(", {count} left out"),
            };
            format!(
                "workspace snapshot ({}): {} files, {} bytes ({} new){left_out}",
                wire_name(&snapshot.reason),
                snapshot.files,
                snapshot.bytes,
                snapshot.new_bytes
            )
        }
        // Kinds added later show their name until described here.
        other => other.kind().to_owned(),
    };
    one_line(&text, 90)
}

/// An enum value as the wire spells it (`session_rule`), not as Rust does.
fn wire_name(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
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

pub(crate) fn human_time(ms: u64) -> String {
    let now = keel_protocol::now_ms();
    let ago = now.saturating_sub(ms) / 1000;
    match ago {
        s if s < 60 => format!("{s} s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} days ago", s / 86_400),
    }
}
