//! Startup errors: exit code 2, and text on stderr — the whole message, so
//! clap's hints (possible values, a similar argument, usage) and the TOML
//! parser's snippet survive — unless the command asked for JSON
//! (`--output-format json` or `stream-json`): then one
//! `{"type": "startup_error", "code": …, "message": …}` line on stdout.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::OnceLock;

use keel_protocol::{HostLine, StartupErrorLine};

use crate::output::say;

use crate::args::SchemaArgs;

/// A problem found before any run started.
#[derive(Debug)]
pub struct StartupError {
    code: String,
    message: String,
}

/// Each library error that carries a stable code becomes a startup error
/// with that code and its message: one conversion per error type, used by
/// `?` everywhere.
macro_rules! from_coded_errors {
    ($($error:ty),* $(,)?) => {
        $(
            impl From<$error> for StartupError {
                fn from(error: $error) -> Self {
                    Self::new(error.code(), error.to_string())
                }
            }
        )*
    };
}

from_coded_errors!(
    keel_host::HostError,
    keel_session::SessionError,
    keel_kernel::KernelError,
    keel_provider::config::ConfigError,
    keel_server::ServerError,
    keel_swebench::SwebenchError,
);

impl StartupError {
    /// An error with a stable code and a clear message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }

    /// The stable code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prints the error and returns exit code 2.
    pub fn report(self) -> ExitCode {
        if plain_errors() {
            let message = self.message.trim_end();
            let message = message.strip_prefix("error: ").unwrap_or(message);
            let mut lines = message.lines();
            let first = lines.next().unwrap_or_default();
            let mut text = format!("keel: {} [{}]\n", crate::escape::visible(first), self.code);
            for line in lines {
                text.push_str(&crate::escape::visible(line));
                text.push('\n');
            }
            let mut stderr = std::io::stderr().lock();
            let _ = std::io::Write::write_all(&mut stderr, text.as_bytes());
        } else {
            let line = HostLine::StartupError(StartupErrorLine::new(self.code, self.message));
            match serde_json::to_string(&line) {
                Ok(line) => say(line),
                Err(error) => eprintln!("keel: {error}"),
            }
        }
        ExitCode::from(2)
    }
}

/// Whether errors are text on stderr: unless `--output-format` asked for
/// JSON.
static PLAIN_ERRORS: OnceLock<bool> = OnceLock::new();

/// Records, once, whether errors are text (the default) or a JSON line for
/// a program (`--output-format json` or `stream-json`).
pub fn set_plain_errors(plain: bool) {
    let _ = PLAIN_ERRORS.set(plain);
}

fn plain_errors() -> bool {
    *PLAIN_ERRORS.get_or_init(|| true)
}

/// Reports a command-line parse error; `--help` and `--version` print normally.
pub fn usage_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    if plain_errors() {
        // clap's own text: the error, its hints (possible values, a
        // similar argument) and the usage.
        let _ = error.print();
        return ExitCode::from(2);
    }
    let message = error.render().to_string();
    StartupError::new("usage", message.trim()).report()
}

/// The startup error for arguments clap refused as not UTF-8, naming the
/// argument: its position, the option it is the value of, and its bytes
/// escaped (`\xFF`). Arguments taken as paths may hold any bytes; the one
/// named is the first that `refuses` still refuses when every other
/// argument that is not UTF-8 is made valid (so a non-UTF-8 path before it
/// is never blamed).
pub fn argument_not_utf8(
    args: &[OsString],
    refuses: impl Fn(Vec<OsString>) -> bool,
) -> StartupError {
    let invalid: Vec<usize> = args
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, arg)| arg.to_str().is_none())
        .map(|(index, _)| index)
        .collect();
    let lossy = |arg: &OsString| OsString::from(arg.to_string_lossy().into_owned());
    let culprit = invalid
        .iter()
        .copied()
        .find(|&keep| {
            let trial = args
                .iter()
                .enumerate()
                .map(|(index, arg)| {
                    if index == keep || !invalid.contains(&index) {
                        arg.clone()
                    } else {
                        lossy(arg)
                    }
                })
                .collect();
            refuses(trial)
        })
        .or_else(|| invalid.first().copied());
    let Some(index) = culprit else {
        return StartupError::new(
            "argument_not_utf8",
            "an argument is not valid UTF-8; keel takes prompts, names and ids as UTF-8 text",
        );
    };
    let shown = args
        .get(index)
        .map(|arg| format!("{arg:?}"))
        .unwrap_or_default();
    let option = args
        .get(index - 1)
        .and_then(|previous| previous.to_str())
        .filter(|previous| previous.starts_with('-') && previous.len() > 1)
        .map(|previous| format!(" (the value of {previous})"))
        .unwrap_or_default();
    StartupError::new(
        "argument_not_utf8",
        format!(
            "argument {index}{option} is not valid UTF-8: {shown}; keel takes prompts, names \
             and ids as UTF-8 text (a prompt can also come from a UTF-8 file with @FILE or \
             from standard input)"
        ),
    )
}

/// `keel schema [NAME]`.
pub fn print_schema(args: SchemaArgs) -> Result<ExitCode, StartupError> {
    let schemas = keel_protocol::schema::all();
    let value = match &args.name {
        None => serde_json::Value::Object(
            schemas
                .into_iter()
                .map(|(name, schema)| (name.to_owned(), schema.to_value()))
                .collect(),
        ),
        Some(wanted) => schemas
            .into_iter()
            .find(|(name, _)| name == wanted)
            .map(|(_, schema)| schema.to_value())
            .ok_or_else(|| {
                let names: Vec<_> = keel_protocol::schema::all()
                    .into_iter()
                    .map(|(name, _)| name)
                    .collect();
                StartupError::new(
                    "unknown_schema",
                    format!("no schema named `{wanted}`; known: {}", names.join(", ")),
                )
            })?,
    };
    let text = serde_json::to_string_pretty(&value)
        .map_err(|error| StartupError::new("schema", error.to_string()))?;
    say(text);
    Ok(ExitCode::SUCCESS)
}
