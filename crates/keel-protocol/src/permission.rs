//! Permission modes, Operation Intents and permission decisions.
//!
//! The host fixes a [`PermissionMode`] for a run. Each tool call is classified
//! into an [`OperationIntent`]; the policy maps mode × intent to allow, deny or
//! ask; every decision is recorded as a [`PermissionDecision`] that holds hashes
//! of the arguments, never the arguments themselves. A host's answer that
//! holds for the rest of the session is recorded as a [`PermissionRule`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The host's grant of authority for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Read-only: reads allowed, writes and outside access denied.
    Plan,
    /// Everything but workspace reads goes to the host.
    Ask,
    /// Workspace reads and writes allowed; outside, network and unknown ask.
    #[default]
    Auto,
    /// Everything allowed, unsandboxed.
    Full,
}

impl PermissionMode {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Ask => "ask",
            Self::Auto => "auto",
            Self::Full => "full",
        }
    }
}

/// What a tool call would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct OperationIntent {
    /// The kind of operation.
    pub kind: IntentKind,
    /// Where it acts.
    pub scope: IntentScope,
    /// Resolved targets (workspace-relative paths, hosts), when known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
}

impl OperationIntent {
    /// An intent with no listed targets.
    pub fn new(kind: IntentKind, scope: IntentScope) -> Self {
        Self {
            kind,
            scope,
            targets: Vec::new(),
        }
    }
}

/// The kind of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum IntentKind {
    /// Reads files.
    Read,
    /// Writes files.
    Write,
    /// Runs a shell command.
    Shell,
    /// Reaches the network.
    Network,
    /// An extension or MCP tool.
    Custom,
    /// Could not be classified; never treated as safe.
    Unknown,
}

/// Where an operation acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IntentScope {
    /// Only inside the workspace.
    Workspace,
    /// Somewhere outside the workspace.
    Outside,
    /// Could not be determined; never treated as inside.
    Unknown,
    /// Git's or Keel's own metadata inside the workspace (a `.git`, `.keel`
    /// at the root): read-only below `full` unless the host approves the
    /// call, which then may write just that.
    Metadata,
}

/// A decision on one permission question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionResolution {
    /// The call may run.
    Approved,
    /// The call must not run.
    Denied,
}

/// Who decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DecisionSource {
    /// The permission policy, without asking.
    Policy,
    /// The host, answering a `permission_requested` event.
    Host,
    /// The kernel, e.g. denying a pending request on cancel.
    Kernel,
    /// A session rule the host recorded earlier (an answer with scope
    /// `always`), applied without asking again.
    SessionRule,
}

/// The durable record of one permission decision (a session entry payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct PermissionDecision {
    /// The call decided on.
    pub call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// The run's mode.
    pub mode: PermissionMode,
    /// The decision.
    pub resolution: PermissionResolution,
    /// Who decided.
    pub source: DecisionSource,
    /// sha256 (hex) of the canonical JSON of the final arguments.
    pub arguments_sha256: String,
    /// The classified intent.
    pub intent: OperationIntent,
    /// Why, in words.
    pub reason: String,
}

impl PermissionDecision {
    /// How call `call_id` to `tool_name` was resolved under `mode`, by
    /// whom, for which intent; no argument digest and no reason yet.
    pub fn new(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        mode: PermissionMode,
        resolution: PermissionResolution,
        source: DecisionSource,
        intent: OperationIntent,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            mode,
            resolution,
            source,
            arguments_sha256: String::new(),
            intent,
            reason: String::new(),
        }
    }
}

/// A session rule: the host's standing answer to every later call like the
/// one it answered with scope `always` (a session entry payload).
///
/// A call matches when it is of the same tool, its intent has the same kind
/// and scope, and its target is exactly the same: the `command` of a shell
/// call, the `path` of a file tool's call, or else the whole arguments. The
/// target is kept as a hash (no secrets in decisions); `call_id` names the
/// call whose answer made the rule, whose exact arguments are in the
/// session. A rule is only consulted where the policy would ask the host:
/// it never allows what the mode denies.
///
/// A rule is bound to what was approved, not only to its text:
/// `binding_sha256` hashes the call's targets as they resolved when the
/// host answered (canonical paths with device and inode, a command's
/// expanded words and programs). A later call matches only while its own
/// targets resolve the same; otherwise the kernel asks again. A rule
/// recorded before bindings existed has none and matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct PermissionRule {
    /// The tool the rule is for.
    pub tool_name: String,
    /// The intent kind a matching call has.
    pub kind: IntentKind,
    /// The intent scope a matching call has.
    pub scope: IntentScope,
    /// sha256 (hex) of the canonical JSON of the matched target.
    pub target_sha256: String,
    /// sha256 (hex) of the canonical JSON of what the target resolved to
    /// when the host answered; absent in rules written before it existed
    /// and for targets that could not be resolved (such a rule matches
    /// nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_sha256: Option<String>,
    /// What the rule decides for a matching call.
    pub resolution: PermissionResolution,
    /// The call whose host answer made the rule.
    pub call_id: String,
}

impl PermissionRule {
    /// An `always` answer to call `call_id`: `resolution` for `tool_name`'s
    /// `kind` of operation in `scope` on the target digested as
    /// `target_sha256`, bound to no command.
    pub fn new(
        tool_name: impl Into<String>,
        kind: IntentKind,
        scope: IntentScope,
        target_sha256: impl Into<String>,
        resolution: PermissionResolution,
        call_id: impl Into<String>,
    ) -> Self {
        Self {
            tool_name: tool_name.into(),
            kind,
            scope,
            target_sha256: target_sha256.into(),
            binding_sha256: None,
            resolution,
            call_id: call_id.into(),
        }
    }
}

/// The permission rules the user wrote (`[permissions]` in `config.toml`):
/// each list holds rule strings such as `bash(git commit *)`,
/// `read(~/.gitconfig)` or `mcp__github__*`, as written. A deny rule wins
/// over everything, an ask rule turns an allow into a question, an allow
/// rule answers a question the mode would ask (never one the mode denies).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct PermissionRuleLists {
    /// Rules that answer a question the mode would ask with yes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Rules that turn what the mode allows into a question.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask: Vec<String>,
    /// Rules that refuse, whatever the mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl PermissionRuleLists {
    /// Whether no list holds a rule.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.ask.is_empty() && self.deny.is_empty()
    }

    /// These lists with `other`'s rules added after their own, each rule
    /// kept once (layers of configuration are unioned).
    pub fn union(mut self, other: PermissionRuleLists) -> Self {
        for (mine, theirs) in [
            (&mut self.allow, other.allow),
            (&mut self.ask, other.ask),
            (&mut self.deny, other.deny),
        ] {
            for rule in theirs {
                if !mine.contains(&rule) {
                    mine.push(rule);
                }
            }
        }
        self
    }
}
