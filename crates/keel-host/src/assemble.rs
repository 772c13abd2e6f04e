//! A resolved host configuration, and the kernel it assembles.
//!
//! The order of checks is part of the contract hosts rely on for their
//! startup errors: the provider (script or configuration and key) first,
//! then the workspace, then the tools, then the kernel's own checks.

use std::path::PathBuf;
use std::sync::Arc;

use keel_kernel::{AgentKernel, Instructions, RetryPolicy, UserRules};
use keel_protocol::PermissionRuleLists;
use keel_provider::config::{Config, ModelInfo};
use keel_provider::connect::connect;
use keel_provider::{Provider, Recording, ReplayProvider, Script, ScriptedProvider};
use keel_session::SessionStore;
use keel_tools::builtin::{BashOptions, Executor, all_tools, default_tools};
use keel_tools::env::HostEnv;
use keel_tools::outputs::OutputStore;
use keel_tools::sandbox::SandboxConfig;
use keel_tools::{Tool, Workspace};

use crate::HostError;

/// Which model provider a kernel streams from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ProviderChoice {
    /// The deterministic scripted provider with a parsed script.
    Script {
        /// The script of model turns.
        script: Script,
        /// The model id to report (default: the provider's name).
        model: Option<String>,
    },
    /// The scripted provider with a script read from a file at assembly.
    ScriptFile {
        /// The script's path (`None`: not given, which is an error).
        path: Option<PathBuf>,
        /// The model id to report.
        model: Option<String>,
    },
    /// A provider from the catalog (built-in, merged with `config.toml`:
    /// see [`crate::settings::Settings`]), its key read from the variable
    /// the catalog names.
    Configured {
        /// The provider's name in the catalog.
        name: String,
        /// The model id or alias (default: the provider's default model).
        model: Option<String>,
        /// Overrides the provider's base URL.
        base_url: Option<String>,
        /// The catalog.
        catalog: Arc<Config>,
    },
    /// The replay provider answering from a recorded run (`keel replay`,
    /// [`crate::replay`]), named as the recorded provider was.
    Replay {
        /// The recorded provider's name.
        name: String,
        /// The recorded answers.
        recording: Recording,
        /// The recorded model id.
        model: Option<String>,
    },
}

impl ProviderChoice {
    /// Builds the provider, the model id to send and what the catalog
    /// knows about the model.
    fn connect(&self) -> Result<Connected, HostError> {
        match self {
            Self::Script { script, model } => Ok(Connected {
                provider: Arc::new(ScriptedProvider::new(script.clone())),
                model: model.clone(),
                info: ModelInfo::default(),
                retry: None,
            }),
            Self::ScriptFile { path, model } => {
                let path = path.as_ref().ok_or(HostError::ScriptRequired)?;
                let script = Script::from_file(path)?;
                Ok(Connected {
                    provider: Arc::new(ScriptedProvider::new(script)),
                    model: model.clone(),
                    info: ModelInfo::default(),
                    retry: None,
                })
            }
            Self::Replay {
                name,
                recording,
                model,
            } => Ok(Connected {
                provider: Arc::new(ReplayProvider::new(name.clone(), recording.clone())),
                model: model.clone(),
                info: ModelInfo::default(),
                retry: None,
            }),
            Self::Configured {
                name,
                model,
                base_url,
                catalog,
            } => {
                let resolved =
                    catalog.resolve(name, model.as_deref(), base_url.as_deref(), &|variable| {
                        std::env::var(variable).ok()
                    })?;
                Ok(Connected {
                    provider: connect(&resolved),
                    retry: Some(resolved.waits.retry_policy()),
                    model: Some(resolved.model),
                    info: resolved.info,
                })
            }
        }
    }
}

/// A provider built from a [`ProviderChoice`].
struct Connected {
    provider: Arc<dyn Provider>,
    /// The model id to send (`None`: the provider's name).
    model: Option<String>,
    /// What the catalog knows about the model.
    info: ModelInfo,
    /// The provider's retry settings (`max_retries`, `max_retry_wait_sec`),
    /// when it has any.
    retry: Option<RetryPolicy>,
}

