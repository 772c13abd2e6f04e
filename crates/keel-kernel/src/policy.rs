//! The permission seam: mode × Operation Intent → allow, deny or ask.
//!
//! The host fixes the mode for the run; the policy only maps. [`MatrixPolicy`]
//! is the permission matrix (docs/security.md). An allowed call also gets the OS sandbox level its
//! processes run at, so that what the policy allows the operating system
//! enforces: shell in `plan` runs read-only, in `auto` workspace-write, and
//! only `full` runs unsandboxed. Nothing is ever allowed that the matrix
//! does not allow; what cannot be classified is never treated as safe.
//!
//! Git's and Keel's metadata in the workspace (`.git`, `.keel`; scope
//! `metadata`) is not part of the writable workspace: a call that writes it
//! — a `write` into `.git/hooks`, a `git commit` — is denied in `plan` and
//! asks in `ask` and `auto`, like anything outside. An approved one stays
//! as confined as a workspace call (the kernel then makes just that
//! metadata writable in its sandbox), with network only if it needs it.
//!
//! In `auto`, a command whose reach the analysis could not resolve
//! statically runs confined instead of asking, where the kernel knows the
//! OS sandbox confines it ([`sandbox_decides`], the one place that says so).

use keel_protocol::{IntentKind, IntentScope, OperationIntent, PermissionMode};
use keel_tools::sandbox::SandboxLevel;

/// What the policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyDecision {
    /// Run it, with its processes confined at this level.
    Allow(SandboxLevel),
    /// Refuse it, with the reason shown to the model.
    Deny(String),
    /// Ask the host, with the reason shown to the host.
    Ask(String),
}

/// Maps a permission mode and an intent to a decision.
pub trait PermissionPolicy: Send + Sync {
    /// Decides one call of `tool_name` with the given intent.
    fn evaluate(
        &self,
        mode: PermissionMode,
        tool_name: &str,
        intent: &OperationIntent,
    ) -> PolicyDecision;

    /// Decides one call, knowing whether it is `confined`: the kernel has
    /// established that the call's processes would run in Keel's enforced
    /// OS sandbox and that its tool knows of nothing that sandbox refuses
    /// ([`keel_tools::Classification::confinable`]). The default ignores
    /// that and is [`PermissionPolicy::evaluate`]; [`MatrixPolicy`] lets
    /// the sandbox decide what [`sandbox_decides`] says it may.
    fn evaluate_call(
        &self,
        mode: PermissionMode,
        tool_name: &str,
        intent: &OperationIntent,
        confined: bool,
    ) -> PolicyDecision {
        let _ = confined;
        self.evaluate(mode, tool_name, intent)
    }

    /// The sandbox level of a call the host approved after an `Ask`.
    fn approved_level(&self, mode: PermissionMode, intent: &OperationIntent) -> SandboxLevel {
        approved_level(mode, intent)
    }
}

/// The permission matrix (docs/security.md, "Modes").
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct MatrixPolicy;

impl PermissionPolicy for MatrixPolicy {
    fn evaluate(
        &self,
        mode: PermissionMode,
        tool_name: &str,
        intent: &OperationIntent,
    ) -> PolicyDecision {
        use IntentKind::{Read, Shell, Write};
        use PermissionMode::{Ask, Auto, Full, Plan};
        let inside = intent.scope == IntentScope::Workspace;
        match (mode, intent.kind) {
            (Full, _) => PolicyDecision::Allow(SandboxLevel::Unsandboxed),
            (Plan, Read | Shell) if inside => PolicyDecision::Allow(SandboxLevel::ReadOnly),
            (Ask | Auto, Read) if inside => PolicyDecision::Allow(SandboxLevel::WorkspaceWrite),
            (Auto, Write | Shell) if inside => PolicyDecision::Allow(SandboxLevel::WorkspaceWrite),
            (Plan, kind) => PolicyDecision::Deny(format!(
                "{}, which plan mode does not allow",
                describe(tool_name, kind, intent.scope)
            )),
            (Ask | Auto, kind) => PolicyDecision::Ask(ask_reason(mode, tool_name, kind, intent)),
        }
    }

    fn evaluate_call(
        &self,
        mode: PermissionMode,
        tool_name: &str,
        intent: &OperationIntent,
        confined: bool,
    ) -> PolicyDecision {
        match self.evaluate(mode, tool_name, intent) {
            PolicyDecision::Ask(_) if sandbox_decides(mode, intent, confined) => {
                PolicyDecision::Allow(SandboxLevel::WorkspaceWrite)
            }
            decision => decision,
        }
    }
}

