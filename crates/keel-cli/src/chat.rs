//! `keel chat` (and `keel` alone on a terminal): a line-based conversation.
//!
//! A line editor (rustyline) reads prompts, with history in
//! `$XDG_STATE_HOME/keel/history` (mode 0600) and multi-line input: a line
//! ending in `\` continues on the next, and Alt-Enter inserts a newline.
//! Each prompt is a run in one session (the first creates it, or continues
//! `--session`/`--continue`; later ones continue it); a prompt typed while
//! a run works becomes a follow-up (`run/follow_up`). The live view prints
//! above the prompt line through the editor's external printer, so typing
//! is never garbled (calls are not redrawn in place).
//!
//! Ctrl-C cancels the current run (`run/cancel`) and the chat stays; a
//! second Ctrl-C within two seconds leaves with status 130 (after
//! cancelling the run, if one works). Ctrl-D on an empty line, and
//! `/exit`, leave with status 0. SIGTERM and SIGHUP cancel the run and
//! leave with 128 + the signal. A permission request is printed as a
//! question, and the next line answers it: `y` once, `a` always for this
//! session, `n` (or an empty line) denies (`permission/resolve`).
//!
//! Commands: `/mode MODE` and `/model NAME` (for the next prompts),
//! `/compact [INSTRUCTIONS]`, `/fork [ENTRY]` (continue in a fork at ENTRY,
//! default the session's leaf), `/sessions`, `/resume ID`, `/cost`, `/help`,
//! `/exit`.
//!
//! Like `stream_input`, this is an adapter over keel-host's broker: one
//! local connection, each prompt a broker call, each `run/event`
//! notification printed by the view.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::ValueEnum;
use keel_host::broker::{Broker, Caller, Connection, Tenant};
use keel_host::sessions::{self, Resume};
use keel_protocol::rpc::methods::RunStartResponse;
use keel_protocol::{PermissionMode, RunEventKind, RunResult, RunTotals};
use keel_session::JsonlStore;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Cmd, Editor, ExternalPrinter, KeyCode, KeyEvent, Modifiers};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::args::{self, CompactArgs, FormatArgs, Mode, RunArgs, StoreArgs};
use crate::broker_run::{Run, Runs, startup_error};
use crate::escape::visible;
use crate::output::Output;
use crate::signals::FORCE_WINDOW;
use crate::startup::StartupError;
use crate::view::call_title;

/// The prompt shown by the line editor.
const PROMPT: &str = "› ";
/// The largest history file read; a larger one is not read (noted).
const HISTORY_BYTES: u64 = 16 * 1024 * 1024;
/// History entries kept in the file (older ones are dropped on load).
const HISTORY_KEPT: usize = 1000;
/// Exit code after a second Ctrl-C.
const INTERRUPTED: u8 = 130;

/// The help `/help` prints.
const HELP: &str = "\
Type a prompt and press Enter: each prompt is a run in this session; a
prompt typed while a run works is sent as a follow-up. A line ending in \\
continues on the next line (Alt-Enter inserts a newline too).
  /mode MODE       plan, ask, auto or full, from the next prompt on
  /model NAME      the model of the next prompts
  /compact [TEXT]  compact the session now (TEXT: what the summary keeps)
  /fork [ENTRY]    continue in a fork of the session at ENTRY (default: its leaf)
  /sessions        this workspace's recent sessions
  /resume ID       continue session ID instead
  /cost            tokens and cost of this chat so far
  /help            this text
  /exit            leave (also Ctrl-D on an empty line)
Ctrl-C cancels the current run; twice within two seconds leaves.
A permission question is answered by the next line: y (once), a (always, this session), n.";

/// What the chat starts from: the broker and store, the run parameters of
/// `keel run`'s flags, and the session to continue, if any.
pub struct Setup {
    /// The broker the runs go through.
    pub broker: Broker,
    /// The session store (the same the broker writes).
    pub store: Arc<JsonlStore>,
    /// Each run's parameters.
    pub runs: Runs,
    /// The session to continue; `None` starts a new one with the first prompt.
    pub session: Option<String>,
    /// A prompt to send at once (`keel chat PROMPT`).
    pub first: Option<String>,
    /// The flags, for `/compact` (provider, configuration, store).
    pub args: RunArgs,
    /// The canonical workspace.
    pub workspace: PathBuf,
}

