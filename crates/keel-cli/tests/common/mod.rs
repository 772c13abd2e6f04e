//! Helpers shared by the CLI tests: run `keel` as a process, parse its JSON
//! Lines, and normalise volatile fields for snapshots.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod home;

/// What one `keel` invocation printed.
pub struct Output {
    pub code: i32,
    pub events: Vec<Value>,
    pub result: Value,
    pub startup_error: Option<Value>,
    /// The other lines (`workspace_changes`, `session`, a demo's notes), in order.
    pub extras: Vec<Value>,
    pub stderr: String,
}

/// Runs `keel demo NAME --case CASE`.
pub fn demo(name: &str, case: &str) -> Output {
    keel(&["demo", name, "--case", case], None, "")
}

/// Runs `keel ARGS` in `dir` with `stdin` as standard input.
pub fn keel(args: &[&str], dir: Option<&Path>, stdin: &str) -> Output {
    keel_os(args, dir, stdin)
}

/// `args` asking for JSON Lines where they run the agent (`run`, `resume`,
/// `demo NAME`) and name no output form (`--output-format`, `-q`): piped,
/// a run prints only its final message by default. The flag goes right
/// after the subcommand path.
pub fn with_stream_json<A: AsRef<std::ffi::OsStr>>(args: &[A]) -> Vec<std::ffi::OsString> {
    let named = args.iter().any(|arg| {
        let arg = arg.as_ref().to_string_lossy();
        arg == "-q" || arg == "--quiet" || arg.starts_with("--output-format")
    });
    let runs = subcommand_path(args).is_some_and(|(at, _)| {
        ["run", "resume", "demo"]
            .iter()
            .any(|name| args[at].as_ref() == *name)
    });
    match named || !runs {
        true => args.iter().map(|arg| arg.as_ref().to_owned()).collect(),
        false => with_format(args, "stream-json"),
    }
}

/// `args` with `--output-format FORMAT` right after the subcommand path
/// (`run`, `demo NAME`, `session show`, …).
pub fn with_format<A: AsRef<std::ffi::OsStr>>(args: &[A], format: &str) -> Vec<std::ffi::OsString> {
    let mut all: Vec<std::ffi::OsString> = args.iter().map(|arg| arg.as_ref().to_owned()).collect();
    if let Some((at, length)) = subcommand_path(args) {
        let at = at + length;
        all.splice(at..at, ["--output-format".into(), format.into()]);
    }
    all
}

/// Where the subcommand path starts (the first argument that is neither a
/// global flag nor its value) and how many arguments it has: two for
/// `session X`, `swebench X` and `demo NAME`, else one.
fn subcommand_path<A: AsRef<std::ffi::OsStr>>(args: &[A]) -> Option<(usize, usize)> {
    let text = |index: usize| args[index].as_ref().to_string_lossy().into_owned();
    let at = (0..args.len()).find(|&index| {
        let takes_value =
            index > 0 && (text(index - 1) == "--color" || text(index - 1) == "--log-file");
        !takes_value && !text(index).starts_with('-')
    })?;
    let two = ["session", "swebench", "demo"].contains(&text(at).as_str())
        && args
            .get(at + 1)
            .is_some_and(|next| !next.as_ref().to_string_lossy().starts_with('-'));
    Some((at, if two { 2 } else { 1 }))
}

