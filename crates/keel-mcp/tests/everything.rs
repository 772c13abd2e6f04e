//! keel-mcp against `@modelcontextprotocol/server-everything` 2026.8.31 over
//! stdio (`node …/server-everything/dist/index.js stdio`): a real server
//! nobody here wrote. Tool names are taken from its tools/list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_mcp::{McpServer, McpServerConfig, McpServerState};
use keel_protocol::{ToolErrorCode, UserContent};
use keel_tool_api::Tool;
use serde_json::{Value, json};
use support::*;

fn everything() -> Option<McpServerConfig> {
    let servers = npm_servers()?;
    Some(node_server(&servers, "server-everything", &["stdio"]))
}

fn tool(server: &McpServer, name: &str) -> Arc<dyn Tool> {
    let full = format!("mcp__everything__{name}");
    server
        .tools()
        .into_iter()
        .find(|tool| tool.name() == full)
        .unwrap_or_else(|| panic!("{full} not offered"))
}

#[tokio::test]
async fn tools_are_listed_with_names_descriptions_and_schemas() {
    let Some(config) = everything() else { return };
    let mut server = start("everything", &config).await;
    assert_eq!(server.state(), McpServerState::Ready);
    let info = server
        .server_info()
        .expect("server-everything names itself");
    assert!(
        !info.name.is_empty() && !info.version.is_empty(),
        "{info:?}"
    );
    let names: Vec<String> = server.tools().iter().map(|t| t.name().to_owned()).collect();
    eprintln!("server-everything tools: {names:?}");
    for expected in [
        "echo",
        "get-sum",
        "get-env",
        "get-tiny-image",
        "get-structured-content",
        "get-resource-links",
        "trigger-long-running-operation",
    ] {
        assert!(
            names.contains(&format!("mcp__everything__{expected}")),
            "{expected} missing from {names:?}"
        );
    }
    // Every schema the server gave compiles in Keel's registry.
    let mut registry = keel_tool_api::ToolRegistry::new();
    for offered in server.tools() {
        let schema = offered.parameters();
        registry.register(offered).unwrap();
        assert_eq!(schema["type"], "object");
    }
    let echo = tool(&server, "echo");
    assert!(!echo.description().is_empty());
    let schema = echo.parameters();
    assert_eq!(schema["type"], "object");
    assert!(schema["properties"]["message"].is_object(), "{schema}");
    // The intent is the Tool API's default: custom, unknown scope.
    let (_context, dir) = context("c");
    let workspace = keel_tool_api::Workspace::new(dir.path()).unwrap();
    let intent = echo.intent(&json!({}), &workspace);
    assert_eq!(intent.kind, keel_protocol::IntentKind::Custom);

    let infos = server.tool_infos();
    let long = infos
        .iter()
        .find(|info| info.tool == "trigger-long-running-operation")
        .unwrap();
    assert!(
        long.read_only,
        "server-everything annotates it readOnlyHint"
    );
    assert_eq!(long.server, "everything");
    assert!(!long.auto_approve);
    server.shutdown().await;
    assert_eq!(server.state(), McpServerState::Exited);
}

