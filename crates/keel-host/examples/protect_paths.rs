//! An extension: a tool of its own (`count_lines`), a hook that blocks
//! edits under a protected directory, and an entry kind (`protect.audit`)
//! that records each edit it judged. A host adds it through
//! `HostConfig::extensions`; the kernel checks everything it answers
//! (docs/extensions.md).
//!
//! Run with `cargo run -p keel-host --example protect_paths`.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use keel_host::{HostConfig, ProviderChoice};
use keel_kernel::extension::HookError;
use keel_kernel::{Extension, Hook, HookEvent, HookPoint, HookReply, RunSpec};
use keel_protocol::{
    EntryPayload, ExecutionMode, IntentKind, OperationIntent, PermissionMode, RunEventKind,
    RunResult, RunState, ToolErrorCode,
};
use keel_provider::Script;
use keel_session::{MemoryStore, SessionStore};
use keel_tools::untrusted::{self, Limit, Origin};
use keel_tools::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput, Workspace};
use serde_json::{Value, json};

/// The entry kind the extension records its judgements in.
pub const AUDIT_KIND: &str = "protect.audit";

/// The extension: `count_lines`, and a `tool_call` hook on `write` and
/// `edit` that blocks any path under `protected` and records each judgement.
pub fn extension(protected: &str) -> Extension {
    let protected = protected.trim_end_matches('/').to_owned();
    let guard = move |event: HookEvent| {
        let path = event.payload["arguments"]["path"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        // Judged as the path resolves now (`./`, `..`, an absolute path,
        // a symlink), not as it is spelled: the kernel asks again just
        // before a later call of a batch runs (`recheck`).
        let workspace = Path::new(event.payload["workspace"].as_str().unwrap_or_default());
        let guarded = resolve(workspace, &protected);
        let blocked = resolve(workspace, &path).starts_with(&guarded);
        let prefix = format!("{protected}/");
        let tool = event.payload["tool_name"].clone();
        let reply = match blocked {
            true => HookReply::block(
                "protected",
                format!("{prefix} is protected; edit elsewhere"),
            ),
            false => HookReply::observe(),
        };
        let reply = reply.with_entry(
            AUDIT_KIND,
            json!({"tool": tool, "path": path, "blocked": blocked}),
        );
        async move { Ok::<_, HookError>(reply) }
    };
    Extension::new("protect-paths")
        .version("1.0.0")
        .tool(Arc::new(CountLines))
        .entry_kind(AUDIT_KIND, |data: &Value| {
            let fits = data["tool"].is_string()
                && data["path"].is_string()
                && data["blocked"].is_boolean();
            match fits {
                true => Ok(()),
                false => Err("an audit entry needs `tool`, `path` and `blocked`".into()),
            }
        })
        .hook(Hook::new([HookPoint::ToolCall], Arc::new(guard)).matching("write|edit"))
}

/// `path` (relative to `workspace`, or absolute) as it resolves now: `.`
/// and `..` applied, then the deepest existing ancestor's symlinks
/// resolved.
fn resolve(workspace: &Path, path: &str) -> PathBuf {
    let mut normal = PathBuf::new();
    for part in workspace.join(path).components() {
        match part {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    let mut existing = normal.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => break,
        }
    }
    let mut resolved = existing
        .canonicalize()
        .unwrap_or_else(|_| existing.to_path_buf());
    resolved.extend(rest.iter().rev());
    resolved
}

/// The largest file `count_lines` reads.
const MAX_COUNTED_BYTES: u64 = 16 * 1024 * 1024;

/// Counts the lines of a workspace file.
pub struct CountLines;

impl Tool for CountLines {
    fn name(&self) -> &str {
        "count_lines"
    }

    fn description(&self) -> &str {
        "Counts the lines of a text file in the workspace."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "The file, relative to the workspace."}},
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
            let path = arguments["path"].as_str().unwrap_or_default().to_owned();
            let file = context.workspace.resolve(&path)?;
            // The model chose the path and a command may have planted the
            // file: read it as Keel reads every such file — beneath the
            // workspace, no symlink out, a regular file, non-blocking,
            // capped; the error never quotes its contents.
            let root = context.workspace.root().to_path_buf();
            let read = tokio::task::spawn_blocking(move || {
                let rel = file.strip_prefix(&root).unwrap_or(&file).to_path_buf();
                untrusted::read(
                    Origin::Beneath {
                        root: &root,
                        rel: &rel,
                    },
                    Limit::Refuse(MAX_COUNTED_BYTES),
                )
            })
            .await
            .map_err(|error| ToolError::new(ToolErrorCode::Io, error.to_string()))?;
            let contents =
                read.map_err(|error| ToolError::new(ToolErrorCode::Io, error.to_string()))?;
            let text = String::from_utf8_lossy(&contents.bytes);
            Ok(ToolOutput::text(format!(
                "{path}: {} lines",
                text.lines().count()
            )))
        })
    }
}

const SCRIPT: &str = r#"{"turns":[
  {"content":[{"type":"tool_call","name":"write","arguments":{"path":"vendor/lib.txt","content":"patched\n"}}]},
  {"expect":{"tool_result_contains":"protected"},"content":[{"type":"tool_call","name":"write","arguments":{"path":"notes.txt","content":"one\ntwo\n"}}]},
  {"content":[{"type":"tool_call","name":"count_lines","arguments":{"path":"notes.txt"}}]},
  {"expect":{"tool_result_contains":"2 lines"},"content":[{"type":"text","text":"vendor/ is protected, so the notes went to notes.txt (2 lines)."}]}]}"#;

/// Runs the scripted task with the extension in `workspace`: the run's
/// result and the audit entries it recorded.
pub async fn run_in(
    workspace: &std::path::Path,
) -> Result<(RunResult, Vec<Value>), Box<dyn std::error::Error>> {
    let store = Arc::new(MemoryStore::new());
    let mut config = HostConfig::new(ProviderChoice::Script {
        script: Script::from_json(SCRIPT)?,
        model: None,
    })
    .workspace(workspace);
    config.extensions.push(extension("vendor"));
    let kernel = config.kernel(store.clone())?;
    let run = kernel
        .create_run(
            RunSpec::new("Note two lines, and patch vendor/lib.txt").mode(PermissionMode::Auto),
        )
        .await?;
    let mut events = run.events()?;
    while let Some(event) = events.next().await {
        match &event.kind {
            RunEventKind::HookBlocked {
                extension, message, ..
            } => {
                println!("{extension} blocked a call: {message}");
            }
            RunEventKind::ToolExecutionEnd { result } => {
                println!(
                    "{} -> {:?}: {}",
                    result.tool_name,
                    result.status,
                    result.text()
                );
            }
            _ => {}
        }
    }
    let result = run.result().await;
    let audit = store
        .context_branch(&result.session_id)
        .await?
        .into_iter()
        .filter_map(|entry| match entry.payload {
            EntryPayload::Custom { custom_kind, data } if custom_kind == AUDIT_KIND => Some(data),
            _ => None,
        })
        .collect();
    Ok((result, audit))
}

#[tokio::main]
/// Runs the example in a temporary workspace and checks what it did.
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let project = tempfile::tempdir()?;
    std::fs::create_dir(project.path().join("vendor"))?;
    let (result, audit) = run_in(project.path()).await?;
    for entry in &audit {
        println!("audit: {entry}");
    }
    if result.state != RunState::Settled {
        return Err(format!("the run ended {:?}", result.state).into());
    }
    if project.path().join("vendor/lib.txt").exists() {
        return Err("the protected file was written".into());
    }
    Ok(())
}
