//! Where a non-git baseline keeps its start contents off the heap.
//!
//! A [`Spill`] is a private directory (mode 0700) made under a directory the
//! caller names (the OS temp dir; this library never reads the
//! environment). Each kept content is one file named by the SHA-256 of its
//! bytes, created with `O_EXCL` and mode 0600, so identical contents are
//! stored once and nothing already there is ever opened for writing or
//! followed. The directory and everything in it are removed when the
//! `Spill` drops.
//!
//! Invariant: a stored file is never rewritten; a read returns the bytes
//! whose digest names the file, or an error (a file altered behind Keel's
//! back is reported, never diffed as if it were the start state).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{ChangesError, io_err};

/// A SHA-256 digest naming one spilled content.
pub(super) type ContentId = [u8; 32];

/// The private directory of one baseline's spilled contents.
pub(super) struct Spill {
    dir: PathBuf,
}

impl Spill {
    /// Creates a fresh private directory under `parent`.
    pub(super) fn create(parent: &Path) -> Result<Spill, ChangesError> {
        let dir = parent.join(format!("keel-baseline-{}", uuid::Uuid::now_v7()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io_err(format!("creating {}", dir.display()), e))?;
        Ok(Spill { dir })
    }

    /// The directory's path.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores `bytes` (once per distinct content) and returns its id.
    pub(super) fn store(&self, bytes: &[u8]) -> Result<ContentId, ChangesError> {
        let id: ContentId = Sha256::digest(bytes).into();
        let path = self.path(&id);
        let context = || format!("writing {}", path.display());
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        match created {
            Ok(mut file) => {
                file.write_all(bytes).map_err(|e| io_err(context(), e))?;
                Ok(id)
            }
            // Content-addressed: the same bytes are already stored.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(id),
            Err(e) => Err(io_err(context(), e)),
        }
    }

    /// Reads back the content `id` names (`len` bytes when stored),
    /// checking its digest. Read through Keel's one reader of files it may
    /// not trust (`untrusted::read`): beneath the directory, never through
    /// a link out of it, a regular file only, never blocking, and at most
    /// `len` bytes — whatever may have replaced the file since.
    pub(super) fn load(&self, id: &ContentId, len: usize) -> Result<Vec<u8>, ChangesError> {
        let name = hex(id);
        let path = self.dir.join(&name);
        let origin = crate::untrusted::Origin::Beneath {
            root: &self.dir,
            rel: Path::new(&name),
        };
        let cap = crate::untrusted::Limit::Refuse(len as u64);
        let bytes = crate::untrusted::read(origin, cap)
            .map_err(|e| {
                io_err(
                    format!("reading {}", path.display()),
                    std::io::Error::other(e),
                )
            })?
            .bytes;
        if Sha256::digest(&bytes).as_slice() != id.as_slice() {
            let e = std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the stored start content was altered",
            );
            return Err(io_err(format!("reading {}", path.display()), e));
        }
        Ok(bytes)
    }

    fn path(&self, id: &ContentId) -> PathBuf {
        self.dir.join(hex(id))
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        if let Err(err) = std::fs::remove_dir_all(&self.dir) {
            tracing::debug!(dir = %self.dir.display(), %err, "could not remove the baseline's spill directory");
        }
    }
}

/// Whether `bytes` are the content `id` names.
pub(super) fn same_content(id: &ContentId, bytes: &[u8]) -> bool {
    Sha256::digest(bytes).as_slice() == id.as_slice()
}

/// `bytes` in lowercase hex (content ids name files by it).
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored content replaced by a link out of the directory is refused,
    /// even to a file holding the very same bytes; so is one that grew.
    #[test]
    fn a_replaced_content_is_refused_not_followed() {
        let parent = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let spill = Spill::create(parent.path()).unwrap();
        let bytes = b"start content\n";
        let id = spill.store(bytes).unwrap();
        assert_eq!(spill.load(&id, bytes.len()).unwrap(), bytes);

        let elsewhere = outside.path().join("same");
        std::fs::write(&elsewhere, bytes).unwrap();
        let stored = spill.path(&id);
        std::fs::remove_file(&stored).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &stored).unwrap();
        assert!(
            spill.load(&id, bytes.len()).is_err(),
            "a link out was followed"
        );

        std::fs::remove_file(&stored).unwrap();
        std::fs::write(&stored, [bytes.as_slice(), b"more"].concat()).unwrap();
        assert!(
            spill.load(&id, bytes.len()).is_err(),
            "a grown file was read"
        );
    }
}
