//! The terminal view of a run: what a person watching `keel run` reads.
//!
//! Streamed text as it arrives; thinking dimmed, under its own mark and
//! set apart from the answer; each tool call as its tool and plain command
//! or path, its output live under it while it runs (see `live`), folded to
//! one line with its time when it ends; calls of a parallel batch labelled
//! `[1]`, `[2]`… on every line; steering and follow-ups shown when they
//! enter the conversation, between turns, and a queued message noted only
//! at a line boundary — never inside a streamed word; a closing line with
//! turns, tokens, cost and duration.
//!
//! Invariants: every piece of model or tool text passes through
//! [`visible`], so no control character reaches the terminal raw; messages
//! are shown as written (never case-changed); nothing here prints JSON.

mod describe;
mod live;
mod markdown;
mod patch;

use std::collections::VecDeque;
use std::io::Write;
use std::time::{Duration, Instant};

use keel_protocol::{
    BatchMode, DecisionSource, Message, PermissionResolution, ProviderEvent, QueueKind, RunEvent,
    RunEventKind, RunResult, RunState, RunTotals, ToolStatus,
};

pub use describe::call_title;
use live::{BlockLine, Call};

use crate::escape::{one_line, visible};
use crate::style::{self, Palette};

/// How often a running call's time is redrawn (or, without redrawing, how
/// long a silent call waits before the view says it is still running).
pub const TICK: Duration = Duration::from_secs(1);
const STILL_RUNNING: Duration = Duration::from_secs(10);
/// Output lines printed per call when the view cannot redraw.
const PRINTED_LINES: usize = 40;
/// Last lines of a failed call's result shown under it.
const FAILED_LINES: usize = 12;
/// Lines of an edit's diff shown under it.
const DIFF_LINES: usize = 40;
/// Lines of the end-of-run patch shown (binary parts never are).
const PATCH_LINES: usize = 200;

/// What is streaming on the current line.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Nothing,
    Text,
    Thinking,
}

/// The view's state between events.
pub struct View {
    palette: Palette,
    /// Redraw running calls in place (a terminal with colour).
    live: bool,
    width: usize,
    open: Open,
    calls: Vec<Call>,
    /// Rows of the live block now on screen.
    drawn: usize,
    /// The next label in the current batch, and how many calls it has.
    batch_position: usize,
    batch_size: usize,
    queued: [VecDeque<String>; 2],
    /// Lines waiting for a line boundary.
    deferred: Vec<String>,
    /// Whether the host prompts for permissions itself (then the view does
    /// not repeat the request).
    prompts: bool,
    /// The answer's Markdown state, and its line not yet complete (held
    /// back only when Markdown is rendered: a colour terminal).
    markdown: markdown::Markdown,
    pending: String,
    /// The run's workspace, if the host said (for binary files' sizes).
    root: Option<std::path::PathBuf>,
    /// The call each open permission request is for (request id → call id).
    requests: std::collections::HashMap<String, String>,
    buffer: String,
    /// Where the text goes instead of stdout (`keel chat`: above the line
    /// editor's prompt).
    sink: Option<Sink>,
}

/// Where a view's text goes instead of stdout.
pub type Sink = Box<dyn FnMut(&str)>;

impl View {
    /// A view on stdout, colouring (and redrawing) as `palette` allows.
    pub fn new(palette: Palette, prompts: bool) -> Self {
        let width = terminal_size::terminal_size_of(std::io::stdout())
            .map_or(100, |(width, _)| usize::from(width.0));
        Self {
            palette,
            live: palette.color,
            width: width.max(20),
            open: Open::Nothing,
            calls: Vec::new(),
            drawn: 0,
            batch_position: 0,
            batch_size: 0,
            queued: [VecDeque::new(), VecDeque::new()],
            deferred: Vec::new(),
            prompts,
            markdown: markdown::Markdown::default(),
            pending: String::new(),
            root: None,
            requests: std::collections::HashMap::new(),
            buffer: String::new(),
            sink: None,
        }
    }

    /// The run's workspace (see [`View::changes`]).
    pub fn set_workspace(&mut self, root: std::path::PathBuf) {
        self.root = Some(root);
    }

