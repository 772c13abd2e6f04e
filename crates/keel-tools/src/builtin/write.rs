//! The `write` tool: creates or overwrites a file in the workspace.
//!
//! Parent directories are created as needed. The path is resolved through the
//! workspace first, then written with [`Workspace::write_file`]: beneath the
//! root handle, to a temporary file renamed over the target, so a write can
//! never land outside it (symlinks swapped in meanwhile included).

use std::sync::{Arc, OnceLock};

use keel_protocol::{ExecutionMode, IntentKind, OperationIntent, ToolErrorCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{arguments_schema, parse_arguments, path_intent, within_deadline};
use crate::tool::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::workspace::Workspace;

/// Writes a whole file.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct WriteTool;

/// The arguments of a `write` call; its schema is the tool's parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteArguments {
    /// Path of the file, relative to the workspace root.
    path: String,
    /// The complete new content of the file.
    content: String,
}

impl Tool for WriteTool {
    fn name(&self) -> &str {
        "write"
    }

    fn description(&self) -> &str {
        "Write a file in the workspace, creating parent directories as needed. \
         Overwrites the file if it exists. Prefer edit for changing part of an existing file."
    }

    fn parameters(&self) -> Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA
            .get_or_init(arguments_schema::<WriteArguments>)
            .clone()
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Sequential
    }

    fn intent(&self, arguments: &Value, workspace: &Workspace) -> OperationIntent {
        path_intent(IntentKind::Write, arguments, workspace)
    }

    fn idempotency(&self) -> keel_protocol::Idempotency {
        keel_protocol::Idempotency::WriteFile
    }

    fn planned_files(
        &self,
        arguments: &Value,
        workspace: &Workspace,
        _current: &dyn Fn(&std::path::Path) -> Option<Vec<u8>>,
    ) -> Vec<crate::evidence::PlannedFile> {
        let Ok(arguments) = WriteArguments::deserialize(arguments) else {
            return Vec::new();
        };
        let Ok(abs) = workspace.resolve(&arguments.path) else {
            return Vec::new();
        };
        vec![crate::evidence::PlannedFile::new(
            abs,
            Some(arguments.content.into_bytes()),
        )]
    }

    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(within_deadline(self.name(), async move {
            let arguments: WriteArguments = parse_arguments(self.name(), arguments)?;
            let abs = context.workspace.resolve(&arguments.path)?;
            let display = context.workspace.display(&abs);
            let bytes = arguments.content.len();
            let workspace = Arc::clone(&context.workspace);
            let written = tokio::task::spawn_blocking(move || {
                workspace.write_file(&abs, arguments.content.as_bytes())
            })
            .await
            .map_err(|error| {
                ToolError::new(ToolErrorCode::Io, format!("writing failed: {error}"))
            })?;
            written?;
            Ok(
                ToolOutput::text(format!("Wrote {bytes} bytes to {display}"))
                    .with_details(json!({"path": display, "bytes": bytes})),
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::{setup, text_of};

    #[tokio::test]
    async fn creates_parents_and_overwrites() {
        let (dir, context) = setup();
        let arguments = json!({"path": "a/b/c.txt", "content": "héllo"});
        let output = WriteTool.execute(arguments, context.clone()).await.unwrap();
        assert_eq!(text_of(&output.content), "Wrote 6 bytes to a/b/c.txt");
        assert_eq!(
            output.details.unwrap(),
            json!({"path": "a/b/c.txt", "bytes": 6})
        );
        let arguments = json!({"path": "a/b/c.txt", "content": "new"});
        WriteTool.execute(arguments, context).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "new"
        );
    }

    #[tokio::test]
    async fn refuses_outside_paths_and_symlink_escapes() {
        let (dir, context) = setup();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        for path in ["../escape.txt", "/tmp/keel-escape.txt", "out/x.txt"] {
            let arguments = json!({"path": path, "content": "x"});
            let error = WriteTool
                .execute(arguments, context.clone())
                .await
                .unwrap_err();
            assert_eq!(error.code, ToolErrorCode::PathOutsideWorkspace, "{path}");
        }
        assert!(!outside.path().join("x.txt").exists());
    }

    #[tokio::test]
    async fn refuses_directories() {
        let (dir, context) = setup();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let error = WriteTool
            .execute(json!({"path": "d", "content": ""}), context)
            .await
            .unwrap_err();
        assert_eq!(error.message, "`d` is a directory");
    }
}
