//! A `keel` process driven while it runs: write lines to its stdin, wait
//! for the JSON lines it prints, close its stdin, collect its exit.
//!
//! Waits are bounded (a hung `keel` fails the test with what it printed so
//! far) and nothing asserts on timing: every wait is for an event.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long any one wait may take before the test fails.
pub const LIMIT: Duration = Duration::from_secs(30);

/// A running `keel`.
pub struct Live {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every stdout line seen so far, parsed.
    pub seen: Vec<Value>,
    stderr: std::thread::JoinHandle<String>,
}

/// A `keel` command with the tests' isolation: no user configuration unless
/// the test sets `XDG_CONFIG_HOME`, sessions in `data`.
pub fn command(data: &std::path::Path) -> Command {
    let mut command = crate::common::keel_command();
    command
        .env("XDG_CONFIG_HOME", "/nonexistent/keel-test-config")
        .env("XDG_DATA_HOME", data)
        .env_remove("KEEL_LOG");
    command
}

impl Live {
    /// Starts `command` with piped stdin, stdout and stderr.
    pub fn start(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Writes one line to stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is still open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin (end of input).
    pub fn close(&mut self) {
        self.stdin = None;
    }

    /// Waits for the next stdout line that satisfies `wanted`, and returns it.
    pub fn wait_for(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let value: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|error| panic!("not JSON: {line}: {error}"));
                    self.seen.push(value.clone());
                    if wanted(&value) {
                        return value;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no {what} within {LIMIT:?}; seen: {:#?}", self.seen)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("keel ended before {what}; seen: {:#?}", self.seen)
                }
            }
        }
    }

    /// Waits for an event of this `type`.
    pub fn event(&mut self, kind: &str) -> Value {
        self.wait_for(kind, |value| value["type"] == kind)
    }

    /// Waits for the next run result.
    pub fn result(&mut self) -> Value {
        let line = self.wait_for("a result line", |value| result_of(value).is_some());
        result_of(&line).cloned().unwrap()
    }

    /// Waits (stdin still open) until keel exits by itself.
    pub fn wait_exit(&mut self) {
        let deadline = Instant::now() + LIMIT;
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("keel did not exit; seen: {:#?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Closes stdin, waits for the exit, reads the rest of stdout; returns
    /// the exit code and stderr.
    pub fn finish(mut self) -> (i32, String, Vec<Value>) {
        self.close();
        let deadline = Instant::now() + LIMIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("keel did not exit; seen: {:#?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(serde_json::from_str(&line).unwrap());
        }
        let stderr = self.stderr.join().unwrap();
        (status.code().unwrap_or(-1), stderr, self.seen)
    }
}

/// The run result a stdout line carries: `{"result": …}`, or a line typed
/// `result` (with or without a `result` field).
pub fn result_of(value: &Value) -> Option<&Value> {
    if value["type"] == "result" {
        return Some(value.get("result").unwrap_or(value));
    }
    let single = value.as_object().is_some_and(|object| object.len() == 1);
    value.get("result").filter(|_| single)
}

/// The session id of the run events in `seen`, in order of appearance.
pub fn session_ids(seen: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for value in seen {
        if let Some(id) = result_of(value).and_then(|result| result["session_id"].as_str()) {
            ids.push(id.to_owned());
        }
    }
    ids
}
