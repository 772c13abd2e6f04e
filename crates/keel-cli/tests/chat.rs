//! `keel chat` in a pseudo-terminal (issue 28): prompts answered in one
//! session, a follow-up typed while a run works, Ctrl-C cancelling a long
//! command without leaving the chat, `/mode plan` applying to the next
//! prompt, an unknown command, `/exit` with status 0; `keel` alone on a
//! terminal opening the chat (Ctrl-D leaves it), and printing help when
//! not on one.
//!
//! The scripted provider checks what each request holds (`expect`); the
//! test waits for text on the terminal, never for a time: every wait has a
//! generous deadline and fails with what the terminal showed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long one wait may take before the test fails.
const LIMIT: Duration = Duration::from_secs(60);

/// `keel` on the slave side of a pseudo-terminal; the test holds the master.
struct Terminal {
    child: Child,
    master: std::fs::File,
    screen: Arc<Mutex<String>>,
    /// Where the next wait starts reading.
    cursor: usize,
}

impl Terminal {
    /// Starts `keel ARGS` (isolated under `home`) with the terminal as its
    /// standard input, output and error.
    fn start(home: &Path, args: &[&str]) -> Self {
        let size = nix::pty::Winsize {
            ws_row: 50,
            ws_col: 200,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).unwrap();
        let slave = std::fs::File::from(pty.slave);
        let mut command = common::isolated_keel(home);
        command
            .args(["--color", "never"])
            .args(args)
            .env("TERM", "xterm")
            .env_remove("NO_COLOR")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        let child = command.spawn().unwrap();
        // The slave's last copies on this side go with the command.
        drop(command);
        let master = std::fs::File::from(pty.master);
        let mut reader = master.try_clone().unwrap();
        let screen = Arc::new(Mutex::new(String::new()));
        let shown = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            // Ends with EIO once keel and every copy of the slave are gone.
            while let Ok(read @ 1..) = reader.read(&mut buffer) {
                shown
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..read]));
            }
        });
        Self {
            child,
            master,
            screen,
            cursor: 0,
        }
    }

    /// Waits until `wanted` shows after the last text waited for; returns
    /// the rest of its line.
    fn expect(&mut self, wanted: &str) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            {
                let screen = self.screen.lock().unwrap();
                if let Some(at) = screen[self.cursor..].find(wanted) {
                    let start = self.cursor + at + wanted.len();
                    let rest = &screen[start..];
                    let end = rest.find(['\r', '\n']).unwrap_or(rest.len());
                    self.cursor = start;
                    return rest[..end].to_owned();
                }
            }
            if Instant::now() > deadline {
                let screen = self.screen.lock().unwrap();
                panic!(
                    "{wanted:?} did not show within {LIMIT:?}; after the last wait the terminal showed:\n{}",
                    &screen[self.cursor..]
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `text` (keys as they are: `\r` is Enter, `\x03` Ctrl-C).
    fn keys(&mut self, text: &str) {
        self.master.write_all(text.as_bytes()).unwrap();
        self.master.flush().unwrap();
    }

    /// Types a line and Enter.
    fn line(&mut self, text: &str) {
        self.keys(&format!("{text}\r"));
    }

    /// The exit code, once keel has ended.
    fn exit_code(&mut self) -> i32 {
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "keel did not exit; the terminal showed:\n{}",
                    self.screen.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn bash(command: &str) -> Value {
    json!([{"type": "tool_call", "name": "bash", "arguments": {"command": command}}])
}

fn text(text: &str) -> Value {
    json!([{"type": "text", "text": text}])
}

fn script(dir: &Path, turns: Value) -> String {
    let path = dir.join("script.json");
    std::fs::write(&path, json!({ "turns": turns }).to_string()).unwrap();
    path.display().to_string()
}

/// Whether the terminal is back in line mode with echo (as keel found it).
fn in_line_mode(terminal: &Terminal) -> bool {
    use nix::sys::termios::{LocalFlags, tcgetattr};
    let settings = tcgetattr(&terminal.master).unwrap();
    settings
        .local_flags
        .contains(LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG)
}

/// The session id and file of a `── session ID (PATH)` line's rest.
/// The session's full id (its file's name) and file, from the view's line
/// `── session SHORT (PATH)`; SHORT is the id's shortest unique prefix.
fn session(rest: &str) -> (String, PathBuf) {
    let (shown, path) = rest.split_once(" (").expect("a session line");
    let path = PathBuf::from(path.strip_suffix(')').expect("a session line ends with )"));
    let id = path.file_stem().unwrap().to_str().unwrap().to_owned();
    assert!(id.starts_with(shown), "{shown} is a prefix of {id}");
    (id, path)
}

#[test]
fn a_chat_runs_prompts_in_one_session_follows_up_cancels_and_switches_mode() {
    let home = tempfile::tempdir().unwrap();
    let workspace = home.path().join("project");
    std::fs::create_dir(&workspace).unwrap();
    // A marker only this test's long command has on its command line.
    let long = "30.0731";
    let script = script(
        home.path(),
        json!([
            {"expect": {"last_user_contains": "FIRST-PROMPT: say\nhello"}, "content": text("ANSWER-ONE")},
            {"expect": {"last_user_contains": "SECOND-PROMPT"},
             "content": bash("while [ ! -e go ]; do sleep 0.05; done; echo waited")},
            {"expect": {"tool_result_contains": "waited"}, "content": text("ANSWER-TWO")},
            {"expect": {"last_user_contains": "FOLLOW-UP-TEXT"}, "content": text("ANSWER-FOLLOW")},
            {"expect": {"last_user_contains": "LONG-PROMPT"}, "content": bash(&format!("sleep {long}"))},
            {"expect": {"last_user_contains": "PLAN-PROMPT"}, "content": text("ANSWER-PLAN")}
        ]),
    );
    let workspace_arg = workspace.display().to_string();
    let mut chat = Terminal::start(
        home.path(),
        &[
            "chat",
            "--mode",
            "full",
            "--script",
            &script,
            "--workspace",
            &workspace_arg,
        ],
    );
    chat.expect("keel chat · mode full");

    // Two prompts, one session; the first on two lines (a trailing `\`
    // continues it).
    chat.line("FIRST-PROMPT: say\\");
    chat.line("hello");
    chat.expect("ANSWER-ONE");
    chat.expect("── settled");
    let (first_id, path) = session(&chat.expect("── session "));

    chat.line("SECOND-PROMPT: wait for go");
    chat.expect("while [ ! -e go ]");
    // Typed while the run works: a follow-up, queued for the run.
    chat.line("FOLLOW-UP-TEXT: and then this");
    chat.expect("+ queued follow-up: FOLLOW-UP-TEXT");
    std::fs::write(workspace.join("go"), "").unwrap();
    chat.expect("ANSWER-TWO");
    chat.expect("ANSWER-FOLLOW");
    chat.expect("── settled");
    let (second_id, _) = session(&chat.expect("── session "));
    assert_eq!(
        second_id, first_id,
        "the second prompt continues the session"
    );

    // Ctrl-C cancels the long command's run; the chat stays.
    chat.line("LONG-PROMPT: sleep a while");
    chat.expect(&format!("sleep {long}"));
    assert!(
        common::wait_until(LIMIT, || !common::sleepers(long).is_empty()),
        "the long command started"
    );
    chat.keys("\x03");
    chat.expect("── cancelled");
    assert!(
        common::wait_until(LIMIT, || common::sleepers(long).is_empty()),
        "cancelling the run ended the long command"
    );

    // /mode plan applies to the next prompt.
    chat.line("/mode plan");
    chat.expect("mode plan from the next prompt on");
    chat.line("PLAN-PROMPT: plan it");
    chat.expect("· mode plan");
    chat.expect("ANSWER-PLAN");
    chat.expect("── settled");
    let (plan_id, _) = session(&chat.expect("── session "));
    assert_eq!(plan_id, first_id, "every prompt ran in one session");

    chat.line("/frobnicate");
    chat.expect("unknown command /frobnicate");
    chat.line("/exit");
    assert_eq!(chat.exit_code(), 0, "/exit leaves with status 0");

    // The session file holds every prompt, and the plan run's mode.
    let stored = std::fs::read_to_string(&path).unwrap();
    for prompt in [
        "FIRST-PROMPT",
        "SECOND-PROMPT",
        "FOLLOW-UP-TEXT",
        "LONG-PROMPT",
        "PLAN-PROMPT",
    ] {
        assert!(stored.contains(prompt), "{prompt} is in the session");
    }
    // The history: every line typed, readable by its owner only.
    let history = home.path().join("state/keel/history");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&history).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the history is its owner's only");
    let history = std::fs::read_to_string(&history).unwrap();
    assert!(history.contains("FIRST-PROMPT") && history.contains("/mode plan"));
}

#[test]
fn keel_alone_on_a_terminal_is_a_chat_and_ctrl_d_leaves_it() {
    let home = tempfile::tempdir().unwrap();
    // A provider from the configuration, as a user has one; never asked
    // here (no prompt is sent).
    std::fs::create_dir_all(home.path().join("config/keel")).unwrap();
    std::fs::write(
        home.path().join("config/keel/config.toml"),
        "provider = \"local\"\n[providers.local]\napi = \"openai-chat\"\n\
         base_url = \"http://127.0.0.1:9/v1\"\ndefault_model = \"local-model\"\n",
    )
    .unwrap();
    let mut chat = Terminal::start(home.path(), &[]);
    chat.expect("keel chat ·");
    chat.line("/cost");
    chat.expect("this chat: 0 turns");
    // One Ctrl-C with no run: the chat stays and says how to leave.
    chat.keys("\x03");
    chat.expect("Ctrl-C again within 2 s");
    chat.line("/help");
    chat.expect("/fork [ENTRY]");
    chat.keys("\x04");
    assert_eq!(chat.exit_code(), 0, "Ctrl-D on an empty line leaves with 0");
}

#[test]
fn a_second_ctrl_c_leaves_the_chat_with_130() {
    let home = tempfile::tempdir().unwrap();
    // Never asked: no prompt is sent.
    let script = script(home.path(), json!([{"content": text("unused")}]));
    let mut chat = Terminal::start(home.path(), &["chat", "--script", &script]);
    chat.expect("keel chat ·");
    chat.keys("\x03");
    chat.expect("Ctrl-C again within 2 s");
    // The editor reads again once its prompt is back (a key typed before
    // may be dropped as the terminal changes mode).
    chat.expect("› ");
    chat.keys("\x03");
    assert_eq!(chat.exit_code(), 130);
}

#[test]
fn keel_alone_off_a_terminal_prints_help_and_chat_refuses() {
    let home = tempfile::tempdir().unwrap();
    let alone = common::isolated_keel(home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(alone.status.code(), Some(0));
    let help = String::from_utf8_lossy(&alone.stderr);
    assert!(help.contains("Usage: keel"), "{help}");

    let chat = common::isolated_keel(home.path())
        .arg("chat")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(chat.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&chat.stderr);
    assert!(stderr.contains("keel chat needs a terminal"), "{stderr}");
}

#[test]
fn permission_questions_are_answered_inline_and_sessions_fork_and_resume() {
    // An approved command of `ask` runs in the OS sandbox.
    if !common::sandbox_enforced(
        "permission_questions_are_answered_inline_and_sessions_fork_and_resume",
    ) {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let workspace = home.path().join("project");
    std::fs::create_dir(&workspace).unwrap();
    let script = script(
        home.path(),
        json!([
            {"expect": {"last_user_contains": "ASK-PROMPT"}, "content": bash("echo PERMITTED-$((40 + 2))")},
            {"expect": {"tool_result_contains": "PERMITTED-42"}, "content": text("ANSWER-ASK")},
            {"expect": {"last_user_contains": "DENY-PROMPT"}, "content": bash("echo REFUSED-$((40 + 2))")},
            {"expect": {"last_user_contains": "DENY-PROMPT"}, "content": text("ANSWER-DENIED")},
            {"expect": {"last_user_contains": "FORK-PROMPT"}, "content": text("ANSWER-FORK")}
        ]),
    );
    let workspace_arg = workspace.display().to_string();
    let mut chat = Terminal::start(
        home.path(),
        &[
            "chat",
            "--mode",
            "ask",
            "--script",
            &script,
            "--workspace",
            &workspace_arg,
        ],
    );
    chat.expect("keel chat · mode ask");

    // The question is printed; the next line answers it.
    chat.line("ASK-PROMPT: run it");
    chat.expect("? allow");
    chat.line("y");
    chat.expect("yes, once");
    chat.expect("ANSWER-ASK");
    chat.expect("── settled");
    let (first_id, path) = session(&chat.expect("── session "));

    chat.line("DENY-PROMPT: run that");
    chat.expect("? allow");
    chat.line("n");
    chat.expect("ANSWER-DENIED");
    chat.expect("── settled");
    let stored = std::fs::read_to_string(&path).unwrap();
    assert!(stored.contains("PERMITTED-42"), "the approved call ran");
    assert!(
        !stored.contains("REFUSED-42"),
        "the denied call did not run"
    );

    chat.line("/sessions");
    chat.expect(&format!("* {}", &first_id[..8]));
    chat.line("/fork");
    let forked = chat.expect("forked: now in session ");
    assert_ne!(forked, first_id, "a fork is a new session");
    chat.line("FORK-PROMPT: go on in the fork");
    chat.expect("ANSWER-FORK");
    let (fork_id, _) = session(&chat.expect("── session "));
    assert_eq!(fork_id, forked, "the next prompt runs in the fork");

    chat.line(&format!("/resume {first_id}"));
    let resumed = chat.expect("now in session ");
    assert_eq!(resumed, first_id);
    chat.line("/cost");
    chat.expect("this chat: 5 turns");
    chat.line("/exit");
    assert_eq!(chat.exit_code(), 0);
}

#[test]
fn sigterm_during_a_run_cancels_it_and_leaves_with_143_and_the_terminal_as_it_was() {
    let home = tempfile::tempdir().unwrap();
    let long = "30.0932";
    let script = script(
        home.path(),
        json!([{"expect": {"last_user_contains": "SLEEP-PROMPT"}, "content": bash(&format!("sleep {long}"))}]),
    );
    let workspace = home.path().join("project");
    std::fs::create_dir(&workspace).unwrap();
    let workspace = workspace.display().to_string();
    let mut chat = Terminal::start(
        home.path(),
        &[
            "chat",
            "--mode",
            "full",
            "--script",
            &script,
            "--workspace",
            &workspace,
        ],
    );
    chat.expect("keel chat ·");
    chat.line("SLEEP-PROMPT: sleep");
    chat.expect(&format!("sleep {long}"));
    assert!(
        common::wait_until(LIMIT, || !common::sleepers(long).is_empty()),
        "the long command started"
    );
    // The editor reads (raw mode) while the run works.
    assert!(!in_line_mode(&chat));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(chat.child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert_eq!(chat.exit_code(), 143, "128 + SIGTERM");
    assert!(
        common::wait_until(LIMIT, || common::sleepers(long).is_empty()),
        "leaving cancelled the run and its command"
    );
    assert!(in_line_mode(&chat), "the terminal's settings are put back");
}

/// A checkpoint summary under Keel's eight headings.
const SUMMARY: &str = "## Goal\n- answer\n## Constraints and preferences\n- none\n## Done and verified\n- one answer\n## In progress\n- none\n## Blocked\n- none\n## Key decisions\n- none\n## Exact files, symbols, commands and errors\n- none\n## Next steps\n- answer again";

#[test]
fn model_and_compact_in_a_chat_apply_to_its_session() {
    let home = tempfile::tempdir().unwrap();
    let workspace = home.path().join("project");
    std::fs::create_dir(&workspace).unwrap();
    let workspace = workspace.display().to_string();
    // `/compact` builds its own provider from the same flags, so it reads
    // the script from its first turn: one turn serves both.
    let script = script(home.path(), json!([{"content": text(SUMMARY)}]));
    let mut chat = Terminal::start(
        home.path(),
        &[
            "chat",
            "--mode",
            "plan",
            "--script",
            &script,
            "--workspace",
            &workspace,
        ],
    );
    chat.expect("keel chat ·");
    chat.line("/compact");
    chat.expect("nothing to compact before the first prompt");
    let long = format!(
        "COMPACT-PROMPT: {}",
        "keep this long note about the answers in mind; ".repeat(20)
    );
    // /model applies to the next prompt.
    chat.line("/model chat-test-model");
    chat.expect("model chat-test-model from the next prompt on");
    chat.line(&long);
    chat.expect("· chat-test-model · mode plan");
    chat.expect("── settled");
    let (id, path) = session(&chat.expect("── session "));
    chat.line("/compact keep the answers");
    chat.expect(&format!("session {id}: checkpoint "));
    chat.line("/exit");
    assert_eq!(chat.exit_code(), 0);
    let stored = std::fs::read_to_string(path).unwrap();
    assert!(stored.contains("\"checkpoint\""), "a checkpoint entry");
}

#[test]
fn resume_on_a_terminal_picks_a_session_and_chats_on_in_it() {
    let home = tempfile::tempdir().unwrap();
    let workspace = home.path().join("project");
    std::fs::create_dir(&workspace).unwrap();
    let script_path = home.path().join("script.json");
    std::fs::write(
        &script_path,
        json!({"by_history": true, "turns": [
            {"content": text("FIRST-ANSWER")},
            {"expect": {"last_user_contains": "SECOND-PROMPT"}, "content": text("SECOND-ANSWER")}
        ]})
        .to_string(),
    )
    .unwrap();
    let script = script_path.display().to_string();
    let ws = workspace.display().to_string();
    let first = common::isolated_keel(home.path())
        .args([
            "run",
            "--output-format",
            "json",
            "--script",
            &script,
            "--workspace",
            &ws,
        ])
        .arg("FIRST-PROMPT")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(0));
    let result: Value = serde_json::from_slice(&first.stdout).unwrap();
    let first_id = result["session_id"].as_str().unwrap().to_owned();

    // No session named, nothing to recover, no prompt: pick, then chat.
    let mut chat = Terminal::start(
        home.path(),
        &["resume", "--script", &script, "--workspace", &ws],
    );
    chat.expect("FIRST-PROMPT");
    chat.expect("resume which session?");
    chat.line("");
    chat.expect("› ");
    chat.line("SECOND-PROMPT");
    chat.expect("SECOND-ANSWER");
    let (id, _) = session(&chat.expect("── session "));
    assert_eq!(id, first_id, "the chat goes on in the picked session");
    chat.line("/exit");
    assert_eq!(chat.exit_code(), 0);
}
