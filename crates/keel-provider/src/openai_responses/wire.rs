//! What Responses stream events hold: the typed shape of delta events for
//! the hot path, and the readers of usage, errors and indices from the
//! generic JSON of every other event (through the crate's shared field
//! helpers in [`crate::json`]). Kept apart from the parser's state machine
//! in `stream.rs`, which only decides what each event means.

use keel_protocol::{ProviderError, Usage};
use serde_json::Value;

use crate::errors::classify_stream_error;
use crate::json::typed::{JsonStr, typed_object};
use crate::json::{first_str, protocol, str_field, str_or_empty, u64_field};

/// The summary (or, failing that, the raw reasoning) text of a finished
/// reasoning item, for servers that did not stream it.
pub(super) fn reasoning_text(item: &Value) -> String {
    let texts = |field: &str| -> Vec<&str> {
        item.get(field)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|part| str_field(part, "text"))
            .collect()
    };
    let summary = texts("summary");
    if summary.is_empty() {
        texts("content").join("\n\n")
    } else {
        summary.join("\n\n")
    }
}

/// Token usage from a final response object, when it has any.
pub(super) fn usage(response: &Value) -> Option<Usage> {
    let usage = response.get("usage").filter(|usage| usage.is_object())?;
    let input = u64_field(usage, "input_tokens").unwrap_or(0);
    let cached = usage
        .get("input_tokens_details")
        .and_then(|details| u64_field(details, "cached_tokens"))
        .unwrap_or(0);
    let mut parsed = Usage::default();
    parsed.input_tokens = input.saturating_sub(cached);
    parsed.output_tokens = u64_field(usage, "output_tokens").unwrap_or(0);
    parsed.cache_read_tokens = cached;
    Some(parsed)
}

/// The error of a `response.failed` event.
pub(super) fn failed(value: &Value) -> ProviderError {
    let error = value.pointer("/response/error").unwrap_or(&Value::Null);
    let code = first_str(error, &["code", "type"]).unwrap_or("response_failed");
    let message = first_str(error, &["message"]).unwrap_or("the response failed");
    classify_stream_error(code, message)
}

/// The error of an `error` event: fields at the top level or under `error`.
pub(super) fn stream_error(value: &Value) -> ProviderError {
    let nested = value.get("error").unwrap_or(&Value::Null);
    let code = first_str(value, &["code"])
        .or_else(|| first_str(nested, &["code", "type"]))
        .unwrap_or("error");
    let message = first_str(value, &["message"])
        .or_else(|| first_str(nested, &["message"]))
        .unwrap_or("the provider reported an error");
    classify_stream_error(code, message)
}

/// The `output_index` every item event carries.
pub(super) fn output_index(value: &Value) -> Result<u64, ProviderError> {
    u64_field(value, "output_index").ok_or_else(|| {
        let kind = str_or_empty(value, "type");
        protocol(format!("a {kind} event without an output_index"))
    })
}

/// Whether an event (by SSE name or `type`) may be a delta for the typed hot
/// path; `message` is the SSE default name, for servers that send none.
pub(super) fn is_delta_event(event: &str) -> bool {
    matches!(
        event,
        "response.output_text.delta"
            | "response.refusal.delta"
            | "response.function_call_arguments.delta"
            | "response.reasoning_summary_text.delta"
            | "response.reasoning_text.delta"
            | "message"
    )
}

/// A delta event's data, for the typed hot path. Every field is optional so
/// that an unusual event falls back to the generic path instead of failing
/// here.
#[derive(Default)]
pub(super) struct WireDelta<'a> {
    pub(super) kind: Option<JsonStr<'a>>,
    pub(super) output_index: Option<u64>,
    pub(super) content_index: Option<u64>,
    /// Outer `None` when absent, inner `None` when `null`.
    pub(super) summary_index: Option<Option<u64>>,
    pub(super) delta: Option<JsonStr<'a>>,
}

typed_object!(WireDelta, "a delta event object", {
    0: "type" => kind,
    1: "output_index" => output_index,
    2: "content_index" => content_index,
    3: "summary_index" => summary_index (Some),
    4: "delta" => delta,
});
