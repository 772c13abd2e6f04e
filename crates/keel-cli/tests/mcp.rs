//! `keel mcp list`: the `[mcp_servers.NAME]` servers of the user's
//! config.toml started once and listed with their state and tools, against
//! `@modelcontextprotocol/server-everything` 2026.8.31 (installed once by
//! scripts/setup-mcp-servers.sh into the test build's temporary directory
//! unless `KEEL_MCP_SERVERS` names an install). Skips only when `node` is
//! missing, and never when `CI` is set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

// The one helper that finds or installs the pinned npm servers.
#[path = "../../keel-mcp/tests/support/npm.rs"]
mod npm;
use npm::npm_servers;

/// A config.toml with a working server, a broken required one and a
/// disabled one; the path of the file.
fn config(dir: &Path, servers: &Path) -> PathBuf {
    let index = servers.join("server-everything/dist/index.js");
    let text = format!(
        r#"
[mcp_servers.everything]
command = "node"
args = [{index:?}, "stdio"]
auto_approve = ["echo"]

[mcp_servers.broken]
command = "/nonexistent/keel-mcp-server"
required = true

[mcp_servers.off]
command = "node"
enabled = false
"#
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn keel(args: &[&str], config: &Path) -> std::process::Output {
    let mut command = common::keel_command();
    command
        .args(args)
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command.output().unwrap()
}

#[test]
fn mcp_list_shows_each_server_with_its_state_and_tools() {
    let Some(servers) = npm_servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &servers);

    let output = keel(&["mcp", "list", "--json"], &config);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The `required` server failed to start: exit code 1.
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let document: Value = serde_json::from_slice(&output.stdout).unwrap();
    let listed = document["servers"].as_array().unwrap();
    let names: Vec<&str> = listed.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["broken", "everything", "off"]);
    let everything = &listed[1];
    assert_eq!(everything["state"]["state"], "ready", "{everything}");
    let tools = everything["tools"].as_array().unwrap();
    let echo = tools
        .iter()
        .find(|tool| tool["name"] == "mcp__everything__echo")
        .unwrap_or_else(|| panic!("{tools:?}"));
    assert_eq!(echo["auto_approve"], true);
    let long = tools
        .iter()
        .find(|tool| tool["tool"] == "trigger-long-running-operation")
        .unwrap();
    assert_eq!(long["read_only"], true);
    assert_eq!(listed[0]["state"]["state"], "failed");
    assert!(
        listed[0]["state"]["reason"]
            .as_str()
            .unwrap()
            .contains("`broken`")
    );
    assert_eq!(listed[2]["state"]["state"], "disabled");

    let output = keel(&["mcp", "list"], &config);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("everything  ready"), "{text}");
    let echo = text
        .lines()
        .find(|line| line.starts_with("  mcp__everything__echo "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(echo.contains("auto-approve]"), "{echo}");
    assert!(text.contains("broken  failed: "), "{text}");
    assert!(text.contains("off  disabled"), "{text}");
}

#[test]
fn mcp_list_without_servers_says_so_and_a_bad_table_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let output = keel(&["mcp", "list"], &empty);
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("no MCP servers configured"));

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[mcp_servers.web]\nurl = \"https://x.example/mcp\"\nenv = { TOKEN = \"hunter2\" }\n",
    )
    .unwrap();
    let output = keel(&["mcp", "list"], &bad);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`web`") && stderr.contains("`env`"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

// ---- MCP tools in runs ------------------------------------------------------------

/// A workspace `ws` beside a config.toml holding `servers` (TOML), and the
/// scripted turns; `keel run --mode auto` on them, spawned.
fn spawn_run(dir: &Path, servers: &str, turns: Value, extra: &[&str]) -> std::process::Child {
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, servers).unwrap();
    let script = dir.join("script.json");
    std::fs::write(&script, serde_json::json!({ "turns": turns }).to_string()).unwrap();
    let mut command = common::keel_command();
    command
        .args([
            "run",
            "--mode",
            "auto",
            "--output-format",
            "stream-json",
            "--script",
        ])
        .arg(&script)
        .arg("--workspace")
        .arg(dir.join("ws"))
        .arg("--config")
        .arg(&config)
        .args(extra)
        .arg("go")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command.spawn().unwrap()
}

