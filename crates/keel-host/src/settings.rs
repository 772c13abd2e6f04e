//! A host's defaults from `config.toml`: provider, model, mode, tools and
//! readable paths, in layers, and the host configuration they resolve to.
//!
//! Why here: every host (the CLI, a server, an evaluator) reads the same
//! file the same way, so the layering rules live in one place and the CLI
//! only parses flags. The layers, lowest first:
//!
//! 1. the built-in defaults (mode `auto`, tools read, write, edit, bash);
//! 2. the user's file (`$XDG_CONFIG_HOME/keel/config.toml` or `--config`),
//!    its top-level keys, with `-c key=value` overrides merged into it
//!    (its `[server]` table, for `keel serve`, is read only from here:
//!    [`crate::server`]);
//! 3. the profile `--profile NAME` selects (`[profiles.NAME]`);
//! 4. the project layer `.keel/config.toml` in the workspace, which may only
//!    narrow what layers 1–3 allow ([`crate::project`]);
//! 5. the top-level keys of the `-c` overrides again (so they win over a
//!    profile and the project layer), then the host's explicit choices
//!    ([`Choices`], the CLI's flags).
//!
//! Invariants: the project layer never widens (no mode of more authority,
//! no tool or readable path the user's layers do not have); a widening
//! attempt is dropped with a [`Warning`], never an error, so a cloned
//! repository cannot make Keel unusable, and never silently. A file that is
//! unreadable or malformed, an unknown key in the user's file, an unknown
//! profile and a malformed override are errors. Nothing here prints.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_kernel::UserRules;
use keel_protocol::{PermissionMode, PermissionRuleLists};
use keel_provider::config::{Config, ConfigError};
use serde::Deserialize;

use keel_tools::untrusted::{self, Limit, Origin};

use crate::command_hooks::CommandHookSettings;
use crate::mcp::McpSettings;
use crate::prune::SessionSettings;
use crate::server::ServerSettings;
use crate::telemetry::TelemetrySettings;
use crate::{HostConfig, HostError, ProviderChoice, overrides, project};

/// The top-level keys a layer may set.
pub const DEFAULT_KEYS: [&str; 6] = [
    "provider",
    "model",
    "mode",
    "tools",
    "sandbox_read",
    "permissions",
];

/// The top-level keys of the user's file besides [`DEFAULT_KEYS`].
const TABLE_KEYS: [&str; 7] = [
    "hooks",
    "profiles",
    "providers",
    "server",
    "sessions",
    "telemetry",
    "mcp_servers",
];

/// The values one layer sets; `None` leaves the layer below in force.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Defaults {
    /// The provider's name (`scripted`, or one of the configuration).
    pub provider: Option<String>,
    /// The model id or alias; it goes with `provider` (see [`Settings::resolve`]).
    pub model: Option<String>,
    /// The permission mode.
    pub mode: Option<PermissionMode>,
    /// The built-in tools by name, as a list or a comma-separated string.
    #[serde(default, deserialize_with = "tool_names")]
    pub tools: Option<Vec<String>>,
    /// More directories sandboxed commands may read (absolute, or `~/…`).
    pub sandbox_read: Option<Vec<PathBuf>>,
    /// The permission rules (`[permissions]`): unioned across layers.
    pub permissions: Option<Permissions>,
}

/// The `[permissions]` table of a layer: rule strings by list (the syntax
/// is [`keel_kernel::user_rules`]'s). Every layer's rules are kept (the
/// lists are unioned); the project layer may add only `ask` and `deny`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Permissions {
    /// Rules that answer a question the mode would ask with yes.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules that turn what the mode allows into a question.
    #[serde(default)]
    pub ask: Vec<String>,
    /// Rules that refuse, whatever the mode.
    #[serde(default)]
    pub deny: Vec<String>,
}

impl Permissions {
    /// The lists as the kernel and the session record them.
    pub fn lists(&self) -> PermissionRuleLists {
        let mut lists = PermissionRuleLists::default();
        lists.allow = self.allow.clone();
        lists.ask = self.ask.clone();
        lists.deny = self.deny.clone();
        lists
    }

    /// These rules and `other`'s (each once).
    pub(crate) fn overlaid(self, other: Permissions) -> Permissions {
        let lists = self.lists().union(other.lists());
        Permissions {
            allow: lists.allow,
            ask: lists.ask,
            deny: lists.deny,
        }
    }

