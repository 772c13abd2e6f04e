//! Git's and Keel's own metadata in a sandboxed command's view.
//!
//! A command that may write the workspace must still not write the
//! repository's `.git` — its hooks, config and index are code and settings
//! that the user's own next `git` obeys — nor Keel's project configuration
//! in `.keel`. So at every workspace-write level, unless the host approved
//! this very call to write them ([`Sandbox::metadata_writable`]), each
//! [`PROTECTED`] name at the top of a writable root (the workspace and the
//! host's extra writable directories) is bound read-only over itself:
//!
//! - a `.git` directory (an ordinary repository);
//! - a `.git` *file* (a linked work tree's or a submodule's `gitdir:`
//!   pointer): the file itself, and the directory it points to when that
//!   lies inside a writable root;
//! - a `.git` symlink: its target when that lies inside a writable root
//!   (the link itself stays in the writable directory and can be replaced,
//!   which only changes what the *next* command protects);
//! - `.keel`, likewise, when it exists.
//!
//! Repositories nested deeper (a vendored clone's `vendor/lib/.git`, a
//! bare repository, a submodule's `.git` file) are protected the same way
//! when the host names them ([`Sandbox::nested_git`]; Keel's kernel hands
//! over what its walk for planted repository code found just before the
//! command): each that is its own canonical path — no symlink on the way
//! or at its end — a directory or a regular file, and strictly inside a
//! writable root, is bound read-only over itself, unless the call was
//! approved to write metadata. One that fails those checks is skipped (a
//! symlink is never followed out), and one beneath a path already
//! protected adds nothing.
//!
//! A mount point cannot be renamed or removed from inside the mount
//! namespace (`EBUSY`), so `mv .git x` fails as well as `echo > .git/x`.
//! (A nested one's *parent* can still be renamed, and a fresh `.git` made
//! in its place: that is a new repository to Keel's kernel, which
//! quarantines it when it holds code; see `keel-tools`' changes.)
//! What does not exist when the command starts is not protected: a `.git`
//! the command makes (`git init`) is its own, and Keel's own git runs none
//! of its code (see `keel-tools`' changes).
//!
//! A linked work tree's git directories lie outside the workspace
//! (`<main>/.git/worktrees/<name>` and the common `<main>/.git`), where a
//! sandboxed command could not see them and every `git` command would fail.
//! They are added to the view — read-only, or writable for an approved call —
//! only when they prove to belong to this work tree: the work tree's
//! directory names this `.git` file back (its `gitdir` file) and lies in
//! the common directory's `worktrees/`. A `.git` file a model wrote,
//! pointing at another project's repository, adds nothing.
//!
//! Landlock cannot say the same: its grants are inherited by everything
//! beneath a granted directory and cannot be withdrawn from a subtree, so
//! a ruleset that lets a command create files at the top of the workspace
//! lets it create them in `.git` too. The read-only mounts are what refuse
//! those writes; Landlock grants nothing beyond the workspace for them, and
//! only read on a linked work tree's git directories unless the call was
//! approved (see `landlock_rules`).
//!
//! Keel's own configuration directory (`SandboxConfig::protected`: the
//! user's `config.toml` and global `AGENTS.md`, which the next `keel run`
//! trusts as the user's own) is protected the same way whenever it lies
//! inside a writable root (a workspace that is the home directory), at
//! every writing level and even for a call approved to write `.git`:
//!
//! - it is bound read-only over itself, like `.git`;
//! - when it does not exist yet, Keel creates it (empty, mode 0700) first,
//!   so that there is something to bind: a command cannot create it either.
//!   An empty directory in the user's configuration location is the only
//!   trace, and it is where Keel's configuration belongs anyway;
//! - each directory between the writable root and it (`~/.config`) is
//!   bound writable over itself ([`Metadata::pinned`]): still writable, but
//!   a mount point, so that `mv ~/.config elsewhere` fails (`EBUSY`) and no
//!   command can put a fresh `~/.config/keel` in its place.
//!
//! A path whose component inside the writable root is a symlink
//! (`~/.config/keel -> dotfiles/keel`) is protected where it resolves to;
//! the link itself stays in a writable directory and a command can
//! replace it (docs/security.md lists this limit).
//!
//! Everything here runs in the parent, before the child is forked.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::Sandbox;

/// Names of git's and Keel's metadata at the top of each writable root.
pub const PROTECTED: [&str; 2] = [".git", ".keel"];

/// Longest `.git` pointer, `gitdir` or `commondir` file read.
const MAX_POINTER: u64 = 4096;

