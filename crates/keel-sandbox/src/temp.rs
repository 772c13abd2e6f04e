//! The private temp dir of one sandboxed command.
//!
//! The shared `/tmp` is not readable inside the sandbox (other users' and
//! other programs' files live there), so each confined command gets its own
//! directory, mode 0700, which TMPDIR points at. It is removed with
//! everything in it when the confinement is dropped.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::SandboxError;

/// A directory only this command may use; removed on drop.
#[derive(Debug)]
pub struct PrivateTemp {
    path: PathBuf,
}

impl PrivateTemp {
    /// Creates a fresh directory under the system temp dir.
    pub fn create() -> Result<Self, SandboxError> {
        let path = std::env::temp_dir().join(format!("keel-sandbox-{}", uuid::Uuid::now_v7()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|error| {
                SandboxError::Io(format!(
                    "cannot create the private temp dir {}: {error}",
                    path.display()
                ))
            })?;
        // Canonical, so that Landlock rules and TMPDIR name the same place.
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateTemp {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.path) {
            tracing::debug!(path = %self.path.display(), %error, "removing the private temp dir failed");
        }
    }
}
