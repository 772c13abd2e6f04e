//! One error taxonomy for every provider: HTTP statuses and error bodies
//! mapped onto [`ProviderErrorKind`].
//!
//! Each adapter passes the status, the body and the `retry-after` header;
//! this module extracts the provider's own message (`error.message` in the
//! OpenAI and Anthropic shapes) and recognises context overflow from the
//! phrases the providers use, whatever status they send it with. Messages
//! are cut to a bounded length and never contain request headers, so no
//! credential can leak through an error.

use std::time::Duration;

use keel_protocol::{ProviderError, ProviderErrorKind};

/// Phrases by which providers say the context is too long.
const OVERFLOW_PHRASES: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "prompt is too long",
    "context window",
    "too many tokens",
    "exceeds the context",
    "input is too long",
    "reduce the length of the messages",
    "string_above_max_length",
    // llama.cpp's server: `exceed_context_size_error`, "request (N tokens)
    // exceeds the available context size (M tokens)".
    "exceed_context_size",
    "exceeds the available context size",
];

/// The longest provider message kept in an error.
const MAX_MESSAGE: usize = 500;

/// Classifies a non-success HTTP response.
pub fn classify_status(status: u16, body: &str, retry_after: Option<Duration>) -> ProviderError {
    let message = provider_message(body);
    let shown = if message.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {message}")
    };
    let kind = if is_overflow(body) {
        ProviderErrorKind::ContextOverflow
    } else {
        match status {
            401 => ProviderErrorKind::Auth,
            403 => ProviderErrorKind::Permission,
            408 | 504 => ProviderErrorKind::Timeout,
            429 => ProviderErrorKind::RateLimited,
            503 | 529 => ProviderErrorKind::Overloaded,
            500..=599 => ProviderErrorKind::ServerError,
            _ => ProviderErrorKind::InvalidRequest,
        }
    };
    ProviderError {
        kind,
        message: shown,
        retry_after_ms: retry_after.map(|delay| delay.as_millis() as u64),
        max_retries: None,
    }
}

/// Classifies an error reported inside a stream (e.g. an SSE `error` event),
/// by the provider's error type and message.
pub fn classify_stream_error(error_type: &str, message: &str) -> ProviderError {
    let lowered = error_type.to_ascii_lowercase();
    let kind = if is_overflow(message) || is_overflow(error_type) {
        ProviderErrorKind::ContextOverflow
    } else if lowered.contains("overloaded") {
        ProviderErrorKind::Overloaded
    } else if lowered.contains("rate_limit") || lowered.contains("rate-limit") {
        ProviderErrorKind::RateLimited
    } else if lowered.contains("authentication") || lowered.contains("auth") {
        ProviderErrorKind::Auth
    } else if lowered.contains("permission") {
        ProviderErrorKind::Permission
    } else if lowered.contains("invalid_request") {
        ProviderErrorKind::InvalidRequest
    } else if lowered.contains("timeout") {
        ProviderErrorKind::Timeout
    } else {
        ProviderErrorKind::ServerError
    };
    ProviderError::new(kind, format!("{error_type}: {}", cut(message)))
}

/// Whether `text` says the context was too long.
pub fn is_overflow(text: &str) -> bool {
    let lowered = text.to_ascii_lowercase();
    OVERFLOW_PHRASES
        .iter()
        .any(|phrase| lowered.contains(phrase))
}

/// What a context-overflow message says about sizes, when it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OverflowSizes {
    /// The model's context window, in the provider's tokens.
    pub limit: Option<u64>,
    /// The size of the refused request, in the provider's tokens.
    pub requested: Option<u64>,
}