/// The metadata of one command's view.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Metadata {
    /// Paths inside writable roots, bound read-only over themselves.
    pub protected: Vec<PathBuf>,
    /// Directories inside writable roots bound writable over themselves,
    /// so that they cannot be renamed: the ones between a root and a
    /// protected configuration directory.
    pub pinned: Vec<PathBuf>,
    /// A linked work tree's git directories outside the workspace.
    pub linked: Vec<PathBuf>,
    /// Whether `linked` is writable (an approved call at a writing level).
    pub linked_writable: bool,
}

/// Finds the metadata of a command of `sandbox` in `workspace`.
pub(crate) fn find(sandbox: &Sandbox, workspace: &Path) -> Metadata {
    let writes = sandbox.level.writes_workspace();
    let roots: Vec<PathBuf> = match writes {
        true => std::iter::once(workspace)
            .chain(sandbox.config.writable.iter().map(PathBuf::as_path))
            .filter_map(|root| std::fs::canonicalize(root).ok())
            .collect(),
        false => Vec::new(),
    };
    let inside_root = |path: &Path| roots.iter().any(|root| path.starts_with(root));
    let mut protected = Vec::new();
    if !sandbox.metadata_writable {
        for root in &roots {
            for name in PROTECTED {
                protect(&root.join(name), &inside_root, &mut protected);
            }
        }
        for path in &sandbox.nested_git {
            if let Some(path) = nested(path, &roots) {
                protected.push(path);
            }
        }
    }
    let mut pinned = Vec::new();
    for config in &sandbox.config.protected {
        protect_config(config, &roots, &mut protected, &mut pinned);
    }
    protected.sort();
    protected.dedup();
    // A path beneath one already bound read-only adds nothing.
    let covering = protected.clone();
    protected.retain(|path| {
        !covering
            .iter()
            .any(|other| other != path && path.starts_with(other))
    });
    pinned.sort();
    pinned.dedup();
    let linked = std::fs::canonicalize(workspace)
        .ok()
        .and_then(|workspace| linked_git_dirs(&workspace))
        .unwrap_or_default();
    Metadata {
        protected,
        pinned,
        linked,
        linked_writable: writes && sandbox.metadata_writable,
    }
}

/// Adds what protects `path` (a [`PROTECTED`] name in a writable root).
fn protect(path: &Path, inside_root: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return;
    };
    let kind = metadata.file_type();
    if kind.is_symlink() {
        if let Ok(real) = std::fs::canonicalize(path)
            && inside_root(&real)
        {
            out.push(real);
        }
        return;
    }
    if !kind.is_dir() && !kind.is_file() {
        return;
    }
    out.push(path.to_path_buf());
    if kind.is_file()
        && let Some(parent) = path.parent()
        && let Some(git_dir) = pointer(path, parent)
        && inside_root(&git_dir)
    {
        out.push(git_dir);
    }
}

/// `path` (a nested git directory or `.git` file the host named) when it
/// is absolute, its own canonical path (no symlink anywhere on it), a
/// directory or a regular file, and strictly inside one of the (canonical)
/// writable `roots`.
fn nested(path: &Path, roots: &[PathBuf]) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let kind = std::fs::symlink_metadata(path).ok()?.file_type();
    if !kind.is_dir() && !kind.is_file() {
        return None;
    }
    let real = std::fs::canonicalize(path).ok()?;
    if real != path {
        return None;
    }
    roots
        .iter()
        .any(|root| real.starts_with(root) && real != *root)
        .then_some(real)
}

/// Adds what protects Keel's configuration directory `config` when it lies
/// inside one of the (canonical) writable `roots`: itself, created first
/// when missing, and the directories between the root and it.
fn protect_config(
    config: &Path,
    roots: &[PathBuf],
    protected: &mut Vec<PathBuf>,
    pinned: &mut Vec<PathBuf>,
) {
    let Some(real) = real_location(config) else {
        return;
    };
    let Some(root) = roots.iter().find(|root| real.starts_with(root)) else {
        return;
    };
    if real == *root {
        // The writable root is the configuration directory itself (an
        // extra writable root the user named): nothing to protect from.
        return;
    }
    if std::fs::symlink_metadata(&real).is_err() {
        use std::os::unix::fs::DirBuilderExt as _;
        if let Err(error) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&real)
        {
            // Nothing could be bound; the bind of a missing path then
            // fails the command rather than leave the path writable.
            tracing::warn!(path = %real.display(), %error, "creating Keel's configuration directory failed");
        }
    }
    // Created or not, the path is protected: a bind of a path that is
    // missing fails, and so does the command.
    let real = std::fs::canonicalize(&real).unwrap_or(real);
    if !real.starts_with(root) {
        return;
    }
    protected.push(real.clone());
    for ancestor in real.ancestors().skip(1) {
        if ancestor == root.as_path() || !ancestor.starts_with(root) {
            break;
        }
        pinned.push(ancestor.to_path_buf());
    }
}

