//! The staging directory of one sandboxed command.
//!
//! The command's new root is a tmpfs mounted, inside its private mount
//! namespace, on an empty directory of the host: that directory. It is
//! created fresh (mode 0700, in the system temp dir) so that the mount hides
//! nothing any bind of the view needs, stays empty on the host, and is
//! removed when the confinement is dropped. The command's own temporary
//! files live in its private `/tmp` (a tmpfs), not here.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::SandboxError;

/// An empty host directory the new root is mounted on; removed on drop.
#[derive(Debug)]
pub(crate) struct Staging {
    path: PathBuf,
}

impl Staging {
    /// Creates a fresh directory under the system temp dir.
    pub(crate) fn create() -> Result<Self, SandboxError> {
        let path = std::env::temp_dir().join(format!("keel-sandbox-{}", uuid::Uuid::now_v7()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|error| {
                SandboxError::Io(format!(
                    "cannot create the sandbox's staging directory {}: {error}",
                    path.display()
                ))
            })?;
        Ok(Self { path })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir(&self.path) {
            tracing::debug!(path = %self.path.display(), %error, "removing the staging directory failed");
        }
    }
}
