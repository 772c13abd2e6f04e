//! Repository code planted for later: git hooks and configuration that
//! runs programs, in any repository inside the workspace.
//!
//! A command can leave code that git runs at the user's next `git status`
//! or `git commit`: a hook, `core.fsmonitor`, a filter or diff driver, an
//! alias — in the workspace's repository (where the sandbox keeps `.git`
//! read-only unless the host approved writing it) or in a repository the
//! command made itself (`git init sub`, a python script writing
//! `sub/.git/config`), which no sandbox rule covers because it is plain
//! workspace content. The kernel takes a [`GitCodeSnapshot`] before and
//! after each command and reports what [`GitCodeSnapshot::changes_since`]
//! finds, so nobody runs it unknowingly. The same two snapshots do two
//! more jobs, so that the workspace is walked once per command side:
//! the git directories and `.git` files the first one found
//! ([`GitCodeSnapshot::git_paths`]) are what the sandbox keeps read-only
//! during the command (`Sandbox::nested_git`), and a new way into a
//! repository holding code ([`GitCodeSnapshot::new_entrances_to_code`])
//! is what [`super::quarantine`] moves aside after an unapproved command.
//!
//! What a snapshot holds, per repository: the names, inodes, sizes, modes
//! and modification times in `hooks/` (`*.sample` files, which git never
//! runs, left out), and which code-bearing configuration keys — every key
//! but the [`INERT_KEYS`] known to run nothing — `config` and
//! `config.worktree` set, each with a hash of its values; and the same of the common directory a `commondir` file
//! names (a linked worktree's, whose `config` and `hooks` git uses).
//! Repositories are found by walking the workspace: every `.git`
//! directory, every directory that looks like a git directory whatever its
//! name (a `HEAD` beside `objects` and `refs`: a bare repository), and the
//! git directory every `.git` file (a submodule's or worktree's link) or
//! `.git` symlink names, relative or absolute. A `.git` file, `.git`
//! symlink or `commondir` that names a place outside the workspace, or
//! cannot be read, is itself reported: git would use it, Keel cannot look.
//! Each path through which git reaches a repository — a `.git` directory,
//! file or symlink, or a bare repository's own directory: its *entrance* —
//! is recorded with its inode and file type and the repositories it leads
//! to, so that a `.git` made again in a renamed parent's place is told from
//! the one that was there.
//!
//! Invariants:
//! - Keel runs no git and no repository code to look: it reads the files
//!   itself, each opened beneath the workspace handle with no symlink
//!   followed ([`crate::beneath`]), non-blocking, regular files only, at
//!   most [`MAX_CONFIG`] bytes; a config that is not a readable regular file
//!   is itself reported. Values are hashed, never kept or shown.
//! - Bounded: the walk goes [`MAX_DEPTH`] directories deep, visits at most
//!   [`MAX_DIRS`] directories and [`MAX_REPOSITORIES`] repositories, skips
//!   dependency and build directories ([`SKIPPED`]) and never follows a
//!   symlink. What lies beyond is not seen (docs/security.md).
//! - A snapshot never fails: what cannot be read is recorded as such, so
//!   that the comparison only ever reports more.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use keel_protocol::{GitCodeChange, GitCodeChangeKind};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use sha2::{Digest, Sha256};

use crate::beneath;

/// Deepest directory (below the root) whose `.git` is looked at.
pub const MAX_DEPTH: usize = 6;
/// Most directories one snapshot lists.
pub const MAX_DIRS: usize = 4096;
/// Most repositories one snapshot records.
pub const MAX_REPOSITORIES: usize = 64;
/// Largest `config` file read; a larger one is reported as unreadable.
pub const MAX_CONFIG: u64 = 1024 * 1024;
/// Most hook entries recorded per repository.
const MAX_HOOKS: usize = 256;
/// Largest `.git` link file or `commondir` read.
const MAX_GITLINK: u64 = 4096;
/// The item reported for a `.git` file, `.git` symlink or `commondir`
/// naming a place outside the workspace.
const GITDIR_OUTSIDE: &str = "(gitdir outside the workspace)";
const COMMONDIR_OUTSIDE: &str = "(commondir outside the workspace)";

/// Directories the walk does not enter: dependencies and build output,
/// large and not where a person runs `git`.
pub const SKIPPED: &[&str] = &[
    "node_modules",
    "target",
    ".venv",
    "venv",
    "__pycache__",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".gradle",
];

/// Configuration keys whose value git runs as a program or shell command
/// (or that make git read more configuration), lower-cased; `*` is one
/// subsection (`filter.*.clean` is `filter.<name>.clean`). A key of the
/// sections in [`CODE_SECTIONS`] counts whatever its name.
pub const CODE_KEYS: &[&str] = &[
    "core.fsmonitor",
    "core.hookspath",
    "core.sshcommand",
    "core.pager",
    "core.editor",
    "core.askpass",
    "core.gitproxy",
    "core.worktree",
    "sequence.editor",
    "diff.external",
    "diff.*.textconv",
    "diff.*.command",
    "difftool.*.cmd",
    "mergetool.*.cmd",
    "merge.*.driver",
    "filter.*.clean",
    "filter.*.smudge",
    "filter.*.process",
    "credential.helper",
    "credential.*.helper",
    "gpg.program",
    "gpg.*.program",
    "include.path",
    "includeif.*.path",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "remote.*.proxy",
    "http.proxy",
    "uploadpack.packobjectshook",
    "protocol.allow",
    "protocol.*.allow",
    "web.browser",
];

/// Sections every key of which counts as code: aliases (`!cmd` runs a
/// shell), per-command pagers, hooks configured in config (git ≥ 2.36).
pub const CODE_SECTIONS: &[&str] = &["alias", "pager", "hook"];