/// `path` with its longest existing ancestor resolved (canonical) and the
/// missing rest joined back; `None` for a relative path or one with `..`
/// in its missing rest.
fn real_location(path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut rest = Vec::new();
    let mut existing = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            let mut out = real;
            for name in rest.iter().rev() {
                out.push(name);
            }
            return Some(out);
        }
        let name = existing.file_name()?;
        rest.push(name.to_os_string());
        existing = existing.parent()?;
    }
}

/// The git directories of the linked work tree at `workspace` (canonical)
/// when they lie outside it and prove to be its own: its directory
/// `<common>/worktrees/<name>` and the common directory.
fn linked_git_dirs(workspace: &Path) -> Option<Vec<PathBuf>> {
    let dot_git = workspace.join(".git");
    if !std::fs::symlink_metadata(&dot_git).ok()?.is_file() {
        return None;
    }
    let git_dir = pointer(&dot_git, workspace)?;
    if git_dir.starts_with(workspace) {
        return None;
    }
    // The work tree's directory names this `.git` file back…
    let back = small_text(&git_dir.join("gitdir"))?;
    if std::fs::canonicalize(back.trim_end_matches(['\n', '\r'])).ok()? != dot_git {
        return None;
    }
    // …and lies in the common directory's `worktrees/`.
    let common = small_text(&git_dir.join("commondir"))?;
    let common = std::fs::canonicalize(git_dir.join(common.trim_end_matches(['\n', '\r']))).ok()?;
    if git_dir.parent()? != common.join("worktrees") || !common.join("HEAD").is_file() {
        return None;
    }
    Some(vec![git_dir, common])
}

/// The directory a `gitdir: <path>` file names (relative to `base`), canonical.
fn pointer(file: &Path, base: &Path) -> Option<PathBuf> {
    let text = small_text(file)?;
    let target = text
        .strip_prefix("gitdir: ")?
        .trim_end_matches(['\n', '\r']);
    let resolved = std::fs::canonicalize(base.join(target)).ok()?;
    resolved.is_dir().then_some(resolved)
}

