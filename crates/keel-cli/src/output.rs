//! Prints a run: JSON for programs, the terminal view for people, or only
//! the final message.
//!
//! `--output-format` picks the form: `stream-json` prints every event as one
//! JSON line as it happens, then a `result` line (with the run's totals), a
//! `workspace_changes` line and a `session` line — every line tagged by
//! `type` (the events' types, and `keel_protocol::HostLine`'s); `json`
//! prints one `result` object holding all of that when the run ends; `text`
//! is the view (`crate::view`), plain when not a terminal; `auto` is the
//! view on a terminal and otherwise only the final message, as `-q` prints
//! it (warnings and errors as text on stderr). `-o FILE` also writes the
//! final message to FILE. A host's own steps (a demo's) are `note`s: a
//! typed JSON line, or a plain line in the view — never JSON in the view.

use std::cell::RefCell;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use keel_protocol::{
    HostLine, Message, ResultLine, RunEvent, RunEventKind, RunResult, RunTotals,
    WorkspaceChangesLine,
};
use keel_tools::changes::WorkspaceChanges;
use serde_json::Value;

use crate::args::{OutputArgs, OutputFormat};
use crate::escape::visible;
use crate::startup::StartupError;
use crate::style::{self, Palette};
use crate::view::View;

/// Where and how a run is printed.
pub struct Output {
    state: RefCell<State>,
}

enum Form {
    StreamJson,
    Json,
    View(Box<View>),
    Quiet,
}

struct State {
    form: Form,
    last_message: Option<PathBuf>,
    totals: RunTotals,
    started: Instant,
}

impl Output {
    /// The output `args` ask for; `prompts` says whether the host asks its
    /// user for permissions on the terminal itself.
    pub fn new(args: &OutputArgs, prompts: bool) -> Self {
        let format = match args.output_format {
            OutputFormat::Auto if std::io::stdout().is_terminal() => OutputFormat::Text,
            other => other,
        };
        let form = match (args.quiet, format) {
            (true, _) | (false, OutputFormat::Auto) => Form::Quiet,
            (false, OutputFormat::Json) => Form::Json,
            (false, OutputFormat::Text) => Form::View(Box::new(View::new(
                Palette::for_stream(style::choice(), false),
                prompts,
            ))),
            _ => Form::StreamJson,
        };
        Self {
            state: RefCell::new(State {
                form,
                last_message: args.output_last_message.clone(),
                totals: RunTotals::default(),
                started: Instant::now(),
            }),
        }
    }

    /// The view, its text sent to `sink` (`keel chat`); `prompts`: the
    /// host asks for permissions itself.
    pub fn view_to(sink: crate::view::Sink, prompts: bool) -> Self {
        let palette = Palette::for_stream(style::choice(), false);
        Self {
            state: RefCell::new(State {
                form: Form::View(Box::new(View::with_sink(palette, prompts, sink))),
                last_message: None,
                totals: RunTotals::default(),
                started: Instant::now(),
            }),
        }
    }

    /// The current (or last) run's totals so far.
    pub fn totals(&self) -> RunTotals {
        self.state.borrow().totals.clone()
    }

    /// Whether the view wants [`Output::tick`] called while a call runs.
    pub fn wants_ticks(&self) -> bool {
        matches!(self.state.borrow().form, Form::View(_))
    }

    /// Prints one event (and counts its turns, tokens and cost).
    pub fn event(&self, event: &RunEvent) {
        let mut state = self.state.borrow_mut();
        state.count(event);
        match &mut state.form {
            Form::StreamJson => print_json(event),
            Form::View(view) => view.event(event),
            Form::Json | Form::Quiet => {}
        }
    }

    /// Counts a call denied because nobody answered its permission request.
    pub fn unanswered(&self) {
        let mut state = self.state.borrow_mut();
        state.totals.denied_unanswered = state.totals.denied_unanswered.saturating_add(1);
    }

    /// Lets the view redraw running calls.
    pub fn tick(&self) {
        if let Form::View(view) = &mut self.state.borrow_mut().form {
            view.tick();
        }
    }

    /// Clears the view's live lines before the host writes to the terminal.
    pub fn suspend(&self) {
        if let Form::View(view) = &mut self.state.borrow_mut().form {
            view.suspend();
        }
    }

    /// A step of the host's own: `{"type": kind, …fields}` as JSON, the
    /// `human` line in the view, nothing with `-q`.
    pub fn note(&self, kind: &str, fields: Value, human: impl FnOnce() -> String) {
        match &mut self.state.borrow_mut().form {
            Form::StreamJson | Form::Json => {
                let mut line = serde_json::Map::new();
                line.insert("type".into(), Value::from(kind));
                match fields {
                    Value::Object(fields) => line.extend(fields),
                    other => {
                        line.insert("value".into(), other);
                    }
                }
                print_json(&line);
            }
            Form::View(view) => view.note(&human()),
            Form::Quiet => {}
        }
    }

