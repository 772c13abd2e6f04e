//! What a tenant's runs may do: the ceiling a named token's clients cannot
//! raise, however they fill `run/start` or answer permission requests.
//!
//! A token grants its holder the server user's authority only as far as
//! this ceiling lets it: `local` and `default` act for the user and have
//! none ([`Authority::user`]); every other tenant (a named token) gets
//! [`Authority::named_default`] unless the configuration says otherwise.
//!
//! Invariants:
//! - A run of a named tenant never runs in a mode above its `max_mode`
//!   (default `auto`: every command sandboxed), whatever the run asks or
//!   the configuration's default mode is: a start above it is refused
//!   with `not_allowed` before any run exists.
//! - With `workspaces` set, a run's workspace (canonical) lies beneath one
//!   of them, else `not_allowed`.
//! - Without `widen`, a permission request whose approval would widen the
//!   run past the sandbox (docs/security.md, "Modes": an outside, metadata or unknown scope,
//!   or the network) is denied by the broker as soon as it is emitted; the
//!   client sees `permission_requested` then `permission_resolved`
//!   (denied), and a later approval finds nothing pending.

use std::path::{Path, PathBuf};

use keel_protocol::rpc::{ErrorKind, RpcError};
use keel_protocol::{IntentKind, IntentScope, OperationIntent, PermissionMode};

/// A tenant's ceiling.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Authority {
    /// The widest mode a run may have (`full` runs commands unsandboxed).
    pub max_mode: PermissionMode,
    /// Whether the tenant's own approvals may widen a run past the sandbox
    /// (outside the workspace, `.git`, the network).
    pub widen: bool,
    /// The directories a run's workspace must lie beneath (empty: any).
    pub workspaces: Vec<PathBuf>,
}

impl Authority {
    /// The user's own authority (tenants `local` and `default`): no ceiling.
    pub fn user() -> Self {
        Self {
            max_mode: PermissionMode::Full,
            widen: true,
            workspaces: Vec::new(),
        }
    }

    /// A named token's default: `auto` at most, no widening approvals, any
    /// workspace (set `workspaces` to confine it).
    pub fn named_default() -> Self {
        Self {
            max_mode: PermissionMode::Auto,
            widen: false,
            workspaces: Vec::new(),
        }
    }

    /// Refuses a run in `mode` and `workspace` (canonical) past the ceiling.
    pub(crate) fn check_run(
        &self,
        tenant: &str,
        mode: PermissionMode,
        workspace: &Path,
    ) -> Result<(), RpcError> {
        if rank(mode) > rank(self.max_mode) {
            return Err(RpcError::new(
                ErrorKind::NotAllowed,
                format!(
                    "tenant `{tenant}` may not start runs in mode `{}` (at most `{}`)",
                    mode.as_str(),
                    self.max_mode.as_str()
                ),
            ));
        }
        let within = self.workspaces.is_empty()
            || self.workspaces.iter().any(|root| {
                let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
                workspace.starts_with(root)
            });
        if !within {
            return Err(RpcError::new(
                ErrorKind::NotAllowed,
                format!("tenant `{tenant}` may not use this workspace"),
            ));
        }
        Ok(())
    }

    /// Whether an approval of `intent` stays within the ceiling.
    pub(crate) fn may_approve(&self, intent: &OperationIntent) -> bool {
        self.widen || !widens(intent)
    }
}

/// The ceiling of `tenant` under `config`.
pub(crate) fn of(config: &super::BrokerConfig, tenant: &str) -> Authority {
    if tenant == super::Tenant::LOCAL || tenant == super::Tenant::DEFAULT {
        return Authority::user();
    }
    config
        .authorities
        .get(tenant)
        .cloned()
        .unwrap_or_else(Authority::named_default)
}

/// Whether approving `intent` would widen a run past its sandbox (the matrix:
/// only an approval of an outside or network intent widens a command).
fn widens(intent: &OperationIntent) -> bool {
    intent.kind == IntentKind::Network || !matches!(intent.scope, IntentScope::Workspace)
}

/// Modes in order of authority.
fn rank(mode: PermissionMode) -> u8 {
    match mode {
        PermissionMode::Plan => 0,
        PermissionMode::Ask => 1,
        PermissionMode::Auto => 2,
        PermissionMode::Full => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_tenants_stay_in_the_sandbox() {
        let named = Authority::named_default();
        let root = std::env::temp_dir();
        assert!(named.check_run("ci", PermissionMode::Auto, &root).is_ok());
        let refused = named
            .check_run("ci", PermissionMode::Full, &root)
            .unwrap_err();
        assert_eq!(refused.kind_name(), Some("not_allowed"));
        assert!(
            Authority::user()
                .check_run("local", PermissionMode::Full, &root)
                .is_ok()
        );
        let inside = OperationIntent::new(IntentKind::Write, IntentScope::Workspace);
        let outside = OperationIntent::new(IntentKind::Read, IntentScope::Outside);
        let network = OperationIntent::new(IntentKind::Network, IntentScope::Workspace);
        let unknown = OperationIntent::new(IntentKind::Shell, IntentScope::Unknown);
        assert!(named.may_approve(&inside));
        for intent in [&outside, &network, &unknown] {
            assert!(!named.may_approve(intent), "{intent:?}");
            assert!(Authority::user().may_approve(intent));
        }
    }

    #[test]
    fn workspaces_confine_a_tenant() {
        let allowed = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let mut authority = Authority::named_default();
        authority.workspaces = vec![allowed.path().to_path_buf()];
        let inside = std::fs::canonicalize(allowed.path())
            .unwrap()
            .join("project");
        assert!(
            authority
                .check_run("ci", PermissionMode::Auto, &inside)
                .is_ok()
        );
        let outside = std::fs::canonicalize(other.path()).unwrap();
        let refused = authority
            .check_run("ci", PermissionMode::Auto, &outside)
            .unwrap_err();
        assert_eq!(refused.kind_name(), Some("not_allowed"));
    }
}
