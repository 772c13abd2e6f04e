//! A started MCP server: its connection, state, tools and shutdown.

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use keel_tool_api::{HostEnv, Tool};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ServiceError, ServiceExt};
use serde::Serialize;
use tokio::io::AsyncReadExt;
use tokio::process::ChildStderr;

use crate::config::McpServerConfig;
use crate::error::{McpError, Redacted};
use crate::tool::{McpTool, McpToolInfo};

/// The most tools one server offers; the rest are left out (logged).
const MAX_TOOLS: usize = 256;

/// The variables of the caller's environment a stdio server always gets
/// (when the caller's environment holds them): what a program needs to
/// run, nothing that grants access. `PATH` falls back to Keel's default.
pub const ESSENTIAL_ENV_VARS: &[&str] = &[
    "HOME", "LOGNAME", "USER", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR", "TZ",
];

/// How long [`McpServer::shutdown`] lets a stdio server exit on its own
/// (after its stdin is closed) before its process group is killed.
const GRACEFUL_EXIT: Duration = Duration::from_secs(2);

/// Where a server is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum McpServerState {
    /// Being started (initialize and tools/list not yet answered).
    Starting,
    /// Started: its tools can be called.
    Ready,
    /// It could not be started.
    Failed {
        /// Why (never holding a secret).
        reason: String,
    },
    /// It was started and is gone: it exited, its connection closed, or it
    /// was shut down.
    Exited,
    /// Configured with `enabled = false`: never started.
    Disabled,
}

/// The server's name and version, as it said in its initialize answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct McpServerInfo {
    /// The server implementation's name.
    pub name: String,
    /// The server implementation's version.
    pub version: String,
}

/// What the tools of one server share with it.
pub(crate) struct Shared {
    /// The configured name.
    pub(crate) name: String,
    /// Where requests go.
    pub(crate) peer: Peer<RoleClient>,
    /// The recorded state (see [`Shared::state`]).
    state: Mutex<McpServerState>,
    /// One tool call's bound.
    pub(crate) tool_timeout: Duration,
}

impl Shared {
    /// The state, `exited` as soon as the connection is closed.
    pub(crate) fn state(&self) -> McpServerState {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if *state == McpServerState::Ready && self.peer.is_transport_closed() {
            *state = McpServerState::Exited;
        }
        state.clone()
    }

    /// Records that the server is gone.
    pub(crate) fn mark_exited(&self) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = McpServerState::Exited;
    }
}