    /// A view whose text goes to `sink` rather than stdout, never redrawn
    /// in place (the line editor owns the bottom of the screen): `keel chat`.
    pub fn with_sink(palette: Palette, prompts: bool, sink: Sink) -> Self {
        let mut view = Self::new(palette, prompts);
        view.live = false;
        view.sink = Some(sink);
        view
    }

    /// Shows one event.
    pub fn event(&mut self, event: &RunEvent) {
        self.show(&event.kind);
        self.flush();
    }

    /// Redraws running calls (their time moves on), or says that a silent
    /// call is still running.
    pub fn tick(&mut self) {
        if self.calls.is_empty() {
            return;
        }
        if self.live {
            self.erase();
            self.draw();
        } else {
            let mut lines = Vec::new();
            for call in &mut self.calls {
                if call.last_said.elapsed() >= STILL_RUNNING {
                    call.last_said = Instant::now();
                    lines.push(format!(
                        "  ⋯ {} still running ({})",
                        visible(&call.name()),
                        describe::duration(call.elapsed())
                    ));
                }
            }
            for line in lines {
                let line = self.palette.paint(style::DIM, &line);
                self.line(&line);
            }
        }
        self.flush();
    }

    /// Clears the live block and ends an open line, before the host writes
    /// to the terminal itself (a permission prompt).
    pub fn suspend(&mut self) {
        self.erase();
        self.close_line();
        self.flush();
    }

    /// Prints a line of the host's own (a demo step), above the live block.
    pub fn note(&mut self, text: &str) {
        self.close_line();
        for line in text.lines() {
            self.line(&visible(line));
        }
        self.flush();
    }

    /// The closing line: how the run ended, its turns, tokens, cost and time.
    pub fn finish(&mut self, result: &RunResult, totals: &RunTotals) {
        self.erase();
        self.close_line();
        let cut = result
            .message
            .as_ref()
            .is_some_and(|message| message.stop_reason == keel_protocol::StopReason::Length);
        let (mark, style) = match result.state {
            RunState::Settled if cut => (
                "settled, the answer cut at the model's output limit".to_owned(),
                style::WARN,
            ),
            RunState::Settled => ("settled".to_owned(), style::GOOD),
            RunState::Cancelled => ("cancelled".to_owned(), style::WARN),
            _ => match &result.error {
                Some(error) => (
                    format!(
                        "failed ({}): {}",
                        error.code.as_str(),
                        visible(&error.message)
                    ),
                    style::BAD,
                ),
                None => ("failed".to_owned(), style::BAD),
            },
        };
        let mut parts = vec![
            format!("{} turn{}", totals.turns, plural(totals.turns as usize)),
            format!(
                "{} in / {} out tokens",
                describe::tokens(totals.input_tokens + totals.cache_read_tokens),
                describe::tokens(totals.output_tokens)
            ),
        ];
        parts.push(match totals.cost_usd {
            Some(usd) => describe::cost(usd),
            None => "cost unknown".to_owned(),
        });
        parts.push(describe::duration(Duration::from_millis(
            totals.duration_ms,
        )));
        if totals.denied_unanswered > 0 {
            parts.push(crate::output::unanswered_text(totals.denied_unanswered));
        }
        let line = format!(
            "── {} · {}",
            self.palette.paint(style, &mark),
            self.palette.paint(style::DIM, &parts.join(" · "))
        );
        self.line("");
        self.line(&line);
        self.flush();
    }

