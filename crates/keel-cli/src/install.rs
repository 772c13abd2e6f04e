//! `keel completion SHELL` and `keel man`: what an installed `keel` needs
//! beside the binary, generated from the same argument definitions, so
//! they never drift from what `keel` accepts.

use std::process::ExitCode;

use crate::args::{ManArgs, ShellArg, full_command};
use crate::startup::StartupError;

/// Prints the completion script for `shell`.
pub fn completion(shell: ShellArg) -> Result<ExitCode, StartupError> {
    let shell = match shell {
        ShellArg::Bash => clap_complete::Shell::Bash,
        ShellArg::Zsh => clap_complete::Shell::Zsh,
        ShellArg::Fish => clap_complete::Shell::Fish,
    };
    let mut command = full_command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "keel", &mut out);
    write_stdout(&out)
}

/// The manual a page belongs to (the centre of its header).
const MANUAL: &str = "Keel Manual";

/// `keel man`: one page printed (keel's own, or the command `args.command`
/// names), or with `--dir` every page written into a directory.
pub fn man(args: ManArgs) -> Result<ExitCode, StartupError> {
    let root = man_root();
    if let Some(dir) = args.dir {
        let written = write_pages(&root, &dir).map_err(|error| {
            StartupError::new(
                "man",
                format!("cannot write the man pages to {}: {error}", dir.display()),
            )
        })?;
        let list: String = written.iter().map(|name| format!("{name}\n")).collect();
        return write_stdout(list.as_bytes());
    }
    let mut command = &root;
    for name in &args.command {
        command = command
            .get_subcommands()
            .find(|sub| sub.get_name() == name && !sub.is_hide_set())
            .ok_or_else(|| {
                let known: Vec<&str> = command
                    .get_subcommands()
                    .map(clap::Command::get_name)
                    .collect();
                StartupError::new(
                    "usage",
                    format!(
                        "no man page for `{}`: the commands are {}",
                        args.command.join(" "),
                        known.join(", ")
                    ),
                )
            })?;
    }
    let mut out = Vec::new();
    page(command.clone())
        .render(&mut out)
        .map_err(|error| StartupError::new("man", error.to_string()))?;
    write_stdout(&out)
}

/// keel's command tree, built (so every command knows its page's name,
/// `keel-session-list`), with a NAME line for a reader of `man keel`.
fn man_root() -> clap::Command {
    let mut root = full_command()
        .about("run an AI coding agent on your code, from a terminal or another program")
        .disable_help_subcommand(true);
    root.build();
    root
}

/// The page of one built command, dated with the build.
fn page(command: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(command)
        .date(env!("KEEL_BUILD_DATE"))
        .source(format!("keel {}", env!("CARGO_PKG_VERSION")))
        .manual(MANUAL)
}

/// Writes the page of `command` and of every command below it into `dir`
/// (created if missing); returns the file names written, parents first.
fn write_pages(command: &clap::Command, dir: &std::path::Path) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut pending = vec![command.clone()];
    while let Some(command) = pending.pop() {
        let man = page(command.clone());
        let path = man.generate_to(dir)?;
        written.push(
            path.file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        let mut children: Vec<clap::Command> = command
            .get_subcommands()
            .filter(|sub| !sub.is_hide_set())
            .cloned()
            .collect();
        children.reverse();
        pending.extend(children);
    }
    Ok(written)
}

/// Writes `bytes` to stdout; a reader that went away (`| head`) is no error.
pub fn write_stdout(bytes: &[u8]) -> Result<ExitCode, StartupError> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(StartupError::new("output", format!("stdout: {error}")))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}
