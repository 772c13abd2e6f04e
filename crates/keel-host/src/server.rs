//! The `[server]` table of the user's `config.toml`: what `keel serve`
//! listens on, its limits, and its tokens with their quotas.
//!
//! Only the user's file (and `-c server.…` overrides) may set it: the
//! project layer `.keel/config.toml` comes with a repository, and a
//! repository must not open a port or name a token file, so there the key
//! is dropped with a `project_key_ignored` warning like every other key a
//! project may not set ([`crate::project`]).
//!
//! This module only reads the table; the server (keel-server) reads the
//! token files it names and decides what the values mean. Paths may start
//! with `~/`. No token is ever held here: only the files that hold them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::HostError;
use crate::settings::{expand_home, invalid};

/// `[server]`: every field is optional; the flags of `keel serve` win.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerSettings {
    /// `ADDR:PORT` to listen on (`--listen`).
    pub listen: Option<String>,
    /// The file holding the default token (`--token-file`); its tenant is
    /// named `default`.
    pub token_file: Option<PathBuf>,
    /// Most runs active at once (`--max-runs`).
    pub max_runs: Option<usize>,
    /// Most starts waiting for a slot (`--max-queue`).
    pub max_queue: Option<usize>,
    /// Seconds running runs get to finish on SIGTERM/SIGINT before they
    /// are cancelled (`--drain-timeout`).
    pub drain_timeout: Option<u64>,
    /// Browser origins allowed to connect (`--allow-origin`, added to these).
    #[serde(default)]
    pub allow_origins: Vec<String>,
    /// The largest JSON-RPC message, in bytes, a client may send.
    pub max_message_bytes: Option<usize>,
    /// Most WebSocket clients one token (tenant) may have open at once, so
    /// that one tenant cannot take every connection from the others.
    pub max_connections_per_token: Option<usize>,
    /// Named tokens, each its own tenant with its own quotas.
    #[serde(default)]
    pub tokens: BTreeMap<String, TokenSettings>,
}

/// `[server.tokens.NAME]`: one named token and its tenant's quotas.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TokenSettings {
    /// The file holding the token (never the token itself).
    pub token_file: PathBuf,
    /// Most runs this token may have active and queued together.
    pub max_active_runs: Option<usize>,
    /// Most runs this token may start within a minute.
    pub starts_per_minute: Option<u32>,
    /// The widest mode its runs may have (default `auto`: every command
    /// sandboxed); `full` gives its holder the server user's authority.
    pub max_mode: Option<keel_protocol::PermissionMode>,
    /// Whether its clients' approvals may widen a run past the sandbox
    /// (outside the workspace, `.git`, the network); default false.
    #[serde(default)]
    pub widen: bool,
    /// The directories its runs' workspaces must lie beneath (`~/`
    /// expanded; default: any).
    #[serde(default)]
    pub workspaces: Vec<PathBuf>,
}

impl ServerSettings {
    /// Reads the `[server]` table (`~/` expanded in its paths).
    pub(crate) fn from_value(value: toml::Value, place: &str) -> Result<Self, HostError> {
        let place = format!("{place}, [server]");
        let mut settings: Self = value
            .try_into()
            .map_err(|error: toml::de::Error| invalid(&place, error.message()))?;
        settings.token_file = settings.token_file.map(|path| expand_home(&path));
        for token in settings.tokens.values_mut() {
            token.token_file = expand_home(&token.token_file);
            token.workspaces = token
                .workspaces
                .iter()
                .map(|dir| expand_home(dir))
                .collect();
        }
        Ok(settings)
    }
}