    /// The workspace's changes after the run: a line per file (what
    /// happened to it, lines added and removed, a binary file's size), then
    /// the text parts of the patch, at most [`PATCH_LINES`] lines of them.
    pub fn changes(&mut self, paths: &[String], patch: &str) {
        if paths.is_empty() {
            let line = self.palette.paint(style::DIM, "── no workspace changes");
            self.line(&line);
            self.flush();
            return;
        }
        let files = patch::files(patch);
        self.line(&format!(
            "── changed {} file{}",
            paths.len(),
            plural(paths.len())
        ));
        for path in paths {
            let line = match files.iter().find(|file| file.path == *path) {
                Some(file) => {
                    let what = match file.binary {
                        Some(bytes) => {
                            // `Binary files … differ` gives no size: the
                            // file's own (a link's, never its target's).
                            let size = Some(bytes).filter(|b| *b > 0).or_else(|| {
                                let root = self.root.as_ref()?;
                                // Only a file still inside the workspace: a
                                // directory on the way re-pointed elsewhere
                                // since is not followed out.
                                let file = root.join(path);
                                let parent = std::fs::canonicalize(file.parent()?).ok()?;
                                let name = file.file_name()?;
                                parent.starts_with(root).then_some(())?;
                                let meta = std::fs::symlink_metadata(parent.join(name)).ok()?;
                                Some(meta.len())
                            });
                            match size {
                                Some(bytes) => format!("binary, {}", describe::bytes(bytes)),
                                None => "binary".to_owned(),
                            }
                        }
                        None => format!(
                            "{} {}",
                            self.palette.paint(style::GOOD, &format!("+{}", file.added)),
                            self.palette
                                .paint(style::BAD, &format!("−{}", file.removed))
                        ),
                    };
                    format!("  {} {}  {what}", file.status, visible(path))
                }
                None => format!("  ? {}", visible(path)),
            };
            self.line(&line);
        }
        let text: Vec<&str> = files
            .iter()
            .filter(|file| file.binary.is_none())
            .flat_map(|file| file.lines.iter().map(String::as_str))
            .collect();
        if !text.is_empty() {
            self.diff_lines(&text.join("\n"), PATCH_LINES);
        }
        self.flush();
    }

    fn show(&mut self, kind: &RunEventKind) {
        self.time_waits(kind);
        match kind {
            RunEventKind::RunStarted {
                provider,
                model,
                mode,
                instructions,
            } => {
                let line = format!("keel · {provider} · {model} · mode {}", mode.as_str());
                let line = self.palette.paint(style::DIM, &visible(&line));
                self.line(&line);
                if !instructions.is_empty() {
                    let paths: Vec<&str> = instructions.iter().map(|f| f.path.as_str()).collect();
                    let line = format!("instructions: {}", paths.join(", "));
                    let line = self.palette.paint(style::DIM, &visible(&line));
                    self.line(&line);
                }
            }
            RunEventKind::CompactionSucceeded {
                tokens_before,
                tokens_after,
                covered_entries,
                ..
            } => {
                self.close_line();
                let line = format!(
                    "context compacted: {covered_entries} entries summarised, ~{tokens_before} → ~{tokens_after} tokens"
                );
                let line = self.palette.paint(style::DIM, &line);
                self.line(&line);
            }
            RunEventKind::CompactionFailed { error, .. } => {
                self.close_line();
                self.warn(&format!("! compaction failed: {}", visible(&error.message)));
            }
            RunEventKind::Warning { message, .. } => {
                self.warn(&format!("! {}", visible(message)));
            }
            RunEventKind::HookBlocked {
                extension,
                point,
                message,
                ..
            } => {
                self.close_line();
                self.warn(&format!(
                    "! extension {} blocked at {}: {}",
                    one_line(extension),
                    point.as_str(),
                    one_line(message)
                ));
            }
            RunEventKind::HookFailed {
                extension,
                point,
                reason,
                ..
            } => {
                self.close_line();
                self.warn(&format!(
                    "! extension {}'s hook at {} failed: {}",
                    one_line(extension),
                    point.as_str(),
                    one_line(reason)
                ));
            }
            RunEventKind::HookOutcomeRejected {
                extension,
                point,
                reason,
                ..
            } => {
                self.close_line();
                self.warn(&format!(
                    "! extension {}'s answer at {} was rejected: {}",
                    one_line(extension),
                    point.as_str(),
                    one_line(reason)
                ));
            }
            RunEventKind::SessionRepaired { reason, .. } => {
                self.warn(&format!("! the session was repaired: {}", visible(reason)));
            }
            RunEventKind::MessageUpdate { delta } => self.delta(delta),
            RunEventKind::MessageEnd {
                message: Message::Assistant(message),
            } => {
                self.close_line();
                self.markdown = markdown::Markdown::default();
                self.batch_position = 0;
                self.batch_size = message.tool_calls().count();
            }
            RunEventKind::ToolExecutionStart {
                call_id,
                tool_name,
                arguments,
                batch_mode,
            } => self.start_call(call_id, tool_name, arguments, *batch_mode),
            RunEventKind::ToolExecutionUpdate { call_id, progress } => {
                self.call_output(call_id, &progress.data);
            }
            RunEventKind::ToolExecutionEnd { result } => {
                let status = result.status;
                let text = result.text();
                let diff = result
                    .details
                    .as_ref()
                    .and_then(|details| details.get("diff"))
                    .and_then(|diff| diff.as_str());
                self.end_call(&result.call_id, &result.tool_name, status, &text, diff);
            }
            RunEventKind::PermissionRequested {
                tool_name,
                arguments,
                reason,
                ..
            } if !self.prompts => {
                let title = call_title(tool_name, arguments);
                let line = format!("? {} — {}", visible(&title), visible(reason));
                let line = self.palette.paint(style::WARN, &line);
                self.above(&line);
            }
            RunEventKind::PermissionResolved {
                resolution, source, ..
            } if !self.prompts || *source != DecisionSource::Host => {
                let line = resolved(*resolution, *source);
                let line = self.palette.paint(style::DIM, &line);
                self.above(&line);
            }
            RunEventKind::ProviderRetry {
                attempt,
                max_attempts,
                delay_ms,
                error,
            } => {
                // Counted as the run's failure counts them: attempts, out
                // of all allowed ("… (after 4 attempts)").
                let line = format!(
                    "↻ attempt {attempt} of {max_attempts} failed: {}; retrying in {}",
                    visible(&error.message),
                    describe::duration(Duration::from_millis(*delay_ms))
                );
                let line = self.palette.paint(style::WARN, &line);
                self.above(&line);
            }
            RunEventKind::MessageQueued { queue, text } => {
                self.queued[slot(*queue)].push_back(text.clone());
                let line = format!("+ queued {}: {}", queue_name(*queue), visible(text));
                self.deferred.push(self.palette.paint(style::DIM, &line));
                if self.open == Open::Nothing {
                    self.release_deferred();
                }
            }
            RunEventKind::MessageInjected { queue, .. } => {
                let text = self.queued[slot(*queue)].pop_front().unwrap_or_default();
                let line = format!("› you ({}): {}", queue_name(*queue), visible(&text));
                let line = self.palette.paint(style::USER, &line);
                self.above(&line);
            }
            RunEventKind::QueueCleared { queue, .. } => {
                let kinds = match queue {
                    Some(queue) => vec![*queue],
                    None => vec![QueueKind::Steer, QueueKind::FollowUp],
                };
                for queue in kinds {
                    for text in self.queued[slot(queue)].drain(..) {
                        let line =
                            format!("- taken back ({}): {}", queue_name(queue), visible(&text));
                        self.deferred.push(self.palette.paint(style::DIM, &line));
                    }
                }
                if self.open == Open::Nothing {
                    self.release_deferred();
                }
            }
            RunEventKind::MessageDropped { queue, text, .. } => {
                let line = format!("- not sent ({}): {}", queue_name(*queue), visible(text));
                let line = self.palette.paint(style::DIM, &line);
                self.above(&line);
            }
            _ => {}
        }
    }

