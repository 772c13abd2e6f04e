//! `auto` lets the sandbox decide (issue 28): ordinary in-workspace
//! commands whose reach the shell analysis cannot resolve statically
//! (loops, variables, command substitution, `xargs`, `find -exec`,
//! `sed -i`, `tar`, scripts in the workspace) run through `keel run` in
//! `auto` with stdin closed without a single permission request, confined
//! by the OS sandbox; the controls that need the network, write outside
//! the workspace, write `~` or write `.git` are still asked — and, nobody
//! answering, denied, their effect absent. Where Keel's sandbox cannot be
//! enforced, an unresolved command is asked as before (fail closed).
//!
//! The tests need user namespaces and Landlock (what `keel doctor`
//! checks): without them they say so and pass, except on CI (`CI` set),
//! where a machine that cannot enforce the sandbox fails them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The ordinary commands: each must run, unasked, and exit 0.
const ORDINARY: &[&str] = &[
    r#"for f in *.txt; do wc -l "$f"; done"#,
    "echo $HOME",
    "echo \"today is $(date)\"",
    "export X=1; echo $X",
    "find . -name '*.txt' | xargs wc -l",
    "wc -c $(ls *.txt)",
    r"find . -name '*.txt' -exec grep -l hello {} \;",
    "sed -i 's/hello/bye/' a.txt",
    "tar czf out.tgz a.txt b.txt",
    "mkdir -p extract && tar xzf out.tgz -C extract && ls extract",
    "tar tzf out.tgz | wc -l",
    "bash scripts/count.sh",
    "chmod +x scripts/count.sh && ./scripts/count.sh",
    r#"X=$(cat b.txt); echo "$X" > copy.txt"#,
    r#"while read line; do echo "got $line"; done < b.txt"#,
    "for i in 1 2 3; do echo $i >> counts.txt; done",
    "ls *.txt | xargs -I{} cp {} {}.bak",
    r#"f=a.txt; cp "$f" "${f%.txt}.copy""#,
    r#"ls *.txt | while read f; do echo "$f"; done"#,
    r#"touch "stamp-$(date +%s)""#,
    "head -n1 $(find . -name 'b.txt' | head -1)",
    "n=$(wc -l < b.txt); echo $((n + 1)) > lines.txt",
    "cat a.txt | sort | uniq -c",
    "mkdir -p build && cp *.txt build/",
    "if [ -f a.txt ]; then echo yes; fi",
    r#"cd sub && ls && echo "$PWD""#,
    r#"eval "$(echo echo evaluated)""#,
    "cat <<EOF > note.md\nhello $USER\nEOF",
    "sh -c 'echo nested > nested.txt'",
];

/// The controls: each needs what the sandbox refuses, so each is asked.
const CONTROLS: &[&str] = &[
    "curl -s https://example.com",
    r#"eval "$CMD"; curl -s https://example.com"#,
    "cp a.txt ../outside.txt",
    r#"eval "$CMD"; cp a.txt ../outside-too.txt"#,
    "touch ~/planted",
    "echo hi > ~/.bashrc",
    r#"$CMD > ~/.profile"#,
    "touch .git/planted",
];

/// A workspace `ws` with a few files and a script, and a home beside it.
fn world() -> tempfile::TempDir {
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    for dir in ["ws/sub", "ws/scripts", "ws/.git", "home"] {
        std::fs::create_dir_all(base.path().join(dir)).unwrap();
    }
    std::fs::write(ws.join("a.txt"), "hello\nworld\n").unwrap();
    std::fs::write(ws.join("b.txt"), "one line\n").unwrap();
    std::fs::write(ws.join("sub/c.txt"), "in sub\n").unwrap();
    std::fs::write(ws.join("scripts/count.sh"), "wc -l *.txt\n").unwrap();
    base
}