    /// Checks that every rule can be read; the error names `place`, the
    /// key (`permissions.deny[1]`) and the rule.
    fn checked(&self, place: &str) -> Result<(), HostError> {
        UserRules::new(self.lists()).map(drop).map_err(|error| {
            let mut rule: String = error.rule.chars().take(RULE_SHOWN).collect();
            if rule.len() < error.rule.len() {
                rule.push('…');
            }
            invalid(
                place,
                &format!(
                    "`permissions.{}[{}]` {rule:?}: {}",
                    error.list, error.index, error.reason
                ),
            )
        })
    }
}

/// The most characters of a rule an error shows.
const RULE_SHOWN: usize = 120;

impl Defaults {
    /// This layer with `over` on top of it.
    ///
    /// A model goes with its provider: a layer that switches the provider
    /// without naming a model drops the model of the layers below (it
    /// belongs to the other provider), so the new provider's default model
    /// applies.
    pub fn overlaid(self, over: Defaults) -> Defaults {
        let model = match (&over.provider, over.model) {
            (_, Some(model)) => Some(model),
            (Some(provider), None) if self.provider.as_ref() != Some(provider) => None,
            (_, None) => self.model,
        };
        Defaults {
            provider: over.provider.or(self.provider),
            model,
            mode: over.mode.or(self.mode),
            tools: over.tools.or(self.tools),
            sandbox_read: over.sandbox_read.or(self.sandbox_read),
            permissions: match (self.permissions, over.permissions) {
                (Some(below), Some(above)) => Some(below.overlaid(above)),
                (below, above) => above.or(below),
            },
        }
    }

    /// Parses a layer from a TOML table that holds only [`DEFAULT_KEYS`].
    pub(crate) fn from_table(table: toml::Table, place: &str) -> Result<Self, HostError> {
        let defaults: Defaults = toml::Value::Table(table)
            .try_into()
            .map_err(|error: toml::de::Error| invalid(place, error.message()))?;
        if let Some(permissions) = &defaults.permissions {
            permissions.checked(place)?;
        }
        Ok(defaults)
    }
}

fn tool_names<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Names {
        List(Vec<String>),
        Text(String),
    }
    Ok(
        Option::<Names>::deserialize(deserializer)?.map(|names| match names {
            Names::List(list) => list,
            Names::Text(text) => text
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect(),
        }),
    )
}

/// Something the user should know about the configuration; the run goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Warning {
    /// A stable snake_case code (`project_widening`, `project_key_ignored`,
    /// `model_not_in_catalog`).
    pub code: &'static str,
    /// One sentence naming the file, key and value concerned.
    pub message: String,
}

/// Where the layers come from.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Sources {
    /// The user's file (`None`: the default path, which may be absent).
    pub config_file: Option<PathBuf>,
    /// The profile to apply (`[profiles.NAME]`).
    pub profile: Option<String>,
    /// `KEY=VALUE` overrides: a dotted TOML key and a TOML value (text that
    /// is not a TOML value is taken as a string).
    pub overrides: Vec<String>,
    /// The workspace whose `.keel/config.toml` is the project layer (`None`:
    /// no project layer).
    pub workspace: Option<PathBuf>,
}

/// The resolved defaults and the provider catalog.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// The defaults after every layer.
    pub defaults: Defaults,
    /// The built-in catalog with the user's `[providers.*]` merged over it.
    pub catalog: Config,
    /// What the project layer could not do, and other remarks.
    pub warnings: Vec<Warning>,
    /// The user's `[server]` table (`keel serve`); never from the project layer.
    pub server: ServerSettings,
    /// The user's `[sessions]` table (retention); never from the project layer.
    pub sessions: SessionSettings,
    /// The user's `[telemetry]` table; never from the project layer.
    pub telemetry: TelemetrySettings,
    /// The user's `[[hooks]]` (command hooks); never from the project layer.
    pub hooks: Vec<CommandHookSettings>,
    /// The user's `[mcp_servers.NAME]` tables; never from the project layer.
    pub mcp_servers: McpSettings,
}

/// A host's explicit choices (the CLI's flags): each overrides the settings.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Choices {
    /// The provider by name.
    pub provider: Option<String>,
    /// The model id or alias.
    pub model: Option<String>,
    /// Overrides the provider's base URL.
    pub base_url: Option<String>,
    /// The scripted provider's script; implies `provider = "scripted"` when
    /// no provider is chosen.
    pub script: Option<PathBuf>,
    /// The permission mode.
    pub mode: Option<PermissionMode>,
    /// The built-in tools by name.
    pub tools: Option<Vec<String>>,
    /// Readable directories added to the settings' own.
    pub sandbox_read: Vec<PathBuf>,
    /// The workspace root.
    pub workspace: Option<PathBuf>,
}