    /// Keeps the time a call waits for a permission answer out of its time.
    fn time_waits(&mut self, kind: &RunEventKind) {
        let now = Instant::now();
        match kind {
            RunEventKind::PermissionRequested {
                request_id,
                call_id,
                ..
            } => {
                if let Some(call) = self.calls.iter_mut().find(|call| call.id == *call_id) {
                    call.wait_from(now);
                }
                self.requests.insert(request_id.clone(), call_id.clone());
            }
            RunEventKind::PermissionResolved { request_id, .. } => {
                if let Some(call_id) = self.requests.remove(request_id)
                    && let Some(call) = self.calls.iter_mut().find(|call| call.id == call_id)
                {
                    call.wait_until(now);
                }
            }
            _ => {}
        }
    }

    fn delta(&mut self, delta: &ProviderEvent) {
        match delta {
            ProviderEvent::ThinkingDelta { delta, .. } => {
                if self.open != Open::Thinking {
                    self.close_line();
                    self.erase();
                    let mark = self.palette.paint(style::DIM, "┆ thinking");
                    self.line(&mark);
                    self.open = Open::Thinking;
                    self.buffer.push_str(&self.palette.paint(style::DIM, "┆ "));
                }
                let shown = visible(delta).replace('\n', "\n┆ ");
                self.buffer
                    .push_str(&self.palette.paint(style::DIM, &shown));
            }
            ProviderEvent::TextDelta { delta, .. } => {
                if self.open == Open::Thinking {
                    self.close_line();
                    self.line("");
                }
                if self.open == Open::Nothing {
                    self.erase();
                }
                self.open = Open::Text;
                if !self.palette.color {
                    self.buffer.push_str(&visible(delta));
                    return;
                }
                self.pending.push_str(delta);
                while let Some(end) = self.pending.find('\n') {
                    let line: String = self.pending.drain(..=end).collect();
                    let shown = self.markdown.line(&visible(&line[..end]), self.palette);
                    self.buffer.push_str(&shown);
                    self.buffer.push('\n');
                }
            }
            _ => {}
        }
    }

