//! `keel run --session/--fork` and `keel session …` as processes, on a
//! session directory of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::keel;
use serde_json::Value;

/// Two runs' worth of turns: the second run must see the first one's history.
const SCRIPT: &str = r#"{"turns":[
  {"expect":{"messages":1},"content":[{"type":"text","text":"first answer"}]},
  {"expect":{"messages":3,"last_user_contains":"again"},"content":[{"type":"text","text":"second answer"}]}]}"#;

struct Fixture {
    dir: tempfile::TempDir,
    /// The session directory, outside the workspace (`dir`): Keel refuses
    /// one that a sandboxed command could write.
    store: tempfile::TempDir,
}

impl Fixture {
    fn new(script: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("script.json"), script).unwrap();
        let store = tempfile::tempdir().unwrap();
        Self { dir, store }
    }

    fn sessions(&self) -> String {
        self.store.path().display().to_string()
    }

    fn run(&self, extra: &[&str], prompt: &str) -> common::Output {
        let script = self.dir.path().join("script.json").display().to_string();
        let workspace = self.dir.path().display().to_string();
        let sessions = self.sessions();
        let mut args = vec![
            "run",
            "--output-format",
            "stream-json",
            "--script",
            &script,
            "--workspace",
            &workspace,
            "--session-dir",
            &sessions,
        ];
        args.extend_from_slice(extra);
        args.push(prompt);
        keel(&args, None, "")
    }

    fn session(&self, args: &[&str]) -> (i32, String) {
        let sessions = self.sessions();
        let mut all = vec!["session"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--session-dir", &sessions]);
        all.extend_from_slice(json_format(args[0]));
        // In the workspace the runs used: `session list` shows its sessions.
        let output = common::keel_command()
            .args(&all)
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        (
            output.status.code().unwrap(),
            String::from_utf8(output.stdout).unwrap(),
        )
    }
}

/// The JSON the tests read from `keel session SUBCOMMAND`: JSON Lines from
/// `list`, one document from `show`, `fork` and `salvage`; `tree` is read
/// as text.
fn json_format(subcommand: &str) -> &'static [&'static str] {
    match subcommand {
        "list" => &["--output-format", "stream-json"],
        "show" | "fork" | "salvage" => &["--output-format", "json"],
        _ => &[],
    }
}

fn session_line(output: &common::Output) -> &Value {
    common::extra(output, "session")
}

#[test]
fn a_run_is_stored_and_a_second_run_continues_it() {
    let fixture = Fixture::new(SCRIPT);
    let first = fixture.run(&[], "hello");
    assert_eq!(first.code, 0, "{:?}", first.result);
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();
    assert!(std::path::Path::new(session_line(&first)["path"].as_str().unwrap()).is_file());

    // A second process continues on the active leaf (the script checks the history).
    let mut script_two = serde_json::from_str::<Value>(SCRIPT).unwrap();
    script_two["turns"].as_array_mut().unwrap().remove(0);
    std::fs::write(
        fixture.dir.path().join("script.json"),
        script_two.to_string(),
    )
    .unwrap();
    let second = fixture.run(&["--session", &id[..13]], "hello again");
    assert_eq!(second.code, 0, "{:?}", second.result);
    assert_eq!(
        second.result["session_id"],
        id.as_str(),
        "a unique prefix names the session"
    );
    assert!(second.events.iter().any(|e| e["type"] == "session_resumed"));
    assert!(
        !second
            .events
            .iter()
            .any(|e| e["type"] == "session_entry" && e["kind"] == "configuration"),
        "an unchanged configuration is not recorded again"
    );

    let (code, listing) = fixture.session(&["list"]);
    assert_eq!(code, 0);
    let sessions: Vec<Value> = listing
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["title"], "hello");
    // Two runs: configuration, then per run its start snapshot, run_start,
    // user, assistant, its end snapshot and run_end.
    assert_eq!(sessions[0]["entries"], 13);
}

