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
//! - And only while the target resolves to what the host approved: the rule
//!   keeps a hash of the call's binding ([`keel_tools::Tool::approval_binding`]:
//!   canonical paths with device and inode, a command's expanded words and
//!   programs), computed when the host was asked; a later call whose
//!   binding differs (a re-pointed symlink, a swapped directory) is
//!   [`RuleMatch::Stale`] and the kernel asks again. A rule without a
//!   binding (written before bindings existed, or for a target that could
//!   not be resolved) never matches.
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

    /// The rule a call matches, if any; the latest recorded wins. `binding`
    /// is the call's binding hash as its target resolves now (computed
    /// only when some rule has the call's target).
    pub(crate) fn matching(
        &self,
        call: &ToolCall,
        arguments: &Value,
        intent: &OperationIntent,
        binding: impl FnOnce() -> Option<String>,
    ) -> RuleMatch {
        let target = target_sha256(&call.name, arguments);
        let candidates: Vec<PermissionRule> = self
            .lock()
            .iter()
            .rev()
            .filter(|rule| {
                rule.tool_name == call.name
                    && rule.kind == intent.kind
                    && rule.scope == intent.scope
                    && rule.target_sha256 == target
            })
            .cloned()
            .collect();
        let Some(latest) = candidates.first().cloned() else {
            return RuleMatch::None;
        };
        let Some(now) = binding() else {
            return RuleMatch::Stale(latest);
        };
        candidates
            .into_iter()
            .find(|rule| rule.binding_sha256.as_deref() == Some(now.as_str()))
            .map_or(RuleMatch::Stale(latest), RuleMatch::Matches)
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

/// What the session's rules say about one call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RuleMatch {
    /// No rule has the call's target.
    None,
    /// A rule has the call's target and its binding: it decides.
    Matches(PermissionRule),
    /// Rules have the call's target, but none was made for what it
    /// resolves to now (the latest is given): ask again.
    Stale(PermissionRule),
}

/// The rule a host answer with scope `always` makes for this call, bound
/// to `binding` (the call's binding hash when the host was asked).
pub(crate) fn rule_for(
    call: &ToolCall,
    arguments: &Value,
    intent: &OperationIntent,
    resolution: PermissionResolution,
    binding: Option<String>,
) -> PermissionRule {
    {
        let mut permission_rule = PermissionRule::new(
            call.name.clone(),
            intent.kind,
            intent.scope,
            target_sha256(&call.name, arguments),
            resolution,
            call.id.clone(),
        );
        permission_rule.binding_sha256 = binding;
        permission_rule
    }
}

/// The hash of a call's binding, `None` when it binds to nothing.
pub(crate) fn binding_sha256(binding: Option<Value>) -> Option<String> {
    binding.map(|binding| sha256_hex(&binding))
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
        ToolCall::new("c1", name, arguments)
    }

    #[test]
    fn a_rule_matches_only_the_same_tool_intent_and_exact_target() {
        let shell = OperationIntent::new(IntentKind::Shell, IntentScope::Outside);
        let answered = call("bash", json!({"command": "cargo test", "timeout": 10}));
        let rules = SessionRules::default();
        let bound = || Some("b1".to_owned());
        rules.add(rule_for(
            &answered,
            &answered.arguments,
            &shell,
            PermissionResolution::Approved,
            bound(),
        ));
        let same_command = json!({"command": "cargo test", "timeout": 99});
        let matched = |arguments: &Value, name: &str, intent: &OperationIntent, now: &str| {
            let now = now.to_owned();
            rules.matching(&call(name, arguments.clone()), arguments, intent, || {
                Some(now)
            })
        };
        assert!(matches!(
            matched(&same_command, "bash", &shell, "b1"),
            RuleMatch::Matches(_)
        ));
        // The same text, resolving to something else now: asked again.
        assert!(matches!(
            matched(&same_command, "bash", &shell, "b2"),
            RuleMatch::Stale(_)
        ));
        let other = json!({"command": "cargo test --release"});
        assert_eq!(matched(&other, "bash", &shell, "b1"), RuleMatch::None);
        assert_eq!(matched(&same_command, "sh", &shell, "b1"), RuleMatch::None);
        let network = OperationIntent::new(IntentKind::Network, IntentScope::Outside);
        assert_eq!(
            matched(&same_command, "bash", &network, "b1"),
            RuleMatch::None
        );
    }

    #[test]
    fn a_rule_without_a_binding_or_a_call_that_binds_to_nothing_never_matches() {
        let shell = OperationIntent::new(IntentKind::Shell, IntentScope::Outside);
        let answered = call("bash", json!({"command": "cat x"}));
        let old = rule_for(
            &answered,
            &answered.arguments,
            &shell,
            PermissionResolution::Approved,
            None,
        );
        // A rule as written before bindings existed still reads.
        let mut stored = serde_json::to_value(&old).unwrap();
        assert!(stored.get("binding_sha256").is_none());
        stored.as_object_mut().unwrap().remove("binding_sha256");
        let read: PermissionRule = serde_json::from_value(stored).unwrap();
        let rules = SessionRules::default();
        rules.add(read);
        let now = rules.matching(&answered, &answered.arguments, &shell, || {
            Some("b1".to_owned())
        });
        assert!(matches!(now, RuleMatch::Stale(_)), "{now:?}");
        let bound = SessionRules::default();
        bound.add(rule_for(
            &answered,
            &answered.arguments,
            &shell,
            PermissionResolution::Approved,
            Some("b1".to_owned()),
        ));
        let unresolvable = bound.matching(&answered, &answered.arguments, &shell, || None);
        assert!(matches!(unresolvable, RuleMatch::Stale(_)));
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