#[tokio::test]
async fn text_image_and_structured_results() {
    let Some(config) = everything() else { return };
    let mut server = start("everything", &config).await;

    let (context, _dir) = support::context("echo");
    let output = tool(&server, "echo")
        .execute(json!({"message": "hello from keel"}), context)
        .await
        .unwrap();
    assert_eq!(text_of(&output.content), "Echo: hello from keel");

    let (context, _dir) = support::context("sum");
    let output = tool(&server, "get-sum")
        .execute(json!({"a": 2, "b": 40}), context)
        .await
        .unwrap();
    assert!(text_of(&output.content).contains("42"), "{output:?}");

    let (context, _dir) = support::context("image");
    let output = tool(&server, "get-tiny-image")
        .execute(json!({}), context)
        .await
        .unwrap();
    let image = output
        .content
        .iter()
        .find_map(|block| match block {
            UserContent::Image(image) => Some(image.clone()),
            _ => None,
        })
        .expect("an image block");
    assert_eq!(image.mime_type, "image/png");
    assert!(image.data.len() > 100, "base64 data expected");

    let (context, _dir) = support::context("weather");
    let output = tool(&server, "get-structured-content")
        .execute(json!({"location": "Chicago"}), context)
        .await
        .unwrap();
    let details = output.details.expect("structured content in the details");
    assert_eq!(details["structured_content"]["temperature"], 36);
    assert!(text_of(&output.content).contains("drizzle"));

    let (context, _dir) = support::context("links");
    let output = tool(&server, "get-resource-links")
        .execute(json!({"count": 2}), context)
        .await
        .unwrap();
    let text = text_of(&output.content);
    assert_eq!(
        text.matches("[resource link: ").count(),
        2,
        "resource links are described, not dropped: {text}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_long_running_call_is_cancelled_promptly_and_the_server_stays_usable() {
    let Some(config) = everything() else { return };
    let mut server = start("everything", &config).await;
    let long = tool(&server, "trigger-long-running-operation");
    let (context, _dir) = support::context("long");
    let cancel = context.cancel.clone();
    let call = tokio::spawn(async move {
        long.execute(json!({"duration": 30, "steps": 30}), context)
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cancelled_at = Instant::now();
    cancel.cancel();
    let error = call.await.unwrap().unwrap_err();
    let took = cancelled_at.elapsed();
    assert_eq!(error.code, ToolErrorCode::Cancelled, "{error:?}");
    eprintln!("cancelled after {took:?}");
    assert!(took < Duration::from_secs(5), "cancellation took {took:?}");

    let (context, _dir) = support::context("after");
    let output = tool(&server, "echo")
        .execute(json!({"message": "still here"}), context)
        .await
        .unwrap();
    assert_eq!(text_of(&output.content), "Echo: still here");
    assert_eq!(server.state(), McpServerState::Ready);
    server.shutdown().await;
}

#[tokio::test]
async fn a_call_past_tool_timeout_sec_is_a_timeout() {
    let Some(mut config) = everything() else {
        return;
    };
    config.tool_timeout_sec = 1;
    let mut server = start("everything", &config).await;
    let (context, _dir) = support::context("slow");
    let started = Instant::now();
    let error = tool(&server, "trigger-long-running-operation")
        .execute(json!({"duration": 20, "steps": 20}), context)
        .await
        .unwrap_err();
    assert_eq!(error.code, ToolErrorCode::Timeout, "{error:?}");
    assert!(
        error.message.contains("tool_timeout_sec"),
        "{}",
        error.message
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // The server is still usable after the abandoned call.
    let (context, _dir) = support::context("after");
    tool(&server, "echo")
        .execute(json!({"message": "x"}), context)
        .await
        .unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn the_environment_is_scrubbed() {
    let Some(mut config) = everything() else {
        return;
    };
    // The caller's full environment holds two secrets; only one is passed.
    let mut vars: Vec<(String, String)> = std::env::vars().collect();
    vars.push(("KEEL_TEST_SECRET_KEPT_OUT".into(), "do-not-leak-1".into()));
    vars.push(("KEEL_TEST_PASSED_THROUGH".into(), "passed-2".into()));
    let env = keel_tool_api::HostEnv::new(vars);
    config.env_vars = vec![
        "KEEL_TEST_PASSED_THROUGH".into(),
        "KEEL_TEST_NOT_SET".into(),
    ];
    config.env = BTreeMap::from([("KEEL_TEST_GIVEN".to_owned(), "given-3".to_owned())]);
    let mut server = McpServer::start("everything", &config, &env).await.unwrap();
    let (context, _dir) = support::context("env");
    let output = tool(&server, "get-env")
        .execute(json!({}), context)
        .await
        .unwrap();
    let seen: BTreeMap<String, Value> = serde_json::from_str(&text_of(&output.content)).unwrap();
    assert_eq!(
        seen.get("KEEL_TEST_PASSED_THROUGH"),
        Some(&json!("passed-2"))
    );
    assert_eq!(seen.get("KEEL_TEST_GIVEN"), Some(&json!("given-3")));
    assert!(!seen.contains_key("KEEL_TEST_SECRET_KEPT_OUT"), "{seen:?}");
    assert!(!seen.contains_key("KEEL_TEST_NOT_SET"));
    assert!(seen.contains_key("PATH"));
    let allowed: Vec<&str> = keel_mcp::ESSENTIAL_ENV_VARS
        .iter()
        .copied()
        .chain(["PATH", "KEEL_TEST_PASSED_THROUGH", "KEEL_TEST_GIVEN"])
        .collect();
    for name in seen.keys() {
        // node itself may add nothing; anything else leaked through.
        assert!(
            allowed.contains(&name.as_str()),
            "{name} leaked into the server"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn the_server_process_is_gone_after_shutdown_and_after_drop() {
    let Some(config) = everything() else { return };
    let mut server = start("everything", &config).await;
    let pid = server.process_id().expect("a stdio server has a pid");
    assert!(running(pid));
    server.shutdown().await;
    assert!(gone_within(pid), "pid {pid} still running after shutdown");

    let server = start("everything", &config).await;
    let pid = server.process_id().unwrap();
    assert!(running(pid));
    drop(server);
    assert!(gone_within(pid), "pid {pid} still running after drop");
}

#[tokio::test]
async fn tool_filters_and_auto_approve() {
    let Some(mut config) = everything() else {
        return;
    };
    config.enabled_tools = Some(vec!["echo".into(), "get-sum".into(), "get-env".into()]);
    config.disabled_tools = vec!["get-env".into()];
    config.auto_approve = vec!["get-sum".into()];
    let mut server = start("everything", &config).await;
    let infos = server.tool_infos();
    let names: Vec<&str> = infos.iter().map(|info| info.tool.as_str()).collect();
    assert_eq!(names, vec!["echo", "get-sum"]);
    assert!(
        infos
            .iter()
            .find(|info| info.tool == "get-sum")
            .unwrap()
            .auto_approve
    );
    assert!(
        !infos
            .iter()
            .find(|info| info.tool == "echo")
            .unwrap()
            .auto_approve
    );
    assert_eq!(infos[0].name, "mcp__everything__echo");
    server.shutdown().await;
}
