//! Command-line arguments.

use std::path::PathBuf;

use clap::{ArgMatches, Args, FromArgMatches, Parser, Subcommand, ValueEnum};
use keel_protocol::PermissionMode;

/// Keel: a headless coding-agent kernel.
#[derive(Debug, Parser)]
#[command(
    name = "keel",
    version = crate::version::VERSION_LINE,
    about,
    long_about = crate::help::LONG_ABOUT,
    after_help = crate::help::AFTER_HELP,
    after_long_help = crate::help::AFTER_LONG_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    // --- terminal and diagnostics (cli-view) ---
    /// When to colour the terminal view: `auto` (a terminal, unless
    /// NO_COLOR is set), `always` or `never`.
    #[arg(long, value_enum, global = true, default_value_t = ColorArg::Auto)]
    pub color: ColorArg,
    /// Write diagnostics (filtered by KEEL_LOG, default `info` here) to this
    /// file instead of stderr, without colour codes.
    #[arg(long, global = true, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent on a prompt in a workspace.
    #[command(after_help = crate::help::RUN_EXAMPLES)]
    Run(Deferred<Box<RunArgs>>),
    /// Continue a session: `keel resume [SESSION | --last] [PROMPT]`.
    ///
    /// SESSION is an id or its shortest unique prefix (as `keel session
    /// list` shows it); `--last` takes this workspace's latest session; with
    /// neither, on a terminal, a picker lists this workspace's sessions.
    /// If a crash interrupted the session's last run, that run is recovered
    /// first from the effect journal (nothing known applied runs twice,
    /// nothing unknown is redone) and PROMPT follows it; otherwise PROMPT
    /// starts the next run in the session. Takes the same flags as `run`;
    /// the mode is given again, never inherited. With `--input-format
    /// stream-json`, standard input drives the runs instead of PROMPT.
    #[command(after_help = crate::help::RESUME_EXAMPLES)]
    Resume(Deferred<Box<ResumeArgs>>),
    /// Put a session's workspace and conversation back to an earlier entry.
    ///
    /// Records the workspace as it is first (the undo point it prints),
    /// then puts back every file the session changed since then — also
    /// through `bash` — and moves the session's leaf there. An entry inside
    /// a run means the moment before that run. Files the session never
    /// touched stay; a file changed outside the session is reported as a
    /// conflict and left as it is (exit 1).
    Rewind(Deferred<RewindArgs>),
    /// Replay a recorded session through the kernel and compare.
    ///
    /// Each run on the session's active branch is driven again, in order,
    /// by a replay provider that answers with the recorded assistant
    /// messages (and compaction summaries), in the recorded mode and
    /// configuration. Tool calls get their recorded results from tools
    /// that keep the real ones' specs and intents; with --live-tools the
    /// real tools run again in a temporary copy of the recorded run-start
    /// workspace. The replay is written to memory: the recorded session is
    /// only read.
    ///
    /// The replay's entries are compared with the recorded ones, in order,
    /// as JSON without their ids, parent ids and timestamps, entry and run
    /// ids they mention replaced by positions, and without the providers'
    /// own call ids (`wire_id`) and a checkpoint's token estimates (they
    /// count the system prompt, which names the workspace directory and the
    /// date). Labels and snapshots other than a run's
    /// start and end are left out; of a snapshot, its workspace path and
    /// `new_bytes`. Without --live-tools the workspace never changes, so
    /// workspace snapshots and the file evidence of `effect_started`
    /// entries are left out too (docs/contract.md,
    /// "Replay").
    ///
    /// Exit codes: 0 identical, 1 the first divergence (both sides, the
    /// entry and the tool call it concerns), 2 the replay could not be made.
    #[command(after_help = crate::help::REPLAY_EXAMPLES)]
    Replay(Deferred<ReplayArgs>),
    /// Talk with the agent on the terminal: each prompt a run in one session.
    ///
    /// Also `keel` alone when standard input and output are terminals.
    /// Takes `run`'s flags (mode, model, provider, configuration,
    /// --session/--continue/--fork); a PROMPT is sent at once. A prompt
    /// typed while a run works is sent as a follow-up. Type /help in the
    /// chat for its commands.
    #[command(after_help = crate::help::CHAT_HELP)]
    Chat(Deferred<Box<RunArgs>>),
    /// Run a deterministic scenario (no key, no network).
    Demo(Deferred<DemoArgs>),
    /// List the configured providers, models and aliases.
    Models(Deferred<ModelsArgs>),
    /// Inspect and branch stored sessions.
    #[command(subcommand)]
    Session(Deferred<SessionCommand>),
    /// Print the JSON Schemas of the wire format.
    Schema(Deferred<SchemaArgs>),
    /// Serve Keel's host protocol (JSON-RPC 2.0) on standard input and output.
    ///
    /// One JSON object per line each way, logs on stderr only.
    /// Closing stdin cancels the runs this client started, answers nothing
    /// more, and exits 0 once they have settled.
    #[command(after_help = crate::help::RPC_EXAMPLES)]
    Rpc(Deferred<Box<RpcArgs>>),
    /// Serve Keel's host protocol over WebSocket.
    ///
    /// At `ws://ADDR:PORT/`, with `GET /health` and `GET /metrics`.
    /// Loopback by default; any other
    /// address needs a token, sent by clients as `Authorization: Bearer`.
    /// SIGTERM or SIGINT: no new runs, running ones get --drain-timeout
    /// to finish, then are cancelled (sessions intact); exits 0.
    #[command(after_help = crate::help::SERVE_EXAMPLES)]
    Serve(Deferred<Box<ServeArgs>>),
    /// Run SWE-bench instances and hand their predictions to the harness.
    ///
    /// `run` writes the official predictions file (resumable, concurrent),
    /// `status` summarises an output directory and `eval` prints the
    /// official harness command for it.
    #[command(subcommand)]
    Swebench(Deferred<crate::swebench_cmd::SwebenchCommand>),
    /// Report what the OS sandbox can enforce on this machine.
    Doctor(Deferred<DoctorArgs>),
    /// Inspect the MCP servers of the configuration.
    ///
    /// `list` starts each `[mcp_servers.NAME]` server of config.toml once
    /// (in parallel, within its startup timeout) and shows its state and
    /// tools, then stops it.
    #[command(subcommand)]
    Mcp(Deferred<McpCommand>),
    // --- install helpers (cli-view) ---
    /// Print a shell completion script.
    ///
    /// E.g. `keel completion bash >
    /// ~/.local/share/bash-completion/completions/keel`.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: ShellArg,
    },
    /// Print or install the manual pages.
    ///
    /// Prints keel's own page, or one command's (`keel man run | man -l
    /// -`), as roff; `--dir DIR` writes every page into DIR instead.
    Man(Deferred<ManArgs>),
    /// Print the version, the commit it was built from and the build date.
    Version(Deferred<VersionArgs>),
}