/// The default user file: `$XDG_CONFIG_HOME/keel/config.toml`, else
/// `~/.config/keel/config.toml` (read from the process environment, which
/// only hosts do).
pub fn user_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("keel").join("config.toml"))
}

/// The sandbox's settings with the user's toolchains, from this process's
/// `HOME` and `CARGO_HOME`, and this process's environment captured once
/// as the snapshot commands get their allowlisted variables from
/// (`SandboxConfig::host_env`).
pub fn host_sandbox() -> SandboxConfig {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let cargo_home = std::env::var_os("CARGO_HOME").map(PathBuf::from);
    {
        let mut sandbox_config =
            SandboxConfig::with_toolchains(home.as_deref(), cargo_home.as_deref());
        sandbox_config.host_env = HostEnv::new(std::env::vars_os());
        sandbox_config
    }
}

/// Keel's own user configuration directory (`$XDG_CONFIG_HOME/keel`, else
/// `~/.config/keel`): where the user's `config.toml` and global `AGENTS.md`
/// live, which every run trusts as the user's own. Sandboxed commands and
/// the file tools may not write it (`SandboxConfig::protected`).
pub fn keel_config_dir() -> Option<PathBuf> {
    user_config_path()?
        .parent()
        .map(std::path::Path::to_path_buf)
}

/// Everything a host resolved from its arguments and configuration.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HostConfig {
    /// The model provider.
    pub provider: ProviderChoice,
    /// The workspace root (default: the current directory).
    pub workspace: Option<PathBuf>,
    /// Built-in tools by name, in order (default: read, write, edit, bash).
    pub tools: Option<Vec<String>>,
    /// The OS sandbox settings for commands.
    pub sandbox: SandboxConfig,
    /// Replaces the kernel's default system prompt.
    pub system_prompt: Option<String>,
    /// Added after the system prompt (the default one or a replacement).
    pub append_system_prompt: Option<String>,
    /// The model's context window in tokens, overriding the catalog's (a
    /// local model served with a small context).
    pub context_window: Option<u64>,
    /// Whether requests state the environment (date, working directory,
    /// OS, shell, git); default true.
    pub environment: bool,
    /// How retryable provider errors are retried (default: the configured
    /// provider's `max_retries` and `max_retry_wait_sec`, else the kernel's).
    pub retry: Option<RetryPolicy>,
    /// Whether full tool outputs outlive the kernel's runs (the host
    /// reads or removes them itself); default false.
    pub keep_outputs: bool,
    /// Where `bash` runs its commands (default: on this machine).
    pub bash_executor: Executor,
    /// The permission rules the user wrote (`[permissions]`; default none).
    pub permissions: PermissionRuleLists,
    /// Whether each run records workspace snapshots in its session
    /// (`[sessions] snapshots`; default true).
    pub workspace_snapshots: bool,
    /// Whether the runs' trace spans carry content (`[telemetry]
    /// capture_content`; default false).
    pub capture_content: bool,
    /// The user's command hooks (`[[hooks]]`; default none), run as the
    /// `config-hooks` extension ([`crate::command_hooks`]).
    pub hooks: Vec<crate::command_hooks::CommandHookSettings>,
    /// The host's own extensions: tools, entry kinds and hooks
    /// ([`keel_kernel::Extension`]; default none).
    pub extensions: Vec<keel_kernel::Extension>,
    /// The user's MCP servers (`[mcp_servers.NAME]`; default none): each
    /// kernel starts them and offers their tools ([`crate::mcp::extensions`]).
    pub mcp_servers: Vec<(String, keel_mcp::McpServerConfig)>,
}

impl HostConfig {
    /// A configuration with this provider and every other part at its default.
    pub fn new(provider: ProviderChoice) -> Self {
        Self {
            provider,
            workspace: None,
            tools: None,
            sandbox: {
                let mut sandbox_config = host_sandbox();
                sandbox_config.protected = keel_config_dir().into_iter().collect();
                sandbox_config
            },
            system_prompt: None,
            append_system_prompt: None,
            context_window: None,
            environment: true,
            retry: None,
            keep_outputs: false,
            bash_executor: Executor::Host,
            permissions: PermissionRuleLists::default(),
            workspace_snapshots: true,
            capture_content: false,
            hooks: Vec::new(),
            extensions: Vec::new(),
            mcp_servers: Vec::new(),
        }
    }

