//! Opening resolved paths without a window between check and open.
//!
//! [`Workspace::resolve`] checks a path by name and returns it canonical:
//! no symlink, no `..`. Everything opened afterwards goes through here and
//! is opened beneath the root handle with no symlink followed (see
//! [`crate::beneath`]), so if a directory on the way was swapped for a
//! symlink in between, the open fails rather than landing outside. Only a
//! path that a decision allowed outside the workspace is opened by name.
//!
//! Writes never open the target: missing parent directories are made one at
//! a time beneath the root (`mkdirat`, then opened without following), the
//! content goes to a new temporary file in the target directory, and that
//! file is renamed over the target through the same directory handle. So a
//! write replaces a name inside the workspace and nothing else — not a
//! file a symlink or another hard link leads to.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;

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

impl Workspace {
    /// Replaces the file at a path returned by [`Workspace::resolve`] with
    /// `bytes`, creating missing parent directories (see the module docs).
    /// An existing file keeps its permission bits (and owner, where Keel
    /// may set it); a directory there is refused.
    pub fn write_file(&self, abs: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
        let shown = self.display(abs);
        let Ok(rel) = abs.strip_prefix(&self.root) else {
            if !self.outside_allowed {
                return Err(WorkspaceError::Outside { path: shown });
            }
            if let Some(parent) = abs.parent() {
                std::fs::create_dir_all(parent).map_err(|error| io_error(&shown, &error))?;
            }
            return std::fs::write(abs, bytes).map_err(|error| io_error(&shown, &error));
        };
        let (parent, name) =
            beneath::split_parent(rel).map_err(|_| WorkspaceError::InvalidPath {
                path: shown.clone(),
                reason: "it does not name a file".to_owned(),
            })?;
        let dir = self
            .make_dirs(parent)
            .map_err(|error| open_error(&shown, &error))?;
        replace(&dir, name, bytes).map_err(|error| match error.raw_os_error() {
            Some(nix::libc::EISDIR) => WorkspaceError::IsADirectory {
                path: shown.clone(),
            },
            _ => open_error(&shown, &error),
        })
    }

    /// Opens the directory `rel` beneath the root, making each missing
    /// component; no component may be a symlink.
    fn make_dirs(&self, rel: &Path) -> io::Result<OwnedFd> {
        let mut dir = self.handle.try_clone()?;
        let step = OFlag::O_PATH | OFlag::O_DIRECTORY;
        for component in rel.components() {
            let name = match component {
                Component::Normal(name) => name,
                Component::CurDir => continue,
                _ => return Err(io::Error::from(Errno::EXDEV)),
            };
            let next = match beneath::open(&dir, Path::new(name), step, Mode::empty()) {
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    match nix::sys::stat::mkdirat(&dir, name, Mode::from_bits_truncate(0o777)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(errno) => return Err(errno.into()),
                    }
                    beneath::open(&dir, Path::new(name), step, Mode::empty())?
                }
                other => other?,
            };
            dir = next;
        }
        Ok(dir)
    }
}

impl Workspace {
    /// The entries of a directory returned by [`Workspace::resolve`]:
    /// `(name, is a directory)`, unsorted, read from a handle opened beneath
    /// the root (so the names are those of the directory that was checked).
    pub fn list_dir(&self, abs: &Path) -> io::Result<Vec<(String, bool)>> {
        let Ok(rel) = abs.strip_prefix(&self.root) else {
            if !self.outside_allowed {
                return Err(io::Error::from(Errno::EXDEV));
            }
            return std::fs::read_dir(abs)?
                .map(|entry| {
                    let entry = entry?;
                    let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
                    Ok((entry.file_name().to_string_lossy().into_owned(), is_dir))
                })
                .collect();
        };
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
        let fd = beneath::open(&*self.handle, rel, flags, Mode::empty())?;
        let mut dir = nix::dir::Dir::from_fd(fd)?;
        let mut entries = Vec::new();
        for entry in dir.iter() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let is_dir = matches!(entry.file_type(), Some(nix::dir::Type::Directory));
            entries.push((String::from_utf8_lossy(name).into_owned(), is_dir));
        }
        Ok(entries)
    }

    /// Whether a path found by walking (by name) still lies beneath the
    /// root, through no symlink; a path outside is kept only where a
    /// decision allowed outside access.
    pub fn is_beneath(&self, abs: &Path) -> bool {
        match abs.strip_prefix(&self.root) {
            Ok(rel) => beneath::open(&*self.handle, rel, OFlag::O_PATH, Mode::empty()).is_ok(),
            Err(_) => self.outside_allowed,
        }
    }

    /// The metadata of what is at a path returned by [`Workspace::resolve`],
    /// not following a symlink there (opened `O_PATH` beneath the root).
    pub(crate) fn symlink_metadata(&self, abs: &Path) -> io::Result<std::fs::Metadata> {
        let Ok(rel) = abs.strip_prefix(&self.root) else {
            if !self.outside_allowed {
                return Err(io::Error::from(Errno::EXDEV));
            }
            return std::fs::symlink_metadata(abs);
        };
        let fd = beneath::open(&*self.handle, rel, OFlag::O_PATH, Mode::empty())?;
        File::from(fd).metadata()
    }

    /// Whether paths outside the root are allowed for this call.
    pub fn allows_outside(&self) -> bool {
        self.outside_allowed
    }
}

