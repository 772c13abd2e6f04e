//! Opening paths beneath a directory handle, with the kernel's own
//! containment.
//!
//! Keel's own file operations (the file tools and the run's snapshots) run
//! unsandboxed in the Keel process. Checking a path and then opening it by
//! name would let a concurrent process swap a directory for a symlink in
//! between and send the open anywhere. So every open here is relative to an
//! already open directory handle and resolved by the kernel with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`:
//! the path may not leave that directory, and no symlink is followed in any
//! component, the last included. Callers pass paths that were already
//! canonicalized (no symlinks, no `..`) at check time, so a symlink met here
//! means the tree changed under Keel, and the open fails with `ELOOP`.
//!
//! Where `openat2` is unavailable (Linux before 5.6, or a seccomp filter
//! refusing it), the same rule is applied one component at a time with
//! `openat(O_NOFOLLOW)`, refusing `..` — equally race-free, only slower.
//!
//! Reads open with `O_NONBLOCK`, so that a FIFO or a device never blocks the
//! open; callers then `fstat` the handle and refuse anything but a regular
//! file ([`regular`]).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

/// How a path is resolved beneath its directory handle.
fn resolve_flags() -> ResolveFlag {
    ResolveFlag::RESOLVE_BENEATH
        | ResolveFlag::RESOLVE_NO_SYMLINKS
        | ResolveFlag::RESOLVE_NO_MAGICLINKS
}

/// Opens `rel` beneath `dir` with `flags` (`O_CLOEXEC` and `O_NOFOLLOW` are
/// always added); `mode` is used when `flags` create a file.
pub fn open(dir: impl AsFd, rel: &Path, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    if rel.is_absolute() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an absolute path cannot be opened beneath a directory",
        ));
    }
    let flags = flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let how = OpenHow::new()
        .flags(flags)
        .mode(mode)
        .resolve(resolve_flags());
    match nix::fcntl::openat2(dir.as_fd(), rel, how) {
        Err(Errno::ENOSYS | Errno::EPERM) => open_stepwise(dir.as_fd(), rel, flags, mode),
        other => other.map_err(io::Error::from),
    }
}

/// The fallback: one component at a time, never following a symlink.
fn open_stepwise(
    dir: std::os::fd::BorrowedFd<'_>,
    rel: &Path,
    flags: OFlag,
    mode: Mode,
) -> io::Result<OwnedFd> {
    let names: Vec<&OsStr> = rel
        .components()
        .filter_map(|component| match component {
            Component::Normal(name) => Some(Ok(name)),
            Component::CurDir => None,
            _ => Some(Err(())),
        })
        .collect::<Result<_, ()>>()
        .map_err(|()| io::Error::from(Errno::EXDEV))?;
    let Some((last, parents)) = names.split_last() else {
        let flags = flags & !(OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_TRUNC);
        return nix::fcntl::openat(dir, ".", flags, mode).map_err(io::Error::from);
    };
    let flags = flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let step = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut current: Option<OwnedFd> = None;
    for name in parents {
        let next = match &current {
            Some(fd) => nix::fcntl::openat(fd, *name, step, Mode::empty()),
            None => nix::fcntl::openat(dir, *name, step, Mode::empty()),
        };
        current = Some(next.map_err(io::Error::from)?);
    }
    let opened = match &current {
        Some(fd) => nix::fcntl::openat(fd, *last, flags, mode),
        None => nix::fcntl::openat(dir, *last, flags, mode),
    };
    opened.map_err(io::Error::from)
}

/// Opens `rel` beneath `dir` for reading without blocking on a FIFO or a
/// device; the caller checks what it is with [`regular`].
pub fn open_read(dir: impl AsFd, rel: &Path) -> io::Result<File> {
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    open(dir, rel, flags, Mode::empty()).map(File::from)
}

/// Opens `rel` beneath `dir` for reading without blocking, following a
/// symlink only while it stays beneath `dir` (`RESOLVE_BENEATH` without
/// `RESOLVE_NO_SYMLINKS`; magic links never): for files Keel did not create
/// and did not check beforehand (keel-tools' `untrusted`). Where `openat2` is
/// missing, no symlink is followed at all.
pub fn open_read_inside(dir: impl AsFd, rel: &Path) -> io::Result<File> {
    if rel.is_absolute() {
        return Err(io::Error::from(Errno::EXDEV));
    }
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    match nix::fcntl::openat2(dir.as_fd(), rel, how) {
        Err(Errno::ENOSYS | Errno::EPERM) => {
            open_stepwise(dir.as_fd(), rel, flags | OFlag::O_NOFOLLOW, Mode::empty())
        }
        other => other.map_err(io::Error::from),
    }
    .map(File::from)
}

