//! keel-mcp against the in-tree rmcp server (examples/mcp_test_server.rs):
//! streamable HTTP with a bearer token, a server that exits mid-call,
//! cancellation reaching the server, the process group, schema fallback,
//! startup failures and the `list` helper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_mcp::{McpError, McpServer, McpServerConfig, McpServerState};
use keel_protocol::ToolErrorCode;
use keel_tool_api::{HostEnv, Tool};
use serde_json::json;
use support::*;

const TOKEN: &str = "tok-3f9a7c1e5b-secret";

/// The test server serving streamable HTTP, killed when dropped.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start() -> Self {
        let mut child = Command::new(test_server_exe())
            .args(["http", TOKEN])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Self { child, url }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn env_with_token(token: &str) -> HostEnv {
    HostEnv::new([("PATH", "/usr/bin:/bin"), ("MY_MCP_TOKEN", token)])
}

fn http_config(url: &str) -> McpServerConfig {
    let mut config = McpServerConfig::http(url);
    config.bearer_token_env_var = Some("MY_MCP_TOKEN".into());
    config
}

fn find(server: &McpServer, tool: &str) -> Arc<dyn Tool> {
    let name = format!("mcp__{}__{tool}", server.name());
    server
        .tools()
        .into_iter()
        .find(|candidate| candidate.name() == name)
        .unwrap_or_else(|| panic!("{name} not offered"))
}

#[tokio::test]
async fn streamable_http_with_the_right_bearer_token_lists_and_calls() {
    let http = HttpServer::start();
    let mut server = McpServer::start("web", &http_config(&http.url), &env_with_token(TOKEN))
        .await
        .unwrap();
    assert_eq!(server.state(), McpServerState::Ready);
    assert_eq!(server.process_id(), None);
    let info = server.server_info().unwrap();
    assert_eq!(
        (info.name.as_str(), info.version.as_str()),
        ("keel-mcp-test-server", "1.2.3")
    );
    let (context, _dir) = support::context("echo");
    let output = find(&server, "echo")
        .execute(json!({"text": "over http"}), context)
        .await
        .unwrap();
    assert_eq!(text_of(&output.content), "over http");
    server.shutdown().await;
    assert_eq!(server.state(), McpServerState::Exited);
}

#[tokio::test]
async fn streamable_http_with_a_wrong_token_fails_without_showing_it() {
    let http = HttpServer::start();
    let wrong = "wrong-token-77c2d9";
    let error = McpServer::start("web", &http_config(&http.url), &env_with_token(wrong))
        .await
        .unwrap_err();
    let shown = format!("{error} / {error:?}");
    eprintln!("wrong token: {error}");
    assert!(matches!(error, McpError::Initialize { .. }), "{shown}");
    assert!(shown.contains("`web`"), "{shown}");
    assert!(
        shown.contains("401") || shown.to_lowercase().contains("unauthorized"),
        "{shown}"
    );
    assert!(!shown.contains(wrong) && !shown.contains(TOKEN), "{shown}");

    let error = McpServer::start("web", &http_config(&http.url), &HostEnv::empty())
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::MissingToken { .. }), "{error:?}");
    assert!(error.to_string().contains("MY_MCP_TOKEN"), "{error}");
}

#[tokio::test]
async fn a_server_that_exits_mid_call_is_unavailable_not_a_hang() {
    let mut server = start("crashy", &test_server_stdio()).await;
    let (context, _dir) = support::context("crash");
    let started = Instant::now();
    let error = tokio::time::timeout(
        Duration::from_secs(30),
        find(&server, "crash").execute(json!({}), context),
    )
    .await
    .expect("the call returns when the server dies")
    .unwrap_err();
    assert_eq!(error.code, ToolErrorCode::ServerUnavailable, "{error:?}");
    assert!(error.message.contains("`crashy`"), "{}", error.message);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(server.state(), McpServerState::Exited);
    let (context, _dir) = support::context("again");
    let error = find(&server, "echo")
        .execute(json!({"text": "x"}), context)
        .await
        .unwrap_err();
    assert_eq!(error.code, ToolErrorCode::ServerUnavailable);
    server.shutdown().await;
}