/// The events of a finished run, and its exit code.
fn events(child: std::process::Child) -> (Vec<Value>, Option<i32>, String) {
    let output = child.wait_with_output().unwrap();
    let lines = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (
        lines,
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn call(tool: &str, arguments: Value) -> Value {
    serde_json::json!({"content": [{"type": "tool_call", "name": tool, "arguments": arguments}]})
}

fn done() -> Value {
    serde_json::json!({"content": [{"type": "text", "text": "done"}]})
}

fn results(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|line| line["type"] == "tool_execution_end")
        .map(|line| &line["result"])
        .collect()
}

fn everything(servers: &Path, extra: &str) -> String {
    let index = servers.join("server-everything/dist/index.js");
    format!(
        "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{index:?}, \"stdio\"]\n{extra}\n"
    )
}

#[test]
fn keel_run_calls_mcp_tools_for_text_images_and_structured_results() {
    let Some(servers) = npm_servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = everything(
        &servers,
        "required = true\nauto_approve = [\"echo\", \"get-tiny-image\", \"get-structured-content\"]",
    );
    let child = spawn_run(
        dir.path(),
        &config,
        serde_json::json!([
            call(
                "mcp__everything__echo",
                serde_json::json!({"message": "hello from keel run"})
            ),
            call("mcp__everything__get-tiny-image", serde_json::json!({})),
            call(
                "mcp__everything__get-structured-content",
                serde_json::json!({"location": "Chicago"})
            ),
            done()
        ]),
        &[],
    );
    let (lines, code, stderr) = events(child);
    assert_eq!(code, Some(0), "{stderr}");
    let results = results(&lines);
    assert_eq!(results.len(), 3, "{lines:?}");
    assert!(
        results.iter().all(|result| result["status"] == "success"),
        "{results:?}"
    );
    assert!(
        results[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("hello from keel run")
    );
    let image = results[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|block| block["type"] == "image")
        .expect("an image block");
    assert!(image["mime_type"].as_str().unwrap().starts_with("image/"));
    assert!(
        results[2]["details"].to_string().contains("temperature")
            || results[2]["content"].to_string().contains("temperature"),
        "{}",
        results[2]
    );
    // The server joined as an extension, with its version and tools.
    let joined = lines
        .iter()
        .find(|line| {
            line["type"] == "extension_registered"
                && line["extension"]["name"] == "mcp.everything"
                && line["extension"]["tools"].is_array()
        })
        .expect("the server's tools joined");
    assert!(
        joined["extension"]["tools"]
            .to_string()
            .contains("mcp__everything__echo")
    );
}

#[test]
fn an_mcp_tool_not_auto_approved_is_asked_and_a_failed_required_server_fails_the_run() {
    let Some(servers) = npm_servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Not in auto_approve: asked in auto; stdin is empty, so denied.
    let child = spawn_run(
        dir.path(),
        &everything(&servers, "required = true"),
        serde_json::json!([
            call("mcp__everything__echo", serde_json::json!({"message": "x"})),
            done()
        ]),
        &[],
    );
    let (lines, code, stderr) = events(child);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        lines
            .iter()
            .any(|line| line["type"] == "permission_requested")
    );
    assert_eq!(results(&lines)[0]["error"]["code"], "permission_denied");

    let dir = tempfile::tempdir().unwrap();
    let child = spawn_run(
        dir.path(),
        "[mcp_servers.broken]\ncommand = \"/nonexistent/keel-mcp-server\"\nrequired = true\n",
        serde_json::json!([done()]),
        &[],
    );
    let (lines, code, _) = events(child);
    assert_eq!(code, Some(1));
    let failed = lines
        .iter()
        .find(|line| line["type"] == "run_failed")
        .unwrap();
    assert_eq!(failed["error"]["code"], "extension_failed", "{failed}");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mcp.broken")
    );
}

