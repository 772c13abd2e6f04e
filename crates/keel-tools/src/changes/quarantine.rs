//! Making a repository a command planted inert, without running anything.
//!
//! A command the host did not approve to write git's metadata can still
//! *create* a repository — `git init sub`, a script writing `.git/config`
//! where there was none, a bare-looking directory, a `.git` file naming a
//! directory it filled — with a hook or a code-bearing key in it (what
//! [`GitCodeSnapshot::changes_since`] reports). The user's next `git status`
//! there would run that code outside any sandbox. So after such a command
//! the kernel compares its snapshots
//! ([`GitCodeSnapshot::new_entrances_to_code`]) and [`quarantine`] renames
//! each new entrance to such a repository — the `.git` directory, `.git`
//! file or `.git` symlink, or the bare repository's own directory — to
//! `<name>.keel-quarantined-<tag>` beside it: git no longer finds it, and
//! nothing of it is lost.
//!
//! Invariants:
//! - Nothing runs: no git, no repository code; the rename is one
//!   `renameat2(RENAME_NOREPLACE)` in the entrance's parent directory,
//!   opened beneath the workspace handle with no symlink followed
//!   ([`crate::beneath`]), and only when the entrance is still the file the
//!   snapshot saw (same inode and type).
//! - Never fails the call: what cannot be moved is returned with the reason,
//!   for the warning to say so.
//! - A repository that existed before the command is never moved (Keel
//!   keeps only hashes of it and cannot undo a change); the sandbox keeps
//!   the ones its walk found read-only instead (`Sandbox::nested_git`).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use keel_protocol::GitCodeChange;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;

use super::gitcode::{GitCodeSnapshot, printable};
use crate::beneath;

/// The infix of a quarantined entrance's new name.
pub const QUARANTINE_INFIX: &str = ".keel-quarantined-";

/// Most names tried for one entrance (`-2`, `-3`, … after the first).
const MAX_NAMES: usize = 20;

/// One new entrance to a repository with code, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Quarantine {
    /// The `.git` directory, file or symlink, or bare repository, relative
    /// to the workspace (empty for the workspace root, whose `HEAD` moves).
    pub entrance: PathBuf,
    /// The repositories (git directories relative to the workspace) git
    /// reached through it that hold the new code.
    pub repositories: Vec<PathBuf>,
    /// Where it was moved (relative to the workspace), or why it was not.
    pub moved_to: Result<PathBuf, String>,
}

impl Quarantine {
    /// The entrance as shown to people (control characters replaced).
    pub fn shown_entrance(&self) -> String {
        if self.entrance.as_os_str().is_empty() {
            return ".".to_owned();
        }
        printable(&self.entrance.to_string_lossy())
    }

    /// Where it went as shown to people, if it was moved.
    pub fn shown_moved_to(&self) -> Option<String> {
        self.moved_to
            .as_ref()
            .ok()
            .map(|path| printable(&path.to_string_lossy()))
    }
}

/// Renames every entrance that is new in `after` since `before` and leads
/// to a repository with new or changed code, in the workspace at `root` (a
/// canonical directory), to `<name>.keel-quarantined-<tag>` (`tag` made of
/// the call id's last few letters and digits). Call it only for a command
/// that was not approved to write git's metadata.
pub fn quarantine(
    root: &Path,
    before: &GitCodeSnapshot,
    after: &GitCodeSnapshot,
    call_id: &str,
) -> Vec<Quarantine> {
    let entrances = after.new_entrances_to_code(before);
    if entrances.is_empty() {
        return Vec::new();
    }
    let tag = tag(call_id);
    let handle = beneath::open_root(root);
    entrances
        .into_iter()
        .map(|(entrance, repositories)| {
            let moved_to = match &handle {
                Ok(handle) => move_aside(handle, &entrance, after, &tag),
                Err(error) => Err(error.to_string()),
            };
            Quarantine {
                entrance,
                repositories,
                moved_to,
            }
        })
        .collect()
}

/// Sets [`GitCodeChange::quarantined`] of each change whose repository was
/// reached through an entrance that `quarantines` moved.
pub fn mark(changes: &mut [GitCodeChange], quarantines: &[Quarantine]) {
    for change in changes {
        let moved = quarantines.iter().find(|quarantine| {
            quarantine.moved_to.is_ok()
                && quarantine
                    .repositories
                    .iter()
                    .any(|repository| printable(&repository.to_string_lossy()) == change.repository)
        });
        if let Some(moved) = moved {
            change.quarantined = moved.shown_moved_to();
        }
    }
}