/// A small regular file's text, not following a final symlink and never
/// blocking on a FIFO; `None` past [`MAX_POINTER`] bytes or on any error.
fn small_text(path: &Path) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_POINTER + 1).read_to_string(&mut text).ok()?;
    (text.len() as u64 <= MAX_POINTER).then_some(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use super::*;
    use crate::{SandboxConfig, SandboxLevel};

    fn sandbox(level: SandboxLevel, metadata_writable: bool) -> Sandbox {
        Sandbox {
            level,
            config: Arc::new(SandboxConfig::default()),
            metadata_writable,
            nested_git: Vec::new(),
        }
    }

    #[test]
    fn git_and_keel_at_the_top_of_the_workspace_are_protected_when_writing() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for sub in [".git/hooks", ".keel", "sub/.git"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let found = find(&sandbox(SandboxLevel::WorkspaceWrite, false), &root);
        assert_eq!(found.protected, [root.join(".git"), root.join(".keel")]);
        assert!(found.linked.is_empty());
        let approved = find(&sandbox(SandboxLevel::WorkspaceWrite, true), &root);
        assert!(approved.protected.is_empty());
        let read_only = find(&sandbox(SandboxLevel::ReadOnly, false), &root);
        assert!(read_only.protected.is_empty());
    }

    fn with_config(level: SandboxLevel, metadata_writable: bool, config: &Path) -> Sandbox {
        Sandbox {
            level,
            config: Arc::new(SandboxConfig {
                protected: vec![config.to_path_buf()],
                ..SandboxConfig::default()
            }),
            metadata_writable,
            nested_git: Vec::new(),
        }
    }

    #[test]
    fn keels_configuration_in_a_writable_root_is_created_protected_and_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap();
        let config = home.join(".config/keel");
        // Approved to write `.git`, or not: the configuration stays protected.
        for approved in [false, true] {
            let found = find(
                &with_config(SandboxLevel::WorkspaceWrite, approved, &config),
                &home,
            );
            assert!(config.is_dir(), "the missing directory is created");
            assert_eq!(found.protected, std::slice::from_ref(&config));
            assert_eq!(found.pinned, [home.join(".config")]);
        }
        let read_only = find(&with_config(SandboxLevel::ReadOnly, false, &config), &home);
        assert!(read_only.protected.is_empty() && read_only.pinned.is_empty());
    }

    #[test]
    fn keels_configuration_outside_every_writable_root_is_left_alone() {
        let base = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(base.path()).unwrap();
        std::fs::create_dir_all(base.join("ws")).unwrap();
        let config = base.join("home/.config/keel");
        let found = find(
            &with_config(SandboxLevel::WorkspaceWrite, false, &config),
            &base.join("ws"),
        );
        assert!(found.protected.is_empty() && found.pinned.is_empty());
        assert!(!base.join("home").exists(), "nothing is created outside");
    }

    #[test]
    fn a_symlinked_configuration_is_protected_where_it_resolves() {
        let dir = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(home.join("dotfiles/keel")).unwrap();
        std::fs::create_dir_all(home.join(".config")).unwrap();
        std::os::unix::fs::symlink(home.join("dotfiles/keel"), home.join(".config/keel")).unwrap();
        let found = find(
            &with_config(
                SandboxLevel::WorkspaceWrite,
                false,
                &home.join(".config/keel"),
            ),
            &home,
        );
        assert_eq!(found.protected, [home.join("dotfiles/keel")]);
        assert_eq!(found.pinned, [home.join("dotfiles")]);
    }

    #[test]
    fn a_gitdir_file_is_protected_with_what_it_points_to_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("modules/a")).unwrap();
        std::fs::write(root.join(".git"), "gitdir: modules/a\n").unwrap();
        let found = find(&sandbox(SandboxLevel::WorkspaceWrite, false), &root);
        assert_eq!(found.protected, [root.join(".git"), root.join("modules/a")]);
    }

    #[test]
    fn a_pointer_to_another_repository_links_nothing() {
        let base = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(base.path()).unwrap();
        let other = base.join("other/.git");
        std::fs::create_dir_all(other.join("worktrees/x")).unwrap();
        std::fs::write(other.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(other.join("worktrees/x/commondir"), "../..\n").unwrap();
        std::fs::write(
            other.join("worktrees/x/gitdir"),
            format!("{}\n", base.join("elsewhere/.git").display()),
        )
        .unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(
            ws.join(".git"),
            format!("gitdir: {}\n", other.join("worktrees/x").display()),
        )
        .unwrap();
        let found = find(&sandbox(SandboxLevel::WorkspaceWrite, false), &ws);
        assert!(found.linked.is_empty(), "{found:?}");
        // Once the work tree names this workspace back, it is linked.
        std::fs::write(
            other.join("worktrees/x/gitdir"),
            format!("{}\n", ws.join(".git").display()),
        )
        .unwrap();
        let found = find(&sandbox(SandboxLevel::WorkspaceWrite, false), &ws);
        assert_eq!(found.linked, [other.join("worktrees/x"), other.clone()]);
        assert!(!found.linked_writable);
        assert_eq!(found.protected, [ws.join(".git")]);
    }

    #[test]
    fn nested_git_directories_the_host_names_are_protected_unless_approved() {
        let base = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(base.path()).unwrap();
        let root = base.join("ws");
        for sub in [
            ".git/modules/m",
            "vendor/lib/.git/hooks",
            "bare/objects",
            "real/.git",
        ] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::create_dir_all(base.join("outside/.git")).unwrap();
        std::fs::write(root.join("sub.git"), "").unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(base.join("outside/.git"), root.join("out.git")).unwrap();
        let named = vec![
            root.join("vendor/lib/.git"),
            root.join("bare"),
            root.join("sub.git"),
            // Beneath the top-level `.git`: already covered.
            root.join(".git/modules/m"),
            // Through a symlink, a symlink itself, outside, relative, the root, missing.
            root.join("link/.git"),
            root.join("out.git"),
            base.join("outside/.git"),
            PathBuf::from("vendor/lib/.git"),
            root.clone(),
            root.join("gone/.git"),
        ];
        let at = |metadata_writable| Sandbox {
            nested_git: named.clone(),
            ..sandbox(SandboxLevel::WorkspaceWrite, metadata_writable)
        };
        let found = find(&at(false), &root);
        assert_eq!(
            found.protected,
            [
                root.join(".git"),
                root.join("bare"),
                root.join("sub.git"),
                root.join("vendor/lib/.git"),
            ]
        );
        assert!(find(&at(true), &root).protected.is_empty());
    }
}
