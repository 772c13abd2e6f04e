//! What the analysis found, merged into one [`ShellAnalysis`].
//!
//! Findings only ever make the result less safe: kind goes Shell → Network →
//! Unknown and scope goes Workspace → Unknown → Metadata → Outside, whatever
//! order they arrive in. Metadata ranks above an unknown scope because an
//! approved call of either stays sandboxed and metadata only adds that
//! `.git`/`.keel` become writable; an unknown kind still makes the scope
//! unknown, so a command that cannot be classified never gets them. Targets and reasons are deduplicated and bounded, and every
//! URL in them is redacted (`redact`).
//!
//! Because an unknown kind hides the scope, whether the command is
//! [`ShellAnalysis::confinable`] is kept apart: it is false as soon as any
//! finding names something the workspace sandbox refuses (the network,
//! anything outside the workspace, writing `.git`/`.keel`, another user's
//! privileges or another process), whatever else is unknown.

use keel_protocol::{IntentKind, IntentScope};

use super::ShellAnalysis;
use super::redact::redact_urls_in;

/// Most targets reported.
pub const MAX_TARGETS: usize = 32;
/// Most reasons reported.
const MAX_REASONS: usize = 32;
/// Most commands whose words are reported.
pub const MAX_COMMANDS: usize = 32;
/// Most words reported per command.
pub const MAX_WORDS: usize = 64;

/// The findings so far.
#[derive(Debug, Default)]
pub(super) struct Findings {
    unknown_kind: bool,
    network: bool,
    outside: bool,
    metadata: bool,
    unknown_scope: bool,
    privileged: bool,
    targets: Vec<String>,
    reasons: Vec<String>,
    commands: Vec<Vec<String>>,
}

impl Findings {
    /// The command may do something the analysis cannot see.
    pub(super) fn unknown_kind(&mut self, reason: impl Into<String>) {
        self.unknown_kind = true;
        self.reason(reason.into());
    }

    /// The command reaches the network.
    pub(super) fn network(&mut self, reason: impl Into<String>) {
        self.network = true;
        self.reason(reason.into());
    }

    /// The command names something outside the workspace.
    pub(super) fn outside(&mut self, reason: impl Into<String>) {
        self.outside = true;
        self.reason(reason.into());
    }

    /// The command writes git's or Keel's metadata in the workspace.
    pub(super) fn metadata(&mut self, reason: impl Into<String>) {
        self.metadata = true;
        self.reason(reason.into());
    }

    /// The command needs authority no sandboxed command has: another
    /// user's or root's privileges, or control of another process.
    pub(super) fn privileged(&mut self, reason: impl Into<String>) {
        self.privileged = true;
        self.unknown_kind(reason);
    }

    /// The command names something the analysis cannot place.
    pub(super) fn unknown_scope(&mut self, reason: impl Into<String>) {
        self.unknown_scope = true;
        self.reason(reason.into());
    }

    /// A path or network target the command names.
    pub(super) fn target(&mut self, target: impl Into<String>) {
        push_bounded(
            &mut self.targets,
            redact_urls_in(&target.into()),
            MAX_TARGETS,
        );
    }

    /// The words of one simple command as expanded statically.
    pub(super) fn command(&mut self, words: Vec<String>) {
        if self.commands.len() < MAX_COMMANDS {
            self.commands
                .push(words.into_iter().take(MAX_WORDS).collect());
        }
    }

    /// Records a reason.
    fn reason(&mut self, reason: String) {
        push_bounded(&mut self.reasons, redact_urls_in(&reason), MAX_REASONS);
    }

    /// The merged result.
    pub(super) fn finish(self) -> ShellAnalysis {
        let kind = if self.unknown_kind {
            IntentKind::Unknown
        } else if self.network {
            IntentKind::Network
        } else {
            IntentKind::Shell
        };
        let scope = if kind == IntentKind::Unknown {
            IntentScope::Unknown
        } else if self.outside {
            IntentScope::Outside
        } else if self.metadata {
            IntentScope::Metadata
        } else if self.unknown_scope {
            IntentScope::Unknown
        } else {
            IntentScope::Workspace
        };
        let plain = kind == IntentKind::Shell && scope == IntentScope::Workspace;
        let confinable = !(self.network || self.outside || self.metadata || self.privileged);
        ShellAnalysis {
            kind,
            scope,
            confinable,
            targets: self.targets,
            reasons: if plain { Vec::new() } else { self.reasons },
            commands: self.commands,
        }
    }
}

/// Appends `item` unless present or the list is full.
fn push_bounded(list: &mut Vec<String>, item: String, max: usize) {
    if list.len() < max && !list.contains(&item) {
        list.push(item);
    }
}
