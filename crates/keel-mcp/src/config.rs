//! How one MCP server is configured: a `[mcp_servers.NAME]` table.
//!
//! The keys follow Codex's `mcp_servers`: `command`/`args`/`env`/`env_vars`/
//! `cwd` for a stdio server, or `url`/`bearer_token_env_var` for streamable
//! HTTP, plus the tool filters, timeouts and flags every server has.
//! [`McpServerConfig::validate`] checks what serde cannot; its errors name
//! the server and the key and never quote a value (a value may be a secret).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The startup timeout when `startup_timeout_sec` is not given, in seconds.
pub const DEFAULT_STARTUP_TIMEOUT_SEC: u64 = 10;
/// The tool-call timeout when `tool_timeout_sec` is not given, in seconds.
pub const DEFAULT_TOOL_TIMEOUT_SEC: u64 = 60;

/// One configured MCP server: a `[mcp_servers.NAME]` table of config.toml.
///
/// Exactly one of `command` (a stdio server, a child process) and `url` (a
/// streamable HTTP server) is set ([`McpServerConfig::validate`]). Unknown
/// keys are refused when it is deserialized.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct McpServerConfig {
    /// The program of a stdio server, looked up on the `PATH` it is given.
    #[serde(default)]
    pub command: Option<String>,
    /// The program's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set in the stdio server's environment, as given.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of variables passed through from the caller's environment
    /// (when it holds them) into the stdio server's.
    #[serde(default)]
    pub env_vars: Vec<String>,
    /// The stdio server's working directory (the caller's when unset).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The endpoint of a streamable HTTP server.
    #[serde(default)]
    pub url: Option<String>,
    /// The variable of the caller's environment that holds the HTTP
    /// server's bearer token. The token is sent only in the
    /// `Authorization` header: never in a URL, a log line or an error.
    #[serde(default)]
    pub bearer_token_env_var: Option<String>,
    /// When set, only these of the server's tools are offered.
    #[serde(default)]
    pub enabled_tools: Option<Vec<String>>,
    /// These of the server's tools are never offered.
    #[serde(default)]
    pub disabled_tools: Vec<String>,
    /// How long starting may take (initialize and tools/list), in seconds.
    #[serde(default = "default_startup_timeout_sec")]
    pub startup_timeout_sec: u64,
    /// How long one tool call may take, in seconds.
    #[serde(default = "default_tool_timeout_sec")]
    pub tool_timeout_sec: u64,
    /// Whether a run may not start without this server.
    #[serde(default)]
    pub required: bool,
    /// Tool names (the server's own, without the `mcp__` prefix) the user
    /// trusts in `auto` mode.
    #[serde(default)]
    pub auto_approve: Vec<String>,
    /// Whether the server is started at all.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
}

fn default_startup_timeout_sec() -> u64 {
    DEFAULT_STARTUP_TIMEOUT_SEC
}

fn default_tool_timeout_sec() -> u64 {
    DEFAULT_TOOL_TIMEOUT_SEC
}

fn default_enabled() -> bool {
    true
}

