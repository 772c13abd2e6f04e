//! JSON Schemas of the public wire types, generated from the Rust types.
//!
//! `keel schema` prints them and `schema/` holds the checked-in copies; a test
//! fails when the two differ, so a change to the wire format is a visible diff.

use schemars::{JsonSchema, Schema, schema_for};

use crate::{Entry, HostControl, HostLine, Message, ProviderEvent, RunEvent, RunResult, ToolSpec};

/// Every public schema, as `(file stem, schema)` pairs in a stable order.
pub fn all() -> Vec<(&'static str, Schema)> {
    vec![
        ("run_event", schema::<RunEvent>()),
        ("run_result", schema::<RunResult>()),
        ("message", schema::<Message>()),
        ("provider_event", schema::<ProviderEvent>()),
        ("entry", schema::<Entry>()),
        ("tool_spec", schema::<ToolSpec>()),
        ("host_control", schema::<HostControl>()),
        ("host_line", schema::<HostLine>()),
    ]
}

fn schema<T: JsonSchema>() -> Schema {
    schema_for!(T)
}
