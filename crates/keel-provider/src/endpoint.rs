//! Where and how an HTTP adapter reaches its API: base URL, key, timeouts.
//!
//! The API key lives only here: it is sent in a request header and nowhere
//! else. `Debug` prints it redacted, so neither logs nor error messages can
//! show it; it never enters events, sessions or child environments.
//!
//! A base URL that cannot work is refused by [`Endpoint::try_new`] with a
//! typed [`BaseUrlError`]. [`Endpoint::new`] does not check it: requests to
//! an unusable URL then fail at once with a non-retryable `invalid_request`
//! error, never a run of retries.

use std::time::Duration;

use crate::base_url::{self, BaseUrlError};
use crate::http::HttpTimeouts;

/// One configured API endpoint.
#[derive(Clone)]
pub struct Endpoint {
    /// The provider's name as hosts see it (`deepseek`, `anthropic`, …).
    pub name: String,
    /// The base URL, e.g. `https://api.deepseek.com` (no trailing slash).
    pub base_url: String,
    api_key: Option<String>,
    /// Time limits for each request.
    pub timeouts: HttpTimeouts,
    client: reqwest::Client,
    /// Whether `client` came from [`Endpoint::with_client`] (then its own
    /// connect timeout stays).
    custom_client: bool,
}

impl Endpoint {
    /// An endpoint whose base URL was checked ([`base_url::check`]); the
    /// key may be absent for local servers.
    pub fn try_new(
        name: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<String>,
    ) -> Result<Self, BaseUrlError> {
        let base_url = base_url.into();
        base_url::check(&base_url)?;
        Ok(Self::new(name, base_url, api_key))
    }

    /// An endpoint, its base URL unchecked (see [`Endpoint::try_new`]); the
    /// key may be absent for local servers.
    pub fn new(
        name: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<String>,
    ) -> Self {
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        Self {
            name: name.into(),
            base_url,
            api_key: api_key.filter(|key| !key.is_empty()),
            timeouts: HttpTimeouts::default(),
            client: client_for(HttpTimeouts::default()),
            custom_client: false,
        }
    }

    /// The same endpoint with other timeouts (the connect timeout applies
    /// unless a client was given with [`Endpoint::with_client`]).
    pub fn with_timeouts(mut self, timeouts: HttpTimeouts) -> Self {
        if !self.custom_client && timeouts.connect != self.timeouts.connect {
            self.client = client_for(timeouts);
        }
        self.timeouts = timeouts;
        self
    }

    /// The same endpoint sending through `client` (a proxy, other root
    /// certificates, or a test's DNS resolver); the client's own connect
    /// timeout applies.
    pub fn with_client(mut self, client: reqwest::Client) -> Self {
        self.client = client;
        self.custom_client = true;
        self
    }

    /// The key, for the adapter's auth header.
    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    /// A POST to `base_url + path`, naming Keel as its [`USER_AGENT`].
    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.base_url))
            .header(reqwest::header::USER_AGENT, USER_AGENT)
    }
}

/// What every request says it comes from: `keel/VERSION`.
pub const USER_AGENT: &str = concat!("keel/", env!("CARGO_PKG_VERSION"));

/// Whether the server at `base_url` answers: one `GET` of it, naming Keel
/// as its [`USER_AGENT`] and sending no key, within `timeout`. Any HTTP
/// status is an answer (the server is there); the status is returned.
/// `Err` says why nothing answered (refused, unresolved, timed out, TLS).
pub async fn answers(base_url: &str, timeout: Duration) -> Result<u16, String> {
    let client = reqwest::Client::builder()
        .connect_timeout(timeout)
        .timeout(timeout)
        .build()
        .map_err(|error| error.to_string())?;
    let response = client
        .get(base_url)
        .header(reqwest::header::USER_AGENT, USER_AGENT)
        .send()
        .await
        .map_err(|error| {
            // reqwest's top-level message is generic ("error sending
            // request"); the cause says what happened.
            let mut text = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                text = format!("{text}: {cause}");
                source = cause.source();
            }
            text
        })?;
    Ok(response.status().as_u16())
}

/// A client that gives up connecting after `timeouts.connect`.
fn client_for(timeouts: HttpTimeouts) -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .build()
        // Building fails only where the TLS backend or the system resolver
        // configuration cannot load: the conditions under which the plain
        // `Client::new` (which endpoints always used) panics as well.
        .unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot build the HTTP client; using the default one");
            reqwest::Client::new()
        })
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeouts", &self.timeouts)
            .finish()
    }
}
