//! One MCP tool as a Keel [`Tool`].

use std::sync::Arc;

use keel_protocol::{ExecutionMode, ToolErrorCode};
use keel_tool_api::{Tool, ToolContext, ToolError, ToolFuture};
use rmcp::ServiceError;
use rmcp::model::CallToolRequestParams;
use serde::Serialize;
use serde_json::{Value, json};

use crate::config::McpServerConfig;
use crate::content::map_result;
use crate::server::{McpServerState, Shared, is_gone};

/// The prefix of every MCP tool's name: `mcp__<server>__<tool>`.
pub const TOOL_PREFIX: &str = "mcp__";

/// The Keel name of tool `tool` of server `server`: `mcp__<server>__<tool>`.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{TOOL_PREFIX}{server}__{tool}")
}

/// The longest Keel name of an MCP tool: what model APIs accept.
pub const MAX_TOOL_NAME: usize = 64;

/// Whether a server's tool name can be offered: `[A-Za-z0-9_-]+` (what
/// model APIs accept in a tool name) without `__`, which separates the
/// server from the tool in the Keel name.
pub(crate) fn usable_tool_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains("__")
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

/// What the permission policy needs to know of one MCP tool
/// ([`McpServer::tool_infos`](crate::McpServer::tool_infos)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct McpToolInfo {
    /// The Keel name, `mcp__<server>__<tool>`.
    pub name: String,
    /// The server's configured name.
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    /// The server's description of the tool (empty when it gave none).
    pub description: String,
    /// Whether the server annotated the tool `readOnlyHint: true` (a hint
    /// from the server, not something Keel checked).
    pub read_only: bool,
    /// Whether the tool is listed in the server's `auto_approve`.
    pub auto_approve: bool,
}

impl McpToolInfo {
    pub(crate) fn new(server: &str, tool: &rmcp::model::Tool, config: &McpServerConfig) -> Self {
        Self {
            name: tool_name(server, &tool.name),
            server: server.to_owned(),
            tool: tool.name.to_string(),
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            read_only: tool
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.read_only_hint)
                .unwrap_or(false),
            auto_approve: config.auto_approve.iter().any(|name| *name == *tool.name),
        }
    }
}

/// A tool of an MCP server, called with `tools/call`.
pub(crate) struct McpTool {
    shared: Arc<Shared>,
    name: String,
    tool: String,
    description: String,
    parameters: Value,
}

impl McpTool {
    pub(crate) fn new(shared: Arc<Shared>, tool: &rmcp::model::Tool) -> Self {
        let name = tool_name(&shared.name, &tool.name);
        let parameters = usable_schema(&shared.name, &tool.name, &tool.input_schema);
        Self {
            name,
            tool: tool.name.to_string(),
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            parameters,
            shared,
        }
    }

    fn unavailable(&self) -> ToolError {
        ToolError::new(
            ToolErrorCode::ServerUnavailable,
            format!(
                "MCP server `{}` is not running (it exited, its connection closed, or it was shut down): `{}` cannot be called",
                self.shared.name, self.name
            ),
        )
    }

    fn service_error(&self, error: ServiceError) -> ToolError {
        if is_gone(&error) {
            self.shared.mark_exited();
            return self.unavailable();
        }
        match error {
            ServiceError::McpError(error) => ToolError::new(
                ToolErrorCode::ToolError,
                format!(
                    "MCP server `{}` refused the call to `{}`: {}",
                    self.shared.name, self.tool, error.message
                ),
            ),
            ServiceError::Timeout { .. } => self.timeout(),
            ServiceError::Cancelled { .. } => ToolError::cancelled(),
            other => ToolError::new(
                ToolErrorCode::ToolError,
                format!(
                    "MCP server `{}`: the call to `{}` failed: {other}",
                    self.shared.name, self.tool
                ),
            ),
        }
    }

    fn timeout(&self) -> ToolError {
        ToolError::new(
            ToolErrorCode::Timeout,
            format!(
                "MCP tool `{}` of server `{}` did not answer within {} s (`tool_timeout_sec`); the call was cancelled",
                self.tool,
                self.shared.name,
                self.shared.tool_timeout.as_secs()
            ),
        )
    }
}

/// The tool's input schema when it is a usable object schema (one that
/// says `"type": "object"`, or says no type but has `properties`, and
/// compiles); else `{"type": "object"}`, logged.
fn usable_schema(server: &str, tool: &str, schema: &serde_json::Map<String, Value>) -> Value {
    let mut schema = schema.clone();
    if !schema.contains_key("type") && schema.get("properties").is_some_and(Value::is_object) {
        schema.insert("type".to_owned(), Value::String("object".to_owned()));
    }
    let schema = Value::Object(schema);
    let is_object = schema.get("type").and_then(Value::as_str) == Some("object");
    if is_object && jsonschema::validator_for(&schema).is_ok() {
        return schema;
    }
    tracing::warn!(
        server,
        tool,
        "MCP tool's input schema is not a usable object schema; offered as {{\"type\": \"object\"}}"
    );
    json!({ "type": "object" })
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn execution_mode(&self) -> ExecutionMode {
        // Whether a server's tools may overlap is the server's business;
        // Keel runs them one at a time.
        ExecutionMode::Sequential
    }

    /// Calls the tool with `tools/call`, bounded by `tool_timeout_sec` and
    /// cancelled with `context.cancel`. On timeout or cancellation the
    /// request's future is dropped, and rmcp then sends the server
    /// `notifications/cancelled` for it.
    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(async move {
            if self.shared.state() != McpServerState::Ready {
                return Err(self.unavailable());
            }
            let mut params = CallToolRequestParams::new(self.tool.clone());
            match arguments {
                Value::Object(arguments) => params = params.with_arguments(arguments),
                Value::Null => {}
                _ => {
                    return Err(ToolError::new(
                        ToolErrorCode::InvalidArguments,
                        format!("Arguments for `{}` are not a JSON object", self.name),
                    ));
                }
            }
            let peer = self.shared.peer.clone();
            let call = tokio::time::timeout(self.shared.tool_timeout, peer.call_tool(params));
            tokio::select! {
                biased;
                () = context.cancel.cancelled() => Err(ToolError::cancelled()),
                outcome = call => match outcome {
                    Err(_elapsed) => Err(self.timeout()),
                    Ok(Err(error)) => Err(self.service_error(error)),
                    Ok(Ok(result)) => map_result(&self.shared.name, &self.tool, result),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn usable(schema: Value) -> Value {
        let Value::Object(map) = schema else {
            panic!("not an object")
        };
        usable_schema("s", "t", &map)
    }

    #[test]
    fn object_schemas_are_kept_and_others_fall_back() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(usable(schema.clone()), schema);
        // No type but properties: an object schema that forgot to say so.
        assert_eq!(
            usable(json!({"properties": {"a": {"type": "string"}}})),
            json!({"type": "object", "properties": {"a": {"type": "string"}}})
        );
        assert_eq!(usable(json!({"type": "string"})), json!({"type": "object"}));
        assert_eq!(usable(json!({})), json!({"type": "object"}));
        // Does not compile: a `type` that is no JSON type.
        assert_eq!(
            usable(json!({"type": "object", "properties": {"a": {"type": "strnig"}}})),
            json!({"type": "object"})
        );
    }
}