/// Runs the chat until the user leaves; see the module docs.
pub async fn run(setup: Setup) -> Result<ExitCode, StartupError> {
    let signals = Signals::install()?;
    // Leaving while the editor reads (SIGTERM, SIGHUP) must not leave the
    // terminal in the editor's raw mode.
    let _restore = TerminalRestore::save();
    let connection = setup.broker.connect(Tenant::local());
    connection
        .call("initialize", None)
        .await
        .map_err(|error| startup_error(&error))?;
    let editor = spawn_editor(history_path())?;
    let screen = editor.screen.clone();
    let sink_screen = screen.clone();
    let output = Output::view_to(Box::new(move |text| sink_screen.write(text)), true);
    let mut chat = Chat {
        caller: connection.caller(),
        connection,
        store: setup.store,
        runs: setup.runs,
        session: setup.session,
        screen,
        output,
        active: None,
        asks: VecDeque::new(),
        last_interrupt: None,
        leaving: None,
        spent: {
            let mut spent = RunTotals::default();
            spent.cost_usd = Some(0.0);
            spent
        },
        args: setup.args,
        workspace: setup.workspace,
    };
    chat.greet();
    if let Some(first) = setup.first {
        chat.prompt(first).await;
    }
    let code = chat.run(editor, signals).await;
    Ok(ExitCode::from(code))
}

/// The terminal's settings when the chat started, put back when it ends.
struct TerminalRestore(Option<nix::sys::termios::Termios>);

impl TerminalRestore {
    fn save() -> Self {
        use std::os::fd::AsFd;
        Self(nix::sys::termios::tcgetattr(std::io::stdin().as_fd()).ok())
    }
}

impl Drop for TerminalRestore {
    fn drop(&mut self) {
        use std::os::fd::AsFd;
        if let Some(saved) = &self.0 {
            let stdin = std::io::stdin();
            let _ = nix::sys::termios::tcsetattr(
                stdin.as_fd(),
                nix::sys::termios::SetArg::TCSADRAIN,
                saved,
            );
            // Bracketed paste, which the editor turns on while it reads.
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(b"\x1b[?2004l");
            let _ = stdout.flush();
        }
    }
}

/// What the editor thread read.
enum Typed {
    Line(String),
    Interrupted,
    End,
    Failed(String),
}

/// What the editor thread does next.
enum Next {
    Read,
    Stop,
}

/// The line editor, on a thread of its own.
struct EditorThread {
    typed: mpsc::UnboundedReceiver<Typed>,
    next: std::sync::mpsc::Sender<Next>,
    screen: Screen,
}

/// Lines printed above the editor's prompt, as whole lines (the external
/// printer ends every message with a newline).
#[derive(Clone)]
struct Screen(Arc<Mutex<ScreenState>>);

struct ScreenState {
    printer: Box<dyn ExternalPrinter + Send>,
    partial: String,
}

impl Screen {
    /// Adds text; the complete lines in it are printed.
    fn write(&self, text: &str) {
        let mut state = self.lock();
        state.partial.push_str(text);
        let Some(end) = state.partial.rfind('\n') else {
            return;
        };
        let lines: String = state.partial.drain(..=end).collect();
        if state.printer.print(lines.clone()).is_err() {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(lines.as_bytes());
            let _ = stdout.flush();
        }
    }

    /// Prints one line.
    fn say(&self, line: &str) {
        self.end_line();
        self.write(&format!("{line}\n"));
    }