/// The last eight letters and digits of `call_id` (`call` when it has none).
fn tag(call_id: &str) -> String {
    let kept: Vec<char> = call_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let start = kept.len().saturating_sub(8);
    let tag: String = kept.get(start..).unwrap_or_default().iter().collect();
    if tag.is_empty() {
        "call".to_owned()
    } else {
        tag
    }
}

/// Renames `entrance` (beneath `handle`) to a free name beside it, if it is
/// still what `after` saw. The workspace root itself (turned into a bare
/// repository) cannot be moved: its `HEAD` is, which is what makes git take
/// a directory for a repository.
fn move_aside(
    handle: &std::os::fd::OwnedFd,
    entrance: &Path,
    after: &GitCodeSnapshot,
    tag: &str,
) -> Result<PathBuf, String> {
    if entrance.as_os_str().is_empty() {
        let stat = nix::sys::stat::fstatat(handle, "HEAD", AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|error| format!("its HEAD cannot be inspected: {}", io::Error::from(error)))?;
        if !after.is_entrance(entrance, stat.st_ino, stat.st_mode) {
            return Err("it was replaced before it could be moved".to_owned());
        }
        return rename_free(handle, Path::new(""), OsStr::new("HEAD"), tag);
    }
    let (parent, name) = beneath::split_parent(entrance).map_err(|error| error.to_string())?;
    let dir = beneath::open(
        handle,
        parent,
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .map_err(|error| format!("opening its directory failed: {error}"))?;
    let stat = nix::sys::stat::fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|error| format!("it cannot be inspected: {}", io::Error::from(error)))?;
    if !after.is_entrance(entrance, stat.st_ino, stat.st_mode) {
        return Err("it was replaced before it could be moved".to_owned());
    }
    rename_free(&dir, parent, name, tag)
}

/// Renames `name` in `dir` (which is `parent` in the workspace) to
/// `<name>.keel-quarantined-<tag>`, numbered when that is taken.
fn rename_free(
    dir: &std::os::fd::OwnedFd,
    parent: &Path,
    name: &OsStr,
    tag: &str,
) -> Result<PathBuf, String> {
    for attempt in 1..=MAX_NAMES {
        let mut new_name = OsString::from(name);
        new_name.push(QUARANTINE_INFIX);
        new_name.push(tag);
        if attempt > 1 {
            new_name.push(format!("-{attempt}"));
        }
        match rename_noreplace(dir, name, &new_name) {
            Ok(()) => return Ok(parent.join(new_name)),
            Err(Errno::EEXIST | Errno::ENOTEMPTY) => continue,
            Err(error) => return Err(io::Error::from(error).to_string()),
        }
    }
    Err(format!("no free name after {MAX_NAMES} tries"))
}

/// `renameat2(…, RENAME_NOREPLACE)` within `dir`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn rename_noreplace(dir: &std::os::fd::OwnedFd, from: &OsStr, to: &OsStr) -> Result<(), Errno> {
    nix::fcntl::renameat2(
        dir,
        from,
        dir,
        to,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    )
}

/// `renameat` within `dir` after checking that `to` is free (without
/// `renameat2`, a name taken in between is replaced).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn rename_noreplace(dir: &std::os::fd::OwnedFd, from: &OsStr, to: &OsStr) -> Result<(), Errno> {
    match nix::sys::stat::fstatat(dir, to, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(_) => Err(Errno::EEXIST),
        Err(Errno::ENOENT) => nix::fcntl::renameat(dir, from, dir, to),
        Err(error) => Err(error),
    }
}

