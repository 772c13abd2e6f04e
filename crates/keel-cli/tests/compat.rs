//! Sessions survive upgrades (issue 27), through `keel` as a process.
//!
//! `tests/fixtures/sessions/v<N>/` holds sessions that Keel's session
//! writer of format version N wrote with the scripted provider, one per
//! case — a settled run with tool calls, a fork of it, a session with a
//! compaction checkpoint, a run SIGKILLed mid-batch with its journal of
//! command receipts, a session holding an `always` permission rule — beside
//! the workspaces they ran in and a `manifest.json` that names the format
//! version and each case's session. `scripts/gen-compat-fixtures.sh` writes
//! them (see [`the_writer_still_writes_what_the_fixtures_of_its_version_hold`]);
//! the only change made to what the writer wrote is that the temporary
//! directory the runs used is replaced by `/keel-compat` (and the records
//! holding it re-framed with their checksum), and the summary sidecars —
//! caches, stamped with this machine's file times — are left out.
//!
//! - Every version's fixtures are listed, shown, drawn and exported (writing
//!   nothing), continued by `keel run --session`, and the crashed one is
//!   refused by `keel run` and resumed by `keel resume`, by this build. A
//!   build that drops the reader of an older version fails here.
//! - The format-change guard: the same scripted runs by this build, with
//!   ids, times, checksums, token estimates and target bindings masked, must give exactly
//!   the fixtures of the version it writes. A writer whose output changed
//!   without a new version fails, saying what to do.
//! - A session of a newer format version is refused with `session_version`
//!   by every command, and not a byte of the session directory changes: no
//!   append, no summary sidecar, no journal, no lock file.
//!
//! Every test works on a private copy of the fixtures; the checked-in files
//! are only read.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod live;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// What the temporary root the fixture runs used is replaced with.
const STAND_IN: &str = "/keel-compat";

/// The cases, in the order they are written and compared.
const CASES: [&str; 5] = ["settled", "fork", "compaction", "crash", "always"];

/// Set (to anything) to write the fixtures of the version this build
/// writes instead of checking them: `scripts/gen-compat-fixtures.sh`.
const UPDATE: &str = "KEEL_UPDATE_COMPAT_FIXTURES";

/// The compaction summary the scripted model writes (Keel's headings).
const SUMMARY: &str = "## Goal\n- count to 1500\n## Constraints and preferences\n- none\n## Done and verified\n- seq 1 1500 printed 1 to 1500\n## In progress\n- none\n## Blocked\n- none\n## Key decisions\n- none\n## Exact files, symbols, commands and errors\n- seq 1 1500\n## Next steps\n- answer the next question";

/// The directory of every version's fixtures.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sessions")
}

