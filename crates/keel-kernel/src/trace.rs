//! What the kernel's trace spans say, in one place.
//!
//! The spans follow the OpenTelemetry GenAI semantic conventions
//! (`docs/telemetry.md` lists every span and attribute):
//! `invoke_agent` per run, `chat {model}` per provider request,
//! `execute_tool {name}` per call; `keel.permission`, `keel.compaction` and
//! `keel.recovery` are Keel's own. Attribute names are written out at each
//! span (the conventions' crate keeps its GenAI names experimental); every
//! span carries `keel.run.id`, and `invoke_agent` and `chat` carry
//! `gen_ai.conversation.id` (the session id), so a trace leads to the session
//! record: a `chat` span's `gen_ai.response.id` is the assistant message's
//! `response_id`, an `execute_tool` span's `gen_ai.tool.call.id` its tool
//! result's `call_id`. Content (messages, arguments, results) is recorded
//! only when the kernel was built with `capture_content`.
//!
//! Invariant: nothing here reads or writes anything but span fields.

/// A wire enum's snake_case name (what its JSON says), for span attributes.
pub(crate) fn wire_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::from("unknown"),
    }
}

/// The longest value an identifier or model name from outside Keel (a
/// provider's response id or model, a model's call id) keeps in a span.
pub(crate) const MAX_TRACED_LEN: usize = 128;

/// `value` cut to at most [`MAX_TRACED_LEN`] bytes at a character boundary:
/// what a provider or model chooses must not make a span as large as it likes.
pub(crate) fn bounded(value: &str) -> &str {
    if value.len() <= MAX_TRACED_LEN {
        return value;
    }
    let mut end = MAX_TRACED_LEN;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// The conventions' value for a name outside the known set: what a span and
/// a metric carry for a tool the model named but no tool is registered as.
pub(crate) const OTHER: &str = "_OTHER";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_cuts_long_values_at_a_character_boundary() {
        assert_eq!(bounded("resp-1"), "resp-1");
        let long = "é".repeat(MAX_TRACED_LEN);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_TRACED_LEN && cut.len() >= MAX_TRACED_LEN - 1);
        assert!(long.starts_with(cut));
    }
}