/// Whether `name` is a quarantined entrance's name (for tests and hosts).
pub fn is_quarantined_name(name: &OsStr) -> bool {
    name.as_bytes()
        .windows(QUARANTINE_INFIX.len())
        .any(|window| window == QUARANTINE_INFIX.as_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_new_repository_with_code_is_moved_aside_and_one_without_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        write(&root.join("old/.git/config"), "[core]\n\tbare = false\n");
        let before = GitCodeSnapshot::capture(root);
        write(&root.join(".git/config"), "[core]\n\tfsmonitor = x\n");
        write(&root.join("sub/.git/hooks/post-checkout"), "#!/bin/sh\n");
        write(&root.join("scratch/.git/config"), "[user]\n\tname = u\n");
        // An existing repository changed: reported, never moved.
        write(&root.join("old/.git/hooks/pre-commit"), "#!/bin/sh\n");
        let after = GitCodeSnapshot::capture(root);
        let moved = quarantine(root, &before, &after, "toolu_01ABCDEFGH");
        let summary: Vec<(PathBuf, Result<PathBuf, String>)> = moved
            .iter()
            .map(|q| (q.entrance.clone(), q.moved_to.clone()))
            .collect();
        assert_eq!(
            summary,
            [
                (
                    PathBuf::from("sub/.git"),
                    Ok(PathBuf::from("sub/.git.keel-quarantined-ABCDEFGH"))
                ),
                (
                    PathBuf::from(".git"),
                    Ok(PathBuf::from(".git.keel-quarantined-ABCDEFGH"))
                ),
            ]
        );
        assert!(!root.join(".git").exists() && !root.join("sub/.git").exists());
        assert!(
            root.join("sub/.git.keel-quarantined-ABCDEFGH/hooks/post-checkout")
                .is_file()
        );
        assert!(root.join("scratch/.git/config").is_file());
        assert!(root.join("old/.git/hooks/pre-commit").is_file());
        let mut changes = after.changes_since(&before, "c");
        mark(&mut changes, &moved);
        let marked: Vec<(&str, Option<&str>)> = changes
            .iter()
            .map(|c| (c.repository.as_str(), c.quarantined.as_deref()))
            .collect();
        assert_eq!(
            marked,
            [
                (".git", Some(".git.keel-quarantined-ABCDEFGH")),
                ("old/.git", None),
                ("sub/.git", Some("sub/.git.keel-quarantined-ABCDEFGH")),
            ]
        );
    }

    #[test]
    fn a_workspace_root_turned_into_a_bare_repository_loses_its_head() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        let before = GitCodeSnapshot::capture(root);
        std::fs::create_dir_all(root.join("objects")).unwrap();
        std::fs::create_dir_all(root.join("refs")).unwrap();
        write(&root.join("HEAD"), "ref: refs/heads/main\n");
        write(&root.join("hooks/post-checkout"), "#!/bin/sh\n");
        let after = GitCodeSnapshot::capture(root);
        let moved = quarantine(root, &before, &after, "toolu_01ABCDEFGH");
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert_eq!(
            moved[0].moved_to,
            Ok(PathBuf::from("HEAD.keel-quarantined-ABCDEFGH"))
        );
        assert!(!root.join("HEAD").exists());
        // git no longer takes the root for a repository: nothing is found.
        let now = GitCodeSnapshot::capture(root);
        assert!(now.changes_since(&before, "c").is_empty());
    }

    #[test]
    fn a_git_made_again_in_a_renamed_parents_place_is_new() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        write(&root.join("vendor/lib/.git/HEAD"), "ref: refs/heads/main\n");
        let before = GitCodeSnapshot::capture(root);
        std::fs::rename(root.join("vendor/lib"), root.join("vendor/old")).unwrap();
        write(&root.join("vendor/lib/.git/HEAD"), "ref: refs/heads/main\n");
        write(
            &root.join("vendor/lib/.git/hooks/pre-commit"),
            "#!/bin/sh\n",
        );
        // A name already taken gets a number.
        std::fs::create_dir_all(root.join("vendor/lib/.git.keel-quarantined-call")).unwrap();
        let after = GitCodeSnapshot::capture(root);
        let moved = quarantine(root, &before, &after, "");
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert_eq!(
            moved[0].moved_to,
            Ok(PathBuf::from("vendor/lib/.git.keel-quarantined-call-2"))
        );
    }

    #[test]
    fn a_new_git_file_naming_a_directory_with_code_is_moved_not_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("hidden")).unwrap();
        let before = GitCodeSnapshot::capture(root);
        write(&root.join("sub/.git"), "gitdir: ../hidden\n");
        write(&root.join("hidden/config"), "[core]\n\tfsmonitor = x\n");
        let after = GitCodeSnapshot::capture(root);
        let moved = quarantine(root, &before, &after, "c1");
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert_eq!(moved[0].entrance, PathBuf::from("sub/.git"));
        assert_eq!(moved[0].repositories, [PathBuf::from("hidden")]);
        assert!(root.join("hidden/config").is_file());
        assert!(root.join("sub/.git.keel-quarantined-c1").is_file());
        assert!(is_quarantined_name(OsStr::new(".git.keel-quarantined-c1")));
    }
}
