//! `keel replay SESSION [--live-tools] [--json]`: a recorded session driven
//! again through the kernel by keel-host's `replay`, and compared.
//!
//! Text output says "identical" or shows the first divergence (its
//! position, the recorded entry, the tool call it concerns, where inside
//! the entry the two differ, and both sides); `--json` (or
//! `--output-format json`) prints one object. Exit codes: 0 identical, 1 a
//! divergence, 2 the replay could not be made (unknown or unreadable
//! session, a kernel that cannot be assembled, …).

use std::process::ExitCode;
use std::sync::Arc;

use keel_host::replay::{ReplayOptions, ReplayReport, replay};
use keel_session::SessionStore;
use serde_json::{Value, json};

use crate::args::{DataFormat, ReplayArgs};
use crate::output::say;
use crate::session_cmd::{open_store, resolve_session};
use crate::startup::StartupError;

/// `keel replay`.
pub async fn run(args: ReplayArgs) -> Result<ExitCode, StartupError> {
    let store = open_store(&args.store)?;
    let id = resolve_session(&store, &args.session).await?;
    let store: Arc<dyn SessionStore> = Arc::new(store);
    let mut options = ReplayOptions::default();
    options.live_tools = args.live_tools;
    let report = replay(&store, &id, &options)
        .await
        .map_err(|error| StartupError::new(error.code(), error.to_string()))?;
    let json = args.json || args.format.data() != DataFormat::Text;
    if json {
        say(document(&report));
    } else {
        text(&report);
    }
    Ok(if report.divergence.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The report as one JSON object.
fn document(report: &ReplayReport) -> Value {
    json!({
        "type": "replay",
        "session_id": report.session_id,
        "live_tools": report.live_tools,
        "identical": report.divergence.is_none(),
        "compared_entries": report.compared,
        "runs": report.runs.iter().map(|run| json!({
            "state": run.state,
            "error": run.error,
            "patch": run.patch,
        })).collect::<Vec<_>>(),
        "divergence": report.divergence.as_ref().map(keel_host::replay::Divergence::to_json),
        "tool_notes": report.tool_notes,
    })
}

/// The report as readable lines.
fn text(report: &ReplayReport) {
    let tools = if report.live_tools {
        "tools run again"
    } else {
        "tool results served from the record"
    };
    let runs = report.runs.len();
    match &report.divergence {
        None => say(format!(
            "session {}: replay identical ({runs} run(s), {} entries compared, {tools})",
            report.session_id, report.compared
        )),
        Some(divergence) => {
            let entry = divergence.recorded_entry_id.as_deref().map_or_else(
                || "past the recording's end".to_owned(),
                |id| format!("recorded entry {id}"),
            );
            let call = divergence
                .call
                .as_ref()
                .map(|(id, tool)| format!(", tool call {id} ({tool})"))
                .unwrap_or_default();
            let at = if divergence.pointer.is_empty() {
                String::new()
            } else {
                format!(", at {}", divergence.pointer)
            };
            say(format!(
                "session {}: replay diverged at entry {} of {} ({entry}{call}{at}; {tools})",
                report.session_id, divergence.position, report.compared
            ));
            let side = |value: &Option<Value>| {
                value
                    .as_ref()
                    .map_or_else(|| "(nothing)".to_owned(), Value::to_string)
            };
            say(format!("  recorded: {}", side(&divergence.recorded)));
            say(format!("  replayed: {}", side(&divergence.replayed)));
        }
    }
    for (index, run) in report.runs.iter().enumerate() {
        if let Some(error) = &run.error {
            say(format!("  replayed run {}: {error}", index + 1));
        }
    }
    for note in &report.tool_notes {
        say(format!("  note: {note}"));
    }
}
