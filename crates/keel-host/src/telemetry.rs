//! Where a host exports its runs' traces and metrics: the user's
//! `[telemetry]` table and the standard OpenTelemetry variables, resolved
//! into a [`keel_telemetry::ExportConfig`] (or none: nothing is exported
//! unless configured).
//!
//! The sources, lowest first: the `[telemetry]` table of the user's
//! `config.toml` (and `-c telemetry.…` overrides), then the environment —
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`
//! (`http/protobuf`, the default, or `http/json`),
//! `OTEL_EXPORTER_OTLP_HEADERS` (added to those of the variable the table's
//! `headers_env` names), `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds);
//! `OTEL_SDK_DISABLED=true` turns export off. Content capture (prompts,
//! outputs, tool arguments and results on the spans) is on only when the
//! table's `capture_content` or
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` says `true`.
//!
//! Invariants: the project layer `.keel/config.toml` can set none of this
//! (a repository must not send a user's prompts anywhere: the key is dropped
//! with a `project_key_ignored` warning, [`crate::project`]); header values
//! are read from the environment only, never from a file, and never appear
//! in an error.

use std::time::Duration;

use keel_telemetry::{ExportConfig, Protocol, parse_headers};
use serde::Deserialize;

use crate::HostError;
use crate::settings::invalid;

/// `[telemetry]`: every field is optional; the environment wins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TelemetrySettings {
    /// The collector's base URL (`http://127.0.0.1:4318`).
    pub endpoint: Option<String>,
    /// `http/protobuf` (default) or `http/json`.
    pub protocol: Option<String>,
    /// The name of an environment variable holding headers in
    /// `OTEL_EXPORTER_OTLP_HEADERS`' format (`authorization=Bearer%20…`).
    pub headers_env: Option<String>,
    /// Whether spans carry prompts, outputs, tool arguments and results.
    pub capture_content: Option<bool>,
    /// The most one export may take, in milliseconds (default 10000).
    pub timeout_ms: Option<u64>,
}

/// The longest export timeout: it also bounds how long a process waits at
/// exit for a collector that does not answer.
const MAX_TIMEOUT_MS: u64 = 60_000;

impl TelemetrySettings {
    /// Reads the `[telemetry]` table.
    pub(crate) fn from_value(value: toml::Value, place: &str) -> Result<Self, HostError> {
        let place = format!("{place}, [telemetry]");
        value
            .try_into()
            .map_err(|error: toml::de::Error| invalid(&place, error.message()))
    }

    /// The export these settings and the process environment ask for.
    pub fn export(&self) -> Result<Option<ExportConfig>, HostError> {
        self.export_with(&|name| std::env::var(name).ok())
    }

    /// Whether spans capture content, by these settings and the process
    /// environment.
    pub fn capture_content(&self) -> bool {
        self.capture_content_with(&|name| std::env::var(name).ok())
    }