#[test]
fn fork_tree_show_and_export() {
    let fixture = Fixture::new(SCRIPT);
    let first = fixture.run(&[], "hello");
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();

    let (code, shown) = fixture.session(&["show", &id]);
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    let branch = shown["branch"].as_array().unwrap();
    assert_eq!(
        branch.len(),
        7,
        "configuration, workspace_snapshot, run_start, user, assistant, workspace_snapshot, run_end"
    );
    let user_entry = branch[3]["id"].as_str().unwrap().to_owned();

    // Fork at the user message (by the short suffix the tree shows) and continue there.
    let mut script = serde_json::from_str::<Value>(SCRIPT).unwrap();
    script["turns"] = serde_json::json!([{"expect": {"messages": 2, "last_user_contains": "other"}, "content": [{"type": "text", "text": "forked answer"}]}]);
    std::fs::write(fixture.dir.path().join("script.json"), script.to_string()).unwrap();
    let short = &user_entry[user_entry.len() - 8..];
    let forked = fixture.run(&["--session", &id, "--fork", short], "the other way");
    assert_eq!(forked.code, 0, "{:?}", forked.result);
    let fork_id = session_line(&forked)["id"].as_str().unwrap().to_owned();
    assert_ne!(fork_id, id);

    let (_, listing) = fixture.session(&["list"]);
    let fork_info: Value = listing
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|s| s["id"] == fork_id.as_str())
        .unwrap();
    assert_eq!(fork_info["parent_session"], id.as_str());

    let (code, tree) = fixture.session(&["tree", &fork_id]);
    assert_eq!(code, 0);
    assert!(
        tree.contains("← leaf") && tree.contains("user: the other way"),
        "{tree}"
    );
    assert!(
        tree.lines().all(|line| line.starts_with('*')),
        "a linear fork is all active: {tree}"
    );

    let export_path = fixture.dir.path().join("export.json");
    let (code, _) = fixture.session(&["export", &id, "--output", export_path.to_str().unwrap()]);
    assert_eq!(code, 0);
    let exported: Value =
        serde_json::from_str(&std::fs::read_to_string(&export_path).unwrap()).unwrap();
    assert_eq!(exported["id"], id.as_str());
    assert_eq!(exported["entries"].as_array().unwrap().len(), 7);

    let (code, forked_again) = fixture.session(&["fork", &id, short]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&forked_again).unwrap()["session"]["parent_session"],
        id.as_str()
    );
}