/// What a host needs to start runs: the kernel's configuration, the mode
/// of its runs, and the warnings to show its user.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunSetup {
    /// The kernel's configuration.
    pub config: HostConfig,
    /// The permission mode of the runs.
    pub mode: PermissionMode,
    /// Remarks to show the user before the run.
    pub warnings: Vec<Warning>,
    /// How long sessions are kept (`[sessions] retention`), when set: the
    /// host prunes the store by it ([`crate::prune::prune_if_due`]).
    pub retention: Option<std::time::Duration>,
}

impl Settings {
    /// Reads every layer `sources` names.
    pub fn load(sources: &Sources) -> Result<Self, HostError> {
        let (path, required) = match &sources.config_file {
            Some(path) => (Some(path.clone()), true),
            None => (crate::assemble::user_config_path(), false),
        };
        let shown = path
            .as_ref()
            .map_or_else(|| "config.toml".to_owned(), |p| p.display().to_string());
        // Whether the user's file lies inside the workspace, where a command
        // (or the model's write) could have put what it holds.
        let mut in_workspace = false;
        let mut table = match &path {
            Some(path) => {
                // A user file inside the workspace (a workspace that is the
                // home directory) could have been planted by a command: it
                // is read beneath the workspace, like the project layer.
                let inside = match sources.workspace.as_deref() {
                    Some(workspace) => beneath_workspace(path, workspace)?,
                    None => None,
                };
                in_workspace = inside.is_some();
                let origin = match &inside {
                    Some((root, rel)) => Origin::Beneath { root, rel },
                    None => Origin::User(path),
                };
                read_table(origin, required)?.unwrap_or_default()
            }
            None => toml::Table::new(),
        };
        let overrides = overrides::parse_all(&sources.overrides)?;
        // The top-level keys of the overrides are their own layer, on top
        // of the profile and the project layer (below); merged into the
        // file they would also pair the file's model with their provider.
        let mut nested = overrides.clone();
        nested.retain(|key, _| !DEFAULT_KEYS.contains(&key));
        overrides::merge(&mut table, nested);
        let place = if sources.overrides.is_empty() {
            shown.clone()
        } else {
            format!("{shown} (with the -c overrides)")
        };
        let UserFile {
            root,
            profiles,
            providers,
            server,
            sessions,
            telemetry,
            hooks,
            mcp_servers,
        } = UserFile::split(table, &place)?;
        let mut warnings = Vec::new();
        // Hooks run unsandboxed as the user: never from a file a run could
        // have written.
        let hooks = match in_workspace && !hooks.is_empty() {
            true => {
                warnings.push(Warning {
                    code: "config_in_workspace",
                    message: format!(
                        "{shown}: `hooks` is ignored: the file is inside the workspace, where a \
                         run could have written it"
                    ),
                });
                Vec::new()
            }
            false => hooks,
        };
        // MCP servers are programs Keel starts unsandboxed, with variables
        // of the user's environment: never from such a file either.
        let mcp_servers = match in_workspace && !mcp_servers.servers.is_empty() {
            true => {
                warnings.push(Warning {
                    code: "config_in_workspace",
                    message: format!(
                        "{shown}: `mcp_servers` is ignored: the file is inside the workspace, \
                         where a run could have written it"
                    ),
                });
                McpSettings::default()
            }
            false => mcp_servers,
        };
        let mut catalog = Config::builtin();
        catalog.merge(Config::from_table(&providers, &place)?);
        let mut base = root;
        if let Some(name) = &sources.profile {
            let profile = profiles
                .get(name)
                .cloned()
                .ok_or_else(|| HostError::UnknownProfile {
                    name: name.clone(),
                    known: profiles.keys().cloned().collect(),
                })?;
            base = base.overlaid(profile);
        }
        let narrowed = match &sources.workspace {
            Some(root) => project::narrow(base, root, &mut warnings)?,
            None => base,
        };
        let mut top = toml::Table::new();
        for (key, value) in overrides {
            if DEFAULT_KEYS.contains(&key.as_str()) {
                top.insert(key, value);
            }
        }
        let defaults = narrowed.overlaid(Defaults::from_table(top, "the -c overrides")?);
        let settings = Self {
            defaults: Defaults {
                sandbox_read: defaults
                    .sandbox_read
                    .map(|paths| paths.iter().map(|path| expand_home(path)).collect()),
                ..defaults
            },
            catalog,
            warnings,
            server,
            sessions,
            telemetry,
            hooks,
            mcp_servers,
        };
        settings.checked()
    }

