//! `keel`: a thin command-line host over `AgentKernel`.
//!
//! Every subcommand parses its arguments, assembles a kernel, drives runs
//! through the public `AgentRun` seam and prints JSON Lines (or a human view
//! on a terminal). Exit codes: 0 only for a settled run, 1 for a failed or
//! cancelled one, 2 for a startup error (text on stderr, or one JSON line on
//! stdout when `--output-format json` or `stream-json` was asked).

mod args;
mod ask;
mod broker_run;
mod chat;
mod compact_cmd;
mod demo;
mod demo_compaction;
mod demo_crash;
mod demo_extensions;
mod demo_permissions;
mod demo_session;
mod doctor;
mod escape;
mod help;
mod host;
mod images;
mod install;
mod mcp_cmd;
mod models_cmd;
mod output;
mod picker;
mod replay_cmd;
mod rewind_cmd;
mod run_cmd;
mod serve_cmd;
mod session_cmd;
mod signals;
mod startup;
mod stream_input;
mod style;
mod swebench_cmd;
mod tty;
mod version;
mod view;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::startup::StartupError;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // `keel` alone (global options at most) on a terminal: a chat.
        Err(error)
            if matches!(
                error.kind(),
                clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                    | clap::error::ErrorKind::MissingSubcommand
            ) && chat::on_terminal() =>
        {
            let args = std::env::args_os().chain([OsString::from("chat")]);
            match Cli::try_parse_from(args) {
                Ok(cli) => cli,
                Err(error) => return startup::usage_error(error),
            }
        }
        Err(error) => {
            // `args_os`: `std::env::args` panics on an argument that is not
            // UTF-8, which is exactly when clap refuses one.
            let args: Vec<OsString> = std::env::args_os().collect();
            startup::set_plain_errors(!asks_for_json(&args));
            // `keel --version --json`: clap answers `--version` before it
            // reads what follows, so the one flag that may follow is read here.
            if error.kind() == clap::error::ErrorKind::DisplayVersion
                && args.len() == 3
                && args[2] == "--json"
            {
                return match version::run(args::DataFormat::Json) {
                    Ok(code) => code,
                    Err(error) => error.report(),
                };
            }
            if error.kind() == clap::error::ErrorKind::InvalidUtf8 {
                return startup::argument_not_utf8(&args, |args| {
                    Cli::try_parse_from(args)
                        .err()
                        .is_some_and(|error| error.kind() == clap::error::ErrorKind::InvalidUtf8)
                })
                .report();
            }
            return startup::usage_error(error);
        }
    };
    style::set_choice(cli.color);
    startup::set_plain_errors(!matches!(
        output_format(&cli.command),
        Some(args::OutputFormat::Json | args::OutputFormat::StreamJson)
    ));
    if let Some(error) = quiet_conflict(&cli.command) {
        return startup::usage_error(error);
    }
    let telemetry = match start_telemetry(&cli.command) {
        Ok(telemetry) => telemetry,
        Err(error) => return error.report(),
    };
    if let Err(error) = init_tracing(cli.log_file.as_deref(), telemetry.as_ref()) {
        return error.report();
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        command = command_name(&cli.command),
        "keel starting"
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return StartupError::new("runtime", error.to_string()).report(),
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run_cmd::run(*args.into_inner()).await,
            Command::Resume(args) => run_cmd::resume(*args.into_inner()).await,
            Command::Chat(args) => run_cmd::chat(*args.into_inner()).await,
            Command::Rewind(args) => rewind_cmd::rewind(args.into_inner()).await,
            Command::Replay(args) => replay_cmd::run(args.into_inner()).await,
            Command::Demo(args) => demo::run(args.into_inner()).await,
            Command::Session(command) => session_cmd::run(command.into_inner()).await,
            Command::Models(args) => models_cmd::run(args.into_inner()),
            Command::Schema(args) => startup::print_schema(args.into_inner()),
            Command::Rpc(args) => serve_cmd::rpc(*args.into_inner()).await,
            Command::Serve(args) => serve_cmd::serve(*args.into_inner()).await,
            Command::Swebench(command) => swebench_cmd::run(command.into_inner()).await,
            Command::Doctor(args) => doctor::run(args.into_inner()).await,
            Command::Mcp(command) => mcp_cmd::run(command.into_inner()).await,
            Command::Completion { shell } => install::completion(shell),
            Command::Man(args) => install::man(args.into_inner()),
            Command::Version(args) => version::run(match args.json {
                true => args::DataFormat::Json,
                false => args.format.data(),
            }),
        }
    });
    // Dropping the runtime ends the runs' tasks (which removes their kept
    // tool outputs), but would also wait for a blocked read of standard
    // input for ever: wait a bounded time instead.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    // What is still queued goes out now, within the export timeout.
    if let Some(telemetry) = telemetry {
        flush_telemetry(telemetry);
    }
    match outcome {
        Ok(code) => code,
        Err(error) => error.report(),
    }
}

