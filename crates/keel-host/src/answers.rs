//! The permission answers a host reads from its user, one line each.
//!
//! A line is either a [`HostControl`] message (`{"type":
//! "permission_answer", "request_id": …, "decision": "approve"}`), the
//! older object without a `type` (`{"request_id": …, "decision": …}`), or a
//! bare word. Only an explicit approval of exactly this request approves;
//! end of input, anything unreadable, another request's id and every other
//! word deny. An answer with scope `always` keeps its scope: the kernel
//! records it as a session rule that decides later matching calls.

use keel_protocol::{
    HostControl, HostDecision, PermissionAnswer, PermissionResolution, PermissionScope,
};
use serde_json::Value;

/// The answer one line (`None`: end of input) gives to request `request_id`.
pub fn answer_line(line: Option<&str>, request_id: &str) -> PermissionAnswer {
    let Some(line) = line.map(str::trim) else {
        return PermissionAnswer::once(PermissionResolution::Denied);
    };
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return PermissionAnswer::once(resolution(is_approval(line)));
    };
    if value.get("type").is_some() {
        return match serde_json::from_value::<HostControl>(value) {
            Ok(control) => match control.permission_answer() {
                Some((id, answer)) if id == request_id => answer,
                _ => PermissionAnswer::once(PermissionResolution::Denied),
            },
            Err(_) => PermissionAnswer::once(PermissionResolution::Denied),
        };
    }
    let id_matches = value.get("request_id").and_then(Value::as_str) == Some(request_id);
    let decision = value
        .get("decision")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let scope = match value.get("scope").and_then(Value::as_str) {
        Some("always") => PermissionScope::Always,
        _ => PermissionScope::Once,
    };
    PermissionAnswer::new(resolution(id_matches && is_approval(decision)), scope)
}

/// Whether a word is an approval: the words [`HostDecision::Approve`]
/// accepts (`approve`, `approved`, `a`, `y`, `yes`), in any case.
pub fn is_approval(word: &str) -> bool {
    let word = Value::String(word.to_ascii_lowercase());
    matches!(
        serde_json::from_value::<HostDecision>(word),
        Ok(HostDecision::Approve)
    )
}

fn resolution(approved: bool) -> PermissionResolution {
    if approved {
        PermissionResolution::Approved
    } else {
        PermissionResolution::Denied
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_an_explicit_approval_of_this_request_approves() {
        let approved = |line: Option<&str>| {
            answer_line(line, "r1").resolution == PermissionResolution::Approved
        };
        assert!(approved(Some("y")));
        assert!(approved(Some(" YES ")));
        assert!(approved(Some(
            r#"{"request_id": "r1", "decision": "approve"}"#
        )));
        assert!(approved(Some(
            r#"{"type": "permission_answer", "request_id": "r1", "decision": "approve"}"#
        )));
        assert!(!approved(None));
        assert!(!approved(Some("")));
        assert!(!approved(Some("sure")));
        assert!(!approved(Some(
            r#"{"request_id": "r2", "decision": "approve"}"#
        )));
        assert!(!approved(Some(
            r#"{"request_id": "r1", "decision": "deny"}"#
        )));
        assert!(!approved(Some(
            r#"{"type": "permission_answer", "request_id": "r2", "decision": "approve"}"#
        )));
        assert!(!approved(Some(r#"{"type": "steer", "text": "approve"}"#)));
        assert!(!approved(Some(r#"{"type": "permission_answer"}"#)));
    }

    #[test]
    fn an_always_answer_keeps_its_scope() {
        let answer = answer_line(
            Some(
                r#"{"type": "permission_answer", "request_id": "r1", "decision": "approve", "scope": "always"}"#,
            ),
            "r1",
        );
        assert_eq!(answer.scope, PermissionScope::Always);
        assert_eq!(answer.resolution, PermissionResolution::Approved);
        let legacy = answer_line(
            Some(r#"{"request_id": "r1", "decision": "deny", "scope": "always"}"#),
            "r1",
        );
        assert_eq!(legacy.scope, PermissionScope::Always);
        assert_eq!(legacy.resolution, PermissionResolution::Denied);
    }
}