/// Keys known to run nothing, lower-cased, in [`CODE_KEYS`]' pattern form
/// (`*` is one subsection; `section.**` is every key of a section without
/// a subsection's code). Every other key counts as code: git runs
/// programs from more keys than any list names (`gpg.ssh.
/// defaultKeyCommand`, `interactive.diffFilter`, `trailer.*.cmd`, …), so
/// Keel lists what is safe instead — what `git init`, `git clone`, `git
/// remote`, `git branch` and everyday settings write.
pub const INERT_KEYS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "core.compression",
    "core.loosecompression",
    "core.abbrev",
    "core.sparsecheckout",
    "core.sparsecheckoutcone",
    "core.untrackedcache",
    "core.splitindex",
    "core.commitgraph",
    "core.multipackindex",
    "core.preloadindex",
    "core.trustctime",
    "core.checkstat",
    "core.whitespace",
    "core.warnambiguousrefs",
    "user.**",
    "author.**",
    "committer.**",
    "init.defaultbranch",
    "extensions.**",
    "color.**",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "fetch.prune",
    "fetch.prunetags",
    "status.**",
    "log.date",
    "log.decorate",
    "rerere.enabled",
    "gc.auto",
    "index.version",
    "advice.**",
    "branch.autosetupmerge",
    "branch.autosetuprebase",
    "branch.*.remote",
    "branch.*.merge",
    "branch.*.rebase",
    "branch.*.pushremote",
    "branch.*.description",
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "remote.*.push",
    "remote.*.mirror",
    "remote.*.tagopt",
    "remote.*.prune",
    "submodule.*.url",
    "submodule.*.active",
    "submodule.*.branch",
    "diff.algorithm",
    "diff.renames",
    "diff.renamelimit",
    "diff.colormoved",
    "diff.mnemonicprefix",
    "merge.conflictstyle",
    "merge.ff",
    "merge.log",
    "commit.verbose",
    "commit.cleanup",
];

/// What one snapshot saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitCodeSnapshot {
    /// Per repository (its git directory relative to the root).
    repositories: BTreeMap<PathBuf, Repository>,
    /// Per entrance — a path that makes git use a repository: a `.git`
    /// directory, file or symlink, or a bare repository's own directory,
    /// relative to the root — what it is and where it leads.
    entrances: BTreeMap<PathBuf, Entrance>,
}

/// One repository's code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Repository {
    /// Hook name → its stamp.
    hooks: BTreeMap<OsString, Stamp>,
    /// Code-bearing key → hash of its values, over `config` and `config.worktree`.
    keys: BTreeMap<String, [u8; 32]>,
    /// The common directory its `commondir` names, inside the root.
    common: Option<PathBuf>,
    /// Whether it is a real directory (no symlink on the way) that git
    /// would use as a git directory: named `.git`, or holding `HEAD`.
    real: bool,
}

/// A path that makes git use a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entrance {
    /// Its inode and file type (`S_IFMT` bits), never following a symlink.
    identity: (u64, u32),
    /// The repositories (keys of `repositories`) git reaches through it.
    leads_to: BTreeSet<PathBuf>,
}

/// What identifies a hook's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: i64,
    mode: u32,
    mtime: (i64, i64),
}

impl GitCodeSnapshot {
    /// Looks at every repository in the workspace rooted at `root` (a
    /// canonical directory). Never fails: a workspace that cannot be
    /// opened has no repositories.
    pub fn capture(root: &Path) -> GitCodeSnapshot {
        let mut snapshot = GitCodeSnapshot::default();
        let Ok(handle) = beneath::open_root(root) else {
            return snapshot;
        };
        let mut walk = Walk {
            root: &handle,
            root_path: root,
            dirs: 0,
            snapshot: &mut snapshot,
        };
        walk.dir(Path::new(""), 0);
        snapshot
    }

    /// What is new or changed in `self` compared with `before`, attributed
    /// to `call_id`, in a stable order.
    pub fn changes_since(&self, before: &GitCodeSnapshot, call_id: &str) -> Vec<GitCodeChange> {
        let mut changes = Vec::new();
        for (repository, now) in &self.repositories {
            let then = before.repositories.get(repository);
            let shown = printable(&repository.to_string_lossy());
            let mut report = |item: String, change| {
                changes.push(GitCodeChange::new(
                    shown.clone(),
                    printable(&item),
                    change,
                    call_id,
                ));
            };
            for (name, stamp) in &now.hooks {
                let item = format!("hooks/{}", name.to_string_lossy());
                match then.and_then(|then| then.hooks.get(name)) {
                    None => report(item, GitCodeChangeKind::Added),
                    Some(old) if old != stamp => report(item, GitCodeChangeKind::Changed),
                    Some(_) => {}
                }
            }
            for (key, hash) in &now.keys {
                match then.and_then(|then| then.keys.get(key)) {
                    None => report(key.clone(), GitCodeChangeKind::Added),
                    Some(old) if old != hash => report(key.clone(), GitCodeChangeKind::Changed),
                    Some(_) => {}
                }
            }
        }
        changes
    }

    /// How many repositories the snapshot saw.
    pub fn repositories(&self) -> usize {
        self.repositories.len()
    }

    /// The git directories and `.git` files the snapshot found below the
    /// root, relative to it, sorted: every `.git` directory or regular
    /// `.git` file, every bare repository, and every directory a `.git`
    /// file or `commondir` names that holds a `HEAD` — never a symlink or
    /// the root itself. What the sandbox keeps read-only for the next
    /// command (`Sandbox::nested_git`).
    pub fn git_paths(&self) -> Vec<PathBuf> {
        let file_or_dir = |identity: (u64, u32)| identity.1 == S_IFDIR || identity.1 == S_IFREG;
        let mut paths: BTreeSet<PathBuf> = self
            .entrances
            .iter()
            .filter(|(_, entrance)| file_or_dir(entrance.identity))
            .map(|(path, _)| path.clone())
            .collect();
        paths.extend(
            self.repositories
                .iter()
                .filter(|(_, repository)| repository.real)
                .map(|(path, _)| path.clone()),
        );
        paths.remove(Path::new("."));
        paths.remove(Path::new(""));
        paths.into_iter().collect()
    }

    /// Whether `path` is an entrance of this snapshot and still the same
    /// file: inode `ino`, mode `mode` (its type bits compared).
    pub(crate) fn is_entrance(&self, path: &Path, ino: u64, mode: u32) -> bool {
        self.entrances
            .get(path)
            .is_some_and(|entrance| entrance.identity == (ino, mode & S_IFMT))
    }

