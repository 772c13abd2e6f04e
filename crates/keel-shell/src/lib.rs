//! Static analysis of a `bash` tool call: what the command would do, as far
//! as its syntax tells.
//!
//! Before the kernel runs `bash -c COMMAND` it classifies the call into an
//! operation intent (kind × scope) for the permission policy. This crate
//! produces that classification from a real parse of the command, not from
//! patterns over its text: [`analyze`] parses bash syntax (`lex.rs`,
//! `word.rs`, `parse.rs`), expands each word as far as it can be known
//! statically (`expand.rs`), walks the commands in order while tracking
//! the working directory (`walk.rs`, `frame.rs`), interprets the commands
//! it knows (`commands.rs`, `wrappers.rs`, `tools.rs`, `git.rs`,
//! `packages.rs`), and
//! places every path a command names against the workspace root
//! (`check.rs`, `resolve.rs`). `report.rs` merges the findings.
//!
//! Invariants:
//!
//! - **Unsure means unknown, never safe.** Syntax the parser does not
//!   model, a command name that is not static, an `eval` of a non-literal
//!   string, a shell reading commands from a pipe: all make the kind
//!   unknown. A path that cannot be known statically makes the scope
//!   unknown. Findings only ever make the result less safe.
//! - **Bounded.** Input longer than [`MAX_INPUT`] bytes or nested deeper
//!   than [`MAX_DEPTH`] levels is unknown; the walk and the file-system
//!   checks have fixed budgets; nothing here can panic on any input.
//! - **What it does not see.** The contents of scripts and programs that
//!   run (`bash build.sh`, `source x`, `python3 -c …`, `awk`/`sed` programs,
//!   `make`, git aliases and hooks) are out of reach: such commands are plain
//!   shell if their arguments are. Nor does it see what the inherited
//!   environment changes (`BASH_ENV`, `CDPATH`, exported functions), or
//!   what recursive tools find by walking a directory (`find`, `grep -R`
//!   following a symlink). The OS sandbox is what confines all of that; this
//!   analysis decides what to ask the user about.
//! - **Checked now, run later.** Paths are resolved when the command is
//!   analyzed; a command that swaps a directory for a symlink between two
//!   of its own steps is only caught if the symlink's target is itself named.
//! - **Pure analysis.** This is an engine crate under `keel-tools`, which
//!   re-exports it as `keel_tools::shell`. It runs nothing, spawns nothing
//!   and writes nothing; the file system is only looked at (metadata, link
//!   targets, directory listings for globs). It depends on `keel-protocol`
//!   for the intent words and on `keel-tool-api` for [`paths`], the path
//!   helpers the rooted workspace shares with it (defined there, beside the
//!   `Workspace` that uses them), and on nothing of the sandbox, so a crate
//!   that needs the analysis never builds Landlock or seccomp.

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

mod ast;
mod check;
mod commands;
mod expand;
mod frame;
mod git;
mod lex;
mod packages;
mod parse;
pub use keel_tool_api::paths;
mod redact;
mod report;
mod resolve;
mod tools;
mod walk;
mod word;
mod wrappers;

#[cfg(test)]
mod tests;

use std::path::Path;

use keel_protocol::{IntentKind, IntentScope};

pub use self::redact::redact_url;
pub use self::report::{MAX_COMMANDS, MAX_TARGETS, MAX_WORDS};
use self::resolve::Roots;
use self::walk::Walker;

/// Longest command analyzed, in bytes; longer ones are unknown.
pub const MAX_INPUT: usize = 64 * 1024;

/// Deepest nesting analyzed (compound commands, substitutions, nested
/// shells and function calls); deeper commands are unknown.
pub const MAX_DEPTH: usize = 24;

/// What a shell command would do, as far as its syntax tells.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShellAnalysis {
    /// Shell, Network, or Unknown (only these three).
    pub kind: IntentKind,
    /// Workspace, Metadata (it writes `.git` or `.keel`), Outside or Unknown.
    pub scope: IntentScope,
    /// Paths the command names (workspace-relative when inside, absolute
    /// otherwise) and network targets (hosts/URLs), deduplicated, in
    /// first-seen order; capped at 32.
    pub targets: Vec<String>,
    /// Why the command is not plain shell inside the workspace, one short
    /// human sentence each. Empty when kind=Shell and scope=Workspace.
    /// Targets and reasons hold no URL userinfo, query or fragment
    /// ([`redact_url`]): they are shown to hosts and stored in sessions.
    pub reasons: Vec<String>,
    /// The words of each simple command the walk reached, in order, as far
    /// as they are known statically (variables set in the command
    /// expanded; a word with an unknown part is its known prefix followed
    /// by `\u{0}?`); at most 32 commands of 64 words. Not redacted: a
    /// session keeps only hashes of it (an "always" answer binds to it).
    pub commands: Vec<Vec<String>>,
    /// Whether nothing the analysis found needs what the OS sandbox of a
    /// workspace command refuses: no network target, no path outside the
    /// workspace (read or written), no write of `.git`/`.keel`, no other
    /// user's privileges and no control of another process. An unknown
    /// kind or scope is then only what could not be resolved statically.
    /// False when the command as a whole could not be analyzed (too long,
    /// empty, not parsed). It says nothing on its own: a plain
    /// shell-in-workspace command is confinable too.
    pub confinable: bool,
}

impl ShellAnalysis {
    /// An unknown command, for one reason.
    fn unknown(reason: impl Into<String>) -> ShellAnalysis {
        ShellAnalysis {
            kind: IntentKind::Unknown,
            scope: IntentScope::Unknown,
            targets: Vec::new(),
            reasons: vec![reason.into()],
            commands: Vec::new(),
            confinable: false,
        }
    }
}

/// Analyzes `command` as it would run with cwd `root` (a canonical, existing directory).
///
/// `temp_dir`: the private temp dir that `TMPDIR` will point to for the
/// child, if any; paths under it count as inside.
pub fn analyze(command: &str, root: &Path, temp_dir: Option<&Path>) -> ShellAnalysis {
    if command.len() > MAX_INPUT {
        return ShellAnalysis::unknown(format!(
            "the command is longer than {} KiB",
            MAX_INPUT / 1024
        ));
    }
    if command.trim().is_empty() {
        return ShellAnalysis::unknown("the command is empty");
    }
    let list = match parse::parse_script(command) {
        Ok(list) => list,
        Err(error) => return ShellAnalysis::unknown(format!("cannot parse: {error}")),
    };
    if list.items.is_empty() {
        return ShellAnalysis::unknown("the command is empty");
    }
    let roots = Roots::new(root, temp_dir);
    let mut walker = Walker::new(&roots, command);
    let mut frame = walker.top_frame();
    walker.walk_list(&list, &mut frame);
    walker.finish()
}
