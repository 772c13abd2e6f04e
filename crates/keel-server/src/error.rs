//! Why a transport could not start or went on no further.

use std::path::PathBuf;

/// A problem starting `keel rpc` or `keel serve`. Never quotes a token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// `--listen` is not `ADDR:PORT`.
    #[error("cannot listen on `{given}`: give ADDR:PORT, e.g. 127.0.0.1:7878")]
    Listen {
        /// What was given.
        given: String,
    },
    /// A non-loopback address without a token.
    #[error(
        "refusing to listen on {address} without a token: anyone who can reach it could run \
         commands here; give --token-file FILE (or KEEL_SERVER_TOKEN, or [server] token_file), \
         or listen on loopback (127.0.0.1)"
    )]
    TokenRequired {
        /// The address asked for.
        address: std::net::SocketAddr,
    },
    /// A token file could not be read.
    #[error("cannot read the token file {}: {source}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A token that cannot be used (empty, too short, not text, the same
    /// as another one); `what` says which token, never its value.
    #[error("unusable token ({what}): {why}")]
    BadToken {
        /// Which token (its file, or its name).
        what: String,
        /// What is wrong with it.
        why: String,
    },
    /// A setting with a value that cannot work.
    #[error("{0}")]
    Setting(String),
    /// Binding or accepting failed.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl ServerError {
    /// A stable snake_case code for startup error lines.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Listen { .. } => "listen_address",
            Self::TokenRequired { .. } => "token_required",
            Self::TokenFile { .. } => "token_file",
            Self::BadToken { .. } => "bad_token",
            Self::Setting(_) => "server_setting",
            Self::Bind { .. } => "bind",
        }
    }
}
