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
    /// The script could not be read or parsed.
    #[error(transparent)]
    InvalidScript(#[from] ScriptError),
    /// The configuration could not be loaded or does not name a usable provider.
    #[error(transparent)]
    Config(#[from] ConfigError),
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
    /// The session directory cannot be listed.
    #[error("{0}")]
    SessionDir(String),
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
            Self::InvalidScript(_) => "invalid_script",
            Self::Config(error) => error.code(),
            Self::Workspace(_) => "workspace",
            Self::UnknownTool { .. } => "unknown_tool",
            Self::Kernel(error) => error.code(),
            Self::Session(error) => error.code(),
            Self::NoSessionDir => "session_dir",
            Self::SessionDir(_) => "session_store",
            Self::NotFound { what, .. } | Self::Ambiguous { what, .. } => not_found_code(what),
        }
    }
}

fn not_found_code(what: &str) -> &'static str {
    if what == "entry" {
        "entry_not_found"
    } else {
        "session_not_found"
    }
}
