//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use keel_protocol::PermissionMode;

/// Keel: a headless coding-agent kernel.
#[derive(Debug, Parser)]
#[command(name = "keel", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent on a prompt in a workspace.
    Run(Box<RunArgs>),
    /// Run a deterministic scenario (no key, no network).
    Demo(DemoArgs),
    /// List the configured providers and models.
    Models {
        /// A configuration file instead of $XDG_CONFIG_HOME/keel/config.toml.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Inspect and branch stored sessions.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Print the JSON Schemas of the wire format.
    Schema(SchemaArgs),
    /// Report what the OS sandbox can enforce on this machine.
    Doctor {
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Where sessions are stored.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// The session directory (default: $XDG_DATA_HOME/keel/sessions).
    #[arg(long, global = true)]
    pub session_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// List sessions, newest activity first.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Show a session and its active branch.
    Show {
        /// The session id (or a unique prefix).
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Draw the session tree, marking the active branch.
    Tree {
        /// The session id (or a unique prefix).
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Start a new session holding the path from the root to ENTRY.
    Fork {
        /// The session id (or a unique prefix).
        id: String,
        /// The entry id (or a unique prefix) to fork at.
        entry: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Summarise the oldest part of a session's context into a checkpoint,
    /// with the session's own provider and model (or the ones given).
    Compact(Box<CompactArgs>),
    /// Write the whole session as one JSON document.
    Export {
        /// The session id (or a unique prefix).
        id: String,
        /// Write here instead of stdout.
        #[arg(long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// The session id (or a unique prefix).
    pub id: String,
    /// What the summary should keep in particular.
    #[arg(long)]
    pub instructions: Option<String>,
    /// The provider (default: the one the session last ran with).
    #[arg(long)]
    pub provider: Option<String>,
    /// The model (default: the one the session last ran with).
    #[arg(long)]
    pub model: Option<String>,
    /// The API base URL, overriding the configured one.
    #[arg(long)]
    pub base_url: Option<String>,
    /// A configuration file instead of $XDG_CONFIG_HOME/keel/config.toml.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The script file, for the scripted provider.
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// The model's context window in tokens, overriding the catalog's.
    #[arg(long)]
    pub context_window: Option<u64>,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The provider: `scripted` (needs --script) or one from the configuration
    /// (`keel models` lists them: deepseek, anthropic, openai, openrouter,
    /// openai-compatible, …).
    #[arg(long, default_value = "scripted")]
    pub provider: String,
    /// The API base URL, overriding the configured one (e.g. a local server).
    #[arg(long)]
    pub base_url: Option<String>,
    /// A configuration file instead of $XDG_CONFIG_HOME/keel/config.toml.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The script file for the scripted provider.
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// The workspace directory (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// The model id to request.
    #[arg(long)]
    pub model: Option<String>,
    /// The permission mode, fixed for the run.
    #[arg(long, value_enum, default_value_t = Mode::Auto)]
    pub mode: Mode,
    /// Who enforces the OS sandbox of commands: `os` (Keel, with Linux
    /// namespaces, Landlock and seccomp; fails closed where they are
    /// missing) or `external` (the host already runs Keel inside an
    /// isolating container).
    #[arg(long, value_enum, default_value_t = SandboxArg::Os)]
    pub sandbox: SandboxArg,
    /// Another directory sandboxed commands may read (repeatable), besides
    /// the workspace, system locations and the usual toolchain directories
    /// under $HOME (`keel doctor` lists what the sandbox enforces).
    #[arg(long, value_name = "DIR")]
    pub sandbox_read: Vec<PathBuf>,
    /// Another environment variable commands receive (repeatable), besides
    /// PATH, HOME, locale, TERM, USER, SHELL, TMPDIR and PWD; every other
    /// variable of Keel's environment is withheld from commands.
    #[arg(long, value_name = "NAME")]
    pub sandbox_env: Vec<String>,
    /// Keep the full logs of long tool outputs after the run (by default
    /// they are removed when the run ends).
    #[arg(long)]
    pub keep_outputs: bool,
    /// Fail the run after this many turns.
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// The system prompt, instead of Keel's default (which names the
    /// workspace and the tools). Small local models may need a shorter one.
    #[arg(long)]
    pub system_prompt: Option<String>,
    /// Text added after the system prompt (Keel's default or
    /// --system-prompt), e.g. house rules for this run.
    #[arg(long)]
    pub append_system_prompt: Option<String>,
    /// The model's context window in tokens, overriding the catalog's (e.g.
    /// a local server started with a small context); runs compact to fit it.
    #[arg(long)]
    pub context_window: Option<u64>,
    /// Leave the environment (date, working directory, OS, shell, git) out
    /// of the system prompt; very small local models may need it.
    #[arg(long)]
    pub no_environment: bool,
    /// The tools to offer, comma-separated (default: read,write,edit,bash;
    /// also available: grep, find, ls).
    #[arg(long, value_delimiter = ',')]
    pub tools: Option<Vec<String>>,
    /// Continue this session (id or unique prefix) on its active leaf.
    #[arg(long)]
    pub session: Option<String>,
    /// With --session: fork the session at this entry and continue there.
    #[arg(long, requires = "session")]
    pub fork: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// The prompt; `@FILE` reads it from a file, and `-` (or no prompt with
    /// standard input not a terminal) reads it from standard input.
    pub prompt: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SandboxArg {
    Os,
    External,
}

impl From<SandboxArg> for keel_tools::sandbox::SandboxMode {
    fn from(sandbox: SandboxArg) -> Self {
        match sandbox {
            SandboxArg::Os => Self::Os,
            SandboxArg::External => Self::External,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Mode {
    Plan,
    Ask,
    Auto,
    Full,
}

impl From<Mode> for PermissionMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Plan => PermissionMode::Plan,
            Mode::Ask => PermissionMode::Ask,
            Mode::Auto => PermissionMode::Auto,
            Mode::Full => PermissionMode::Full,
        }
    }
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The scenario.
    #[arg(value_enum)]
    pub name: DemoName,
    /// The case of the scenario (default: its first case).
    #[arg(long)]
    pub case: Option<String>,
    /// The permission mode (the `permissions` scenario only).
    #[arg(long, value_enum, default_value_t = Mode::Auto)]
    pub mode: Mode,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DemoName {
    StreamedRun,
    ToolLoop,
    RunControl,
    SessionTree,
    Permissions,
    ContextCompaction,
}

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Print only this schema (e.g. `run_event`).
    pub name: Option<String>,
}
