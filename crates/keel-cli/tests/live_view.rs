//! The terminal view and the `ask` prompt on a real pseudo-terminal
//! (util-linux `script`, which .ci/run makes sure is installed), read as
//! the bytes arrive, with the time each arrived:
//! - the output of a 3-second loop appears while the call runs — its first
//!   line at least a second before the call's end is shown — with colour,
//!   and again with `NO_COLOR=1`, which leaves no escape code at all;
//! - in `ask` mode one line per request names the plain command, `a`
//!   answers it for the rest of the session (the same command later runs
//!   without a prompt) and `n` denies another command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// `keel ARGS` on a pseudo-terminal, its output collected as it arrives.
struct Terminal {
    child: Child,
    stdin: Option<ChildStdin>,
    chunks: mpsc::Receiver<(Instant, Vec<u8>)>,
    /// Everything so far, and when each byte offset arrived.
    seen: Vec<u8>,
    arrivals: Vec<(usize, Instant)>,
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

impl Terminal {
    fn start(args: &[String], dir: &Path, no_color: bool) -> Terminal {
        assert!(
            Command::new("script").arg("--version").output().is_ok(),
            "util-linux `script` is needed to give keel a terminal"
        );
        let keel = assert_cmd::cargo::cargo_bin!("keel").display().to_string();
        let line = std::iter::once(keel)
            .chain(args.iter().cloned())
            .map(|arg| quoted(&arg))
            .collect::<Vec<_>>()
            .join(" ");
        let mut command = Command::new("script");
        command
            .args(["-q", "-f", "-e", "-c", &line, "/dev/null"])
            .current_dir(dir)
            .env("XDG_DATA_HOME", dir.join("data"))
            .env("TERM", "xterm-256color")
            .env_remove("NO_COLOR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if no_color {
            command.env("NO_COLOR", "1");
        }
        let mut child = command.spawn().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (sender, chunks) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(read) = stdout.read(&mut buffer) {
                if read == 0
                    || sender
                        .send((Instant::now(), buffer[..read].to_vec()))
                        .is_err()
                {
                    break;
                }
            }
        });
        Terminal {
            stdin: child.stdin.take(),
            child,
            chunks,
            seen: Vec::new(),
            arrivals: Vec::new(),
        }
    }

    /// Waits until `needle` has been printed (after byte `from`); returns
    /// where it starts and when it arrived.
    fn wait_for(&mut self, needle: &str, from: usize) -> (usize, Instant) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(at) = find(&self.seen[from.min(self.seen.len())..], needle.as_bytes()) {
                let position = from + at;
                let end = position + needle.len() - 1;
                let when = self
                    .arrivals
                    .iter()
                    .find(|(offset, _)| *offset > end)
                    .map_or_else(Instant::now, |(_, when)| *when);
                return (position, when);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok((when, bytes)) => {
                    self.seen.extend_from_slice(&bytes);
                    self.arrivals.push((self.seen.len(), when));
                }
                Err(_) => panic!(
                    "{needle:?} never appeared; the terminal showed:\n{}",
                    String::from_utf8_lossy(&self.seen)
                ),
            }
        }
    }

    fn type_key(&mut self, key: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(key.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for `keel` to exit; returns everything it printed.
    fn finish(mut self) -> String {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        while let Ok((_, bytes)) = self.chunks.recv_timeout(Duration::from_secs(5)) {
            self.seen.extend_from_slice(&bytes);
        }
        let screen = String::from_utf8_lossy(&self.seen).into_owned();
        assert!(status.success(), "keel failed: {status}\n{screen}");
        screen
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// A workspace with `script.json` holding `turns`, and the `run` arguments.
fn fixture(turns: Value, mode: &str) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
    let path = |p: &Path| p.display().to_string();
    let args = vec![
        "run".into(),
        "--script".into(),
        path(&script),
        "--workspace".into(),
        path(&ws),
        "--session-dir".into(),
        path(&dir.path().join("sessions")),
        "--mode".into(),
        mode.into(),
        "go".into(),
    ];
    (dir, args)
}

const LOOP: &str = "echo tick 1; sleep 1; echo tick 2; sleep 1; echo tick 3; sleep 1";

fn loop_turns() -> Value {
    json!([
        {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": LOOP}}]},
        {"content": [{"type": "text", "text": "The loop ticked."}]}
    ])
}

/// The first loop line shows at least a second before the call's end does.
fn assert_live(terminal: &mut Terminal) {
    let (tick, tick_at) = terminal.wait_for("tick 1", 0);
    let (end, end_at) = terminal.wait_for("lines of output", tick);
    assert!(tick < end);
    let lead = end_at.duration_since(tick_at);
    assert!(
        lead >= Duration::from_millis(1000),
        "tick 1 arrived only {lead:?} before the call's end"
    );
}

#[test]
fn loop_output_appears_while_the_call_runs() {
    let (dir, args) = fixture(loop_turns(), "auto");
    let mut terminal = Terminal::start(&args, dir.path(), false);
    assert_live(&mut terminal);
    let screen = terminal.finish();
    assert!(
        screen.contains('\u{1b}'),
        "a terminal gets colour: {screen:?}"
    );
    assert!(screen.contains("bash echo tick 1; sleep 1"), "{screen}");
    assert!(screen.contains("settled"), "{screen}");
    assert!(!screen.contains("{\""), "no JSON in the view: {screen}");
}

#[test]
fn no_color_output_has_no_escape_codes_and_is_still_live() {
    let (dir, args) = fixture(loop_turns(), "auto");
    let mut terminal = Terminal::start(&args, dir.path(), true);
    assert_live(&mut terminal);
    let screen = terminal.finish();
    assert!(
        !screen.contains('\u{1b}'),
        "an escape code with NO_COLOR: {screen:?}"
    );
    for shown in [
        "→ bash echo tick 1",
        "│ tick 3",
        "✓ bash",
        "The loop ticked.",
        "── settled",
    ] {
        assert!(screen.contains(shown), "{shown:?} missing: {screen}");
    }
}

#[test]
fn ask_prompts_one_line_and_always_holds_for_the_session() {
    let append = |text: &str| {
        json!({"content": [{"type": "tool_call", "name": "bash",
            "arguments": {"command": format!("echo {text} >> log.txt")}}]})
    };
    let turns = json!([
        append("one"),
        append("one"),
        append("two"),
        {"content": [{"type": "text", "text": "Logged."}]}
    ]);
    let (dir, args) = fixture(turns, "ask");
    let mut terminal = Terminal::start(&args, dir.path(), true);
    let (first, _) = terminal.wait_for("[y]es once / [a]lways this session / [N]o:", 0);
    terminal.type_key("a");
    let (answered, _) = terminal.wait_for("yes, always for this session", first);
    let (second, _) = terminal.wait_for("? allow bash echo two >> log.txt", answered);
    terminal.type_key("n");
    terminal.wait_for("no\r\n", second);
    let screen = terminal.finish();
    let prompts: Vec<&str> = screen.lines().filter(|l| l.contains("? allow")).collect();
    assert_eq!(prompts.len(), 2, "the rule answered the repeat: {screen}");
    assert!(
        prompts[0].contains("? allow bash echo one >> log.txt"),
        "{screen}"
    );
    assert!(
        !screen.contains("\"command\""),
        "no JSON arguments: {screen}"
    );
    let log = std::fs::read_to_string(dir.path().join("ws/log.txt")).unwrap();
    assert_eq!(log, "one\none\n", "allowed twice, denied once");
    let sessions = dir.path().join("sessions");
    let session = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let stored = std::fs::read_to_string(session.path()).unwrap();
    assert_eq!(stored.matches("\"kind\":\"permission_rule\"").count(), 1);
    assert!(stored.contains("\"source\":\"session_rule\""), "{stored}");
}

/// A run whose answer is Markdown, with a failing command, an edit and a
/// new binary file.
fn view_turns() -> Value {
    let failing = "for i in $(seq 1 30); do echo out line $i; done; exit 3";
    let binary = "printf '\\211PNG\\r\\n\\032\\n\\000\\001\\002' > logo.png";
    json!([
        {"content": [
            {"type": "tool_call", "name": "bash", "arguments": {"command": failing}}
        ]},
        {"content": [
            {"type": "tool_call", "name": "write", "arguments": {"path": "notes.txt", "content": "alpha\nbeta\n"}}
        ]},
        {"content": [
            {"type": "tool_call", "name": "edit", "arguments": {"path": "notes.txt",
                "edits": [{"old_text": "beta", "new_text": "gamma"}]}},
            {"type": "tool_call", "name": "bash", "arguments": {"command": binary}}
        ]},
        {"content": [{"type": "text", "text": "## Plan done\n- ran **the checks** with `make`\n"}]}
    ])
}

#[test]
fn the_view_shows_failures_diffs_files_and_markdown() {
    let (dir, args) = fixture(view_turns(), "auto");
    let screen = Terminal::start(&args, dir.path(), false).finish();
    let read = plain(&screen);
    for shown in [
        // A failed command: its last lines, not only the last one.
        "│ out line 25",
        "out line 30",
        // The edit's diff, coloured.
        "-beta",
        "+gamma",
        // The patch summary: each file, a binary one by name and size.
        "── changed 2 files",
        "A logo.png  binary, 11 B",
        "A notes.txt  +2 −0",
        // Markdown rendered: no marks left.
        "Plan done",
        "• ran the checks with make",
    ] {
        assert!(read.contains(shown), "{shown:?} missing: {read}");
    }
    assert!(!read.contains("## Plan"), "{read}");
    assert!(
        !read.contains("GIT binary patch") && !read.contains("literal 11"),
        "{read}"
    );

    // Without colour the answer is printed as the model wrote it.
    let (dir, args) = fixture(view_turns(), "auto");
    let screen = Terminal::start(&args, dir.path(), true).finish();
    assert!(screen.contains("## Plan done"), "{screen}");
    assert!(
        screen.contains("- ran **the checks** with `make`"),
        "{screen}"
    );
}

/// `screen` without escape sequences and carriage returns.
fn plain(screen: &str) -> String {
    let mut out = String::new();
    let mut chars = screen.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn resume_on_a_terminal_without_a_session_picks_one_from_a_list() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!({"by_history": true, "turns": [
            {"content": [{"type": "tool_call", "name": "write", "arguments": {"path": "a.txt", "content": "A"}}]},
            {"content": [{"type": "text", "text": "wrote a"}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let path = |p: &Path| p.display().to_string();
    let run = |prompt: &str, failpoint: bool| {
        let mut command = common::keel_command();
        command
            .args([
                "run",
                "--output-format",
                "json",
                "--mode",
                "auto",
                "--script",
            ])
            .arg(&script)
            .arg("--workspace")
            .arg(&ws)
            .arg("--session-dir")
            .arg(dir.path().join("sessions"))
            .arg(prompt)
            .current_dir(&ws)
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if failpoint {
            command.env(keel_failpoint::ENV, keel_failpoint::AFTER_EFFECT_STARTED);
        }
        command.status().unwrap()
    };
    assert!(run("an older task", false).success());
    std::fs::remove_file(ws.join("a.txt")).unwrap();
    assert_eq!(run("the task a crash cut short", true).code(), None);
    let args = vec![
        "resume".to_owned(),
        "--script".into(),
        path(&script),
        "--mode".into(),
        "auto".into(),
        "--color".into(),
        "never".into(),
        "--session-dir".into(),
        path(&dir.path().join("sessions")),
    ];
    let mut terminal = Terminal::start(&args, &ws, true);
    let (listed, _) = terminal.wait_for("resume which session?", 0);
    let screen = String::from_utf8_lossy(&terminal.seen).into_owned();
    let first = screen.find("  1  ").unwrap();
    assert!(
        screen[first..].contains("the task a crash cut short"),
        "{screen}"
    );
    assert!(screen.contains("an older task"), "{screen}");
    terminal.type_key("1\n");
    terminal.wait_for("settled", listed);
    terminal.finish();
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "A",
        "the crashed run was recovered"
    );
}
