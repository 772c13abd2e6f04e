//! Reading a file Keel did not create: the one way Keel's own, unsandboxed
//! process reads project instructions (`AGENTS.md`, `CLAUDE.md`), the
//! project layer `.keel/config.toml`, the user's `config.toml` and
//! anything a later feature reads from a repository.
//!
//! Keel runs with the user's keys in its environment, and a sandboxed
//! command of an earlier run (or whoever wrote the repository) may have
//! planted what Keel opens next: a symlink to `/proc/self/environ` or
//! `~/.ssh/id_rsa`, a FIFO that blocks the first `open`, a link to
//! `/dev/zero` that never ends. So every read here
//!
//! - opens according to where the file lives ([`Origin`]): beneath a root
//!   directory handle with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//!   (a symlink is followed only while it stays beneath the root), or with
//!   `O_NOFOLLOW` on the last component, or — for the user's own files —
//!   following symlinks the user made;
//! - opens with `O_NONBLOCK | O_NOCTTY | O_CLOEXEC`, so a FIFO or a device
//!   never blocks the open and no terminal is acquired;
//! - `fstat`s the open handle and refuses anything but a regular file (and,
//!   beneath a root, a file with several hard links, which may be a file
//!   from outside the root: the file tools treat such files the same way);
//! - reads at most a cap ([`Limit`]), whatever the metadata said, because a
//!   file may grow while it is read.
//!
//! A refusal is an [`UntrustedError`] naming the path and the reason; it
//! never holds a byte of the file, so callers may show it (a warning, a
//! startup error) without quoting what a planted link pointed at.
//!
//! Where `openat2` is unavailable (Linux before 5.6, a seccomp filter
//! refusing it) the beneath open falls back to a walk that follows no
//! symlink at all: stricter, never looser.

use std::fs::File;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::beneath;

/// Where a file Keel did not create lives, which decides how it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin<'a> {
    /// `rel` beneath the directory `root` (the workspace): resolved by the
    /// kernel beneath a handle of `root`, a symlink followed only while it
    /// stays beneath `root` (a relative one; an absolute symlink, a `..`
    /// that leaves, and a `/proc` magic link are refused), and a file with
    /// several hard links refused.
    Beneath {
        /// The root directory (trusted: it is opened by name).
        root: &'a Path,
        /// The file, relative to `root`.
        rel: &'a Path,
    },
    /// A file outside any root Keel holds (an instruction file in a
    /// directory above the workspace): its last component must not be a
    /// symlink (`O_NOFOLLOW`).
    NoFollow(&'a Path),
    /// The user's own file (`~/.config/keel/config.toml`, the global
    /// `AGENTS.md`): symlinks are followed, since dotfile managers make
    /// them, but the file must still be a regular file.
    User(&'a Path),
}

impl Origin<'_> {
    /// The path as shown in errors and warnings.
    pub fn shown(&self) -> PathBuf {
        match self {
            Origin::Beneath { root, rel } => root.join(rel),
            Origin::NoFollow(path) | Origin::User(path) => path.to_path_buf(),
        }
    }
}

/// How much of a file may be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// Refuse a file that holds more than this many bytes (a configuration
    /// file: half of one would be a different configuration).
    Refuse(u64),
    /// Read at most this many bytes of a larger file and say so
    /// ([`Contents::truncated`]): project instructions, which are capped.
    Truncate(u64),
}

/// The default cap of a configuration file: 1 MiB.
pub const CONFIG_BYTES: u64 = 1 << 20;

/// What was read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Contents {
    /// The bytes read (at most the limit).
    pub bytes: Vec<u8>,
    /// The file's size when it was read (at least `bytes.len()`).
    pub len: u64,
    /// Whether `bytes` is only the beginning of the file
    /// ([`Limit::Truncate`]).
    pub truncated: bool,
}

