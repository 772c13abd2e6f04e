//! What the effect journal needs to know of a call before it runs.
//!
//! A tool that changes files names each target and, where it can compute
//! it from the target's current content, the content it will leave there
//! ([`Tool::planned_files`](crate::Tool::planned_files)). The kernel hashes
//! both into the `effect_started` record, so that recovery after a crash can
//! tell an applied change from one that never happened. Reads go through the
//! workspace root handle like every other Keel file operation.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::workspace::Workspace;

/// One file a call will change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    /// The target, as [`Workspace::resolve`] returned it.
    pub abs: PathBuf,
    /// The content the call will leave there, where the tool can tell.
    pub after: Option<Vec<u8>>,
}

/// The current content of `abs` beneath the workspace, `None` when it does
/// not exist or cannot be read as a regular file.
pub fn current_content(workspace: &Workspace, abs: &Path) -> Option<Vec<u8>> {
    let mut file = workspace.open_read(abs).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}