/// `keel run --mode auto` in `base/ws` with `commands` as one `bash` call
/// per turn, stdin closed; its JSON lines.
fn run_auto(base: &Path, commands: &[&str], prefix: Option<&Path>) -> Vec<Value> {
    let args = ["--mode", "auto", "--output-format", "stream-json"];
    run(base, commands, prefix, &args, None).lines
}

/// What one `keel run` printed.
struct Printed {
    /// Its stdout's JSON lines.
    lines: Vec<Value>,
    stdout: String,
    stderr: String,
}

/// `keel run ARGS` in `base/ws` with `commands` as one `bash` call per
/// turn; `stdin`: its text, else /dev/null.
fn run(
    base: &Path,
    commands: &[&str],
    prefix: Option<&Path>,
    args: &[&str],
    stdin: Option<&str>,
) -> Printed {
    let mut turns: Vec<Value> = commands
        .iter()
        .map(|command| {
            json!({"content": [
                {"type": "tool_call", "name": "bash", "arguments": {"command": command}}
            ]})
        })
        .collect();
    turns.push(json!({"content": [{"type": "text", "text": "done"}]}));
    let script = base.join("script.json");
    std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
    let mut command = match prefix {
        Some(program) => {
            let mut command = Command::new(program);
            command.arg(assert_cmd::cargo::cargo_bin!("keel"));
            common::isolate(&mut command);
            command
        }
        None => common::keel_command(),
    };
    command
        .args(["run", "--provider", "scripted"])
        .args(args)
        .arg("--script")
        .arg(&script)
        .arg("--workspace")
        .arg(base.join("ws"))
        .arg("--session-dir")
        .arg(base.join("sessions"))
        .arg("run the commands")
        .env("HOME", base.join("home"))
        .env("XDG_DATA_HOME", base.join("data"))
        .env("XDG_CONFIG_HOME", base.join("config"))
        .env("NO_COLOR", "1")
        .env_remove("KEEL_LOG")
        .current_dir(base)
        .stdin(match stdin {
            Some(_) => Stdio::piped(),
            None => Stdio::null(),
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        use std::io::Write as _;
        input.write_all(text.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    Printed {
        lines: stdout
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect(),
        stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn of_type<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|line| line["type"] == kind).collect()
}

#[test]
fn ordinary_commands_in_auto_run_confined_without_asking() {
    if !common::sandbox_enforced("ordinary_commands_in_auto_run_confined_without_asking") {
        return;
    }
    assert!(ORDINARY.len() >= 24);
    let base = world();
    let ws = base.path().join("ws");
    let lines = run_auto(base.path(), ORDINARY, None);
    let asked = of_type(&lines, "permission_requested");
    assert!(asked.is_empty(), "asked: {asked:#?}");
    let ends = of_type(&lines, "tool_execution_end");
    assert_eq!(ends.len(), ORDINARY.len(), "{lines:#?}");
    for (command, end) in ORDINARY.iter().zip(&ends) {
        assert_eq!(end["result"]["status"], "success", "{command}: {end}");
    }
    let result = of_type(&lines, "result");
    assert_eq!(result[0]["state"], "settled", "{result:?}");
    // They ran, in the workspace.
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "bye\nworld\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("counts.txt")).unwrap(),
        "1\n2\n3\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("lines.txt")).unwrap(),
        "2\n"
    );
    for made in [
        "out.tgz",
        "extract/a.txt",
        "copy.txt",
        "a.txt.bak",
        "a.copy",
        "build/b.txt",
        "note.md",
        "nested.txt",
    ] {
        assert!(ws.join(made).exists(), "{made} was not made");
    }
    // The recorded decisions say the sandbox decided what the analysis could not.
    let session = of_type(&lines, "session")[0]["path"]
        .as_str()
        .unwrap()
        .to_owned();
    let recorded = std::fs::read_to_string(session).unwrap();
    let confined = recorded.matches("confined by the OS sandbox").count();
    // 15 when written: each one the analysis could not resolve, which was
    // asked before `auto` let the sandbox decide.
    assert!(
        confined >= 12,
        "{confined} decisions left to the sandbox: {recorded}"
    );
}

#[test]
fn commands_that_need_what_the_sandbox_refuses_are_still_asked() {
    if !common::sandbox_enforced("commands_that_need_what_the_sandbox_refuses_are_still_asked") {
        return;
    }
    let base = world();
    let lines = run_auto(base.path(), CONTROLS, None);
    let asked = of_type(&lines, "permission_requested");
    let asked: Vec<&str> = asked
        .iter()
        .map(|request| request["arguments"]["command"].as_str().unwrap())
        .collect();
    assert_eq!(asked, CONTROLS, "{lines:#?}");
    for resolved in of_type(&lines, "permission_resolved") {
        assert_eq!(resolved["resolution"], "denied", "{resolved}");
    }
    for end in of_type(&lines, "tool_execution_end") {
        assert_eq!(end["result"]["error"]["code"], "permission_denied", "{end}");
    }
    for absent in [
        "outside.txt",
        "outside-too.txt",
        "home/planted",
        "home/.bashrc",
        "home/.profile",
        "ws/.git/planted",
    ] {
        assert!(!base.path().join(absent).exists(), "{absent} was written");
    }
}

/// The dynamic loader the test binary was loaded by, from its mappings.
fn dynamic_loader() -> std::path::PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("/ld-linux"))
        .map(std::path::PathBuf::from)
        .expect("a dynamically linked test binary has a loader mapped")
}

