//! A small MCP server for keel-mcp's tests, on rmcp's server side.
//!
//! `mcp_test_server stdio` serves on stdin/stdout. `mcp_test_server http
//! TOKEN` serves streamable HTTP on 127.0.0.1 (a free port), refuses every
//! request without `Authorization: Bearer TOKEN` with 401 (never quoting
//! what it got), and prints `listening on http://ADDR/mcp` on stdout.
//!
//! Tools: `echo` (its `text` back), `env` (its environment as a JSON
//! object), `cwd` (its working directory), `fds` (what its fds 0-2 are), `wait` (answers only when cancelled), `cancellations` (how many
//! requests have been cancelled so far), `crash` (the process exits in the
//! middle of the call), `spawn_sleeper` (starts `sleep 600` and answers
//! its pid), `read_only_probe` (annotated read-only).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct TestServer {
    cancelled: Arc<AtomicUsize>,
}

fn schema(value: Value) -> Arc<serde_json::Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(serde_json::Map::new()),
    }
}

fn tools() -> Vec<Tool> {
    let empty = || schema(json!({"type": "object", "properties": {}}));
    vec![
        Tool::new(
            "echo",
            "Answers its `text` argument",
            schema(json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"]
            })),
        ),
        Tool::new("env", "Answers the server's environment as JSON", empty()),
        Tool::new("cwd", "Answers the server's working directory", empty()),
        Tool::new(
            "fds",
            "Answers what its stdin, stdout and stderr are",
            empty(),
        ),
        Tool::new("wait", "Answers only when the call is cancelled", empty()),
        Tool::new(
            "cancellations",
            "How many requests were cancelled so far",
            empty(),
        ),
        Tool::new(
            "crash",
            "The server exits in the middle of the call",
            empty(),
        ),
        Tool::new(
            "spawn_sleeper",
            "Starts `sleep 600` and answers its pid",
            empty(),
        ),
        Tool::new("read_only_probe", "Does nothing, read-only", empty())
            .annotate(ToolAnnotations::new().read_only(true)),
        // A schema that is not an object schema: the client falls back.
        Tool::new(
            "odd_schema",
            "Has a string schema",
            schema(json!({"type": "string"})),
        ),
    ]
}

fn text(text: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        config.server_info = rmcp::model::Implementation::new("keel-mcp-test-server", "1.2.3");
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "echo" => {
                let said = request
                    .arguments
                    .as_ref()
                    .and_then(|arguments| arguments.get("text"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                text(said)
            }
            "env" => {
                let vars: serde_json::Map<String, Value> = std::env::vars()
                    .map(|(name, value)| (name, Value::String(value)))
                    .collect();
                text(Value::Object(vars).to_string())
            }
            "wait" => {
                context.ct.cancelled().await;
                self.cancelled.fetch_add(1, Ordering::SeqCst);
                Err(ErrorData::internal_error("cancelled", None))
            }
            "cwd" => match std::env::current_dir() {
                Ok(dir) => text(dir.to_string_lossy()),
                Err(error) => Err(ErrorData::internal_error(error.to_string(), None)),
            },
            "fds" => {
                let kinds: Vec<String> = (0..3)
                    .map(|fd| {
                        std::fs::read_link(format!("/proc/self/fd/{fd}"))
                            .map(|target| target.to_string_lossy().into_owned())
                            .unwrap_or_else(|error| error.to_string())
                    })
                    .collect();
                text(kinds.join("\n"))
            }
            "cancellations" => text(self.cancelled.load(Ordering::SeqCst).to_string()),
            "crash" => std::process::exit(3),
            "spawn_sleeper" => match std::process::Command::new("sleep")
                .arg("600")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
            {
                Ok(child) => text(child.id().to_string()),
                Err(error) => Err(ErrorData::internal_error(error.to_string(), None)),
            },
            "read_only_probe" | "odd_schema" => text("ok"),
            other => Err(ErrorData::invalid_params(
                format!("no tool named {other}"),
                None,
            )),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("stdio") => {
            let service = TestServer::default()
                .serve(rmcp::transport::stdio())
                .await?;
            service.waiting().await?;
        }
        Some("http") => {
            let token = args.get(1).cloned().unwrap_or_default();
            serve_http(token).await?;
        }
        _ => {
            eprintln!("usage: mcp_test_server stdio | http TOKEN");
            std::process::exit(2);
        }
    }
    Ok(())
}

async fn serve_http(token: String) -> Result<(), Box<dyn std::error::Error>> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let service: StreamableHttpService<TestServer, LocalSessionManager> =
        StreamableHttpService::new(
            || Ok(TestServer::default()),
            Default::default(),
            StreamableHttpServerConfig::default().with_sse_keep_alive(None),
        );
    let expected = format!("Bearer {token}");
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let authorized = request
                        .headers()
                        .get("authorization")
                        .and_then(|value| value.to_str().ok())
                        == Some(expected.as_str());
                    async move {
                        if authorized {
                            next.run(request).await
                        } else {
                            axum::response::IntoResponse::into_response((
                                axum::http::StatusCode::UNAUTHORIZED,
                                "missing or wrong bearer token",
                            ))
                        }
                    }
                },
            ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}
