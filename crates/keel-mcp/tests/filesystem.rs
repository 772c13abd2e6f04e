//! keel-mcp against `@modelcontextprotocol/server-filesystem` 2026.8.31
//! rooted at a temporary directory. Tool names are from its tools/list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::*;

#[tokio::test]
async fn lists_a_directory_and_reads_a_file_beneath_its_root() {
    let Some(servers) = npm_servers() else { return };
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::write(root_path.join("notes.txt"), "keel was here\n").unwrap();
    std::fs::create_dir(root_path.join("sub")).unwrap();
    let config = node_server(
        &servers,
        "server-filesystem",
        &[root_path.to_str().unwrap()],
    );
    let mut server = start("fs", &config).await;
    let tools = server.tools();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
    eprintln!("server-filesystem tools: {names:?}");
    for expected in [
        "list_directory",
        "read_text_file",
        "write_file",
        "list_allowed_directories",
    ] {
        assert!(
            names.contains(&format!("mcp__fs__{expected}").as_str()),
            "{expected}: {names:?}"
        );
    }
    let find = |name: &str| {
        tools
            .iter()
            .find(|tool| tool.name() == format!("mcp__fs__{name}"))
            .unwrap()
            .clone()
    };

    let (context, _dir) = support::context("ls");
    let output = find("list_directory")
        .execute(json!({"path": root_path.to_str().unwrap()}), context)
        .await
        .unwrap();
    let listing = text_of(&output.content);
    assert!(listing.contains("[FILE] notes.txt"), "{listing}");
    assert!(listing.contains("[DIR] sub"), "{listing}");

    let (context, _dir) = support::context("read");
    let output = find("read_text_file")
        .execute(
            json!({"path": root_path.join("notes.txt").to_str().unwrap()}),
            context,
        )
        .await
        .unwrap();
    assert!(text_of(&output.content).contains("keel was here"));

    // Outside its root the server refuses: an isError result, a tool error.
    let (context, _dir) = support::context("outside");
    let error = find("read_text_file")
        .execute(json!({"path": "/etc/hostname"}), context)
        .await
        .unwrap_err();
    assert_eq!(
        error.code,
        keel_protocol::ToolErrorCode::ToolError,
        "{error:?}"
    );
    assert!(!error.content.is_empty());
    server.shutdown().await;
}
