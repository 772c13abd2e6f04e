//! Session rules: host answers that hold for every later matching call.
//!
//! A host that answers a permission request with scope `always` makes a
//! rule ([`PermissionRule`]); the tool pipeline records it as a
//! `permission_rule` entry in the same append as the decision it came with,
//! and from then on decides matching calls by it without asking. A run
//! starts with the rules on its context branch, so a later run on the same
//! branch keeps them and a sibling branch or an older fork point does not.
//!
//! Invariants:
//! - A rule is consulted only where the policy would ask the host; it never
//!   allows what the mode denies, and `full` never needs one.
//! - A call matches only on the same tool, the same intent kind and scope,
//!   and exactly the same target ([`target`]): a rule for `cargo test` says
//!   nothing about `cargo test --release`.
//! - Rules before a checkpoint are not on the context branch and so are not
//!   loaded: compaction can only make the kernel ask again, never allow more.

use std::sync::{Mutex, MutexGuard};

use keel_protocol::{
    EntryPayload, OperationIntent, PermissionResolution, PermissionRule, ToolCall,
};
use serde_json::Value;

use crate::context::BranchEntry;
use crate::permission::sha256_hex;

/// The rules in force for one run, shared by the calls of its batches.
#[derive(Debug, Default)]
pub(crate) struct SessionRules {
    rules: Mutex<Vec<PermissionRule>>,
}

impl SessionRules {
    /// The rules recorded on `branch`, in the order they were recorded.
    pub(crate) fn from_branch(branch: &[BranchEntry]) -> Self {
        let rules = branch
            .iter()
            .filter_map(|entry| match entry.payload() {
                Some(EntryPayload::PermissionRule { rule }) => Some(rule.clone()),
                _ => None,
            })
            .collect();
        Self {
            rules: Mutex::new(rules),
        }
    }

    /// The rule a call matches, if any; the latest recorded wins.
    pub(crate) fn matching(
        &self,
        call: &ToolCall,
        arguments: &Value,
        intent: &OperationIntent,
    ) -> Option<PermissionRule> {
        let target = target_sha256(&call.name, arguments);
        self.lock()
            .iter()
            .rev()
            .find(|rule| {
                rule.tool_name == call.name
                    && rule.kind == intent.kind
                    && rule.scope == intent.scope
                    && rule.target_sha256 == target
            })
            .cloned()
    }

    /// Adds a rule the session has durably recorded.
    pub(crate) fn add(&self, rule: PermissionRule) {
        self.lock().push(rule);
    }

    fn lock(&self) -> MutexGuard<'_, Vec<PermissionRule>> {
        // Held only for a vector operation that cannot panic; recover the data.
        self.rules
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The rule a host answer with scope `always` makes for this call.
pub(crate) fn rule_for(
    call: &ToolCall,
    arguments: &Value,
    intent: &OperationIntent,
    resolution: PermissionResolution,
) -> PermissionRule {
    PermissionRule {
        tool_name: call.name.clone(),
        kind: intent.kind,
        scope: intent.scope,
        target_sha256: target_sha256(&call.name, arguments),
        resolution,
        call_id: call.id.clone(),
    }
}

/// What a rule matches on: the `command` of a call that has one (shell
/// tools), else its `path` (file tools), else the whole arguments.
pub(crate) fn target(arguments: &Value) -> Value {
    for key in ["command", "path"] {
        if let Some(Value::String(text)) = arguments.get(key) {
            return serde_json::json!({ key: text });
        }
    }
    serde_json::json!({ "arguments": arguments })
}

fn target_sha256(tool_name: &str, arguments: &Value) -> String {
    sha256_hex(&serde_json::json!({ "tool_name": tool_name, "target": target(arguments) }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use keel_protocol::{IntentKind, IntentScope};
    use serde_json::json;

    use super::*;

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments,
            wire_id: None,
        }
    }

    #[test]
    fn a_rule_matches_only_the_same_tool_intent_and_exact_target() {
        let shell = OperationIntent::new(IntentKind::Shell, IntentScope::Outside);
        let answered = call("bash", json!({"command": "cargo test", "timeout": 10}));
        let rules = SessionRules::default();
        rules.add(rule_for(
            &answered,
            &answered.arguments,
            &shell,
            PermissionResolution::Approved,
        ));
        let same_command = json!({"command": "cargo test", "timeout": 99});
        assert!(
            rules
                .matching(&call("bash", same_command.clone()), &same_command, &shell)
                .is_some()
        );
        let other = json!({"command": "cargo test --release"});
        assert!(
            rules
                .matching(&call("bash", other.clone()), &other, &shell)
                .is_none()
        );
        assert!(
            rules
                .matching(&call("sh", same_command.clone()), &same_command, &shell)
                .is_none()
        );
        let network = OperationIntent::new(IntentKind::Network, IntentScope::Outside);
        assert!(
            rules
                .matching(&call("bash", same_command.clone()), &same_command, &network)
                .is_none()
        );
    }

    #[test]
    fn file_tools_match_on_the_path_and_others_on_all_arguments() {
        assert_eq!(
            target(&json!({"path": "a.txt", "content": "x"})),
            json!({"path": "a.txt"})
        );
        assert_eq!(
            target(&json!({"pattern": "x", "limit": 3})),
            json!({"arguments": {"pattern": "x", "limit": 3}})
        );
        // A `command` that is not a string is not a command: all arguments count.
        assert_eq!(
            target(&json!({"command": ["ls"]})),
            json!({"arguments": {"command": ["ls"]}})
        );
    }
}
