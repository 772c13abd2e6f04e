//! Path helpers shared by the shell analysis and the rooted workspace.
//!
//! Both place a path against the workspace root the same way: `..` is
//! removed lexically, before any symlink is looked at, and a regular file
//! with several hard links counts as possibly outside (another of its names
//! may lie anywhere). [`Workspace`](crate::Workspace) calls these functions,
//! and so does keel-shell (which re-exports this module), so the
//! analysis of `cat ../x` and a `read` of `../x` cannot disagree — nor
//! `echo > .git/config` and a `write` of `.git/config` ([`is_metadata`]).
//!
//! Invariants: [`normalize`] touches no file system and always returns an
//! absolute path; [`hard_links`] only reads metadata and never fails (a path
//! it cannot inspect has no extra links as far as it can tell).

use std::path::{Component, Path, PathBuf};

/// Lexically removes `.` and `..` from an absolute path.
///
/// A `..` at the root stays at the root; a relative path is treated as if it
/// started at `/`.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::Prefix(_) | Component::RootDir | Component::CurDir => {}
        }
    }
    out
}

/// Whether a workspace-relative path is git's or Keel's own metadata, which
/// commands and file tools may write only when the host approved exactly
/// that: anything inside a `.git` (a repository's hooks, config and index,
/// at any depth) and anything inside `.keel` at the root (project
/// configuration). Names are compared ignoring ASCII case, as git does on
/// case-insensitive filesystems.
pub fn is_metadata(relative: &Path) -> bool {
    let named = |component: Component<'_>, name: &str| {
        component
            .as_os_str()
            .to_str()
            .is_some_and(|text| text.eq_ignore_ascii_case(name))
    };
    relative
        .components()
        .next()
        .is_some_and(|first| named(first, ".keel"))
        || relative
            .components()
            .any(|component| named(component, ".git"))
}

/// The link count of a regular file with more than one link; `None` for
/// anything else (a single link, a directory, a path that cannot be read).
pub fn hard_links(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    (meta.is_file() && meta.nlink() > 1).then(|| meta.nlink())
}