/// Started as `ld.so keel`, no namespace holder can start, so `bash`
/// cannot run confined: an unresolved command is asked, as before.
#[test]
fn where_the_sandbox_cannot_confine_bash_unresolved_commands_are_still_asked() {
    let base = world();
    let commands = ["echo $HOME", "wc -c $(ls *.txt)"];
    let lines = run_auto(base.path(), &commands, Some(&dynamic_loader()));
    let asked = of_type(&lines, "permission_requested");
    assert_eq!(asked.len(), commands.len(), "{lines:#?}");
}

/// The two calls every "nobody to ask" run makes: each asks in `auto`
/// and `ask` whatever the machine's sandbox.
const ASKED: &[&str] = &["touch ~/planted", "cp a.txt ../outside.txt"];

fn warnings(lines: &[Value]) -> Vec<&str> {
    of_type(lines, "warning")
        .iter()
        .map(|warning| warning["code"].as_str().unwrap())
        .collect()
}

/// A run that can ask, with nothing on stdin that could answer, says so at
/// its start (stderr and a `warning` event); its result, text summary and
/// `-q` stderr count the calls denied because nobody answered.
#[test]
fn a_run_with_nobody_to_ask_says_so_and_counts_the_unanswered_denials() {
    let base = world();
    for mode in ["auto", "ask"] {
        let args = ["--mode", mode, "--output-format", "stream-json"];
        let printed = run(base.path(), ASKED, None, &args, None);
        assert!(
            printed
                .stderr
                .contains("nobody can answer permission requests"),
            "{mode}: {}",
            printed.stderr
        );
        assert_eq!(warnings(&printed.lines), ["nobody_to_ask"], "{mode}");
        // One sentence, not the source's indentation.
        let message = of_type(&printed.lines, "warning")[0]["message"].to_string();
        assert!(!message.contains("  "), "{mode}: {message}");
        // The warning comes right after `run_started`, before any call.
        let types: Vec<&str> = printed
            .lines
            .iter()
            .map(|l| l["type"].as_str().unwrap())
            .collect();
        let started = types.iter().position(|t| *t == "run_started").unwrap();
        assert_eq!(types[started + 1], "warning", "{types:?}");
        let result = &of_type(&printed.lines, "result")[0];
        assert_eq!(result["totals"]["denied_unanswered"], 2, "{mode}: {result}");
    }
    // The text summary and `-q` say it too.
    let args = ["--mode", "auto", "--output-format", "text"];
    let printed = run(base.path(), ASKED, None, &args, None);
    assert!(
        printed
            .stdout
            .contains("2 calls denied: nobody answered their permission requests"),
        "{}",
        printed.stdout
    );
    let printed = run(base.path(), ASKED, None, &["--mode", "auto", "-q"], None);
    assert!(
        printed.stderr.contains("2 calls denied: nobody answered"),
        "{}",
        printed.stderr
    );
    // `plan` never asks: nothing to warn about, nothing unanswered.
    let args = ["--mode", "plan", "--output-format", "stream-json"];
    let printed = run(base.path(), ASKED, None, &args, None);
    assert!(warnings(&printed.lines).is_empty(), "{}", printed.stderr);
    assert!(
        !printed.stderr.contains("permission requests"),
        "{}",
        printed.stderr
    );
    let result = &of_type(&printed.lines, "result")[0];
    assert!(
        result["totals"].get("denied_unanswered").is_none(),
        "{result}"
    );
}

