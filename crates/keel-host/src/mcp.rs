//! The user's MCP servers: the `[mcp_servers.NAME]` tables of config.toml,
//! read into keel-mcp's [`McpServerConfig`]s, and the environment they are
//! started with.
//!
//! Invariants: only the user's file (and `-c mcp_servers.…` overrides) can
//! configure a server; the project layer `.keel/config.toml` may not add or
//! widen one (its `mcp_servers` key is dropped with a `project_key_ignored`
//! warning, [`crate::project`]). Each server's table is checked as keel-mcp
//! checks it ([`McpServerConfig::validate`]); an error names the file, the
//! server and the key, and never quotes a value (an `env` value may be a
//! secret). This is where the process environment MCP servers are started
//! with is read ([`McpSettings::host_env`]): keel-mcp reads none.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use keel_kernel::{Extension, ToolSource};
use keel_mcp::{McpServer, McpServerConfig};
pub use keel_mcp::{McpServerListing, McpServerState, McpToolInfo};
use keel_protocol::PermissionRuleLists;
use keel_tools::Tool;
use keel_tools::env::HostEnv;
use tokio::sync::watch;

use crate::HostError;
use crate::settings::invalid;

/// `[mcp_servers]`: each configured server by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpSettings {
    /// The servers, by name (sorted).
    pub servers: BTreeMap<String, McpServerConfig>,
}

impl McpSettings {
    /// Reads the `[mcp_servers]` table: a table of server tables.
    pub(crate) fn from_value(value: toml::Value, place: &str) -> Result<Self, HostError> {
        let toml::Value::Table(table) = value else {
            return Err(invalid(place, "`mcp_servers` is a table of server tables"));
        };
        let mut servers = BTreeMap::new();
        for (name, value) in table {
            let shown = format!("{place}, [mcp_servers.{name}]");
            keel_mcp::validate_name(&name).map_err(|error| invalid(place, &error.to_string()))?;
            if !value.is_table() {
                return Err(invalid(&shown, "a server is a table"));
            }
            let config: McpServerConfig = value.try_into().map_err(|error: toml::de::Error| {
                invalid(&shown, &without_values(error.message()))
            })?;
            config
                .validate(&name)
                .map_err(|error| invalid(place, &error.to_string()))?;
            servers.insert(name, config);
        }
        Ok(Self { servers })
    }

    /// The servers as `(name, config)` pairs, in name order: what
    /// [`keel_mcp::list`] takes.
    pub fn configs(&self) -> Vec<(String, McpServerConfig)> {
        self.servers
            .iter()
            .map(|(name, config)| (name.clone(), config.clone()))
            .collect()
    }

    /// Starts every configured server once, in parallel (each within its
    /// startup timeout), with [`McpSettings::host_env`], and reports its
    /// state and tools ([`keel_mcp::list`]); every server is shut down
    /// again before this returns. What `keel mcp list` shows.
    pub async fn list(&self) -> Vec<McpServerListing> {
        keel_mcp::list(&self.configs(), &Self::host_env()).await
    }

    /// The environment MCP servers are started with: this process's, of
    /// which keel-mcp gives a stdio server only the essentials and what its
    /// `env_vars` names, and from which it reads a bearer token.
    pub fn host_env() -> HostEnv {
        HostEnv::new(std::env::vars_os())
    }
}

/// serde's message without the value it quotes: `invalid type: string
/// "hunter2", expected a sequence` becomes `a value has the wrong type:
/// expected a sequence`. Unknown keys (`unknown field `comand``) are kept:
/// a key is no secret.
fn without_values(message: &str) -> String {
    let message = message.trim_end().replace('\n', "; ");
    for prefix in ["invalid type:", "invalid value:", "invalid length"] {
        if message.starts_with(prefix) {
            return match message.rsplit_once(", expected ") {
                Some((_, expected)) => format!("a value has the wrong type: expected {expected}"),
                None => "a value has the wrong type".to_owned(),
            };
        }
    }
    message
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn read(text: &str) -> Result<McpSettings, String> {
        let mut table: toml::Table = toml::from_str(text).unwrap();
        let value = table.remove("mcp_servers").unwrap();
        McpSettings::from_value(value, "config.toml").map_err(|error| error.to_string())
    }

    #[test]
    fn servers_are_read_with_their_defaults() {
        let settings = read(
            r#"
            [mcp_servers.docs]
            url = "https://mcp.example.com/mcp"
            bearer_token_env_var = "DOCS_TOKEN"
            [mcp_servers.everything]
            command = "node"
            args = ["index.js", "stdio"]
            env = { LOG_LEVEL = "warn" }
            auto_approve = ["echo"]
            "#,
        )
        .unwrap();
        let names: Vec<&str> = settings.servers.keys().map(String::as_str).collect();
        assert_eq!(names, vec!["docs", "everything"]);
        let everything = &settings.servers["everything"];
        assert_eq!(everything.tool_timeout_sec, 60);
        assert_eq!(everything.args, vec!["index.js", "stdio"]);
        assert_eq!(settings.configs().len(), 2);
    }

    #[test]
    fn errors_name_the_server_and_never_quote_a_value() {
        let error = read(
            r#"
            [mcp_servers.web]
            url = "https://x.example/mcp"
            env = { TOKEN = "hunter2" }
            "#,
        )
        .unwrap_err();
        assert!(
            error.contains("`web`") && error.contains("`env`"),
            "{error}"
        );
        assert!(!error.contains("hunter2"), "{error}");

        let error = read(
            r#"
            [mcp_servers.s]
            command = "x"
            args = "hunter2"
            "#,
        )
        .unwrap_err();
        assert!(error.contains("[mcp_servers.s]"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");

        let error = read("[mcp_servers.s]\ncomand = \"x\"\n").unwrap_err();
        assert!(error.contains("comand"), "{error}");

        let error = read("[mcp_servers.\"a b\"]\ncommand = \"x\"\n").unwrap_err();
        assert!(error.contains("a b"), "{error}");
    }
}

#[cfg(test)]
mod layer_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use crate::settings::{Settings, Sources};

    #[test]
    fn the_project_layer_cannot_add_a_server() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("config.toml");
        std::fs::write(&user, "[mcp_servers.mine]\ncommand = \"my-server\"\n").unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(workspace.join(".keel")).unwrap();
        std::fs::write(
            workspace.join(".keel/config.toml"),
            "[mcp_servers.planted]\ncommand = \"evil\"\n[mcp_servers.mine]\ncommand = \"evil\"\n",
        )
        .unwrap();
        let sources = Sources {
            config_file: Some(user),
            workspace: Some(workspace),
            ..Sources::default()
        };
        let settings = Settings::load(&sources).unwrap();
        let names: Vec<&str> = settings
            .mcp_servers
            .servers
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(names, vec!["mine"]);
        assert_eq!(
            settings.mcp_servers.servers["mine"].command.as_deref(),
            Some("my-server")
        );
        let warning = settings
            .warnings
            .iter()
            .find(|warning| warning.code == "project_key_ignored")
            .expect("a project_key_ignored warning");
        assert!(
            warning.message.contains("`mcp_servers`"),
            "{}",
            warning.message
        );
    }
}

