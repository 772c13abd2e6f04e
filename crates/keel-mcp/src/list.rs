//! Starting every configured server once to report what it offers: what a
//! `keel mcp list` shows.

use keel_tool_api::HostEnv;
use serde::Serialize;

use crate::config::McpServerConfig;
use crate::server::{McpServer, McpServerInfo, McpServerState};
use crate::tool::McpToolInfo;

/// One server as [`list`] found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct McpServerListing {
    /// The configured name.
    pub name: String,
    /// `ready` when it started (it is shut down again before [`list`]
    /// returns), `failed` with the reason, or `disabled`.
    pub state: McpServerState,
    /// The server's name and version, when it started and gave them.
    pub server_info: Option<McpServerInfo>,
    /// Its offered tools (after the filters), when it started.
    pub tools: Vec<McpToolInfo>,
    /// Whether the server is `required`.
    pub required: bool,
}

/// Starts every enabled server of `servers` in parallel (each within its
/// own startup timeout), records its state and tools, and shuts it down
/// again. The listings are in the order of `servers`.
pub async fn list(servers: &[(String, McpServerConfig)], env: &HostEnv) -> Vec<McpServerListing> {
    let starts = servers.iter().map(|(name, config)| async move {
        let mut listing = McpServerListing {
            name: name.clone(),
            state: McpServerState::Starting,
            server_info: None,
            tools: Vec::new(),
            required: config.required,
        };
        if !config.enabled {
            listing.state = McpServerState::Disabled;
            return listing;
        }
        match McpServer::start(name, config, env).await {
            Ok(mut server) => {
                listing.state = server.state();
                listing.server_info = server.server_info().cloned();
                listing.tools = server.tool_infos();
                server.shutdown().await;
            }
            Err(error) => {
                listing.state = McpServerState::Failed {
                    reason: error_chain(&error),
                };
            }
        }
        listing
    });
    futures::future::join_all(starts).await
}

/// An error and its sources, one line.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