#[test]
fn bad_session_arguments_are_startup_errors() {
    let fixture = Fixture::new(SCRIPT);
    let missing = fixture.run(&["--session", "no-such-session"], "hi");
    assert_eq!(missing.code, 2);
    assert_eq!(missing.startup_error.unwrap()["code"], "session_not_found");
    let first = fixture.run(&[], "hello");
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();
    let bad_entry = fixture.run(&["--session", &id, "--fork", "zzzz"], "hi");
    assert_eq!(bad_entry.startup_error.unwrap()["code"], "entry_not_found");
    let hostile = fixture.run(&["--session", "../../etc/passwd"], "hi");
    assert_eq!(hostile.code, 2);

    // A damaged file is refused with the line, and left as it was.
    let path = fixture.store.path().join(format!("{id}.jsonl"));
    let mut bytes = std::fs::read(&path).unwrap();
    let second_line = bytes.iter().position(|&b| b == b'\n').unwrap() + 5;
    bytes[second_line] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let damaged = fixture.run(&["--session", &id], "hi");
    let error = damaged.startup_error.unwrap();
    assert_eq!(error["code"], "session_corrupt", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains(":2:"),
        "{error}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn the_session_tree_demo_branches_and_forks() {
    let output = common::keel_command()
        .args([
            "demo",
            "session-tree",
            "--output-format",
            "stream-json",
            "--case",
            "success",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let results: Vec<&Value> = lines.iter().filter(|l| l["type"] == "result").collect();
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r["state"] == "settled"));
    let trees: Vec<&Value> = lines.iter().filter(|l| l["type"] == "tree").collect();
    let original = trees[0]["lines"].as_array().unwrap();
    assert!(
        original
            .iter()
            .any(|l| l.as_str().unwrap().starts_with("├─")),
        "the original session branches"
    );
    assert!(
        original
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .contains("← leaf")
    );

    let output = common::keel_command()
        .args([
            "demo",
            "session-tree",
            "--output-format",
            "stream-json",
            "--case",
            "invalid-entry",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let codes: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "session_error")
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["invalid_entry", "session_locked"]);
    let counts = lines.iter().find(|l| l["type"] == "entries").unwrap();
    assert_eq!(
        counts["before"], counts["after"],
        "nothing stored was changed"
    );
}

impl Fixture {
    fn session_file(&self, id: &str) -> std::path::PathBuf {
        self.store.path().join(format!("{id}.jsonl"))
    }

    /// `keel session ARGS`, with its exit code, stdout and stderr.
    fn session_output(&self, args: &[&str]) -> std::process::Output {
        let sessions = self.sessions();
        common::keel_command()
            .arg("session")
            .args(args)
            .args(["--session-dir", &sessions])
            .args(json_format(args[0]))
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }
}

/// A first run's session, then its last line cut short as a crash would
/// leave it (and no summary sidecar, which a crash may also leave).
fn torn_session(fixture: &Fixture) -> (String, Vec<u8>) {
    let first = fixture.run(&[], "hello");
    assert_eq!(first.code, 0, "{:?}", first.result);
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();
    let path = fixture.session_file(&id);
    let full = std::fs::read(&path).unwrap();
    // Drop the run's last group (its end snapshot and `run_end`, two
    // lines), then tear the assistant message's line, as a crash while it
    // was written would.
    let line_start = |end: usize| full[..end].iter().rposition(|&byte| byte == b'\n').unwrap() + 1;
    let last_group = line_start(line_start(full.len() - 1) - 1);
    let torn = full[..last_group - 10].to_vec();
    std::fs::write(&path, &torn).unwrap();
    let _ = std::fs::remove_file(path.with_extension("meta.json"));
    (id, torn)
}

#[test]
fn a_torn_tail_is_shown_by_readers_and_cut_by_a_resume_that_says_so() {
    let fixture = Fixture::new(SCRIPT);
    let (id, torn) = torn_session(&fixture);
    let lines = torn.iter().filter(|&&byte| byte == b'\n').count();
    let path = fixture.session_file(&id);

    let (code, shown) = fixture.session(&["show", &id]);
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["torn_tail"]["line"], lines + 1, "{shown}");
    let (code, tree) = fixture.session(&["tree", &id]);
    assert_eq!(code, 0);
    assert!(tree.contains("torn tail"), "{tree}");
    let (code, listing) = fixture.session(&["list"]);
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(listing.lines().next().unwrap()).unwrap();
    assert_eq!(listed["torn_tail"]["line"], lines + 1, "{listed}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        torn,
        "show, tree and list never cut"
    );

    // The resumed run sees the history without the torn (unacknowledged)
    // assistant message: two user messages.
    std::fs::write(
        fixture.dir.path().join("script.json"),
        r#"{"turns":[{"expect":{"messages":2},"content":[{"type":"text","text":"resumed"}]}]}"#,
    )
    .unwrap();
    let resumed = fixture.run(&["--session", &id], "hello again");
    assert_eq!(resumed.code, 0, "{:?} {}", resumed.result, resumed.stderr);
    let repair_lines: Vec<&str> = resumed
        .stderr
        .lines()
        .filter(|line| line.contains("torn tail"))
        .collect();
    assert_eq!(repair_lines.len(), 1, "one line: {}", resumed.stderr);
    assert!(
        repair_lines[0].contains(&format!("session {id} was repaired"))
            && repair_lines[0].contains(&format!("from line {}", lines + 1)),
        "{}",
        repair_lines[0]
    );
    let repaired: Vec<&Value> = resumed
        .events
        .iter()
        .filter(|event| event["type"] == "session_repaired")
        .collect();
    assert_eq!(repaired.len(), 1, "one session_repaired event");
    assert_eq!(repaired[0]["line"], lines + 1);
    assert_eq!(
        resumed.events[1]["type"], "session_repaired",
        "right after run_started"
    );
    let after = std::fs::read(&path).unwrap();
    assert!(
        after.starts_with(&torn[..=torn.iter().rposition(|&b| b == b'\n').unwrap()]),
        "only the torn line was cut"
    );
}

