//! What each permission mode does, read off the kernel's policy itself.
//!
//! `keel doctor` and help texts describe the modes from these probes rather
//! than from prose, so the description cannot drift from [`MatrixPolicy`]:
//! each mode is asked about one representative call per row of the permission matrix.

use keel_kernel::{MatrixPolicy, PermissionPolicy, PolicyDecision};
use keel_protocol::{IntentKind, IntentScope, OperationIntent, PermissionMode};
use keel_tools::sandbox::SandboxLevel;

/// One row of the permission matrix: a name and a representative call.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct MatrixRow {
    /// How the row reads in a sentence (`writes inside the workspace`).
    pub name: &'static str,
    /// The tool of the representative call.
    pub tool: &'static str,
    /// Its intent.
    pub kind: IntentKind,
    /// Where it acts.
    pub scope: IntentScope,
    /// Whether the call's processes run in Keel's OS sandbox (a `bash`
    /// command), so that in `auto` the sandbox may decide it
    /// ([`keel_kernel::policy::sandbox_decides`]) where the sandbox is
    /// enforced.
    pub confinable: bool,
}

/// The rows of the permission matrix (docs/security.md, "Modes").
pub const ROWS: [MatrixRow; 8] = [
    MatrixRow {
        name: "reads inside the workspace",
        tool: "read",
        kind: IntentKind::Read,
        scope: IntentScope::Workspace,
        confinable: false,
    },
    MatrixRow {
        name: "writes inside the workspace",
        tool: "write",
        kind: IntentKind::Write,
        scope: IntentScope::Workspace,
        confinable: false,
    },
    MatrixRow {
        name: "shell inside the workspace",
        tool: "bash",
        kind: IntentKind::Shell,
        scope: IntentScope::Workspace,
        confinable: true,
    },
    MatrixRow {
        name: "anything outside the workspace",
        tool: "read",
        kind: IntentKind::Read,
        scope: IntentScope::Outside,
        confinable: false,
    },
    MatrixRow {
        name: "network",
        tool: "bash",
        kind: IntentKind::Network,
        scope: IntentScope::Workspace,
        confinable: true,
    },
    MatrixRow {
        name: "writes to `.git` or `.keel` (`git commit`)",
        tool: "bash",
        kind: IntentKind::Shell,
        scope: IntentScope::Metadata,
        confinable: true,
    },
    MatrixRow {
        name: "commands whose reach the analysis cannot resolve (`echo $HOME`, a `for` loop)",
        tool: "bash",
        kind: IntentKind::Unknown,
        scope: IntentScope::Unknown,
        confinable: true,
    },
    MatrixRow {
        name: "tools of unknown effect (an extension's)",
        tool: "extension",
        kind: IntentKind::Unknown,
        scope: IntentScope::Unknown,
        confinable: false,
    },
];

/// The four modes, least authority first.
pub const MODES: [PermissionMode; 4] = [
    PermissionMode::Plan,
    PermissionMode::Ask,
    PermissionMode::Auto,
    PermissionMode::Full,
];

/// What `policy` does with each row in `mode`; `sandbox_enforced` says
/// whether Keel's OS sandbox can confine commands on this machine (a
/// confinable row is then evaluated as confined).
pub fn decisions(
    policy: &dyn PermissionPolicy,
    mode: PermissionMode,
    sandbox_enforced: bool,
) -> Vec<(MatrixRow, PolicyDecision)> {
    ROWS.iter()
        .map(|row| {
            let intent = OperationIntent::new(row.kind, row.scope);
            let confined = row.confinable && sandbox_enforced;
            (
                *row,
                policy.evaluate_call(mode, row.tool, &intent, confined),
            )
        })
        .collect()
}

/// One line describing `mode` under [`MatrixPolicy`]: what is allowed (and
/// at which sandbox level), what asks the host, what is denied.
/// `sandbox_enforced` says whether sandboxed levels can run on this machine;
/// where they cannot, an allowed sandboxed call is described as refused.
pub fn describe(mode: PermissionMode, sandbox_enforced: bool) -> String {
    let mut allowed = Vec::new();
    let mut asks = Vec::new();
    let mut denied = Vec::new();
    for (row, decision) in decisions(&MatrixPolicy::default(), mode, sandbox_enforced) {
        match decision {
            PolicyDecision::Allow(level) => {
                allowed.push(allowed_text(row, level, sandbox_enforced))
            }
            PolicyDecision::Ask(_) => asks.push(row.name.to_owned()),
            PolicyDecision::Deny(_) => denied.push(row.name.to_owned()),
        }
    }
    let mut parts = Vec::new();
    if !allowed.is_empty() {
        parts.push(format!("allowed: {}", allowed.join(", ")));
    }
    if !asks.is_empty() {
        parts.push(format!("asks the host: {}", asks.join(", ")));
    }
    if !denied.is_empty() {
        parts.push(format!("denied: {}", denied.join(", ")));
    }
    format!("{}: {}", mode.as_str(), parts.join("; "))
}

fn allowed_text(row: MatrixRow, level: SandboxLevel, sandbox_enforced: bool) -> String {
    if !row.confinable {
        return row.name.to_owned();
    }
    match level {
        SandboxLevel::Unsandboxed => format!("{} (unsandboxed)", row.name),
        _ if !sandbox_enforced => format!(
            "{} (sandboxed {}: refused here, the sandbox cannot be enforced)",
            row.name,
            level.as_str()
        ),
        _ => format!("{} (sandboxed {})", row.name, level.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_follows_the_matrix() {
        let plan = describe(PermissionMode::Plan, true);
        assert!(
            plan.contains("shell inside the workspace (sandboxed read_only)"),
            "{plan}"
        );
        assert!(
            plan.contains("denied: writes inside the workspace"),
            "{plan}"
        );
        let auto = describe(PermissionMode::Auto, true);
        assert!(auto.contains("(sandboxed workspace_write)"), "{auto}");
        assert!(
            auto.contains("asks the host: anything outside the workspace, network"),
            "{auto}"
        );
        assert!(auto.contains("writes to `.git` or `.keel`"), "{auto}");
        // Where the sandbox is enforced, `auto` runs what the analysis
        // cannot resolve confined; elsewhere it asks.
        assert!(
            auto.contains(
                "cannot resolve (`echo $HOME`, a `for` loop) (sandboxed workspace_write)"
            ),
            "{auto}"
        );
        assert!(
            auto.contains("asks the host: ") && auto.contains("tools of unknown effect"),
            "{auto}"
        );
        let unenforced = describe(PermissionMode::Auto, false);
        assert!(
            unenforced.contains("asks the host: ")
                && unenforced
                    .split("asks the host: ")
                    .nth(1)
                    .is_some_and(|asked| asked.contains("cannot resolve")),
            "{unenforced}"
        );
        assert!(
            plan.contains("denied: writes inside the workspace, anything outside"),
            "{plan}"
        );
        assert!(plan.contains("writes to `.git` or `.keel`"), "{plan}");
        let full = describe(PermissionMode::Full, false);
        assert!(
            full.contains("shell inside the workspace (unsandboxed)"),
            "{full}"
        );
        assert!(!full.contains("asks"), "{full}");
        let refused = describe(PermissionMode::Auto, false);
        assert!(refused.contains("refused here"), "{refused}");
    }
}