    /// Refuses readable paths that are not absolute (after `~/`).
    fn checked(self) -> Result<Self, HostError> {
        for path in self.defaults.sandbox_read.iter().flatten() {
            if !path.is_absolute() {
                return Err(invalid(
                    "sandbox_read",
                    &format!(
                        "`{}` is not an absolute path (or one under ~/)",
                        path.display()
                    ),
                ));
            }
        }
        Ok(self)
    }

    /// The host configuration and mode for `choices` over these settings.
    ///
    /// The provider is `choices.provider`, else `scripted` when a script is
    /// given, else the settings'. The settings' `model` goes with their
    /// `provider`: it applies only when that provider is the one chosen (a
    /// model of one provider means nothing to another). A model the chosen
    /// provider's catalog does not know adds a `model_not_in_catalog`
    /// warning: its context window and prices are unknown.
    pub fn resolve(&self, choices: Choices) -> Result<RunSetup, HostError> {
        let mut warnings = self.warnings.clone();
        let defaults = &self.defaults;
        let name = choices
            .provider
            .clone()
            .or_else(|| choices.script.as_ref().map(|_| "scripted".to_owned()))
            .or_else(|| defaults.provider.clone())
            .ok_or(HostError::NoProvider)?;
        let model = choices.model.clone().or_else(|| {
            let same = defaults.provider.as_deref().is_none_or(|own| own == name);
            defaults.model.clone().filter(|_| same)
        });
        let provider = if name == "scripted" {
            ProviderChoice::ScriptFile {
                path: choices.script.clone(),
                model,
            }
        } else {
            warnings.extend(self.catalog_warning(&name, model.as_deref()));
            ProviderChoice::Configured {
                name,
                model,
                base_url: choices.base_url.clone(),
                catalog: Arc::new(self.catalog.clone()),
            }
        };
        let mut config = HostConfig::new(provider);
        config.workspace = choices.workspace;
        config.tools = choices.tools.or_else(|| defaults.tools.clone());
        config
            .sandbox
            .readable
            .extend(defaults.sandbox_read.iter().flatten().cloned());
        config.sandbox.readable.extend(choices.sandbox_read);
        config.workspace_snapshots = self.sessions.snapshots.unwrap_or(true);
        config.capture_content = self.telemetry.capture_content();
        config.hooks.clone_from(&self.hooks);
        config.mcp_servers = self.mcp_servers.configs();
        config.permissions = defaults
            .permissions
            .as_ref()
            .map(Permissions::lists)
            .unwrap_or_default();
        Ok(RunSetup {
            config,
            mode: choices.mode.or(defaults.mode).unwrap_or_default(),
            warnings,
            retention: self.sessions.retention(),
        })
    }

    fn catalog_warning(&self, provider: &str, model: Option<&str>) -> Option<Warning> {
        let config = self.catalog.providers.get(provider)?;
        let asked = model.or(config.default_model.as_deref())?;
        let id = config.model_id(asked);
        if config.models.contains_key(id) {
            return None;
        }
        Some(Warning {
            code: "model_not_in_catalog",
            message: format!(
                "model `{id}` is not in the catalog of provider `{provider}`: its context window \
                 and prices are unknown, so no cost is computed (describe it under \
                 [providers.{provider}.models.\"{id}\"] in config.toml)"
            ),
        })
    }
}

/// The user's file, split into its layers.
struct UserFile {
    root: Defaults,
    profiles: BTreeMap<String, Defaults>,
    providers: toml::Table,
    server: ServerSettings,
    sessions: SessionSettings,
    telemetry: TelemetrySettings,
    hooks: Vec<CommandHookSettings>,
    mcp_servers: McpSettings,
}

