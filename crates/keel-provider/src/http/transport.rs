//! Transport failures, classified by cause.
//!
//! Why: treating every transport error as retryable turned an unusable
//! base URL into four attempts, and a refused connection into minutes of
//! backoff. The cause decides how a failure is retried:
//! - the request could not be built (an unusable URL, a bad header):
//!   `invalid_request`, never retried;
//! - no connection within the connect timeout: `timeout` with
//!   `max_retries` 1, naming the timeout (`connect_timeout_sec`);
//! - another timeout: `timeout`, retried as the policy allows;
//! - connecting failed — refused, DNS, TLS, or another connect error:
//!   `stream_dropped` with `max_retries` 1, since one more try covers a
//!   blip and more only delay an error the user must fix;
//! - the connection broke once the request was under way: `stream_dropped`,
//!   retried as the policy allows.
//!
//! Each message names the cause and then the chain of underlying errors.
//! reqwest's own text names the URL but never a header, so no key shows.

use std::error::Error as _;
use std::time::Duration;

use keel_protocol::{ProviderError, ProviderErrorKind};

/// Retries a failure to connect deserves.
const CONNECT_RETRIES: u32 = 1;

/// The provider error for a request that failed before a response
/// (`connect_timeout` is the connect timeout in force, for its message).
pub(super) fn classify(error: &reqwest::Error, connect_timeout: Duration) -> ProviderError {
    let detail = chain(error);
    if error.is_builder() {
        return ProviderError::new(
            ProviderErrorKind::InvalidRequest,
            format!("the request could not be built: {detail}"),
        );
    }
    if error.is_connect() && error.is_timeout() {
        return ProviderError::new(
            ProviderErrorKind::Timeout,
            format!(
                "cannot connect to the provider (no connection within {}: connect_timeout_sec): \
                 {detail}",
                super::shown(connect_timeout)
            ),
        )
        .with_max_retries(CONNECT_RETRIES);
    }
    if error.is_timeout() {
        return ProviderError::new(
            ProviderErrorKind::Timeout,
            format!("the provider did not answer in time: {detail}"),
        );
    }
    if error.is_connect() {
        let cause = connect_cause(error);
        return ProviderError::new(
            ProviderErrorKind::StreamDropped,
            format!("cannot connect to the provider ({cause}): {detail}"),
        )
        .with_max_retries(CONNECT_RETRIES);
    }
    ProviderError::new(
        ProviderErrorKind::StreamDropped,
        format!("the connection to the provider broke: {detail}"),
    )
}

/// The provider error for a response body that broke while streaming.
pub(super) fn broken_stream(error: &reqwest::Error) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::StreamDropped,
        format!("the stream broke: {}", chain(error)),
    )
}

/// What kind of connect failure `error` is, for its message.
fn connect_cause(error: &reqwest::Error) -> &'static str {
    if error.is_dns() {
        return "DNS lookup failed";
    }
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return "connection refused",
                std::io::ErrorKind::HostUnreachable | std::io::ErrorKind::NetworkUnreachable => {
                    return "host unreachable";
                }
                _ => {}
            }
        }
        source = cause.source();
    }
    // rustls reports through the TLS connector, whose error types this
    // crate does not name; its messages do.
    let text = chain(error).to_ascii_lowercase();
    if ["tls", "certificate", "handshake", "corrupt message"]
        .iter()
        .any(|word| text.contains(word))
    {
        return "TLS failed";
    }
    "connect error"
}

/// `error` and its sources, joined by `: ` (each only once: wrappers often
/// repeat their cause's text).
fn chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}