#[test]
fn a_fork_of_a_session_being_written_succeeds_and_leaves_it_untouched() {
    let fixture = Fixture::new(SCRIPT);
    let first = fixture.run(&[], "hello");
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();
    let path = fixture.session_file(&id);

    // This test holds the session open for writing, as a running run would.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let writer = keel_session::JsonlStore::new(fixture.sessions()).unwrap();
    let _lease = runtime
        .block_on(keel_session::SessionStore::open_writer(&writer, &id))
        .unwrap();
    let locked = fixture.run(&["--session", &id], "hi");
    assert_eq!(
        locked.startup_error.unwrap()["code"],
        "session_locked",
        "the session really is held"
    );
    let before = std::fs::read(&path).unwrap();

    let (code, shown) = fixture.session(&["show", &id]);
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    let user_entry = shown["branch"][1]["id"].as_str().unwrap().to_owned();
    let forked = fixture.session_output(&["fork", &id, &user_entry]);
    assert_eq!(
        forked.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&forked.stdout)
    );
    let fork: Value = serde_json::from_slice(&forked.stdout).unwrap();
    assert_eq!(fork["session"]["parent_session"], id.as_str());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the source is untouched"
    );
    let (code, tree) = fixture.session(&["tree", fork["session"]["id"].as_str().unwrap()]);
    assert_eq!((code, tree.lines().count()), (0, 2), "{tree}");
}

#[test]
fn a_renamed_copy_is_refused_naming_both_ids() {
    let fixture = Fixture::new(SCRIPT);
    let first = fixture.run(&[], "hello");
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();
    let copy = fixture.session_file("copied-session");
    std::fs::copy(fixture.session_file(&id), &copy).unwrap();
    let copied = std::fs::read(&copy).unwrap();
    let shown = fixture.session_output(&["show", "copied-session"]);
    let resumed = fixture.run(&["--session", "copied-session"], "hi");
    for (code, error) in [
        (
            shown.status.code(),
            serde_json::from_slice::<Value>(&shown.stdout).unwrap(),
        ),
        (Some(resumed.code), resumed.startup_error.unwrap()),
    ] {
        assert_eq!(code, Some(2));
        assert_eq!(error["code"], "session_id_mismatch", "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("`copied-session`") && message.contains(&format!("`{id}`")),
            "{message}"
        );
    }
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        copied,
        "the copy is untouched"
    );
}

