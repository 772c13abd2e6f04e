//! Opening resolved paths without a window between check and open.
//!
//! [`Workspace::resolve`] checks a path by name and returns it canonical:
//! no symlink, no `..`. Everything opened afterwards goes through here and
//! is opened beneath the root handle with no symlink followed (see
//! [`crate::beneath`]), so if a directory on the way was swapped for a
//! symlink in between, the open fails rather than landing outside. Only a
//! path that a decision allowed outside the workspace is opened by name.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use super::{Workspace, WorkspaceError, io_error};
use crate::beneath;

impl Workspace {
    /// Opens a path returned by [`Workspace::resolve`] for reading, without
    /// blocking on a FIFO or a device; the caller checks what it opened.
    pub fn open_read(&self, abs: &Path) -> Result<File, WorkspaceError> {
        let shown = self.display(abs);
        match abs.strip_prefix(&self.root) {
            Ok(rel) => {
                beneath::open_read(&*self.handle, rel).map_err(|error| open_error(&shown, &error))
            }
            Err(_) if self.outside_allowed => std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
                .open(abs)
                .map_err(|error| io_error(&shown, &error)),
            Err(_) => Err(WorkspaceError::Outside { path: shown }),
        }
    }
}

/// Maps an error of an open beneath the root: a symlink met on the way
/// means the tree changed after the path was checked.
pub(super) fn open_error(shown: &str, error: &io::Error) -> WorkspaceError {
    match error.raw_os_error() {
        Some(nix::libc::ELOOP | nix::libc::EXDEV) => WorkspaceError::InvalidPath {
            path: shown.to_owned(),
            reason: "it changed into or through a symlink while being opened".to_owned(),
        },
        _ => io_error(shown, error),
    }
}
