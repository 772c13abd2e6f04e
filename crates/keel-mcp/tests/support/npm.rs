//! The pinned npm MCP servers for tests: found through `KEEL_MCP_SERVERS`
//! or installed on demand by scripts/setup-mcp-servers.sh. keel-mcp's
//! tests and keel-cli's (`#[path]`-included) share this one copy.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The directory holding `server-everything/` and `server-filesystem/`:
/// `KEEL_MCP_SERVERS`, or an install by scripts/setup-mcp-servers.sh into
/// `$CARGO_TARGET_TMPDIR/mcp-servers`. `None` (the test skips) only when
/// `node` is missing, and never when `CI` is set: then it panics.
pub fn npm_servers() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let node = Command::new("node")
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !node.is_ok_and(|status| status.success()) {
            let note = "`node` is missing: the tests against the npm MCP servers skip";
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
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-servers");
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/setup-mcp-servers.sh");
        let output = Command::new("bash")
            .arg(&script)
            .arg(&cache)
            .stdin(Stdio::null())
            .output()
            .expect("scripts/setup-mcp-servers.sh runs");
        assert!(
            output.status.success(),
            "scripts/setup-mcp-servers.sh failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Some(cache.join("node_modules/@modelcontextprotocol"))
    })
    .clone()
}