/// Flushes what telemetry still holds, within the export timeout — or less:
/// Ctrl-C or SIGTERM during the flush ends the wait at once (what is unsent
/// is dropped), since the runtime and its signal handlers are gone by now
/// and would otherwise leave those signals doing nothing.
fn flush_telemetry(telemetry: keel_telemetry::Telemetry) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(_) => return telemetry.shutdown(),
    };
    runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let flush = tokio::task::spawn_blocking(move || telemetry.shutdown());
        let terminate = async {
            match signal(SignalKind::terminate()) {
                Ok(mut terminate) => {
                    terminate.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = flush => {}
            _ = tokio::signal::ctrl_c() => {}
            () = terminate => {}
        }
    });
    runtime.shutdown_background();
}

/// Whether arguments that did not parse still ask for JSON
/// (`--output-format json` or `stream-json`, and no `-q`), so the usage
/// error is a JSON line on stdout rather than clap's text on stderr.
/// Arguments that are not UTF-8 are compared as they are (they are none of
/// these).
fn asks_for_json(args: &[OsString]) -> bool {
    let json = |value: &OsString| value == "json" || value == "stream-json";
    let quiet = args.iter().any(|arg| arg == "-q" || arg == "--quiet");
    let asked = args
        .iter()
        .any(|arg| arg == "--output-format=json" || arg == "--output-format=stream-json")
        || args
            .windows(2)
            .any(|pair| pair[0] == "--output-format" && json(&pair[1]));
    asked && !quiet
}

/// The subcommand's name, for the log.
fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Run(_) => "run",
        Command::Resume(_) => "resume",
        Command::Chat(_) => "chat",
        Command::Rewind(_) => "rewind",
        Command::Replay(_) => "replay",
        Command::Demo(_) => "demo",
        Command::Models(_) => "models",
        Command::Session(_) => "session",
        Command::Schema(_) => "schema",
        Command::Rpc(_) => "rpc",
        Command::Serve(_) => "serve",
        Command::Swebench(_) => "swebench",
        Command::Doctor(_) => "doctor",
        Command::Mcp(_) => "mcp",
        Command::Completion { .. } => "completion",
        Command::Man(_) => "man",
        Command::Version(_) => "version",
    }
}

/// The output format a command names explicitly, if any (`-q` is text).
fn output_format(command: &Command) -> Option<args::OutputFormat> {
    use crate::args::{OutputFormat, SessionCommand};
    let run_output = match command {
        Command::Run(args) => Some(&args.output),
        Command::Resume(args) => Some(&args.run.output),
        Command::Demo(args) => Some(&args.output),
        _ => None,
    };
    let format = match (run_output, command) {
        (Some(output), _) if output.quiet => return Some(OutputFormat::Text),
        (Some(output), _) => output.output_format,
        (None, Command::Models(args)) => args.format.output_format,
        (None, Command::Doctor(args)) => args.format.output_format,
        (None, Command::Rewind(args)) => args.format.output_format,
        (None, Command::Replay(args)) if args.json => OutputFormat::Json,
        (None, Command::Replay(args)) => args.format.output_format,
        (None, Command::Version(args)) if args.json => OutputFormat::Json,
        (None, Command::Version(args)) => args.format.output_format,
        (None, Command::Mcp(command)) => match &**command {
            args::McpCommand::List(args) if args.json => OutputFormat::Json,
            args::McpCommand::List(args) => args.format.output_format,
        },
        (None, Command::Session(command)) => match &**command {
            SessionCommand::List { format, .. }
            | SessionCommand::Show { format, .. }
            | SessionCommand::Tree { format, .. }
            | SessionCommand::Fork { format, .. }
            | SessionCommand::Salvage { format, .. }
            | SessionCommand::Stats { format, .. }
            | SessionCommand::Restore { format, .. } => format.output_format,
            SessionCommand::Compact(args) => args.format.output_format,
            SessionCommand::Prune(args) => args.format.output_format,
            SessionCommand::Export { .. } => return None,
        },
        // stdout carries only protocol messages (rpc), the address (serve)
        // or a batch's summary (swebench): startup errors are text on stderr.
        _ => return None,
    };
    match format {
        OutputFormat::Auto => None,
        format => Some(format),
    }
}