/// `(version, directory)` of each `v<N>` fixture directory, oldest first.
fn versions() -> Vec<(u64, PathBuf)> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(fixtures())
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| {
                    let name = entry.file_name().to_str()?.to_owned();
                    let version = name.strip_prefix('v')?.parse().ok()?;
                    Some((version, entry.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// The workspace directory a case ran in (a fork runs in its source's).
fn workspace_of(case: &str) -> &str {
    if case == "fork" { "settled" } else { case }
}

// ---------------------------------------------------------------------------
// Running keel

/// What one `keel` process did.
struct Ran {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// Every stdout line that is JSON.
    fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The first stdout line of this `type`.
    fn line(&self, kind: &str) -> Value {
        self.lines()
            .into_iter()
            .find(|line| line["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} line in:\n{}", self.said()))
    }

    /// Every event of this `type`.
    fn events(&self, kind: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|line| line["type"] == kind)
            .collect()
    }

    /// All it printed, for a failure message.
    fn said(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// A temporary root: `home` (HOME and the XDG directories of every `keel`
/// started here), `scripts`, `sessions` (the session directory) and
/// `workspaces/<name>`.
struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["home", "scripts", "sessions", "workspaces"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        World { dir }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn sessions(&self) -> PathBuf {
        self.root().join("sessions")
    }

    /// The workspace `name`, created when missing.
    fn workspace(&self, name: &str) -> String {
        let path = self.root().join("workspaces").join(name);
        std::fs::create_dir_all(&path).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// Writes the script `name` with these turns; its path.
    fn script(&self, name: &str, script: Value) -> String {
        let path = self.root().join("scripts").join(format!("{name}.json"));
        std::fs::write(&path, script.to_string()).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// Runs `keel ARGS` to its end with stdin closed (so `ask` gets no
    /// answer) and `env` added; HOME and XDG under `home`
    /// (`common::spawn_keel`).
    fn keel(&self, args: &[&str], env: &[(&str, &str)]) -> Ran {
        use std::os::unix::process::ExitStatusExt;
        let mut child = common::spawn_keel(args, &self.root().join("home"), env);
        drop(child.stdin.take());
        let output = child.wait_with_output().unwrap();
        Ran {
            code: output.status.code(),
            signal: output.status.signal(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `keel run` with `script` in workspace `workspace` and this world's
    /// session directory, `extra` flags before the prompt.
    fn run(
        &self,
        workspace: &str,
        script: &str,
        extra: &[&str],
        prompt: &str,
        env: &[(&str, &str)],
    ) -> Ran {
        self.command("run", workspace, script, extra, Some(prompt), env)
    }

    /// `keel SUBCOMMAND --script S --workspace W --session-dir D EXTRA [PROMPT]`.
    fn command(
        &self,
        subcommand: &str,
        workspace: &str,
        script: &str,
        extra: &[&str],
        prompt: Option<&str>,
        env: &[(&str, &str)],
    ) -> Ran {
        let workspace = self.workspace(workspace);
        let sessions = self.sessions();
        let mut args = vec![
            subcommand,
            "--script",
            script,
            "--workspace",
            &workspace,
            "--session-dir",
            sessions.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.extend(prompt);
        self.keel(&args, env)
    }

    /// `keel session ARGS --session-dir D`, asking for JSON where the
    /// tests read it: `list` as JSON Lines, `show`, `fork`, `salvage` and
    /// `compact` as one document; `tree` is text unless ARGS ask.
    fn session(&self, args: &[&str]) -> Ran {
        let sessions = self.sessions();
        let mut all = vec!["session"];
        all.extend_from_slice(args);
        let format = match args[0] {
            "list" => Some("stream-json"),
            "show" | "fork" | "salvage" | "compact" => Some("json"),
            _ => None,
        };
        if let Some(format) = format {
            all.extend(["--output-format", format]);
        }
        all.extend(["--session-dir", sessions.to_str().unwrap()]);
        self.keel(&all, &[])
    }

    /// `keel session show ID`, parsed; it must succeed.
    fn show(&self, id: &str) -> Value {
        let shown = self.session(&["show", id]);
        assert_eq!(shown.code, Some(0), "{}", shown.said());
        serde_json::from_str(shown.stdout.lines().next().unwrap()).unwrap()
    }

    /// The ids of the sessions in the session directory.
    fn session_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(self.sessions())
            .unwrap()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_str()?.to_owned();
                Some(name.strip_suffix(".jsonl")?.to_owned())
            })
            .collect();
        ids.sort();
        ids
    }
}

/// `{"turns": turns}`.
fn turns(turns: Value) -> Value {
    json!({ "turns": turns })
}

/// A turn that only answers `text`.
fn say(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// A tool call block.
fn call(tool: &str, arguments: Value) -> Value {
    json!({"type": "tool_call", "name": tool, "arguments": arguments})
}

// ---------------------------------------------------------------------------
// Writing the cases

/// Runs every case with this build in `world`; each case's session id.
fn write_cases(world: &World) -> BTreeMap<&'static str, String> {
    let mut ids = BTreeMap::new();

    // A settled run with tool calls: a parallel-free batch of a write and a
    // command, then a read, then the answer.
    let script = world.script(
        "settled",
        turns(json!([
            {"content": [
                {"type": "text", "text": "I will write the notes."},
                call("write", json!({"path": "notes.txt", "content": "one\n"})),
                call("bash", json!({"command": "cat notes.txt"}))
            ]},
            {"content": [call("read", json!({"path": "notes.txt"}))]},
            say("notes.txt holds one line.")
        ])),
    );
    let ran = world.run(
        "settled",
        &script,
        &["--mode", "auto"],
        "write the notes",
        &[],
    );
    assert_eq!(ran.code, Some(0), "{}", ran.said());
    let settled = ran.line("session")["id"].as_str().unwrap().to_owned();
    ids.insert("settled", settled.clone());

    // A fork of it at its first user message, continued there.
    let shown = world.show(&settled);
    let user = shown["branch"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["summary"].as_str().unwrap_or("").starts_with("user:"))
        .expect("a user message")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let script = world.script(
        "fork",
        turns(json!([{
            "expect": {"messages": 2, "last_user_contains": "another way"},
            "content": [{"type": "text", "text": "Another way, then."}]
        }])),
    );
    let ran = world.run(
        "settled",
        &script,
        &["--session", &settled, "--fork", &user],
        "try another way",
        &[],
    );
    assert_eq!(ran.code, Some(0), "{}", ran.said());
    let fork = ran.line("session")["id"].as_str().unwrap().to_owned();
    assert_ne!(fork, settled);
    ids.insert("fork", fork);

    // A session with a checkpoint: a long command output, a second run,
    // then `keel session compact` with a window it overfills.
    let script = world.script(
        "compaction-1",
        turns(json!([
            {"content": [call("bash", json!({"command": "seq 1 1500"}))]},
            say("Counted to 1500.")
        ])),
    );
    let ran = world.run(
        "compaction",
        &script,
        &["--mode", "auto"],
        "count to 1500",
        &[],
    );
    assert_eq!(ran.code, Some(0), "{}", ran.said());
    let compaction = ran.line("session")["id"].as_str().unwrap().to_owned();
    let script = world.script("compaction-2", turns(json!([say("Still 1500.")])));
    let ran = world.run(
        "compaction",
        &script,
        &["--session", &compaction],
        "and again?",
        &[],
    );
    assert_eq!(ran.code, Some(0), "{}", ran.said());
    let summary = world.script("summary", turns(json!([say(SUMMARY)])));
    let compacted = world.session(&[
        "compact",
        &compaction,
        "--script",
        &summary,
        "--context-window",
        "8192",
    ]);
    assert_eq!(compacted.code, Some(0), "{}", compacted.said());
    ids.insert("compaction", compaction);

    // A run SIGKILLed while the second command of its batch runs: the write
    // is applied, the first command finished (its receipts are complete),
    // the second is cut short (`.started` and an empty `.out`).
    let script = world.script(
        "crash",
        turns(json!([
            {"content": [
                call("write", json!({"path": "a.txt", "content": "A\n"})),
                call("bash", json!({"command": "echo one >> counter.txt; echo counted"})),
                call("bash", json!({"command": "sleep 30"}))
            ]},
            say("done")
        ])),
    );
    let before = world.session_ids();
    let point = format!("{}:2", keel_failpoint::IN_BASH);
    let ran = world.run(
        "crash",
        &script,
        &["--mode", "auto"],
        "write, count and wait",
        &[(keel_failpoint::ENV, &point)],
    );
    assert_eq!(
        ran.signal,
        Some(libc::SIGKILL),
        "the failpoint did not kill keel:\n{}",
        ran.said()
    );
    let crashed: Vec<String> = world
        .session_ids()
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert_eq!(crashed.len(), 1, "{crashed:?}");
    ids.insert("crash", crashed[0].clone());

    // An `ask` run whose write the host approves with scope `always`.
    let script = world.script(
        "always",
        turns(json!([
            {"content": [call("write", json!({"path": "notes.txt", "content": "one\n"}))]},
            say("done")
        ])),
    );
    let workspace = world.workspace("always");
    let sessions = world.sessions();
    let mut command = live::command(&world.root().join("home/data"));
    command
        .args(["run", "--input-format", "stream-json", "--output-format"])
        .args(["stream-json", "--mode", "ask", "--script", script.as_str()])
        .args(["--workspace", workspace.as_str(), "--session-dir"])
        .arg(&sessions)
        .arg("write the notes, asking")
        .env("HOME", world.root().join("home"))
        .current_dir(world.root().join("home"));
    let mut live = live::Live::start(command);
    let request = live.event("permission_requested");
    live.send(
        &json!({
            "type": "permission_answer",
            "request_id": request["request_id"],
            "decision": "approve",
            "scope": "always",
        })
        .to_string(),
    );
    let result = live.result();
    assert_eq!(result["state"], "settled", "{result}");
    let always = result["session_id"].as_str().unwrap().to_owned();
    let (code, stderr, _) = live.finish();
    assert_eq!(code, 0, "{stderr}");
    ids.insert("always", always);
    ids
}

// ---------------------------------------------------------------------------
// Fixture trees

/// Relative path (with `/`) → bytes.
type Tree = BTreeMap<String, Vec<u8>>;

/// Every file under `dir`, by its path relative to `dir`.
fn read_tree(dir: &Path) -> Tree {
    let mut tree = Tree::new();
    for path in common::files_under(dir) {
        let relative = path.strip_prefix(dir).unwrap().to_str().unwrap().to_owned();
        tree.insert(relative, std::fs::read(&path).unwrap());
    }
    tree
}

/// Replaces the fixture directory `dir` with `tree`.
fn write_tree(dir: &Path, tree: &Tree) {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    for (relative, bytes) in tree {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

/// A record line with its checksum recomputed over its bytes before
/// `,"crc":` (docs/session-format.md, "Checksums").
fn reframe(line: &str) -> String {
    let body = line.strip_suffix('\n').unwrap_or(line);
    let at = body
        .rfind(",\"crc\":\"")
        .expect("a record line ends in its crc");
    let framed = &body[..at];
    format!(
        "{framed},\"crc\":\"{:08x}\"}}\n",
        crc32fast::hash(framed.as_bytes())
    )
}

/// The fixture `world` makes: its sessions (without summary sidecars) and
/// workspaces with its root replaced by [`STAND_IN`], and the manifest.
/// Returns the format version the sessions carry.
fn fixture_of(world: &World, ids: &BTreeMap<&'static str, String>) -> (u64, Tree) {
    let root = world.root().to_str().unwrap().to_owned();
    let canonical = world.root().canonicalize().unwrap();
    let canonical = canonical.to_str().unwrap().to_owned();
    let strip = |text: &str| text.replace(&canonical, STAND_IN).replace(&root, STAND_IN);
    let mut tree = Tree::new();
    let mut version = None;
    for path in common::files_under(&world.sessions()) {
        let relative = path.strip_prefix(world.sessions()).unwrap();
        let relative = relative.to_str().unwrap().to_owned();
        if relative.ends_with(".meta.json") {
            continue;
        }
        if relative.contains(".snapshots/objects/") {
            // Workspace snapshots (version 3): content-addressed objects,
            // kept byte for byte (their names are their hashes).
            tree.insert(
                format!("sessions/{relative}"),
                std::fs::read(&path).unwrap(),
            );
            continue;
        }
        let text = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
        let stripped = if relative.ends_with(".jsonl") {
            let mut lines = text.split_inclusive('\n');
            let header = lines.next().unwrap();
            let found = serde_json::from_str::<Value>(header).unwrap()["version"]
                .as_u64()
                .unwrap();
            assert_eq!(*version.get_or_insert(found), found, "one version");
            let mut out = strip(header);
            for line in lines {
                let replaced = strip(line);
                out.push_str(&if replaced == line {
                    replaced
                } else {
                    reframe(&replaced)
                });
            }
            out
        } else {
            assert!(
                relative.contains(".journal/"),
                "a file Keel was not expected to write in the session directory: {relative}"
            );
            if relative.ends_with(".started") {
                let started: Value = serde_json::from_str(&text).unwrap();
                assert!(
                    started["pid"].is_null(),
                    "a receipt names a process of this machine (was the command not \
                     sandboxed?): {text}"
                );
            }
            strip(&text)
        };
        tree.insert(format!("sessions/{relative}"), stripped.into_bytes());
    }
    let workspaces = world.root().join("workspaces");
    for path in common::files_under(&workspaces) {
        let relative = path.strip_prefix(&workspaces).unwrap().to_str().unwrap();
        tree.insert(
            format!("workspaces/{relative}"),
            std::fs::read(&path).unwrap(),
        );
    }
    let version = version.expect("the runs wrote sessions");
    let cases: serde_json::Map<String, Value> = CASES
        .iter()
        .map(|case| {
            let entry = json!({"session": ids[case], "workspace": workspace_of(case)});
            ((*case).to_owned(), entry)
        })
        .collect();
    let manifest = json!({
        "format_version": version,
        "written_by": format!("keel {}", env!("CARGO_PKG_VERSION")),
        "regenerate": "scripts/gen-compat-fixtures.sh",
        "stand_in": STAND_IN,
        "cases": cases,
    });
    let mut manifest = serde_json::to_string_pretty(&manifest).unwrap();
    manifest.push('\n');
    tree.insert("manifest.json".into(), manifest.into_bytes());
    for (relative, bytes) in &tree {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.contains(&root) && !text.contains(&canonical),
            "{relative} still names the temporary root"
        );
    }
    (version, tree)
}

/// The manifest of a fixture tree.
fn manifest(tree: &Tree) -> Value {
    serde_json::from_slice(&tree["manifest.json"]).unwrap()
}

// ---------------------------------------------------------------------------
// What the guard compares

/// Keys whose numbers are wall-clock times.
const TIME_KEYS: [&str; 4] = ["created", "timestamp", "started_ms", "ended_ms"];
/// Keys whose numbers are token estimates (they count the system prompt,
/// which names the date and the workspace).
const TOKEN_KEYS: [&str; 2] = ["tokens_before", "tokens_after"];
/// Keys whose values hash where a target resolved on the machine that
/// wrote them (a path beneath a temporary directory, a device and inode).
const BINDING_KEYS: [&str; 1] = ["binding_sha256"];

/// Whether `text` is a UUID (`8-4-4-4-12` hex digits).
fn is_uuid(text: &[u8]) -> bool {
    text.len() == 36
        && text.iter().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                *c == b'-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// Names ids by first appearance, and receipts by the entry they belong to.
#[derive(Default)]
struct Masker {
    ids: HashMap<String, String>,
    receipts: HashMap<String, String>,
}

impl Masker {
    fn label(&mut self, id: &str) -> String {
        let next = format!("<id-{}>", self.ids.len() + 1);
        self.ids.entry(id.to_owned()).or_insert(next).clone()
    }

    /// `text` with every UUID and every known receipt hash in it named.
    fn text(&mut self, text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = String::new();
        let mut at = 0;
        while at < bytes.len() {
            if at + 64 <= bytes.len()
                && let Some(label) = text.get(at..at + 64).and_then(|h| self.receipts.get(h))
            {
                out.push_str(&format!("<receipt of {label}>"));
                at += 64;
            } else if at + 36 <= bytes.len() && is_uuid(&bytes[at..at + 36]) {
                let label = self.label(&text[at..at + 36]);
                out.push_str(&label);
                at += 36;
            } else {
                let c = text[at..].chars().next().unwrap();
                out.push(c);
                at += c.len_utf8();
            }
        }
        out
    }

    fn value(&mut self, value: &mut Value) {
        match value {
            Value::String(text) => *text = self.text(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.value(item)),
            Value::Object(map) => {
                for (key, item) in map.iter_mut() {
                    if item.is_number() && TIME_KEYS.contains(&key.as_str()) {
                        *item = Value::from("<time>");
                    } else if item.is_number() && TOKEN_KEYS.contains(&key.as_str()) {
                        *item = Value::from("<tokens>");
                    } else if item.is_string() && BINDING_KEYS.contains(&key.as_str()) {
                        *item = Value::from("<binding>");
                    } else if key == "crc" {
                        *item = Value::from("<crc>");
                    } else {
                        self.value(item);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Per case, the lines the guard compares: the case's session file, then
/// its receipts, ids and times masked (see [`Masker`]).
fn render(tree: &Tree) -> BTreeMap<String, Vec<String>> {
    let manifest = manifest(tree);
    let mut rendered = BTreeMap::new();
    for (case, entry) in manifest["cases"].as_object().unwrap() {
        let id = entry["session"].as_str().unwrap();
        let mut masker = Masker::default();
        let mut lines = Vec::new();
        let file = format!("sessions/{id}.jsonl");
        let Some(bytes) = tree.get(&file) else {
            rendered.insert(case.clone(), vec![format!("no {file}")]);
            continue;
        };
        let text = String::from_utf8_lossy(bytes);
        // A receipt is named by the SHA-256 of its call's `effect_started`
        // entry id; name it by that entry instead.
        let mut keys = Vec::new();
        for line in text.lines() {
            if let Some(key) = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|line| line.pointer("/r/entry/id").cloned())
                .and_then(|key| key.as_str().map(str::to_owned))
            {
                keys.push(key);
            }
        }
        let session = masker.label(id);
        for (number, line) in text.lines().enumerate() {
            let shown = match serde_json::from_str::<Value>(line) {
                Ok(mut value) => {
                    masker.value(&mut value);
                    value.to_string()
                }
                Err(_) => format!("not JSON: {}", masker.text(line)),
            };
            lines.push(format!("{session}.jsonl:{} {shown}", number + 1));
        }
        for key in keys {
            let hash = format!("{:x}", Sha256::digest(key.as_bytes()));
            let label = masker.label(&key);
            masker.receipts.insert(hash, label);
        }
        let journal = format!("sessions/{id}.journal/");
        let mut receipts = Vec::new();
        for (path, bytes) in tree.range(journal.clone()..) {
            let Some(name) = path.strip_prefix(&journal) else {
                break;
            };
            let name = masker.text(name);
            let content = match serde_json::from_slice::<Value>(bytes) {
                Ok(mut value) => {
                    masker.value(&mut value);
                    value.to_string()
                }
                Err(_) => format!("{:?}", masker.text(&String::from_utf8_lossy(bytes))),
            };
            receipts.push(format!("{session}.journal/{name} {content}"));
        }
        receipts.sort();
        lines.extend(receipts);
        rendered.insert(case.clone(), lines);
    }
    rendered
}

/// The first place where `pinned` and `now` differ: the case, the line
/// number and both lines (`None` where one side has no line).
fn first_difference(
    pinned: &BTreeMap<String, Vec<String>>,
    now: &BTreeMap<String, Vec<String>>,
) -> Option<(String, usize, Option<String>, Option<String>)> {
    let cases: Vec<&String> = pinned.keys().chain(now.keys()).collect();
    for case in cases {
        let empty = Vec::new();
        let (a, b) = (
            pinned.get(case).unwrap_or(&empty),
            now.get(case).unwrap_or(&empty),
        );
        for index in 0..a.len().max(b.len()) {
            if a.get(index) != b.get(index) {
                return Some((
                    case.clone(),
                    index + 1,
                    a.get(index).cloned(),
                    b.get(index).cloned(),
                ));
            }
        }
    }
    None
}

/// The guard: the fixtures of the version this build writes are exactly
/// what this build writes for the same scripted runs (ids, times,
/// checksums and token estimates masked). With `KEEL_UPDATE_COMPAT_FIXTURES`
/// set, it writes them instead (`scripts/gen-compat-fixtures.sh`), and only
/// that version's directory: older versions' fixtures stay as they were
/// written.
#[test]
fn the_writer_still_writes_what_the_fixtures_of_its_version_hold() {
    let world = World::new();
    let ids = write_cases(&world);
    let (version, tree) = fixture_of(&world, &ids);
    let dir = fixtures().join(format!("v{version}"));
    if std::env::var_os(UPDATE).is_some() {
        write_tree(&dir, &tree);
        eprintln!(
            "wrote {} ({} files) for session format version {version}",
            dir.display(),
            tree.len()
        );
        return;
    }
    let older: Vec<String> = versions()
        .iter()
        .map(|(version, _)| format!("v{version}"))
        .collect();
    assert!(
        dir.is_dir(),
        "This build writes session format version {version}, and there are no fixtures \
         for it in {} (there are: {older:?}). Run scripts/gen-compat-fixtures.sh to add \
         v{version}, and keep the older ones: this build must still open, show, continue \
         and resume them (docs/session-format.md, \"Versions and migrations\").",
        fixtures().display()
    );
    let pinned = render(&read_tree(&dir));
    let now = render(&tree);
    if let Some((case, line, was, is)) = first_difference(&pinned, &now) {
        panic!(
            "The session writer's output changed, but the session format version did not: \
             this build still writes version {version}, and for the same scripted runs it \
             writes something else than tests/fixtures/sessions/v{version}/ holds (ids, \
             times, checksums, token estimates and target bindings aside).\n\
             First difference: case `{case}`, line {line}:\n  \
             fixture: {}\n  \
             now:     {}\n\
             What to do (docs/session-format.md, \"Versions and migrations\"):\n\
             - If a Keel that reads version {version} could misread what is written now (a \
             new entry kind or record type, a field renamed, removed or given another type \
             or meaning, another framing), this is a new format: set VERSION in \
             crates/keel-session/src/jsonl/format.rs to {}, keep reading version {version} \
             (its fixtures must still open, show, continue and resume), and run \
             scripts/gen-compat-fixtures.sh to add the v{} fixtures beside v{version}.\n\
             - If the change only adds an optional field that version-{version} readers \
             ignore, or changes content rather than format (a message's wording, a \
             scenario), run scripts/gen-compat-fixtures.sh to rewrite v{version} and say \
             why in the commit.",
            was.as_deref().unwrap_or("(no such line)"),
            is.as_deref().unwrap_or("(no such line)"),
            version + 1,
            version + 1,
        );
    }
}

// ---------------------------------------------------------------------------
// Reading the fixtures

/// A private copy of fixture directory `dir`: its sessions (directories
/// 0700, files 0600, as Keel makes them) and workspaces; and its manifest.
fn copy_fixture(dir: &Path) -> (World, Value) {
    let world = World::new();
    let tree = read_tree(dir);
    for (relative, bytes) in &tree {
        if relative == "manifest.json" {
            continue;
        }
        let path = world.root().join(relative);
        let parent = path.parent().unwrap();
        std::fs::create_dir_all(parent).unwrap();
        if relative.starts_with("sessions/") {
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        std::fs::write(&path, bytes).unwrap();
        if relative.starts_with("sessions/") {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
    std::fs::set_permissions(world.sessions(), std::fs::Permissions::from_mode(0o700)).unwrap();
    (world, manifest(&tree))
}

/// Each version's fixtures, copied; at least one version must exist.
fn each_version() -> Vec<(u64, World, Value)> {
    let versions = versions();
    assert!(
        !versions.is_empty(),
        "no fixtures in {}: run scripts/gen-compat-fixtures.sh",
        fixtures().display()
    );
    versions
        .into_iter()
        .map(|(version, dir)| {
            let (world, manifest) = copy_fixture(&dir);
            (version, world, manifest)
        })
        .collect()
}

/// The session id of `case` in a manifest.
fn id_of<'a>(manifest: &'a Value, case: &str) -> &'a str {
    manifest["cases"][case]["session"].as_str().unwrap()
}

/// Path → (bytes, mode, modification time) of every file under `dir`,
/// directories included (their mode and entry count).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32, i64)> {
    let mut all = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            let mut count = 0;
            for entry in std::fs::read_dir(&path).unwrap().flatten() {
                stack.push(entry.path());
                count += 1;
            }
            all.insert(path, (vec![count], meta.mode(), 0));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            let mtime = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
            all.insert(path, (bytes, meta.mode(), mtime));
        }
    }
    all
}

#[test]
fn each_fixture_directory_is_tagged_with_the_format_version_of_its_sessions() {
    for (version, dir) in versions() {
        let tree = read_tree(&dir);
        let manifest = manifest(&tree);
        assert_eq!(manifest["format_version"], version, "{}", dir.display());
        let cases: Vec<&str> = manifest["cases"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = CASES.to_vec();
        expected.sort_unstable();
        assert_eq!(cases, expected, "v{version}: every case");
        for case in CASES {
            let file = format!("sessions/{}.jsonl", id_of(&manifest, case));
            assert!(tree.contains_key(&file), "v{version}: {case}: {file}");
        }
        let mut sessions = 0;
        for (relative, bytes) in &tree {
            if relative.starts_with("sessions/") && relative.ends_with(".jsonl") {
                sessions += 1;
                let header = bytes.split(|b| *b == b'\n').next().unwrap();
                let header: Value = serde_json::from_slice(header).unwrap();
                assert_eq!(header["format"], "keel-session", "{relative}");
                assert_eq!(header["version"], version, "v{version}: {relative}");
            }
            assert!(
                !relative.ends_with(".meta.json"),
                "v{version}: summary sidecars are caches of one machine: {relative}"
            );
        }
        assert_eq!(sessions, CASES.len(), "v{version}: one session per case");
    }
    assert!(!versions().is_empty(), "no fixtures");
}

#[test]
fn every_fixture_session_is_listed_shown_drawn_and_exported_and_nothing_is_written() {
    for (version, world, manifest) in each_version() {
        let before = snapshot(world.root());
        let listed = world.session(&["list", "--all"]);
        assert_eq!(listed.code, Some(0), "v{version}: {}", listed.said());
        let listed: Vec<Value> = listed.events("session_summary");
        assert_eq!(listed.len(), CASES.len(), "v{version}: {listed:?}");
        for case in CASES {
            let id = id_of(&manifest, case);
            let info = listed
                .iter()
                .find(|info| info["id"] == id)
                .unwrap_or_else(|| panic!("v{version}: {case} is not listed"));
            assert!(info["problem"].is_null(), "v{version}: {case}: {info}");
            assert_eq!(
                info["workspace"],
                format!("{STAND_IN}/workspaces/{}", workspace_of(case)),
                "v{version}: {case}"
            );
            let shown = world.show(id);
            let branch = shown["branch"].as_array().unwrap();
            let kinds: Vec<&str> = branch
                .iter()
                .map(|entry| entry["kind"].as_str().unwrap())
                .collect();
            let summaries: Vec<&str> = branch
                .iter()
                .map(|entry| entry["summary"].as_str().unwrap())
                .collect();
            match case {
                "settled" => {
                    assert_eq!(kinds.last(), Some(&"run_end"), "v{version}: {kinds:?}");
                    assert!(
                        summaries.iter().any(|s| s.contains("[calls write, bash]")),
                        "v{version}: {summaries:?}"
                    );
                    assert_eq!(kinds.iter().filter(|k| **k == "effect_started").count(), 2);
                }
                "fork" => {
                    assert_eq!(shown["parent_session"], id_of(&manifest, "settled"));
                    assert!(
                        summaries.contains(&"user: try another way"),
                        "v{version}: {summaries:?}"
                    );
                    assert!(!summaries.iter().any(|s| s.contains("[calls")));
                }
                "compaction" => assert!(kinds.contains(&"checkpoint"), "v{version}: {kinds:?}"),
                "crash" => {
                    assert_eq!(kinds.last(), Some(&"effect_started"), "v{version}");
                    assert!(!kinds.contains(&"run_end"), "v{version}: {kinds:?}");
                }
                "always" => {
                    assert!(kinds.contains(&"permission_rule"), "v{version}: {kinds:?}")
                }
                _ => unreachable!(),
            }
            let drawn = world.session(&["tree", id]);
            assert_eq!(drawn.code, Some(0), "v{version}: {case}: {}", drawn.said());
            assert!(
                drawn.stdout.lines().count() >= branch.len(),
                "{}",
                drawn.stdout
            );
            let exported = world.session(&["export", id]);
            assert_eq!(exported.code, Some(0), "v{version}: {}", exported.said());
            let exported: Value = serde_json::from_str(exported.stdout.trim()).unwrap();
            assert_eq!(
                exported["entries"].as_array().unwrap().len() as u64,
                info["entries"].as_u64().unwrap(),
                "v{version}: {case}: export holds every entry"
            );
        }
        assert!(
            before == snapshot(world.root()),
            "v{version}: reading the fixtures changed a file"
        );
    }
}

/// A script of one answer, whose request must hold `messages` messages
/// and end with a user message containing `last_user`.
fn one_answer(messages: usize, last_user: &str) -> Value {
    turns(json!([{
        "expect": {"messages": messages, "last_user_contains": last_user},
        "content": [{"type": "text", "text": "continued"}]
    }]))
}

#[test]
fn the_settled_fixture_its_fork_and_the_compacted_one_are_continued() {
    // The messages each request holds: the settled run's seven (the
    // prompt, three answers, three results) and the new prompt; the fork's
    // two prompts, its answer and the new prompt; for the compacted
    // session the checkpoint's summary, the turns it kept and the new
    // prompt — a reader that ignored the checkpoint would send seven.
    for (version, world, manifest) in each_version() {
        for (case, messages) in [("settled", 8), ("fork", 4), ("compaction", 5)] {
            let script = world.script(case, one_answer(messages, "go on"));
            let id = id_of(&manifest, case);
            let ran = world.run(
                workspace_of(case),
                &script,
                &["--session", id],
                "go on",
                &[],
            );
            assert_eq!(ran.code, Some(0), "v{version}: {case}: {}", ran.said());
            let result = ran.line("result");
            assert_eq!(result["state"], "settled", "v{version}: {case}");
            assert_eq!(result["session_id"], id, "v{version}: {case}");
            assert_eq!(ran.events("session_resumed").len(), 1, "v{version}: {case}");
        }
    }
}

#[test]
fn the_crashed_fixture_is_refused_by_run_and_resumed_by_resume_from_its_journal() {
    for (version, world, manifest) in each_version() {
        let id = id_of(&manifest, "crash");
        let file = world.sessions().join(format!("{id}.jsonl"));
        let bytes = std::fs::read(&file).unwrap();
        let script = world.script("next", one_answer(9, "go on"));
        let refused = world.run("crash", &script, &["--session", id], "go on", &[]);
        assert_eq!(refused.code, Some(2), "v{version}: {}", refused.said());
        assert_eq!(refused.line("startup_error")["code"], "session_interrupted");
        assert!(refused.said().contains("keel resume"), "{}", refused.said());
        assert_eq!(
            std::fs::read(&file).unwrap(),
            bytes,
            "v{version}: refused untouched"
        );

        // The resumed run sends the three results first.
        let script = world.script(
            "resumed",
            turns(json!([{
                "expect": {"tool_results": 3},
                "content": [{"type": "text", "text": "resumed"}]
            }])),
        );
        let resumed = world.command(
            "resume",
            "crash",
            &script,
            &[id, "--mode", "auto"],
            None,
            &[],
        );
        assert_eq!(resumed.code, Some(0), "v{version}: {}", resumed.said());
        assert_eq!(resumed.line("result")["state"], "settled");
        let actions: Vec<(String, String)> = resumed
            .events("effect_recovered")
            .iter()
            .map(|event| {
                (
                    event["call_id"].as_str().unwrap().to_owned(),
                    event["action"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            actions,
            [
                ("call_1_1", "already_applied"),
                ("call_1_2", "recovered_from_receipt"),
                ("call_1_3", "interrupted"),
            ]
            .map(|(call, action)| (call.to_owned(), action.to_owned())),
            "v{version}: the write (call_1_1) was done, the first command's receipt \
             says it finished, the second was cut short"
        );
        // The recorded workspace is the stand-in: the host named this one.
        assert!(
            resumed
                .events("warning")
                .iter()
                .any(|warning| warning["code"] == "workspace_moved"),
            "v{version}: {}",
            resumed.said()
        );
        let workspace = PathBuf::from(world.workspace("crash"));
        assert_eq!(
            std::fs::read_to_string(workspace.join("counter.txt")).unwrap(),
            "one\n",
            "v{version}: no command ran again"
        );
        assert_eq!(
            std::fs::read_to_string(workspace.join("a.txt")).unwrap(),
            "A\n"
        );
        let script = world.script("after", turns(json!([say("after")])));
        let again = world.run("crash", &script, &["--session", id], "go on", &[]);
        assert_eq!(again.code, Some(0), "v{version}: {}", again.said());
    }
}

#[test]
fn the_always_fixtures_rule_is_read_and_asks_again_where_its_target_resolves_differently() {
    // The rule binds to where `notes.txt` resolved when it was approved
    // (the canonical path, device and inode of its directory): in a copy of
    // the workspace that is another directory, so the rule asks again —
    // with the reason that says a rule was found — and end of input denies.
    for (version, world, manifest) in each_version() {
        let id = id_of(&manifest, "always");
        let script = world.script(
            "always-next",
            turns(json!([
                {"content": [call("write", json!({"path": "notes.txt", "content": "two\n"}))]},
                say("done")
            ])),
        );
        let ran = world.run(
            "always",
            &script,
            &["--mode", "ask", "--session", id],
            "again",
            &[],
        );
        assert_eq!(ran.code, Some(0), "v{version}: {}", ran.said());
        let requested = ran.events("permission_requested");
        assert_eq!(requested.len(), 1, "v{version}: {}", ran.said());
        let reason = requested[0]["reason"].as_str().unwrap();
        assert!(reason.contains("asked again"), "v{version}: {reason}");
        let resolved = ran.events("permission_resolved");
        assert_eq!(
            resolved[0]["resolution"], "denied",
            "v{version}: {resolved:?}"
        );
        let workspace = PathBuf::from(world.workspace("always"));
        assert_eq!(
            std::fs::read_to_string(workspace.join("notes.txt")).unwrap(),
            "one\n"
        );
    }
}

/// The session format version this build writes: the header of a new
/// session.
fn version_written(world: &World) -> u64 {
    let script = world.script("hello", turns(json!([say("hello")])));
    let sessions = world.root().join("fresh");
    let workspace = world.workspace("fresh");
    let ran = world.keel(
        &[
            "run",
            "--script",
            &script,
            "--workspace",
            &workspace,
            "--session-dir",
            sessions.to_str().unwrap(),
            "hello",
        ],
        &[],
    );
    assert_eq!(ran.code, Some(0), "{}", ran.said());
    let path = ran.line("session")["path"].as_str().unwrap().to_owned();
    let text = std::fs::read_to_string(path).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    header["version"].as_u64().unwrap()
}

#[test]
fn a_session_of_a_newer_format_is_refused_by_every_command_and_nothing_is_written() {
    let versions = versions();
    let (_, dir) = versions.last().expect("fixtures");
    let (world, manifest) = copy_fixture(dir);
    let newer = version_written(&world) + 1;
    // The crashed session (it has a journal) one version ahead, the
    // settled one at the largest version a header can name.
    let crash = id_of(&manifest, "crash").to_owned();
    let settled = id_of(&manifest, "settled").to_owned();
    for (id, version) in [(&crash, newer), (&settled, u64::MAX)] {
        let path = world.sessions().join(format!("{id}.jsonl"));
        let text = std::fs::read_to_string(&path).unwrap();
        let (header, records) = text.split_once('\n').unwrap();
        let mut header: Value = serde_json::from_str(header).unwrap();
        header["version"] = json!(version);
        std::fs::write(&path, format!("{header}\n{records}")).unwrap();
    }
    let summary = world.script("summary", turns(json!([say(SUMMARY)])));
    let script = world.script("next", turns(json!([say("no")])));
    let before = snapshot(&world.sessions());
    let workspace_before = snapshot(&world.root().join("workspaces"));
    for id in [&crash, &settled] {
        let entry = {
            let text =
                std::fs::read_to_string(world.sessions().join(format!("{id}.jsonl"))).unwrap();
            let second: Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
            second["r"]["entry"]["id"].as_str().unwrap().to_owned()
        };
        let attempts = [
            (
                "run --session",
                world.run("crash", &script, &["--session", id], "go", &[]),
            ),
            (
                "run --fork",
                world.run(
                    "crash",
                    &script,
                    &["--session", id, "--fork", &entry],
                    "go",
                    &[],
                ),
            ),
            (
                "resume",
                world.command(
                    "resume",
                    "crash",
                    &script,
                    &[id, "--mode", "auto"],
                    None,
                    &[],
                ),
            ),
            ("session show", world.session(&["show", id])),
            (
                "session tree",
                world.session(&["tree", id, "--output-format", "json"]),
            ),
            ("session fork", world.session(&["fork", id, &entry])),
            ("session salvage", world.session(&["salvage", id])),
            (
                "session compact",
                world.session(&["compact", id, "--script", &summary]),
            ),
        ];
        for (what, ran) in attempts {
            assert_eq!(ran.code, Some(2), "{what} {id}: {}", ran.said());
            let error = ran.line("startup_error");
            assert_eq!(error["code"], "session_version", "{what}: {error}");
            let message = error["message"].as_str().unwrap();
            assert!(
                message.contains("written by a newer Keel") && message.contains("upgrade Keel"),
                "{what}: {message}"
            );
        }
    }
    let listed = world.session(&["list", "--all"]);
    assert_eq!(listed.code, Some(0), "{}", listed.said());
    for id in [&crash, &settled] {
        let info = listed
            .events("session_summary")
            .into_iter()
            .find(|info| info["id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} is not listed: {}", listed.said()));
        let problem = info["problem"].as_str().unwrap_or_default();
        assert!(problem.contains("written by a newer Keel"), "{info}");
    }
    let after = snapshot(&world.sessions());
    let changed: std::collections::BTreeSet<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|path| before.get(*path) != after.get(*path))
        .collect();
    assert!(
        changed.is_empty(),
        "the session directory changed (no file, sidecar, journal or lock may be \
         written): {changed:?}"
    );
    assert!(
        workspace_before == snapshot(&world.root().join("workspaces")),
        "a workspace changed"
    );
}
