//! Reading the workspace for a snapshot: which paths, and what each holds.
//!
//! Both kinds of snapshot (git and Keel's own) see the workspace through
//! this one walk, so they agree on what a snapshot contains:
//! - the walk skips `.git` and honours git's ignore rules (`.gitignore` in
//!   the tree and its parents, `.git/info/exclude`, the user's global
//!   excludes file), also outside git repositories; paths the repository
//!   tracks are added even when ignored;
//! - every file is opened beneath a handle of the root (see
//!   [`crate::beneath`]): no symlink is followed, a path that changes into a
//!   symlink meanwhile is skipped, and FIFOs, sockets and devices are never
//!   read (they are not snapshotted at all);
//! - a file over [`SnapshotLimits::max_file`], or with several hard links
//!   (another of its names may be outside the workspace), is never read: it
//!   is recorded by size and modification time only ([`Content::Unread`]);
//! - the whole walk runs under the snapshot's deadline and stops with
//!   [`ChangesError::TimedOut`] when it passes.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{ChangesError, Deadline, SnapshotLimits, io_err};
use crate::beneath;

/// What a file looked like when it was read: enough to tell that it has not
/// changed since (`ctime` cannot be set back by a process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    pub(super) len: u64,
    pub(super) mtime_ns: i128,
    ctime_ns: i128,
    mode: u32,
}

impl Stamp {
    fn of(metadata: &std::fs::Metadata) -> Stamp {
        let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        Stamp {
            dev: metadata.dev(),
            ino: metadata.ino(),
            len: metadata.len(),
            mtime_ns: ns(metadata.mtime(), metadata.mtime_nsec()),
            ctime_ns: ns(metadata.ctime(), metadata.ctime_nsec()),
            mode: metadata.mode(),
        }
    }

    /// Whether the file was last changed well before `instant` (so a change
    /// made in the same clock tick as a read cannot hide behind the stamp).
    pub(super) fn settled_before(&self, instant: SystemTime) -> bool {
        let Ok(since) = instant.duration_since(UNIX_EPOCH) else {
            return false;
        };
        let limit = i128::try_from(since.saturating_sub(Duration::from_secs(2)).as_nanos())
            .unwrap_or(i128::MAX);
        self.mtime_ns < limit && self.ctime_ns < limit
    }

    /// The file's permission bits (`0o7777`).
    pub(super) fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }

    /// Same size and modification time: how an unread file is compared.
    pub(super) fn same_size_and_time(&self, other: &Stamp) -> bool {
        self.len == other.len && self.mtime_ns == other.mtime_ns
    }
}

/// What the walk got of one path.
pub(super) enum Content {
    /// The whole content (a symlink's target for mode 120000).
    Bytes(Vec<u8>),
    /// Not read: over the size cap, or hard-linked.
    Unread,
    /// Not read because the caller said its stamp shows it unchanged.
    Reused,
}

/// One snapshotted path.
pub(super) struct Item {
    /// Path relative to the root, as bytes.
    pub(super) rel: Vec<u8>,
    /// git's mode: 100644, 100755 or 120000.
    pub(super) mode: u32,
    /// The file's stamp (default for symlinks).
    pub(super) stamp: Stamp,
    pub(super) content: Content,
}

/// A walk of one root under a deadline.
pub(super) struct Scan<'a> {
    root: &'a Path,
    handle: OwnedFd,
    limits: &'a SnapshotLimits,
    deadline: Deadline,
    /// When the walk started, for [`Stamp::settled_before`].
    pub(super) started: SystemTime,
}

