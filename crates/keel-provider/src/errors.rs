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
    {
        let mut provider_error = ProviderError::new(kind, shown);
        provider_error.retry_after_ms = retry_after.map(|delay| delay.as_millis() as u64);
        provider_error.max_retries = None;
        provider_error
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
#[non_exhaustive]
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

/// Parses the wait a response asks for: `retry-after-ms` (milliseconds,
/// as OpenAI sends), else `retry-after` as seconds or as an HTTP-date
/// (RFC 9110 § 10.2.3: the IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, and
/// the obsolete RFC 850 and asctime forms recipients must accept), the wait
/// until that date from the system clock. A date in the past asks for no
/// wait; a value that is none of these is ignored.
#[cfg(feature = "http")]
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    retry_after_at(headers, std::time::SystemTime::now())
}

/// [`retry_after`] with `now` as the current time (for tests).
#[cfg(feature = "http")]
pub fn retry_after_at(
    headers: &reqwest::header::HeaderMap,
    now: std::time::SystemTime,
) -> Option<Duration> {
    let read = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = read("retry-after-ms").and_then(seconds_or_fraction) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = read("retry-after")?;
    if let Some(seconds) = seconds_or_fraction(value) {
        return Some(Duration::from_secs_f64(seconds));
    }
    let date = http_date(value)?;
    Some(date.duration_since(now).unwrap_or_default())
}

/// A non-negative, finite number of at most a year in units (seconds or
/// milliseconds): larger values are clamped, so `Duration` cannot overflow.
#[cfg(feature = "http")]
fn seconds_or_fraction(text: &str) -> Option<f64> {
    let value: f64 = text.parse().ok()?;
    value
        .is_finite()
        .then(|| value.clamp(0.0, 366.0 * 86_400.0 * 1000.0))
}

/// Parses an HTTP-date (RFC 9110 § 5.6.7) in any of its three forms:
/// `Sun, 06 Nov 1994 08:49:37 GMT` (IMF-fixdate), `Sunday, 06-Nov-94
/// 08:49:37 GMT` (RFC 850; a two-digit year is taken in 1970–2069) and
/// `Sun Nov  6 08:49:37 1994` (asctime). The weekday is not checked.
pub fn http_date(text: &str) -> Option<std::time::SystemTime> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let (day, month, year, time) = match parts.as_slice() {
        // IMF-fixdate: "Sun," "06" "Nov" "1994" "08:49:37" "GMT"
        [weekday, day, month, year, time, "GMT"] if weekday.ends_with(',') => {
            (day.parse().ok()?, *month, year.parse().ok()?, *time)
        }
        // RFC 850: "Sunday," "06-Nov-94" "08:49:37" "GMT"
        [weekday, date, time, "GMT"] if weekday.ends_with(',') => {
            let mut fields = date.split('-');
            let day = fields.next()?.parse().ok()?;
            let month = fields.next()?;
            let short: i64 = fields.next()?.parse().ok()?;
            let year = if short < 70 {
                2000 + short
            } else {
                1900 + short
            };
            (day, month, year, *time)
        }
        // asctime: "Sun" "Nov" "6" "08:49:37" "1994"
        [_, month, day, time, year] => (day.parse().ok()?, *month, year.parse().ok()?, *time),
        _ => return None,
    };
    let month = MONTHS.iter().position(|name| *name == month)? as i64 + 1;
    let mut clock = time.split(':').map(|field| field.parse::<i64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    let valid = (1..=31).contains(&day)
        && (1970..=9999).contains(&year)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        // 60: a leap second.
        && (0..=60).contains(&second)
        && clock.next().is_none();
    if !valid {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    let seconds = u64::try_from(seconds).ok()?;
    std::time::UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Days from 1970-01-01 to the proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let shifted_month = (month + 9) % 12;
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Formats `time` as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`),
/// whole seconds; the inverse of [`http_date`] (for tests and servers).
pub fn format_http_date(time: std::time::SystemTime) -> String {
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let seconds = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64;
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Hinnant's `civil_from_days`.
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        // Both indices are in range by construction (a remainder of 7, a
        // month of 1–12); `get` keeps even a mistake from panicking.
        WEEKDAYS.get(days.rem_euclid(7) as usize).unwrap_or(&"Thu"),
        MONTHS.get((month - 1) as usize).unwrap_or(&"Jan"),
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
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
    fn http_dates_parse_in_all_three_forms() {
        let expected = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777);
        for text in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(http_date(text), Some(expected), "{text}");
        }
        assert_eq!(format_http_date(expected), "Sun, 06 Nov 1994 08:49:37 GMT");
        for seconds in [0, 951_782_400, 1_709_164_800, 4_102_444_799] {
            let time = std::time::UNIX_EPOCH + Duration::from_secs(seconds);
            assert_eq!(http_date(&format_http_date(time)), Some(time), "{seconds}");
        }
        for bad in [
            "",
            "soon",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nox 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 06 Nov 1994 08:49:37:01 GMT",
        ] {
            assert_eq!(http_date(bad), None, "{bad}");
        }
    }

    #[cfg(feature = "http")]
    #[test]
    fn retry_after_is_read_as_seconds_milliseconds_or_a_date() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_str(value).unwrap());
            }
            map
        };
        let date = format_http_date(now + Duration::from_secs(20));
        type Headers<'a> = &'a [(&'static str, &'a str)];
        let cases: [(Headers, Option<Duration>); 7] = [
            (&[("retry-after", "120")], Some(Duration::from_secs(120))),
            (&[("retry-after", "1.5")], Some(Duration::from_millis(1500))),
            (
                &[("retry-after", date.as_str())],
                Some(Duration::from_secs(20)),
            ),
            (
                &[("retry-after", "Thu, 01 Jan 1970 00:00:00 GMT")],
                Some(Duration::ZERO),
            ),
            (&[("retry-after", "later")], None),
            (
                &[("retry-after-ms", "250"), ("retry-after", "9")],
                Some(Duration::from_millis(250)),
            ),
            (&[], None),
        ];
        for (pairs, expected) in cases {
            assert_eq!(retry_after_at(&headers(pairs), now), expected, "{pairs:?}");
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
