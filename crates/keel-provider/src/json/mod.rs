//! Reading provider JSON: the one set of field helpers the three stream
//! parsers share.
//!
//! Why one module: every parser pulls strings, numbers and nested objects
//! out of what the wire sends, and they must all treat a field the same way.
//! A field that is missing or has another type than expected reads as absent
//! (`None`, or `""` through [`str_or_empty`]); where the event grammar
//! requires it, the parser turns that into a `protocol` error built here, so
//! the error texts match across adapters. [`typed`] is the hot path for delta
//! events, decoded field by field without building a `serde_json::Value`.
//!
//! Invariant: nothing here panics or allocates an unbounded copy of what the
//! wire sent; quoted data is cut to [`QUOTED_CHARS`] characters.

pub(crate) mod typed;

use keel_protocol::{ProviderError, ProviderErrorKind};
use serde_json::Value;

/// How much of the wire's data an error message quotes.
pub(crate) const QUOTED_CHARS: usize = 200;

/// The string field `name` of `value`, if it is a string.
pub(crate) fn str_field<'a>(value: &'a Value, name: &str) -> Option<&'a str> {
    value.get(name).and_then(Value::as_str)
}

/// The string field `name` of `value`, or `""` when it is absent or not a
/// string.
pub(crate) fn str_or_empty<'a>(value: &'a Value, name: &str) -> &'a str {
    str_field(value, name).unwrap_or_default()
}

/// The string field `name`, which the grammar requires: a `protocol` error
/// naming it when it is absent or not a string.
pub(crate) fn string_field(value: &Value, name: &str) -> Result<String, ProviderError> {
    str_field(value, name)
        .map(str::to_owned)
        .ok_or_else(|| missing_field(name))
}

/// The first of `names` that holds a non-empty string.
pub(crate) fn first_str<'a>(value: &'a Value, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|name| str_field(value, name).filter(|text| !text.is_empty()))
}

/// The unsigned integer field `name` of `value`, if it is one.
pub(crate) fn u64_field(value: &Value, name: &str) -> Option<u64> {
    value.get(name).and_then(Value::as_u64)
}

/// The field `name` as text when it is a string or a number (error codes
/// come as either).
pub(crate) fn scalar_text(value: &Value, name: &str) -> Option<String> {
    match value.get(name) {
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Number(number)) => Some(number.to_string()),
        _ => None,
    }
}

/// The error for a required string field that is missing.
pub(crate) fn missing_field(name: &str) -> ProviderError {
    protocol(format!("missing string field `{name}`"))
}

/// A `protocol` error: the wire broke the API's grammar.
pub(crate) fn protocol(message: impl Into<String>) -> ProviderError {
    ProviderError::new(ProviderErrorKind::Protocol, message)
}

/// `text` cut to [`QUOTED_CHARS`] characters (with `…` when cut), for
/// quoting wire data in an error message.
pub(crate) fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((at, _)) => format!("{}…", text.get(..at).unwrap_or_default()),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_of_another_type_read_as_absent() {
        let value = json!({"s": "x", "e": "", "n": 7, "f": 1.5, "o": {}});
        assert_eq!(str_field(&value, "s"), Some("x"));
        assert_eq!(str_field(&value, "n"), None);
        assert_eq!(str_or_empty(&value, "missing"), "");
        assert_eq!(string_field(&value, "o"), Err(missing_field("o")));
        assert_eq!(first_str(&value, &["e", "n", "s"]), Some("x"));
        assert_eq!(u64_field(&value, "n"), Some(7));
        assert_eq!(u64_field(&value, "f"), None);
        assert_eq!(scalar_text(&value, "n").as_deref(), Some("7"));
        assert_eq!(scalar_text(&value, "o"), None);
        let long = "é".repeat(QUOTED_CHARS + 5);
        let quoted = quote(&long);
        assert_eq!(quoted.chars().count(), QUOTED_CHARS + 1);
        assert!(quoted.ends_with('…'));
        assert_eq!(quote("short"), "short");
    }
}