impl<'a> Scan<'a> {
    /// Opens the root; the deadline starts now.
    pub(super) fn new(
        root: &'a Path,
        limits: &'a SnapshotLimits,
    ) -> Result<Scan<'a>, ChangesError> {
        let handle = beneath::open_root(root)
            .map_err(|e| io_err(format!("opening {}", root.display()), e))?;
        Ok(Scan {
            root,
            handle,
            limits,
            deadline: Deadline::new(limits.budget),
            started: SystemTime::now(),
        })
    }

    /// The snapshot's deadline.
    pub(super) fn deadline(&self) -> &Deadline {
        &self.deadline
    }

    /// Visits every snapshotted path in sorted order: the walk's, plus
    /// `extra` (paths a repository tracks, relative to the root). `reuse`
    /// says whether a file whose stamp it is shown need not be read.
    pub(super) fn run(
        &self,
        extra: &BTreeSet<Vec<u8>>,
        reuse: impl Fn(&[u8], &Stamp) -> bool,
        mut each: impl FnMut(Item) -> Result<(), ChangesError>,
    ) -> Result<(), ChangesError> {
        let mut paths = self.walk()?;
        paths.extend(extra.iter().cloned());
        for rel in paths {
            self.deadline.check("reading the workspace")?;
            if let Some(item) = self.item(rel, &reuse) {
                each(item)?;
            }
        }
        Ok(())
    }

    /// Regular files and symlinks under the root, sorted, relative.
    ///
    /// Fails when a directory's `.gitignore` is not a plain, small, regular
    /// file ([`crate::untrusted::ignore_files_are_plain`]): a FIFO would
    /// block the walk, a link to `/dev/zero` would fill memory, and
    /// skipping the directory instead would make its files look deleted.
    fn walk(&self) -> Result<BTreeSet<Vec<u8>>, ChangesError> {
        let refused = |why: String| {
            io_err(
                "reading the workspace's ignore rules".into(),
                std::io::Error::other(why),
            )
        };
        crate::untrusted::ignore_files_are_plain(self.root, &[".gitignore"]).map_err(refused)?;
        let unsafe_ignore: std::sync::Arc<std::sync::Mutex<Option<String>>> =
            std::sync::Arc::default();
        let found = std::sync::Arc::clone(&unsafe_ignore);
        let walker = ignore::WalkBuilder::new(self.root)
            .hidden(false)
            .ignore(false)
            .require_git(false)
            .git_ignore(true)
            .git_exclude(true)
            .git_global(true)
            .parents(true)
            .follow_links(false)
            .filter_entry(move |entry| {
                if entry.file_name() == ".git" {
                    return false;
                }
                if entry.file_type().is_some_and(|t| t.is_dir())
                    && let Err(why) =
                        crate::untrusted::ignore_files_are_plain(entry.path(), &[".gitignore"])
                {
                    if let Ok(mut found) = found.lock() {
                        found.get_or_insert(why);
                    }
                    return false;
                }
                true
            })
            .build();
        let mut paths = BTreeSet::new();
        for entry in walker {
            self.deadline.check("listing the workspace")?;
            let entry = match entry {
                Ok(entry) => entry,
                Err(err) => {
                    tracing::warn!(%err, "skipping an unreadable workspace entry");
                    continue;
                }
            };
            let wanted = entry
                .file_type()
                .is_some_and(|t| t.is_file() || t.is_symlink());
            if entry.depth() == 0 || !wanted {
                continue;
            }
            if let Ok(rel) = entry.path().strip_prefix(self.root) {
                paths.insert(rel.as_os_str().as_bytes().to_vec());
            }
        }
        if let Some(why) = unsafe_ignore.lock().ok().and_then(|mut found| found.take()) {
            return Err(refused(why));
        }
        Ok(paths)
    }

    /// Reads one path beneath the root; `None` when it is gone, not a
    /// regular file or symlink, or unreadable (logged).
    fn item(&self, rel: Vec<u8>, reuse: &impl Fn(&[u8], &Stamp) -> bool) -> Option<Item> {
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&rel));
        let mut file = match beneath::open_read(&self.handle, &path) {
            Ok(file) => file,
            Err(err) if err.raw_os_error() == Some(nix::libc::ELOOP) => {
                return self.link(rel, &path);
            }
            Err(err) => return skipped(&path, &err),
        };
        let metadata = match beneath::regular(&file) {
            Ok(Ok(metadata)) => metadata,
            Ok(Err(kind)) => {
                tracing::debug!(path = %path.display(), kind = kind.describe(), "not snapshotted");
                return None;
            }
            Err(err) => return skipped(&path, &err),
        };
        let exec = metadata.permissions().mode() & 0o111 != 0;
        let mode = if exec { 0o100755 } else { 0o100644 };
        let mut stamp = Stamp::of(&metadata);
        let unread =
            metadata.len() > self.limits.max_file || beneath::extra_links(&metadata).is_some();
        let content = if unread {
            Content::Unread
        } else if reuse(&rel, &stamp) {
            Content::Reused
        } else {
            match beneath::read_bounded(&mut file, self.limits.max_file) {
                Ok(Ok(bytes)) => Content::Bytes(bytes),
                Ok(Err(len)) => {
                    stamp.len = len;
                    Content::Unread
                }
                Err(err) => return skipped(&path, &err),
            }
        };
        Some(Item {
            rel,
            mode,
            stamp,
            content,
        })
    }

    fn link(&self, rel: Vec<u8>, path: &Path) -> Option<Item> {
        match beneath::read_link(&self.handle, path) {
            Ok(target) => Some(Item {
                rel,
                mode: 0o120000,
                stamp: Stamp::default(),
                content: Content::Bytes(target),
            }),
            Err(err) => skipped(path, &err),
        }
    }
}

fn skipped(path: &Path, err: &std::io::Error) -> Option<Item> {
    if err.kind() != std::io::ErrorKind::NotFound {
        tracing::warn!(path = %path.display(), %err, "skipping an unreadable file");
    }
    None
}