/// Why a server's configuration is not usable. Each names the server and
/// the key; none quotes a configured value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The server's name is not `[A-Za-z0-9_-]+` (it forms tool names).
    #[error(
        "MCP server name `{name}` is not usable: use only letters, digits, `_` and `-`, without `__` (it becomes part of tool names)"
    )]
    InvalidName {
        /// The name as configured (a table key, not a secret).
        name: String,
    },
    /// Neither `command` nor `url` is set.
    #[error("MCP server `{server}`: set `command` (a stdio server) or `url` (streamable HTTP)")]
    NoTransport {
        /// The server.
        server: String,
    },
    /// Both `command` and `url` are set.
    #[error("MCP server `{server}`: set only one of `command` and `url`")]
    BothTransports {
        /// The server.
        server: String,
    },
    /// A key that belongs to the other transport is set.
    #[error("MCP server `{server}`: `{key}` applies only to a {applies_to} server")]
    WrongTransportKey {
        /// The server.
        server: String,
        /// The key.
        key: &'static str,
        /// `stdio` or `streamable HTTP`.
        applies_to: &'static str,
    },
    /// A key's value is empty or malformed (the value itself is not shown).
    #[error("MCP server `{server}`: `{key}` {problem}")]
    InvalidValue {
        /// The server.
        server: String,
        /// The key.
        key: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl McpServerConfig {
    /// A stdio server running `command` with no arguments and every other
    /// key at its default.
    pub fn stdio(command: impl Into<String>) -> Self {
        Self {
            command: Some(command.into()),
            ..Self::empty()
        }
    }

    /// A streamable HTTP server at `url`, every other key at its default.
    pub fn http(url: impl Into<String>) -> Self {
        Self {
            url: Some(url.into()),
            ..Self::empty()
        }
    }

    fn empty() -> Self {
        Self {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            env_vars: Vec::new(),
            cwd: None,
            url: None,
            bearer_token_env_var: None,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            startup_timeout_sec: DEFAULT_STARTUP_TIMEOUT_SEC,
            tool_timeout_sec: DEFAULT_TOOL_TIMEOUT_SEC,
            required: false,
            auto_approve: Vec::new(),
            enabled: true,
        }
    }

    /// The startup timeout ([`McpServerConfig::startup_timeout_sec`]).
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_secs(self.startup_timeout_sec)
    }

    /// The tool-call timeout ([`McpServerConfig::tool_timeout_sec`]).
    pub fn tool_timeout(&self) -> Duration {
        Duration::from_secs(self.tool_timeout_sec)
    }

    /// Whether the server's tool `tool` is offered under the
    /// `enabled_tools`/`disabled_tools` filters.
    pub fn offers(&self, tool: &str) -> bool {
        let enabled = self
            .enabled_tools
            .as_ref()
            .is_none_or(|enabled| enabled.iter().any(|name| name == tool));
        enabled && !self.disabled_tools.iter().any(|name| name == tool)
    }

    /// Checks the server's name and what serde cannot: exactly one of
    /// `command` and `url`, no key of the other transport, no empty program,
    /// URL or variable name, and timeouts above zero.
    pub fn validate(&self, name: &str) -> Result<(), ConfigError> {
        validate_name(name)?;
        let server = || name.to_owned();
        let invalid = |key, problem| ConfigError::InvalidValue {
            server: server(),
            key,
            problem,
        };
        match (&self.command, &self.url) {
            (None, None) => return Err(ConfigError::NoTransport { server: server() }),
            (Some(_), Some(_)) => return Err(ConfigError::BothTransports { server: server() }),
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(invalid("command", "is empty"));
                }
                if self.bearer_token_env_var.is_some() {
                    return Err(ConfigError::WrongTransportKey {
                        server: server(),
                        key: "bearer_token_env_var",
                        applies_to: "streamable HTTP",
                    });
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid("url", "must start with http:// or https://"));
                }
                let stdio_keys: [(&'static str, bool); 4] = [
                    ("args", !self.args.is_empty()),
                    ("env", !self.env.is_empty()),
                    ("env_vars", !self.env_vars.is_empty()),
                    ("cwd", self.cwd.is_some()),
                ];
                if let Some((key, _)) = stdio_keys.iter().find(|(_, set)| *set) {
                    return Err(ConfigError::WrongTransportKey {
                        server: server(),
                        key,
                        applies_to: "stdio",
                    });
                }
                if let Some(variable) = &self.bearer_token_env_var
                    && !is_variable_name(variable)
                {
                    return Err(invalid("bearer_token_env_var", "is not a variable name"));
                }
            }
        }
        if self
            .env_vars
            .iter()
            .any(|variable| !is_variable_name(variable))
        {
            return Err(invalid(
                "env_vars",
                "holds a name that is not a variable name",
            ));
        }
        if self.env.keys().any(|variable| !is_variable_name(variable)) {
            return Err(invalid("env", "holds a name that is not a variable name"));
        }
        if self.startup_timeout_sec == 0 {
            return Err(invalid("startup_timeout_sec", "must be at least 1"));
        }
        if self.tool_timeout_sec == 0 {
            return Err(invalid("tool_timeout_sec", "must be at least 1"));
        }
        // Plain tool names only: each becomes an allow rule for exactly
        // that tool of this server, never a pattern.
        if self
            .auto_approve
            .iter()
            .any(|tool| !crate::tool::usable_tool_name(tool))
        {
            return Err(invalid(
                "auto_approve",
                "holds an entry that is not a tool name (letters, digits, `_` and `-`, no `__`)",
            ));
        }
        Ok(())
    }
}

