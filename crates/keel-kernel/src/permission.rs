//! Binds permission requests to the exact call they are about.
//!
//! The binding is the sha256 of the canonical JSON (keys sorted, no spaces) of
//! the call id, tool name, final arguments and intent; the request id embeds
//! its prefix, so an approval cannot be replayed for different arguments.

use keel_protocol::OperationIntent;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// sha256 (hex) of the canonical JSON of `value`.
pub(crate) fn sha256_hex(value: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(value, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The binding hash of one permission question.
pub(crate) fn binding(
    call_id: &str,
    tool_name: &str,
    arguments: &Value,
    intent: &OperationIntent,
) -> String {
    let intent = serde_json::to_value(intent).unwrap_or(Value::Null);
    sha256_hex(&json!({
        "call_id": call_id,
        "tool_name": tool_name,
        "arguments": arguments,
        "intent": intent,
    }))
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (position, key) in keys.into_iter().enumerate() {
                if position > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(item) = map.get(key) {
                    write_canonical(item, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (position, item) in items.iter().enumerate() {
                if position > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_hash_ignores_key_order_but_not_values() {
        let a = sha256_hex(&json!({"b": 1, "a": [1, {"y": 2, "x": 3}]}));
        let b = sha256_hex(&json!({"a": [1, {"x": 3, "y": 2}], "b": 1}));
        let c = sha256_hex(&json!({"a": [1, {"x": 3, "y": 2}], "b": 2}));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 64);
    }
}