#[test]
fn a_create_that_cannot_write_leaves_no_file() {
    let fixture = Fixture::new(SCRIPT);
    let script = fixture.dir.path().join("script.json");
    let sessions = fixture.sessions();
    // A file-size limit of zero makes writing the header fail as a full disk
    // would (EFBIG instead of ENOSPC); the shell ignores SIGXFSZ for keel.
    let mut command = std::process::Command::new("sh");
    common::isolate(&mut command);
    let output = command
        .args(["-c", "trap '' XFSZ; ulimit -f 0; exec \"$@\"", "sh"])
        .arg(assert_cmd::cargo::cargo_bin!("keel"))
        .args(["run", "--output-format", "stream-json", "--script"])
        .arg(&script)
        .args(["--workspace"])
        .arg(fixture.dir.path())
        .args(["--session-dir", &sessions, "hello"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let error: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(error["code"], "session_io", "{error}");
    let left: Vec<_> = std::fs::read_dir(&sessions).unwrap().flatten().collect();
    assert!(left.is_empty(), "no session file is left: {left:?}");
}

#[test]
fn a_fifo_in_the_session_directory_does_not_hang_list() {
    let fixture = Fixture::new(SCRIPT);
    let first = fixture.run(&[], "hello");
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();
    let fifo = fixture.session_file("a-fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let mut child = common::keel_command()
        .args([
            "session",
            "list",
            "--output-format",
            "stream-json",
            "--all",
            "--session-dir",
            &fixture.sessions(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("`keel session list` hangs on a FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let ids: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(ids, [id], "the FIFO is skipped");
    let shown = fixture.session_output(&["show", "a-fifo"]);
    let error: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(error["code"], "session_not_found", "{error}");
}

#[test]
fn a_damaged_session_is_refused_naming_salvage_and_salvage_writes_a_new_one() {
    let fixture = Fixture::new(SCRIPT);
    let first = fixture.run(&[], "hello");
    assert_eq!(first.code, 0, "{:?}", first.result);
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();
    let path = fixture.session_file(&id);
    // A flipped byte in the assistant message's line (line 6 of 8): the
    // configuration, start snapshot, run_start and user message before it
    // stay intact.
    let mut bytes = std::fs::read(&path).unwrap();
    let newlines: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'\n')
        .map(|(at, _)| at)
        .collect();
    bytes[newlines[4] + 20] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let hint = format!("keel session salvage {id}");

    // Every refusal names the way out: a run, a resume, show, tree.
    let run = fixture.run(&["--session", &id], "hi");
    let error = run.startup_error.unwrap();
    assert_eq!(error["code"], "session_corrupt", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains(&hint),
        "{error}"
    );
    let script = fixture.dir.path().join("script.json").display().to_string();
    let sessions = fixture.sessions();
    let resumed = keel(
        &[
            "resume",
            "--output-format",
            "stream-json",
            &id,
            "--script",
            &script,
            "--session-dir",
            &sessions,
        ],
        Some(fixture.dir.path()),
        "",
    );
    let error = resumed.startup_error.unwrap();
    assert!(
        error["message"].as_str().unwrap().contains(&hint),
        "{error}"
    );
    // (`tree` is read as text elsewhere: JSON is asked for here.)
    for command in [
        &["show", &id][..],
        &["tree", &id, "--output-format", "json"],
    ] {
        let command = command.to_vec();
        let (code, shown) = fixture.session(&command);
        assert_eq!(code, 2, "{command:?}");
        let error: Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(error["code"], "session_corrupt");
        assert!(
            error["message"].as_str().unwrap().contains(&hint),
            "{error}"
        );
    }
    let (_, listing) = fixture.session(&["list"]);
    assert!(listing.contains(&hint), "{listing}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "refusals write nothing"
    );

    // Salvage (by a prefix): a new session with everything before the damage.
    let (code, salvaged) = fixture.session(&["salvage", &id[..13]]);
    assert_eq!(code, 0, "{salvaged}");
    let salvaged: Value = serde_json::from_str(&salvaged).unwrap();
    assert_eq!(salvaged["type"], "salvage");
    assert_eq!(salvaged["source"]["id"], id.as_str());
    assert_eq!(salvaged["kept"]["entries"], 4, "{salvaged}");
    assert_eq!(salvaged["lost"]["lines"], 3, "{salvaged}");
    assert_eq!(salvaged["lost"]["spans"][0]["line"], 6, "{salvaged}");
    assert_eq!(
        salvaged["lost"]["spans"][0]["offset"],
        newlines[4] + 1,
        "{salvaged}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "salvage writes nothing there"
    );
    let new_id = salvaged["session"]["id"].as_str().unwrap().to_owned();
    assert_ne!(new_id, id);
    let (code, shown) = fixture.session(&["show", &new_id]);
    assert_eq!(code, 0, "{shown}");
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["parent_session"], id.as_str());
    assert_eq!(shown["branch"].as_array().unwrap().len(), 4, "{shown}");
    assert_eq!(shown["leaf"], salvaged["session"]["leaf"]);

    // The salvaged session goes on: the model sees the first user message
    // and the new one.
    std::fs::write(
        fixture.dir.path().join("script.json"),
        r#"{"turns":[{"expect":{"messages":2},"content":[{"type":"text","text":"on again"}]}]}"#,
    )
    .unwrap();
    let again = fixture.run(&["--session", &new_id], "hello again");
    assert_eq!(again.code, 0, "{:?} {}", again.result, again.stderr);
}

#[test]
fn a_header_version_no_keel_writes_is_refused_and_left_byte_identical() {
    let fixture = Fixture::new(SCRIPT);
    let first = fixture.run(&[], "hello");
    let id = session_line(&first)["id"].as_str().unwrap().to_owned();
    let path = fixture.session_file(&id);
    let text = std::fs::read_to_string(&path).unwrap();
    for (version, message) in [
        ("0", "which no Keel writes"),
        ("7", "written by a newer Keel"),
    ] {
        let edited = text.replacen("\"version\":3", &format!("\"version\":{version}"), 1);
        assert_ne!(edited, text);
        std::fs::write(&path, &edited).unwrap();
        let run = fixture.run(&["--session", &id], "hi");
        let error = run.startup_error.unwrap();
        assert_eq!(error["code"], "session_version", "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(message),
            "{error}"
        );
        let (code, _) = fixture.session(&["show", &id]);
        assert_eq!(code, 2);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            edited,
            "never appended to"
        );
    }
}
