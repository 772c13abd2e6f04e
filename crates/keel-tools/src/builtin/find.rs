//! The `find` tool: lists files and directories whose name or path matches
//! a glob, gitignore-aware (see `walk`), sorted, within a limit. Each match
//! is checked to lie beneath the root through no symlink
//! ([`Workspace::is_beneath`]) before it is listed.

use std::sync::{Arc, Mutex, OnceLock};

use ignore::WalkState;
use keel_protocol::{ExecutionMode, IntentKind, OperationIntent, ToolErrorCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    arguments_schema, budgeted, parse_arguments, path_intent_or_root, walk, within_deadline,
};
use crate::tool::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::workspace::Workspace;

const DEFAULT_LIMIT: usize = 1000;
const MAX_LIMIT: usize = 100_000;

/// Finds paths by glob.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct FindTool;

/// The arguments of a `find` call; its schema is the tool's parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FindArguments {
    /// Glob to match.
    #[schemars(length(min = 1))]
    pattern: String,
    /// Directory to search, relative to the workspace root (default: the root).
    path: Option<String>,
    /// Maximum number of results (default 1000).
    #[schemars(range(min = 1, max = MAX_LIMIT))]
    limit: Option<usize>,
}

impl Tool for FindTool {
    fn name(&self) -> &str {
        "find"
    }

    fn description(&self) -> &str {
        "Find files and directories by glob (e.g. `*.rs`, `Cargo.toml`, `src/**/test_*.py`). A pattern without `/` \
         matches names; with `/`, paths relative to the search directory. Respects .gitignore. Directories end in `/`."
    }

    fn parameters(&self) -> Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA
            .get_or_init(arguments_schema::<FindArguments>)
            .clone()
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
            let arguments: FindArguments = parse_arguments(self.name(), arguments)?;
            let start = context
                .workspace
                .resolve(arguments.path.as_deref().unwrap_or("."))?;
            if !start.is_dir() {
                return Err(ToolError::new(
                    ToolErrorCode::NotFound,
                    format!(
                        "`{}` is not a directory",
                        arguments.path.as_deref().unwrap_or(".")
                    ),
                ));
            }
            let by_path = arguments.pattern.contains('/');
            let glob = globset::GlobBuilder::new(&arguments.pattern)
                .literal_separator(by_path)
                .build()
                .map_err(|error| {
                    ToolError::new(
                        ToolErrorCode::InvalidArguments,
                        format!("Invalid glob: {error}"),
                    )
                })?
                .compile_matcher();
            walk::start_is_safe(context.workspace.root(), &start)
                .map_err(|why| ToolError::new(ToolErrorCode::ToolError, why))?;
            // Cancelled with the run, or when the deadline drops this call.
            let cancel = context.cancel.child_token();
            let _stop_on_drop = cancel.clone().drop_guard();
            let workspace = Arc::clone(&context.workspace);
            let found = tokio::task::spawn_blocking(move || {
                let found = Arc::new(Mutex::new(Vec::new()));
                walk::parallel(&start).run(|| {
                    let (found, glob, start, cancel, workspace) = (
                        Arc::clone(&found),
                        glob.clone(),
                        start.clone(),
                        cancel.clone(),
                        Arc::clone(&workspace),
                    );
                    Box::new(move |entry| {
                        if cancel.is_cancelled() {
                            return WalkState::Quit;
                        }
                        let Ok(entry) = entry else {
                            return WalkState::Continue;
                        };
                        if entry.depth() == 0 {
                            return WalkState::Continue;
                        }
                        let relative = walk::relative(&start, entry.path());
                        let candidate = if by_path {
                            relative.as_str()
                        } else {
                            entry.file_name().to_str().unwrap_or_default()
                        };
                        // The walk goes by name: a directory swapped for a
                        // symlink meanwhile could list names from outside,
                        // so a match is kept only if it is still beneath.
                        if glob.is_match(candidate) && workspace.is_beneath(entry.path()) {
                            let is_dir = entry.file_type().is_some_and(|kind| kind.is_dir());
                            if let Ok(mut found) = found.lock() {
                                found.push(if is_dir {
                                    format!("{relative}/")
                                } else {
                                    relative
                                });
                            }
                        }
                        WalkState::Continue
                    })
                });
                Arc::try_unwrap(found)
                    .ok()
                    .and_then(|found| found.into_inner().ok())
                    .unwrap_or_default()
            })
            .await
            .map_err(|error| {
                ToolError::new(ToolErrorCode::ToolError, format!("find failed: {error}"))
            })?;
            if context.cancel.is_cancelled() {
                return Err(ToolError::cancelled());
            }
            Ok(listing(
                &context.outputs,
                found,
                arguments.limit.unwrap_or(DEFAULT_LIMIT),
                &arguments.pattern,
            ))
        }))
    }
}

fn listing(
    outputs: &crate::outputs::OutputStore,
    mut found: Vec<String>,
    limit: usize,
    pattern: &str,
) -> ToolOutput {
    if found.is_empty() {
        return ToolOutput::text(format!("No paths match `{pattern}`."))
            .with_details(json!({"results": 0}));
    }
    found.sort();
    let total = found.len();
    let mut notes = Vec::new();
    if total > limit {
        found.truncate(limit);
        notes.push(format!(
            "Showing {limit} of {total} results; narrow the pattern or path, or raise limit."
        ));
    }
    let text = found.join("\n") + "\n";
    let (shown, truncated, full) = budgeted(outputs, "find", &text, &mut notes);
    ToolOutput::text(shown).with_details(json!({"results": total, "limit_reached": total > limit, "truncated": truncated, "full_output": full}))
}