    /// The entrances in `self` that are new since `before` and lead to a
    /// repository holding code (a hook, or a key not in [`INERT_KEYS`]),
    /// however old that repository, each with those repositories; deepest
    /// first. An entrance is new when it was not one
    /// before, is another file now (another inode or type: a `.git` made
    /// again, its parent renamed away), or leads to a repository it did not
    /// lead to before. A repository that changed but is reached only
    /// through entrances that were there before is not listed: it existed
    /// before the command, and Keel keeps only hashes of it.
    pub fn new_entrances_to_code(&self, before: &GitCodeSnapshot) -> Vec<(PathBuf, Vec<PathBuf>)> {
        // Any code at all: a new way into a repository that holds code is
        // new code for whoever runs git there, even when the repository
        // itself is older (a `.git` file pointing back at a quarantined one).
        let changed: BTreeSet<&PathBuf> = self
            .repositories
            .iter()
            .filter(|(_, now)| !now.hooks.is_empty() || !now.keys.is_empty())
            .map(|(path, _)| path)
            .collect();
        let mut found: Vec<(PathBuf, Vec<PathBuf>)> = Vec::new();
        for (path, entrance) in &self.entrances {
            let old = before.entrances.get(path);
            let leads: Vec<PathBuf> = entrance
                .leads_to
                .iter()
                .filter(|repository| changed.contains(repository))
                .filter(|repository| {
                    !old.is_some_and(|old| {
                        old.identity == entrance.identity && old.leads_to.contains(*repository)
                    })
                })
                .cloned()
                .collect();
            if !leads.is_empty() {
                found.push((path.clone(), leads));
            }
        }
        found.sort_by_key(|(path, _)| std::cmp::Reverse(path.components().count()));
        found
    }
}

/// Names a command chose, made safe to show: control characters (a
/// terminal escape in a hook's name) become `?`, and at most 200
/// characters are kept.
pub(crate) fn printable(text: &str) -> String {
    const MAX: usize = 200;
    let mut shown: String = text
        .chars()
        .take(MAX)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().count() > MAX {
        shown.push('…');
    }
    shown
}

/// The walk in progress.
struct Walk<'a> {
    root: &'a OwnedFd,
    /// The root's canonical path, to place absolute `gitdir:` values.
    root_path: &'a Path,
    dirs: usize,
    snapshot: &'a mut GitCodeSnapshot,
}