/// How many requests the test server saw cancelled.
async fn cancellations(server: &McpServer) -> u64 {
    let (context, _dir) = support::context("count");
    let output = find(server, "cancellations")
        .execute(json!({}), context)
        .await
        .unwrap();
    text_of(&output.content).parse().unwrap()
}

async fn await_cancellations(server: &McpServer, expected: u64) {
    let start = Instant::now();
    while cancellations(server).await < expected {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the server never saw notifications/cancelled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn cancelling_and_timing_out_send_notifications_cancelled() {
    let mut config = test_server_stdio();
    config.tool_timeout_sec = 1;
    let mut server = start("probe", &config).await;

    let (context, _dir) = support::context("wait");
    let cancel = context.cancel.clone();
    let wait = find(&server, "wait");
    let call = tokio::spawn(async move { wait.execute(json!({}), context).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    cancel.cancel();
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.code, ToolErrorCode::Cancelled);
    await_cancellations(&server, 1).await;

    let (context, _dir) = support::context("wait2");
    let error = find(&server, "wait")
        .execute(json!({}), context)
        .await
        .unwrap_err();
    assert_eq!(error.code, ToolErrorCode::Timeout, "{error:?}");
    await_cancellations(&server, 2).await;
    server.shutdown().await;
}

#[tokio::test]
async fn the_whole_process_group_is_killed() {
    let server = start("group", &test_server_stdio()).await;
    let leader = server.process_id().unwrap();
    let (context, _dir) = support::context("sleeper");
    let output = find(&server, "spawn_sleeper")
        .execute(json!({}), context)
        .await
        .unwrap();
    let sleeper: u32 = text_of(&output.content).parse().unwrap();
    assert!(running(sleeper));
    drop(server);
    assert!(gone_within(leader), "server {leader} survived");
    assert!(gone_within(sleeper), "its child {sleeper} survived");

    let mut server = start("group", &test_server_stdio()).await;
    let (context, _dir) = support::context("sleeper");
    let output = find(&server, "spawn_sleeper")
        .execute(json!({}), context)
        .await
        .unwrap();
    let sleeper: u32 = text_of(&output.content).parse().unwrap();
    server.shutdown().await;
    assert!(
        gone_within(sleeper),
        "its child {sleeper} survived shutdown"
    );
}

#[tokio::test]
async fn schemas_annotations_and_names() {
    let mut server = start("probe", &test_server_stdio()).await;
    let odd = find(&server, "odd_schema");
    assert_eq!(odd.parameters(), json!({"type": "object"}));
    let echo = find(&server, "echo");
    assert_eq!(echo.parameters()["required"], json!(["text"]));
    assert_eq!(
        echo.execution_mode(),
        keel_protocol::ExecutionMode::Sequential
    );
    let infos = server.tool_infos();
    let probe = infos
        .iter()
        .find(|info| info.tool == "read_only_probe")
        .unwrap();
    assert!(probe.read_only);
    assert_eq!(probe.name, "mcp__probe__read_only_probe");
    assert!(
        !infos
            .iter()
            .find(|info| info.tool == "echo")
            .unwrap()
            .read_only
    );
    // Every offered tool registers: its schema compiles.
    let mut registry = keel_tool_api::ToolRegistry::new();
    for tool in server.tools() {
        registry.register(tool).unwrap();
    }
    server.shutdown().await;
}

#[tokio::test]
async fn startup_failures_are_clear_and_leave_nothing_behind() {
    // A program that never answers initialize: the startup timeout, and
    // the process is killed.
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut silent = McpServerConfig::stdio("sh");
    silent.args = vec![
        "-c".into(),
        format!("echo $$ > '{}'; exec sleep 30", pid_file.display()),
    ];
    silent.startup_timeout_sec = 1;
    let started = Instant::now();
    let error = McpServer::start("silent", &silent, &host_env())
        .await
        .unwrap_err();
    assert!(
        matches!(error, McpError::StartupTimeout { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("`silent`"), "{error}");
    assert!(error.to_string().contains("startup_timeout_sec"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        gone_within(pid),
        "the silent server {pid} survived its failed start"
    );

    let missing = McpServerConfig::stdio("/nonexistent/keel-mcp-server");
    let error = McpServer::start("missing", &missing, &host_env())
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Spawn { .. }), "{error:?}");

    let error = McpServer::start("bad name", &test_server_stdio(), &host_env())
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Config(_)), "{error:?}");
}

#[tokio::test]
async fn list_reports_every_server() {
    let http = HttpServer::start();
    let mut disabled = test_server_stdio();
    disabled.enabled = false;
    let servers = vec![
        ("good".to_owned(), test_server_stdio()),
        (
            "broken".to_owned(),
            McpServerConfig::stdio("/nonexistent/keel-mcp-server"),
        ),
        ("off".to_owned(), disabled),
        ("web".to_owned(), http_config(&http.url)),
    ];
    let listings = keel_mcp::list(&servers, &env_with_token("not-the-token")).await;
    let names: Vec<&str> = listings.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, vec!["good", "broken", "off", "web"]);
    assert_eq!(listings[0].state, McpServerState::Ready);
    assert!(
        listings[0]
            .tools
            .iter()
            .any(|tool| tool.name == "mcp__good__echo")
    );
    assert!(matches!(listings[1].state, McpServerState::Failed { .. }));
    assert_eq!(listings[2].state, McpServerState::Disabled);
    let McpServerState::Failed { reason } = &listings[3].state else {
        panic!("{:?}", listings[3].state)
    };
    assert!(!reason.contains("not-the-token"), "{reason}");
    let json = serde_json::to_value(&listings).unwrap();
    assert_eq!(json[0]["state"]["state"], "ready");
}

#[tokio::test]
async fn the_working_directory_is_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_server_stdio();
    config.cwd = Some(dir.path().to_owned());
    let mut server = start("probe", &config).await;
    let (context, _tmp) = support::context("cwd");
    let output = find(&server, "cwd")
        .execute(json!({}), context)
        .await
        .unwrap();
    assert_eq!(
        std::path::PathBuf::from(text_of(&output.content))
            .canonicalize()
            .unwrap(),
        dir.path().canonicalize().unwrap()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn without_cwd_a_server_starts_in_the_root_never_where_keel_runs() {
    // Keel usually runs in a repository, whose files an interpreter or
    // `npx` in the server would load.
    let mut server = start("probe", &test_server_stdio()).await;
    let (context, _tmp) = support::context("cwd");
    let output = find(&server, "cwd")
        .execute(json!({}), context)
        .await
        .unwrap();
    assert_eq!(text_of(&output.content), "/");
    server.shutdown().await;
}

#[tokio::test]
async fn a_redirect_is_never_followed_so_the_token_stays_home() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Where a redirect would lead: counts every request it gets.
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let elsewhere = axum::Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { axum::http::StatusCode::NOT_FOUND }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, elsewhere).await });
    // The configured server answers every request with a redirect there.
    let location = target.clone();
    let redirecting = axum::Router::new().fallback(move || {
        let location = location.clone();
        async move {
            (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, location)],
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, redirecting).await });

    let error = McpServer::start("web", &http_config(&url), &env_with_token(TOKEN))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Initialize { .. }), "{error:?}");
    assert!(!format!("{error:?}").contains(TOKEN));
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the redirect was followed");
}

#[tokio::test]
async fn stdin_stdout_and_stderr_are_pipes_never_inherited() {
    let mut server = start("probe", &test_server_stdio()).await;
    let (context, _tmp) = support::context("fds");
    let output = find(&server, "fds")
        .execute(json!({}), context)
        .await
        .unwrap();
    let kinds = text_of(&output.content);
    let kinds: Vec<&str> = kinds.lines().collect();
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    for kind in kinds {
        assert!(kind.starts_with("pipe:"), "{kind}: not a pipe");
    }
    server.shutdown().await;
}