/// Why a file was not read. The message names the path and the reason and
/// never holds the file's content.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UntrustedError {
    /// There is no such file (or a parent is not a directory).
    #[error("{path}: no such file")]
    NotFound {
        /// The path.
        path: PathBuf,
    },
    /// The path leaves its root: an absolute symlink, one that climbs out,
    /// `..`, or a `/proc` magic link.
    #[error(
        "{path} is refused: it leads outside {root} (a symbolic link pointing out of it, or `..`)"
    )]
    Escapes {
        /// The path.
        path: PathBuf,
        /// The root it must stay beneath.
        root: PathBuf,
    },
    /// The last component is a symbolic link where none may be followed.
    #[error("{path} is refused: it is a symbolic link, which Keel does not follow here")]
    Symlink {
        /// The path.
        path: PathBuf,
    },
    /// Not a regular file: a FIFO, a device, a socket, a directory.
    #[error("{path} is refused: it is {kind}, not a regular file")]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is, in words ("a named pipe (FIFO)").
        kind: &'static str,
    },
    /// A file with several hard links beneath a root: it may be a file from
    /// outside the root.
    #[error(
        "{path} is refused: it has {links} hard links, so it may be a file from outside the workspace"
    )]
    HardLinks {
        /// The path.
        path: PathBuf,
        /// Its link count.
        links: u64,
    },
    /// Larger than [`Limit::Refuse`] allows.
    #[error("{path} is refused: it holds {len} bytes, more than the {cap} allowed")]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// Its size.
        len: u64,
        /// The cap.
        cap: u64,
    },
    /// The directory holding it cannot be resolved (a link chain too long
    /// to follow, a loop), so it cannot be shown to lie outside the
    /// workspace: it is not read as the user's own.
    #[error(
        "{path} is refused: its directory cannot be resolved ({source}), so it may lie in the workspace"
    )]
    Unresolved {
        /// The path.
        path: PathBuf,
        /// Why resolving failed.
        #[source]
        source: io::Error,
    },
    /// Any other failure to open or read it.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl UntrustedError {
    /// Whether the file simply is not there (callers usually go on without).
    pub fn is_not_found(&self) -> bool {
        matches!(self, UntrustedError::NotFound { .. })
    }

    /// A stable snake_case code for the reason.
    pub fn code(&self) -> &'static str {
        match self {
            UntrustedError::NotFound { .. } => "not_found",
            UntrustedError::Escapes { .. } => "escapes_root",
            UntrustedError::Symlink { .. } => "symlink",
            UntrustedError::NotRegular { .. } => "not_regular",
            UntrustedError::HardLinks { .. } => "hard_links",
            UntrustedError::TooLarge { .. } => "too_large",
            UntrustedError::Unresolved { .. } => "unresolved",
            UntrustedError::Io { .. } => "io",
        }
    }
}

/// Where `dir`, a directory of the user's own files (the global
/// configuration directory), lies relative to the canonical workspace
/// `root`: `Ok(Some(rel))` inside it — by its path, or once its links are
/// resolved — so that its files are read beneath the root
/// ([`Origin::Beneath`]), since a command could have planted them;
/// `Ok(None)` outside it ([`Origin::User`]). A directory that does not
/// exist is [`UntrustedError::NotFound`]; one whose links cannot be
/// resolved (a chain past `PATH_MAX`, a loop) is
/// [`UntrustedError::Unresolved`] — it cannot be shown to lie outside, so
/// it fails closed.
///
/// # Errors
///
/// As above, naming `file` (the file the caller wants from `dir`).
pub fn user_dir_within(
    dir: &Path,
    root: &Path,
    file: &Path,
) -> Result<Option<PathBuf>, UntrustedError> {
    if let Ok(rel) = dir.strip_prefix(root) {
        return Ok(Some(rel.to_path_buf()));
    }
    match std::fs::canonicalize(dir) {
        Ok(real) => Ok(real.strip_prefix(root).ok().map(Path::to_path_buf)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Err(UntrustedError::NotFound {
            path: file.to_path_buf(),
        }),
        Err(source) => Err(UntrustedError::Unresolved {
            path: file.to_path_buf(),
            source,
        }),
    }
}

/// Reads the file at `origin` within `limit` (see the module docs).
///
/// # Errors
///
/// [`UntrustedError`] when the file is absent, leaves its root, is a
/// symlink where none may be followed, is not a regular file, has several
/// hard links beneath a root, is larger than [`Limit::Refuse`] allows, or
/// cannot be read.
pub fn read(origin: Origin<'_>, limit: Limit) -> Result<Contents, UntrustedError> {
    let path = origin.shown();
    let mut file = open(origin).map_err(|error| classify(origin, &path, error))?;
    let io = |source: io::Error| UntrustedError::Io {
        path: path.clone(),
        source,
    };
    let metadata = match beneath::regular(&file).map_err(io)? {
        Ok(metadata) => metadata,
        Err(kind) => {
            return Err(UntrustedError::NotRegular {
                path,
                kind: kind.describe(),
            });
        }
    };
    if let Origin::Beneath { .. } = origin
        && let Some(links) = beneath::extra_links(&metadata)
    {
        return Err(UntrustedError::HardLinks { path, links });
    }
    let (cap, refuse) = match limit {
        Limit::Refuse(cap) => (cap, true),
        Limit::Truncate(cap) => (cap, false),
    };
    if refuse && metadata.len() > cap {
        return Err(UntrustedError::TooLarge {
            path,
            len: metadata.len(),
            cap,
        });
    }
    // One byte past the cap tells a file that is larger (or grew) from one
    // that fits, whatever the metadata said.
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len().min(cap)).unwrap_or(0));
    (&mut file)
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let read = bytes.len() as u64;
    if read <= cap {
        return Ok(Contents {
            bytes,
            len: read,
            truncated: false,
        });
    }
    let len = metadata.len().max(read);
    if refuse {
        return Err(UntrustedError::TooLarge { path, len, cap });
    }
    bytes.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
    Ok(Contents {
        bytes,
        len,
        truncated: true,
    })
}

