//! Why a host could not assemble a kernel or find a session.

use keel_kernel::KernelError;
use keel_provider::ScriptError;
use keel_provider::config::ConfigError;
use keel_session::SessionError;

/// A problem found while assembling a kernel, before any run started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The scripted provider was chosen without a script.
    #[error("the scripted provider needs --script FILE")]
    ScriptRequired,
    /// No provider was chosen and the configuration names none.
    #[error(
        "no provider: pass --provider NAME (`keel models` lists them) or --script FILE, \
         or set `provider` in config.toml"
    )]
    NoProvider,
    /// A `-c KEY=VALUE` override that cannot be read.
    #[error("cannot use the override `{text}`: {why}")]
    Override {
        /// The override as given.
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// `--profile` names a profile the configuration does not define.
    #[error("no profile `{name}` in config.toml; defined: {}", list_or_none(known))]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The profiles defined.
        known: Vec<String>,
    },
    /// A session is resumed from another workspace than the one it
    /// belongs to, and the host did not name the workspace explicitly.
    #[error(
        "session `{session}` belongs to workspace {session_workspace}, not to {workspace}; \
         run it there, or pass --workspace to say which workspace to use"
    )]
    WorkspaceMismatch {
        /// The session.
        session: String,
        /// The workspace the session records.
        session_workspace: String,
        /// The workspace of this run.
        workspace: String,
    },
    /// A session whose calls changed files is resumed in another,
    /// empty workspace: recovery would judge its interrupted calls
    /// against nothing (and re-run a write into the empty tree).
    #[error(
        "session `{session}` belongs to workspace {session_workspace} and its calls changed \
         files there, but workspace {workspace} is empty: recovery would judge the interrupted \
         calls against nothing; resume it in a workspace that holds its files"
    )]
    EmptyWorkspace {
        /// The session.
        session: String,
        /// The workspace the session records.
        session_workspace: String,
        /// The empty workspace the host named.
        workspace: String,
    },
    /// `--continue` found no session of this workspace.
    #[error(
        "no session of workspace {workspace} to continue (`keel session list --all` shows every one)"
    )]
    NothingToContinue {
        /// The workspace.
        workspace: String,
    },
    /// The script could not be read or parsed.
    #[error(transparent)]
    InvalidScript(#[from] ScriptError),
    /// The configuration could not be loaded or does not name a usable provider.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A configuration file was refused or could not be read: a symlink
    /// leading out of the workspace, a FIFO, a device, too large (the path
    /// and the reason; never the file's content).
    #[error("configuration: {0}")]
    ConfigFile(#[source] keel_tools::untrusted::UntrustedError),
    /// The workspace directory is unusable.
    #[error("{0}")]
    Workspace(String),
    /// A tool name that no built-in tool has.
    #[error("no tool `{name}`; available: {}", known.join(", "))]
    UnknownTool {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },
    /// The kernel refused its parts.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// The session store refused.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// No session directory was given and none can be derived.
    #[error("neither XDG_DATA_HOME nor HOME is set; pass --session-dir")]
    NoSessionDir,
    /// A tenant name (a token's name) that is not `[A-Za-z0-9_-]{1,64}`:
    /// refused before it is used as a path.
    #[error(
        "the tenant name {name:?} is not 1 to 64 of A-Z, a-z, 0-9, `_` and `-`; rename the token"
    )]
    InvalidTenant {
        /// The name, escaped and cut to 64 characters.
        name: String,
    },
    /// No session or entry matches the id given.
    #[error("no {what} `{wanted}`")]
    NotFound {
        /// `session` or `entry`.
        what: &'static str,
        /// The id (or prefix) asked for.
        wanted: String,
    },
    /// More than one session or entry matches the prefix given.
    #[error("`{wanted}` names {count} {what}s; give more of the id")]
    Ambiguous {
        /// `session` or `entry`.
        what: &'static str,
        /// The id prefix asked for.
        wanted: String,
        /// How many match.
        count: usize,
    },
}

impl HostError {
    /// A stable snake_case code for startup error lines.
    pub fn code(&self) -> &'static str {
        match self {
            Self::ScriptRequired => "script_required",
            Self::NoProvider => "no_provider",
            Self::Override { .. } => "config_override",
            Self::UnknownProfile { .. } => "unknown_profile",
            Self::WorkspaceMismatch { .. } => "session_workspace",
            Self::EmptyWorkspace { .. } => "workspace_empty",
            Self::NothingToContinue { .. } => "no_session_to_continue",
            Self::InvalidScript(_) => "invalid_script",
            Self::Config(error) => error.code(),
            Self::ConfigFile(error) => match error {
                keel_tools::untrusted::UntrustedError::Io { .. }
                | keel_tools::untrusted::UntrustedError::NotFound { .. } => "config_unreadable",
                _ => "config_refused",
            },
            Self::Workspace(_) => "workspace",
            Self::UnknownTool { .. } => "unknown_tool",
            Self::Kernel(error) => error.code(),
            Self::Session(error) => error.code(),
            Self::NoSessionDir => "session_dir",
            Self::InvalidTenant { .. } => "invalid_tenant",
            Self::NotFound { what, .. } | Self::Ambiguous { what, .. } => not_found_code(what),
        }
    }
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

fn not_found_code(what: &str) -> &'static str {
    if what == "entry" {
        "entry_not_found"
    } else {
        "session_not_found"
    }
}
