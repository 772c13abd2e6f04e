//! Prints run events: JSON Lines for programs, a readable view for people.
//!
//! The JSON form is the wire format: one event object per line, then one
//! `{"result": …}` line. The human view is chosen only when stdout is a
//! terminal and never parsed by anything; every piece of model or tool text
//! in it passes through [`visible`], so no control character reaches the
//! terminal raw (see `escape`).

use std::io::{IsTerminal, Write};

use keel_protocol::{
    ContentBlock, Message, ProviderEvent, RunEvent, RunEventKind, RunResult, ToolStatus,
};
use serde_json::json;

use crate::escape::visible;

/// Where and how events are printed.
pub enum Output {
    /// JSON Lines on stdout.
    Json,
    /// A human view on a terminal.
    Human,
}

impl Output {
    /// JSON Lines unless stdout is a terminal.
    pub fn detect() -> Self {
        if std::io::stdout().is_terminal() {
            Self::Human
        } else {
            Self::Json
        }
    }

    /// Prints one event.
    pub fn event(&self, event: &RunEvent) {
        match self {
            Self::Json => print_line(event),
            Self::Human => print_human(event),
        }
    }

    /// Prints the final result.
    pub fn result(&self, result: &RunResult) {
        match self {
            Self::Json => print_json(&json!({ "result": result })),
            Self::Human => {
                let mut line = format!("\n── run {:?}", result.state);
                if let Some(error) = &result.error {
                    line.push_str(&format!(": {} ({})", error.message, error.code));
                }
                say(line.to_lowercase());
            }
        }
    }
}

impl Output {
    /// Prints the workspace's changes since the run started.
    pub fn workspace(&self, changes: &keel_tools::changes::WorkspaceChanges) {
        match self {
            Self::Json => print_json(&json!({"workspace": changes})),
            Self::Human if changes.is_empty() => say("── no workspace changes"),
            Self::Human => {
                say(format!("── changed: {}", changes.changed_paths.join(", ")));
                say(changes.patch.trim_end());
            }
        }
    }

    /// Prints where the run's session is stored.
    pub fn session(&self, id: &str, path: &std::path::Path) {
        match self {
            Self::Json => print_json(&json!({"session": {"id": id, "path": path}})),
            Self::Human => say(format!("── session {id} ({})", path.display())),
        }
    }
}

/// Prints one line on stdout, control characters escaped; a closed stdout
/// (e.g. `| head`) is not an error.
pub fn say(line: impl std::fmt::Display) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", visible(&line.to_string()));
    let _ = stdout.flush();
}

/// Serialises straight to stdout (5x cheaper than going through a `Value`).
fn print_line(event: &RunEvent) {
    let mut stdout = std::io::stdout().lock();
    // A closed stdout (e.g. `| head`) must not abort the run.
    if serde_json::to_writer(&mut stdout, event).is_ok() {
        let _ = writeln!(stdout);
    }
    let _ = stdout.flush();
}

fn print_json(value: &serde_json::Value) {
    let mut stdout = std::io::stdout().lock();
    // A closed stdout (e.g. `| head`) must not abort the run.
    let _ = writeln!(stdout, "{value}");
    let _ = stdout.flush();
}

fn print_human(event: &RunEvent) {
    let mut out = std::io::stdout().lock();
    let _ = write_human(&mut out, event);
    let _ = out.flush();
}

/// Writes the human view of one event; text from the model or a tool is
/// escaped, Keel's own styling is not.
fn write_human(out: &mut impl Write, event: &RunEvent) -> std::io::Result<()> {
    match &event.kind {
        RunEventKind::MessageUpdate {
            delta: ProviderEvent::TextDelta { delta, .. },
        } => write!(out, "{}", visible(delta)),
        RunEventKind::MessageUpdate {
            delta: ProviderEvent::ThinkingDelta { delta, .. },
        } => write!(out, "\x1b[2m{}\x1b[0m", visible(delta)),
        RunEventKind::MessageEnd {
            message: Message::Assistant(message),
        } => {
            let text = message
                .content
                .iter()
                .any(|block| matches!(block, ContentBlock::Text { .. }));
            if text { writeln!(out) } else { Ok(()) }
        }
        RunEventKind::ToolExecutionStart {
            tool_name,
            arguments,
            ..
        } => {
            let shown = short(&arguments.to_string(), 120);
            writeln!(out, "→ {} {}", visible(tool_name), visible(&shown))
        }
        RunEventKind::ToolExecutionEnd { result } => {
            let mark = match result.status {
                ToolStatus::Success => "✓",
                ToolStatus::Error => "✗",
                ToolStatus::Cancelled => "⊘",
            };
            let shown = short(&result.text(), 200);
            writeln!(
                out,
                "{mark} {} {}",
                visible(&result.tool_name),
                visible(&shown)
            )
        }
        RunEventKind::PermissionRequested {
            tool_name, reason, ..
        } => {
            writeln!(
                out,
                "? permission for {}: {}",
                visible(tool_name),
                visible(reason)
            )
        }
        RunEventKind::PermissionResolved {
            resolution, source, ..
        } => {
            writeln!(out, "  {resolution:?} by {source:?}")
        }
        RunEventKind::ProviderRetry {
            attempt,
            max_attempts,
            delay_ms,
            error,
        } => writeln!(
            out,
            "↻ retry {attempt}/{max_attempts} in {delay_ms} ms: {}",
            visible(&error.message)
        ),
        RunEventKind::MessageQueued { queue, text } => {
            writeln!(out, "+ queued ({queue:?}): {}", visible(text))
        }
        RunEventKind::MessageDropped { text, .. } => {
            writeln!(out, "- dropped: {}", visible(text))
        }
        RunEventKind::Warning { message, .. } => {
            writeln!(out, "! warning: {}", visible(message))
        }
        _ => Ok(()),
    }
}

fn short(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None if line.len() < text.len() => format!("{line} …"),
        None => line.to_owned(),
    }
}
