//! The permission seam: mode × Operation Intent → allow, deny or ask.
//!
//! The host fixes the mode; the policy only maps. [`InterimPolicy`] is the
//! SPEC §7 matrix without the OS sandbox: since nothing can yet confine a
//! shell command, shell in `plan` and `auto` goes to the host instead of being
//! allowed sandboxed. Nothing is ever allowed silently that the matrix does
//! not allow.

use keel_protocol::{IntentKind, IntentScope, OperationIntent, PermissionMode};

/// What the policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyDecision {
    /// Run it.
    Allow,
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
}

/// The policy until the OS sandbox exists: SPEC §7 with shell routed to the host.
#[derive(Debug, Clone, Copy, Default)]
pub struct InterimPolicy;

impl PermissionPolicy for InterimPolicy {
    fn evaluate(
        &self,
        mode: PermissionMode,
        tool_name: &str,
        intent: &OperationIntent,
    ) -> PolicyDecision {
        let inside = intent.scope == IntentScope::Workspace;
        match (mode, intent.kind) {
            (PermissionMode::Full, _) => PolicyDecision::Allow,
            (_, IntentKind::Read) if inside => PolicyDecision::Allow,
            (PermissionMode::Auto, IntentKind::Write) if inside => PolicyDecision::Allow,
            (PermissionMode::Plan, _) => PolicyDecision::Deny(format!(
                "`{tool_name}` is not allowed in plan mode: only reads inside the workspace are"
            )),
            (_, kind) => PolicyDecision::Ask(ask_reason(tool_name, kind, intent.scope)),
        }
    }
}

fn ask_reason(tool_name: &str, kind: IntentKind, scope: IntentScope) -> String {
    let what = match kind {
        IntentKind::Read => "reads",
        IntentKind::Write => "writes",
        IntentKind::Shell => "runs a shell command",
        IntentKind::Network => "reaches the network",
        IntentKind::Custom => "is an extension tool",
        IntentKind::Unknown => "does something that could not be classified",
    };
    let where_ = match scope {
        IntentScope::Workspace => "inside the workspace",
        IntentScope::Outside => "outside the workspace",
        IntentScope::Unknown => "in a scope that could not be determined",
    };
    format!("`{tool_name}` {what} {where_}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(mode: PermissionMode, kind: IntentKind, scope: IntentScope) -> &'static str {
        match InterimPolicy.evaluate(mode, "t", &OperationIntent::new(kind, scope)) {
            PolicyDecision::Allow => "allow",
            PolicyDecision::Deny(_) => "deny",
            PolicyDecision::Ask(_) => "ask",
        }
    }

    #[test]
    fn follows_the_matrix_without_a_sandbox() {
        use IntentKind::{Custom, Network, Read, Shell, Write};
        use IntentScope::{Outside, Workspace};
        let rows = [
            ((Read, Workspace), ["allow", "allow", "allow", "allow"]),
            ((Write, Workspace), ["deny", "ask", "allow", "allow"]),
            (
                (Shell, IntentScope::Unknown),
                ["deny", "ask", "ask", "allow"],
            ),
            ((Read, Outside), ["deny", "ask", "ask", "allow"]),
            ((Network, Outside), ["deny", "ask", "ask", "allow"]),
            (
                (Custom, IntentScope::Unknown),
                ["deny", "ask", "ask", "allow"],
            ),
        ];
        let modes = [
            PermissionMode::Plan,
            PermissionMode::Ask,
            PermissionMode::Auto,
            PermissionMode::Full,
        ];
        for ((kind, scope), expected) in rows {
            let got = modes.map(|mode| decide(mode, kind, scope));
            assert_eq!(got, expected, "{kind:?} {scope:?}");
        }
    }
}
