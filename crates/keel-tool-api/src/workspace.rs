//! The rooted workspace: every path a tool touches is resolved here.
//!
//! A [`Workspace`] owns one canonical root directory. [`Workspace::resolve`]
//! turns a model-supplied path into an absolute path that is guaranteed to lie
//! under that root at the time of the check:
//!
//! - relative paths resolve under the root; `.` and `..` are normalized
//!   lexically, and a `..` that climbs out of the root is refused;
//! - absolute paths are accepted only when they lie inside the root;
//! - empty paths and paths containing NUL are refused;
//! - the longest existing ancestor of the result is canonicalized, so a
//!   symlink inside the workspace that points outside it is refused, whether
//!   the final file exists yet or not. Dangling symlinks are refused too,
//!   because writing through one could create a file anywhere.
//!
//! The check is made at resolution time, on names. What the tools then open
//! is opened by [`Workspace::open_read`] and friends (the `open` module)
//! beneath a handle of the root taken when the workspace was made, with no
//! symlink followed: a concurrent process swapping a directory for a symlink
//! after the check makes the open fail instead of sending it outside.
//!
//! The lexical normalization and the hard-link check come from
//! [`crate::paths`]: the shell analysis uses the same two, so a path in
//! a command and a path in a file tool are placed against the root alike.

mod open;

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::paths::{hard_links, is_metadata, normalize};
use keel_protocol::IntentScope;

/// A directory that roots every path a tool may touch.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    /// The root, opened when the workspace was made; files are opened
    /// beneath it.
    handle: Arc<OwnedFd>,
    /// Whether paths outside the root resolve too (a decision allowed it).
    outside_allowed: bool,
    /// Keel's own configuration directories, resolved: protected like
    /// `.git` wherever they lie ([`Workspace::protecting`]).
    protected: Arc<Vec<PathBuf>>,
}

impl PartialEq for Workspace {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
            && self.outside_allowed == other.outside_allowed
            && self.protected == other.protected
    }
}

impl Eq for Workspace {}

/// Why a path could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The file or directory does not exist.
    #[error("`{path}` does not exist")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// An I/O error while inspecting the path.
    #[error("I/O error on `{path}`: {source}")]
    Io {
        /// The path as given.
        path: String,
        /// What the operating system reported.
        #[source]
        source: io::Error,
    },
    /// An absolute path (or symlink target) outside the workspace.
    #[error("Path `{path}` is outside the workspace")]
    Outside {
        /// The path as given.
        path: String,
    },
    /// A relative path whose `..` climbs out of the workspace.
    #[error("Path `{path}` escapes the workspace")]
    Escapes {
        /// The path as given.
        path: String,
    },
    /// A file with several hard links, one of which may lie outside.
    #[error("`{path}` has {links} hard links; another of its names may be outside the workspace")]
    HardLinked {
        /// The path as given.
        path: String,
        /// Its number of hard links.
        links: u64,
    },
    /// A directory where a file was expected.
    #[error("`{path}` is a directory")]
    IsADirectory {
        /// The path as given.
        path: String,
    },
    /// Not a regular file (a FIFO, a socket, a device): file tools refuse it.
    #[error("`{path}` is {kind}, not a regular file; the file tools open only regular files")]
    NotRegularFile {
        /// The path as given.
        path: String,
        /// What it is, e.g. "a named pipe (FIFO)".
        kind: String,
    },
    /// A path that cannot be used at all.
    #[error("Invalid path `{path}`: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The workspace root is not a directory.
    #[error("Workspace root `{path}` is not a directory")]
    NotADirectory {
        /// The root as given.
        path: String,
    },
}

impl Workspace {
    /// A workspace rooted at `root`, which must be an existing directory.
    pub fn new(root: impl AsRef<Path>) -> Result<Workspace, WorkspaceError> {
        let given = root.as_ref();
        let shown = given.display().to_string();
        let root = std::fs::canonicalize(given).map_err(|error| io_error(&shown, &error))?;
        if !root.is_dir() {
            return Err(WorkspaceError::NotADirectory { path: shown });
        }
        let handle = crate::beneath::open_root(&root).map_err(|error| io_error(&shown, &error))?;
        Ok(Workspace {
            root,
            handle: Arc::new(handle),
            outside_allowed: false,
            protected: Arc::new(Vec::new()),
        })
    }