    fn start_call(&mut self, id: &str, tool: &str, arguments: &serde_json::Value, mode: BatchMode) {
        self.close_line();
        let label = (mode == BatchMode::Parallel && self.batch_size > 1).then(|| {
            self.batch_position += 1;
            format!("[{}]", self.batch_position)
        });
        let call = Call::new(
            id.to_owned(),
            label,
            visible(&call_title(tool, arguments)).into(),
        );
        if self.live {
            self.erase();
            self.calls.push(call);
            self.draw();
        } else {
            let line = format!("→ {}", self.palette.paint(style::TOOL, &call.name()));
            self.line(&line);
            self.calls.push(call);
        }
    }

    fn call_output(&mut self, id: &str, data: &str) {
        let Some(position) = self.calls.iter().position(|call| call.id == id) else {
            return;
        };
        let complete = self.calls[position].take_output(data);
        if self.live {
            self.erase();
            self.draw();
            return;
        }
        let call = &mut self.calls[position];
        call.last_said = Instant::now();
        let prefix = call
            .label
            .clone()
            .map(|l| format!("{l} "))
            .unwrap_or_default();
        let first = call.lines - complete.len();
        let mut lines = Vec::new();
        for (index, line) in complete.iter().enumerate() {
            match first + index {
                n if n < PRINTED_LINES => lines.push(format!("  {prefix}│ {}", visible(line))),
                n if n == PRINTED_LINES => lines.push(format!("  {prefix}│ …")),
                _ => {}
            }
        }
        for line in lines {
            let line = self.palette.paint(style::DIM, &line);
            self.line(&line);
        }
    }

    /// Folds a call into its closing line; under it, the result's last line
    /// — a failure's last [`FAILED_LINES`] lines, an edit's diff (at most
    /// [`DIFF_LINES`] lines, coloured).
    fn end_call(
        &mut self,
        id: &str,
        tool: &str,
        status: ToolStatus,
        text: &str,
        diff: Option<&str>,
    ) {
        self.erase();
        let call = match self.calls.iter().position(|call| call.id == id) {
            Some(position) => self.calls.remove(position),
            None => Call::new(id.to_owned(), None, visible(tool).into_owned()),
        };
        let (mark, style) = match status {
            ToolStatus::Success => ("✓", style::GOOD),
            ToolStatus::Error => ("✗", style::BAD),
            ToolStatus::Cancelled => ("⊘", style::WARN),
        };
        let mut details = vec![describe::duration(call.elapsed())];
        if call.lines > 0 {
            details.push(format!(
                "{} line{} of output",
                call.lines,
                plural(call.lines)
            ));
        }
        let line = format!(
            "{} {} {}",
            self.palette.paint(style, mark),
            self.palette.paint(style::TOOL, &call.name()),
            self.palette
                .paint(style::DIM, &format!("· {}", details.join(" · ")))
        );
        self.line(&line);
        let room = self.width.saturating_sub(8);
        let shown_lines = if status == ToolStatus::Success {
            1
        } else {
            FAILED_LINES
        };
        let lines: Vec<&str> = text.trim_end().lines().collect();
        let tail = &lines[lines.len().saturating_sub(shown_lines)..];
        let tail_style = if status == ToolStatus::Success {
            style::DIM
        } else {
            style
        };
        for (index, last) in tail.iter().enumerate() {
            if tail.len() == 1 && last.trim().is_empty() {
                break;
            }
            let shown = describe::clip(&visible(last.trim_end()), room);
            let mark = if index + 1 == tail.len() {
                "└"
            } else {
                "│"
            };
            let line = self.palette.paint(tail_style, &format!("  {mark} {shown}"));
            self.line(&line);
        }
        if let (ToolStatus::Success, Some(diff)) = (status, diff) {
            self.diff_lines(diff, DIFF_LINES);
        }
        self.draw();
    }

