//! `keel`: a thin command-line host over `AgentKernel`.
//!
//! Every subcommand parses its arguments, assembles a kernel, drives runs
//! through the public `AgentRun` seam and prints JSON Lines (or a human view
//! on a terminal). Exit codes: 0 only for a settled run, 1 for a failed or
//! cancelled one, 2 for a startup error, printed as one JSON line.

mod args;
mod demo;
mod demo_permissions;
mod demo_session;
mod doctor;
mod escape;
mod host;
mod models_cmd;
mod output;
mod run_cmd;
mod session_cmd;
mod signals;
mod startup;
mod stream_input;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::startup::StartupError;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return startup::usage_error(error),
    };
    init_tracing();
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
            Command::Run(args) => run_cmd::run(*args).await,
            Command::Resume(args) => run_cmd::resume(*args).await,
            Command::Demo(args) => demo::run(args).await,
            Command::Session(command) => session_cmd::run(command).await,
            Command::Models { settings } => models_cmd::run(settings),
            Command::Schema(args) => startup::print_schema(args),
            Command::Doctor { json } => doctor::run(json),
        }
    });
    match outcome {
        Ok(code) => code,
        Err(error) => error.report(),
    }
}

/// Diagnostics go to stderr, off unless `KEEL_LOG` asks for them.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KEEL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