/// The extensions that offer the enabled servers' tools to runs: one per
/// server, named `mcp.NAME`, its tools deferrable (`tool_search`) and
/// joining each run when the server is ready ([`keel_kernel::ToolSource`]).
/// Each server starts now, in the background, on the current tokio
/// runtime; it lives as long as the kernel that holds the extension and
/// dies with it (its whole process group). A `required` server is
/// awaited by each run before its first request, within its startup
/// timeout; an optional one is never waited for.
pub fn extensions(servers: &[(String, McpServerConfig)], env: &HostEnv) -> Vec<Extension> {
    servers
        .iter()
        .filter(|(_, config)| config.enabled)
        .map(|(name, config)| {
            Extension::new(format!("mcp.{name}"))
                .deferrable(true)
                .tool_source(Arc::new(McpSource::start(name, config, env)))
        })
        .collect()
}

/// One server, starting or started.
struct McpSource {
    required: bool,
    state: Arc<Mutex<Started>>,
    done: watch::Receiver<bool>,
    task: Option<tokio::task::AbortHandle>,
}

enum Started {
    Starting,
    Ready(Box<McpServer>),
    Failed(String),
}

impl McpSource {
    fn start(name: &str, config: &McpServerConfig, env: &HostEnv) -> Self {
        let state = Arc::new(Mutex::new(Started::Starting));
        let (sender, done) = watch::channel(false);
        let task = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (name, config, env, held) =
                    (name.to_owned(), config.clone(), env.clone(), state.clone());
                let task = runtime.spawn(async move {
                    let started = match McpServer::start(&name, &config, &env).await {
                        Ok(server) => Started::Ready(Box::new(server)),
                        // keel-mcp's errors never quote a secret.
                        Err(error) => Started::Failed(error.to_string()),
                    };
                    if let Ok(mut state) = held.lock() {
                        *state = started;
                    }
                    let _ = sender.send(true);
                });
                Some(task.abort_handle())
            }
            Err(_) => {
                if let Ok(mut state) = state.lock() {
                    *state = Started::Failed("no async runtime to start it on".into());
                }
                let _ = sender.send(true);
                None
            }
        };
        Self {
            required: config.required,
            state,
            done,
            task,
        }
    }
}

impl ToolSource for McpSource {
    fn ready(&self) -> Option<Result<Vec<Arc<dyn Tool>>, String>> {
        let state = self.state.lock().ok()?;
        match &*state {
            Started::Starting => None,
            Started::Ready(server) => Some(Ok(server.tools())),
            Started::Failed(reason) => Some(Err(reason.clone())),
        }
    }

    fn version(&self) -> Option<String> {
        match &*self.state.lock().ok()? {
            Started::Ready(server) => server.server_info().map(|info| info.version.clone()),
            _ => None,
        }
    }

    fn required(&self) -> bool {
        self.required
    }

    fn settled(&self) -> BoxFuture<'_, ()> {
        let mut done = self.done.clone();
        Box::pin(async move {
            let _ = done.wait_for(|settled| *settled).await;
        })
    }
}

impl Drop for McpSource {
    fn drop(&mut self) {
        // A server still starting stops starting; a started one is dropped
        // with the state (keel-mcp kills its process group).
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// `permissions` with an allow rule for each tool a server lists in
/// `auto_approve`: asked in `ask` and `auto` no more (a mode's deny, as in
/// `plan`, stays).
pub(crate) fn with_auto_approved(
    permissions: &PermissionRuleLists,
    servers: &[(String, McpServerConfig)],
) -> PermissionRuleLists {
    let mut permissions = permissions.clone();
    for (name, config) in servers.iter().filter(|(_, config)| config.enabled) {
        permissions.allow.extend(
            config
                .auto_approve
                .iter()
                .map(|tool| keel_mcp::tool_name(name, tool)),
        );
    }
    permissions
}