    /// The same workspace, where a write into any of `dirs` (Keel's own
    /// configuration directories: the user's `config.toml` and global
    /// `AGENTS.md`, which the next run trusts) is protected like a write
    /// into `.git` ([`Workspace::is_protected`]). Each directory is
    /// resolved now (its longest existing ancestor canonical), as the paths
    /// the tools write are.
    pub fn protecting(mut self, dirs: &[PathBuf]) -> Workspace {
        let resolved = dirs
            .iter()
            .filter(|dir| dir.is_absolute())
            .map(|dir| resolve_existing_prefix(dir))
            .collect();
        self.protected = Arc::new(resolved);
        self
    }

    /// The same workspace for one call whose permission decision allowed
    /// access outside it (`full`, or a host approving exactly that): paths
    /// outside the root resolve instead of being refused.
    pub fn allowing_outside(&self) -> Workspace {
        Workspace {
            root: self.root.clone(),
            handle: Arc::clone(&self.handle),
            outside_allowed: true,
            protected: Arc::clone(&self.protected),
        }
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a model-supplied path to an absolute path inside the workspace.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, WorkspaceError> {
        match self.resolve_inside(path) {
            Err(
                WorkspaceError::Outside { .. }
                | WorkspaceError::Escapes { .. }
                | WorkspaceError::HardLinked { .. },
            ) if self.outside_allowed => self.resolve_anywhere(path),
            resolved => resolved,
        }
    }

    /// Resolves a path that was allowed to lie outside the root.
    fn resolve_anywhere(&self, path: &str) -> Result<PathBuf, WorkspaceError> {
        let normalized = normalize(&self.root.join(path));
        let (existing, rest) = split_existing(path, &normalized)?;
        let real = std::fs::canonicalize(&existing).map_err(|error| io_error(path, &error))?;
        Ok(rest.iter().rev().fold(real, |acc, part| acc.join(part)))
    }

    fn resolve_inside(&self, path: &str) -> Result<PathBuf, WorkspaceError> {
        check_syntax(path)?;
        let given = Path::new(path);
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        let normalized = normalize(&joined);
        if normalized.starts_with(&self.root) {
            return self.check_real_location(path, &normalized);
        }
        if !given.is_absolute() {
            return Err(WorkspaceError::Escapes {
                path: path.to_owned(),
            });
        }
        // An absolute path may name the root through a symlinked prefix
        // (e.g. `/tmp` -> `/private/tmp`); accept it if it really lies inside.
        self.check_real_location(path, &normalized)
    }

    /// The workspace-relative display form of an absolute path.
    pub fn display(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
            Ok(relative) => relative.display().to_string(),
            Err(_) => abs.display().to_string(),
        }
    }

    /// Whether `abs` (a resolved path) is Keel's or git's own metadata,
    /// which a file tool may write only once the host approved exactly that
    /// (see [`crate::paths::is_metadata`], which the shell analysis
    /// uses too).
    pub fn is_protected(&self, abs: &Path) -> bool {
        abs.strip_prefix(&self.root).is_ok_and(is_metadata)
            || self.protected.iter().any(|dir| abs.starts_with(dir))
    }

    /// Whether `path` resolves inside the workspace.
    pub fn scope_of(&self, path: &str) -> IntentScope {
        match self.resolve(path) {
            Ok(_) => IntentScope::Workspace,
            Err(_) => IntentScope::Outside,
        }
    }

    /// Canonicalizes the longest existing ancestor of `normalized` and
    /// returns it joined with the not-yet-existing rest, if under the root.
    fn check_real_location(
        &self,
        path: &str,
        normalized: &Path,
    ) -> Result<PathBuf, WorkspaceError> {
        let (existing, rest) = split_existing(path, normalized)?;
        let real = match std::fs::canonicalize(&existing) {
            Ok(real) => real,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(WorkspaceError::InvalidPath {
                    path: path.to_owned(),
                    reason: "it goes through a dangling symlink".to_owned(),
                });
            }
            Err(error) => return Err(io_error(path, &error)),
        };
        if !real.starts_with(&self.root) {
            return Err(WorkspaceError::Outside {
                path: path.to_owned(),
            });
        }
        if rest.is_empty() {
            check_single_link(path, &real)?;
        }
        Ok(rest.iter().rev().fold(real, |acc, part| acc.join(part)))
    }
}

