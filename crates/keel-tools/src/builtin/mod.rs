//! The built-in coding tools: `read`, `write`, `edit` and `bash` (the
//! defaults), and `grep`, `find` and `ls`.
//!
//! Every tool resolves paths through the [`Workspace`], so none of them can
//! touch a file outside it; every failure is a typed [`ToolError`]; every
//! result fits the limits in [`crate::truncate`]. The helpers here are shared
//! by the tools: argument parsing and schemas (`schema.rs`), path intents and
//! reading a text file.

mod bash;
mod edit;
mod find;
mod grep;
pub mod image;
mod ls;
mod output;
mod process;
mod read;
mod schema;
mod walk;
mod write;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use keel_protocol::{IntentKind, IntentScope, OperationIntent, ToolErrorCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use bash::{BashOptions, BashTool, CONTAINER_CLIENT_ENV, ContainerExec, Executor};
pub use edit::EditTool;
pub use find::FindTool;
pub use grep::GrepTool;
pub use ls::LsTool;
pub use read::ReadTool;
pub use write::WriteTool;

use self::schema::arguments_schema;
use crate::tool::{Tool, ToolError};
use crate::workspace::{Workspace, WorkspaceError};

/// The default tool set, in the order offered to the model: read, write, edit, bash.
pub fn default_tools(options: BashOptions) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadTool),
        Arc::new(WriteTool),
        Arc::new(EditTool),
        Arc::new(BashTool::new(options)),
    ]
}

/// Every built-in tool: the defaults, then grep, find and ls.
pub fn all_tools(options: BashOptions) -> Vec<Arc<dyn Tool>> {
    let mut tools = default_tools(options);
    tools.push(Arc::new(GrepTool));
    tools.push(Arc::new(FindTool));
    tools.push(Arc::new(LsTool));
    tools
}

/// Fits `text` into the shared output budget (head kept); when cut, saves
/// the whole text for `read` and says so. `notes` are appended after it.
/// Returns `(shown text, whether cut, keel-output reference)`.
fn budgeted(
    outputs: &crate::outputs::OutputStore,
    tool: &str,
    text: &str,
    notes: &mut Vec<String>,
) -> (String, bool, Option<String>) {
    let page = crate::truncate::truncate_head(
        text,
        crate::truncate::MAX_LINES,
        crate::truncate::MAX_BYTES,
    );
    let mut full = None;
    if page.truncated {
        full = outputs.save(tool, text.as_bytes());
        let shown = format!(
            "Output cut to {} of {} lines.",
            page.shown_lines, page.total_lines
        );
        notes.insert(
            0,
            match &full {
                Some(reference) => format!("{shown} Full output: read path `{reference}`."),
                None => format!("{shown} The full output could not be saved."),
            },
        );
    }
    let mut shown = page.content.trim_end_matches('\n').to_owned();
    for note in notes.iter() {
        shown.push_str(&format!("\n\n[{note}]"));
    }
    (shown, page.truncated, full)
}

/// Like [`path_intent`], with the workspace root when no `path` is given.
fn path_intent_or_root(
    kind: IntentKind,
    arguments: &Value,
    workspace: &Workspace,
) -> OperationIntent {
    if arguments.get("path").is_some() {
        return path_intent(kind, arguments, workspace);
    }
    {
        let mut operation_intent = OperationIntent::new(kind, IntentScope::Workspace);
        operation_intent.targets = vec![".".to_owned()];
        operation_intent
    }
}

/// Deserializes already-validated arguments into a tool's argument struct.
fn parse_arguments<T: DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, ToolError> {
    serde_json::from_value(arguments).map_err(|error| {
        ToolError::new(
            ToolErrorCode::InvalidArguments,
            format!("Invalid arguments for `{tool}`: {error}"),
        )
    })
}

