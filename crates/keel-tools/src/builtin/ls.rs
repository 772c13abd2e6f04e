//! The `ls` tool: one directory's entries, sorted, directories marked with
//! `/`, dotfiles included, within a limit. The directory is read from a
//! handle opened beneath the root ([`Workspace::list_dir`]).

use std::sync::Arc;

use std::sync::OnceLock;

use keel_protocol::{ExecutionMode, IntentKind, OperationIntent, ToolErrorCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    arguments_schema, budgeted, io_error, parse_arguments, path_intent_or_root, within_deadline,
};
use crate::tool::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::workspace::Workspace;

const DEFAULT_LIMIT: usize = 500;
/// The largest `limit` a call may ask for.
const MAX_LIMIT: usize = 100_000;

/// Lists a directory.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct LsTool;

/// The arguments of an `ls` call; its schema is the tool's parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LsArguments {
    /// Directory, relative to the workspace root (default: the root).
    path: Option<String>,
    /// Maximum number of entries (default 500).
    #[schemars(range(min = 1, max = MAX_LIMIT))]
    limit: Option<usize>,
}

impl Tool for LsTool {
    fn name(&self) -> &str {
        "ls"
    }

    fn description(&self) -> &str {
        "List a directory of the workspace: entries sorted by name, directories ending in `/`, dotfiles included."
    }

    fn parameters(&self) -> Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA.get_or_init(arguments_schema::<LsArguments>).clone()
    }

    fn idempotency(&self) -> keel_protocol::Idempotency {
        keel_protocol::Idempotency::ReadOnly
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }

    fn intent(&self, arguments: &Value, workspace: &Workspace) -> OperationIntent {
        path_intent_or_root(IntentKind::Read, arguments, workspace)
    }

    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(within_deadline(self.name(), async move {
            let arguments: LsArguments = parse_arguments(self.name(), arguments)?;
            let shown_path = arguments.path.as_deref().unwrap_or(".");
            let dir = context.workspace.resolve(shown_path)?;
            let workspace = Arc::clone(&context.workspace);
            let listed = tokio::task::spawn_blocking(move || workspace.list_dir(&dir))
                .await
                .map_err(|error| {
                    ToolError::new(ToolErrorCode::Io, format!("listing failed: {error}"))
                })?;
            let entries = listed.map_err(|error| match error.raw_os_error() {
                Some(code) if code == nix::libc::ENOTDIR => ToolError::new(
                    ToolErrorCode::ToolError,
                    format!("`{shown_path}` is not a directory"),
                ),
                _ => io_error(shown_path, &error),
            })?;
            let mut names: Vec<String> = entries
                .into_iter()
                .map(|(name, is_dir)| if is_dir { format!("{name}/") } else { name })
                .collect();
            if names.is_empty() {
                return Ok(
                    ToolOutput::text("(empty directory)").with_details(json!({"entries": 0}))
                );
            }
            names.sort();
            let total = names.len();
            let limit = arguments.limit.unwrap_or(DEFAULT_LIMIT);
            let mut notes = Vec::new();
            if total > limit {
                names.truncate(limit);
                notes.push(format!(
                    "Showing {limit} of {total} entries; raise limit to see more."
                ));
            }
            let (shown, truncated, full) = budgeted(
                &context.outputs,
                "ls",
                &(names.join("\n") + "\n"),
                &mut notes,
            );
            Ok(ToolOutput::text(shown).with_details(json!({"entries": total, "limit_reached": total > limit, "truncated": truncated, "full_output": full})))
        }))
    }
}