#[test]
fn a_slow_optional_server_never_delays_the_first_request_and_dies_with_keel() {
    let Some(servers) = npm_servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let index = servers.join("server-everything/dist/index.js");
    // A server that takes 23.5 s to start.
    let config = format!(
        "[mcp_servers.slow]\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 23.5; exec node {} stdio\"]\nstartup_timeout_sec = 60\n",
        index.display()
    );
    let started = std::time::Instant::now();
    let child = spawn_run(dir.path(), &config, serde_json::json!([done()]), &[]);
    let (lines, code, stderr) = events(child);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "the run waited for the optional server"
    );
    assert!(lines.iter().any(|line| line["type"] == "run_settled"));
    // Its start was abandoned with Keel: no `sleep 23.5` is left.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let left = Command::new("pgrep")
        .args(["-f", "sleep 23.5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "left behind: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

#[test]
fn a_long_mcp_call_is_cancelled_mid_call_with_the_run() {
    use std::io::BufRead;

    let Some(servers) = npm_servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = everything(
        &servers,
        "required = true\nauto_approve = [\"trigger-long-running-operation\"]",
    );
    let mut child = spawn_run(
        dir.path(),
        &config,
        serde_json::json!([
            call(
                "mcp__everything__trigger-long-running-operation",
                serde_json::json!({"duration": 60, "steps": 60})
            ),
            done()
        ]),
        &[],
    );
    let stdout = child.stdout.take().unwrap();
    let mut lines = Vec::new();
    let mut reader = std::io::BufReader::new(stdout);
    let mut line = String::new();
    let mut interrupted = None;
    while reader.read_line(&mut line).unwrap() > 0 {
        let event: Value = serde_json::from_str(line.trim()).unwrap();
        if event["type"] == "tool_execution_start" && interrupted.is_none() {
            std::thread::sleep(std::time::Duration::from_millis(500));
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGINT,
            )
            .unwrap();
            interrupted = Some(std::time::Instant::now());
        }
        lines.push(event);
        line.clear();
    }
    assert!(
        common::exited_within(&mut child, std::time::Duration::from_secs(30)),
        "keel did not exit after the interrupt"
    );
    let waited = interrupted.expect("the call started").elapsed();
    assert!(
        waited < std::time::Duration::from_secs(20),
        "the cancel took {waited:?}"
    );
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let result = results(&lines)[0];
    assert_eq!(result["status"], "cancelled", "{result}");
}

#[test]
fn the_filesystem_server_lists_a_directory_through_keel_run() {
    let Some(servers) = npm_servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("shared");
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("notes.txt"), "x").unwrap();
    let index = servers.join("server-filesystem/dist/index.js");
    let config = format!(
        "[mcp_servers.fs]\ncommand = \"node\"\nargs = [{:?}, {:?}]\nrequired = true\nauto_approve = [\"list_directory\"]\n",
        index.display().to_string(),
        root.display().to_string()
    );
    let child = spawn_run(
        dir.path(),
        &config,
        serde_json::json!([
            call(
                "mcp__fs__list_directory",
                serde_json::json!({"path": root.display().to_string()})
            ),
            done()
        ]),
        &[],
    );
    let (lines, code, stderr) = events(child);
    assert_eq!(code, Some(0), "{stderr}");
    let text = results(&lines)[0]["content"].to_string();
    assert!(
        text.contains("notes.txt") && text.contains("docs"),
        "{text}"
    );
}

#[test]
fn past_their_share_mcp_tools_are_listed_by_name_and_tool_search_loads_the_one_called() {
    let Some(servers) = npm_servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    // The scripted model checks each request's tools: names only at
    // first (and tool_search), then echo's schema once it was searched.
    let turns = serde_json::json!([
        {"expect": {"tools": ["read", "write", "edit", "bash", "tool_search"]},
         "content": [{"type": "tool_call", "name": "tool_search", "arguments": {"names": ["mcp__everything__echo"]}}]},
        {"expect": {"tools": ["read", "write", "edit", "bash", "tool_search", "mcp__everything__echo"], "tool_result_contains": "message"},
         "content": [{"type": "tool_call", "name": "mcp__everything__echo", "arguments": {"message": "found and called"}}]},
        {"expect": {"tool_result_contains": "found and called"},
         "content": [{"type": "text", "text": "done"}]}
    ]);
    // An 8,000-token window: the server's 13 schemas pass its 10 %.
    let child = spawn_run(
        dir.path(),
        &everything(&servers, "required = true\nauto_approve = [\"echo\"]"),
        turns,
        &["--context-window", "8000"],
    );
    let (lines, code, stderr) = events(child);
    assert_eq!(code, Some(0), "{stderr} {lines:?}");
    let results = results(&lines);
    assert!(
        results[0]["content"].to_string().contains("inputSchema")
            || results[0]["content"].to_string().contains("parameters"),
        "{}",
        results[0]
    );
}