/// [`keel`] with arguments of any bytes (e.g. not UTF-8).
pub fn keel_os<A: AsRef<std::ffi::OsStr>>(args: &[A], dir: Option<&Path>, stdin: &str) -> Output {
    let mut command = keel_command();
    command.args(with_stream_json(args));
    // Never write sessions into the real home directory.
    command.env(
        "XDG_DATA_HOME",
        std::env::temp_dir().join(format!("keel-test-data-{}", std::process::id())),
    );
    // Nor read the user's configuration.
    command.env("XDG_CONFIG_HOME", "/nonexistent/keel-test-config");
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let assert = assert_cmd::Command::from_std(command)
        .write_stdin(stdin)
        .assert();
    let output = assert.get_output();
    let stdout = String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8");
    let mut events = Vec::new();
    let mut result = Value::Null;
    let mut startup_error = None;
    let mut extras = Vec::new();
    for line in stdout.lines() {
        let value: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
        match line_kind(&value) {
            LineKind::Event => events.push(value),
            LineKind::Host("result") => result = value,
            LineKind::Host("startup_error") => startup_error = Some(value),
            LineKind::Host(_) | LineKind::Note => extras.push(value),
        }
    }
    if !events.is_empty() {
        check_stream_invariants(&events, &result);
    }
    Output {
        code: output.status.code().unwrap_or(-1),
        events,
        result,
        startup_error,
        extras,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// What a line of `keel`'s JSON output is, by its `type`.
pub enum LineKind {
    /// A `RunEvent` (it parses as one).
    Event,
    /// A `HostLine` (it parses as one): `result`, `workspace_changes`,
    /// `session`, `startup_error`.
    Host(&'static str),
    /// A demo's own step (`tree`, `fork`, `permission_decision`, …).
    Note,
}

/// Classifies a line; panics on a line without a `type`, and on a line
/// whose `type` is an event's or a host line's but whose shape is not.
pub fn line_kind(value: &Value) -> LineKind {
    let kind = value["type"]
        .as_str()
        .unwrap_or_else(|| panic!("a line without a type: {value}"));
    for host in ["result", "workspace_changes", "session", "startup_error"] {
        if kind == host {
            serde_json::from_value::<keel_protocol::HostLine>(value.clone())
                .unwrap_or_else(|e| panic!("not a host line: {value}: {e}"));
            return LineKind::Host(host);
        }
    }
    match serde_json::from_value::<keel_protocol::RunEvent>(value.clone()) {
        Ok(_) => LineKind::Event,
        Err(_) if value.get("seq").is_none() => LineKind::Note,
        Err(e) => panic!("not a run event: {value}: {e}"),
    }
}

/// The extra line of this `type` (e.g. `workspace_changes`, `session`).
pub fn extra<'a>(output: &'a Output, kind: &str) -> &'a Value {
    output
        .extras
        .iter()
        .find(|line| line["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} line in {:?}", output.extras))
}

/// Gapless `seq`, one run and session id, exactly one terminal event, last,
/// agreeing with the result line.
fn check_stream_invariants(events: &[Value], result: &Value) {
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], index as u64, "seq must be gapless");
        assert_eq!(event["run_id"], events[0]["run_id"]);
        assert_eq!(event["session_id"], events[0]["session_id"]);
    }
    let terminal: Vec<_> = events
        .iter()
        .filter(|e| {
            matches!(
                e["type"].as_str(),
                Some("run_settled" | "run_cancelled" | "run_failed")
            )
        })
        .collect();
    assert_eq!(terminal.len(), 1, "exactly one terminal event");
    assert!(
        std::ptr::eq(terminal[0], events.last().unwrap()),
        "the terminal event is last"
    );
    let state = terminal[0]["type"]
        .as_str()
        .unwrap()
        .trim_start_matches("run_");
    assert_eq!(
        result["state"], state,
        "the result agrees with the terminal event"
    );
}

