//! `keel completion SHELL` and `keel man`: what an installed `keel` needs
//! beside the binary, generated from the same argument definitions, so
//! they never drift from what `keel` accepts.

use std::process::ExitCode;

use clap::CommandFactory;

use crate::args::{Cli, ShellArg};
use crate::startup::StartupError;

/// Prints the completion script for `shell`.
pub fn completion(shell: ShellArg) -> Result<ExitCode, StartupError> {
    let shell = match shell {
        ShellArg::Bash => clap_complete::Shell::Bash,
        ShellArg::Zsh => clap_complete::Shell::Zsh,
        ShellArg::Fish => clap_complete::Shell::Fish,
    };
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "keel", &mut out);
    write_stdout(&out)
}

/// Prints the man page (roff): `keel man | man -l -`.
pub fn man() -> Result<ExitCode, StartupError> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|error| StartupError::new("man", error.to_string()))?;
    write_stdout(&out)
}

fn write_stdout(bytes: &[u8]) -> Result<ExitCode, StartupError> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(StartupError::new("output", format!("stdout: {error}")))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}