/// Piped lines may answer: the warning says that they do and that a
/// request without a line is denied; the one left unanswered is counted.
/// With `--input-format stream-json` there is no warning, and requests
/// still pending when input ends are counted.
#[test]
fn piped_answers_and_stream_json_input_count_only_what_nobody_answered() {
    let base = world();
    let args = ["--mode", "auto", "--output-format", "stream-json"];
    let printed = run(base.path(), ASKED, None, &args, Some("y\n"));
    assert_eq!(
        warnings(&printed.lines),
        ["answers_on_stdin"],
        "{}",
        printed.stderr
    );
    let message = of_type(&printed.lines, "warning")[0]["message"].to_string();
    assert!(!message.contains("  "), "{message}");
    let resolutions: Vec<&str> = of_type(&printed.lines, "permission_resolved")
        .iter()
        .map(|resolved| resolved["resolution"].as_str().unwrap())
        .collect();
    assert_eq!(resolutions, ["approved", "denied"]);
    let result = &of_type(&printed.lines, "result")[0];
    assert_eq!(result["totals"]["denied_unanswered"], 1, "{result}");

    let args = [
        "--mode",
        "auto",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
    ];
    let printed = run(base.path(), ASKED, None, &args, None);
    assert!(warnings(&printed.lines).is_empty(), "{}", printed.stderr);
    assert!(
        !printed.stderr.contains("permission requests"),
        "{}",
        printed.stderr
    );
    let result = &of_type(&printed.lines, "result")[0];
    assert_eq!(result["totals"]["denied_unanswered"], 2, "{result}");
}

/// A command left to the sandbox that needs what it refuses fails, unasked,
/// with a note that the sandbox probably refused it and what takes the
/// user's approval; its effect is absent.
#[test]
fn a_confined_command_the_sandbox_refuses_says_so_in_its_result() {
    if !common::sandbox_enforced("a_confined_command_the_sandbox_refuses_says_so_in_its_result") {
        return;
    }
    let base = world();
    // `$D` hides `/usr` from the analysis: the scope is unknown, so it runs
    // confined, where `/usr` is read-only.
    let marker = format!("keel-auto-sandbox-{}", std::process::id());
    let command = format!("D=$(echo /usr); touch $D/{marker}");
    let commands = [command.as_str()];
    let lines = run_auto(base.path(), &commands, None);
    assert!(
        of_type(&lines, "permission_requested").is_empty(),
        "{lines:#?}"
    );
    let end = &of_type(&lines, "tool_execution_end")[0];
    assert_eq!(end["result"]["status"], "error", "{end}");
    let text = end["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("the OS sandbox probably refused this command")
            && text.contains("workspace_write")
            && text.contains("approval"),
        "{text}"
    );
    assert!(!Path::new("/usr").join(&marker).exists());
}
