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
//!
//! Nobody to ask: a run that can ask (`ask`, `auto`) whose stdin is not a
//! terminal is told so at its start ([`nobody_to_ask`]): on stderr, and in
//! a `warning` event. When stdin cannot bring an answer at all (closed,
//! `/dev/null`, or it held the prompt) every request is denied at once;
//! otherwise its lines answer. Every request denied because no answer came
//! is counted in the run's totals (`denied_unanswered`).

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use keel_host::answers;
use keel_kernel::AgentRun;
use keel_protocol::{
    PermissionAnswer, PermissionMode, PermissionResolution, PermissionScope, RunEvent, RunEventKind,
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
    /// Nothing can bring an answer: every request is denied.
    Nobody,
}

/// Who can answer this invocation's permission requests, when it is not
/// someone at a terminal: the `warning` to give at the start (code,
/// message).
pub fn nobody_to_ask(mode: PermissionMode, prompt_from_stdin: bool) -> Option<(String, String)> {
    if !matches!(mode, PermissionMode::Ask | PermissionMode::Auto) || Answers::on_terminal() {
        return None;
    }
    let why = match stdin_state() {
        _ if prompt_from_stdin => Some("it held the prompt"),
        StdinState::Closed => Some("it is closed"),
        StdinState::Null => Some("it is /dev/null"),
        StdinState::Other => None,
    };
    Some(match why {
        Some(why) => (
            "nobody_to_ask".to_owned(),
            format!(
                "nobody can answer permission requests: standard input is not a terminal \
                 and {why}, so every call that asks is denied (answer them with \
                 `--input-format stream-json`, or run on a terminal)"
            ),
        ),
        None => (
            "answers_on_stdin".to_owned(),
            "standard input is not a terminal: permission requests are answered by its \
             lines (`y`, `a`, `n` or a JSON answer), and every one that finds no line \
             before its end is denied"
                .to_owned(),
        ),
    })
}

/// What standard input is.
enum StdinState {
    /// Not open.
    Closed,
    /// The null device.
    Null,
    /// A pipe, a file, a terminal or anything else that may hold lines.
    Other,
}

fn stdin_state() -> StdinState {
    use std::os::fd::AsFd;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let stdin = std::io::stdin();
    let Ok(fd) = stdin.as_fd().try_clone_to_owned() else {
        return StdinState::Closed;
    };
    let Ok(metadata) = std::fs::File::from(fd).metadata() else {
        return StdinState::Closed;
    };
    let null = std::fs::metadata("/dev/null")
        .is_ok_and(|null| metadata.file_type().is_char_device() && null.rdev() == metadata.rdev());
    match null {
        true => StdinState::Null,
        false => StdinState::Other,
    }
}

impl Answers {
    /// Answers from the terminal when stdin is one, else from stdin's lines;
    /// from nobody when `nobody` (see [`nobody_to_ask`]).
    pub fn new(cancelled: Arc<Notify>, nobody: bool) -> Self {
        let source = if Self::on_terminal() {
            Source::Terminal(None, Palette::for_stream(style::choice(), true))
        } else if nobody {
            Source::Nobody
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
        let deny = PermissionAnswer::once(PermissionResolution::Denied);
        let answer = match &mut self.source {
            Source::Terminal(keys, palette) => {
                output.suspend();
                let title = call_title(tool_name, arguments);
                let cancelled = Arc::clone(&self.cancelled);
                let answer = prompt(keys, *palette, &title, reason, &cancelled).await;
                if answer.is_none() {
                    output.unanswered();
                }
                answer.unwrap_or(deny)
            }
            Source::Lines(lines) => {
                let line = tokio::select! {
                    line = read_line(lines) => Ok(line),
                    // A signal cancelled the run: stop waiting for a line.
                    () = self.cancelled.notified() => Err(()),
                };
                if line.as_ref().is_ok_and(Option::is_none) {
                    output.unanswered();
                }
                answers::answer_line(line.ok().flatten().as_deref(), request_id)
            }
            Source::Nobody => {
                output.unanswered();
                deny
            }
        };
        // A stale id only means the run already moved on (e.g. it was cancelled).
        let _ = run.resolve_permission(request_id, answer);
    }
}

/// Asks on the terminal and waits for one key; `None` when the terminal
/// cannot be read (nobody answered).
async fn prompt(
    keys: &mut Option<Keys>,
    palette: Palette,
    title: &str,
    reason: &str,
    cancelled: &Notify,
) -> Option<PermissionAnswer> {
    let deny = PermissionAnswer::once(PermissionResolution::Denied);
    if keys.is_none() {
        *keys = Keys::start();
    }
    let keys = keys.as_mut()?;
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
    Some(answer.0)
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