/// One compact JSON line per event, without the volatile fields: run and
/// session ids and timestamps are dropped, context estimates blanked, other ids numbered by first
/// appearance, and the two host-timed kinds (`message_queued`,
/// `tool_execution_update`) left out and counted at the end. The events of a
/// parallel tool batch interleave by completion, so that region is printed
/// sorted, marked `~`, with its entry ids blanked.
pub fn normalize(events: &[Value]) -> String {
    let mut ids = HashMap::new();
    let mut lines = Vec::new();
    let mut updates = 0;
    let mut queued = Vec::new();
    let mut parallel: Option<Vec<String>> = None;
    for event in events {
        let kind = event["type"].as_str().unwrap_or_default();
        match kind {
            "tool_execution_update" => {
                updates += 1;
                continue;
            }
            "message_queued" => {
                queued.push(event["text"].as_str().unwrap_or_default().to_owned());
                continue;
            }
            _ => {}
        }
        let mut event = event.clone();
        let object = event.as_object_mut().unwrap();
        for volatile in ["run_id", "session_id", "timestamp", "seq"] {
            object.remove(volatile);
        }
        // Token estimates count the system prompt, which names the
        // temporary workspace, the date and the shell; a learned window
        // comes from such an estimate.
        if let Some(tokens) = object
            .get_mut("context")
            .and_then(|context| context.get_mut("estimated_tokens"))
        {
            *tokens = Value::from("<estimated>");
        }
        if kind.starts_with("compaction_") {
            for key in ["tokens_before", "tokens_after", "window"] {
                if let Some(value) = object.get_mut(key) {
                    *value = Value::from("<estimated>");
                }
            }
        }
        if let Some(window) = object
            .get_mut("context")
            .and_then(|context| context.get_mut("window"))
            .filter(|window| **window != 8_192)
        {
            *window = Value::from("<learned>");
        }
        let starts_parallel = kind == "tool_execution_start" && event["batch_mode"] == "parallel";
        let ends_region =
            kind == "message_start" || (kind == "session_entry" && event["kind"] == "message");
        if parallel.is_some() && ends_region {
            let mut region = parallel.take().unwrap();
            region.sort();
            lines.extend(region.into_iter().map(|line| format!("~ {line}")));
        }
        if starts_parallel && parallel.is_none() {
            parallel = Some(Vec::new());
        }
        match &mut parallel {
            Some(region) => {
                blank_ids(&mut event);
                region.push(event.to_string());
            }
            None => {
                rename_ids(&mut event, &mut ids);
                lines.push(event.to_string());
            }
        }
    }
    lines.push(format!("# message_queued: {queued:?}"));
    lines.push(format!(
        "# tool_execution_update events: {}",
        if updates > 0 { "some" } else { "none" }
    ));
    lines.join("\n")
}

fn blank_ids(value: &mut Value) {
    let mut blank = HashMap::new();
    rename_ids(value, &mut blank);
    fn to_entry(value: &mut Value) {
        match value {
            Value::String(text) if text.starts_with("<id-") => *text = "<entry>".into(),
            Value::Array(items) => items.iter_mut().for_each(to_entry),
            Value::Object(map) => map.values_mut().for_each(to_entry),
            _ => {}
        }
    }
    to_entry(value);
}

fn rename_ids(value: &mut Value, ids: &mut HashMap<String, String>) {
    match value {
        Value::String(text) if is_uuid(text) => {
            let next = format!("<id-{}>", ids.len() + 1);
            *text = ids.entry(text.clone()).or_insert(next).clone();
        }
        Value::String(text) if text.starts_with("perm-") => {
            if let Some((prefix, _hash)) = text.rsplit_once('-') {
                *text = format!("{prefix}-<binding>");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| rename_ids(item, ids)),
        Value::Object(map) => map.values_mut().for_each(|item| rename_ids(item, ids)),
        _ => {}
    }
}

fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.chars().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// The pids of processes whose command line is `sleep MARKER`.
pub fn sleepers(marker: &str) -> Vec<i32> {
    let wanted = format!("sleep\0{marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .map(|cmdline| String::from_utf8_lossy(&cmdline).starts_with(&wanted))
                .unwrap_or(false)
        })
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// Polls `done` every 20 ms until it holds or `limit` has passed; whether it held.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// The one way a test starts `keel` (`tests/harness.rs` holds every test
/// to it): the test binary's `keel` with HOME and the XDG directories under
/// a home of the test build's own (`CARGO_TARGET_TMPDIR/keel-test-home`,
/// never the developer's) until the caller sets its own, and the
/// environment that would change what `keel` does scrubbed
/// ([`scrub_env`]). Stdio and the current directory are the caller's.
pub fn keel_command() -> Command {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin!("keel"));
    isolate(&mut command);
    command
}