/// A subcommand's arguments (or subcommands), whose definitions clap builds
/// only when that subcommand is parsed or its help printed
/// (`clap::Command::defer`). Without it every start of `keel` built, and
/// freed, the arguments of every command: a quarter of `keel --version`'s
/// instructions (docs/benchmarks.md, "Start-up after the fix — issue 23").
/// [`full_command`] builds the whole tree at once, for completions and man
/// pages.
#[derive(Debug)]
pub struct Deferred<T>(T);

impl<T> Deferred<T> {
    /// The parsed arguments.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for Deferred<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

thread_local! {
    /// Set while [`full_command`] builds the tree: nothing is deferred.
    static EAGER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// keel's whole command tree, every subcommand's definitions included, as
/// completions and man pages need it (`Cli::command()` defers them).
pub fn full_command() -> clap::Command {
    use clap::CommandFactory;
    EAGER.with(|eager| eager.set(true));
    let command = Cli::command();
    EAGER.with(|eager| eager.set(false));
    command
}

fn eager() -> bool {
    EAGER.with(std::cell::Cell::get)
}

/// What a subcommand's own definition (its enum variant: doc comment,
/// `#[command(...)]`) says about it. Built eagerly, the variant's texts are
/// applied after its arguments' (whose doc comments set texts too); built
/// late, they were applied first, so they are put back.
struct Texts {
    about: Option<clap::builder::StyledStr>,
    long_about: Option<clap::builder::StyledStr>,
    before_help: Option<clap::builder::StyledStr>,
    before_long_help: Option<clap::builder::StyledStr>,
    after_help: Option<clap::builder::StyledStr>,
    after_long_help: Option<clap::builder::StyledStr>,
}

impl Texts {
    fn of(cmd: &clap::Command) -> Self {
        Self {
            about: cmd.get_about().cloned(),
            long_about: cmd.get_long_about().cloned(),
            before_help: cmd.get_before_help().cloned(),
            before_long_help: cmd.get_before_long_help().cloned(),
            after_help: cmd.get_after_help().cloned(),
            after_long_help: cmd.get_after_long_help().cloned(),
        }
    }

    /// Every deferred variant has a doc comment, which sets both `about`
    /// and `long_about` (to none when it is one paragraph): those always
    /// win. The others win when the variant set them.
    fn restore(self, mut cmd: clap::Command) -> clap::Command {
        const NONE: Option<&str> = None;
        cmd = match self.about {
            Some(text) => cmd.about(text),
            None => cmd.about(NONE),
        };
        cmd = match self.long_about {
            Some(text) => cmd.long_about(text),
            None => cmd.long_about(NONE),
        };
        if let Some(text) = self.before_help {
            cmd = cmd.before_help(text);
        }
        if let Some(text) = self.before_long_help {
            cmd = cmd.before_long_help(text);
        }
        if let Some(text) = self.after_help {
            cmd = cmd.after_help(text);
        }
        if let Some(text) = self.after_long_help {
            cmd = cmd.after_long_help(text);
        }
        cmd
    }
}

fn late_args<T: Args>(cmd: clap::Command) -> clap::Command {
    let texts = Texts::of(&cmd);
    texts.restore(T::augment_args(cmd))
}

fn late_args_for_update<T: Args>(cmd: clap::Command) -> clap::Command {
    let texts = Texts::of(&cmd);
    texts.restore(T::augment_args_for_update(cmd))
}

fn late_subcommands<T: Subcommand>(cmd: clap::Command) -> clap::Command {
    let texts = Texts::of(&cmd);
    texts.restore(T::augment_subcommands(cmd))
}

fn late_subcommands_for_update<T: Subcommand>(cmd: clap::Command) -> clap::Command {
    let texts = Texts::of(&cmd);
    texts.restore(T::augment_subcommands_for_update(cmd))
}

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(matches).map(Self)
    }

    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches_mut(matches).map(Self)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }

    fn update_from_arg_matches_mut(&mut self, matches: &mut ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}