impl Walk<'_> {
    /// Lists the directory `rel` (beneath the root), records the
    /// repository its `.git` names, and walks its subdirectories.
    fn dir(&mut self, rel: &Path, depth: usize) {
        if self.dirs >= MAX_DIRS {
            return;
        }
        self.dirs += 1;
        let Some(entries) = list(self.root, rel) else {
            return;
        };
        let has = |wanted: &[u8], dir: bool| {
            entries
                .iter()
                .any(|(name, kind)| name.as_bytes() == wanted && ((*kind == Kind::Dir) == dir))
        };
        // git's own test (`is_git_directory`): a `HEAD` (a file or a
        // symlink) here, and `objects` and `refs` — of any kind git can
        // get through, symlinks followed — in the common directory, which
        // is this one or the one a `commondir` file names. Keel counts a
        // `HEAD` that is not a directory beside `objects` and `refs` of any
        // kind, or beside a `commondir`: when unsure, a repository.
        let named = |wanted: &[u8]| entries.iter().any(|(name, _)| name.as_bytes() == wanted);
        let bare =
            has(b"HEAD", false) && ((named(b"objects") && named(b"refs")) || named(b"commondir"));
        if bare {
            self.repository(rel, rel);
            // A bare directory inside is bound read-only whole for the next
            // command (`git_paths`): its insides need no walk. The root is
            // never bound (the workspace stays writable), so below it the
            // walk goes on: nested repositories stay protected and checked.
            if !rel.as_os_str().is_empty() {
                return;
            }
        }
        let mut subdirs = Vec::new();
        for (name, kind) in entries {
            if name.as_bytes() == b".git" {
                match kind {
                    Kind::Dir => self.repository(&rel.join(".git"), &rel.join(".git")),
                    Kind::File => self.gitlink(rel),
                    Kind::Other => self.gitlink_symlink(rel),
                }
            } else if kind == Kind::Dir
                && depth < MAX_DEPTH
                && !SKIPPED
                    .iter()
                    .any(|skip| name.as_bytes() == skip.as_bytes())
            {
                subdirs.push(name);
            }
        }
        subdirs.sort();
        for name in subdirs {
            self.dir(&rel.join(name), depth + 1);
        }
    }

    /// A `.git` file in `rel`: the repository its `gitdir:` names, when
    /// that lies inside the workspace (lexically; opening it beneath the
    /// root then refuses any symlink on the way). One that names a place
    /// outside, or cannot be read, is reported under its own path.
    fn gitlink(&mut self, rel: &Path) {
        let link = rel.join(".git");
        let Some(text) = read_small(self.root, &link, MAX_GITLINK) else {
            let hash = stamp_hash(stamp(self.root, rel, OsStr::new(".git")));
            self.flag(&link, "(unreadable .git file)", hash);
            self.enter(&link, &link);
            return;
        };
        // As git reads it (`read_gitfile`): the file starts with exactly
        // `gitdir: `, and the path is the rest with only its trailing line
        // breaks removed — spaces and inner line breaks are part of it.
        // Without that start git stops with "invalid gitfile format" and
        // runs nothing.
        let Some(target) = text.strip_prefix(b"gitdir: ") else {
            return;
        };
        let end = target
            .iter()
            .rposition(|&byte| byte != b'\n' && byte != b'\r')
            .map_or(0, |last| last + 1);
        let target = &target[..end];
        // A path with control characters (an inner line break) is one
        // that no tool shows as git reads it: reported, not followed.
        if target.iter().any(u8::is_ascii_control) {
            self.flag(&link, GITDIR_OUTSIDE, Sha256::digest(target).into());
            self.enter(&link, &link);
            return;
        }
        match self.resolve(rel, OsStr::from_bytes(target)) {
            Some(inside) => self.repository(&inside, &link),
            None => {
                self.flag(&link, GITDIR_OUTSIDE, Sha256::digest(target).into());
                self.enter(&link, &link);
            }
        }
    }

    /// A `.git` symlink in `rel`, which git follows: reported as such
    /// (its target hashed), and the directory it names recorded when that
    /// lies inside the workspace.
    fn gitlink_symlink(&mut self, rel: &Path) {
        let link = rel.join(".git");
        let Ok(target) = beneath::read_link(self.root, &link) else {
            return;
        };
        let hash = Sha256::digest(&target).into();
        match self.resolve(rel, OsStr::from_bytes(&target)) {
            Some(inside) => {
                self.flag(&link, "(symlink)", hash);
                self.enter(&link, &link);
                self.repository(&inside, &link);
            }
            None => {
                self.flag(&link, GITDIR_OUTSIDE, hash);
                self.enter(&link, &link);
            }
        }
    }

    /// Where `target` (relative to the directory `base` beneath the root,
    /// or absolute) lies beneath the root; `None` when outside or not
    /// resolvable here: `..` climbing above the root, an absolute path not
    /// starting with the root's own, a `..` after anything but a real
    /// directory (git resolves a symlink before its `..`; Keel follows
    /// none, so each `..` applies only to a directory opened beneath the
    /// root with no symlink on the way, which makes the lexical result the
    /// real one).
    fn resolve(&self, base: &Path, target: &OsStr) -> Option<PathBuf> {
        let target = Path::new(target);
        let rel = if target.is_absolute() {
            target.strip_prefix(self.root_path).ok()?.to_path_buf()
        } else {
            base.join(target)
        };
        let directory = OFlag::O_PATH | OFlag::O_DIRECTORY;
        let mut inside = PathBuf::new();
        for component in rel.components() {
            match component {
                Component::Normal(name) => inside.push(name),
                Component::CurDir => {}
                Component::ParentDir => {
                    beneath::open(self.root, &inside, directory, Mode::empty()).ok()?;
                    if !inside.pop() {
                        return None;
                    }
                }
                Component::RootDir | Component::Prefix(_) => return None,
            }
        }
        Some(inside)
    }

    /// Records `item` (bound to `hash`) under `at`, a link that names a
    /// place Keel cannot look at.
    fn flag(&mut self, at: &Path, item: &str, hash: [u8; 32]) {
        if self.snapshot.repositories.len() >= MAX_REPOSITORIES
            && !self.snapshot.repositories.contains_key(at)
        {
            return;
        }
        self.snapshot
            .repositories
            .entry(at.to_path_buf())
            .or_default()
            .keys
            .insert(item.to_owned(), hash);
    }

    /// The common directory `gitdir/commondir` names (relative to
    /// `gitdir`, or absolute), when inside the workspace; one outside or
    /// unreadable is recorded in `keys`.
    fn commondir(&self, gitdir: &Path, keys: &mut BTreeMap<String, [u8; 32]>) -> Option<PathBuf> {
        let rel = gitdir.join("commondir");
        if !exists(self.root, &rel) {
            return None;
        }
        let Some(text) = read_small(self.root, &rel, MAX_GITLINK) else {
            let hash = stamp_hash(stamp(self.root, gitdir, OsStr::new("commondir")));
            keys.insert("(unreadable commondir)".to_owned(), hash);
            return None;
        };
        // git drops the trailing line ends only.
        let mut target = text.as_slice();
        while let Some((last, rest)) = target.split_last()
            && (*last == b'\n' || *last == b'\r')
        {
            target = rest;
        }
        let inside = self.resolve(gitdir, OsStr::from_bytes(target));
        if inside.is_none() {
            keys.insert(COMMONDIR_OUTSIDE.to_owned(), Sha256::digest(target).into());
        }
        inside
    }

    /// Records the repository whose git directory is `gitdir` (beneath
    /// the root), and the common directory its `commondir` names, both
    /// reached through `entrance`.
    fn repository(&mut self, gitdir: &Path, entrance: &Path) {
        if let Some(common) = self.record(gitdir, true) {
            self.record(&common, false);
        }
        let key = if gitdir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            gitdir
        };
        let common = self
            .snapshot
            .repositories
            .get(key)
            .and_then(|repository| repository.common.clone());
        self.enter(entrance, key);
        if let Some(common) = common {
            self.enter(entrance, &common);
        }
    }

    /// Notes that `entrance` leads to the recorded `repository`. The root
    /// itself is no entrance (nothing would ever move it).
    fn enter(&mut self, entrance: &Path, repository: &Path) {
        if !self.snapshot.repositories.contains_key(repository) {
            return;
        }
        let identity = match (entrance.parent(), entrance.file_name()) {
            (Some(parent), Some(name)) => {
                let stamp = stamp(self.root, parent, name);
                (stamp.ino, stamp.mode & S_IFMT)
            }
            // The workspace root as a bare repository: its `HEAD` is what
            // makes it one, and what quarantine moves.
            _ => {
                let stamp = stamp(self.root, Path::new(""), OsStr::new("HEAD"));
                (stamp.ino, stamp.mode & S_IFMT)
            }
        };
        self.snapshot
            .entrances
            .entry(entrance.to_path_buf())
            .or_insert_with(|| Entrance {
                identity,
                leads_to: BTreeSet::new(),
            })
            .leads_to
            .insert(repository.to_path_buf());
    }

    /// Records the git directory `gitdir` (the root itself when empty);
    /// with `follow`, returns the common directory it names. git reads one
    /// `commondir` only, never the common directory's own.
    fn record(&mut self, gitdir: &Path, follow: bool) -> Option<PathBuf> {
        let gitdir = if gitdir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            gitdir
        };
        if self.snapshot.repositories.len() >= MAX_REPOSITORIES
            || self.snapshot.repositories.contains_key(gitdir)
        {
            return None;
        }
        let mut repository = Repository::default();
        if let Some(entries) = list(self.root, &gitdir.join("hooks")) {
            for (name, _) in entries.into_iter().take(MAX_HOOKS) {
                if name.as_bytes().ends_with(b".sample") {
                    continue;
                }
                let stamp = stamp(self.root, &gitdir.join("hooks"), &name);
                repository.hooks.insert(name, stamp);
            }
        } else if exists(self.root, &gitdir.join("hooks")) {
            // A `hooks` that cannot be listed (a symlink, a file): report it.
            let stamp = stamp(self.root, gitdir, OsStr::new("hooks"));
            repository
                .hooks
                .insert(OsString::from("(not a directory)"), stamp);
        }
        for file in ["config", "config.worktree"] {
            config_keys(self.root, &gitdir.join(file), file, &mut repository.keys);
        }
        let common = if follow {
            self.commondir(gitdir, &mut repository.keys)
        } else {
            None
        };
        repository.common.clone_from(&common);
        repository.real = gitdir != Path::new(".")
            && beneath::open(
                self.root,
                gitdir,
                OFlag::O_PATH | OFlag::O_DIRECTORY,
                Mode::empty(),
            )
            .is_ok()
            && (gitdir.file_name() == Some(OsStr::new(".git"))
                || exists(self.root, &gitdir.join("HEAD")));
        self.snapshot
            .repositories
            .insert(gitdir.to_path_buf(), repository);
        common
    }
}