    /// Prints what is left of a line.
    fn end_line(&self) {
        let partial = !self.lock().partial.is_empty();
        if partial {
            self.write("\n");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScreenState> {
        // Held only to print; recover it from a poisoned lock.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Multi-line input: a line ending in `\` is continued.
struct Lines;

impl rustyline::completion::Completer for Lines {
    type Candidate = String;
}
impl rustyline::hint::Hinter for Lines {
    type Hint = String;
}
impl rustyline::highlight::Highlighter for Lines {}
impl Validator for Lines {
    fn validate(&self, context: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(match context.input().ends_with('\\') {
            true => ValidationResult::Incomplete,
            false => ValidationResult::Valid(None),
        })
    }
}
impl rustyline::Helper for Lines {}

/// The typed text without the continuation marks (`\` before a newline).
fn joined(line: &str) -> String {
    line.replace("\\\n", "\n")
}

/// Starts the line editor on its own thread; each line it reads waits for
/// [`Next`] before the next is read, so the terminal is in its normal mode
/// whenever the chat leaves.
fn spawn_editor(history: Option<PathBuf>) -> Result<EditorThread, StartupError> {
    let (typed_sender, typed) = mpsc::unbounded_channel();
    let (next, next_receiver) = std::sync::mpsc::channel();
    let (printer_sender, printer_receiver) = std::sync::mpsc::channel();
    let failed = |error: &dyn std::fmt::Display| {
        StartupError::new("terminal", format!("cannot start the line editor: {error}"))
    };
    std::thread::Builder::new()
        .name("keel-editor".into())
        .spawn(move || {
            let editor = rustyline::Config::builder()
                .auto_add_history(false)
                .max_history_size(HISTORY_KEPT)
                .map(|builder| builder.build())
                .and_then(Editor::<Lines, rustyline::history::DefaultHistory>::with_config);
            let mut editor = match editor {
                Ok(editor) => editor,
                Err(error) => {
                    let _ = printer_sender.send(Err(error.to_string()));
                    return;
                }
            };
            editor.set_helper(Some(Lines));
            editor.bind_sequence(KeyEvent(KeyCode::Enter, Modifiers::ALT), Cmd::Newline);
            let history = history.map(History::open);
            if let Some(history) = &history {
                for entry in &history.entries {
                    let _ = editor.add_history_entry(entry.as_str());
                }
            }
            match editor.create_external_printer() {
                Ok(printer) => {
                    let printer: Box<dyn ExternalPrinter + Send> = Box::new(printer);
                    if printer_sender.send(Ok(printer)).is_err() {
                        return;
                    }
                }
                Err(error) => {
                    let _ = printer_sender.send(Err(error.to_string()));
                    return;
                }
            }
            loop {
                let typed = match editor.readline(PROMPT) {
                    Ok(line) => {
                        if !line.trim().is_empty()
                            && editor.add_history_entry(line.as_str()).unwrap_or(false)
                            && let Some(history) = &history
                        {
                            history.append(&line);
                        }
                        Typed::Line(joined(&line))
                    }
                    Err(rustyline::error::ReadlineError::Interrupted) => Typed::Interrupted,
                    Err(rustyline::error::ReadlineError::Eof) => Typed::End,
                    Err(error) => Typed::Failed(error.to_string()),
                };
                let last = matches!(typed, Typed::End | Typed::Failed(_));
                if typed_sender.send(typed).is_err() || last {
                    return;
                }
                match next_receiver.recv() {
                    Ok(Next::Read) => {}
                    Ok(Next::Stop) | Err(_) => return,
                }
            }
        })
        .map_err(|error| failed(&error))?;
    let printer = printer_receiver
        .recv()
        .map_err(|error| failed(&error))?
        .map_err(|error| failed(&error))?;
    Ok(EditorThread {
        typed,
        next,
        screen: Screen(Arc::new(Mutex::new(ScreenState {
            printer,
            partial: String::new(),
        }))),
    })
}

/// `$XDG_STATE_HOME/keel/history` (default `~/.local/state/keel/history`).
fn history_path() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some(state.join("keel").join("history"))
}

/// The history file: one JSON string per entry (so an entry may hold
/// newlines), readable and writable by its owner only.
struct History {
    path: PathBuf,
    entries: Vec<String>,
}

impl History {
    /// Reads the file (creating its directory), keeping the last entries;
    /// an unreadable file gives an empty history, with a note.
    fn open(path: PathBuf) -> Self {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        if let Some(dir) = path.parent() {
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir);
        }
        // Read as a file something else could have put there: a regular
        // file only, never through a symlink, without blocking, capped.
        let read = keel_tools::untrusted::read(
            keel_tools::untrusted::Origin::NoFollow(&path),
            keel_tools::untrusted::Limit::Refuse(HISTORY_BYTES),
        );
        let mut entries: Vec<String> = match read {
            Ok(contents) => String::from_utf8_lossy(&contents.bytes)
                .lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect(),
            Err(error) if error.is_not_found() => Vec::new(),
            Err(error) => {
                eprintln!(
                    "keel: the chat history {} is not read: {error}",
                    path.display()
                );
                Vec::new()
            }
        };
        if entries.len() > HISTORY_KEPT {
            entries.drain(..entries.len() - HISTORY_KEPT);
        }
        // A file made by an older keel, or by hand: owner only.
        if let Ok(metadata) = std::fs::symlink_metadata(&path)
            && metadata.is_file()
            && metadata.permissions().mode() & 0o077 != 0
        {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        }
        Self { path, entries }
    }

    /// Appends one entry (created with mode 0600).
    fn append(&self, entry: &str) {
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(line) = serde_json::to_string(entry) else {
            return;
        };
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            // Never written through a link put in its place, never blocked on a FIFO.
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(&self.path)
            .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
        if let Err(error) = written {
            tracing::warn!(%error, path = %self.path.display(), "chat history not written");
        }
    }
}

/// SIGINT (Ctrl-C while the editor is not reading), SIGTERM and SIGHUP.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self, StartupError> {
        let failed = |error: std::io::Error| {
            StartupError::new("signals", format!("cannot handle signals: {error}"))
        };
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).map_err(failed)?,
            terminate: signal(SignalKind::terminate()).map_err(failed)?,
            hangup: signal(SignalKind::hangup()).map_err(failed)?,
        })
    }

    /// The next signal's number.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        }
    }
}