/// A started MCP server.
///
/// It owns the connection and, for a stdio server, the child process,
/// which runs in a process group of its own: dropping the value or calling
/// [`McpServer::shutdown`] kills the whole group. Its tools
/// ([`McpServer::tools`]) hold only the connection: once the server is gone
/// they fail with `server_unavailable`.
pub struct McpServer {
    shared: Arc<Shared>,
    config: McpServerConfig,
    running: Option<RunningService<RoleClient, ClientConfig>>,
    process_group: Option<Pid>,
    server_info: Option<McpServerInfo>,
    tools: Vec<rmcp::model::Tool>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.shared.name)
            .field("state", &self.shared.state())
            .field("process_group", &self.process_group)
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Starts server `name` as `config` says, within its startup timeout
    /// (initialize and tools/list together).
    ///
    /// `env` is the caller's environment: a stdio server gets only
    /// [`ESSENTIAL_ENV_VARS`] and `PATH` from it, the variables `env_vars`
    /// names, and `env`; an HTTP server's bearer token is looked up in it.
    /// This crate never reads the process environment itself.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills a child process it started.
    pub async fn start(
        name: &str,
        config: &McpServerConfig,
        env: &HostEnv,
    ) -> Result<McpServer, McpError> {
        config.validate(name)?;
        if !config.enabled {
            return Err(McpError::Disabled {
                server: name.to_owned(),
            });
        }
        match (&config.command, &config.url) {
            (Some(command), _) => Self::start_stdio(name, command, config, env).await,
            (None, Some(url)) => Self::start_http(name, url, config, env).await,
            // `validate` refused a config with neither.
            (None, None) => Err(McpError::Config(crate::ConfigError::NoTransport {
                server: name.to_owned(),
            })),
        }
    }

    async fn start_stdio(
        name: &str,
        command: &str,
        config: &McpServerConfig,
        env: &HostEnv,
    ) -> Result<McpServer, McpError> {
        let mut child = tokio::process::Command::new(command);
        child
            .args(&config.args)
            .env_clear()
            .envs(child_env(config, env))
            // A group of its own: shutdown and drop kill every process the
            // server started, not only the server.
            .process_group(0)
            .kill_on_drop(true);
        // Never the directory Keel was started in (a repository, whose
        // files an interpreter or `npx` would load): `/` unless configured.
        child.current_dir(config.cwd.as_deref().unwrap_or(std::path::Path::new("/")));
        let (transport, stderr) = TokioChildProcess::builder(child)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| McpError::Spawn {
                server: name.to_owned(),
                program: command.to_owned(),
                source,
            })?;
        let process_group = transport
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw);
        let group = GroupGuard(process_group);
        if let Some(stderr) = stderr {
            tokio::spawn(forward_stderr(name.to_owned(), stderr));
        }
        let (running, tools) = connect(name, config, transport, None).await?;
        Ok(Self::ready(name, config, running, group.disarm(), tools))
    }

    async fn start_http(
        name: &str,
        url: &str,
        config: &McpServerConfig,
        env: &HostEnv,
    ) -> Result<McpServer, McpError> {
        let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url);
        let mut token = None;
        if let Some(variable) = &config.bearer_token_env_var {
            let value = env
                .get(variable)
                .and_then(|value| value.to_str())
                .filter(|value| !value.is_empty())
                .ok_or_else(|| McpError::MissingToken {
                    server: name.to_owned(),
                    variable: variable.clone(),
                })?;
            // Sent as `Authorization: Bearer <token>` (reqwest marks it
            // sensitive), never in the URL.
            transport_config = transport_config.auth_header(value);
            token = Some(value.to_owned());
        }
        // No redirect is followed: the token would go along to wherever
        // the server points.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|source| McpError::HttpClient {
                server: name.to_owned(),
                source,
            })?;
        let transport = StreamableHttpClientTransport::with_client(client, transport_config);
        let (running, tools) = connect(name, config, transport, token.as_deref()).await?;
        Ok(Self::ready(name, config, running, None, tools))
    }

    fn ready(
        name: &str,
        config: &McpServerConfig,
        running: RunningService<RoleClient, ClientConfig>,
        process_group: Option<Pid>,
        tools: Vec<rmcp::model::Tool>,
    ) -> McpServer {
        let server_info = running
            .peer()
            .peer_info()
            .and_then(|info| info.server_info.clone())
            .map(|implementation| McpServerInfo {
                name: implementation.name,
                version: implementation.version,
            });
        let tools: Vec<_> = tools
            .into_iter()
            .filter(|tool| {
                if !crate::tool::usable_tool_name(&tool.name)
                    || crate::tool::tool_name(name, &tool.name).len() > crate::tool::MAX_TOOL_NAME
                {
                    tracing::warn!(
                        server = name,
                        "MCP tool skipped: its name is not [A-Za-z0-9_-]+ without `__`, or \
                         mcp__<server>__<tool> is longer than 64 characters"
                    );
                    return false;
                }
                config.offers(&tool.name)
            })
            .take(MAX_TOOLS)
            .collect();
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            peer: running.peer().clone(),
            state: Mutex::new(McpServerState::Ready),
            tool_timeout: config.tool_timeout(),
        });
        McpServer {
            shared,
            config: config.clone(),
            running: Some(running),
            process_group,
            server_info,
            tools,
        }
    }

    /// The configured name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Where the server is: `ready`, or `exited` once it is gone.
    pub fn state(&self) -> McpServerState {
        self.shared.state()
    }

    /// The server's name and version from its initialize answer, when it
    /// gave them.
    pub fn server_info(&self) -> Option<&McpServerInfo> {
        self.server_info.as_ref()
    }

    /// The id of the stdio server's process (and of its process group);
    /// `None` for an HTTP server.
    pub fn process_id(&self) -> Option<u32> {
        self.process_group
            .and_then(|pid| u32::try_from(pid.as_raw()).ok())
    }

    /// One [`Tool`] per tool the server listed and the filters offer, named
    /// `mcp__<server>__<tool>`, in the server's order.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools
            .iter()
            .map(|tool| Arc::new(McpTool::new(self.shared.clone(), tool)) as Arc<dyn Tool>)
            .collect()
    }

    /// What the permission policy needs to know of each offered tool, in
    /// the order of [`McpServer::tools`].
    pub fn tool_infos(&self) -> Vec<McpToolInfo> {
        self.tools
            .iter()
            .map(|tool| McpToolInfo::new(&self.shared.name, tool, &self.config))
            .collect()
    }

    /// Closes the connection and stops the server: a stdio server's stdin
    /// is closed, it gets a moment to exit, then its whole process group is
    /// killed. The state is `exited` afterwards. Calling it again does
    /// nothing.
    pub async fn shutdown(&mut self) {
        if let Some(mut running) = self.running.take() {
            let wait = if self.process_group.is_some() {
                GRACEFUL_EXIT
            } else {
                Duration::from_secs(5)
            };
            if let Err(error) = running.close_with_timeout(wait).await {
                tracing::debug!(server = %self.shared.name, %error, "MCP client task ended abnormally");
            }
        }
        kill_group(self.process_group.take());
        self.shared.mark_exited();
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        // Dropping the connection cancels its task; the group goes now.
        kill_group(self.process_group.take());
        self.shared.mark_exited();
    }
}