/// Whether a call the matrix would ask about runs confined instead: the
/// one place where `auto` lets the OS sandbox decide.
///
/// Invariant: only a call whose reach the analysis could not resolve
/// statically (its kind or its scope is unknown), never one it knows
/// needs what the sandbox refuses, and
/// only where the sandbox is known to confine it. That is: the mode is
/// `auto`; the intent is a shell command (kind `shell` or `unknown`)
/// whose scope is the workspace or could not be determined — never
/// `network`, never `outside`, never `metadata`; and the kernel
/// established that it is `confined` (Keel's OS sandbox is enforced on
/// this machine and will run the command at `workspace_write`, and the
/// tool found nothing that sandbox refuses, even beside an unknown kind).
/// Such a call runs at `workspace_write`: it writes only the workspace's
/// writable roots, reaches no network, and sees `.git`/`.keel` read-only
/// and secrets masked — what an approval would have let it do anyway,
/// less the network. `plan`, `ask`, `full`, every other intent, an
/// external or unenforceable sandbox and any tool that does not run its
/// calls in Keel's sandbox keep the matrix's answer.
pub fn sandbox_decides(mode: PermissionMode, intent: &OperationIntent, confined: bool) -> bool {
    let command = matches!(intent.kind, IntentKind::Shell | IntentKind::Unknown);
    let reach = matches!(intent.scope, IntentScope::Workspace | IntentScope::Unknown);
    // A plain workspace command is the matrix's own allow, not the sandbox's.
    let unresolved = intent.kind == IntentKind::Unknown || intent.scope == IntentScope::Unknown;
    confined && mode == PermissionMode::Auto && command && reach && unresolved
}

/// The level of a host-approved call: the least that lets it do what its
/// intent says — network only for network commands, and no OS sandbox only
/// when it acts outside the workspace (the host approved exactly that);
/// writing the workspace's metadata keeps the sandbox. A
/// call whose scope or kind could not be determined stays sandboxed: the
/// host approved a command it could not see the reach of, not that reach.
fn approved_level(mode: PermissionMode, intent: &OperationIntent) -> SandboxLevel {
    match (mode, intent.kind, intent.scope) {
        (PermissionMode::Full, _, _) => SandboxLevel::Unsandboxed,
        (_, _, IntentScope::Outside) => SandboxLevel::Unsandboxed,
        (_, IntentKind::Network, _) => SandboxLevel::WorkspaceWriteNetwork,
        _ => SandboxLevel::WorkspaceWrite,
    }
}

fn ask_reason(
    mode: PermissionMode,
    tool_name: &str,
    kind: IntentKind,
    intent: &OperationIntent,
) -> String {
    let level = approved_level(mode, intent);
    let command = matches!(
        kind,
        IntentKind::Shell | IntentKind::Network | IntentKind::Unknown
    );
    let metadata = intent.scope == IntentScope::Metadata;
    let consequence = match (level, metadata) {
        (SandboxLevel::Unsandboxed, _) if command => {
            "; if approved, it runs without the OS sandbox"
        }
        (SandboxLevel::WorkspaceWriteNetwork, true) => {
            "; if approved, it runs sandboxed with network access and `.git`/`.keel` writable"
        }
        (SandboxLevel::WorkspaceWriteNetwork, false) => {
            "; if approved, it runs sandboxed with network access"
        }
        (_, true) if command => "; if approved, it runs sandboxed with `.git`/`.keel` writable",
        _ => "",
    };
    format!("{}{consequence}", describe(tool_name, kind, intent.scope))
}

/// "`bash` runs a shell command inside the workspace", and the like.
fn describe(tool_name: &str, kind: IntentKind, scope: IntentScope) -> String {
    match (kind, scope) {
        (IntentKind::Write, IntentScope::Metadata) => {
            format!("`{tool_name}` writes git's or Keel's metadata (`.git`, `.keel`)")
        }
        (_, IntentScope::Metadata) => format!(
            "`{tool_name}` {} and writes git's or Keel's metadata (`.git`, `.keel`)",
            what(kind)
        ),
        _ => format!("`{tool_name}` {} {}", what(kind), where_(scope)),
    }
}