/// What a directory entry is (never following a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Other,
}

/// The entries of the directory `rel` beneath `root`, `.` and `..` left
/// out; `None` when it cannot be opened as a directory without following
/// a symlink.
fn list(root: &OwnedFd, rel: &Path) -> Option<Vec<(OsString, Kind)>> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NONBLOCK;
    let fd = beneath::open(root, rel, flags, Mode::empty()).ok()?;
    let mut dir = nix::dir::Dir::from_fd(fd).ok()?;
    let dirfd = dir.as_fd().try_clone_to_owned().ok()?;
    let mut entries = Vec::new();
    for entry in dir.iter().flatten() {
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let kind = match entry.file_type() {
            Some(nix::dir::Type::Directory) => Kind::Dir,
            Some(nix::dir::Type::File) => Kind::File,
            Some(_) => Kind::Other,
            // DT_UNKNOWN: ask, without following a symlink.
            None => match nix::sys::stat::fstatat(&dirfd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(stat) if stat.st_mode & S_IFMT == S_IFDIR => Kind::Dir,
                Ok(stat) if stat.st_mode & S_IFMT == S_IFREG => Kind::File,
                _ => Kind::Other,
            },
        };
        entries.push((name.to_os_string(), kind));
    }
    Some(entries)
}

const S_IFMT: u32 = nix::sys::stat::SFlag::S_IFMT.bits();
const S_IFDIR: u32 = nix::sys::stat::SFlag::S_IFDIR.bits();
const S_IFREG: u32 = nix::sys::stat::SFlag::S_IFREG.bits();

/// Whether anything is at `rel` (not following a final symlink).
fn exists(root: &OwnedFd, rel: &Path) -> bool {
    let flags = OFlag::O_PATH;
    match beneath::open(root, rel, flags, Mode::empty()) {
        Ok(_) => true,
        // ELOOP: a symlink is there.
        Err(error) => error.raw_os_error() == Some(nix::libc::ELOOP),
    }
}

/// The stamp of `name` in the directory `dir` (beneath `root`), without
/// following a symlink; all zero when it cannot be inspected.
fn stamp(root: &OwnedFd, dir: &Path, name: &OsStr) -> Stamp {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY;
    let stat = beneath::open(root, dir, flags, Mode::empty())
        .ok()
        .and_then(|dirfd| nix::sys::stat::fstatat(&dirfd, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok());
    match stat {
        Some(stat) => Stamp {
            ino: stat.st_ino,
            size: stat.st_size,
            mode: stat.st_mode,
            mtime: (stat.st_mtime, stat.st_mtime_nsec),
        },
        None => Stamp {
            ino: 0,
            size: -1,
            mode: 0,
            mtime: (0, 0),
        },
    }
}

/// A hash of a stamp, for an item whose content cannot be read.
fn stamp_hash(stamp: Stamp) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(stamp.ino.to_le_bytes());
    hasher.update(stamp.size.to_le_bytes());
    hasher.update(stamp.mode.to_le_bytes());
    hasher.update(stamp.mtime.0.to_le_bytes());
    hasher.update(stamp.mtime.1.to_le_bytes());
    hasher.finalize().into()
}

/// Reads a regular file beneath `root` of at most `limit` bytes, opened
/// non-blocking with no symlink followed; `None` otherwise.
fn read_small(root: &OwnedFd, rel: &Path, limit: u64) -> Option<Vec<u8>> {
    let mut file: File = beneath::open_read(root, rel).ok()?;
    beneath::regular(&file).ok()?.ok()?;
    beneath::read_bounded(&mut file, limit).ok()?.ok()
}

/// Adds the code-bearing keys of the config file `rel` to `keys`. A
/// config that is there but cannot be read as a regular file within the
/// size cap counts as one key, `(unreadable <name>)`, bound to its stamp.
fn config_keys(root: &OwnedFd, rel: &Path, name: &str, keys: &mut BTreeMap<String, [u8; 32]>) {
    let opened = beneath::open_read(root, rel);
    let bytes = match opened {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return,
        Err(error) => Err(error.to_string()),
        Ok(mut file) => match beneath::regular(&file) {
            Ok(Ok(meta)) => match beneath::read_bounded(&mut file, MAX_CONFIG) {
                Ok(Ok(bytes)) => Ok(bytes),
                _ => Err(format!(
                    "{}:{}:{}",
                    meta.ino(),
                    meta.size(),
                    meta.mtime_nsec()
                )),
            },
            _ => Err("not a regular file".to_owned()),
        },
    };
    match bytes {
        Ok(bytes) => {
            for (key, hash) in code_keys(&bytes) {
                keys.entry(key)
                    .and_modify(|old| *old = hash_pair(old, &hash))
                    .or_insert(hash);
            }
        }
        Err(what) => {
            keys.insert(
                format!("(unreadable {name})"),
                Sha256::digest(what.as_bytes()).into(),
            );
        }
    }
}