/// Kills a process group (when there is one); a group already gone is fine.
fn kill_group(group: Option<Pid>) {
    if let Some(group) = group
        && let Err(error) = killpg(group, Signal::SIGKILL)
        && error != nix::errno::Errno::ESRCH
    {
        tracing::warn!(%error, group = group.as_raw(), "could not kill an MCP server's process group");
    }
}

/// Kills the group it holds when dropped before it is disarmed: a start
/// that fails or is cancelled leaves no process behind.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn disarm(mut self) -> Option<Pid> {
        self.0.take()
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0.take());
    }
}

/// Initializes the connection and lists the tools, within the startup
/// timeout. `secret` (a bearer token) is cut out of any error text.
async fn connect<T, E, A>(
    name: &str,
    config: &McpServerConfig,
    transport: T,
    secret: Option<&str>,
) -> Result<
    (
        RunningService<RoleClient, ClientConfig>,
        Vec<rmcp::model::Tool>,
    ),
    McpError,
>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("keel", env!("CARGO_PKG_VERSION")),
    );
    let startup = async {
        let running = client
            .serve(transport)
            .await
            .map_err(|error| McpError::Initialize {
                server: name.to_owned(),
                source: Redacted::new(&error, secret),
            })?;
        let tools = running
            .peer()
            .list_all_tools()
            .await
            .map_err(|error| McpError::ListTools {
                server: name.to_owned(),
                source: Redacted::new(&error, secret),
            })?;
        Ok::<_, McpError>((running, tools))
    };
    match tokio::time::timeout(config.startup_timeout(), startup).await {
        Ok(result) => result,
        Err(_) => Err(McpError::StartupTimeout {
            server: name.to_owned(),
            timeout: config.startup_timeout(),
        }),
    }
}

/// The scrubbed environment of a stdio server: `PATH`, the essentials, the
/// variables `env_vars` names (each only when the caller's environment
/// holds it), then `env` (which wins).
pub(crate) fn child_env(config: &McpServerConfig, env: &HostEnv) -> Vec<(OsString, OsString)> {
    let mut vars: Vec<(OsString, OsString)> = Vec::new();
    let mut set = |name: OsString, value: OsString| {
        vars.retain(|(old, _)| *old != name);
        vars.push((name, value));
    };
    set("PATH".into(), env.search_path().to_owned());
    for name in ESSENTIAL_ENV_VARS
        .iter()
        .copied()
        .chain(config.env_vars.iter().map(String::as_str))
    {
        if let Some(value) = env.get(name) {
            set(name.into(), value.to_owned());
        }
    }
    for (name, value) in &config.env {
        set(name.into(), value.into());
    }
    vars
}

/// Logs what a stdio server writes on stderr (at `debug`, in chunks), so
/// it never reaches Keel's own terminal.
async fn forward_stderr(server: String, mut stderr: ChildStderr) {
    let mut buffer = vec![0_u8; 4096];
    loop {
        match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let text = String::from_utf8_lossy(&buffer[..read]);
                for line in text.lines().filter(|line| !line.trim().is_empty()) {
                    tracing::debug!(server = %server, "MCP server stderr: {line}");
                }
            }
        }
    }
}

/// Whether a failed request means the server is gone.
pub(crate) fn is_gone(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}