impl<T: Args> Args for Deferred<T> {
    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }

    fn augment_args(cmd: clap::Command) -> clap::Command {
        if eager() {
            T::augment_args(cmd)
        } else {
            cmd.defer(late_args::<T>)
        }
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        if eager() {
            T::augment_args_for_update(cmd)
        } else {
            cmd.defer(late_args_for_update::<T>)
        }
    }
}

impl<T: Subcommand> Subcommand for Deferred<T> {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        if eager() {
            T::augment_subcommands(cmd)
        } else {
            cmd.defer(late_subcommands::<T>)
        }
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        if eager() {
            T::augment_subcommands_for_update(cmd)
        } else {
            cmd.defer(late_subcommands_for_update::<T>)
        }
    }

    fn has_subcommand(name: &str) -> bool {
        T::has_subcommand(name)
    }
}

/// `keel man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command whose page to print, e.g. `run` or `session list`
    /// (default: keel's own page).
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Write one page per command (keel.1, keel-run.1, keel-session-list.1,
    /// …) into DIR instead of printing one.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

/// `keel models`.
#[derive(Debug, Clone, Args)]
pub struct ModelsArgs {
    #[command(flatten)]
    pub settings: ConfigArgs,
    #[command(flatten)]
    pub format: FormatArgs,
}

/// `keel mcp`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start each configured MCP server once and list its state and tools.
    ///
    /// Exit code 1 when a `required` server failed to start.
    List(McpListArgs),
}

/// `keel mcp list`.
#[derive(Debug, Clone, Args)]
pub struct McpListArgs {
    /// The same as `--output-format json`: one JSON object.
    #[arg(long, conflicts_with = "output_format")]
    pub json: bool,
    #[command(flatten)]
    pub settings: ConfigArgs,
    #[command(flatten)]
    pub format: FormatArgs,
}