/// The intent of a call whose `path` argument names its one target.
///
/// A write into git's or Keel's own metadata ([`Workspace::is_protected`]:
/// `.git`, `.keel`) has scope `metadata`, which the policy keeps from
/// writes like the outside: it asks in `auto` and `ask`, is denied in
/// `plan`, and runs in `full` or once the host approved it. A hook or a
/// config written there would otherwise wait for the user's next `git`.
fn path_intent(kind: IntentKind, arguments: &Value, workspace: &Workspace) -> OperationIntent {
    let Some(path) = arguments.get("path").and_then(Value::as_str) else {
        return OperationIntent::new(kind, IntentScope::Unknown);
    };
    let (scope, target) = match workspace.resolve(path) {
        Ok(abs) if kind == IntentKind::Write && workspace.is_protected(&abs) => {
            (IntentScope::Metadata, workspace.display(&abs))
        }
        Ok(abs) => (IntentScope::Workspace, workspace.display(&abs)),
        Err(_) => (IntentScope::Outside, path.to_owned()),
    };
    {
        let mut operation_intent = OperationIntent::new(kind, scope);
        operation_intent.targets = vec![target];
        operation_intent
    }
}

/// Maps an I/O error on `display` to a tool error.
fn io_error(display: &str, error: &io::Error) -> ToolError {
    let workspace_error = if error.kind() == io::ErrorKind::NotFound {
        WorkspaceError::NotFound {
            path: display.to_owned(),
        }
    } else {
        WorkspaceError::Io {
            path: display.to_owned(),
            source: crate::workspace::owned(error),
        }
    };
    workspace_error.into()
}

/// A UTF-8 file read from the workspace.
struct TextFile {
    /// Absolute resolved path.
    abs: PathBuf,
    /// Workspace-relative display path.
    display: String,
    /// The whole content.
    text: String,
}

/// Reads a workspace file that must be UTF-8 text without NUL bytes.
///
/// `refusal` completes the binary-file message, e.g. "read cannot show it".
async fn read_text_file(
    workspace: &Arc<Workspace>,
    path: &str,
    refusal: &str,
) -> Result<TextFile, ToolError> {
    let (abs, display, bytes) = load_file(workspace, path).await?;
    let text = decode_text(&display, bytes, refusal)?;
    Ok(TextFile { abs, display, text })
}

/// Reads a workspace file's bytes: `(absolute path, display path, bytes)`.
async fn load_file(
    workspace: &Arc<Workspace>,
    path: &str,
) -> Result<(PathBuf, String, Vec<u8>), ToolError> {
    let abs = workspace.resolve(path)?;
    let display = workspace.display(&abs);
    let (workspace, target, shown) = (Arc::clone(workspace), abs.clone(), display.clone());
    let bytes = tokio::task::spawn_blocking(move || read_regular(&workspace, &target, &shown))
        .await
        .map_err(|error| ToolError::new(ToolErrorCode::Io, format!("reading failed: {error}")))??;
    Ok((abs, display, bytes))
}

/// Opens a resolved path (see [`Workspace::open_read`]), refuses anything
/// but a regular file, and reads at most [`MAX_FILE_BYTES`], whatever the
/// file's metadata said (it may grow while it is read).
fn read_regular(
    workspace: &Workspace,
    abs: &std::path::Path,
    display: &str,
) -> Result<Vec<u8>, ToolError> {
    let mut file = workspace.open_read(abs)?;
    match crate::beneath::regular(&file) {
        Ok(Ok(_)) => {}
        Ok(Err(crate::beneath::FileKind::Directory)) => {
            return Err(ToolError::new(
                ToolErrorCode::ToolError,
                format!("`{display}` is a directory; use ls to list it"),
            ));
        }
        Ok(Err(kind)) => {
            let kind = kind.describe().to_owned();
            let path = display.to_owned();
            return Err(WorkspaceError::NotRegularFile { path, kind }.into());
        }
        Err(error) => return Err(io_error(display, &error)),
    }
    match crate::beneath::read_bounded(&mut file, MAX_FILE_BYTES) {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(len)) => Err(ToolError::new(
            ToolErrorCode::ToolError,
            format!(
                "`{display}` is {len} bytes, over the {MAX_FILE_BYTES} byte limit for reading whole files; \
                 use bash (e.g. head, sed -n, grep) to look at parts of it"
            ),
        )),
        Err(error) => Err(io_error(display, &error)),
    }
}

/// How long one call of a file tool may take before it is abandoned.
const FILE_TOOL_DEADLINE: Duration = Duration::from_secs(60);

