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