/// `keel rewind`.
#[derive(Debug, Clone, Args)]
pub struct RewindArgs {
    /// The session id (or a unique prefix).
    pub session: String,
    /// The entry id (or a unique prefix) to go back to, as `keel session
    /// show` lists them.
    #[arg(long, value_name = "ENTRY")]
    pub to: String,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub format: FormatArgs,
}

/// `keel replay`.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The session id (or a unique prefix).
    pub session: String,
    /// Run the real tools again, in a temporary copy of the workspace the
    /// session recorded at its first run's start, instead of serving the
    /// recorded results.
    #[arg(long)]
    pub live_tools: bool,
    /// The same as `--output-format json`: one JSON object.
    #[arg(long, conflicts_with = "output_format")]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub format: FormatArgs,
}

/// `keel doctor`.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// Also check that the chosen provider's base URL answers (one HTTP
    /// request, no key sent).
    #[arg(long)]
    pub network: bool,
    #[command(flatten)]
    pub settings: ConfigArgs,
    #[command(flatten)]
    pub format: FormatArgs,
}

/// `keel version`.
#[derive(Debug, Clone, Args)]
pub struct VersionArgs {
    /// The same as `--output-format json`: one JSON object, also naming the
    /// session format versions read and written, the JSON-RPC protocol
    /// version and the build's features.
    #[arg(long, conflicts_with = "output_format")]
    pub json: bool,
    #[command(flatten)]
    pub format: FormatArgs,
}

/// How a command that prints data (not a run) prints it.
#[derive(Debug, Clone, Copy, Args)]
pub struct FormatArgs {
    /// `text`: readable lines (`auto`, the default, is text on a terminal
    /// and piped); `json`: one JSON document; `stream-json`: JSON Lines, one
    /// object per item.
    #[arg(long, value_enum, default_value_t = OutputFormat::Auto)]
    pub output_format: OutputFormat,
}

/// The forms a command that prints data prints in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataFormat {
    /// Readable lines.
    Text,
    /// One JSON document.
    Json,
    /// One JSON object per line.
    StreamJson,
}