impl UserFile {
    fn split(mut table: toml::Table, place: &str) -> Result<Self, HostError> {
        if let Some(unknown) = table.keys().find(|key| {
            !DEFAULT_KEYS.contains(&key.as_str()) && !TABLE_KEYS.contains(&key.as_str())
        }) {
            return Err(invalid(
                place,
                &format!(
                    "unknown key `{unknown}`; known: {}, {}",
                    DEFAULT_KEYS.join(", "),
                    TABLE_KEYS.join(", ")
                ),
            ));
        }
        let mut providers = toml::Table::new();
        if let Some(value) = table.remove("providers") {
            providers.insert("providers".to_owned(), value);
        }
        let server = match table.remove("server") {
            Some(value) => ServerSettings::from_value(value, place)?,
            None => ServerSettings::default(),
        };
        let sessions = match table.remove("sessions") {
            Some(value) => SessionSettings::from_value(value, place)?,
            None => SessionSettings::default(),
        };
        let telemetry = match table.remove("telemetry") {
            Some(value) => TelemetrySettings::from_value(value, place)?,
            None => TelemetrySettings::default(),
        };
        let hooks = match table.remove("hooks") {
            Some(value) => CommandHookSettings::from_value(value, place)?,
            None => Vec::new(),
        };
        let mcp_servers = match table.remove("mcp_servers") {
            Some(value) => McpSettings::from_value(value, place)?,
            None => McpSettings::default(),
        };
        let profiles = match table.remove("profiles") {
            None => BTreeMap::new(),
            Some(toml::Value::Table(profiles)) => profiles
                .into_iter()
                .map(|(name, value)| {
                    let where_ = format!("{place}, [profiles.{name}]");
                    let table = match value {
                        toml::Value::Table(table) => table,
                        _ => return Err(invalid(&where_, "a profile is a table")),
                    };
                    Ok((name, Defaults::from_table(table, &where_)?))
                })
                .collect::<Result<_, HostError>>()?,
            Some(_) => return Err(invalid(place, "`profiles` is a table of tables")),
        };
        Ok(Self {
            root: Defaults::from_table(table, place)?,
            profiles,
            providers,
            server,
            sessions,
            telemetry,
            hooks,
            mcp_servers,
        })
    }
}

/// Reads a TOML file Keel did not create (the user's `config.toml`, a
/// project's `.keel/config.toml`) through [`untrusted::read`]: a regular
/// file of at most [`untrusted::CONFIG_BYTES`], opened without blocking,
/// beneath the workspace for a project file. `None` when it is absent and
/// not `required`. A refusal names the file and the reason; a parse error
/// gives the line, column and the parser's message, never the file's text.
pub(crate) fn read_table(
    origin: Origin<'_>,
    required: bool,
) -> Result<Option<toml::Table>, HostError> {
    let contents = match untrusted::read(origin, Limit::Refuse(untrusted::CONFIG_BYTES)) {
        Ok(contents) => contents,
        // A workspace that is a file (or absent) has no project layer; the
        // kernel's own workspace check reports it.
        Err(error) if !required && error.is_not_found() => return Ok(None),
        Err(error) => return Err(HostError::ConfigFile(error)),
    };
    let shown = origin.shown().display().to_string();
    let invalid = |message: String| -> HostError {
        ConfigError::Invalid {
            path: shown.clone(),
            message,
        }
        .into()
    };
    let text = String::from_utf8(contents.bytes).map_err(|error| {
        invalid(format!(
            "byte {} is not valid UTF-8",
            error.utf8_error().valid_up_to()
        ))
    })?;
    toml::from_str(&text)
        .map(Some)
        .map_err(|error| invalid(toml_message(&text, &error)))
}

/// A TOML error as "line L, column C: message", without the snippet of the
/// source that the error's `Display` quotes: a file planted in place of a
/// configuration may hold anything (`/proc/self/environ`, a key file).
pub(crate) fn toml_message(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end().replace('\n', "; ");
    let Some(span) = error.span() else {
        return message;
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map_or(0, |tail| tail.chars().count())
        + 1;
    format!("line {line}, column {column}: {message}")
}

/// `path` as (canonical workspace root, path relative to it) when the
/// directory holding it lies inside `workspace` (see
/// [`untrusted::user_dir_within`]: a directory that cannot be resolved is
/// refused, never read as the user's own). A workspace that cannot be
/// resolved has no inside (the kernel's own check reports it), and a
/// missing directory leaves the file to be reported as missing.
fn beneath_workspace(
    path: &Path,
    workspace: &Path,
) -> Result<Option<(PathBuf, PathBuf)>, HostError> {
    let (Ok(root), Some(dir), Some(name)) = (
        std::fs::canonicalize(workspace),
        path.parent(),
        path.file_name(),
    ) else {
        return Ok(None);
    };
    match untrusted::user_dir_within(dir, &root, path) {
        Ok(Some(rel)) => Ok(Some((root, rel.join(name)))),
        Ok(None) => Ok(None),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(HostError::ConfigFile(error)),
    }
}

/// `~/…` under `$HOME`; any other path as it is.
pub(crate) fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => path.to_path_buf(),
    }
}

pub(crate) fn invalid(place: &str, message: &str) -> HostError {
    ConfigError::Invalid {
        path: place.to_owned(),
        message: message.to_owned(),
    }
    .into()
}
