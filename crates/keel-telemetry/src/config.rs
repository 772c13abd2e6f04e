//! The export configuration: plain data a host resolves and the exporter
//! reads. Parsing here never quotes a header value back.

use std::time::Duration;

/// The OTLP/HTTP encoding (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Protocol {
    /// `http/protobuf`: binary protobuf bodies (the default).
    #[default]
    HttpProtobuf,
    /// `http/json`: the protobuf JSON mapping.
    HttpJson,
}

impl Protocol {
    /// Parses the standard name (`http/protobuf` or `http/json`).
    pub fn parse(name: &str) -> Result<Self, ConfigError> {
        match name.trim() {
            "http/protobuf" => Ok(Self::HttpProtobuf),
            "http/json" => Ok(Self::HttpJson),
            "grpc" => Err(ConfigError::Invalid(
                "protocol `grpc` is not supported: use `http/protobuf` or `http/json`".into(),
            )),
            other => Err(ConfigError::Invalid(format!(
                "unknown protocol `{other}`: use `http/protobuf` or `http/json`"
            ))),
        }
    }

    /// The standard name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HttpProtobuf => "http/protobuf",
            Self::HttpJson => "http/json",
        }
    }
}

/// A configuration that cannot be used; the message names the setting and
/// never a header's value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value is malformed.
    #[error("telemetry: {0}")]
    Invalid(String),
}

/// Where and how spans and metrics are exported.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportConfig {
    /// The collector's base URL (`http://127.0.0.1:4318`): traces go to
    /// `{endpoint}/v1/traces`, metrics to `{endpoint}/v1/metrics`.
    pub endpoint: String,
    /// The encoding.
    pub protocol: Protocol,
    /// Headers sent with every export (authentication); never logged.
    pub headers: Vec<(String, String)>,
    /// The most one export may take; also the most [`crate::Telemetry`]'s
    /// shutdown waits. Default 10 s (the OTLP default).
    pub timeout: Duration,
    /// How often metrics are exported (and spans at the latest). Default 5 s.
    pub interval: Duration,
}

impl std::fmt::Debug for ExportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("ExportConfig")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field("headers", &names)
            .field("timeout", &self.timeout)
            .field("interval", &self.interval)
            .finish()
    }
}

impl ExportConfig {
    /// An export to `endpoint` (an `http://` or `https://` URL; a trailing
    /// `/` is dropped) with the defaults.
    pub fn new(endpoint: &str) -> Result<Self, ConfigError> {
        let endpoint = endpoint.trim().trim_end_matches('/');
        let rest = endpoint
            .strip_prefix("http://")
            .or_else(|| endpoint.strip_prefix("https://"))
            .ok_or_else(|| {
                // The value is never quoted: a token pasted into the wrong
                // setting would be echoed.
                ConfigError::Invalid("the endpoint is not an http:// or https:// URL".into())
            })?;
        if rest.is_empty() || rest.contains(['?', '#', ' ']) || rest.contains('@') {
            return Err(ConfigError::Invalid(
                "the endpoint must be a plain URL, without credentials, query or fragment \
                 (put tokens in headers; the value is not repeated here)"
                    .into(),
            ));
        }
        Ok(Self {
            endpoint: endpoint.to_owned(),
            protocol: Protocol::default(),
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            interval: Duration::from_secs(5),
        })
    }

    /// Where traces go.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.endpoint)
    }

    /// Where metrics go.
    pub fn metrics_url(&self) -> String {
        format!("{}/v1/metrics", self.endpoint)
    }
}

/// Parses `OTEL_EXPORTER_OTLP_HEADERS`' format: `name=value` pairs separated
/// by commas, values percent-decoded. An error names the pair's position,
/// never its text.
pub fn parse_headers(text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut headers = Vec::new();
    for (index, pair) in text.split(',').enumerate() {
        if pair.trim().is_empty() {
            continue;
        }
        let bad =
            |what: &str| ConfigError::Invalid(format!("header {} of the list {what}", index + 1));
        let (name, value) = pair.split_once('=').ok_or_else(|| bad("has no `=`"))?;
        let name = name.trim();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b))
        {
            return Err(bad("has a name that is not an HTTP header name"));
        }
        let value = percent_decode(value.trim()).ok_or_else(|| bad("has a malformed value"))?;
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(bad("has a value with a line break"));
        }
        headers.push((name.to_ascii_lowercase(), value));
    }
    Ok(headers)
}

/// `%XX` escapes decoded; `None` on a malformed escape or non-UTF-8 result.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        if byte == b'%' {
            let hex = text.get(index + 1..index + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(byte);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_decode_and_refuse_without_quoting() {
        let headers = parse_headers("Authorization=Bearer%20s3cret, x-tenant = a").unwrap();
        assert_eq!(
            headers,
            vec![
                ("authorization".to_owned(), "Bearer s3cret".to_owned()),
                ("x-tenant".to_owned(), "a".to_owned())
            ]
        );
        for bad in ["novalue", "a=%zz", "bad name=x", "a=%0d%0a"] {
            let error = parse_headers(&format!("ok=1,{bad}"))
                .unwrap_err()
                .to_string();
            assert!(error.contains("header 2"), "{error}");
            assert!(!error.contains(bad), "{error} quotes {bad}");
        }
    }

    #[test]
    fn endpoints_are_plain_http_urls() {
        let config = ExportConfig::new("http://127.0.0.1:4318/").unwrap();
        assert_eq!(config.traces_url(), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(config.metrics_url(), "http://127.0.0.1:4318/v1/metrics");
        for bad in [
            "127.0.0.1:4318",
            "ftp://x",
            "http://",
            "s3cret-pasted-token",
            "http://user:s3cret@host",
            "http://h/?token=s3cret",
        ] {
            let error = ExportConfig::new(bad).expect_err(bad).to_string();
            // What may be a credential is never repeated.
            assert!(!error.contains("s3cret"), "{bad}: {error}");
        }
        assert_eq!(Protocol::parse("http/json").unwrap(), Protocol::HttpJson);
        assert!(Protocol::parse("grpc").is_err());
    }

    #[test]
    fn debug_never_shows_header_values() {
        let mut config = ExportConfig::new("http://h").unwrap();
        config.headers = vec![("authorization".into(), "Bearer s3cret".into())];
        let shown = format!("{config:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
