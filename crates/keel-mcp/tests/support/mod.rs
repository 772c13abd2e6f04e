//! What keel-mcp's tests share: the npm servers (installed on demand), the
//! in-tree test server, the caller's environment and process checks.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use keel_mcp::{McpServer, McpServerConfig};

// Shared with keel-cli's MCP tests (`#[path]`-included there).
mod npm;
use keel_tool_api::{HostEnv, ToolContext, Workspace};
#[allow(unused_imports)] // Not every test binary that includes this module uses it.
pub use npm::npm_servers;

/// A stdio config running `node <servers>/<package>/dist/index.js args…`.
pub fn node_server(servers: &Path, package: &str, args: &[&str]) -> McpServerConfig {
    let mut config = McpServerConfig::stdio("node");
    config.args = std::iter::once(
        servers
            .join(package)
            .join("dist/index.js")
            .to_string_lossy()
            .into_owned(),
    )
    .chain(args.iter().map(|arg| (*arg).to_owned()))
    .collect();
    config
}

/// The in-tree test server (examples/mcp_test_server.rs). `cargo test`
/// builds it with the tests; it is built here only when missing or older
/// than its source (a run of one `--test` target builds no examples).
pub fn test_server_exe() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        // target/<profile>/deps/<test> → target/<profile>/examples/
        let deps = std::env::current_exe().unwrap();
        let profile = deps.parent().unwrap().parent().unwrap();
        let exe = profile.join("examples/mcp_test_server");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mcp_test_server.rs");
        let modified = |path: &Path| {
            std::fs::metadata(path)
                .and_then(|meta| meta.modified())
                .ok()
        };
        if let (Some(built), Some(written)) = (modified(&exe), modified(&source))
            && built >= written
        {
            return exe;
        }
        let output = Command::new(env!("CARGO"))
            .args([
                "build",
                "-q",
                "-p",
                "keel-mcp",
                "--example",
                "mcp_test_server",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("cargo build runs");
        assert!(
            output.status.success(),
            "building the test server failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(exe.exists(), "{} missing", exe.display());
        exe
    })
    .clone()
}

/// A stdio config for the in-tree test server.
pub fn test_server_stdio() -> McpServerConfig {
    let mut config = McpServerConfig::stdio(test_server_exe().to_string_lossy().into_owned());
    config.args = vec!["stdio".into()];
    config
}

/// The caller's environment: this test process's.
pub fn host_env() -> HostEnv {
    HostEnv::new(std::env::vars_os())
}

/// Starts `config` as server `name` with this process's environment.
pub async fn start(name: &str, config: &McpServerConfig) -> McpServer {
    McpServer::start(name, config, &host_env())
        .await
        .unwrap_or_else(|error| panic!("{name} did not start: {error:?}"))
}

/// A tool context in a fresh temporary workspace.
pub fn context(call_id: &str) -> (ToolContext, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Arc::new(Workspace::new(dir.path()).unwrap());
    (ToolContext::new(call_id, workspace), dir)
}

/// Whether process `pid` is still running (a zombie is not).
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        // The state follows the command in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
            .unwrap_or(false),
    }
}

/// Waits (up to 10 s) until `pid` is not running; whether it stopped.
pub fn gone_within(pid: u32) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if !running(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The text blocks of a result, joined.
pub fn text_of(content: &[keel_protocol::UserContent]) -> String {
    content
        .iter()
        .filter_map(|block| match block {
            keel_protocol::UserContent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}
