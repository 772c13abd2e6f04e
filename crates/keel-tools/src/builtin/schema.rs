//! The argument schemas of the built-in tools, derived from their argument
//! structs.
//!
//! Each built-in deserializes its arguments into a struct that derives both
//! `Deserialize` and `JsonSchema`; its [`Tool::parameters`](crate::Tool::parameters)
//! is [`arguments_schema`] of that struct, so the schema the model is shown
//! and the parser that reads the model's answer cannot drift apart. Field doc
//! comments are the property descriptions; `#[schemars(range(..))]` and
//! `#[schemars(length(..))]` are the bounds.
//!
//! Invariants: the schema is self-contained (no `$ref`, no `$schema`), and it
//! holds only what the model needs, in the form tool schemas have always had
//! on the wire:
//! - an optional argument is omitted, never `null`: `Option<T>` is the schema
//!   of `T`, not required (for the typed schemas the built-ins use; an
//!   option of an enum or a `$ref` would keep its `anyOf`, which the
//!   `tests/schemas.rs` shape check refuses);
//! - no `title` and no root `description` (the tool has its own
//!   description), no `format` annotations (`uint`, `uint64`: the bounds say
//!   it), no `default` annotations (the wire schemas never had them;
//!   where a default matters, the property's description names it).

use schemars::generate::SchemaSettings;
use schemars::transform::transform_subschemas;
use schemars::{JsonSchema, Schema};
use serde_json::Value;

/// The model-facing JSON Schema of the argument struct `T`.
pub(super) fn arguments_schema<T: JsonSchema>() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.meta_schema = None;
    settings.inline_subschemas = true;
    let mut schema = settings.into_generator().into_root_schema_for::<T>();
    schema.remove("title");
    schema.remove("description");
    model_facing(&mut schema);
    schema.to_value()
}

/// Strips the annotations the model does not need, in this schema and every
/// subschema (properties, array items).
fn model_facing(schema: &mut Schema) {
    if let Some(object) = schema.as_object_mut() {
        object.remove("format");
        object.remove("default");
        if let Some(Value::Array(types)) = object.get_mut("type") {
            types.retain(|kind| kind != "null");
            if let [only] = types.as_slice() {
                let only = only.clone();
                object.insert("type".to_owned(), only);
            }
        }
    }
    transform_subschemas(&mut model_facing, schema);
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    /// Not a tool's arguments: the shapes the built-ins do not use yet.
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Sample {
        /// An optional object.
        inner: Option<Inner>,
        /// An optional list.
        names: Option<Vec<String>>,
        /// A count.
        #[serde(default)]
        count: u32,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        /// A flag.
        flag: bool,
    }

    #[test]
    fn optionals_are_omitted_never_null_and_annotations_are_dropped() {
        let schema = arguments_schema::<Sample>();
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "inner": {
                        "description": "An optional object.",
                        "type": "object",
                        "properties": {"flag": {"type": "boolean", "description": "A flag."}},
                        "required": ["flag"]
                    },
                    "names": {
                        "description": "An optional list.",
                        "type": "array",
                        "items": {"type": "string"}
                    },
                    "count": {"type": "integer", "minimum": 0, "description": "A count."}
                }
            })
        );
    }
}
