//! Checking a provider's base URL before anything is sent to it.
//!
//! Why: a base URL that cannot work (`not a url`, `ftp://…`, `http://`) is
//! a mistake in the configuration, not a failure of the provider. It must
//! stop the host at startup with a typed error naming the problem, never
//! reach the retry loop as a transport error. [`check`] is that gate; the
//! configuration ([`crate::config::Config::resolve`]) and, with the `http`
//! feature, `Endpoint::try_new` call it.
//!
//! It needs no URL library, so the catalog builds without the HTTP stack:
//! it accepts `http` or `https` (any case), `://`, an optional `user@`, a
//! host (a name or address, or an IPv6 literal in brackets) with an optional
//! numeric port, then any path, query or fragment — with no whitespace or
//! control character anywhere. What passes here and still fails to parse
//! in the HTTP client is refused at once as `invalid_request`, not retried.

/// Why a base URL cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BaseUrlError {
    /// It is not a URL at all.
    #[error("it is not a URL ({reason}); expected e.g. `https://api.example.com/v1`")]
    NotAUrl {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Its scheme is not `http` or `https`.
    #[error("its scheme `{scheme}` is not http or https")]
    Scheme {
        /// The scheme it has.
        scheme: String,
    },
    /// It names no host.
    #[error("it names no host")]
    NoHost,
    /// Its port is not a number from 0 to 65535.
    #[error("its port `{port}` is not a number from 0 to 65535")]
    Port {
        /// The port as written.
        port: String,
    },
}

/// Whether `url` can serve as a provider's base URL.
pub fn check(url: &str) -> Result<(), BaseUrlError> {
    let not_a_url = |reason| Err(BaseUrlError::NotAUrl { reason });
    if url.is_empty() {
        return not_a_url("it is empty");
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return not_a_url("it contains whitespace or a control character");
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return not_a_url("it has no `scheme://`");
    };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return not_a_url("its scheme is malformed");
    }
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(BaseUrlError::Scheme {
            scheme: scheme.to_owned(),
        });
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (host, port) = split_port(host_port)?;
    if host.is_empty() {
        return Err(BaseUrlError::NoHost);
    }
    let host_ok = if let Some(literal) = host.strip_prefix('[') {
        literal.strip_suffix(']').is_some_and(|address| {
            !address.is_empty()
                && address
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.'))
        })
    } else {
        host.chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '.' | '_' | '%'))
    };
    if !host_ok {
        return not_a_url("its host is malformed");
    }
    if let Some(port) = port.filter(|port| !port.is_empty())
        && port.parse::<u16>().is_err()
    {
        return Err(BaseUrlError::Port {
            port: port.to_owned(),
        });
    }
    Ok(())
}

/// `host[:port]`, with IPv6 literals kept whole.
fn split_port(host_port: &str) -> Result<(&str, Option<&str>), BaseUrlError> {
    if host_port.starts_with('[') {
        return Ok(match host_port.find(']') {
            Some(end) => {
                let (host, rest) = host_port.split_at(end + 1);
                (host, rest.strip_prefix(':'))
            }
            None => (host_port, None),
        });
    }
    Ok(match host_port.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (host_port, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_urls_pass() {
        for url in [
            "https://api.deepseek.com",
            "https://api.openai.com/v1",
            "http://127.0.0.1:8080/v1",
            "HTTP://LOCALHOST:11434",
            "http://[::1]:8000/v1?x=1",
            "https://user@proxy.internal/api",
            "http://host.docker.internal:1234",
        ] {
            assert_eq!(check(url), Ok(()), "{url}");
        }
    }

    #[test]
    fn unusable_urls_are_refused_with_their_reason() {
        let not_a_url = |reason| BaseUrlError::NotAUrl { reason };
        let cases = [
            (
                "not a url",
                not_a_url("it contains whitespace or a control character"),
            ),
            ("", not_a_url("it is empty")),
            ("localhost:8080", not_a_url("it has no `scheme://`")),
            ("api.example.com/v1", not_a_url("it has no `scheme://`")),
            ("1http://x", not_a_url("its scheme is malformed")),
            ("http://exa$mple.com", not_a_url("its host is malformed")),
            ("http://[::1/v1", not_a_url("its host is malformed")),
            (
                "ftp://files.example.com",
                BaseUrlError::Scheme {
                    scheme: "ftp".into(),
                },
            ),
            ("http://", BaseUrlError::NoHost),
            ("https:///v1", BaseUrlError::NoHost),
            ("http://:8080", BaseUrlError::NoHost),
            (
                "http://localhost:99999",
                BaseUrlError::Port {
                    port: "99999".into(),
                },
            ),
            (
                "http://localhost:80a",
                BaseUrlError::Port { port: "80a".into() },
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(check(url), Err(expected), "{url:?}");
        }
    }
}