/// What to do after a line or a key.
enum Flow {
    Stay,
    Leave(u8),
}

struct Chat {
    connection: Connection,
    caller: Caller,
    store: Arc<JsonlStore>,
    runs: Runs,
    session: Option<String>,
    screen: Screen,
    output: Output,
    /// The run working now.
    active: Option<Run>,
    /// Permission requests waiting for an answer, oldest first.
    asks: VecDeque<String>,
    last_interrupt: Option<Instant>,
    /// Leave with this code once the active run has ended.
    leaving: Option<u8>,
    /// Tokens and cost of the runs that ended.
    spent: RunTotals,
    args: RunArgs,
    workspace: PathBuf,
}

impl Chat {
    fn greet(&self) {
        let mode = self
            .runs
            .template
            .mode
            .map_or("auto", PermissionMode::as_str);
        let session = match &self.session {
            Some(id) => format!("continuing session {id}"),
            None => "a new session starts with the first prompt".to_owned(),
        };
        self.screen.say(&format!(
            "keel chat · mode {mode} · {session} · /help for commands, Ctrl-D to leave"
        ));
    }

    async fn run(&mut self, editor: EditorThread, mut signals: Signals) -> u8 {
        let EditorThread {
            mut typed, next, ..
        } = editor;
        let mut ticks = tokio::time::interval(crate::view::TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // Whether the editor still reads (not after a leave that waits for
        // the run to end).
        let mut reading = true;
        loop {
            let active = self.active.is_some();
            tokio::select! {
                typed = typed.recv(), if reading => {
                    let flow = match typed {
                        Some(Typed::Line(line)) => self.line(line).await,
                        Some(Typed::Interrupted) => self.interrupt().await,
                        Some(Typed::End) | None => Flow::Leave(0),
                        Some(Typed::Failed(error)) => {
                            self.screen.say(&format!("keel: the line editor failed: {error}"));
                            Flow::Leave(1)
                        }
                    };
                    match flow {
                        Flow::Stay => {
                            let _ = next.send(Next::Read);
                        }
                        Flow::Leave(code) => {
                            let _ = next.send(Next::Stop);
                            reading = false;
                            if let Some(code) = self.leave(code).await {
                                return code;
                            }
                        }
                    }
                }
                note = self.connection.notification(), if active => {
                    let Some(note) = note else {
                        self.screen.say("keel: the broker connection closed");
                        return 1;
                    };
                    if self.note(note).await && let Some(code) = self.leaving {
                        return code;
                    }
                }
                _ = ticks.tick(), if active => self.output.tick(),
                number = signals.next() => {
                    let flow = match number {
                        libc::SIGINT => self.interrupt().await,
                        other => Flow::Leave(u8::try_from(128 + other).unwrap_or(1)),
                    };
                    if let Flow::Leave(code) = flow
                        && let Some(code) = self.leave(code).await
                    {
                        return code;
                    }
                }
            }
        }
    }

    /// Leaves now (`Some`), or once the active run, now cancelled, ends.
    async fn leave(&mut self, code: u8) -> Option<u8> {
        match &self.active {
            None => Some(code),
            Some(run) => {
                if self.leaving.is_none() {
                    run.cancel().await;
                }
                self.leaving = Some(code);
                None
            }
        }
    }

    /// Ctrl-C: cancels the run; a second one within two seconds leaves.
    async fn interrupt(&mut self) -> Flow {
        let now = Instant::now();
        let again = self
            .last_interrupt
            .is_some_and(|at| now.duration_since(at) <= FORCE_WINDOW);
        self.last_interrupt = Some(now);
        if again {
            return Flow::Leave(INTERRUPTED);
        }
        match &self.active {
            Some(run) => {
                self.screen
                    .say("keel: cancelling the run (Ctrl-C again within 2 s leaves the chat)");
                run.cancel().await;
            }
            None => self
                .screen
                .say("keel: Ctrl-C again within 2 s, Ctrl-D or /exit leaves the chat"),
        }
        Flow::Stay
    }

    /// One line the user typed.
    async fn line(&mut self, line: String) -> Flow {
        if let Some(request_id) = self.asks.front().cloned() {
            self.answer(&request_id, line.trim()).await;
            return Flow::Stay;
        }
        let text = line.trim();
        if text.is_empty() {
            return Flow::Stay;
        }
        if let Some(command) = text.strip_prefix('/') {
            return self.command(command).await;
        }
        match &self.active {
            Some(run) => {
                let params = json!({ "run_id": run.run_id, "text": line });
                if let Err(error) = run.call("run/follow_up", params).await {
                    self.screen.say(&format!(
                        "keel: the follow-up was not sent: {}",
                        error.message
                    ));
                }
            }
            None => self.prompt(line).await,
        }
        Flow::Stay
    }

    /// Starts a run with `prompt` in the chat's session.
    async fn prompt(&mut self, prompt: String) {
        let started = self
            .caller
            .call(
                "run/start",
                Some(self.runs.start(prompt, self.session.clone())),
            )
            .await
            .and_then(|value| {
                serde_json::from_value::<RunStartResponse>(value).map_err(|error| {
                    keel_protocol::rpc::RpcError::new(
                        keel_protocol::rpc::ErrorKind::Internal,
                        error.to_string(),
                    )
                })
            });
        match started {
            Ok(started) => {
                self.session = Some(started.session_id);
                self.active = Some(Run {
                    caller: self.caller.clone(),
                    run_id: started.run_id,
                });
            }
            Err(error) => self
                .screen
                .say(&format!("keel: no run started: {}", error.message)),
        }
    }

    /// A notification of the broker; whether the active run ended.
    async fn note(&mut self, note: keel_protocol::rpc::Notification) -> bool {
        let Some(run) = &self.active else {
            return false;
        };
        let Some(event) = run.event_of(note).await else {
            return false;
        };
        self.output.event(&event.event);
        if let RunEventKind::PermissionRequested {
            request_id,
            tool_name,
            arguments,
            reason,
            ..
        } = &event.event.kind
        {
            self.screen.say(&format!(
                "? allow {} ({})? answer y (once), a (always, this session) or n",
                visible(&call_title(tool_name, arguments)),
                visible(reason)
            ));
            self.asks.push_back(request_id.clone());
        }
        let Some(result) = event.result else {
            return false;
        };
        self.ended(&result).await;
        true
    }

    /// Prints the end of the active run.
    async fn ended(&mut self, result: &RunResult) {
        let Some(run) = self.active.take() else {
            return;
        };
        self.asks.clear();
        let changes = match self.caller.workspace_changes(&run.run_id).await {
            Ok(changes) => Some(changes),
            Err(error) => {
                tracing::warn!(%error, "no workspace changes to report");
                None
            }
        };
        let stored = crate::host::Stored::of(&self.store, &result.session_id).ok();
        if let Err(error) = self.output.finish(result, changes.as_ref(), stored) {
            self.screen.say(&format!("keel: {}", error.message()));
        }
        self.screen.end_line();
        let totals = self.output.totals();
        let spent = &mut self.spent;
        spent.turns += totals.turns;
        spent.input_tokens += totals.input_tokens;
        spent.output_tokens += totals.output_tokens;
        spent.cache_read_tokens += totals.cache_read_tokens;
        spent.cache_write_tokens += totals.cache_write_tokens;
        // Unknown once any run's cost is unknown.
        spent.cost_usd = match (spent.cost_usd, totals.cost_usd) {
            (Some(sum), Some(cost)) => Some(sum + cost),
            _ => None,
        };
        self.session = Some(result.session_id.clone());
    }

    /// Answers the oldest waiting permission request with `answer`.
    async fn answer(&mut self, request_id: &str, answer: &str) {
        let (decision, scope, said) = match answer.to_ascii_lowercase().as_str() {
            "y" | "yes" => ("approve", "once", "yes, once"),
            "a" | "always" => ("approve", "always", "yes, always for this session"),
            "" | "n" | "no" => ("deny", "once", "no"),
            _ => {
                self.screen
                    .say("keel: answer y (once), a (always, this session) or n");
                return;
            }
        };
        self.asks.pop_front();
        let Some(run) = &self.active else {
            return;
        };
        let params = json!({ "run_id": run.run_id, "request_id": request_id,
            "decision": decision, "scope": scope });
        match run.call("permission/resolve", params).await {
            Ok(_) => self.screen.say(said),
            Err(error) => self.screen.say(&format!(
                "keel: the answer was not applied: {}",
                error.message
            )),
        }
    }

    /// A slash command (without its `/`).
    async fn command(&mut self, command: &str) -> Flow {
        let (name, rest) = command
            .split_once(char::is_whitespace)
            .map_or((command, ""), |(name, rest)| (name, rest.trim()));
        let busy = self.active.is_some();
        match name {
            "exit" | "quit" => return Flow::Leave(0),
            "help" => {
                for line in HELP.lines() {
                    self.screen.say(line);
                }
            }
            "mode" => match Mode::from_str(rest, true) {
                Ok(mode) => {
                    let mode = PermissionMode::from(mode);
                    self.runs.template.mode = Some(mode);
                    self.screen
                        .say(&format!("mode {} from the next prompt on", mode.as_str()));
                }
                Err(_) => self
                    .screen
                    .say("keel: /mode needs one of plan, ask, auto, full"),
            },
            "model" if rest.is_empty() => self.screen.say("keel: /model needs a model name"),
            "model" => {
                self.runs.template.model = Some(rest.to_owned());
                self.screen
                    .say(&format!("model {rest} from the next prompt on"));
            }
            "cost" => self.cost(),
            "sessions" => self.list_sessions().await,
            "compact" | "fork" | "resume" if busy => self.screen.say(&format!(
                "keel: /{name} waits until the run ends (Ctrl-C cancels it)"
            )),
            "compact" => self.compact(rest).await,
            "fork" => self.fork(rest).await,
            "resume" => self.resume(rest).await,
            _ => self.screen.say(&format!(
                "keel: unknown command /{}; /help lists the commands",
                visible(name)
            )),
        }
        Flow::Stay
    }

    fn cost(&self) {
        let spent = &self.spent;
        let cost = match spent.cost_usd {
            Some(usd) => format!("${usd:.4}"),
            None => "cost unknown".to_owned(),
        };
        self.screen.say(&format!(
            "this chat: {} turns · {} in ({} cached) / {} out tokens · {cost}",
            spent.turns,
            spent.input_tokens + spent.cache_read_tokens,
            spent.cache_read_tokens,
            spent.output_tokens
        ));
    }

    async fn list_sessions(&self) {
        match sessions::sessions_of(&*self.store, Some(&self.workspace)).await {
            Ok((mine, _)) if mine.is_empty() => self.screen.say("no sessions in this workspace"),
            Ok((mine, _)) => {
                let short = sessions::short_ids(&self.store).unwrap_or_default();
                for info in mine.iter().take(10) {
                    let current = self.session.as_deref() == Some(info.id.as_str());
                    self.screen.say(&format!(
                        "{} {} · {} entries · {}",
                        if current { "*" } else { " " },
                        short.get(&info.id).unwrap_or(&info.id),
                        info.entries,
                        visible(info.title.as_deref().unwrap_or("(no prompt yet)"))
                    ));
                }
            }
            Err(error) => self.screen.say(&format!("keel: {error}")),
        }
    }

    async fn compact(&mut self, instructions: &str) {
        let Some(id) = self.session.clone() else {
            self.screen
                .say("keel: nothing to compact before the first prompt");
            return;
        };
        let args = CompactArgs {
            id,
            instructions: (!instructions.is_empty()).then(|| instructions.to_owned()),
            provider: self.args.provider.clone(),
            model: self.runs.template.model.clone(),
            base_url: self.args.base_url.clone(),
            settings: self.args.settings.clone(),
            script: self.args.script.clone(),
            context_window: self.args.context_window,
            store: StoreArgs {
                session_dir: self.args.store.session_dir.clone(),
            },
            format: FormatArgs {
                output_format: args::OutputFormat::Text,
            },
        };
        // The editor waits for this line to be handled: printing straight
        // to stdout cannot garble its prompt.
        if let Err(error) = crate::compact_cmd::run(args).await {
            self.screen.say(&format!("keel: {}", error.message()));
        }
    }

    async fn fork(&mut self, entry: &str) {
        let Some(id) = self.session.clone() else {
            self.screen
                .say("keel: nothing to fork before the first prompt");
            return;
        };
        let entry = match entry {
            "" => match self.leaf(&id) {
                Ok(leaf) => leaf,
                Err(error) => {
                    self.screen.say(&format!("keel: {error}"));
                    return;
                }
            },
            entry => entry.to_owned(),
        };
        self.switch(Some(&id), Some(&entry)).await;
    }

    /// The active leaf of session `id`.
    fn leaf(&self, id: &str) -> Result<String, String> {
        let reader = self.store.reader(id).map_err(|error| error.to_string())?;
        let mut leaf = None;
        for entry in reader.active_entries() {
            leaf = Some(entry.map_err(|error| error.to_string())?.id);
        }
        leaf.ok_or_else(|| format!("session {id} has no entries to fork at"))
    }

    async fn resume(&mut self, id: &str) {
        if id.is_empty() {
            self.screen
                .say("keel: /resume needs a session id (/sessions lists them)");
            return;
        }
        self.switch(Some(id), None).await;
    }

    /// Continues `session` (forked at `fork`) from the next prompt on.
    async fn switch(&mut self, session: Option<&str>, fork: Option<&str>) {
        let mut resume = Resume::default();
        resume.session = session;
        resume.fork = fork;
        resume.workspace = Some(&self.workspace);
        resume.workspace_given = self.args.workspace.is_some();
        match sessions::continued_session(&self.store, resume).await {
            Ok(continued) => {
                if let Some(repair) = &continued.repair {
                    self.screen
                        .say(&format!("keel: {}", crate::session_cmd::repaired(repair)));
                }
                self.session = continued.session_id;
                let id = self.session.as_deref().unwrap_or("(new)");
                let what = if fork.is_some() {
                    "forked: now in session"
                } else {
                    "now in session"
                };
                self.screen.say(&format!("{what} {id}"));
            }
            Err(error) => self.screen.say(&format!("keel: {error}")),
        }
    }
}

/// Whether `keel` alone should open a chat: standard input and output are
/// both terminals.
pub fn on_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Refuses the `keel run` flags that mean nothing in a chat.
pub fn check_args(args: &RunArgs) -> Result<(), StartupError> {
    let refused = if args.input_format != args::InputFormat::Text {
        Some("--input-format")
    } else if args.output.quiet {
        Some("-q")
    } else if args.output.output_format != args::OutputFormat::Auto
        && args.output.output_format != args::OutputFormat::Text
    {
        Some("--output-format")
    } else if args.output.output_last_message.is_some() {
        Some("-o")
    } else if !args.images.is_empty() {
        Some("--image")
    } else {
        None
    };
    if let Some(flag) = refused {
        return Err(StartupError::new(
            "usage",
            format!(
                "{flag} does not apply to keel chat (a conversation on the terminal); \
                 `keel run` takes it"
            ),
        ));
    }
    if !on_terminal() {
        return Err(StartupError::new(
            "usage",
            "keel chat needs a terminal on standard input and output; for scripts, use \
             `keel run --input-format stream-json`",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn continuation_marks_are_removed() {
        assert_eq!(joined("one \\\ntwo\\\nthree"), "one \ntwo\nthree");
        assert_eq!(joined("a \\ b"), "a \\ b");
    }

    #[test]
    fn history_keeps_multi_line_entries_for_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/keel/history");
        let history = History::open(path.clone());
        assert!(history.entries.is_empty());
        history.append("first");
        history.append("two\nlines");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(History::open(path).entries, ["first", "two\nlines"]);
    }

    #[test]
    fn a_history_that_is_a_symlink_is_neither_read_nor_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "\"planted\"\n").unwrap();
        std::fs::create_dir_all(dir.path().join("keel")).unwrap();
        let path = dir.path().join("keel/history");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let history = History::open(path);
        assert!(history.entries.is_empty());
        history.append("secret prompt");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "\"planted\"\n");
    }
}
