//! Answers to permission requests during `keel run`.
//!
//! On a terminal, one line per request — the tool and its plain command or
//! path, and why the policy asks — and one key: `y` allows it once, `a`
//! allows it and every later call of the same tool on exactly the same
//! command or path for the rest of the session, while it resolves to the
//! same files and programs (the kernel records a session rule), `n`, Enter, Escape or end of input deny. Off a terminal,
//! one line per request on stdin, as `keel_host::answers` reads it (a JSON
//! answer, whose `scope` may be `always`, or a bare word); end of input,
//! or anything not clearly an approval of that request, denies.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use keel_host::answers;
use keel_kernel::AgentRun;
use keel_protocol::{
    PermissionAnswer, PermissionResolution, PermissionScope, RunEvent, RunEventKind,
};
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};
use tokio::sync::Notify;

use crate::escape::visible;
use crate::output::Output;
use crate::style::{self, Palette};
use crate::tty::{self, Keys};
use crate::view::call_title;

/// Where answers come from.
pub struct Answers {
    source: Source,
    /// Notified when a signal cancels the run: a waiting prompt gives up.
    cancelled: Arc<Notify>,
}

enum Source {
    Terminal(Option<Keys>, Palette),
    Lines(Option<Lines<BufReader<Stdin>>>),
}

impl Answers {
    /// Answers from the terminal when stdin is one, else from stdin's lines.
    pub fn new(cancelled: Arc<Notify>) -> Self {
        let source = if Self::on_terminal() {
            Source::Terminal(None, Palette::for_stream(style::choice(), true))
        } else {
            Source::Lines(Some(BufReader::new(tokio::io::stdin()).lines()))
        };
        Self { source, cancelled }
    }

    /// Whether requests are asked on the terminal (the view then leaves
    /// them to the prompt).
    pub fn on_terminal() -> bool {
        std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
    }

    /// Answers `event` if it is a permission request.
    pub async fn answer(&mut self, event: &RunEvent, run: &AgentRun, output: &Output) {
        let RunEventKind::PermissionRequested {
            request_id,
            tool_name,
            arguments,
            reason,
            ..
        } = &event.kind
        else {
            return;
        };
        let answer = match &mut self.source {
            Source::Terminal(keys, palette) => {
                output.suspend();
                let title = call_title(tool_name, arguments);
                let cancelled = Arc::clone(&self.cancelled);
                prompt(keys, *palette, &title, reason, &cancelled).await
            }
            Source::Lines(lines) => {
                let line = tokio::select! {
                    line = read_line(lines) => line,
                    // A signal cancelled the run: stop waiting for a line.
                    () = self.cancelled.notified() => None,
                };
                answers::answer_line(line.as_deref(), request_id)
            }
        };
        // A stale id only means the run already moved on (e.g. it was cancelled).
        let _ = run.resolve_permission(request_id, answer);
    }
}

/// Asks on the terminal and waits for one key.
async fn prompt(
    keys: &mut Option<Keys>,
    palette: Palette,
    title: &str,
    reason: &str,
    cancelled: &Notify,
) -> PermissionAnswer {
    let deny = PermissionAnswer::once(PermissionResolution::Denied);
    if keys.is_none() {
        *keys = Keys::start();
    }
    let Some(keys) = keys.as_mut() else {
        return deny;
    };
    let question = format!(
        "{} {} {}  {} ",
        palette.paint(style::WARN, "? allow"),
        palette.paint(style::TOOL, &visible(title)),
        palette.paint(style::DIM, &format!("({})", visible(reason))),
        palette.paint(style::BOLD, "[y]es once / [a]lways this session / [N]o:"),
    );
    // Single-key mode first, so a key pressed once the question shows counts.
    keys.begin();
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let answer = loop {
        let key = tokio::select! {
            key = keys.next() => key,
            () = cancelled.notified() => break (deny, "no (the run is being cancelled)"),
        };
        match key.map(|byte| byte.to_ascii_lowercase()) {
            Some(b'y') => {
                break (
                    PermissionAnswer::once(PermissionResolution::Approved),
                    "yes, once",
                );
            }
            Some(b'a') => {
                let always =
                    PermissionAnswer::new(PermissionResolution::Approved, PermissionScope::Always);
                break (always, "yes, always for this session");
            }
            // n, Enter, Escape, Ctrl-D and end of input deny; other keys are ignored.
            None | Some(b'n' | b'\r' | b'\n' | 0x1b | 0x04) => break (deny, "no"),
            Some(_) => {}
        }
    };
    tty::restore();
    eprintln!("{}", answer.1);
    answer.0
}

async fn read_line(lines: &mut Option<Lines<BufReader<Stdin>>>) -> Option<String> {
    let reader = lines.as_mut()?;
    match reader.next_line().await {
        Ok(Some(line)) => Some(line),
        _ => {
            *lines = None;
            None
        }
    }
}