    /// The workspace root.
    pub fn workspace(mut self, root: impl Into<PathBuf>) -> Self {
        self.workspace = Some(root.into());
        self
    }

    /// Assembles the kernel, its runs stored in `store`.
    pub fn kernel(&self, store: Arc<dyn SessionStore>) -> Result<AgentKernel, HostError> {
        self.kernel_with(store, |tools| tools)
    }

    /// [`HostConfig::kernel`] with the tools chosen passed through `wrap`
    /// (a replay serves recorded results through tools that keep the real
    /// ones' names, specs and intents).
    pub(crate) fn kernel_with(
        &self,
        store: Arc<dyn SessionStore>,
        wrap: impl FnOnce(Vec<Arc<dyn Tool>>) -> Vec<Arc<dyn Tool>>,
    ) -> Result<AgentKernel, HostError> {
        let Connected {
            provider,
            model,
            info,
            retry,
        } = self.provider.connect()?;
        let root = match &self.workspace {
            Some(root) => root.clone(),
            None => {
                std::env::current_dir().map_err(|error| HostError::Workspace(error.to_string()))?
            }
        };
        let workspace =
            Workspace::new(&root).map_err(|error| HostError::Workspace(error.to_string()))?;
        // The kernel's own store of full tool outputs, in the system's
        // temporary directory (read here: libraries take explicit values).
        let outputs = OutputStore::new(std::env::temp_dir());
        outputs.keep_after_runs(self.keep_outputs);
        let mut builder = AgentKernel::builder()
            .provider(provider)
            .outputs(outputs)
            // The user's global AGENTS.md and shell, read here so the
            // kernel reads no environment.
            .project_instructions(Instructions::default().with_global_dir(keel_config_dir()))
            .user_shell(std::env::var("SHELL").ok())
            .sandbox(self.sandbox.clone())
            .workspace(workspace)
            .store(store)
            .tools(wrap(tools_with(self.tools.as_deref(), {
                let mut bash_options = BashOptions::default();
                bash_options.executor = self.bash_executor.clone();
                bash_options
            })?))
            // A run's start snapshot keeps its contents on disk, not in memory.
            .snapshot_spill_dir(std::env::temp_dir())
            .capture_content(self.capture_content)
            .workspace_snapshots(
                self.workspace_snapshots
                    .then(keel_kernel::RecordLimits::default),
            )
            .user_rules(
                UserRules::new(crate::mcp::with_auto_approved(
                    &self.permissions,
                    &self.mcp_servers,
                ))
                .map_err(|error| {
                    HostError::from(keel_provider::config::ConfigError::Invalid {
                        path: "the permission rules".to_owned(),
                        message: format!("permissions.{error}"),
                    })
                })?,
            );
        if let Some(hooks) =
            crate::command_hooks::extension(&self.hooks, &root, &self.sandbox.host_env)
        {
            builder = builder.extension(hooks);
        }
        for extension in &self.extensions {
            builder = builder.extension(extension.clone());
        }
        if !self.mcp_servers.is_empty() {
            let env = crate::mcp::McpSettings::host_env();
            for extension in crate::mcp::extensions(&self.mcp_servers, &env) {
                builder = builder.extension(extension);
            }
        }
        if let Some(model) = model {
            builder = builder.model(model);
        }
        if let Some(prompt) = &self.system_prompt {
            builder = builder.system_prompt(prompt.clone());
        }
        if let Some(text) = &self.append_system_prompt {
            builder = builder.append_system_prompt(text.clone());
        }
        if !self.environment {
            builder = builder.environment(false);
        }
        if let Some(window) = self.context_window.or(info.context_window) {
            builder = builder.context_window(window);
        }
        if let Some(limit) = info.max_output {
            builder = builder.output_limit(limit);
        }
        if let Some(retry) = self.retry.or(retry) {
            builder = builder.retry(retry);
        }
        Ok(builder.build()?)
    }
}