/// Checks that `name` is usable as a server name: `[A-Za-z0-9_-]+`.
pub fn validate_name(name: &str) -> Result<(), ConfigError> {
    // No `__`: it separates the server from the tool in `mcp__<server>__<tool>`,
    // so server `a` with tool `b__x` and server `a__b` with tool `x` would meet.
    let usable = !name.is_empty()
        && !name.contains("__")
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    if usable {
        Ok(())
    } else {
        Err(ConfigError::InvalidName {
            name: name.to_owned(),
        })
    }
}

/// A name a process environment can hold: not empty, no `=` and no NUL.
fn is_variable_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn parse(toml_text: &str) -> Result<McpServerConfig, String> {
        // The crate has no TOML parser; JSON has the same data model here.
        serde_json::from_str(toml_text).map_err(|error| error.to_string())
    }

    #[test]
    fn names_with_the_separator_and_patterns_in_auto_approve_are_refused() {
        assert!(
            validate_name("a__b").is_err(),
            "`__` separates server and tool"
        );
        assert!(validate_name("a_b-c").is_ok());
        let mut config = McpServerConfig::stdio("node");
        config.auto_approve = vec!["echo".into()];
        assert!(config.validate("s").is_ok());
        for pattern in ["*", "x(/tmp/*)", "bash(rm *)", "my tool", "b__x"] {
            config.auto_approve = vec![pattern.into()];
            let error = config.validate("s").unwrap_err().to_string();
            assert!(error.contains("auto_approve"), "{pattern}: {error}");
        }
        assert!(!crate::tool::usable_tool_name("b__x"));
    }

    #[test]
    fn defaults_follow_the_documented_values() {
        let config = parse(r#"{"command": "node"}"#).unwrap();
        assert_eq!(config.startup_timeout_sec, 10);
        assert_eq!(config.tool_timeout_sec, 60);
        assert!(config.enabled);
        assert!(!config.required);
        config.validate("docs").unwrap();
    }

    #[test]
    fn unknown_keys_are_refused() {
        let error = parse(r#"{"command": "node", "comand": "x"}"#).unwrap_err();
        assert!(error.contains("comand"), "{error}");
    }

    #[test]
    fn exactly_one_transport() {
        let none = parse("{}").unwrap().validate("s").unwrap_err();
        assert!(matches!(none, ConfigError::NoTransport { .. }), "{none}");
        let both = parse(r#"{"command": "a", "url": "http://x"}"#)
            .unwrap()
            .validate("s")
            .unwrap_err();
        assert!(matches!(both, ConfigError::BothTransports { .. }), "{both}");
        assert!(both.to_string().contains("`s`"), "{both}");
    }

    #[test]
    fn keys_of_the_other_transport_are_refused() {
        let error = parse(r#"{"url": "http://x", "env": {"A": "secret-value"}}"#)
            .unwrap()
            .validate("web")
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("`web`") && text.contains("`env`"), "{text}");
        assert!(!text.contains("secret-value"), "{text}");
        let error = parse(r#"{"command": "x", "bearer_token_env_var": "T"}"#)
            .unwrap()
            .validate("s")
            .unwrap_err();
        assert!(
            error.to_string().contains("bearer_token_env_var"),
            "{error}"
        );
    }

    #[test]
    fn errors_never_quote_values() {
        let error = parse(r#"{"url": "ftp://user:hunter2@host"}"#)
            .unwrap()
            .validate("web")
            .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("`url`") && !text.contains("hunter2"),
            "{text}"
        );
    }

    #[test]
    fn names_form_tool_names() {
        validate_name("fs_2-b").unwrap();
        for bad in ["", "a b", "a.b", "é", "a__b/c"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tool_filters() {
        let mut config = McpServerConfig::stdio("x");
        assert!(config.offers("a"));
        config.enabled_tools = Some(vec!["a".into(), "b".into()]);
        config.disabled_tools = vec!["b".into()];
        assert!(config.offers("a"));
        assert!(!config.offers("b"));
        assert!(!config.offers("c"));
    }

    #[test]
    fn zero_timeouts_are_refused() {
        let mut config = McpServerConfig::stdio("x");
        config.tool_timeout_sec = 0;
        let error = config.validate("s").unwrap_err();
        assert!(error.to_string().contains("tool_timeout_sec"), "{error}");
    }
}