/// The window and request size an overflow message states, in the
/// phrasings of OpenAI ("maximum context length is N tokens … resulted in
/// M tokens"), llama.cpp ("request (M tokens) exceeds the available context
/// size (N tokens)") and Anthropic ("prompt is too long: M tokens > N
/// maximum"). A kernel learns the real window and its estimate's error
/// from them.
pub fn overflow_sizes(message: &str) -> OverflowSizes {
    let lowered = message.to_ascii_lowercase();
    let after = |phrase: &str| -> Option<u64> {
        let at = lowered.find(phrase)? + phrase.len();
        let digits: String = lowered[at..]
            .trim_start_matches([' ', '(', ':'])
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    let before = |phrase: &str| -> Option<u64> {
        let at = lowered.find(phrase)?;
        let digits: String = lowered[..at]
            .trim_end()
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.chars().rev().collect::<String>().parse().ok()
    };
    OverflowSizes {
        limit: after("maximum context length is")
            .or_else(|| after("available context size"))
            .or_else(|| before(" maximum")),
        requested: after("resulted in")
            .or_else(|| after("you requested"))
            .or_else(|| after("request ("))
            .or_else(|| after("prompt is too long")),
    }
}

/// The provider's own message from an error body, or the body itself.
fn provider_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|value| {
        value
            .pointer("/error/message")
            .or_else(|| value.get("message"))
            .or_else(|| value.get("error"))
            .and_then(|message| message.as_str())
            .map(str::to_owned)
    });
    cut(message.as_deref().unwrap_or(body).trim())
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// At most `limit` bytes of `bytes` as text for an error message: invalid
/// UTF-8 replaced, control characters escaped (`\n`, `\u{1b}`), and `…`
/// when bytes were left out.
pub fn preview(bytes: &[u8], limit: usize) -> String {
    let mut shown = bytes.get(..limit).unwrap_or(bytes);
    // A character cut at the limit is left out rather than replaced.
    if let Err(error) = std::str::from_utf8(shown)
        && error.error_len().is_none()
    {
        shown = shown.get(..error.valid_up_to()).unwrap_or_default();
    }
    let mut text = String::with_capacity(shown.len() + 8);
    for c in String::from_utf8_lossy(shown).chars() {
        if c.is_control() {
            text.extend(c.escape_default());
        } else {
            text.push(c);
        }
    }
    if shown.len() < bytes.len() {
        text.push('…');
    }
    text
}

/// Parses a `retry-after` header: seconds, or milliseconds in
/// `retry-after-ms` when the provider sends that.
#[cfg(feature = "http")]
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let read = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = read("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Some(Duration::from_millis(ms.max(0.0) as u64));
    }
    read("retry-after")
        .and_then(|v| v.parse::<f64>().ok())
        .map(|seconds| Duration::from_millis((seconds.max(0.0) * 1000.0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_bodies_map_onto_the_taxonomy() {
        let cases = [
            (
                401,
                r#"{"error":{"message":"bad key"}}"#,
                ProviderErrorKind::Auth,
            ),
            (403, "", ProviderErrorKind::Permission),
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
                ProviderErrorKind::ContextOverflow,
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
                ProviderErrorKind::ContextOverflow,
            ),
            (
                400,
                r#"{"error":{"code":400,"message":"request (4033 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4033,"n_ctx":2048}}"#,
                ProviderErrorKind::ContextOverflow,
            ),
            (
                400,
                r#"{"error":{"message":"bad field"}}"#,
                ProviderErrorKind::InvalidRequest,
            ),
            (429, "slow down", ProviderErrorKind::RateLimited),
            (500, "", ProviderErrorKind::ServerError),
            (
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                ProviderErrorKind::Overloaded,
            ),
            (504, "", ProviderErrorKind::Timeout),
        ];
        for (status, body, kind) in cases {
            assert_eq!(
                classify_status(status, body, None).kind,
                kind,
                "{status} {body}"
            );
        }
        let error = classify_status(401, r#"{"error":{"message":"bad key"}}"#, None);
        assert_eq!(error.message, "HTTP 401: bad key");
    }

    #[test]
    fn overflow_messages_state_the_window_and_the_request() {
        let cases = [
            (
                "HTTP 400: This model's maximum context length is 8192 tokens. However, your messages resulted in 9,000 tokens.",
                Some(8_192),
                Some(9_000),
            ),
            (
                "HTTP 400: request (4674 tokens) exceeds the available context size (2048 tokens), try increasing it",
                Some(2_048),
                Some(4_674),
            ),
            (
                "HTTP 400: prompt is too long: 210000 tokens > 200000 maximum",
                Some(200_000),
                Some(210_000),
            ),
            ("context_length_exceeded", None, None),
        ];
        for (message, limit, requested) in cases {
            assert_eq!(
                overflow_sizes(message),
                OverflowSizes { limit, requested },
                "{message}"
            );
        }
    }

    #[test]
    fn previews_are_bounded_and_escaped() {
        assert_eq!(
            preview(b"<html>\r\n\t<b>\x1b[0m", 200),
            "<html>\\r\\n\\t<b>\\u{1b}[0m"
        );
        assert_eq!(preview(b"abcdef", 3), "abc…");
        assert_eq!(preview(&[b'a', 0xff, b'b'], 10), "a\u{fffd}b");
        let long = "é".repeat(150);
        let shown = preview(long.as_bytes(), 200);
        assert!(shown.ends_with('…'));
        assert!(shown.len() <= 200 + '…'.len_utf8(), "{}", shown.len());
    }
}
