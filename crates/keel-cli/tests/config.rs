//! `config.toml` as a user meets it, through the `keel` binary (issue 15).
//!
//! The acceptance test: with a config.toml that sets the provider and the
//! model (an alias), `echo "task" | keel run` runs against a local
//! OpenAI-compatible server, `keel run --continue` continues that session,
//! and `--input-format stream-json` drives a steer, a follow-up and a
//! cancel. Then profiles, `-c`, the project layer (its warnings on stderr)
//! and the catalog warning, and the README's example config.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod live;

use std::path::{Path, PathBuf};
use std::process::Command;

use keel_provider::testing::{Reply, TestServer};
use live::Live;
use serde_json::{Value, json};

/// One SSE `data:` line for a Chat Completions chunk.
fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({"id": "c1", "object": "chat.completion.chunk", "model": "qwen-local",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {body}\n\n")
}

fn answer(text: &str) -> Reply {
    let mut sse = chunk(json!({"role": "assistant", "content": text}), None);
    sse += &chunk(json!({}), Some("stop"));
    sse += "data: [DONE]\n\n";
    Reply::sse(&sse)
}

fn bash(id: &str, command: &str) -> Reply {
    let arguments = json!({"command": command}).to_string();
    let mut sse = chunk(
        json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": id,
            "type": "function", "function": {"name": "bash", "arguments": arguments}}]}),
        None,
    );
    sse += &chunk(json!({}), Some("tool_calls"));
    sse += "data: [DONE]\n\n";
    Reply::sse(&sse)
}

/// A temporary home for one test: the user's config directory, a session
/// directory, and a workspace.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config/keel")).unwrap();
        std::fs::create_dir_all(dir.path().join("project")).unwrap();
        std::fs::write(dir.path().join("config/keel/config.toml"), config).unwrap();
        Self { dir }
    }

    fn workspace(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path().join("project")).unwrap()
    }

    /// `keel ARGS --output-format stream-json` (a run's events, the
    /// providers) in the workspace, reading this home's configuration.
    fn keel(&self, args: &[&str]) -> Command {
        let mut command = live::command(&self.dir.path().join("data"));
        command
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .current_dir(self.workspace())
            .args(&args[..1])
            .args(["--output-format", "stream-json"])
            .args(&args[1..]);
        command
    }
}

