//! `keel swebench run|status|eval`: the SWE-bench evaluator
//! (keel-swebench), with its flags and its progress display — a bar on a
//! terminal, one plain line per instance when stderr is piped.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};
use keel_host::HostOptions;
use keel_host::broker::BrokerConfig;
use keel_swebench::{Budget, Counts, Environment, Progress, Report, RunOptions, Selection};
use tokio_util::sync::CancellationToken;

use crate::args::{ConfigArgs, Mode, SandboxArg};
use crate::signals;
use crate::startup::StartupError;

#[derive(Debug, Subcommand)]
pub enum SwebenchCommand {
    /// Run the agent on SWE-bench instances and write their predictions.
    ///
    /// Writes the official predictions file (`OUTPUT/predictions.jsonl`)
    /// with per-instance artifacts. Run it again with the same --output to
    /// resume: complete instances are skipped, interrupted ones continue
    /// from their sessions.
    Run(Box<RunArgs>),
    /// Summarise a SWE-bench output directory.
    ///
    /// Instances by stage and status, tokens and cost, the predictions file.
    Status {
        /// The output directory.
        output: PathBuf,
        #[command(flatten)]
        format: crate::args::FormatArgs,
    },
    /// Print (or run) the official harness command for the predictions.
    ///
    /// The command is `python -m swebench.harness.run_evaluation …` for
    /// the output directory's predictions; with --run, it is executed.
    Eval {
        /// The output directory.
        output: PathBuf,
        /// Execute the command (needs the `swebench` package and Docker).
        #[arg(long)]
        run: bool,
        /// The harness's --dataset_name (default: the dataset file the
        /// batch ran from).
        #[arg(long)]
        dataset: Option<String>,
        /// The harness's --run_id (default: the output directory's name).
        #[arg(long)]
        run_id: Option<String>,
        /// The harness's --max_workers.
        #[arg(long, default_value_t = 4)]
        max_workers: usize,
        /// The Python interpreter that has `swebench` installed.
        #[arg(long, default_value = "python3")]
        python: String,
    },
}

/// Where instances run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EnvironmentArg {
    /// A checkout on this machine (--repo-mirrors or --repo), sandboxed
    /// like any `auto` run.
    Local,
    /// The instance's SWE-bench image (`swebench/sweb.eval.x86_64.…` or the
    /// dataset's `image`), one container per instance with no network;
    /// needs a Docker engine and the images (never pulled).
    Docker,
}

/// `keel swebench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The dataset: the official instances as a .json or .jsonl file.
    #[arg(long, value_name = "FILE")]
    pub dataset: PathBuf,
    /// Where instances run; chosen explicitly.
    #[arg(long, value_enum)]
    pub environment: EnvironmentArg,
    /// The output directory (resumable: run again with the same one).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: PathBuf,
    /// Only this instance (repeatable).
    #[arg(long = "instance", value_name = "ID")]
    pub instances: Vec<String>,
    /// Only the instances at these positions of the dataset, A:B.
    #[arg(long, value_name = "A:B")]
    pub slice: Option<String>,
    /// Only the instances whose id matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    pub filter: Option<String>,
    /// With `local`: a directory of `<owner>__<name>` repositories.
    #[arg(long, value_name = "DIR")]
    pub repo_mirrors: Option<PathBuf>,
    /// With `local`: the repository of every selected instance.
    #[arg(long, value_name = "PATH", conflicts_with = "repo_mirrors")]
    pub repo: Option<PathBuf>,
    /// With `docker`: the Docker client (needs a Docker engine holding the
    /// instances' images; nothing is pulled).
    #[arg(long, value_name = "PATH", default_value = "docker")]
    pub docker: PathBuf,
    /// Instances run at once.
    #[arg(short = 'w', long = "workers", default_value_t = 1, value_name = "N")]
    pub workers: usize,
    /// Most turns of each run.
    #[arg(long, value_name = "N")]
    pub max_turns: Option<u32>,
    /// Most cost of each run, in USD.
    #[arg(long, value_name = "USD")]
    pub max_cost_usd: Option<f64>,
    /// Most tokens of an instance, over all its runs (cancelled past it).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// Longest a run of an instance may take, in seconds (cancelled then).
    #[arg(long, value_name = "SECS")]
    pub timeout_sec: Option<u64>,
    /// The predictions' `model_name_or_path` (default `keel`, or
    /// `keel-MODEL` with --model).
    #[arg(long, value_name = "NAME")]
    pub model_name: Option<String>,
    /// Start every selected instance afresh, even complete ones.
    #[arg(long)]
    pub redo: bool,
    /// Leave files the agent added under test directories out of patches.
    #[arg(long)]
    pub exclude_tests: bool,
    /// The runs' permission mode (permission requests are denied).
    #[arg(long, value_enum, default_value_t = Mode::Auto)]
    pub mode: Mode,
    /// The provider (default: `provider` in config.toml, or `scripted`
    /// with --script).
    #[arg(long)]
    pub provider: Option<String>,
    /// The model id or alias.
    #[arg(long)]
    pub model: Option<String>,
    /// The API base URL, overriding the configured one.
    #[arg(long)]
    pub base_url: Option<String>,
    /// The script file, for the scripted provider.
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Who enforces the OS sandbox of commands.
    #[arg(long, value_enum, default_value_t = SandboxArg::Os)]
    pub sandbox: SandboxArg,
    /// Another directory sandboxed commands may read (repeatable).
    #[arg(long, value_name = "DIR")]
    pub sandbox_read: Vec<PathBuf>,
    #[command(flatten)]
    pub settings: ConfigArgs,
}