/// What [`keel_command`] does to the environment, for a `keel` started
/// through another program (`sh -c`, `setpriv`, a release binary).
pub fn isolate(command: &mut Command) {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("keel-test-home");
    command
        .env("HOME", &home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env_remove("KEEL_SERVER_TOKEN");
    scrub_env(command);
}

/// Whether `child` exits by itself within `limit`; past that it is killed
/// (and `false` returned), so a hang guard never leaves a process behind.
/// The child is not reaped: its output is still the caller's to collect.
pub fn exited_within(child: &mut std::process::Child, limit: Duration) -> bool {
    let exited = wait_until(limit, || child.try_wait().unwrap().is_some());
    if !exited {
        let _ = child.kill();
    }
    exited
}

/// A `keel` command with HOME and the XDG directories (data, config,
/// state) under `home` and `home` as the current directory, so nothing of
/// the user's is read or written; its stdio is the caller's to set.
pub fn isolated_keel(home: &Path) -> Command {
    let mut command = keel_command();
    command
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .current_dir(home);
    command
}

/// The variables of the developer's environment that would change what a
/// `keel` under test does (its log, its telemetry export) are removed.
pub fn scrub_env(command: &mut Command) {
    for name in [
        "KEEL_LOG",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "OTEL_SDK_DISABLED",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    ] {
        command.env_remove(name);
    }
}

/// A `keel` process started with piped stdio, never inherited: HOME and the
/// XDG directories under `home`, so nothing of the user's is read or
/// written; `env` adds variables. The caller owns (and must reap) it.
pub fn spawn_keel(args: &[&str], home: &Path, env: &[(&str, &str)]) -> std::process::Child {
    use std::process::Stdio;
    let mut command = isolated_keel(home);
    command
        .args(with_stream_json(args))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    command.spawn().expect("keel starts")
}

/// A `keel serve` process: its address, and its stderr as it is written.
pub struct Served {
    pub child: std::process::Child,
    pub address: std::net::SocketAddr,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Served {
    /// Starts `keel serve --listen 127.0.0.1:0 ARGS` and waits (bounded)
    /// for the address it prints.
    pub fn start(args: &[&str], home: &Path, env: &[(&str, &str)]) -> Served {
        use std::io::{BufRead, Read};
        let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let mut child = spawn_keel(&all, home, env);
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = std::sync::Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = sender.send(line);
            }
            // Keep reading so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match receiver.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "keel serve printed no address within 60 s; stderr:\n{}",
                    String::from_utf8_lossy(&stderr.lock().unwrap())
                );
            }
        };
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["type"], "listening", "{line}");
        let address = value["address"].as_str().unwrap().parse().unwrap();
        Served {
            child,
            address,
            stderr,
        }
    }

    /// What it has written to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Sends SIGTERM and waits (bounded) for the exit code.
    pub fn terminate(&mut self, limit: Duration) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every file under `dir` (recursively); none when it does not exist.
pub fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Runs `keel ARGS` exactly as given (no output form added) with HOME and
/// the XDG directories under `home`, `home` as the current directory,
/// `stdin` as standard input and stdout and stderr piped.
pub fn keel_plain(args: &[&str], home: &Path, stdin: &str) -> std::process::Output {
    let mut command = isolated_keel(home);
    command.args(args);
    assert_cmd::Command::from_std(command)
        .write_stdin(stdin)
        .output()
        .unwrap()
}

/// Whether Keel's sandbox is enforced here (`keel doctor`); on CI (`CI`
/// set) it must be, and a machine that cannot enforce it fails `test`.
/// Elsewhere the caller skips, saying so.
pub fn sandbox_enforced(test: &str) -> bool {
    let home = tempfile::tempdir().unwrap();
    let output = isolated_keel(home.path())
        .arg("doctor")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !stdout.contains("NOT enforceable") {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: the OS sandbox cannot be enforced on this CI machine: {stdout}"
    );
    eprintln!(
        "note: {test} skipped: this machine cannot enforce Keel's OS sandbox \
         (no user namespaces or Landlock; see `keel doctor`)"
    );
    false
}
