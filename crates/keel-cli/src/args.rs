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
    /// Continue the run a crash interrupted: `keel resume SESSION` (or
    /// `--session ID`, or `--continue` for this workspace's latest session).
    /// Takes the same flags as `run`; the mode is given again, never
    /// inherited. Calls the crash cut short are recovered from the effect
    /// journal: nothing known applied runs twice, nothing unknown is redone.
    Resume(Box<RunArgs>),
    /// Run a deterministic scenario (no key, no network).
    Demo(DemoArgs),
    /// List the configured providers, models and aliases.
    Models {
        #[command(flatten)]
        settings: ConfigArgs,
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
    /// List the sessions of this workspace (the current directory or
    /// --workspace), newest activity first; --all lists every one.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// List the sessions of every workspace.
        #[arg(long, conflicts_with = "workspace")]
        all: bool,
        /// List the sessions of this workspace instead of the current directory's.
        #[arg(long)]
        workspace: Option<PathBuf>,
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
pub struct RunArgs {
    /// The provider: `scripted` (needs --script) or one from the configuration
    /// (`keel models` lists them: deepseek, anthropic, openai, openrouter,
    /// openai-compatible, …). Default: `provider` in config.toml, or
    /// `scripted` when --script is given.
    #[arg(long)]
    pub provider: Option<String>,
    /// The API base URL, overriding the configured one (e.g. a local server).
    #[arg(long)]
    pub base_url: Option<String>,
    /// The script file for the scripted provider.
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// The workspace directory (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// The model id or alias (`sonnet`, `opus`, `haiku`, `chat`, `reasoner`,
    /// …: `keel models` lists them). Default: `model` in config.toml, else
    /// the provider's default model.
    #[arg(long)]
    pub model: Option<String>,
    /// The permission mode, fixed for the run. Default: `mode` in
    /// config.toml, else auto.
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
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
    /// The tools to offer, comma-separated (default: read,write,edit,bash;
    /// also available: grep, find, ls).
    #[arg(long, value_delimiter = ',')]
    pub tools: Option<Vec<String>>,
    /// Continue this session (id or unique prefix) on its active leaf.
    #[arg(long)]
    pub session: Option<String>,
    /// With --session or --continue: fork the session at this entry and
    /// continue there.
    #[arg(long)]
    pub fork: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    // Configuration, input and session selection (issue 15, cli-config).
    #[command(flatten)]
    pub settings: ConfigArgs,
    /// Continue the latest session of this workspace.
    #[arg(long = "continue", conflicts_with = "session")]
    pub continue_latest: bool,
    /// How standard input is read: `text` (the prompt, when none is given,
    /// then permission answers) or `stream-json` (one host-control message
    /// per line: user_message, steer, follow_up, cancel, permission_answer;
    /// see `keel schema host_control`).
    #[arg(long, value_enum, default_value_t = InputFormat::Text)]
    pub input_format: InputFormat,
    /// The prompt; `@FILE` reads it from a file, and `-` (or no prompt with
    /// standard input not a terminal) reads it from standard input.
    pub prompt: Option<String>,
}

/// Where the configuration comes from: the file, a profile, overrides.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// A configuration file instead of $XDG_CONFIG_HOME/keel/config.toml.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Apply the profile [profiles.NAME] of the configuration.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Override one configuration key (repeatable): a dotted key and a TOML
    /// value, e.g. `-c model=opus`, `-c 'tools=["read","bash"]'`,
    /// `-c providers.local.base_url=http://127.0.0.1:8080/v1`.
    #[arg(short = 'c', long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
}

/// How `keel run` reads standard input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InputFormat {
    /// The prompt (when none is given) and permission answers, as text lines.
    Text,
    /// One JSON host-control message per line (`keel schema host_control`).
    StreamJson,
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
}

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Print only this schema (e.g. `run_event`).
    pub name: Option<String>,
}