/// Runs a file tool's work under [`FILE_TOOL_DEADLINE`]: past it the call
/// fails with `timeout` (and its `cancel` token, if the work watches one,
/// is cancelled as the work is dropped).
async fn within_deadline<T>(
    tool: &str,
    work: impl Future<Output = Result<T, ToolError>>,
) -> Result<T, ToolError> {
    match tokio::time::timeout(FILE_TOOL_DEADLINE, work).await {
        Ok(outcome) => outcome,
        Err(_) => Err(ToolError::new(
            ToolErrorCode::Timeout,
            format!(
                "`{tool}` did not finish within {} s and was abandoned",
                FILE_TOOL_DEADLINE.as_secs()
            ),
        )),
    }
}

/// The largest file `read` and `edit` load whole.
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Decodes file bytes as UTF-8 text without NUL bytes, or names the binary type.
fn decode_text(display: &str, bytes: Vec<u8>, refusal: &str) -> Result<String, ToolError> {
    match String::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => Ok(text),
        Ok(text) => Err(binary(
            display,
            image::binary_kind(text.as_bytes()),
            refusal,
        )),
        Err(error) => Err(binary(
            display,
            image::binary_kind(error.as_bytes()),
            refusal,
        )),
    }
}

fn binary(display: &str, kind: &str, refusal: &str) -> ToolError {
    ToolError::new(
        ToolErrorCode::BinaryFile,
        format!("`{display}` is a binary file ({kind}); {refusal}"),
    )
}

#[cfg(test)]
mod test_support {
    use std::sync::Arc;

    use crate::tool::ToolContext;
    use crate::workspace::Workspace;

    /// A temporary workspace and a context rooted in it.
    pub(crate) fn setup() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let context = ToolContext::new("call-1", Arc::new(Workspace::new(dir.path()).unwrap()))
            .with_extension(crate::ShellExecution::new(crate::sandbox::Sandbox::new(
                crate::sandbox::SandboxLevel::WorkspaceWrite,
            )));
        (dir, context)
    }

    /// The text of a tool output's first block.
    pub(crate) fn text_of(content: &[keel_protocol::UserContent]) -> String {
        match content.first() {
            Some(keel_protocol::UserContent::Text { text }) => text.clone(),
            other => panic!("expected a text block, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use keel_protocol::ExecutionMode;
    use serde_json::json;

    use super::*;

    #[test]
    fn default_tools_are_read_write_edit_bash() {
        let tools = default_tools(BashOptions::default());
        let names: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
        assert_eq!(names, ["read", "write", "edit", "bash"]);
        assert_eq!(tools[0].execution_mode(), ExecutionMode::Parallel);
        assert!(
            tools[1..]
                .iter()
                .all(|tool| tool.execution_mode() == ExecutionMode::Sequential)
        );
    }

    #[test]
    fn schemas_are_strict_objects_with_described_properties() {
        let mut registry = crate::ToolRegistry::new();
        for tool in default_tools(BashOptions::default()) {
            let schema = tool.parameters();
            assert_eq!(schema["type"], "object");
            assert_eq!(schema["additionalProperties"], false);
            assert!(schema["required"].is_array());
            for (name, property) in schema["properties"].as_object().unwrap() {
                assert!(
                    property["description"].is_string(),
                    "{}.{name} lacks a description",
                    tool.name()
                );
            }
            registry.register(tool).unwrap();
        }
    }

    #[test]
    fn path_intent_classifies_scope() {
        let (_dir, context) = test_support::setup();
        let intent = path_intent(
            IntentKind::Read,
            &json!({"path": "./a/../b.txt"}),
            &context.workspace,
        );
        assert_eq!(intent.scope, IntentScope::Workspace);
        assert_eq!(intent.targets, ["b.txt"]);
        let intent = path_intent(
            IntentKind::Write,
            &json!({"path": "/etc/passwd"}),
            &context.workspace,
        );
        assert_eq!(intent.scope, IntentScope::Outside);
        assert_eq!(intent.targets, ["/etc/passwd"]);
        let intent = path_intent(
            IntentKind::Write,
            &json!({"path": "./.git/hooks/../config"}),
            &context.workspace,
        );
        assert_eq!(intent.scope, IntentScope::Metadata);
        assert_eq!(intent.targets, [".git/config"]);
        let intent = path_intent(
            IntentKind::Read,
            &json!({"path": ".git/config"}),
            &context.workspace,
        );
        assert_eq!(intent.scope, IntentScope::Workspace);
    }
}