    /// [`Self::export`] over `env` instead of the process environment.
    pub fn export_with(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<ExportConfig>, HostError> {
        let set = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|value| value.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let (endpoint, place) = match set("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Some(endpoint) => (endpoint, "OTEL_EXPORTER_OTLP_ENDPOINT"),
            None => match &self.endpoint {
                Some(endpoint) => (endpoint.clone(), "[telemetry] endpoint"),
                None => return Ok(None),
            },
        };
        let bad =
            |place: &str, error: keel_telemetry::ConfigError| invalid(place, &error.to_string());
        let mut config = ExportConfig::new(&endpoint).map_err(|error| bad(place, error))?;
        if let Some(protocol) = set("OTEL_EXPORTER_OTLP_PROTOCOL") {
            config.protocol = Protocol::parse(&protocol)
                .map_err(|error| bad("OTEL_EXPORTER_OTLP_PROTOCOL", error))?;
        } else if let Some(protocol) = &self.protocol {
            config.protocol =
                Protocol::parse(protocol).map_err(|error| bad("[telemetry] protocol", error))?;
        }
        if let Some(name) = &self.headers_env {
            let headers = set(name).ok_or_else(|| {
                invalid(
                    "[telemetry] headers_env",
                    &format!("the environment variable `{name}` is not set"),
                )
            })?;
            config.headers = parse_headers(&headers).map_err(|error| bad(name, error))?;
        }
        if let Some(headers) = set("OTEL_EXPORTER_OTLP_HEADERS") {
            let headers = parse_headers(&headers)
                .map_err(|error| bad("OTEL_EXPORTER_OTLP_HEADERS", error))?;
            config.headers.extend(headers);
        }
        let timeout_ms = match set("OTEL_EXPORTER_OTLP_TIMEOUT") {
            Some(text) => Some(text.trim().parse::<u64>().map_err(|_| {
                invalid(
                    "OTEL_EXPORTER_OTLP_TIMEOUT",
                    "not a whole number of milliseconds",
                )
            })?),
            None => self.timeout_ms,
        };
        if let Some(ms) = timeout_ms {
            if ms == 0 || ms > MAX_TIMEOUT_MS {
                return Err(invalid(
                    "the telemetry timeout",
                    &format!(
                        "must be between 1 and {MAX_TIMEOUT_MS} ms (it also bounds how long \
                         an exit waits)"
                    ),
                ));
            }
            config.timeout = Duration::from_millis(ms);
        }
        Ok(Some(config))
    }

    /// [`Self::capture_content`] over `env`.
    pub fn capture_content_with(&self, env: &dyn Fn(&str) -> Option<String>) -> bool {
        let by_env = env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_some_and(|value| value.trim().eq_ignore_ascii_case("true"));
        by_env || self.capture_content.unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn nothing_is_exported_unless_configured() {
        let settings = TelemetrySettings::default();
        assert_eq!(settings.export_with(&env(&[])).unwrap(), None);
        assert!(!settings.capture_content_with(&env(&[])));
    }

    #[test]
    fn the_environment_wins_over_the_table() {
        let settings = TelemetrySettings {
            endpoint: Some("http://file:4318".into()),
            protocol: Some("http/json".into()),
            headers_env: Some("MY_OTEL_HEADERS".into()),
            capture_content: None,
            timeout_ms: Some(2000),
        };
        let config = settings
            .export_with(&env(&[("MY_OTEL_HEADERS", "authorization=Bearer%20t")]))
            .unwrap()
            .unwrap();
        assert_eq!(config.endpoint, "http://file:4318");
        assert_eq!(config.protocol, Protocol::HttpJson);
        assert_eq!(config.timeout, Duration::from_secs(2));
        assert_eq!(
            config.headers,
            vec![("authorization".to_owned(), "Bearer t".to_owned())]
        );
        let config = settings
            .export_with(&env(&[
                ("MY_OTEL_HEADERS", "a=1"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "b=2"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "500"),
            ]))
            .unwrap()
            .unwrap();
        assert_eq!(config.endpoint, "http://env:4318");
        assert_eq!(config.protocol, Protocol::HttpProtobuf);
        assert_eq!(config.timeout, Duration::from_millis(500));
        assert_eq!(config.headers.len(), 2);
        let off = settings
            .export_with(&env(&[
                ("MY_OTEL_HEADERS", "a=1"),
                ("OTEL_SDK_DISABLED", "true"),
            ]))
            .unwrap();
        assert_eq!(off, None);
    }

    #[test]
    fn bad_values_are_errors_that_never_quote_a_header() {
        let settings = TelemetrySettings {
            endpoint: Some("http://h:4318".into()),
            ..TelemetrySettings::default()
        };
        for pairs in [
            vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
            vec![("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")],
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "h:4318")],
            vec![("OTEL_EXPORTER_OTLP_HEADERS", "secret-token-no-equals")],
        ] {
            let error = settings.export_with(&env(&pairs)).unwrap_err().to_string();
            assert!(!error.contains("secret-token"), "{error}");
        }
        let missing = TelemetrySettings {
            headers_env: Some("ABSENT".into()),
            ..settings
        };
        assert!(missing.export_with(&env(&[])).is_err());
    }

    #[test]
    fn content_capture_is_opt_in() {
        let on = TelemetrySettings {
            capture_content: Some(true),
            ..TelemetrySettings::default()
        };
        assert!(on.capture_content_with(&env(&[])));
        assert!(TelemetrySettings::default().capture_content_with(&env(&[(
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
            "true"
        )])));
    }
}