/// `-q` with `--output-format json` or `stream-json` asks for two things
/// at once: the usage error clap gives for conflicting arguments.
fn quiet_conflict(command: &Command) -> Option<clap::Error> {
    let (name, output) = match command {
        Command::Run(args) => ("run", &args.output),
        Command::Resume(args) => ("resume", &args.run.output),
        Command::Demo(args) => ("demo", &args.output),
        _ => return None,
    };
    let format = match output.output_format {
        args::OutputFormat::Json => "json",
        args::OutputFormat::StreamJson => "stream-json",
        _ => return None,
    };
    if !output.quiet {
        return None;
    }
    let mut root = args::full_command();
    root.build();
    let sub = root.find_subcommand_mut(name)?;
    Some(sub.error(
        clap::error::ErrorKind::ArgumentConflict,
        format!(
            "the argument '--quiet' cannot be used with '--output-format {format}' \
             (-q prints only the final message, as text)"
        ),
    ))
}

/// The export of the runs' traces and metrics, for a command that runs
/// agents and a user who configured one (`[telemetry]` or the standard
/// `OTEL_EXPORTER_OTLP_*` variables; keel-host resolves both). Started
/// before the runtime: the exporter batches on threads of its own.
///
/// A configuration file that does not load is left to the command, which
/// reports it as it always does; a telemetry setting that is wrong fails
/// here.
fn start_telemetry(command: &Command) -> Result<Option<keel_telemetry::Telemetry>, StartupError> {
    let Some(sources) = agent_sources(command) else {
        return Ok(None);
    };
    let Ok(settings) = keel_host::Settings::load(&sources) else {
        return Ok(None);
    };
    let telemetry =
        |error: &dyn std::fmt::Display| StartupError::new("telemetry", error.to_string());
    let Some(config) = settings
        .telemetry
        .export()
        .map_err(|error| telemetry(&error))?
    else {
        return Ok(None);
    };
    keel_telemetry::Telemetry::start(&config, env!("CARGO_PKG_VERSION"))
        .map(Some)
        .map_err(|error| telemetry(&error))
}

/// The configuration sources of a command that runs agents (`None` for
/// one that runs none). The project layer never matters here: it cannot
/// set `[telemetry]`.
fn agent_sources(command: &Command) -> Option<keel_host::Sources> {
    let settings = match command {
        Command::Run(args) | Command::Chat(args) => &args.settings,
        Command::Resume(args) => &args.run.settings,
        Command::Rpc(args) => &args.broker.settings,
        Command::Serve(args) => &args.broker.settings,
        Command::Swebench(command) => match &**command {
            swebench_cmd::SwebenchCommand::Run(args) => &args.settings,
            _ => return None,
        },
        Command::Session(command) => match &**command {
            args::SessionCommand::Compact(args) => &args.settings,
            _ => return None,
        },
        Command::Demo(_) => return Some(keel_host::Sources::default()),
        _ => return None,
    };
    Some(settings.sources())
}

/// Diagnostics, filtered by `KEEL_LOG`: to stderr (off unless `KEEL_LOG`
/// asks, coloured only on a terminal), or to `--log-file` (`info` unless
/// `KEEL_LOG` says otherwise, never coloured); and, with `telemetry`, the
/// runs' spans to its exporter whatever `KEEL_LOG` says.
fn init_tracing(
    log_file: Option<&std::path::Path>,
    telemetry: Option<&keel_telemetry::Telemetry>,
) -> Result<(), StartupError> {
    use std::io::IsTerminal;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let default = if log_file.is_some() { "info" } else { "off" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("KEEL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let (writer, ansi) = match log_file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|error| {
                    StartupError::new(
                        "log_file",
                        format!("cannot open the log file {}: {error}", path.display()),
                    )
                })?;
            (BoxMakeWriter::new(std::sync::Mutex::new(file)), false)
        }
        None => (
            BoxMakeWriter::new(std::io::stderr),
            std::io::stderr().is_terminal(),
        ),
    };
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(log)
        .with(telemetry.map(keel_telemetry::Telemetry::layer))
        .try_init();
    Ok(())
}
