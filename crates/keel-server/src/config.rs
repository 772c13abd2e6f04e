//! `keel serve`'s settings: the user's `[server]` table
//! ([`keel_host::server::ServerSettings`]) with the flags over it.
//!
//! Precedence: a flag, else `KEEL_SERVER_TOKEN` (for the token only, read
//! by the host and passed in), else `[server]`, else the default. The
//! check that a non-loopback address has a token happens here, before
//! anything is bound.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use keel_host::server::ServerSettings;

use crate::ServerError;
use crate::auth::{DEFAULT_TOKEN_NAME, Tokens};

/// Where `keel serve` listens when nothing says otherwise.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 7878);

/// How long runs may finish after SIGTERM/SIGINT by default.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The flags of `keel serve` (and the token from the environment).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ServeFlags {
    /// `--listen ADDR:PORT`.
    pub listen: Option<String>,
    /// `--token-file FILE`.
    pub token_file: Option<PathBuf>,
    /// The value of `KEEL_SERVER_TOKEN`, if set (the host reads it).
    pub token_env: Option<String>,
    /// `--max-runs N`.
    pub max_runs: Option<usize>,
    /// `--max-queue N`.
    pub max_queue: Option<usize>,
    /// `--drain-timeout SECS`.
    pub drain_timeout: Option<u64>,
    /// `--allow-origin ORIGIN`, repeatable.
    pub allow_origins: Vec<String>,
}

/// What the server itself enforces.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeConfig {
    /// The address to listen on.
    pub listen: SocketAddr,
    /// The tokens accepted; empty only on loopback.
    pub tokens: Tokens,
    /// Browser origins allowed (exact `scheme://host[:port]`).
    pub allow_origins: Vec<String>,
    /// How long runs may finish on shutdown before they are cancelled.
    pub drain_timeout: Duration,
    /// The largest WebSocket message read.
    pub max_message_bytes: usize,
    /// The largest request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
    /// Requests one connection may have in flight.
    pub max_in_flight: usize,
    /// Connections open at once; past it, accepting waits.
    pub max_connections: usize,
    /// WebSocket clients one tenant may have open at once; past it, an
    /// upgrade gets 429.
    pub max_connections_per_tenant: usize,
}

impl ServeConfig {
    /// A loopback server on `listen` with no token and the default limits.
    pub fn loopback(listen: SocketAddr) -> Self {
        Self {
            listen,
            tokens: Tokens::new(),
            allow_origins: Vec::new(),
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            max_message_bytes: crate::DEFAULT_MAX_MESSAGE_BYTES,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_in_flight: crate::MAX_IN_FLIGHT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_tenant: DEFAULT_MAX_CONNECTIONS_PER_TENANT,
        }
    }

    /// Refuses a non-loopback address without a token.
    pub fn check(&self) -> Result<(), ServerError> {
        if self.tokens.is_empty() && !self.listen.ip().is_loopback() {
            return Err(ServerError::TokenRequired {
                address: self.listen,
            });
        }
        Ok(())
    }
}

/// Connections open at once by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// WebSocket clients one tenant may have open at once by default: a
/// quarter of [`DEFAULT_MAX_CONNECTIONS`], so one tenant cannot hold them all.
pub const DEFAULT_MAX_CONNECTIONS_PER_TENANT: usize = DEFAULT_MAX_CONNECTIONS / 4;

/// The largest request head by default (hyper's smallest buffer is 8 KiB).
pub const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;

/// The quotas of one named token's tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TenantQuota {
    /// Most runs active and queued together.
    pub max_active_runs: Option<usize>,
    /// Most starts within a minute.
    pub starts_per_minute: Option<u32>,
    /// The widest mode its runs may have (`None`: `auto`).
    pub max_mode: Option<keel_protocol::PermissionMode>,
    /// Whether its approvals may widen a run past the sandbox.
    pub widen: bool,
    /// The directories its runs' workspaces must lie beneath (empty: any).
    pub workspaces: Vec<std::path::PathBuf>,
}

/// Everything `keel serve` needs: the server's own settings, and the
/// broker's limits and per-tenant quotas.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServePlan {
    /// What the server enforces.
    pub serve: ServeConfig,
    /// `max_runs` for the broker, if set.
    pub max_runs: Option<usize>,
    /// `max_queue` for the broker, if set.
    pub max_queue: Option<usize>,
    /// Quotas by tenant (a token's name).
    pub quotas: BTreeMap<String, TenantQuota>,
}