pub async fn run(command: SwebenchCommand) -> Result<ExitCode, StartupError> {
    match command {
        SwebenchCommand::Run(args) => run_batch(*args).await,
        SwebenchCommand::Status { output, format } => status(&output, format),
        SwebenchCommand::Eval {
            output,
            run,
            dataset,
            run_id,
            max_workers,
            python,
        } => eval(&output, run, dataset, run_id, max_workers, &python),
    }
}

/// `path` made absolute against the current directory.
fn absolute(path: Option<&std::path::Path>) -> Result<Option<PathBuf>, StartupError> {
    path.map(|path| {
        std::path::absolute(path)
            .map_err(|error| StartupError::new("usage", format!("{}: {error}", path.display())))
    })
    .transpose()
}

async fn run_batch(args: RunArgs) -> Result<ExitCode, StartupError> {
    let environment = match args.environment {
        // Absolute: git runs in each instance's workspace, not here.
        EnvironmentArg::Local => Environment::Local {
            mirrors: absolute(args.repo_mirrors.as_deref())?,
            repo: absolute(args.repo.as_deref())?,
        },
        EnvironmentArg::Docker => {
            if args.repo_mirrors.is_some() || args.repo.is_some() {
                return Err(StartupError::new(
                    "usage",
                    "--repo-mirrors and --repo apply to --environment local; docker copies the image's /testbed",
                ));
            }
            Environment::Docker {
                client: args.docker.clone(),
            }
        }
    };
    let mut selection = Selection::default();
    selection.ids = args.instances.clone();
    selection.filter = args.filter.clone();
    if let Some(slice) = &args.slice {
        selection.slice = Some(Selection::parse_slice(slice)?);
    }
    let mut host = HostOptions::default();
    host.sandbox_mode = Some(args.sandbox.into());
    let mut broker = BrokerConfig::default();
    broker.config_file = args.settings.config.clone();
    broker.profile = args.settings.profile.clone();
    broker.overrides = args.settings.overrides.clone();
    broker.provider = args.provider.clone();
    broker.model = args.model.clone();
    broker.base_url = args.base_url.clone();
    broker.script = args.script.clone();
    broker.sandbox_read = args.sandbox_read.clone();
    broker.host = host;
    let mut options = RunOptions::new(args.dataset, args.output.clone(), environment, broker);
    options.selection = selection;
    options.workers = args.workers.max(1);
    let mut budget = Budget::default();
    budget.max_turns = args.max_turns;
    budget.max_cost_usd = args.max_cost_usd;
    budget.max_tokens = args.max_tokens;
    budget.timeout_sec = args.timeout_sec;
    options.budget = budget;
    options.model_name = args.model_name;
    options.redo = args.redo;
    options.exclude_tests = args.exclude_tests;
    options.mode = args.mode.into();
    let progress: Arc<dyn Progress> = if std::io::stderr().is_terminal() {
        Arc::new(Bar::new())
    } else {
        Arc::new(Lines)
    };
    let stop = CancellationToken::new();
    let received = signals::Received::install();
    let batch = keel_swebench::run(options, Arc::clone(&progress), stop.clone());
    let summary = tokio::select! {
        summary = batch => summary?,
        never = signals::on_signal(&received, || stop.cancel()) => match never {},
    };
    drop(progress);
    let counts = &summary.counts;
    println!(
        "{} of {} complete ({} skipped as done before, {} failed, {} interrupted); tokens {}, cost ${:.4}",
        counts.done,
        counts.total,
        counts.skipped,
        counts.failed,
        counts.interrupted,
        counts.tokens,
        counts.cost_usd
    );
    println!(
        "predictions: {} ({} lines)",
        args.output.join("predictions.jsonl").display(),
        summary.predictions
    );
    for (id, problem) in &summary.errors {
        eprintln!("keel: {id}: {problem}");
    }
    if let Some(code) = received.exit_code() {
        eprintln!("keel: stopped; run the same command again to resume");
        return Ok(ExitCode::from(code));
    }
    Ok(if summary.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn status(
    output: &std::path::Path,
    format: crate::args::FormatArgs,
) -> Result<ExitCode, StartupError> {
    let status = keel_swebench::status::status(output)?;
    // One object either way: a summary is one item.
    if format.data() != crate::args::DataFormat::Text {
        let text = serde_json::to_string(&status)
            .map_err(|problem| StartupError::new("io", problem.to_string()))?;
        println!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} instances, {} complete, {} predictions",
        output.display(),
        status.instances,
        status.complete,
        status.predictions
    );
    for (name, count) in &status.by_status {
        println!("  {name}: {count}");
    }
    println!("tokens {}, cost ${:.4}", status.tokens, status.cost_usd);
    if !status.unfinished.is_empty() {
        println!("unfinished: {}", status.unfinished.join(" "));
    }
    Ok(ExitCode::SUCCESS)
}

fn eval(
    output: &std::path::Path,
    run: bool,
    dataset: Option<String>,
    run_id: Option<String>,
    max_workers: usize,
    python: &str,
) -> Result<ExitCode, StartupError> {
    let output = std::fs::canonicalize(output)
        .map_err(|problem| StartupError::new("io", format!("{}: {problem}", output.display())))?;
    let argv = keel_swebench::status::harness_command(
        &output,
        dataset.as_deref(),
        run_id.as_deref(),
        max_workers,
        python,
    )?;
    println!("{}", shell_words(&argv));
    if !run {
        return Ok(ExitCode::SUCCESS);
    }
    let status = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .status()
        .map_err(|problem| {
            StartupError::new("harness", format!("{} could not start: {problem}", argv[0]))
        })?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}

/// The argv as one shell line (single-quoted where needed).
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|word| {
            let plain = !word.is_empty()
                && word
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || b"-_./=:@%+,".contains(&byte));
            if plain {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Plain lines on stderr, one per instance step.
struct Lines;

impl Progress for Lines {
    fn report(&self, report: &Report, counts: &Counts) {
        let line = match report {
            Report::Skipped { instance_id } => format!("{instance_id}: complete before, skipped"),
            Report::Started {
                instance_id,
                resumed,
            } => format!(
                "{instance_id}: {}",
                if *resumed { "resuming" } else { "started" }
            ),
            Report::Finished {
                instance_id,
                status,
            } => format!("{instance_id}: {}", status.as_str()),
            Report::Interrupted { instance_id } => {
                format!("{instance_id}: stopped; resumes on the next run")
            }
            _ => return,
        };
        eprintln!(
            "keel swebench: {line} [done {}/{}, running {}, failed {}, tokens {}]",
            counts.done, counts.total, counts.running, counts.failed, counts.tokens
        );
    }
}

/// An indicatif bar on stderr: done of total, running, failed, tokens,
/// cost, ETA.
struct Bar(indicatif::ProgressBar);

impl Bar {
    fn new() -> Self {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} ETA {eta}")
        {
            bar.set_style(style);
        }
        Self(bar)
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish();
    }
}

impl Progress for Bar {
    fn report(&self, report: &Report, counts: &Counts) {
        self.0.set_length(counts.total as u64);
        self.0.set_position(counts.done as u64);
        self.0.set_message(format!(
            "running {}, failed {}, tokens {}, ${:.2}",
            counts.running, counts.failed, counts.tokens, counts.cost_usd
        ));
        if let Report::Finished {
            instance_id,
            status,
        } = report
        {
            self.0
                .println(format!("{instance_id}: {}", status.as_str()));
        }
    }
}
