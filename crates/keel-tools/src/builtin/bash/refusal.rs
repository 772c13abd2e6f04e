//! What a confined command's failure says about the sandbox.
//!
//! A command left to the OS sandbox may need what the sandbox refuses:
//! the network, a write outside the workspace's writable roots, a write of
//! `.git`/`.keel`. It then fails with the system's own words (EACCES,
//! EPERM, EROFS, ENETUNREACH, a name that does not resolve), which do not
//! say that the sandbox was the cause. When a confined command exits
//! non-zero and its output holds such words, its result gets a hint that
//! the sandbox probably refused it, what the level allows, and what an
//! approval would allow, so the model can ask and the user can answer.
//! The hint is a guess from the output and says so; it changes nothing
//! about what ran.

use super::Ending;
use crate::sandbox::SandboxLevel;

/// Words a refused system call leaves in a command's output, lowercase,
/// with what each means here.
const SIGNS: [(&str, Refused); 10] = [
    ("read-only file system", Refused::Write),
    ("permission denied", Refused::Write),
    ("operation not permitted", Refused::Write),
    ("network is unreachable", Refused::Network),
    ("temporary failure in name resolution", Refused::Network),
    ("could not resolve host", Refused::Network),
    ("name or service not known", Refused::Network),
    ("could not resolve hostname", Refused::Network),
    ("failed to lookup address", Refused::Network),
    ("no address associated with hostname", Refused::Network),
];

/// What the sandbox probably refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    Write,
    Network,
}

/// The hint for a confined command (run at `confined`) that ended as
/// `ending` with output `text`, when it failed with words of a refusal.
pub(super) fn hint(confined: Option<SandboxLevel>, ending: &Ending, text: &str) -> Option<String> {
    let level = confined?;
    if !matches!(ending, Ending::Exited(status) if !status.success()) {
        return None;
    }
    let lower = text.to_lowercase();
    let found: Vec<(&str, Refused)> = SIGNS
        .iter()
        .filter(|(sign, refused)| {
            lower.contains(sign) && (*refused != Refused::Network || !level.allows_network())
        })
        .copied()
        .collect();
    let (first, _) = found.first()?;
    let network = found
        .iter()
        .any(|(_, refused)| *refused == Refused::Network);
    let write = found.iter().any(|(_, refused)| *refused == Refused::Write);
    let allows = match level {
        SandboxLevel::ReadOnly => "it may write only its private temp dir, with no network",
        SandboxLevel::WorkspaceWrite => {
            "it may write only inside the workspace (`.git` and `.keel` are read-only), with no network"
        }
        _ => "it may write only inside the workspace (`.git` and `.keel` are read-only)",
    };
    let mut needs = Vec::new();
    if network {
        needs.push("the network");
    }
    if write {
        needs.push("writing outside the workspace or to `.git`/`.keel`");
    }
    Some(format!(
        "Keel: the OS sandbox probably refused this command (its output says \"{first}\"): \
         it ran at {}, where {allows}. If it needs {}, that takes the user's approval: run \
         a command that names what it reaches (the URL, or the path outside the workspace) \
         so that the user is asked to approve exactly that, or ask the user.",
        level.as_str(),
        needs.join(" or ")
    ))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::*;

    fn failed() -> Ending {
        Ending::Exited(ExitStatus::from_raw(1 << 8))
    }

    #[test]
    fn a_refusal_in_a_confined_failure_gets_a_hint() {
        let level = Some(SandboxLevel::WorkspaceWrite);
        let text = "touch: cannot touch '/home/u/x': Read-only file system";
        let write = hint(level, &failed(), text).unwrap();
        assert!(write.contains("read-only file system"), "{write}");
        assert!(write.contains("workspace_write"), "{write}");
        assert!(write.contains("writing outside the workspace"), "{write}");
        assert!(!write.contains("needs the network"), "{write}");
        let text = "curl: (6) Could not resolve host: example.com";
        let network = hint(level, &failed(), text).unwrap();
        assert!(network.contains("If it needs the network"), "{network}");
    }

    #[test]
    fn no_hint_unconfined_on_success_or_without_a_sign() {
        let text = "x: Permission denied";
        assert_eq!(hint(None, &failed(), text), None);
        let ok = Ending::Exited(ExitStatus::from_raw(0));
        assert_eq!(hint(Some(SandboxLevel::WorkspaceWrite), &ok, text), None);
        let plain = "error: expected `;`";
        assert_eq!(
            hint(Some(SandboxLevel::WorkspaceWrite), &failed(), plain),
            None
        );
        // The network was granted: a name that does not resolve is not the sandbox.
        let dns = "Could not resolve host: example.com";
        let level = Some(SandboxLevel::WorkspaceWriteNetwork);
        assert_eq!(hint(level, &failed(), dns), None);
    }
}
