//! The built-in tools' argument schemas, derived from their argument
//! structs, accept the calls the tools take and reject the ones the
//! hand-written schemas rejected, through the registry's validation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keel_protocol::{ToolCall, ToolErrorCode};
use keel_tools::ToolRegistry;
use keel_tools::builtin::{BashOptions, all_tools};
use serde_json::{Value, json};

fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for tool in all_tools(BashOptions::default()) {
        registry.register(tool).unwrap();
    }
    registry
}

/// Every `valid` call passes validation and every `invalid` one fails it
/// with `invalid_arguments`.
fn check(tool: &str, valid: &[Value], invalid: &[Value]) {
    let registry = registry();
    let call = |arguments: &Value| ToolCall::new("c", tool, arguments.clone());
    for arguments in valid {
        if let Err(error) = registry.prepare(&call(arguments)) {
            panic!("{tool} {arguments} was refused: {}", error.message);
        }
    }
    for arguments in invalid {
        match registry.prepare(&call(arguments)) {
            Ok(_) => panic!("{tool} {arguments} was accepted"),
            Err(error) => assert_eq!(
                error.code,
                ToolErrorCode::InvalidArguments,
                "{tool} {arguments}"
            ),
        }
    }
}

#[test]
fn read_arguments() {
    check(
        "read",
        &[
            json!({"path": "a.txt"}),
            json!({"path": "a.txt", "offset": 1, "limit": 1}),
            json!({"path": "a.txt", "offset": 5000}),
        ],
        &[
            json!({}),
            json!({"path": 1}),
            json!({"path": null}),
            json!({"path": "a.txt", "offset": 0}),
            json!({"path": "a.txt", "offset": -1}),
            json!({"path": "a.txt", "offset": 1.5}),
            json!({"path": "a.txt", "offset": null}),
            json!({"path": "a.txt", "limit": 0}),
            json!({"path": "a.txt", "limit": "10"}),
            json!({"path": "a.txt", "lines": 10}),
            json!(["a.txt"]),
        ],
    );
}

#[test]
fn write_arguments() {
    check(
        "write",
        &[
            json!({"path": "a.txt", "content": ""}),
            json!({"path": "d/a.txt", "content": "x\n"}),
        ],
        &[
            json!({"path": "a.txt"}),
            json!({"content": "x"}),
            json!({"path": "a.txt", "content": 1}),
            json!({"path": "a.txt", "content": null}),
            json!({"path": "a.txt", "content": "x", "mode": "append"}),
        ],
    );
}

#[test]
fn edit_arguments() {
    check(
        "edit",
        &[
            json!({"path": "a.txt", "edits": [{"old_text": "a", "new_text": "b"}]}),
            json!({"path": "a.txt", "edits": [
                {"old_text": "a", "new_text": ""},
                {"old_text": "c", "new_text": "d"}
            ]}),
        ],
        &[
            json!({"path": "a.txt"}),
            json!({"edits": [{"old_text": "a", "new_text": "b"}]}),
            json!({"path": "a.txt", "edits": []}),
            json!({"path": "a.txt", "edits": {"old_text": "a", "new_text": "b"}}),
            json!({"path": "a.txt", "edits": [{"old_text": "a"}]}),
            json!({"path": "a.txt", "edits": [{"new_text": "b"}]}),
            json!({"path": "a.txt", "edits": [{"old_text": 1, "new_text": "b"}]}),
            json!({"path": "a.txt", "edits": [{"old_text": "a", "new_text": "b", "all": true}]}),
            json!({"path": "a.txt", "edits": [null]}),
            json!({"path": "a.txt", "old_text": "a", "new_text": "b"}),
        ],
    );
}

#[test]
fn bash_arguments() {
    check(
        "bash",
        &[
            json!({"command": "ls"}),
            json!({"command": "ls", "timeout": 1}),
            json!({"command": "ls", "timeout": 3600}),
        ],
        &[
            json!({}),
            json!({"command": ["ls"]}),
            json!({"command": "ls", "timeout": 0}),
            json!({"command": "ls", "timeout": 3601}),
            json!({"command": "ls", "timeout": -5}),
            json!({"command": "ls", "timeout": "10"}),
            json!({"command": "ls", "timeout": null}),
            json!({"command": "ls", "cwd": "/"}),
        ],
    );
}

#[test]
fn grep_arguments() {
    check(
        "grep",
        &[
            json!({"pattern": "x"}),
            json!({
                "pattern": "fn main", "path": "src", "glob": "*.rs", "ignore_case": true,
                "literal": false, "context": 0, "limit": 1
            }),
            json!({"pattern": "x", "context": 20, "limit": 10_000}),
        ],
        &[
            json!({}),
            json!({"pattern": ""}),
            json!({"pattern": 1}),
            json!({"pattern": "x", "path": null}),
            json!({"pattern": "x", "glob": 3}),
            json!({"pattern": "x", "ignore_case": "yes"}),
            json!({"pattern": "x", "literal": 1}),
            json!({"pattern": "x", "context": -1}),
            json!({"pattern": "x", "context": 21}),
            json!({"pattern": "x", "limit": 0}),
            json!({"pattern": "x", "limit": 10_001}),
            json!({"pattern": "x", "regex": true}),
        ],
    );
}

#[test]
fn find_arguments() {
    check(
        "find",
        &[
            json!({"pattern": "*.rs"}),
            json!({"pattern": "src/**/test_*.py", "path": "src", "limit": 100_000}),
        ],
        &[
            json!({}),
            json!({"pattern": ""}),
            json!({"pattern": "*.rs", "path": 1}),
            json!({"pattern": "*.rs", "limit": 0}),
            json!({"pattern": "*.rs", "limit": 100_001}),
            json!({"pattern": "*.rs", "type": "file"}),
        ],
    );
}

#[test]
fn ls_arguments() {
    check(
        "ls",
        &[
            json!({}),
            json!({"path": "src"}),
            json!({"path": ".", "limit": 100_000}),
        ],
        &[
            json!({"path": 3}),
            json!({"path": null}),
            json!({"limit": 0}),
            json!({"limit": 100_001}),
            json!({"limit": 2.5}),
            json!({"all": true}),
            json!("src"),
        ],
    );
}

#[test]
fn every_schema_is_a_plain_described_object() {
    for spec in registry().specs() {
        let schema = &spec.parameters;
        let name = &spec.name;
        assert_eq!(schema["type"], "object", "{name}");
        assert_eq!(schema["additionalProperties"], false, "{name}");
        for keyword in ["$schema", "$defs", "title", "description"] {
            assert!(schema.get(keyword).is_none(), "{name} has {keyword}");
        }
        for (property, subschema) in schema["properties"].as_object().unwrap() {
            assert!(
                subschema["description"].is_string(),
                "{name}.{property} lacks a description"
            );
            assert!(
                subschema["type"].is_string(),
                "{name}.{property} has no single type"
            );
        }
    }
}