/// Refuses a regular file with more than one hard link: another of its
/// names may lie outside the workspace, and reading or writing it here
/// would read or write that file too.
fn check_single_link(path: &str, real: &Path) -> Result<(), WorkspaceError> {
    match hard_links(real) {
        Some(links) => Err(WorkspaceError::HardLinked {
            path: path.to_owned(),
            links,
        }),
        None => Ok(()),
    }
}

/// Refuses empty paths and paths containing NUL.
fn check_syntax(path: &str) -> Result<(), WorkspaceError> {
    let reason = if path.is_empty() {
        "the path is empty"
    } else if path.contains('\0') {
        "the path contains a NUL byte"
    } else {
        return Ok(());
    };
    Err(WorkspaceError::InvalidPath {
        path: path.to_owned(),
        reason: reason.to_owned(),
    })
}

/// Splits `normalized` into its longest existing ancestor (as seen by
/// `lstat`) and the missing components after it, last component first.
fn split_existing(
    path: &str,
    normalized: &Path,
) -> Result<(PathBuf, Vec<PathBuf>), WorkspaceError> {
    let mut existing = normalized.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match std::fs::symlink_metadata(&existing) {
            Ok(_) => return Ok((existing, rest)),
            Err(error) if is_missing(&error) => {}
            Err(error) => return Err(io_error(path, &error)),
        }
        let Some(name) = existing.file_name().map(PathBuf::from) else {
            return Err(WorkspaceError::NotFound {
                path: path.to_owned(),
            });
        };
        rest.push(name);
        existing.pop();
    }
}

fn is_missing(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// An owned copy of `error` that keeps what a caller matches on: the OS
/// error number when there is one, else the kind and the message.
pub fn owned(error: &io::Error) -> io::Error {
    match error.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(error.kind(), error.to_string()),
    }
}

fn io_error(path: &str, error: &io::Error) -> WorkspaceError {
    if error.kind() == io::ErrorKind::NotFound {
        WorkspaceError::NotFound {
            path: path.to_owned(),
        }
    } else {
        WorkspaceError::Io {
            path: path.to_owned(),
            source: owned(error),
        }
    }
}