fn hash_pair(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(a);
    hasher.update(b);
    hasher.finalize().into()
}

/// The code-bearing keys a git config file sets, each with a hash of its
/// values in order. The syntax is git's: `[section]`, `[section
/// "subsection"]`, `[section.subsection]`, `key = value` or a bare `key`,
/// `#`/`;` comments, a `\` at the end of a line continuing the value.
/// Section and key names compare without case, subsections with.
pub fn code_keys(bytes: &[u8]) -> BTreeMap<String, [u8; 32]> {
    let text = String::from_utf8_lossy(bytes);
    // git skips a UTF-8 byte order mark at the start of a config file.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut section = String::new();
    let mut values: BTreeMap<String, Sha256> = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut rest = line.trim_start();
        if rest.starts_with('[') {
            match parse_section(rest) {
                Some((name, after)) => {
                    section = name;
                    rest = after.trim_start();
                }
                None => {
                    section = "(unparsed)".to_owned();
                    continue;
                }
            }
        }
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        let (name, value) = match rest.find('=') {
            Some(at) => (
                rest.get(..at).unwrap_or_default(),
                rest.get(at + 1..).unwrap_or_default(),
            ),
            None => (rest, ""),
        };
        let mut value = value.to_owned();
        // As git reads it: an unquoted `#` or `;` ends the value (a `\`
        // after it continues nothing), a `\` ending the rest continues it.
        while continues(&value) {
            match lines.next() {
                Some(next) => {
                    value.push('\n');
                    value.push_str(next);
                }
                None => break,
            }
        }
        let key = format!("{section}.{}", name.trim().to_ascii_lowercase());
        if is_code_key(&key) {
            values.entry(key).or_default().update(value.as_bytes());
        }
    }
    values
        .into_iter()
        .map(|(key, hasher)| (key, hasher.finalize().into()))
        .collect()
}

/// Whether a value's last line ends in a continuing `\`: one outside
/// quotes and outside a comment, not itself escaped.
fn continues(value: &str) -> bool {
    let line = value.rsplit('\n').next().unwrap_or_default();
    let mut quoted = false;
    let mut escaped = false;
    for c in line.trim_end().chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            '#' | ';' if !quoted => return false,
            _ => {}
        }
    }
    escaped
}

/// `[name]`, `[name "sub"]` or `[name.sub]` at the start of `line`: the
/// section's key prefix and the text after `]`.
fn parse_section(line: &str) -> Option<(String, &str)> {
    let inner = line.strip_prefix('[')?;
    let end = find_section_end(inner)?;
    let header = inner.get(..end)?;
    let after = inner.get(end + 1..)?;
    let header = header.trim();
    let name = match header.find(|c: char| c.is_whitespace()) {
        Some(space) => {
            let (name, sub) = header.split_at(space);
            let sub = sub.trim();
            let sub = sub.strip_prefix('"')?.strip_suffix('"')?;
            let sub = sub.replace("\\\"", "\"").replace("\\\\", "\\");
            format!("{}.{sub}", name.to_ascii_lowercase())
        }
        None => match header.split_once('.') {
            Some((name, sub)) => {
                format!("{}.{}", name.to_ascii_lowercase(), sub.to_ascii_lowercase())
            }
            None => header.to_ascii_lowercase(),
        },
    };
    Some((name, after))
}

/// The index of the `]` closing a section header, outside quotes.
fn find_section_end(inner: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (at, c) in inner.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ']' if !quoted => return Some(at),
            _ => {}
        }
    }
    None
}

/// Whether a full key (`section[.sub].name`, section and name lower-cased)
/// is code-bearing: every key but the [`INERT_KEYS`] (a section Keel could
/// not parse, or text before any section, is never inert).
fn is_code_key(key: &str) -> bool {
    let Some((section, name)) = key.split_once('.') else {
        return true;
    };
    if section == "(unparsed)" || section.is_empty() || CODE_SECTIONS.contains(&section) {
        return true;
    }
    let (sub, name) = match name.rsplit_once('.') {
        Some((sub, name)) => (Some(sub), name),
        None => (None, name),
    };
    !matches_any(INERT_KEYS, section, sub, name) || matches_any(CODE_KEYS, section, sub, name)
}

