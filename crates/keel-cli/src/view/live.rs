//! The calls that are running, and the block of lines that shows them.
//!
//! Each running call keeps the last few lines of its streamed output. On a
//! terminal with colour, the view draws them as a block under everything
//! else — a title with the elapsed time, then the trailing lines — and
//! redraws the block in place (cursor up, clear to the end of the screen)
//! when output arrives or a second passes; when the call ends the block
//! folds into one line. Without colour (NO_COLOR, `--color never`, a pipe)
//! nothing is redrawn: output lines are printed once as they complete.
//!
//! Invariant: every line of the block is shorter than the terminal is
//! wide, so the block takes exactly as many rows as it has lines and the
//! cursor arithmetic of a redraw is exact.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::describe::clip;
use crate::escape::visible;

/// Output lines a running call shows under its title.
pub const TAIL_LINES: usize = 4;

/// One running call.
pub struct Call {
    /// The call id.
    pub id: String,
    /// `[2]` in a parallel batch, so its lines can be told apart.
    pub label: Option<String>,
    /// The tool and its command or path.
    pub title: String,
    /// When it started.
    pub started: Instant,
    /// The last complete output lines (at most [`TAIL_LINES`]).
    pub tail: VecDeque<String>,
    /// Output after the last line break.
    pub partial: String,
    /// Complete output lines so far.
    pub lines: usize,
    /// When the view last said anything about it (for "still running").
    pub last_said: Instant,
    /// Time spent waiting for a permission answer, which is not the call's.
    waited: Duration,
    /// Since when it waits for one now.
    waiting_since: Option<Instant>,
}

impl Call {
    /// A call that starts now.
    pub fn new(id: String, label: Option<String>, title: String) -> Self {
        let now = Instant::now();
        Self {
            id,
            label,
            title,
            started: now,
            tail: VecDeque::new(),
            partial: String::new(),
            lines: 0,
            last_said: now,
            waited: Duration::ZERO,
            waiting_since: None,
        }
    }

    /// A permission prompt for this call opened at `at`.
    pub fn wait_from(&mut self, at: Instant) {
        self.waiting_since.get_or_insert(at);
    }

    /// The permission prompt was answered at `at`.
    pub fn wait_until(&mut self, at: Instant) {
        if let Some(since) = self.waiting_since.take() {
            self.waited += at.saturating_duration_since(since);
        }
    }

    /// Takes streamed output (raw: it is escaped when shown); returns the
    /// lines it completed. A carriage return ends a line too, so a progress
    /// bar shows its latest state.
    pub fn take_output(&mut self, data: &str) -> Vec<String> {
        let mut complete = Vec::new();
        for c in data.chars() {
            if c == '\n' || c == '\r' {
                if c == '\n' || !self.partial.is_empty() {
                    complete.push(std::mem::take(&mut self.partial));
                }
            } else if c == '\t' {
                // A tab's width depends on the column: spaces keep the
                // block's line widths countable.
                self.partial.push_str("    ");
            } else {
                self.partial.push(c);
            }
        }
        for line in &complete {
            self.lines += 1;
            self.tail.push_back(line.clone());
            while self.tail.len() > TAIL_LINES {
                self.tail.pop_front();
            }
        }
        complete
    }

    /// The label and title, as the call's lines start.
    pub fn name(&self) -> String {
        match &self.label {
            Some(label) => format!("{label} {}", self.title),
            None => self.title.clone(),
        }
    }

    /// How long it has run, not counting waits for a permission answer.
    pub fn elapsed(&self) -> Duration {
        self.elapsed_at(Instant::now())
    }

    /// [`Call::elapsed`] as of `now`.
    pub fn elapsed_at(&self, now: Instant) -> Duration {
        let waiting = self
            .waiting_since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        now.saturating_duration_since(self.started)
            .saturating_sub(self.waited + waiting)
    }
}

/// What a block line is, so the view can style it.
pub enum BlockLine {
    /// A call's title and elapsed time.
    Title { name: String, elapsed: String },
    /// One line of a call's output.
    Output(String),
}

/// The lines of the block for `calls`, each cut to fit `width` columns.
pub fn block(calls: &[Call], width: usize) -> Vec<BlockLine> {
    let room = width.saturating_sub(6).max(10);
    let mut lines = Vec::new();
    for call in calls {
        lines.push(BlockLine::Title {
            name: clip(&call.name(), room.saturating_sub(10)),
            elapsed: super::describe::duration(call.elapsed()),
        });
        let mut shown: Vec<&String> = call.tail.iter().collect();
        if !call.partial.is_empty() {
            shown.push(&call.partial);
        }
        let skip = shown.len().saturating_sub(TAIL_LINES);
        for line in shown.into_iter().skip(skip) {
            lines.push(BlockLine::Output(clip(&visible(line), room)));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_time_leaves_out_its_permission_waits() {
        let mut call = Call::new("c".into(), None, "bash x".into());
        let start = call.started;
        call.wait_from(start + Duration::from_secs(1));
        assert_eq!(
            call.elapsed_at(start + Duration::from_secs(5)),
            Duration::from_secs(1)
        );
        call.wait_until(start + Duration::from_secs(31));
        call.wait_from(start + Duration::from_secs(32));
        call.wait_until(start + Duration::from_secs(40));
        assert_eq!(
            call.elapsed_at(start + Duration::from_secs(42)),
            Duration::from_secs(4)
        );
    }

    #[test]
    fn output_keeps_the_last_lines_and_the_partial_one() {
        let mut call = Call::new("c".into(), None, "bash loop".into());
        assert_eq!(call.take_output("one\ntwo\nthr"), ["one", "two"]);
        assert_eq!(call.take_output("ee\n4\n5\n6\r7"), ["three", "4", "5", "6"]);
        assert_eq!(call.lines, 6);
        assert_eq!(call.tail, ["three", "4", "5", "6"]);
        assert_eq!(call.partial, "7");
        let lines = block(&[call], 40);
        assert_eq!(
            lines.len(),
            1 + TAIL_LINES,
            "the partial line replaces the oldest"
        );
        assert!(matches!(&lines[4], BlockLine::Output(line) if line == "7"));
    }

    #[test]
    fn output_is_shown_with_control_characters_escaped() {
        let mut call = Call::new("c".into(), None, "bash".into());
        call.take_output("\x1b]52;c;eA==\x07 and \x1b[8mhidden\n");
        let lines = block(&[call], 80);
        assert!(
            matches!(&lines[1], BlockLine::Output(line)
                if line == "\\x1b]52;c;eA==\\x07 and \\x1b[8mhidden"),
            "control characters are shown escaped"
        );
    }

    #[test]
    fn block_lines_fit_the_width() {
        let mut call = Call::new("c".into(), Some("[1]".into()), "x".repeat(300));
        call.take_output(&format!("{}\n", "y".repeat(300)));
        for line in block(&[call], 50) {
            let text = match line {
                BlockLine::Title { name, elapsed } => format!("… {name} · {elapsed}"),
                BlockLine::Output(text) => format!("  │ {text}"),
            };
            assert!(text.chars().count() < 50, "{text}");
        }
    }
}