/// What a host sets beside the configuration files (the flags of `keel
/// run` that have no configuration key), applied to a resolved
/// [`HostConfig`] the same way by every host.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct HostOptions {
    /// Replaces the kernel's default system prompt.
    pub system_prompt: Option<String>,
    /// Added after the system prompt.
    pub append_system_prompt: Option<String>,
    /// The model's context window in tokens, overriding the catalog's.
    pub context_window: Option<u64>,
    /// Leave the environment (date, working directory, OS, …) out of requests.
    pub no_environment: bool,
    /// Who enforces the OS sandbox of commands (`None`: the default).
    pub sandbox_mode: Option<keel_tools::sandbox::SandboxMode>,
    /// Variables passed to sandboxed commands besides the default ones.
    pub sandbox_env: Vec<String>,
    /// Keep full tool outputs after the runs end (`--keep-outputs`).
    pub keep_outputs: bool,
    /// Where `bash` runs, by workspace: a host that gives each workspace a
    /// container of its own (the SWE-bench evaluator) names it here before
    /// its first run there; other workspaces run on this machine.
    pub executors: Executors,
}

/// Where `bash` runs, by workspace root (canonical), shared by the clones
/// of a host's options: an entry set before a workspace's kernel is built
/// applies to that kernel.
#[derive(Clone, Default)]
pub struct Executors(Arc<std::sync::Mutex<std::collections::HashMap<PathBuf, Executor>>>);

impl Executors {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<PathBuf, Executor>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `workspace`'s commands through `executor`.
    pub fn set(&self, workspace: impl Into<PathBuf>, executor: Executor) {
        self.lock().insert(workspace.into(), executor);
    }

    /// Forgets `workspace`'s executor.
    pub fn remove(&self, workspace: &std::path::Path) {
        self.lock().remove(workspace);
    }

    /// `workspace`'s executor ([`Executor::Host`] when none was set).
    pub fn of(&self, workspace: &std::path::Path) -> Executor {
        self.lock().get(workspace).cloned().unwrap_or_default()
    }
}

impl std::fmt::Debug for Executors {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_tuple("Executors")
            .field(&*self.lock())
            .finish()
    }
}

impl PartialEq for Executors {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl HostOptions {
    /// `config` with these options applied.
    pub fn apply(&self, mut config: HostConfig) -> HostConfig {
        config.system_prompt = self.system_prompt.clone();
        config.append_system_prompt = self.append_system_prompt.clone();
        config.context_window = self.context_window;
        config.environment = !self.no_environment;
        if let Some(mode) = self.sandbox_mode {
            config.sandbox.mode = mode;
        }
        config.sandbox.env.extend(self.sandbox_env.iter().cloned());
        config.keep_outputs = self.keep_outputs;
        if let Some(workspace) = &config.workspace {
            let canonical = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.clone());
            config.bash_executor = self.executors.of(&canonical);
        }
        config
    }
}

/// The built-in tools named, in the order given (`None`: the default four).
pub fn tools_by_name(names: Option<&[String]>) -> Result<Vec<Arc<dyn Tool>>, HostError> {
    tools_with(names, BashOptions::default())
}

/// [`tools_by_name`] with `bash` built from `options`.
fn tools_with(
    names: Option<&[String]>,
    options: BashOptions,
) -> Result<Vec<Arc<dyn Tool>>, HostError> {
    let Some(names) = names else {
        return Ok(default_tools(options));
    };
    let available = all_tools(options);
    names
        .iter()
        .map(|name| {
            available
                .iter()
                .find(|tool| tool.name() == name.trim())
                .cloned()
                .ok_or_else(|| HostError::UnknownTool {
                    name: name.clone(),
                    known: available
                        .iter()
                        .map(|tool| tool.name().to_owned())
                        .collect(),
                })
        })
        .collect()
}