/// Whether `section[.sub].name` matches one of `patterns` (`*`: any one
/// subsection; `section.**`: any key of the section without a subsection).
fn matches_any(patterns: &[&str], section: &str, sub: Option<&str>, name: &str) -> bool {
    patterns.iter().any(|pattern| {
        if let Some(whole) = pattern.strip_suffix(".**") {
            return whole == section && sub.is_none();
        }
        let mut parts = pattern.split('.');
        let (Some(p_section), Some(second)) = (parts.next(), parts.next()) else {
            return false;
        };
        match (parts.next(), sub) {
            (None, None) => p_section == section && second == name,
            (Some(p_name), Some(_)) => p_section == section && second == "*" && p_name == name,
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn keys_git_would_read_are_seen_and_unknown_keys_count_as_code() {
        // A byte order mark git skips; a comment ending a value before a
        // `\` (which then continues nothing); keys no denylist names.
        let bom = code_keys(b"\xef\xbb\xbf[core]\n\tfsmonitor = touch m\n");
        assert!(bom.contains_key("core.fsmonitor"), "{bom:?}");
        let comment = code_keys(b"[core]\n\tbare = false ; \\\n\tfsmonitor = touch m\n");
        assert!(comment.contains_key("core.fsmonitor"), "{comment:?}");
        let quoted = code_keys(b"[core]\n\tbare = \"a;b\" \\\n\tmore\n");
        assert!(quoted.is_empty(), "a quoted `;` is no comment: {quoted:?}");
        let unlisted = code_keys(
            b"[gpg \"ssh\"]\n\tdefaultKeyCommand = x\n[interactive]\n\tdiffFilter = x\n\
              [trailer \"t\"]\n\tcmd = x\n[user]\n\temail = e\n[remote \"o\"]\n\tfetch = f\n",
        );
        let keys: Vec<&str> = unlisted.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "gpg.ssh.defaultkeycommand",
                "interactive.difffilter",
                "trailer.t.cmd"
            ]
        );
    }

    #[test]
    fn code_keys_are_found_in_every_section_form_and_others_are_not() {
        let config = b"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch x\n\
            [filter \"lfs\"]\n\tsmudge = a \\\n b\n[diff.Tool]\ntextconv=cat\n\
            [ALIAS] st = !sh\n[user]\n\tname = u\n[remote \"o\"]\n\turl = x\n";
        let keys: Vec<String> = code_keys(config).into_keys().collect();
        assert_eq!(
            keys,
            [
                "alias.st",
                "core.fsmonitor",
                "diff.tool.textconv",
                "filter.lfs.smudge"
            ]
        );
        let changed = code_keys(b"[core]\n\tfsmonitor = touch y\n");
        assert_ne!(
            changed.get("core.fsmonitor"),
            code_keys(config).get("core.fsmonitor")
        );
        assert!(code_keys(b"[core\n fsmonitor = x\n").contains_key("(unparsed).fsmonitor"));
    }

    #[test]
    fn new_hooks_and_keys_in_new_and_nested_repositories_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/hooks/pre-commit.sample"), "x").unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        let before = GitCodeSnapshot::capture(root);
        assert_eq!(before.repositories(), 1);
        assert!(
            GitCodeSnapshot::capture(root)
                .changes_since(&before, "c")
                .is_empty()
        );
        std::fs::create_dir_all(root.join("a/b/.git/hooks")).unwrap();
        std::fs::write(root.join("a/b/.git/hooks/post-checkout"), "#!/bin/sh").unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::fs::create_dir_all(root.join("node_modules/m/.git/hooks")).unwrap();
        std::fs::write(root.join("node_modules/m/.git/hooks/pre-commit"), "x").unwrap();
        let after = GitCodeSnapshot::capture(root);
        let changes = after.changes_since(&before, "c");
        let items: Vec<(String, String)> = changes
            .iter()
            .map(|change| (change.repository.clone(), change.item.clone()))
            .collect();
        assert_eq!(
            items,
            [
                (".git".to_owned(), "core.fsmonitor".to_owned()),
                ("a/b/.git".to_owned(), "hooks/post-checkout".to_owned()),
            ]
        );
    }

    #[test]
    fn a_config_that_is_a_fifo_or_a_symlink_out_is_reported_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("r/.git")).unwrap();
        let before = GitCodeSnapshot::capture(root);
        nix::unistd::mkfifo(&root.join("r/.git/config"), Mode::from_bits_truncate(0o600)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("r/.git/config.worktree")).unwrap();
        let changes = GitCodeSnapshot::capture(root).changes_since(&before, "c");
        let items: Vec<&str> = changes.iter().map(|c| c.item.as_str()).collect();
        assert_eq!(
            items,
            ["(unreadable config)", "(unreadable config.worktree)"]
        );
    }

    #[test]
    fn a_hook_name_with_a_terminal_escape_is_shown_without_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        let before = GitCodeSnapshot::capture(root);
        std::fs::write(root.join(".git/hooks/pre-commit\u{1b}[2J"), "x").unwrap();
        let changes = GitCodeSnapshot::capture(root).changes_since(&before, "c");
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].item, "hooks/pre-commit?[2J");
    }

    /// The (repository, item) pairs of what changed between two snapshots.
    fn planted(root: &Path, before: &GitCodeSnapshot) -> Vec<(String, String)> {
        GitCodeSnapshot::capture(root)
            .changes_since(before, "c")
            .into_iter()
            .map(|change| (change.repository, change.item))
            .collect()
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(repository, item)| ((*repository).to_owned(), (*item).to_owned()))
            .collect()
    }

    #[test]
    fn an_absolute_gitdir_inside_is_followed_and_one_outside_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        let before = GitCodeSnapshot::capture(root);
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(root.join("hidden")).unwrap();
        let gitdir = format!("gitdir: {}\n", root.join("hidden").display());
        std::fs::write(root.join("sub/.git"), gitdir).unwrap();
        std::fs::write(root.join("hidden/config"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::fs::create_dir_all(root.join("out")).unwrap();
        std::fs::write(root.join("out/.git"), "gitdir: /var/elsewhere/.git\n").unwrap();
        std::fs::create_dir_all(root.join("up")).unwrap();
        std::fs::write(root.join("up/.git"), "gitdir: ../../above/.git\n").unwrap();
        // git resolves `link/..` to `/var`, not to `via`.
        std::fs::create_dir_all(root.join("via")).unwrap();
        std::os::unix::fs::symlink("/var/lib", root.join("via/link")).unwrap();
        std::fs::write(root.join("via/.git"), "gitdir: link/../hidden\n").unwrap();
        assert_eq!(
            planted(root, &before),
            pairs(&[
                ("hidden", "core.fsmonitor"),
                ("out/.git", "(gitdir outside the workspace)"),
                ("up/.git", "(gitdir outside the workspace)"),
                ("via/.git", "(gitdir outside the workspace)"),
            ])
        );
    }

    #[test]
    fn a_commondirs_config_and_hooks_are_followed_and_one_outside_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        let before = GitCodeSnapshot::capture(root);
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/.git"), "gitdir: ../stuff/wt\n").unwrap();
        std::fs::create_dir_all(root.join("stuff/wt")).unwrap();
        std::fs::write(root.join("stuff/wt/commondir"), "../../evil\n").unwrap();
        std::fs::create_dir_all(root.join("evil/hooks")).unwrap();
        std::fs::write(root.join("evil/config"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::fs::write(root.join("evil/hooks/pre-commit"), "#!/bin/sh").unwrap();
        std::fs::create_dir_all(root.join("two")).unwrap();
        std::fs::write(root.join("two/.git"), "gitdir: ../stuff/wt2\n").unwrap();
        std::fs::create_dir_all(root.join("stuff/wt2")).unwrap();
        std::fs::write(root.join("stuff/wt2/commondir"), "/var/elsewhere\n").unwrap();
        assert_eq!(
            planted(root, &before),
            pairs(&[
                ("evil", "hooks/pre-commit"),
                ("evil", "core.fsmonitor"),
                ("stuff/wt2", "(commondir outside the workspace)"),
            ])
        );
    }

    #[test]
    fn a_bare_repository_of_any_name_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        let before = GitCodeSnapshot::capture(root);
        let bare = root.join("lib/store");
        std::fs::create_dir_all(bare.join("objects")).unwrap();
        std::fs::create_dir_all(bare.join("refs")).unwrap();
        std::fs::create_dir_all(bare.join("hooks")).unwrap();
        std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(bare.join("config"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::fs::write(bare.join("hooks/post-update"), "#!/bin/sh").unwrap();
        assert_eq!(
            planted(root, &before),
            pairs(&[
                ("lib/store", "hooks/post-update"),
                ("lib/store", "core.fsmonitor"),
            ])
        );
    }

    #[test]
    fn a_bare_repository_with_symlinked_objects_and_refs_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        let before = GitCodeSnapshot::capture(root);
        let bare = root.join("lib/store");
        std::fs::create_dir_all(root.join("elsewhere/objects")).unwrap();
        std::fs::create_dir_all(root.join("elsewhere/refs")).unwrap();
        std::fs::create_dir_all(bare.join("hooks")).unwrap();
        std::os::unix::fs::symlink("../../elsewhere/objects", bare.join("objects")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/refs", bare.join("refs")).unwrap();
        std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(bare.join("hooks/post-update"), "#!/bin/sh").unwrap();
        assert_eq!(
            planted(root, &before),
            pairs(&[("lib/store", "hooks/post-update")])
        );
    }

    #[test]
    fn a_root_that_looks_bare_does_not_hide_the_repositories_below_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("vendor/lib/.git")).unwrap();
        std::fs::write(root.join("vendor/lib/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::create_dir_all(root.join("objects")).unwrap();
        std::fs::create_dir_all(root.join("refs")).unwrap();
        std::fs::write(root.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let before = GitCodeSnapshot::capture(root);
        assert!(
            before
                .git_paths()
                .contains(&PathBuf::from("vendor/lib/.git")),
            "{:?}",
            before.git_paths()
        );
        std::fs::write(
            root.join("vendor/lib/.git/config"),
            "[core]\n\tfsmonitor = x\n",
        )
        .unwrap();
        assert_eq!(
            planted(root, &before),
            pairs(&[("vendor/lib/.git", "core.fsmonitor")])
        );
    }

    #[test]
    fn a_head_beside_a_commondir_or_plain_objects_and_refs_files_is_a_repository() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        let before = GitCodeSnapshot::capture(root);
        // git looks for `objects` and `refs` in the common directory.
        std::fs::create_dir_all(root.join("a/x/objects")).unwrap();
        std::fs::create_dir_all(root.join("a/x/refs")).unwrap();
        std::fs::write(root.join("a/x/config"), "[core]\n\tpager = x\n").unwrap();
        std::fs::write(root.join("a/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(root.join("a/commondir"), "x\n").unwrap();
        // …and accepts any `objects` and `refs` it can get through.
        std::fs::create_dir_all(root.join("b")).unwrap();
        for name in ["HEAD", "objects", "refs"] {
            std::fs::write(root.join("b").join(name), "ref: refs/heads/main\n").unwrap();
        }
        std::fs::write(root.join("b/config"), "[core]\n\tpager = x\n").unwrap();
        assert_eq!(
            planted(root, &before),
            pairs(&[("a/x", "core.pager"), ("b", "core.pager")])
        );
    }

    #[test]
    fn a_git_file_is_read_as_git_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        let before = GitCodeSnapshot::capture(root);
        // `gitdir:  x`: git uses ` x` (everything after `gitdir: `).
        std::fs::create_dir_all(root.join(" x")).unwrap();
        std::fs::create_dir_all(root.join("x")).unwrap();
        std::fs::write(root.join(" x/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(root.join(" x/config"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::fs::write(root.join("x/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(root.join(".git"), "gitdir:  x\r\n").unwrap();
        // A path with a line break inside is reported, not followed.
        std::fs::create_dir_all(root.join("s")).unwrap();
        std::fs::write(root.join("s/.git"), "gitdir: a\nb\n").unwrap();
        assert_eq!(
            planted(root, &before),
            pairs(&[(" x", "core.fsmonitor"), ("s/.git", GITDIR_OUTSIDE)])
        );
    }

    #[test]
    fn a_git_symlink_is_reported_and_followed_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        let before = GitCodeSnapshot::capture(root);
        std::fs::create_dir_all(root.join("s")).unwrap();
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::write(root.join("real/config"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::os::unix::fs::symlink("../real", root.join("s/.git")).unwrap();
        std::fs::create_dir_all(root.join("t")).unwrap();
        std::os::unix::fs::symlink("/var/elsewhere", root.join("t/.git")).unwrap();
        assert_eq!(
            planted(root, &before),
            pairs(&[
                ("real", "core.fsmonitor"),
                ("s/.git", "(symlink)"),
                ("t/.git", "(gitdir outside the workspace)"),
            ])
        );
    }

    #[test]
    fn git_paths_are_the_real_git_directories_and_git_files_below_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = &dir.path().canonicalize().unwrap();
        for sub in [
            ".git/hooks",
            "vendor/lib/.git",
            "store/objects",
            "store/refs",
            "modules/m",
            "plain",
            "real",
        ] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::write(root.join("store/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(root.join("modules/m/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::create_dir_all(root.join("sm")).unwrap();
        std::fs::write(root.join("sm/.git"), "gitdir: ../modules/m\n").unwrap();
        // A `.git` file naming a directory without `HEAD`: not a git directory.
        std::fs::create_dir_all(root.join("odd")).unwrap();
        std::fs::write(root.join("odd/.git"), "gitdir: ../plain\n").unwrap();
        std::fs::create_dir_all(root.join("s")).unwrap();
        std::os::unix::fs::symlink("../real", root.join("s/.git")).unwrap();
        let paths = GitCodeSnapshot::capture(root).git_paths();
        let expected: Vec<PathBuf> = [
            ".git",
            "modules/m",
            "odd/.git",
            "sm/.git",
            "store",
            "vendor/lib/.git",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(paths, expected);
    }
}