/// Runs `command` to its end with `stdin`; returns the exit code, the
/// parsed stdout lines and stderr.
fn run(command: Command, stdin: &str) -> (i32, Vec<Value>, String) {
    let output = assert_cmd::Command::from_std(command)
        .write_stdin(stdin)
        .output()
        .unwrap();
    let lines = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (
        output.status.code().unwrap_or(-1),
        lines,
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn result(lines: &[Value]) -> &Value {
    lines
        .iter()
        .find_map(live::result_of)
        .unwrap_or_else(|| panic!("no result line in {lines:#?}"))
}

/// The user message texts of a Chat Completions request body.
fn user_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "user")
        .map(|message| match &message["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn local_config(url: &str) -> String {
    format!(
        r#"provider = "local"
model = "coder"
mode = "full"

[providers.local]
api = "openai-chat"
base_url = "{url}"

[providers.local.aliases]
coder = "qwen-local"

[providers.local.models.qwen-local]
context_window = 32768
input_price = 0.0
output_price = 0.0
"#
    )
}

#[test]
fn configured_provider_and_model_run_continue_and_stream_json_drives_the_run() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(TestServer::start(vec![
            answer("first answer"),
            answer("second answer"),
            bash(
                "call_go",
                "while [ ! -e go ]; do sleep 0.05; done; echo waited",
            ),
            answer("steered answer"),
            bash("call_never", "while [ ! -e never ]; do sleep 0.05; done"),
        ]))
        .unwrap();
    let home = Home::new(&local_config(&server.url()));

    // 1. `echo "task" | keel run`: provider, model (an alias) and mode from config.toml.
    let (code, lines, stderr) = run(home.keel(&["run"]), "task from a pipe\n");
    assert_eq!(code, 0, "{lines:#?}\n{stderr}");
    assert!(
        !stderr.contains("warning"),
        "the alias is in the catalog: {stderr}"
    );
    let started = lines
        .iter()
        .find(|line| line["type"] == "run_started")
        .unwrap();
    assert_eq!(
        (
            started["provider"].as_str(),
            started["model"].as_str(),
            started["mode"].as_str()
        ),
        (Some("local"), Some("qwen-local"), Some("full"))
    );
    let session = result(&lines)["session_id"].as_str().unwrap().to_owned();
    let requests = server.requests();
    assert_eq!(requests[0].json()["model"], "qwen-local");
    let first = user_texts(&requests[0].json());
    assert!(
        first.len() == 1 && first[0].contains("task from a pipe"),
        "{first:?}"
    );

    // 2. `keel run --continue`: the same session, its history sent again.
    let (code, lines, stderr) = run(home.keel(&["run", "--continue", "and now the tests"]), "");
    assert_eq!(code, 0, "{lines:#?}\n{stderr}");
    assert_eq!(result(&lines)["session_id"], session.as_str());
    let body = server.requests()[1].json();
    let texts = user_texts(&body);
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(texts[0].contains("task from a pipe") && texts[1] == "and now the tests");
    assert!(
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|message| message["role"] == "assistant" && message["content"] == "first answer")
    );

    // 3. `--input-format stream-json`: a steer, a follow-up and a cancel.
    let mut live = Live::start(home.keel(&["run", "--continue", "--input-format", "stream-json"]));
    live.send(&json!({"type": "user_message", "text": "wait for go"}).to_string());
    live.event("tool_execution_start");
    live.send(&json!({"type": "steer", "text": "STEER: keep it short"}).to_string());
    live.send(&json!({"type": "follow_up", "text": "FOLLOW: then stop"}).to_string());
    live.event("message_queued");
    live.event("message_queued");
    std::fs::write(home.workspace().join("go"), "").unwrap();
    live.wait_for("the follow-up's call", |value| {
        value["type"] == "tool_execution_start" && value["call_id"] == "call_never"
    });
    live.send(&json!({"type": "cancel"}).to_string());
    let cancelled = live.result();
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["session_id"], session.as_str());
    let (code, stderr, _) = live.finish();
    assert_eq!(code, 1, "a cancelled run exits 1: {stderr}");

    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let steered = user_texts(&requests[3].json());
    assert!(
        steered.last().unwrap().contains("STEER: keep it short"),
        "the steer reached the model after the tool batch: {steered:?}"
    );
    let followed = user_texts(&requests[4].json());
    assert!(
        followed.last().unwrap().contains("FOLLOW: then stop"),
        "the follow-up reached the model when the run would settle: {followed:?}"
    );
    assert!(!home.workspace().join("never").exists());
}