impl FormatArgs {
    /// The form asked for: `auto` is text, on a terminal or not.
    pub fn data(self) -> DataFormat {
        match self.output_format {
            OutputFormat::Auto | OutputFormat::Text => DataFormat::Text,
            OutputFormat::Json => DataFormat::Json,
            OutputFormat::StreamJson => DataFormat::StreamJson,
        }
    }
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
    /// List the sessions of this workspace.
    ///
    /// The current directory's, or --workspace's, newest activity first;
    /// --all lists every one.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// List the sessions of every workspace.
        #[arg(long, conflicts_with = "workspace")]
        all: bool,
        /// List the sessions of this workspace instead of the current directory's.
        #[arg(long)]
        workspace: Option<PathBuf>,
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Show a session and its active branch.
    Show {
        /// The session id (or a unique prefix).
        id: String,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Draw the session tree, marking the active branch.
    Tree {
        /// The session id (or a unique prefix).
        id: String,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Start a new session holding the path from the root to ENTRY.
    Fork {
        /// The session id (or a unique prefix).
        id: String,
        /// The entry id (or a unique prefix) to fork at.
        entry: String,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Write a new session from the intact records of a damaged one.
    ///
    /// Every complete record before the damage, and later groups that
    /// still connect; the damaged file is left as it is.
    Salvage {
        /// The session id (or a unique prefix).
        id: String,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Summarise the oldest part of a session's context into a checkpoint.
    ///
    /// With the session's own provider and model (or the ones given).
    Compact(Box<CompactArgs>),
    /// Tokens, cost, turns, tool calls and time of a session, or of all.
    ///
    /// Read from the session's entries; model and tool time come from
    /// entry timestamps (tool time includes waits for a permission answer).
    Stats {
        /// The session id (or a unique prefix).
        #[arg(required_unless_present = "all")]
        id: Option<String>,
        /// Every session of the store, added up.
        #[arg(long, conflicts_with = "id")]
        all: bool,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        format: FormatArgs,
    },
    /// Remove sessions not active for a while, with their journals.
    ///
    /// Never one that is open, whose last run a crash interrupted, that is
    /// damaged, or whose fork is kept; says what it freed. The age is
    /// --older-than, else `retention` in config.toml's `[sessions]`.
    Prune(PruneArgs),
    /// Write a workspace snapshot of the session into a new directory.
    ///
    /// The snapshot in force at ENTRY (the latest recorded at or before it;
    /// the leaf's without --at), byte for byte with file modes.
    Restore {
        /// The session id (or a unique prefix).
        id: String,
        /// The entry id (or a unique prefix) whose workspace to write.
        #[arg(long, value_name = "ENTRY")]
        at: Option<String>,
        /// A new or empty directory to write it into.
        #[arg(long, value_name = "DIR")]
        into: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        format: FormatArgs,
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

/// `keel session prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Remove sessions whose last activity is older than this: a whole
    /// number and a unit, s, m, h, d or w (e.g. 30d). Default: `retention`
    /// in config.toml's `[sessions]`.
    #[arg(long, value_name = "DURATION")]
    pub older_than: Option<String>,
    /// Keep the N sessions with the latest activity, however old.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keep: usize,
    /// Say what would be removed and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub settings: ConfigArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub format: FormatArgs,
}

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// The session id (or a unique prefix).
    pub id: String,
    /// What the summary should keep in particular.
    #[arg(long)]
    pub instructions: Option<String>,
    /// The provider (default: the one the session last ran with, unless
    /// --profile or -c chooses one).
    #[arg(long)]
    pub provider: Option<String>,
    /// The model (default: the one the session last ran with).
    #[arg(long)]
    pub model: Option<String>,
    /// The API base URL, overriding the configured one.
    #[arg(long)]
    pub base_url: Option<String>,
    #[command(flatten)]
    pub settings: ConfigArgs,
    /// The script file, for the scripted provider.
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// The model's context window in tokens, overriding the catalog's.
    #[arg(long)]
    pub context_window: Option<u64>,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub format: FormatArgs,
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
    // --- output and budget (cli-view) ---
    #[command(flatten)]
    pub output: OutputArgs,
    /// Stop the run (failed, `budget_exceeded`) before the next model
    /// request once its responses cost more than this many USD; a model
    /// without prices stops it too (`cost_unknown`).
    #[arg(long, value_name = "USD")]
    pub max_budget_usd: Option<f64>,
    /// An image sent after the prompt's text (repeatable, in order): a
    /// PNG, JPEG, GIF or WebP file of at most 10 MiB. Needs a text prompt.
    #[arg(long = "image", short = 'i', value_name = "FILE")]
    pub images: Vec<PathBuf>,
    /// The prompt; `@FILE` reads it from a file, and `-` (or no prompt with
    /// standard input not a terminal) reads it from standard input.
    pub prompt: Option<String>,
}

/// `keel resume`: the session to continue and what to say next, with
/// `keel run`'s flags.
#[derive(Debug, Args)]
#[command(mut_arg("prompt", |arg| {
    arg.value_name("SESSION")
        .index(1)
        .help("The session (id or unique prefix); with --last, --session or --continue, the prompt")
}))]
pub struct ResumeArgs {
    /// Continue this workspace's latest session (as `--continue`).
    #[arg(long, conflicts_with_all = ["session", "continue_latest"])]
    pub last: bool,
    #[command(flatten)]
    pub run: RunArgs,
    /// What to say next in the session: `@FILE` reads it from a file, `-`
    /// from standard input. Without it, an interrupted run is only
    /// recovered.
    #[arg(value_name = "PROMPT", index = 2)]
    pub then: Option<String>,
}