/// Writes `bytes` to a temporary file in `dir` and renames it to `name`.
fn replace(dir: &impl AsFd, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
    let existing = match nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) if stat.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR => {
            return Err(io::Error::from(Errno::EISDIR));
        }
        Ok(stat) if stat.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG => Some(stat),
        Ok(_) | Err(Errno::ENOENT) => None,
        Err(errno) => return Err(errno.into()),
    };
    let mut temp_name = b".".to_vec();
    temp_name.extend_from_slice(name.as_bytes());
    temp_name.extend_from_slice(format!(".keel-{}.tmp", uuid::Uuid::now_v7().simple()).as_bytes());
    let temp_name = OsStr::from_bytes(&temp_name);
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
    let fd = beneath::open(
        dir,
        Path::new(temp_name),
        flags,
        Mode::from_bits_truncate(0o666),
    )?;
    let mut file = File::from(fd);
    let written = (|| {
        file.write_all(bytes)?;
        if let Some(stat) = existing {
            let mode = Mode::from_bits_truncate(stat.st_mode & 0o7777);
            nix::sys::stat::fchmod(&file, mode)?;
            // Keel may lack the right to give the file away; then it keeps
            // Keel's owner, as any new file would.
            let _ = std::os::unix::fs::fchown(&file, Some(stat.st_uid), Some(stat.st_gid));
        }
        nix::fcntl::renameat(dir, temp_name, dir, name)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = nix::unistd::unlinkat(dir, temp_name, nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
    written
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// The race made deterministic: the path is checked, then its directory
    /// is swapped for a symlink to outside before the open or the write.
    #[test]
    fn a_directory_swapped_after_the_check_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f"), "inside").unwrap();
        std::fs::write(outside.path().join("f"), "secret").unwrap();
        let abs = ws.resolve("d/f").unwrap();
        let new = ws.resolve("d/new").unwrap();
        std::fs::rename(dir.path().join("d"), dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("d")).unwrap();

        assert!(matches!(
            ws.open_read(&abs),
            Err(WorkspaceError::InvalidPath { .. })
        ));
        assert!(ws.write_file(&new, b"x").is_err());
        assert!(ws.write_file(&abs, b"x").is_err());
        assert!(!ws.is_beneath(&abs));
        assert!(ws.list_dir(&ws.root().join("d")).is_err());
        assert!(!outside.path().join("new").exists());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("f")).unwrap(),
            "secret"
        );
    }

    #[test]
    fn writes_make_directories_keep_modes_and_replace_only_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "old").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();
        let other = dir.path().join("other-name");
        std::fs::hard_link(&script, &other).unwrap();

        ws.write_file(&script, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&script).unwrap(), "new");
        let mode = std::fs::metadata(&script).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o750);
        // The other hard link still holds the old content.
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "old");

        ws.write_file(&ws.resolve("a/b/c.txt").unwrap(), b"deep")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "deep"
        );
        assert!(matches!(
            ws.write_file(&ws.resolve("a").unwrap(), b"x"),
            Err(WorkspaceError::IsADirectory { .. })
        ));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().contains(".keel-"))
            .collect();
        assert!(leftovers.is_empty());
    }
}