#[test]
fn profiles_overrides_and_the_project_layer_choose_the_mode() {
    let home = Home::new(
        r#"
mode = "auto"
tools = ["read", "write", "edit", "bash"]

[profiles.readonly]
mode = "plan"
"#,
    );
    std::fs::write(
        home.dir.path().join("script.json"),
        r#"{"turns": [{"content": [{"type": "text", "text": "ok"}]}]}"#,
    )
    .unwrap();
    let script = home.dir.path().join("script.json").display().to_string();
    let mode_of = |extra: &[&str]| -> (String, String) {
        let mut args = vec!["run", "--script", &script];
        args.extend_from_slice(extra);
        args.push("hello");
        let (code, lines, stderr) = run(home.keel(&args), "");
        assert_eq!(code, 0, "{lines:#?}\n{stderr}");
        let started = lines
            .iter()
            .find(|line| line["type"] == "run_started")
            .unwrap();
        (started["mode"].as_str().unwrap().to_owned(), stderr)
    };
    assert_eq!(mode_of(&[]).0, "auto");
    assert_eq!(mode_of(&["--profile", "readonly"]).0, "plan");
    assert_eq!(
        mode_of(&["--profile", "readonly", "-c", "mode=ask"]).0,
        "ask"
    );
    assert_eq!(mode_of(&["-c", "mode=plan", "--mode", "full"]).0, "full");

    // The project may narrow, and a widening attempt is dropped with a warning.
    let project = home.workspace().join(".keel");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("config.toml"), "mode = \"ask\"\n").unwrap();
    let (mode, stderr) = mode_of(&[]);
    assert_eq!(mode, "ask");
    // Only the warning that stdin (a pipe here) answers the requests.
    let others: Vec<&str> = stderr
        .lines()
        .filter(|line| !line.contains("standard input is not a terminal"))
        .collect();
    assert!(others.is_empty(), "{stderr}");
    std::fs::write(
        project.join("config.toml"),
        "mode = \"full\"\ntools = [\"read\", \"grep\"]\n",
    )
    .unwrap();
    let (mode, stderr) = mode_of(&[]);
    assert_eq!(mode, "auto");
    assert!(
        stderr.contains("keel: warning:")
            && stderr.contains("mode `full` is ignored")
            && stderr.contains("tools grep are ignored")
            && stderr.contains(".keel/config.toml"),
        "{stderr}"
    );
    // The user's own flag is not the project's to narrow.
    assert_eq!(mode_of(&["--mode", "full"]).0, "full");

    let (code, lines, _) = run(
        home.keel(&["run", "--script", &script, "--profile", "nope", "x"]),
        "",
    );
    assert_eq!(code, 2);
    assert!(
        lines[0].to_string().contains("unknown_profile"),
        "{lines:?}"
    );
    let (code, lines, _) = run(
        home.keel(&["run", "--script", &script, "-c", "moed=plan", "x"]),
        "",
    );
    assert_eq!(code, 2);
    assert!(
        lines[0].to_string().contains("unknown key `moed`"),
        "{lines:?}"
    );
}

#[test]
fn a_model_outside_the_catalog_is_a_warning_and_models_lists_aliases() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(TestServer::start(vec![answer("fine")]))
        .unwrap();
    let home = Home::new(&local_config(&server.url()));
    let (code, lines, stderr) = run(home.keel(&["run", "--model", "mystery-7b", "hello"]), "");
    assert_eq!(code, 0, "{lines:#?}\n{stderr}");
    assert!(
        stderr.contains("model `mystery-7b` is not in the catalog of provider `local`")
            && stderr.contains("window and prices are unknown"),
        "{stderr}"
    );
    assert_eq!(server.requests()[0].json()["model"], "mystery-7b");

    let (code, lines, _) = run(home.keel(&["models"]), "");
    assert_eq!(code, 0);
    let anthropic = lines
        .iter()
        .find(|line| line["provider"] == "anthropic")
        .unwrap();
    assert_eq!(anthropic["aliases"]["opus"], "claude-opus-4-1");
    let local = lines
        .iter()
        .find(|line| line["provider"] == "local")
        .unwrap();
    assert_eq!(local["aliases"]["coder"], "qwen-local");
}

/// The example config.toml in the README parses, and resolves as it says.
#[test]
fn the_readme_example_config_is_valid() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let marker = "<!-- example config.toml -->";
    let start = readme
        .find(marker)
        .expect("the README marks its example config");
    let rest = &readme[start..];
    let body = rest
        .split_once("```toml\n")
        .and_then(|(_, after)| after.split_once("```"))
        .map(|(body, _)| body)
        .expect("a toml block after the marker");
    let home = Home::new(body);
    let (code, lines, stderr) = run(home.keel(&["models"]), "");
    assert_eq!(code, 0, "{lines:?}\n{stderr}");
    assert!(
        lines.iter().any(|line| line["provider"] == "local"),
        "{lines:?}"
    );
    // Its profile selects a provider whose key is not set here: a clear error, not a parse error.
    let mut cloud = home.keel(&["run", "--profile", "cloud", "hello"]);
    cloud.env_remove("ANTHROPIC_API_KEY");
    let (code, lines, _) = run(cloud, "");
    assert_eq!(code, 2);
    assert!(
        lines[0].to_string().contains("missing_api_key"),
        "{lines:?}"
    );
}