/// How the broker of `keel rpc` and `keel serve` builds the kernels of its
/// runs: what `keel run`'s flags say for one run, here for every run (a
/// `run/start` may still choose its provider, model, mode and tools).
#[derive(Debug, Args)]
pub struct BrokerArgs {
    /// The provider of runs that name none (default: `provider` in
    /// config.toml, or `scripted` when --script is given).
    #[arg(long)]
    pub provider: Option<String>,
    /// The model of runs that name none.
    #[arg(long)]
    pub model: Option<String>,
    /// The API base URL, overriding the configured one.
    #[arg(long)]
    pub base_url: Option<String>,
    /// The script file, for the scripted provider.
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Who enforces the OS sandbox of commands (as for `keel run`).
    #[arg(long, value_enum, default_value_t = SandboxArg::Os)]
    pub sandbox: SandboxArg,
    /// Another directory sandboxed commands may read (repeatable).
    #[arg(long, value_name = "DIR")]
    pub sandbox_read: Vec<PathBuf>,
    /// Another environment variable commands receive (repeatable).
    #[arg(long, value_name = "NAME")]
    pub sandbox_env: Vec<String>,
    /// The system prompt, instead of Keel's default.
    #[arg(long)]
    pub system_prompt: Option<String>,
    /// Text added after the system prompt.
    #[arg(long)]
    pub append_system_prompt: Option<String>,
    /// The model's context window in tokens, overriding the catalog's.
    #[arg(long)]
    pub context_window: Option<u64>,
    /// Leave the environment out of the system prompt.
    #[arg(long)]
    pub no_environment: bool,
    /// Most runs active at once; more starts wait in the queue.
    #[arg(long, value_name = "N")]
    pub max_runs: Option<usize>,
    /// Most starts waiting for a slot; past it a start is refused at once
    /// with `retry_after_ms`.
    #[arg(long, value_name = "N")]
    pub max_queue: Option<usize>,
    #[command(flatten)]
    pub settings: ConfigArgs,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `keel rpc`.
#[derive(Debug, Args)]
pub struct RpcArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
}

/// `keel serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on, ADDR:PORT (default: `listen` in
    /// [server] of config.toml, else 127.0.0.1:7878). Any address but
    /// loopback needs a token.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// The file holding the token clients must send (`Authorization:
    /// Bearer TOKEN`); default: KEEL_SERVER_TOKEN, else `token_file` in
    /// [server]. Named tokens with quotas: [server.tokens.NAME].
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Seconds running runs get to finish after SIGTERM/SIGINT before they
    /// are cancelled (default 30).
    #[arg(long, value_name = "SECS")]
    pub drain_timeout: Option<u64>,
    /// A browser origin allowed to connect, e.g. https://app.example.com
    /// (repeatable); requests with any other Origin get 403.
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    #[command(flatten)]
    pub broker: BrokerArgs,
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

impl ConfigArgs {
    /// The configuration sources these flags name (no workspace: the
    /// caller adds the one whose project layer applies).
    pub fn sources(&self) -> keel_host::Sources {
        let mut sources = keel_host::Sources::default();
        sources.config_file = self.config.clone();
        sources.profile = self.profile.clone();
        sources.overrides = self.overrides.clone();
        sources
    }
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
    /// Keel confines commands (namespaces, Landlock, seccomp).
    Os,
    /// The host already isolates Keel (a container).
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
    /// Read-only: reads and sandboxed read-only commands; no writes.
    Plan,
    /// Workspace reads run; everything else asks you first.
    Ask,
    /// Workspace reads, writes and sandboxed commands run; outside and network ask.
    Auto,
    /// Everything runs without asking and without the OS sandbox.
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
#[command(after_help = crate::help::DEMO_CASES)]
pub struct DemoArgs {
    /// The scenario.
    #[arg(value_enum)]
    pub name: DemoName,
    /// The case of the scenario (default: its first case; the cases are
    /// listed below).
    #[arg(long)]
    pub case: Option<String>,
    /// The permission mode (the `permissions` scenario only).
    #[arg(long, value_enum, default_value_t = Mode::Auto)]
    pub mode: Mode,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DemoName {
    /// One streamed answer with thinking (cases: success, provider-error).
    StreamedRun,
    /// A scripted model fixing a bug with the real tools (cases: success,
    /// mixed-batch, failure).
    ToolLoop,
    /// Steering, follow-ups, cancellation and retries (cases: steering,
    /// follow-up, cancel, retry-success, retry-failure).
    RunControl,
    /// Branches and forks of a stored session (cases: success, invalid-entry).
    SessionTree,
    /// What each --mode lets through (cases: standard, cancel,
    /// host-disconnect, resume).
    Permissions,
    ContextCompaction,
    /// A run killed with SIGKILL mid-batch, then resumed (case:
    /// killed-mid-batch).
    CrashRecovery,
    /// A host's extensions: hooks that supplement, block, transform in
    /// order, and answers the kernel rejects (cases: success, ordering,
    /// invalid-outcome).
    Extensions,
}

#[derive(Debug, Args)]
#[command(after_help = crate::help::SCHEMA_NAMES)]
pub struct SchemaArgs {
    /// Print only this schema (the names are listed below).
    pub name: Option<String>,
}

// --- output, colour and install helpers (cli-view) ---

/// How a run's output is printed.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// `auto` (the default): the live view on a terminal, otherwise only the
    /// final message (as `-q`); `text`: the human view (plain when not a
    /// terminal); `json`: one JSON object when the run ends; `stream-json`:
    /// JSON Lines, every event as it happens.
    #[arg(long, value_enum, default_value_t = OutputFormat::Auto)]
    pub output_format: OutputFormat,
    /// Also write the run's final message to FILE.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output_last_message: Option<PathBuf>,
    /// Print only the run's final message (errors still go to stderr); not
    /// with `--output-format json` or `stream-json`.
    #[arg(short, long)]
    pub quiet: bool,
}

/// The `--output-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Text on a terminal; piped, a run prints only its final message and
    /// other commands print text.
    Auto,
    /// The human view (a run's), or readable lines.
    Text,
    /// One JSON object (a run's when it ends).
    Json,
    /// JSON Lines (a run's events as they happen).
    StreamJson,
}

