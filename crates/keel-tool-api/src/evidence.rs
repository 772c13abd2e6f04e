//! What the effect journal needs to know of a call before it runs.
//!
//! A tool that changes files names each target and, where it can compute
//! it from the target's current content, the content it will leave there
//! ([`Tool::planned_files`](crate::Tool::planned_files)). The kernel hashes
//! both into the `effect_started` record, so that recovery after a crash can
//! tell an applied change from one that never happened. Reads go through the
//! workspace root handle like every other Keel file operation.

use std::path::{Path, PathBuf};

use keel_protocol::PathKind;

use crate::beneath::FileKind;
use crate::workspace::Workspace;

/// One file a call will change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlannedFile {
    /// The target, as [`Workspace::resolve`] returned it.
    pub abs: PathBuf,
    /// The content the call will leave there, where the tool can tell.
    pub after: Option<Vec<u8>>,
}

impl PlannedFile {
    /// The target `abs` and, where the tool can tell, what it will hold.
    pub fn new(abs: PathBuf, after: Option<Vec<u8>>) -> Self {
        Self { abs, after }
    }
}

/// The current content of `abs` beneath the workspace, `None` when it does
/// not exist, cannot be read as a regular file, or holds more than
/// [`STATE_READ_LIMIT`] bytes (a command may have planted a sparse file of
/// any size: Keel's own process never reads more than the limit of it).
pub fn current_content(workspace: &Workspace, abs: &Path) -> Option<Vec<u8>> {
    let mut file = workspace.open_read(abs).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    crate::beneath::read_bounded(&mut file, STATE_READ_LIMIT)
        .ok()?
        .ok()
}

/// What is at a path now, as recovery compares it with the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathState {
    /// Nothing (the path, or a directory on the way, does not exist).
    Absent,
    /// A regular file and its content.
    File(Vec<u8>),
    /// Something else: a directory, a symlink, a special file, or a file
    /// that cannot be read.
    Other(PathKind),
}

impl PathState {
    /// The kind of what is there.
    pub fn kind(&self) -> PathKind {
        match self {
            Self::Absent => PathKind::Absent,
            Self::File(_) => PathKind::File,
            Self::Other(kind) => *kind,
        }
    }
}

/// The most of a file [`path_state`] reads to hash it: a larger one is
/// [`PathKind::Other`] (its content cannot be compared), so recovery never
/// runs a call again on it.
pub const STATE_READ_LIMIT: u64 = 64 * 1024 * 1024;

/// What is at `abs` beneath the workspace now, a symlink there not
/// followed (a link is [`PathKind::Symlink`], whatever it points to). A
/// regular file is read (at most [`STATE_READ_LIMIT`] bytes, without
/// blocking); one that cannot be read whole is [`PathKind::Other`].
pub fn path_state(workspace: &Workspace, abs: &Path) -> PathState {
    let metadata = match workspace.symlink_metadata(abs) {
        Ok(metadata) => metadata,
        Err(error)
            if matches!(
                error.raw_os_error(),
                Some(nix::libc::ENOENT | nix::libc::ENOTDIR)
            ) =>
        {
            return PathState::Absent;
        }
        Err(_) => return PathState::Other(PathKind::Other),
    };
    match FileKind::of(&metadata) {
        FileKind::Regular => match read_regular(workspace, abs) {
            Some(bytes) => PathState::File(bytes),
            None => PathState::Other(PathKind::Other),
        },
        FileKind::Directory => PathState::Other(PathKind::Directory),
        FileKind::Symlink => PathState::Other(PathKind::Symlink),
        FileKind::Fifo | FileKind::Socket | FileKind::Device => PathState::Other(PathKind::Other),
    }
}

/// The whole content of the regular file at `abs`, `None` when it is not
/// one (any more), cannot be read, or holds more than [`STATE_READ_LIMIT`].
fn read_regular(workspace: &Workspace, abs: &Path) -> Option<Vec<u8>> {
    let mut file = workspace.open_read(abs).ok()?;
    crate::beneath::regular(&file).ok()?.ok()?;
    crate::beneath::read_bounded(&mut file, STATE_READ_LIMIT)
        .ok()?
        .ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn current_content_never_reads_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        // Sparse: a command can plant one of any size at no cost.
        let big = std::fs::File::create(dir.path().join("big.txt")).unwrap();
        big.set_len(STATE_READ_LIMIT + 1).unwrap();
        let abs = dir.path().join("big.txt");
        assert_eq!(current_content(&workspace, &abs), None);
        std::fs::write(&abs, "small").unwrap();
        assert_eq!(
            current_content(&workspace, &abs).as_deref(),
            Some(&b"small"[..])
        );
    }

    #[test]
    fn path_state_tells_absence_files_and_other_kinds_apart_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("file.txt"), "content").unwrap();
        std::fs::create_dir(root.join("dir")).unwrap();
        std::os::unix::fs::symlink("file.txt", root.join("link")).unwrap();
        nix::unistd::mkfifo(
            &root.join("pipe"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let workspace = Workspace::new(root).unwrap();
        let state = |name: &str| path_state(&workspace, &workspace.root().join(name));
        assert_eq!(state("file.txt"), PathState::File(b"content".to_vec()));
        assert_eq!(state("missing.txt"), PathState::Absent);
        // A directory on the way that is a file: nothing is there.
        assert_eq!(state("file.txt/below"), PathState::Absent);
        assert_eq!(state("dir"), PathState::Other(PathKind::Directory));
        assert_eq!(state("link"), PathState::Other(PathKind::Symlink));
        // A FIFO is named, never opened (opening could block).
        assert_eq!(state("pipe"), PathState::Other(PathKind::Other));
        // Through a symlinked directory: not followed.
        std::os::unix::fs::symlink("dir", root.join("dirlink")).unwrap();
        std::fs::write(root.join("dir/inner.txt"), "x").unwrap();
        assert_eq!(
            state("dirlink/inner.txt"),
            PathState::Other(PathKind::Other)
        );
    }
}
