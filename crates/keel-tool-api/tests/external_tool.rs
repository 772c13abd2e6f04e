//! A tool written against the Tool API alone, as an extension or the MCP
//! client writes one: it implements [`Tool`] with nothing but this crate
//! and keel-protocol, goes through [`ToolRegistry`]'s validation, resolves
//! its path through the [`Workspace`], streams progress and reads a typed
//! extension its host gave the call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use keel_protocol::{
    ExecutionMode, IntentKind, IntentScope, OperationIntent, ToolCall, ToolErrorCode, UserContent,
};
use keel_tool_api::{
    Tool, ToolContext, ToolError, ToolFuture, ToolOutput, ToolRegistry, Workspace,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Counts the lines of a workspace file.
struct LineCount;

/// What this tool's host gives each call (the way keel-tools' kernel gives
/// `bash` its sandbox): a label the output starts with.
struct Label(&'static str);

impl Tool for LineCount {
    fn name(&self) -> &str {
        "line_count"
    }

    fn description(&self) -> &str {
        "Counts the lines of a file in the workspace."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }

    fn intent(&self, arguments: &Value, workspace: &Workspace) -> OperationIntent {
        let path = arguments["path"].as_str().unwrap_or_default();
        OperationIntent::new(IntentKind::Read, workspace.scope_of(path))
    }

    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(async move {
            let path = arguments["path"].as_str().unwrap_or_default();
            let abs = context.workspace.resolve(path)?;
            let mut file = context.workspace.open_read(&abs)?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut file, &mut text)
                .map_err(|error| ToolError::new(ToolErrorCode::Io, error.to_string()))?;
            let lines = text.lines().count();
            context.progress.send("stdout", format!("{lines}\n"));
            let label = context
                .extension::<Label>()
                .map_or("lines", |label| label.0);
            Ok(ToolOutput::text(format!("{label}: {lines}")).with_details(json!({"lines": lines})))
        })
    }
}

fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    registry.register(Arc::new(LineCount)).unwrap();
    registry
}

#[tokio::test]
async fn a_tool_on_the_api_alone_is_validated_classified_and_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "a\nb\nc\n").unwrap();
    let workspace = Arc::new(Workspace::new(dir.path()).unwrap());
    let registry = registry();
    assert_eq!(registry.names(), ["line_count"]);
    assert_eq!(registry.specs()[0].name, "line_count");

    let call = ToolCall::new("c1", "line_count", json!({"path": "notes.txt"}));
    let prepared = registry.prepare(&call).unwrap();
    let intent = prepared.tool.intent(&prepared.arguments, &workspace);
    assert_eq!(
        (intent.kind, intent.scope),
        (IntentKind::Read, IntentScope::Workspace)
    );

    let (sender, mut progress) = mpsc::unbounded_channel();
    let mut context = ToolContext::new("c1", workspace.clone()).with_extension(Label("notes"));
    context.progress = keel_tool_api::ProgressSink::new("c1", sender);
    let output = prepared
        .tool
        .execute(prepared.arguments, context)
        .await
        .unwrap();
    assert_eq!(
        output.content,
        [UserContent::Text {
            text: "notes: 3".to_owned()
        }]
    );
    assert_eq!(output.details, Some(json!({"lines": 3})));
    let (call_id, streamed) = progress.recv().await.unwrap();
    assert_eq!(call_id, "c1");
    assert_eq!(
        streamed,
        keel_protocol::ToolProgress::new("stdout".to_owned(), "3\n".to_owned())
    );

    // Without the extension the tool falls back; it never panics.
    let bare = ToolContext::new("c2", workspace.clone());
    let output = LineCount
        .execute(json!({"path": "notes.txt"}), bare)
        .await
        .unwrap();
    assert_eq!(
        output,
        ToolOutput::text("lines: 3").with_details(json!({"lines": 3}))
    );

    // The workspace refuses a path outside it as a typed error.
    let outside = LineCount
        .execute(json!({"path": "../x"}), ToolContext::new("c3", workspace))
        .await
        .unwrap_err();
    assert_eq!(outside.code, ToolErrorCode::PathOutsideWorkspace);
}

#[test]
fn calls_that_fail_validation_never_reach_the_tool() {
    let registry = registry();
    let unknown = registry
        .prepare(&ToolCall::new("c", "word_count", json!({})))
        .err()
        .unwrap();
    assert_eq!(unknown.code, ToolErrorCode::UnknownTool);
    assert!(
        unknown.message.contains("line_count"),
        "{}",
        unknown.message
    );
    for arguments in [
        json!({}),
        json!({"path": 7}),
        json!({"path": "a", "extra": true}),
        json!("{not json"),
    ] {
        let error = registry
            .prepare(&ToolCall::new("c", "line_count", arguments.clone()))
            .err()
            .unwrap();
        assert_eq!(error.code, ToolErrorCode::InvalidArguments, "{arguments}");
    }
    // A second tool of the same name is refused.
    let mut registry = registry;
    assert!(registry.register(Arc::new(LineCount)).is_err());
}