/// Opens `origin` for reading without blocking.
fn open(origin: Origin<'_>) -> io::Result<File> {
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    match origin {
        Origin::Beneath { root, rel } => {
            let root = beneath::open_root(root)?;
            beneath::open_read_inside(&root, rel)
        }
        Origin::NoFollow(path) => nix::fcntl::open(path, flags | OFlag::O_NOFOLLOW, Mode::empty())
            .map(File::from)
            .map_err(io::Error::from),
        Origin::User(path) => nix::fcntl::open(path, flags, Mode::empty())
            .map(File::from)
            .map_err(io::Error::from),
    }
}

/// The refusal an open error means for `origin`.
fn classify(origin: Origin<'_>, path: &Path, error: io::Error) -> UntrustedError {
    let errno = error.raw_os_error().map(Errno::from_raw);
    let path = path.to_path_buf();
    match (errno, origin) {
        (Some(Errno::ENOENT | Errno::ENOTDIR), _) => UntrustedError::NotFound { path },
        (Some(Errno::EXDEV), Origin::Beneath { root, .. }) => UntrustedError::Escapes {
            path,
            root: root.to_path_buf(),
        },
        (Some(Errno::ELOOP), Origin::Beneath { root, .. }) => UntrustedError::Escapes {
            path,
            root: root.to_path_buf(),
        },
        (Some(Errno::ELOOP), Origin::NoFollow(_)) => UntrustedError::Symlink { path },
        _ => UntrustedError::Io {
            path,
            source: error,
        },
    }
}

/// The most an ignore file may hold before a walk refuses it.
pub const MAX_IGNORE_FILE: u64 = 1 << 20;