    /// A unified diff's lines, coloured by what they do, at most `limit`
    /// of them (then how many more there are).
    fn diff_lines(&mut self, diff: &str, limit: usize) {
        let room = self.width.saturating_sub(6);
        let lines: Vec<&str> = diff
            .lines()
            .filter(|line| !line.starts_with("+++") && !line.starts_with("---"))
            .collect();
        for line in lines.iter().take(limit) {
            let style = match line.chars().next() {
                Some('+') => style::GOOD,
                Some('-') => style::BAD,
                _ => style::DIM,
            };
            let shown = describe::clip(&visible(line), room);
            let line = self.palette.paint(style, &format!("    {shown}"));
            self.line(&line);
        }
        if lines.len() > limit {
            let more = lines.len() - limit;
            let line = format!("    … {more} more line{}", plural(more));
            let line = self.palette.paint(style::DIM, &line);
            self.line(&line);
        }
    }

    /// Prints a line above the live block, at a line boundary.
    fn above(&mut self, line: &str) {
        self.erase();
        self.close_line();
        self.line(line);
        self.draw();
    }

    /// Ends a streamed line, then prints what waited for a boundary.
    fn close_line(&mut self) {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            let shown = self.markdown.line(&visible(&line), self.palette);
            self.buffer.push_str(&shown);
        }
        if self.open != Open::Nothing {
            self.buffer.push('\n');
            self.open = Open::Nothing;
        }
        self.release_deferred();
    }

    fn release_deferred(&mut self) {
        for line in std::mem::take(&mut self.deferred) {
            self.buffer.push_str(&line);
            self.buffer.push('\n');
        }
    }

    /// A line in the warning style; `text` is already made visible.
    fn warn(&mut self, text: &str) {
        let line = self.palette.paint(style::WARN, text);
        self.line(&line);
    }

    fn line(&mut self, text: &str) {
        self.buffer.push_str(text);
        self.buffer.push('\n');
    }

    /// Removes the live block from the screen.
    fn erase(&mut self) {
        if self.drawn > 0 {
            self.buffer
                .push_str(&format!("\u{1b}[{}A\r\u{1b}[J", self.drawn));
            self.drawn = 0;
        }
    }

    /// Draws the live block (running calls) below everything else.
    fn draw(&mut self) {
        if !self.live || self.calls.is_empty() || self.open != Open::Nothing {
            return;
        }
        let lines = live::block(&self.calls, self.width);
        self.drawn = lines.len();
        for line in lines {
            let text = match line {
                BlockLine::Title { name, elapsed } => format!(
                    "{} {} {}",
                    self.palette.paint(style::WARN, "…"),
                    self.palette.paint(style::TOOL, &name),
                    self.palette.paint(style::DIM, &format!("· {elapsed}"))
                ),
                BlockLine::Output(text) => self.palette.paint(style::DIM, &format!("  │ {text}")),
            };
            self.line(&text);
        }
    }

    fn flush(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        if let Some(sink) = &mut self.sink {
            sink(&self.buffer);
            self.buffer.clear();
            return;
        }
        let mut stdout = std::io::stdout().lock();
        // A closed stdout (e.g. `| head`) must not abort the run.
        let _ = stdout.write_all(self.buffer.as_bytes());
        let _ = stdout.flush();
        self.buffer.clear();
    }
}

fn resolved(resolution: PermissionResolution, source: DecisionSource) -> String {
    let what = match resolution {
        PermissionResolution::Approved => "allowed",
        PermissionResolution::Denied => "denied",
    };
    let by = match source {
        DecisionSource::Host => "by the host",
        DecisionSource::Policy => "by the policy",
        DecisionSource::Kernel => "by the kernel (nobody could answer)",
        DecisionSource::SessionRule => "by a session rule",
        _ => "",
    };
    format!("  {what} {by}")
}

fn slot(queue: QueueKind) -> usize {
    match queue {
        QueueKind::Steer => 0,
        QueueKind::FollowUp => 1,
    }
}

fn queue_name(queue: QueueKind) -> &'static str {
    match queue {
        QueueKind::Steer => "steering",
        QueueKind::FollowUp => "follow-up",
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}