/// The `--color` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorArg {
    /// Colour on a terminal unless NO_COLOR is set.
    Auto,
    /// Always colour (and redraw live output).
    Always,
    /// Never colour: no escape codes at all.
    Never,
}

/// The shells `keel completion` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShellArg {
    /// GNU bash.
    Bash,
    /// Z shell.
    Zsh,
    /// fish.
    Fish,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::{Cli, full_command};

    /// Starting `keel` builds the top level of the command tree only: a
    /// subcommand's own arguments and subcommands are built when it is
    /// parsed or its help printed, so no command pays for every other
    /// command's definitions. A subcommand of one argument may stay eager.
    #[test]
    fn starting_keel_builds_no_subcommand_definitions() {
        let root = Cli::command();
        let eager: Vec<(&str, usize, usize)> = root
            .get_subcommands()
            .map(|sub| {
                (
                    sub.get_name(),
                    sub.get_arguments().count(),
                    sub.get_subcommands().count(),
                )
            })
            .filter(|&(_, arguments, subcommands)| arguments > 1 || subcommands > 0)
            .collect();
        assert!(
            eager.is_empty(),
            "built at every start (name, arguments, subcommands): {eager:?}"
        );
        let full = full_command();
        let run = full.find_subcommand("run").unwrap();
        assert!(run.get_arguments().count() > 20);
        let session = full.find_subcommand("session").unwrap();
        assert!(session.get_subcommands().count() >= 7);
    }

    /// Every command path of the full tree: `[]`, `["run"]`, `["session",
    /// "list"]`, …
    fn paths(command: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        out.push(prefix.to_vec());
        for sub in command.get_subcommands() {
            let mut path = prefix.to_vec();
            path.push(sub.get_name().to_owned());
            paths(sub, &path, out);
        }
    }

    /// What clap prints for these arguments (help, usage or an error).
    fn answer(mut command: clap::Command, args: &[String]) -> String {
        let argv = std::iter::once("keel".to_owned()).chain(args.iter().cloned());
        match command.try_get_matches_from_mut(argv) {
            Ok(matches) => format!("parsed: {:?}", matches.subcommand_name()),
            Err(error) => format!("{:?}: {}", error.kind(), error.render()),
        }
    }

    /// Building a subcommand late changes nothing a user sees: every
    /// command's `--help`, `-h`, `keel help …` and a missing or unknown
    /// argument read the same as with the tree built at once; clap finds
    /// both trees consistent.
    #[test]
    fn deferred_definitions_read_as_the_full_tree() {
        let mut all = Vec::new();
        paths(&full_command(), &[], &mut all);
        assert!(all.len() > 20, "{all:?}");
        for path in &all {
            let mut cases = vec![
                [path.clone(), vec!["--help".to_owned()]].concat(),
                [path.clone(), vec!["-h".to_owned()]].concat(),
                [path.clone(), vec!["--no-such-flag".to_owned()]].concat(),
                path.clone(),
            ];
            if !path.is_empty() {
                cases.push([vec!["help".to_owned()], path.clone()].concat());
            }
            for args in cases {
                assert_eq!(
                    answer(Cli::command(), &args),
                    answer(full_command(), &args),
                    "keel {}",
                    args.join(" ")
                );
            }
        }
        Cli::command().debug_assert();
        full_command().debug_assert();
    }
}
