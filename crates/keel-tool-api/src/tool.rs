//! The `Tool` trait and what a tool receives and returns.

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use keel_protocol::{
    ExecutionMode, Idempotency, IntentKind, IntentScope, OperationIntent, ToolErrorCode,
    ToolProgress, UserContent,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::env::HostEnv;
use crate::evidence::PlannedFile;
use crate::extensions::Extensions;
use crate::outputs::OutputStore;
use crate::workspace::{Workspace, WorkspaceError};

/// The future a tool's execution returns.
pub type ToolFuture<'a> = BoxFuture<'a, Result<ToolOutput, ToolError>>;

/// A capability the model can call.
pub trait Tool: Send + Sync {
    /// Unique name the model calls the tool by.
    fn name(&self) -> &str;

    /// What the tool does and when to use it, for the model.
    fn description(&self) -> &str;

    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;

    /// Whether calls may run concurrently with other parallel calls.
    fn execution_mode(&self) -> ExecutionMode;

    /// What a call with these (already validated) arguments would do.
    ///
    /// The default classifies the call as `custom` with unknown scope, which
    /// the policy never treats as safe.
    fn intent(&self, _arguments: &Value, _workspace: &Workspace) -> OperationIntent {
        OperationIntent::new(IntentKind::Custom, IntentScope::Unknown)
    }

    /// The call's intent and why it is what it is, one short sentence each
    /// (the shell analysis's findings, for `bash`). The kernel adds the
    /// reasons to a permission request, so the host sees why it is asked;
    /// they are stored with the decision, so they must hold no secrets.
    /// The default is [`Tool::intent`] with no reasons.
    fn classify(&self, arguments: &Value, workspace: &Workspace) -> (OperationIntent, Vec<String>) {
        (self.intent(arguments, workspace), Vec::new())
    }

    /// [`Tool::classify`], and whether the call is
    /// [`Classification::confinable`]. The default is never confinable:
    /// only a tool that runs its call in Keel's OS sandbox and knows what
    /// the call needs can say so.
    fn classification(&self, arguments: &Value, workspace: &Workspace) -> Classification {
        let (intent, reasons) = self.classify(arguments, workspace);
        Classification::new(intent, reasons)
    }

    /// What a host's "always" answer for this call binds to: its targets as
    /// they resolve now ([`crate::binding`]). The kernel stores a hash of
    /// it in the session rule and applies the rule to a later call only
    /// while that call's binding is the same, so a rule never follows a
    /// re-pointed symlink. `None` binds to nothing: the answer then decides
    /// no later call. `env` is the host's environment snapshot the call
    /// would run with (the one the sandbox configuration holds): where a
    /// command's programs and `~` resolve. The default binds a
    /// string `path` argument ([`crate::binding::path`]) and otherwise only
    /// the arguments' text.
    fn approval_binding(
        &self,
        arguments: &Value,
        workspace: &Workspace,
        _env: &HostEnv,
    ) -> Option<Value> {
        match arguments.get("path") {
            Some(Value::String(path)) => crate::binding::path(workspace, path),
            _ => Some(Value::Null),
        }
    }

    /// How a call cut short by a crash may be recovered (the effect
    /// journal, docs/recovery.md). The default, `undeclared`, means never run again.
    fn idempotency(&self) -> Idempotency {
        Idempotency::Undeclared
    }

    /// The files a call with these (validated) arguments will change and the
    /// content it will leave in each where the tool can tell, given what
    /// each holds now (`current(abs)`, `None` when absent). Recorded as
    /// hashes before the call runs; the default names none.
    fn planned_files(
        &self,
        _arguments: &Value,
        _workspace: &Workspace,
        _current: &dyn Fn(&Path) -> Option<Vec<u8>>,
    ) -> Vec<PlannedFile> {
        Vec::new()
    }

    /// Runs the call. Arguments have been validated against [`Tool::parameters`].
    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_>;
}

/// What a tool makes of one call before it runs ([`Tool::classification`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Classification {
    /// The call's intent.
    pub intent: OperationIntent,
    /// Why the intent is what it is ([`Tool::classify`]).
    pub reasons: Vec<String>,
    /// Whether the call can be left to the OS sandbox when its intent is
    /// only unresolved: the tool runs its processes in Keel's sandbox at
    /// the level the kernel gives (never in a container or outside it),
    /// and nothing the tool found needs what that sandbox refuses (the
    /// network, anything outside the workspace, writing `.git`/`.keel`,
    /// other privileges). The kernel still checks that the sandbox is
    /// enforced before it relies on this.
    pub confinable: bool,
}

impl Classification {
    /// An intent with its reasons, not confinable.
    pub fn new(intent: OperationIntent, reasons: Vec<String>) -> Self {
        Self {
            intent,
            reasons,
            confinable: false,
        }
    }

