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

/// Where the npm servers are, or `None` (the test skips) without `node`.
fn npm_servers() -> Option<PathBuf> {
    let node = Command::new("node")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !node.is_ok_and(|status| status.success()) {
        let note = "keel mcp list: `node` is missing: the test skips";
        assert!(
            std::env::var_os("CI").is_none(),
            "{note}, which CI does not allow"
        );
        eprintln!("{note}");
        return None;
    }
    if let Some(dir) = std::env::var_os("KEEL_MCP_SERVERS") {
        return Some(PathBuf::from(dir));
    }
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-servers");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/setup-mcp-servers.sh");
    let output = Command::new("bash")
        .arg(script)
        .arg(&cache)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "setup-mcp-servers.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(cache.join("node_modules/@modelcontextprotocol"))
}

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