/// `path` with its longest existing ancestor canonical and the missing
/// rest joined back (lexically normalized first).
fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let normalized = normalize(path);
    let mut rest = Vec::new();
    let mut existing = normalized.as_path();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            let mut out = real;
            for name in rest.iter().rev() {
                out.push(name);
            }
            return out;
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return normalized,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        (dir, workspace)
    }

    #[test]
    fn new_requires_an_existing_directory() {
        let (dir, _) = setup();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(
            Workspace::new(&file),
            Err(WorkspaceError::NotADirectory { .. })
        ));
        assert!(matches!(
            Workspace::new(dir.path().join("missing")),
            Err(WorkspaceError::NotFound { .. })
        ));
    }

    #[test]
    fn relative_paths_resolve_under_the_root() {
        let (_dir, ws) = setup();
        assert_eq!(ws.resolve("a/b.txt").unwrap(), ws.root().join("a/b.txt"));
        assert_eq!(ws.resolve("./a/../b.txt").unwrap(), ws.root().join("b.txt"));
        assert_eq!(ws.resolve(".").unwrap(), ws.root());
    }

    #[test]
    fn escaping_dot_dot_is_refused() {
        let (_dir, ws) = setup();
        let error = ws.resolve("../x").unwrap_err();
        assert!(
            matches!(&error, WorkspaceError::Escapes { path } if path == "../x"),
            "{error:?}"
        );
        assert_eq!(error.to_string(), "Path `../x` escapes the workspace");
        assert!(ws.resolve("a/../../x").is_err());
    }

    #[test]
    fn absolute_paths_must_lie_inside() {
        let (_dir, ws) = setup();
        let inside = ws.root().join("sub/file.txt");
        assert_eq!(ws.resolve(inside.to_str().unwrap()).unwrap(), inside);
        assert!(matches!(
            ws.resolve("/etc/passwd"),
            Err(WorkspaceError::Outside { .. })
        ));
        let sneaky = format!("{}/../x", ws.root().display());
        assert!(ws.resolve(&sneaky).is_err());
    }

    #[test]
    fn empty_and_nul_paths_are_refused() {
        let (_dir, ws) = setup();
        assert!(matches!(
            ws.resolve(""),
            Err(WorkspaceError::InvalidPath { .. })
        ));
        assert!(matches!(
            ws.resolve("a\0b"),
            Err(WorkspaceError::InvalidPath { .. })
        ));
    }

    #[test]
    fn symlinks_pointing_outside_are_refused() {
        let (dir, ws) = setup();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        symlink(outside.path(), dir.path().join("link")).unwrap();
        symlink(outside.path().join("secret"), dir.path().join("file_link")).unwrap();
        symlink("/etc", dir.path().join("etc")).unwrap();
        for path in [
            "link/secret",
            "link/new_file",
            "link/new_dir/new_file",
            "file_link",
            "etc/passwd",
        ] {
            assert!(
                matches!(ws.resolve(path), Err(WorkspaceError::Outside { .. })),
                "{path} should be refused"
            );
        }
    }

    #[test]
    fn dangling_symlinks_are_refused() {
        let (dir, ws) = setup();
        symlink("/nonexistent/keel/target", dir.path().join("dangling")).unwrap();
        assert!(matches!(
            ws.resolve("dangling"),
            Err(WorkspaceError::InvalidPath { .. })
        ));
    }

    #[test]
    fn symlinks_inside_are_followed() {
        let (dir, ws) = setup();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        symlink(ws.root().join("real"), dir.path().join("alias")).unwrap();
        assert_eq!(
            ws.resolve("alias/new.txt").unwrap(),
            ws.root().join("real/new.txt")
        );
    }

    #[test]
    fn display_is_workspace_relative() {
        let (_dir, ws) = setup();
        assert_eq!(ws.display(&ws.root().join("a/b.txt")), "a/b.txt");
        assert_eq!(ws.display(ws.root()), ".");
        assert_eq!(ws.display(Path::new("/etc/passwd")), "/etc/passwd");
    }

    #[test]
    fn git_and_keel_metadata_is_protected() {
        let (_dir, ws) = setup();
        for path in [
            ".git",
            ".git/config",
            "sub/.git/hooks/pre-commit",
            ".GIT/HEAD",
            ".keel/config.toml",
        ] {
            assert!(ws.is_protected(&ws.root().join(path)), "{path}");
        }
        for path in [
            "src/git.rs",
            ".gitignore",
            "sub/.keel/x",
            ".github/workflows/ci.yml",
            ".",
        ] {
            assert!(!ws.is_protected(&ws.root().join(path)), "{path}");
        }
    }

    #[test]
    fn keels_configuration_is_protected_when_given() {
        let (dir, ws) = setup();
        let config = dir.path().join(".config/keel");
        let plain = ws.clone();
        let ws = ws.protecting(std::slice::from_ref(&config));
        for path in [
            ".config/keel",
            ".config/keel/config.toml",
            ".config/keel/AGENTS.md",
        ] {
            let abs = ws.resolve(path).unwrap();
            assert!(ws.is_protected(&abs), "{path}");
            assert!(ws.allowing_outside().is_protected(&abs), "{path}");
            assert!(!plain.is_protected(&abs), "{path}");
        }
        for path in [
            ".config/keelx",
            ".config/other/config.toml",
            "keel/config.toml",
        ] {
            assert!(!ws.is_protected(&ws.resolve(path).unwrap()), "{path}");
        }
    }

    #[test]
    fn scope_of_classifies_paths() {
        let (_dir, ws) = setup();
        assert_eq!(ws.scope_of("src/main.rs"), IntentScope::Workspace);
        assert_eq!(ws.scope_of("../x"), IntentScope::Outside);
        assert_eq!(ws.scope_of("/etc/passwd"), IntentScope::Outside);
    }
}
