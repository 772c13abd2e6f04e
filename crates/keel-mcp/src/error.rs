//! Why a server could not be started.

use std::time::Duration;

use crate::config::ConfigError;

/// Why [`McpServer::start`](crate::McpServer::start) failed. Every variant
/// names the server; none holds a secret (a bearer token found in a
/// transport's error text is replaced by `[redacted]`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The configuration is not usable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The server is configured with `enabled = false`.
    #[error("MCP server `{server}` is disabled (`enabled = false`)")]
    Disabled {
        /// The server.
        server: String,
    },
    /// The variable `bearer_token_env_var` names is not in the caller's
    /// environment (or is empty or not UTF-8).
    #[error(
        "MCP server `{server}`: `bearer_token_env_var` names `{variable}`, which is not set in Keel's environment"
    )]
    MissingToken {
        /// The server.
        server: String,
        /// The variable's name (not its value).
        variable: String,
    },
    /// The stdio server's program could not be started.
    #[error("MCP server `{server}`: could not start `{program}`")]
    Spawn {
        /// The server.
        server: String,
        /// The configured `command`.
        program: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP client could not be built.
    #[error("MCP server `{server}`: could not build the HTTP client")]
    HttpClient {
        /// The server.
        server: String,
        /// reqwest's error.
        #[source]
        source: reqwest::Error,
    },
    /// Initialize and tools/list did not finish within the startup timeout.
    #[error("MCP server `{server}` did not start within {} s (`startup_timeout_sec`)", timeout.as_secs())]
    StartupTimeout {
        /// The server.
        server: String,
        /// The bound.
        timeout: Duration,
    },
    /// The initialize exchange failed (the server refused it, exited, or
    /// was unreachable; an HTTP server that refuses the token says so here).
    #[error("MCP server `{server}`: initialize failed: {source}")]
    Initialize {
        /// The server.
        server: String,
        /// The transport's or protocol's error, redacted.
        #[source]
        source: Redacted,
    },
    /// tools/list failed.
    #[error("MCP server `{server}`: tools/list failed: {source}")]
    ListTools {
        /// The server.
        server: String,
        /// The protocol's error, redacted.
        #[source]
        source: Redacted,
    },
}

impl McpError {
    /// The server the error is about.
    pub fn server(&self) -> &str {
        match self {
            Self::Config(error) => match error {
                ConfigError::InvalidName { name } => name,
                ConfigError::NoTransport { server }
                | ConfigError::BothTransports { server }
                | ConfigError::WrongTransportKey { server, .. }
                | ConfigError::InvalidValue { server, .. } => server,
            },
            Self::Disabled { server }
            | Self::MissingToken { server, .. }
            | Self::Spawn { server, .. }
            | Self::HttpClient { server, .. }
            | Self::StartupTimeout { server, .. }
            | Self::Initialize { server, .. }
            | Self::ListTools { server, .. } => server,
        }
    }
}

/// An rmcp error's text (its whole source chain, one line) with a secret
/// cut out: the source of [`McpError::Initialize`] and
/// [`McpError::ListTools`]. rmcp's errors are not kept as they are because
/// their text may quote what a server answered, and a server may echo the
/// token it was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text}")]
pub struct Redacted {
    text: String,
}

impl Redacted {
    pub(crate) fn new(error: &(dyn std::error::Error + 'static), secret: Option<&str>) -> Self {
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
        if let Some(secret) = secret.filter(|secret| !secret.is_empty()) {
            text = text.replace(secret, "[redacted]");
        }
        Self { text }
    }

    /// The redacted text.
    pub fn text(&self) -> &str {
        &self.text
    }
}