    /// Says whether the call is confinable.
    pub fn confinable(mut self, confinable: bool) -> Self {
        self.confinable = confinable;
        self
    }
}

/// Everything a running tool may use.
#[derive(Clone)]
#[non_exhaustive]
pub struct ToolContext {
    /// The call being executed.
    pub call_id: String,
    /// The rooted workspace.
    pub workspace: Arc<Workspace>,
    /// Cancelled when the run is cancelled; tools must stop promptly.
    pub cancel: CancellationToken,
    /// Where streamed output goes.
    pub progress: ProgressSink,
    /// The kernel's store of full outputs: a cut result is saved here, and
    /// `read` resolves `keel-output:` references here and nowhere else.
    pub outputs: OutputStore,
    /// What only some tools understand, by type ([`Extensions`]): the
    /// kernel puts keel-tools' `ShellExecution` here (the OS sandbox, its
    /// namespace holders and the call's command receipts) for `bash`.
    pub extensions: Extensions,
}

impl ToolContext {
    /// The context of call `call_id` in `workspace`: never cancelled,
    /// output discarded, an output store of its own, no extensions.
    pub fn new(call_id: impl Into<String>, workspace: Arc<Workspace>) -> Self {
        Self {
            call_id: call_id.into(),
            workspace,
            cancel: CancellationToken::new(),
            progress: ProgressSink::discard(),
            outputs: OutputStore::default(),
            extensions: Extensions::new(),
        }
    }

    /// The same context with `value` among its [`Extensions`].
    pub fn with_extension<T: std::any::Any + Send + Sync>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The extension of type `T`, if the context carries one.
    pub fn extension<T: std::any::Any + Send + Sync>(&self) -> Option<&T> {
        self.extensions.get::<T>()
    }
}

/// Sends streamed tool output to the kernel; dropping output is harmless.
#[derive(Clone, Debug)]
pub struct ProgressSink {
    sender: Option<mpsc::UnboundedSender<(String, ToolProgress)>>,
    call_id: String,
}

impl ProgressSink {
    /// A sink that forwards `(call_id, progress)` pairs to `sender`.
    pub fn new(
        call_id: impl Into<String>,
        sender: mpsc::UnboundedSender<(String, ToolProgress)>,
    ) -> Self {
        Self {
            sender: Some(sender),
            call_id: call_id.into(),
        }
    }

    /// A sink that discards everything.
    pub fn discard() -> Self {
        Self {
            sender: None,
            call_id: String::new(),
        }
    }

    /// Reports new output on `stream`.
    pub fn send(&self, stream: &str, data: String) {
        if let Some(sender) = &self.sender {
            let progress = ToolProgress::new(stream.to_owned(), data);
            // The receiver is gone only when the run is over; output is then moot.
            let _ = sender.send((self.call_id.clone(), progress));
        }
    }
}

/// A successful tool outcome.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ToolOutput {
    /// What the model sees.
    pub content: Vec<UserContent>,
    /// Structured data for hosts; not sent to the model.
    pub details: Option<Value>,
}

impl ToolOutput {
    /// An output holding `content` (text, images) and no details.
    pub fn new(content: Vec<UserContent>) -> Self {
        Self {
            content,
            details: None,
        }
    }

    /// An output holding one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![UserContent::Text { text: text.into() }],
            details: None,
        }
    }

    /// Adds host-facing details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// A typed tool failure, shown to the model as an error ToolResult.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ToolError {
    /// Machine-readable code.
    pub code: ToolErrorCode,
    /// Explanation for the model and the host.
    pub message: String,
    /// Output produced before the failure (e.g. a failed command's output).
    pub content: Vec<UserContent>,
    /// Structured data for hosts.
    pub details: Option<Value>,
}

impl ToolError {
    /// An error with a code and message and no output.
    pub fn new(code: ToolErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            content: Vec::new(),
            details: None,
        }
    }

    /// Attaches output produced before the failure.
    pub fn with_output(mut self, output: ToolOutput) -> Self {
        self.content = output.content;
        self.details = output.details;
        self
    }

    /// The error for a cancelled call.
    pub fn cancelled() -> Self {
        Self::new(ToolErrorCode::Cancelled, "Cancelled: the run was cancelled")
    }
}

impl From<WorkspaceError> for ToolError {
    fn from(error: WorkspaceError) -> Self {
        let code = match &error {
            WorkspaceError::NotFound { .. } => ToolErrorCode::NotFound,
            WorkspaceError::Io { .. } => ToolErrorCode::Io,
            WorkspaceError::NotRegularFile { .. } | WorkspaceError::IsADirectory { .. } => {
                ToolErrorCode::ToolError
            }
            _ => ToolErrorCode::PathOutsideWorkspace,
        };
        Self::new(code, error.to_string())
    }
}