impl ServePlan {
    /// `settings` with `flags` over them; reads the token files. Refuses a
    /// non-loopback address without a token.
    pub fn resolve(settings: &ServerSettings, flags: ServeFlags) -> Result<Self, ServerError> {
        let listen = match flags.listen.as_deref().or(settings.listen.as_deref()) {
            Some(given) => parse_listen(given)?,
            None => DEFAULT_LISTEN,
        };
        let mut tokens = Tokens::new();
        if let Some(path) = flags.token_file.as_ref() {
            tokens.add_file(DEFAULT_TOKEN_NAME, path)?;
        } else if let Some(token) = flags.token_env.as_deref() {
            tokens
                .add(DEFAULT_TOKEN_NAME, token.trim())
                .map_err(|_| ServerError::BadToken {
                    what: "KEEL_SERVER_TOKEN".into(),
                    why: format!(
                        "a token is at least {} bytes of text without whitespace",
                        crate::auth::MIN_TOKEN_BYTES
                    ),
                })?;
        } else if let Some(path) = settings.token_file.as_ref() {
            tokens.add_file(DEFAULT_TOKEN_NAME, path)?;
        }
        let mut quotas = BTreeMap::new();
        for (name, token) in &settings.tokens {
            if name == DEFAULT_TOKEN_NAME {
                return Err(ServerError::Setting(format!(
                    "[server.tokens.{DEFAULT_TOKEN_NAME}]: the name `{DEFAULT_TOKEN_NAME}` is the \
                     unnamed token's (--token-file, [server] token_file); choose another"
                )));
            }
            tokens.add_file(name, &token.token_file)?;
            quotas.insert(
                name.clone(),
                TenantQuota {
                    max_active_runs: token.max_active_runs,
                    starts_per_minute: token.starts_per_minute,
                    max_mode: token.max_mode,
                    widen: token.widen,
                    workspaces: token.workspaces.clone(),
                },
            );
        }
        let mut allow_origins = settings.allow_origins.clone();
        allow_origins.extend(flags.allow_origins);
        for origin in &allow_origins {
            check_origin(origin)?;
        }
        let max_message_bytes = settings
            .max_message_bytes
            .unwrap_or(crate::DEFAULT_MAX_MESSAGE_BYTES);
        if max_message_bytes < 1024 {
            return Err(ServerError::Setting(
                "[server] max_message_bytes must be at least 1024".into(),
            ));
        }
        let max_connections_per_tenant = settings
            .max_connections_per_token
            .unwrap_or(DEFAULT_MAX_CONNECTIONS_PER_TENANT);
        if max_connections_per_tenant == 0 {
            return Err(ServerError::Setting(
                "[server] max_connections_per_token must be at least 1".into(),
            ));
        }
        let serve = ServeConfig {
            tokens,
            allow_origins,
            max_connections_per_tenant,
            drain_timeout: flags
                .drain_timeout
                .or(settings.drain_timeout)
                .map_or(DEFAULT_DRAIN_TIMEOUT, Duration::from_secs),
            max_message_bytes,
            ..ServeConfig::loopback(listen)
        };
        serve.check()?;
        Ok(Self {
            serve,
            max_runs: flags.max_runs.or(settings.max_runs),
            max_queue: flags.max_queue.or(settings.max_queue),
            quotas,
        })
    }
}

/// `ADDR:PORT` (an IP address, or `localhost`).
pub fn parse_listen(given: &str) -> Result<SocketAddr, ServerError> {
    if let Ok(address) = given.parse::<SocketAddr>() {
        return Ok(address);
    }
    let port = given
        .strip_prefix("localhost:")
        .and_then(|port| port.parse::<u16>().ok());
    match port {
        Some(port) => Ok(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)),
        None => Err(ServerError::Listen {
            given: given.to_owned(),
        }),
    }
}

/// An origin is `scheme://host[:port]`, as browsers send it.
fn check_origin(origin: &str) -> Result<(), ServerError> {
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains('/') => Ok(()),
        _ => Err(ServerError::Setting(format!(
            "allowed origin `{origin}` is not scheme://host[:port] (e.g. https://app.example.com)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_public_address_needs_a_token() {
        let settings = ServerSettings::default();
        let flags = |listen: &str| ServeFlags {
            listen: Some(listen.into()),
            ..ServeFlags::default()
        };
        let refused = ServePlan::resolve(&settings, flags("0.0.0.0:7878")).unwrap_err();
        assert_eq!(refused.code(), "token_required");
        assert!(ServePlan::resolve(&settings, flags("127.0.0.1:0")).is_ok());
        assert!(ServePlan::resolve(&settings, flags("[::1]:0")).is_ok());
        assert!(ServePlan::resolve(&settings, flags("localhost:9")).is_ok());
        let with_token = ServeFlags {
            token_env: Some("0123456789abcdef0123".into()),
            ..flags("0.0.0.0:7878")
        };
        let plan = ServePlan::resolve(&settings, with_token).unwrap();
        assert_eq!(
            plan.serve.tokens.check(b"0123456789abcdef0123"),
            Some("default")
        );
        assert_eq!(
            ServePlan::resolve(&settings, flags("nowhere"))
                .unwrap_err()
                .code(),
            "listen_address"
        );
    }
}