    /// The run's workspace, where the view looks up the size of a binary
    /// file the patch does not give.
    pub fn set_workspace(&self, root: std::path::PathBuf) {
        if let Form::View(view) = &mut self.state.borrow_mut().form {
            view.set_workspace(root);
        }
    }

    /// Prints the run's end: the result with its totals, the workspace's
    /// changes and the session (each when known); writes `-o`'s file.
    pub fn finish(
        &self,
        result: &RunResult,
        changes: Option<&WorkspaceChanges>,
        session: Option<crate::host::Stored>,
    ) -> Result<(), StartupError> {
        let (session, short_id) = match session {
            Some(stored) => (Some(stored.line), Some(stored.short_id)),
            None => (None, None),
        };
        let mut state = self.state.borrow_mut();
        state.totals.duration_ms =
            u64::try_from(state.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let final_text = result
            .message
            .as_ref()
            .map(|message| message.text())
            .unwrap_or_default();
        let changes = changes.map(|changes| {
            let mut workspace_changes_line = WorkspaceChangesLine::default();
            workspace_changes_line.changed_paths = changes.changed_paths.clone();
            workspace_changes_line.patch = changes.patch.clone();
            workspace_changes_line.git_code = changes.git_code.clone();
            workspace_changes_line
        });
        let totals = state.totals.clone();
        match &mut state.form {
            Form::StreamJson => {
                print_json(&HostLine::Result(Box::new({
                    let mut result_line = ResultLine::new(result.clone(), totals);
                    result_line.workspace_changes = None;
                    result_line.session = None;
                    result_line
                })));
                if let Some(changes) = changes {
                    print_json(&HostLine::WorkspaceChanges(changes));
                }
                if let Some(session) = session {
                    print_json(&HostLine::Session(session));
                }
            }
            Form::Json => print_json(&HostLine::Result(Box::new({
                let mut result_line = ResultLine::new(result.clone(), totals);
                result_line.workspace_changes = changes;
                result_line.session = session;
                result_line
            }))),
            Form::View(view) => {
                view.finish(result, &totals);
                if let Some(changes) = changes {
                    view.changes(&changes.changed_paths, &changes.patch);
                }
                if let (Some(session), Some(short_id)) = (session, short_id) {
                    view.note(&format!("── session {short_id} ({})", session.path));
                }
            }
            Form::Quiet => {
                if !final_text.is_empty() {
                    say(final_text.trim_end());
                }
                if result
                    .message
                    .as_ref()
                    .is_some_and(|message| message.stop_reason == keel_protocol::StopReason::Length)
                {
                    eprintln!("keel: the answer was cut at the model's output limit");
                }
                if totals.denied_unanswered > 0 {
                    eprintln!("keel: {}", unanswered_text(totals.denied_unanswered));
                }
                if let Some(error) = &result.error {
                    eprintln!(
                        "keel: the run failed ({}): {}",
                        error.code.as_str(),
                        visible(&error.message)
                    );
                } else if result.state == keel_protocol::RunState::Cancelled {
                    eprintln!("keel: the run was cancelled");
                }
            }
        }
        if let Some(path) = &state.last_message {
            std::fs::write(path, &final_text).map_err(|error| {
                StartupError::new(
                    "output_last_message",
                    format!(
                        "cannot write the final message to {}: {error}",
                        path.display()
                    ),
                )
            })?;
        }
        Ok(())
    }
}

/// "2 calls denied: nobody answered their permission requests".
pub fn unanswered_text(count: u32) -> String {
    match count {
        1 => "1 call denied: nobody answered its permission request".to_owned(),
        _ => format!("{count} calls denied: nobody answered their permission requests"),
    }
}

impl State {
    /// Adds an event to the run's totals (a new run starts them afresh).
    fn count(&mut self, event: &RunEvent) {
        match &event.kind {
            RunEventKind::RunStarted { .. } => {
                self.totals = {
                    let mut run_totals = RunTotals::default();
                    run_totals.cost_usd = Some(0.0);
                    run_totals
                };
                self.started = Instant::now();
            }
            RunEventKind::TurnStart { .. } => self.totals.turns += 1,
            RunEventKind::MessageEnd {
                message: Message::Assistant(message),
            } => {
                let usage = &message.usage;
                let totals = &mut self.totals;
                totals.input_tokens += usage.input_tokens;
                totals.output_tokens += usage.output_tokens;
                totals.cache_read_tokens += usage.cache_read_tokens;
                totals.cache_write_tokens += usage.cache_write_tokens;
                totals.cost_usd = totals.cost_usd.and_then(|sum| Some(sum + usage.cost_usd?));
            }
            _ => {}
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

/// Serialises straight to stdout as one line (5x cheaper than going
/// through a `Value`); a closed stdout (e.g. `| head`) must not abort the run.
pub fn print_json(value: &impl serde::Serialize) {
    let mut stdout = std::io::stdout().lock();
    if serde_json::to_writer(&mut stdout, value).is_ok() {
        let _ = writeln!(stdout);
    }
    let _ = stdout.flush();
}