fn what(kind: IntentKind) -> &'static str {
    match kind {
        IntentKind::Read => "reads",
        IntentKind::Write => "writes",
        IntentKind::Shell => "runs a shell command",
        IntentKind::Network => "reaches the network",
        IntentKind::Custom => "is an extension tool",
        // Kinds added later read as unclassified until named here.
        _ => "does something that could not be classified",
    }
}

fn where_(scope: IntentScope) -> &'static str {
    match scope {
        IntentScope::Workspace => "inside the workspace",
        IntentScope::Outside => "outside the workspace",
        IntentScope::Unknown => "in a scope that could not be determined",
        IntentScope::Metadata => "in git's or Keel's metadata (`.git`, `.keel`)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(mode: PermissionMode, tool: &str, kind: IntentKind) -> PolicyDecision {
        let intent = OperationIntent::new(kind, IntentScope::Metadata);
        MatrixPolicy.evaluate(mode, tool, &intent)
    }

    #[test]
    fn metadata_reasons_say_what_is_written_and_what_an_approval_widens() {
        let metadata = "git's or Keel's metadata (`.git`, `.keel`)";
        assert_eq!(
            decide(PermissionMode::Auto, "bash", IntentKind::Shell),
            PolicyDecision::Ask(format!(
                "`bash` runs a shell command and writes {metadata}; if approved, it runs sandboxed with `.git`/`.keel` writable"
            ))
        );
        assert_eq!(
            decide(PermissionMode::Ask, "bash", IntentKind::Network),
            PolicyDecision::Ask(format!(
                "`bash` reaches the network and writes {metadata}; if approved, it runs sandboxed with network access and `.git`/`.keel` writable"
            ))
        );
        assert_eq!(
            decide(PermissionMode::Auto, "write", IntentKind::Write),
            PolicyDecision::Ask(format!("`write` writes {metadata}"))
        );
        assert_eq!(
            decide(PermissionMode::Plan, "bash", IntentKind::Shell),
            PolicyDecision::Deny(format!(
                "`bash` runs a shell command and writes {metadata}, which plan mode does not allow"
            ))
        );
    }

    #[test]
    fn auto_leaves_only_confined_unresolved_commands_to_the_sandbox() {
        use IntentKind::{Network, Read, Shell, Unknown, Write};
        use IntentScope::{Metadata, Outside, Workspace};
        let sandboxed = PolicyDecision::Allow(SandboxLevel::WorkspaceWrite);
        let decide = |mode, kind, scope, confined| {
            let intent = OperationIntent::new(kind, scope);
            MatrixPolicy.evaluate_call(mode, "bash", &intent, confined)
        };
        // Unresolved, confined, in auto: run confined.
        for (kind, scope) in [
            (Shell, IntentScope::Unknown),
            (Unknown, IntentScope::Unknown),
        ] {
            assert_eq!(decide(PermissionMode::Auto, kind, scope, true), sandboxed);
            // Not confined: asked, exactly as `evaluate` says.
            let intent = OperationIntent::new(kind, scope);
            let asked = MatrixPolicy.evaluate(PermissionMode::Auto, "bash", &intent);
            assert!(matches!(asked, PolicyDecision::Ask(_)));
            assert_eq!(decide(PermissionMode::Auto, kind, scope, false), asked);
            // Other modes keep the matrix.
            for mode in [
                PermissionMode::Plan,
                PermissionMode::Ask,
                PermissionMode::Full,
            ] {
                let intent = OperationIntent::new(kind, scope);
                let matrix = MatrixPolicy.evaluate(mode, "bash", &intent);
                assert_eq!(decide(mode, kind, scope, true), matrix);
            }
        }
        // A plain workspace command is not the sandbox's decision.
        let plain = OperationIntent::new(Shell, Workspace);
        assert!(!sandbox_decides(PermissionMode::Auto, &plain, true));
        // Known needs of what the sandbox refuses, and other tools' kinds: asked.
        for (kind, scope) in [
            (Network, Workspace),
            (Network, IntentScope::Unknown),
            (Shell, Outside),
            (Shell, Metadata),
            (Unknown, Outside),
            (Write, IntentScope::Unknown),
            (Read, Outside),
            (IntentKind::Custom, IntentScope::Unknown),
        ] {
            assert!(
                matches!(
                    decide(PermissionMode::Auto, kind, scope, true),
                    PolicyDecision::Ask(_)
                ),
                "{kind:?} {scope:?}"
            );
        }
    }
}
