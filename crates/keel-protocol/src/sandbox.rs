//! The sandbox vocabulary: how much a command may do, and who enforces it.
//!
//! The permission policy decides a [`SandboxLevel`] for every call it allows
//! and records it in the decision's reason; the host chooses a
//! [`SandboxMode`] for the kernel. Both are policy words, so they live here
//! with the other permission types; `keel-sandbox` is what turns a level
//! into operating-system restrictions.
//!
//! Invariants: the serialized names (snake_case) are the names
//! [`SandboxLevel::as_str`] returns; the levels are ordered from most to
//! least confined, and each level grants everything the one before it does.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How much a sandboxed command may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SandboxLevel {
    /// Read the workspace and system locations; write only the private temp dir; no network.
    ReadOnly,
    /// Also write the workspace; no network.
    WorkspaceWrite,
    /// Write the workspace and use the network (a host approved a network command).
    WorkspaceWriteNetwork,
    /// No OS restrictions (`full`, or a host-approved command outside the workspace).
    Unsandboxed,
}

impl SandboxLevel {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only",
            Self::WorkspaceWrite => "workspace_write",
            Self::WorkspaceWriteNetwork => "workspace_write_network",
            Self::Unsandboxed => "unsandboxed",
        }
    }

    /// Whether commands at this level may use the network.
    pub fn allows_network(self) -> bool {
        matches!(self, Self::WorkspaceWriteNetwork | Self::Unsandboxed)
    }

    /// Whether commands at this level may write the workspace.
    pub fn writes_workspace(self) -> bool {
        !matches!(self, Self::ReadOnly)
    }
}

/// Who enforces the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SandboxMode {
    /// Keel, with Landlock and seccomp; fails closed where they are missing.
    #[default]
    Os,
    /// The host declares it already runs Keel inside an isolating container;
    /// Keel applies no OS restrictions of its own.
    External,
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEVELS: [SandboxLevel; 4] = [
        SandboxLevel::ReadOnly,
        SandboxLevel::WorkspaceWrite,
        SandboxLevel::WorkspaceWriteNetwork,
        SandboxLevel::Unsandboxed,
    ];

    #[test]
    fn serialized_names_are_the_snake_case_names() {
        for level in LEVELS {
            let json = serde_json::to_value(level).unwrap();
            assert_eq!(json, serde_json::Value::from(level.as_str()));
            let back: SandboxLevel = serde_json::from_value(json).unwrap();
            assert_eq!(back, level);
        }
        assert_eq!(serde_json::to_value(SandboxMode::Os).unwrap(), "os");
        assert_eq!(
            serde_json::to_value(SandboxMode::External).unwrap(),
            "external"
        );
    }

    #[test]
    fn each_level_grants_what_the_one_before_it_does() {
        for pair in LEVELS.windows(2) {
            let (less, more) = (pair[0], pair[1]);
            assert!(!less.allows_network() || more.allows_network());
            assert!(!less.writes_workspace() || more.writes_workspace());
        }
        assert!(!SandboxLevel::ReadOnly.writes_workspace());
        assert!(!SandboxLevel::WorkspaceWrite.allows_network());
        assert!(SandboxLevel::WorkspaceWriteNetwork.allows_network());
    }
}
