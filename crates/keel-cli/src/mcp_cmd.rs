//! `keel mcp list`: the MCP servers of the user's configuration, each
//! started once (in parallel, within its startup timeout), with its state
//! and tools, then stopped again.
//!
//! The servers come from the `[mcp_servers.NAME]` tables of config.toml
//! (or `--config`, with `--profile` and `-c`); the project layer cannot add
//! any. Text lists a server per line and its tools below it; `--json` (or
//! `--output-format json`) prints one document, `stream-json` one line per
//! server. The exit code is 1 when a `required` server failed to start.

use std::process::ExitCode;

use keel_host::Settings;
use keel_host::mcp::{McpServerListing, McpServerState};
use serde_json::json;

use crate::args::{DataFormat, McpCommand, McpListArgs};
use crate::output::{print_json, say};
use crate::startup::StartupError;

pub async fn run(command: McpCommand) -> Result<ExitCode, StartupError> {
    match command {
        McpCommand::List(args) => list(args).await,
    }
}

async fn list(args: McpListArgs) -> Result<ExitCode, StartupError> {
    let format = if args.json {
        DataFormat::Json
    } else {
        args.format.data()
    };
    let settings = Settings::load(&args.settings.sources())?;
    let listings = settings.mcp_servers.list().await;
    match format {
        DataFormat::Text if listings.is_empty() => {
            say("no MCP servers configured (add [mcp_servers.NAME] tables to config.toml)");
        }
        DataFormat::Text => listings.iter().for_each(show),
        DataFormat::Json => print_json(&json!({ "servers": listings })),
        DataFormat::StreamJson => listings.iter().for_each(print_json),
    }
    let required_failed = listings
        .iter()
        .any(|listing| listing.required && matches!(listing.state, McpServerState::Failed { .. }));
    Ok(if required_failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One server as text: its line, then a line per tool.
fn show(listing: &McpServerListing) {
    let state = match &listing.state {
        McpServerState::Ready => "ready".to_owned(),
        McpServerState::Failed { reason } => format!("failed: {reason}"),
        McpServerState::Disabled => "disabled".to_owned(),
        McpServerState::Starting => "starting".to_owned(),
        McpServerState::Exited => "exited".to_owned(),
        _ => "unknown".to_owned(),
    };
    let mut line = format!("{}  {state}", listing.name);
    if let Some(info) = &listing.server_info {
        line.push_str(&format!("  ({} {})", info.name, info.version));
    }
    if listing.required {
        line.push_str("  required");
    }
    if matches!(listing.state, McpServerState::Ready) {
        line.push_str(&format!("  {} tools", listing.tools.len()));
    }
    say(line);
    for tool in &listing.tools {
        let mut flags = Vec::new();
        if tool.read_only {
            flags.push("read-only");
        }
        if tool.auto_approve {
            flags.push("auto-approve");
        }
        let flags = if flags.is_empty() {
            String::new()
        } else {
            format!(" [{}]", flags.join(", "))
        };
        let description = tool.description.lines().next().unwrap_or_default();
        say(format!("  {}{flags}  {description}", tool.name));
    }
}