/// Whether the ignore files `names` of directory `dir` (e.g. `.gitignore`)
/// are safe for the `ignore` crate to read, which opens them by path,
/// follows symlinks, blocks on a FIFO and reads without a cap: each must be
/// missing or a regular file of at most [`MAX_IGNORE_FILE`] bytes (checked
/// with `lstat`, so a symlink is refused, never followed). `Err` names the
/// file and why, never its contents. A walk over a tree a command could
/// have written calls it for every directory before descending; the window
/// between this check and the crate's open is open only to a process that
/// runs while Keel walks.
pub fn ignore_files_are_plain(dir: &Path, names: &[&str]) -> Result<(), String> {
    for name in names {
        let path = dir.join(name);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            // Missing, or `dir` is a file (a walk may start at one).
            Err(error)
                if error.kind() == io::ErrorKind::NotFound
                    || error.raw_os_error() == Some(nix::libc::ENOTDIR) =>
            {
                continue;
            }
            Err(error) => return Err(format!("{} cannot be checked: {error}", path.display())),
        };
        let kind = meta.file_type();
        let why = if kind.is_symlink() {
            "a symbolic link"
        } else if !kind.is_file() {
            "not a regular file"
        } else if meta.len() > MAX_IGNORE_FILE {
            "larger than 1 MiB"
        } else {
            continue;
        };
        return Err(format!("the ignore file {} is {why}", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::fs::symlink;

    use super::*;

    fn beneath<'a>(root: &'a Path, rel: &'a str) -> Origin<'a> {
        Origin::Beneath {
            root,
            rel: Path::new(rel),
        }
    }

    #[test]
    fn symlinks_are_followed_only_while_they_stay_beneath_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("docs")).unwrap();
        std::fs::write(root.join("docs/agents.md"), "inside").unwrap();
        std::fs::write(outside.path().join("secret"), "SECRET").unwrap();
        symlink("docs/agents.md", root.join("AGENTS.md")).unwrap();
        symlink(outside.path().join("secret"), root.join("abs")).unwrap();
        symlink("../../../../../../../proc/self/environ", root.join("up")).unwrap();
        symlink("/proc/self/environ", root.join("environ")).unwrap();
        let read_ok = read(beneath(root, "AGENTS.md"), Limit::Refuse(100)).unwrap();
        assert_eq!(read_ok.bytes, b"inside");
        for rel in ["abs", "up", "environ", "../x"] {
            let error = read(beneath(root, rel), Limit::Refuse(100)).unwrap_err();
            assert_eq!(error.code(), "escapes_root", "{rel}: {error}");
            assert!(!error.to_string().contains("SECRET"));
        }
        let missing = read(beneath(root, "CLAUDE.md"), Limit::Refuse(100)).unwrap_err();
        assert!(missing.is_not_found());
    }

    #[test]
    fn fifos_devices_and_hard_links_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        nix::unistd::mkfifo(&root.join("pipe"), Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::write(root.join("a"), "a").unwrap();
        std::fs::hard_link(root.join("a"), root.join("b")).unwrap();
        let fifo = read(beneath(root, "pipe"), Limit::Refuse(100)).unwrap_err();
        assert_eq!(fifo.code(), "not_regular", "{fifo}");
        assert!(fifo.to_string().contains("FIFO"), "{fifo}");
        let linked = read(beneath(root, "b"), Limit::Refuse(100)).unwrap_err();
        assert_eq!(linked.code(), "hard_links", "{linked}");
        for origin in [
            Origin::User(Path::new("/dev/zero")),
            Origin::NoFollow(Path::new("/dev/zero")),
        ] {
            let error = read(origin, Limit::Refuse(100)).unwrap_err();
            assert_eq!(error.code(), "not_regular", "{error}");
        }
        let user_fifo = read(Origin::User(&root.join("pipe")), Limit::Refuse(10)).unwrap_err();
        assert_eq!(user_fifo.code(), "not_regular");
    }

    #[test]
    fn no_follow_refuses_a_final_symlink_and_user_files_follow_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("real.md"), "real").unwrap();
        symlink(root.join("real.md"), root.join("link.md")).unwrap();
        let error = read(Origin::NoFollow(&root.join("link.md")), Limit::Refuse(10)).unwrap_err();
        assert_eq!(error.code(), "symlink", "{error}");
        let followed = read(Origin::User(&root.join("link.md")), Limit::Refuse(10)).unwrap();
        assert_eq!(followed.bytes, b"real");
        let plain = read(Origin::NoFollow(&root.join("real.md")), Limit::Refuse(10)).unwrap();
        assert_eq!(plain.bytes, b"real");
    }

    #[test]
    fn caps_refuse_or_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("f"), "0123456789").unwrap();
        let error = read(beneath(root, "f"), Limit::Refuse(4)).unwrap_err();
        assert_eq!(error.code(), "too_large");
        assert!(!error.to_string().contains("0123"), "{error}");
        let cut = read(beneath(root, "f"), Limit::Truncate(4)).unwrap();
        assert_eq!(
            (cut.bytes.as_slice(), cut.len, cut.truncated),
            (&b"0123"[..], 10, true)
        );
        let whole = read(beneath(root, "f"), Limit::Truncate(10)).unwrap();
        assert_eq!((whole.len, whole.truncated), (10, false));
    }
}
