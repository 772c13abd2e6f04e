//! Startup errors: one JSON line on stdout, exit code 2.

use std::process::ExitCode;

use serde_json::json;

use crate::output::say;

use crate::args::SchemaArgs;

/// A problem found before any run started.
#[derive(Debug)]
pub struct StartupError {
    code: String,
    message: String,
}

impl From<keel_host::HostError> for StartupError {
    fn from(error: keel_host::HostError) -> Self {
        Self::new(error.code(), error.to_string())
    }
}

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

    /// Prints the error line and returns exit code 2.
    pub fn report(self) -> ExitCode {
        let line = json!({"startup_error": {"code": self.code, "message": self.message}});
        say(line);
        ExitCode::from(2)
    }
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
    let message = error.render().to_string();
    StartupError::new("usage", message.trim().to_owned()).report()
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