/// Opens a directory by absolute path as the handle later opens go beneath.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    nix::fcntl::open(path, flags, Mode::empty()).map_err(io::Error::from)
}

/// Reads the symlink `rel` beneath `dir` (its parent opened beneath `dir`).
pub fn read_link(dir: impl AsFd, rel: &Path) -> io::Result<Vec<u8>> {
    let (parent, name) = split_parent(rel)?;
    let parent = open(
        dir,
        parent,
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        Mode::empty(),
    )?;
    nix::fcntl::readlinkat(&parent, name)
        .map(|target| target.as_bytes().to_vec())
        .map_err(io::Error::from)
}

/// `rel`'s parent (possibly empty) and its last component.
pub fn split_parent(rel: &Path) -> io::Result<(&Path, &OsStr)> {
    match (rel.parent(), rel.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{}` does not name a file", rel.display()),
        )),
    }
}

/// What kind of file an open handle is, for refusing non-regular files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character or block device.
    Device,
    /// A symbolic link (only seen through `O_PATH`).
    Symlink,
}

impl FileKind {
    /// The kind of `metadata`.
    pub fn of(metadata: &std::fs::Metadata) -> FileKind {
        use std::os::unix::fs::FileTypeExt;
        let kind = metadata.file_type();
        if kind.is_file() {
            FileKind::Regular
        } else if kind.is_dir() {
            FileKind::Directory
        } else if kind.is_fifo() {
            FileKind::Fifo
        } else if kind.is_socket() {
            FileKind::Socket
        } else if kind.is_symlink() {
            FileKind::Symlink
        } else {
            FileKind::Device
        }
    }

    /// The kind as words, e.g. "a named pipe (FIFO)".
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a named pipe (FIFO)",
            FileKind::Socket => "a socket",
            FileKind::Device => "a device",
            FileKind::Symlink => "a symbolic link",
        }
    }
}

/// The open file's metadata if it is a regular file, else its kind.
pub fn regular(file: &File) -> io::Result<Result<std::fs::Metadata, FileKind>> {
    let metadata = file.metadata()?;
    Ok(match FileKind::of(&metadata) {
        FileKind::Regular => Ok(metadata),
        other => Err(other),
    })
}

/// Reads at most `limit` bytes of `file`; `Err(len)` when it holds more,
/// whatever its metadata said (it may grow while being read).
pub fn read_bounded(file: &mut File, limit: u64) -> io::Result<Result<Vec<u8>, u64>> {
    use std::io::Read as _;
    let hint = file.metadata().map(|m| m.len()).unwrap_or(0).min(limit);
    let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    let read = file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if read as u64 > limit {
        let len = file.metadata().map(|m| m.len()).unwrap_or(read as u64);
        return Ok(Err(len.max(read as u64)));
    }
    Ok(Ok(bytes))
}

/// The number of hard links of a regular file, when more than one.
pub fn extra_links(metadata: &std::fs::Metadata) -> Option<u64> {
    (metadata.is_file() && metadata.nlink() > 1).then(|| metadata.nlink())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn opens_beneath_and_refuses_symlinks_and_dot_dot() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f"), "inside").unwrap();
        std::fs::write(outside.path().join("secret"), "secret").unwrap();
        symlink(outside.path(), dir.path().join("out")).unwrap();
        symlink("d/f", dir.path().join("alias")).unwrap();
        let root = open_root(dir.path()).unwrap();
        let mut file = open_read(&root, Path::new("d/f")).unwrap();
        assert_eq!(read_bounded(&mut file, 100).unwrap().unwrap(), b"inside");
        for rel in ["out/secret", "alias", "../x", "d/../../x"] {
            assert!(open_read(&root, Path::new(rel)).is_err(), "{rel}");
            let stepwise =
                open_stepwise(root.as_fd(), Path::new(rel), OFlag::O_RDONLY, Mode::empty());
            assert!(stepwise.is_err(), "stepwise {rel}");
        }
        assert_eq!(read_link(&root, Path::new("alias")).unwrap(), b"d/f");
    }

    #[test]
    fn a_fifo_opens_without_blocking_and_is_not_regular() {
        let dir = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(&dir.path().join("pipe"), Mode::from_bits_truncate(0o600)).unwrap();
        let root = open_root(dir.path()).unwrap();
        let file = open_read(&root, Path::new("pipe")).unwrap();
        assert_eq!(regular(&file).unwrap().unwrap_err(), FileKind::Fifo);
    }

    #[test]
    fn bounded_reads_stop_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "0123456789").unwrap();
        let root = open_root(dir.path()).unwrap();
        let mut file = open_read(&root, Path::new("f")).unwrap();
        assert_eq!(read_bounded(&mut file, 4).unwrap().unwrap_err(), 10);
    }
}
