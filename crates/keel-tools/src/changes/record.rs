//! Workspace snapshots kept with the session: what the workspace held, as
//! content-addressed objects, so it can be materialised again elsewhere
//! ([`materialize`]) or put back in place ([`rewind`]).
//!
//! A snapshot is a [`Manifest`] (path → mode and object id, or symlink
//! target) stored, like every file it names, as an object in an
//! [`ObjectDir`]: `objects/<first two hex digits>/<the other 62>`, the
//! object's name being the SHA-256 of its bytes. Objects are shared by every
//! snapshot of the directory, so a second snapshot of an unchanged
//! workspace adds nothing (the manifest is byte-for-byte the same, hence the
//! same object).
//!
//! Invariants:
//! - what a snapshot sees is what the run's change tracking sees (`scan`):
//!   `.git` and ignored paths are left out, files are read beneath a handle
//!   of the root and no symlink is followed; a file over
//!   [`RecordLimits::max_file`], with several hard links, past
//!   [`RecordLimits::max_total`], or whose path is not UTF-8 is left out and
//!   listed in [`Manifest::excluded`];
//! - an object is written to a private temporary file (0600 in a 0700
//!   directory) and gets its name only in [`ObjectDir::sync`], after one
//!   `syncfs` made every new object's bytes durable; the directories are
//!   synced after the renames, so a session entry that names a manifest is
//!   appended only after the manifest and its objects are on disk, and a
//!   named object is never incomplete;
//! - objects are never trusted when read back: each is opened without
//!   following a symlink, must be a regular file no larger than the manifest
//!   says, and must hash to its name ([`SnapshotError::Damaged`] otherwise);
//! - writing a snapshot back ([`materialize`], [`rewind`]) opens every path
//!   beneath a handle of the target directory, never follows a symlink, and
//!   sets only permission bits (`0o777`): no set-id bit is ever restored.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use keel_protocol::{ExclusionReason, SnapshotExclusion as Exclusion};
use nix::errno::Errno;
use nix::fcntl::{OFlag, renameat};
use nix::sys::stat::{Mode, fchmod, mkdirat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::scan::{Content, Scan};
use super::spill::hex;
use super::{ChangesError, SnapshotLimits, io_err};
use crate::beneath;
use crate::untrusted::{Limit, Origin};

/// The manifest format this Keel writes and reads.
pub const MANIFEST_VERSION: u32 = 1;

/// The largest manifest Keel reads back (a manifest is a few hundred bytes
/// per file).
const MAX_MANIFEST: u64 = 256 << 20;

/// A failure to record, read or write back a snapshot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Reading the workspace failed or ran out of time.
    #[error(transparent)]
    Scan(#[from] ChangesError),
    /// A file operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What Keel was doing.
        what: &'static str,
        /// The path it was doing it to.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A stored object is missing, not a regular file, too large or does
    /// not hash to its name.
    #[error("snapshot object {id} is damaged: {why}")]
    Damaged {
        /// The object's id.
        id: String,
        /// What is wrong with it.
        why: String,
    },
    /// The directory to materialise into exists and is not empty.
    #[error("{} exists and is not empty; name a new or empty directory", path.display())]
    NotEmpty {
        /// The directory.
        path: PathBuf,
    },
}

fn io_error(what: &'static str, path: &Path, source: impl Into<io::Error>) -> SnapshotError {
    SnapshotError::Io {
        what,
        path: path.to_path_buf(),
        source: source.into(),
    }
}

/// What one path of the workspace held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Node {
    /// A regular file.
    File {
        /// Its permission bits (`0o777` at most).
        mode: u32,
        /// Its size in bytes.
        size: u64,
        /// The object holding its bytes.
        object: String,
    },
    /// A symbolic link (never followed).
    Symlink {
        /// Where it points, as written.
        target: String,
    },
}

/// What a workspace held: every recorded path and what was left out.
/// Deterministic: the same workspace gives the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Manifest {
    /// [`MANIFEST_VERSION`].
    pub version: u32,
    /// Every recorded path, relative to the root, sorted.
    pub files: BTreeMap<String, Node>,
    /// The paths left out, sorted. Ignored paths (git's ignore rules) and
    /// `.git` are never walked, so they are not listed one by one.
    pub excluded: Vec<Exclusion>,
    /// A SHA-256 of the ignore rules the walk applied (every `.gitignore`
    /// it recorded and `.git/info/exclude`): a path missing from a snapshot
    /// is known to be absent only against snapshots taken under the same
    /// rules; under others it may have been ignored ([`rewind`]).
    #[serde(default)]
    pub ignore_rules: String,
}

impl Manifest {
    /// The total size of the recorded files.
    pub fn bytes(&self) -> u64 {
        self.files
            .values()
            .map(|node| match node {
                Node::File { size, .. } => *size,
                Node::Symlink { .. } => 0,
            })
            .sum()
    }

    /// What the snapshot says of `path`.
    fn state(&self, path: &str) -> State<'_> {
        if let Some(node) = self.files.get(path) {
            return State::Node(node);
        }
        if self.excluded.iter().any(|e| e.path == path) {
            return State::Unknown;
        }
        State::Absent
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State<'a> {
    Absent,
    Node(&'a Node),
    /// Left out of the snapshot: what it held is not known.
    Unknown,
}

/// The caps on one recorded snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordLimits {
    /// Files larger than this are left out (default 16 MiB).
    pub max_file: u64,
    /// Files past this total are left out (default 512 MiB).
    pub max_total: u64,
    /// How long reading the workspace may take (default 60 s).
    pub budget: Duration,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            max_file: 16 << 20,
            max_total: 512 << 20,
            budget: Duration::from_secs(60),
        }
    }
}

/// A recorded snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recorded {
    /// The manifest's object id.
    pub id: String,
    /// The manifest.
    pub manifest: Manifest,
    /// Objects this snapshot added to the directory (manifest included).
    pub new_objects: u64,
    /// Bytes those objects hold.
    pub new_bytes: u64,
}

/// A directory of content-addressed objects (see the module doc).
#[derive(Debug)]
pub struct ObjectDir {
    path: PathBuf,
    handle: OwnedFd,
    /// Objects written since the last [`ObjectDir::sync`]: id → the
    /// temporary name it was written under.
    pending: Mutex<BTreeMap<String, String>>,
}

/// Distinguishes this process's temporary object files.
static TEMP: AtomicU64 = AtomicU64::new(0);

impl ObjectDir {
    /// Opens `path`'s object directory, creating it (and `path`, mode 0700)
    /// when missing, to write to. The parent of `path` must exist. The
    /// temporary files of a writer that died before naming them (a crash
    /// in [`ObjectDir::sync`]) are removed.
    pub fn create(path: &Path) -> Result<ObjectDir, SnapshotError> {
        for dir in [path.to_path_buf(), path.join("objects")] {
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(io_error("creating", &dir, error)),
            }
        }
        let objects = Self::open(path)?;
        objects.remove_orphans();
        Ok(objects)
    }

    /// Removes `tmp-PID-N` files whose process is gone. Best effort: what
    /// cannot be listed or removed stays (and is never read as an object).
    fn remove_orphans(&self) {
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|name| name.strip_prefix("tmp-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<i32>().ok())
            else {
                continue;
            };
            let gone =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(Errno::ESRCH);
            if gone {
                let _ = unlinkat(&self.handle, name.as_os_str(), UnlinkatFlags::NoRemoveDir);
            }
        }
    }

    /// Opens `path`'s existing object directory (never through a symlink).
    pub fn open(path: &Path) -> Result<ObjectDir, SnapshotError> {
        let objects = path.join("objects");
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let handle = nix::fcntl::open(&objects, flags, Mode::empty())
            .map_err(|e| io_error("opening", &objects, e))?;
        Ok(ObjectDir {
            path: objects,
            handle,
            pending: Mutex::new(BTreeMap::new()),
        })
    }

    /// Stores `bytes`; returns the object id and whether it was new. The
    /// object is readable, and durable, once [`ObjectDir::sync`] returns.
    pub fn put(&self, bytes: &[u8]) -> Result<(String, bool), SnapshotError> {
        let id = hex(&Sha256::digest(bytes));
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| io_error("storing", &self.path, io::Error::other("lock poisoned")))?;
        if pending.contains_key(&id) {
            return Ok((id, false));
        }
        let (fan, rest) = id.split_at(2);
        let name = format!("{fan}/{rest}");
        match beneath::open(&self.handle, Path::new(&name), OFlag::O_PATH, Mode::empty()) {
            Ok(_) => return Ok((id, false)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(io_error("looking up", &self.path.join(&name), error)),
        }
        let temp = format!(
            "tmp-{}-{}",
            std::process::id(),
            TEMP.fetch_add(1, Ordering::Relaxed)
        );
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
        let written = beneath::open(
            &self.handle,
            Path::new(&temp),
            flags,
            Mode::from_bits_truncate(0o600),
        )
        .map(File::from)
        .and_then(|mut file| file.write_all(bytes));
        if let Err(error) = written {
            let _ = unlinkat(&self.handle, temp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(io_error("writing", &self.path.join(&temp), error));
        }
        pending.insert(id.clone(), temp);
        Ok((id, true))
    }

    /// Reads object `id`, refusing anything over `max` bytes or not hashing
    /// to its name.
    pub fn get(&self, id: &str, max: u64) -> Result<Vec<u8>, SnapshotError> {
        let damaged = |why: String| SnapshotError::Damaged {
            id: id.to_owned(),
            why,
        };
        if id.len() != 64
            || !id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return Err(damaged("not an object id".into()));
        }
        let (fan, rest) = id.split_at(2);
        let mut file = beneath::open_read(&self.handle, &Path::new(fan).join(rest))
            .map_err(|e| damaged(format!("cannot be opened ({e})")))?;
        match beneath::regular(&file) {
            Ok(Ok(_)) => {}
            Ok(Err(kind)) => return Err(damaged(format!("it is {}", kind.describe()))),
            Err(e) => return Err(damaged(e.to_string())),
        }
        let bytes = match beneath::read_bounded(&mut file, max) {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(len)) => return Err(damaged(format!("{len} bytes, more than expected"))),
            Err(e) => return Err(damaged(e.to_string())),
        };
        if hex(&Sha256::digest(&bytes)) != id {
            return Err(damaged("its content does not match its name".into()));
        }
        Ok(bytes)
    }

    /// Makes every object written since the last call durable and gives
    /// it its name: one `syncfs` for all their bytes (instead of an
    /// `fsync` per object), then each renamed into place, then the
    /// directories synced. An object therefore never has its name before
    /// its bytes are on disk, so a crash leaves at worst a temporary file,
    /// never a named object that is incomplete.
    pub fn sync(&self) -> Result<(), SnapshotError> {
        let pending = match self.pending.lock() {
            Ok(mut pending) => std::mem::take(&mut *pending),
            Err(_) => BTreeMap::new(),
        };
        if pending.is_empty() {
            return Ok(());
        }
        nix::unistd::syncfs(&self.handle).map_err(|e| io_error("syncing", &self.path, e))?;
        let mut fans = BTreeSet::new();
        for (id, temp) in &pending {
            let (fan, rest) = id.split_at(2);
            match mkdirat(&self.handle, fan, Mode::from_bits_truncate(0o700)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(error) => return Err(io_error("creating", &self.path.join(fan), error)),
            }
            let name = format!("{fan}/{rest}");
            renameat(&self.handle, temp.as_str(), &self.handle, name.as_str())
                .map_err(|e| io_error("naming", &self.path.join(&name), e))?;
            keel_failpoint::hit(keel_failpoint::IN_SNAPSHOT_NAMING);
            fans.insert(fan.to_owned());
        }
        for fan in &fans {
            let dir = beneath::open(
                &self.handle,
                Path::new(fan),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                Mode::empty(),
            )
            .map_err(|e| io_error("opening", &self.path.join(fan), e))?;
            nix::unistd::fsync(&dir).map_err(|e| io_error("syncing", &self.path.join(fan), e))?;
        }
        nix::unistd::fsync(&self.handle).map_err(|e| io_error("syncing", &self.path, e))?;
        Ok(())
    }

    /// Reads manifest `id`.
    pub fn manifest(&self, id: &str) -> Result<Manifest, SnapshotError> {
        let bytes = self.get(id, MAX_MANIFEST)?;
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| SnapshotError::Damaged {
                id: id.to_owned(),
                why: format!("not a snapshot manifest ({e})"),
            })?;
        if manifest.version != MANIFEST_VERSION {
            return Err(SnapshotError::Damaged {
                id: id.to_owned(),
                why: format!(
                    "manifest version {} is not {MANIFEST_VERSION}",
                    manifest.version
                ),
            });
        }
        Ok(manifest)
    }
}

/// Records a snapshot of `root` into `objects` and makes it durable.
pub fn record(
    root: &Path,
    limits: &RecordLimits,
    objects: &ObjectDir,
) -> Result<Recorded, SnapshotError> {
    let scan_limits = SnapshotLimits {
        max_file: limits.max_file,
        budget: limits.budget,
        ..SnapshotLimits::default()
    };
    let scan = Scan::new(root, &scan_limits)?;
    let mut files = BTreeMap::new();
    let mut excluded = Vec::new();
    let (mut total, mut new_objects, mut new_bytes) = (0u64, 0u64, 0u64);
    let mut failure = None;
    scan.run(
        &BTreeSet::new(),
        |_, _| false,
        |item| {
            let path = match String::from_utf8(item.rel) {
                Ok(path) => path,
                Err(error) => {
                    excluded.push(Exclusion::new(
                        String::from_utf8_lossy(error.as_bytes()),
                        ExclusionReason::NotUtf8,
                        None,
                    ));
                    return Ok(());
                }
            };
            let bytes = match item.content {
                Content::Bytes(bytes) => bytes,
                Content::Unread | Content::Reused => {
                    let reason = if item.stamp.len > limits.max_file {
                        ExclusionReason::TooLarge
                    } else {
                        ExclusionReason::HardLinked
                    };
                    excluded.push(Exclusion::new(path, reason, Some(item.stamp.len)));
                    return Ok(());
                }
            };
            if item.mode == 0o120000 {
                match String::from_utf8(bytes) {
                    Ok(target) => {
                        files.insert(path, Node::Symlink { target });
                    }
                    Err(_) => excluded.push(Exclusion::new(path, ExclusionReason::NotUtf8, None)),
                }
                return Ok(());
            }
            let size = bytes.len() as u64;
            if total.saturating_add(size) > limits.max_total {
                excluded.push(Exclusion::new(
                    path,
                    ExclusionReason::OverBudget,
                    Some(size),
                ));
                return Ok(());
            }
            total += size;
            match objects.put(&bytes) {
                Ok((object, new)) => {
                    if new {
                        new_objects += 1;
                        new_bytes += size;
                    }
                    let mode = item.stamp.permissions() & 0o777;
                    files.insert(path, Node::File { mode, size, object });
                }
                Err(error) => failure = Some(error),
            }
            match failure {
                // Stops the walk; the stored error is returned below.
                Some(_) => Err(io_err(
                    "storing the snapshot".into(),
                    io::Error::other("an object could not be stored"),
                )),
                None => Ok(()),
            }
        },
    )
    .map_err(|error| match failure.take() {
        Some(stored) => stored,
        None => SnapshotError::Scan(error),
    })?;
    let ignore_rules = ignore_rules(root, &files, &excluded);
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        files,
        excluded,
        ignore_rules,
    };
    let bytes = serde_json::to_vec(&manifest).map_err(|e| SnapshotError::Damaged {
        id: String::new(),
        why: format!("the manifest could not be encoded ({e})"),
    })?;
    let (id, new) = objects.put(&bytes)?;
    if new {
        new_objects += 1;
        new_bytes += bytes.len() as u64;
    }
    objects.sync()?;
    Ok(Recorded {
        id,
        manifest,
        new_objects,
        new_bytes,
    })
}

/// The fingerprint of the ignore rules a walk of `root` applied: each
/// recorded or left-out `.gitignore` by path and content, and the
/// repository's `.git/info/exclude` (read beneath the root, regular, at
/// most 1 MiB). The user's global excludes file is not included: the
/// session's commands cannot write it.
fn ignore_rules(root: &Path, files: &BTreeMap<String, Node>, excluded: &[Exclusion]) -> String {
    let is_rules = |path: &str| path == ".gitignore" || path.ends_with("/.gitignore");
    let mut digest = Sha256::new();
    for (path, node) in files.iter().filter(|(path, _)| is_rules(path)) {
        digest.update(path.as_bytes());
        digest.update([0]);
        match node {
            Node::File { object, .. } => digest.update(object.as_bytes()),
            Node::Symlink { target } => digest.update(target.as_bytes()),
        }
        digest.update([0]);
    }
    for left_out in excluded.iter().filter(|e| is_rules(&e.path)) {
        digest.update(left_out.path.as_bytes());
        digest.update(b"\0left out\0");
    }
    let exclude = crate::untrusted::read(
        Origin::Beneath {
            root,
            rel: Path::new(".git/info/exclude"),
        },
        Limit::Refuse(1 << 20),
    );
    match exclude {
        Ok(contents) => {
            digest.update(b"exclude\0");
            digest.update(&contents.bytes);
        }
        Err(error) if error.is_not_found() => {}
        Err(_) => digest.update(b"exclude unreadable\0"),
    }
    hex(&digest.finalize())
}

/// What writing a snapshot back did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Written {
    /// Paths written (files and symlinks).
    pub written: Vec<String>,
    /// Paths removed.
    pub removed: Vec<String>,
    /// Paths not put back because they changed since the session last saw
    /// them: they are left as they are.
    pub conflicts: Vec<String>,
    /// Paths not put back because a snapshot left them out, so what they
    /// held is not known.
    pub unknown: Vec<String>,
}

/// Writes `manifest`'s files into `into`, which must be missing or an empty
/// directory (it is created mode 0700 when missing).
pub fn materialize(
    manifest: &Manifest,
    objects: &ObjectDir,
    into: &Path,
) -> Result<Written, SnapshotError> {
    match std::fs::DirBuilder::new().mode(0o700).create(into) {
        Ok(()) => {}
        Err(error)
            if error.kind() == io::ErrorKind::AlreadyExists
                && std::fs::symlink_metadata(into).is_ok_and(|m| m.file_type().is_symlink()) =>
        {
            return Err(io_error(
                "refusing to write through the symbolic link",
                into,
                io::Error::new(io::ErrorKind::InvalidInput, "name a directory itself"),
            ));
        }
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            let mut entries = std::fs::read_dir(into).map_err(|e| io_error("reading", into, e))?;
            if entries.next().is_some() {
                return Err(SnapshotError::NotEmpty {
                    path: into.to_path_buf(),
                });
            }
        }
        Err(error) => return Err(io_error("creating", into, error)),
    }
    let root = beneath::open_root(into).map_err(|e| io_error("opening", into, e))?;
    let mut done = Written::default();
    for (path, node) in &manifest.files {
        put_node(&root, into, path, node, objects, false)?;
        done.written.push(path.clone());
    }
    done.unknown = manifest.excluded.iter().map(|e| e.path.clone()).collect();
    Ok(done)
}

/// Puts the workspace at `root` back to `target` where the session changed
/// it: every path that differs between `target` and `reference` (what the
/// session last recorded) is written as `target` has it, unless `now` (the
/// workspace as it is) shows it changed since `reference` — then it is a
/// conflict and left alone. Paths that do not differ between the two are
/// never touched.
///
/// A path missing from a snapshot may only have been ignored. So unless
/// all three were taken under the same ignore rules
/// ([`Manifest::ignore_rules`]), a path missing from any of them is
/// `unknown` and left alone: only files present in all three are put back.
/// A path that cannot be written (a directory stands where a file was) is
/// a conflict too; the others are still put back.
pub fn rewind(
    root: &Path,
    target: &Manifest,
    reference: &Manifest,
    now: &Manifest,
    objects: &ObjectDir,
) -> Result<Written, SnapshotError> {
    let handle = beneath::open_root(root).map_err(|e| io_error("opening", root, e))?;
    let paths: BTreeSet<&str> = [target, reference]
        .iter()
        .flat_map(|m| {
            m.files
                .keys()
                .map(String::as_str)
                .chain(m.excluded.iter().map(|e| e.path.as_str()))
        })
        .collect();
    let mut done = Written::default();
    let mut removed_dirs = BTreeSet::new();
    let same_rules = !target.ignore_rules.is_empty()
        && target.ignore_rules == reference.ignore_rules
        && reference.ignore_rules == now.ignore_rules;
    for path in paths {
        let (want, was, is) = (target.state(path), reference.state(path), now.state(path));
        if want == was {
            continue;
        }
        let absent = [want, was, is].contains(&State::Absent);
        if want == State::Unknown || was == State::Unknown || (absent && !same_rules) {
            done.unknown.push(path.to_owned());
            continue;
        }
        if is != was {
            done.conflicts.push(path.to_owned());
            continue;
        }
        match want {
            State::Node(node) => {
                match put_node(&handle, root, path, node, objects, true) {
                    Ok(()) => done.written.push(path.to_owned()),
                    // Damaged objects stop the rewind; what stands in the
                    // way of one path is that path's conflict.
                    Err(error @ SnapshotError::Damaged { .. }) => return Err(error),
                    Err(error) => {
                        tracing::warn!(%error, "a path could not be put back");
                        done.conflicts.push(path.to_owned());
                    }
                }
            }
            State::Absent => {
                let removed =
                    open_parent(&handle, root, path, false).and_then(
                        |(parent, name)| match unlinkat(&parent, name, UnlinkatFlags::NoRemoveDir) {
                            Ok(()) | Err(Errno::ENOENT) => Ok(()),
                            Err(error) => Err(io_error("removing", &root.join(path), error)),
                        },
                    );
                match removed {
                    Ok(()) => {
                        done.removed.push(path.to_owned());
                        removed_dirs.extend(ancestors(path));
                    }
                    Err(error) => {
                        tracing::warn!(%error, "a path could not be removed");
                        done.conflicts.push(path.to_owned());
                    }
                }
            }
            State::Unknown => {}
        }
    }
    // Directories left empty by a removal go too, deepest first, unless the
    // target keeps something beneath them (a non-empty one stays).
    for dir in removed_dirs.iter().rev() {
        let prefix = format!("{dir}/");
        if target.files.keys().any(|p| p.starts_with(&prefix)) {
            continue;
        }
        // Through its parent opened beneath the root: a component swapped
        // for a link meanwhile fails the open instead of leading outside.
        if let Ok((parent, name)) = open_parent(&handle, root, dir, false) {
            let _ = unlinkat(&parent, name, UnlinkatFlags::RemoveDir);
        }
    }
    Ok(done)
}

/// `a/b/c` → `a`, `a/b`.
fn ancestors(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(slash) = path[at..].find('/') {
        out.push(path[..at + slash].to_owned());
        at += slash + 1;
    }
    out
}

/// Opens `path`'s parent beneath `root` (creating missing directories when
/// `create`) and returns it with the last component.
fn open_parent<'p>(
    root: &OwnedFd,
    shown: &Path,
    path: &'p str,
    create: bool,
) -> Result<(OwnedFd, &'p str), SnapshotError> {
    let (parent, name) = match path.rsplit_once('/') {
        Some((parent, name)) => (parent, name),
        None => ("", path),
    };
    if name.is_empty() || name == "." || name == ".." || path.starts_with('/') {
        return Err(io_error(
            "refusing",
            &shown.join(path),
            io::Error::new(io::ErrorKind::InvalidInput, "not a relative file path"),
        ));
    }
    if create && !parent.is_empty() {
        for dir in ancestors(path) {
            let (up, last) = match dir.rsplit_once('/') {
                Some((up, last)) => (up, last),
                None => ("", dir.as_str()),
            };
            let up = open_dir(root, shown, up)?;
            match mkdirat(&up, last, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(error) => return Err(io_error("creating", &shown.join(&dir), error)),
            }
        }
    }
    Ok((open_dir(root, shown, parent)?, name))
}

fn open_dir(root: &OwnedFd, shown: &Path, rel: &str) -> Result<OwnedFd, SnapshotError> {
    beneath::open(
        root,
        Path::new(rel),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .map_err(|e| io_error("opening", &shown.join(rel), e))
}

/// Writes one node at `path` beneath `root`: a file through a temporary
/// file renamed into place (`replace`) or created exclusively, a symlink
/// likewise.
fn put_node(
    root: &OwnedFd,
    shown: &Path,
    path: &str,
    node: &Node,
    objects: &ObjectDir,
    replace: bool,
) -> Result<(), SnapshotError> {
    let (parent, name) = open_parent(root, shown, path, true)?;
    let full = shown.join(path);
    let temp = format!(
        ".keel-rewind-{}-{}",
        std::process::id(),
        TEMP.fetch_add(1, Ordering::Relaxed)
    );
    let staged = if replace { temp.as_str() } else { name };
    match node {
        Node::File { mode, size, object } => {
            let bytes = objects.get(object, *size)?;
            let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
            let fd = beneath::open(
                &parent,
                Path::new(staged),
                flags,
                Mode::from_bits_truncate(0o600),
            )
            .map_err(|e| io_error("creating", &full, e))?;
            let mut file = File::from(fd);
            let written = file
                .write_all(&bytes)
                .and_then(|()| {
                    fchmod(file.as_fd(), Mode::from_bits_truncate(mode & 0o777))
                        .map_err(io::Error::from)
                })
                .and_then(|()| file.sync_all());
            if let Err(error) = written {
                let _ = unlinkat(&parent, staged, UnlinkatFlags::NoRemoveDir);
                return Err(io_error("writing", &full, error));
            }
        }
        Node::Symlink { target } => {
            symlinkat(target.as_str(), &parent, staged)
                .map_err(|e| io_error("creating the symlink", &full, e))?;
        }
    }
    if replace && let Err(error) = renameat(&parent, staged, &parent, name) {
        let _ = unlinkat(&parent, staged, UnlinkatFlags::NoRemoveDir);
        return Err(io_error("replacing", &full, error));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn write(root: &Path, rel: &str, bytes: &[u8], mode: u32) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn tree(root: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
        let mut out = BTreeMap::new();
        for entry in ignore::WalkBuilder::new(root)
            .standard_filters(false)
            .build()
            .flatten()
        {
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            let rel = entry
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(entry.path()).unwrap();
                out.insert(rel, (0o120000, target.as_os_str().as_bytes().to_vec()));
            } else if meta.is_file() {
                let mode = meta.permissions().mode() & 0o777;
                out.insert(rel, (mode, std::fs::read(entry.path()).unwrap()));
            }
        }
        out
    }

    #[test]
    fn a_snapshot_materialises_byte_for_byte_with_modes() {
        let work = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        write(work.path(), "a.txt", b"alpha\n", 0o644);
        write(work.path(), "bin/run.sh", b"#!/bin/sh\necho hi\n", 0o750);
        write(
            work.path(),
            "deep/er/data.bin",
            &[0, 159, 146, 150, 255],
            0o600,
        );
        symlink("a.txt", work.path().join("link")).unwrap();
        symlink("/etc/passwd", work.path().join("outside")).unwrap();
        let objects = ObjectDir::create(&store.path().join("s.snapshots")).unwrap();
        let recorded = record(work.path(), &RecordLimits::default(), &objects).unwrap();
        assert_eq!(recorded.manifest.files.len(), 5);
        let into = store.path().join("restored");
        let manifest = objects.manifest(&recorded.id).unwrap();
        materialize(&manifest, &objects, &into).unwrap();
        assert_eq!(tree(work.path()), tree(&into));
        // Not into a directory that holds something.
        assert!(matches!(
            materialize(&manifest, &objects, work.path()),
            Err(SnapshotError::NotEmpty { .. })
        ));
    }

    #[test]
    fn an_unchanged_workspace_adds_nothing_and_limits_are_listed() {
        let work = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        write(work.path(), "small", b"12345", 0o644);
        write(work.path(), "big", &[7; 100], 0o644);
        write(work.path(), "z-over-budget", b"abcdef", 0o644);
        write(work.path(), ".gitignore", b"ignored/\n", 0o644);
        write(work.path(), "ignored/x", b"never", 0o644);
        std::fs::hard_link(work.path().join("small"), work.path().join("twin")).unwrap();
        let objects = ObjectDir::create(&store.path().join("s.snapshots")).unwrap();
        let limits = RecordLimits {
            max_file: 50,
            max_total: 12,
            ..RecordLimits::default()
        };
        let first = record(work.path(), &limits, &objects).unwrap();
        let reasons: Vec<_> = first
            .manifest
            .excluded
            .iter()
            .map(|e| (e.path.as_str(), e.reason))
            .collect();
        assert_eq!(
            reasons,
            [
                ("big", ExclusionReason::TooLarge),
                ("small", ExclusionReason::HardLinked),
                ("twin", ExclusionReason::HardLinked),
                ("z-over-budget", ExclusionReason::OverBudget),
            ]
        );
        assert_eq!(
            first.manifest.files.keys().collect::<Vec<_>>(),
            [".gitignore"]
        );
        let second = record(work.path(), &limits, &objects).unwrap();
        assert_eq!(second.id, first.id);
        assert_eq!((second.new_objects, second.new_bytes), (0, 0));
    }

    #[test]
    fn a_damaged_object_is_refused_not_restored() {
        let work = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        write(work.path(), "f", b"content", 0o644);
        let dir = store.path().join("s.snapshots");
        let objects = ObjectDir::create(&dir).unwrap();
        let recorded = record(work.path(), &RecordLimits::default(), &objects).unwrap();
        let Node::File { object, .. } = &recorded.manifest.files["f"] else {
            panic!("a file");
        };
        let stored = dir.join("objects").join(&object[..2]).join(&object[2..]);
        std::fs::set_permissions(&stored, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&stored, b"tampered").unwrap();
        let error =
            materialize(&recorded.manifest, &objects, &store.path().join("out")).unwrap_err();
        assert!(matches!(error, SnapshotError::Damaged { .. }), "{error}");
        // A symlink in its place is not followed.
        std::fs::remove_file(&stored).unwrap();
        symlink(work.path().join("f"), &stored).unwrap();
        let error =
            materialize(&recorded.manifest, &objects, &store.path().join("out2")).unwrap_err();
        assert!(matches!(error, SnapshotError::Damaged { .. }), "{error}");
    }

    #[test]
    fn rewind_puts_back_what_changed_and_leaves_conflicts_and_strangers() {
        let work = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let objects = ObjectDir::create(&store.path().join("s.snapshots")).unwrap();
        let limits = RecordLimits::default();
        write(work.path(), "edited", b"before\n", 0o644);
        write(work.path(), "deleted", b"keep me\n", 0o755);
        write(work.path(), "untouched", b"same\n", 0o644);
        let start = record(work.path(), &limits, &objects).unwrap().manifest;
        // The session's run: an edit, a new file in a new directory, a
        // deletion, and one more edit the user then changes again.
        write(work.path(), "edited", b"after\n", 0o644);
        write(work.path(), "new/dir/created", b"new\n", 0o644);
        std::fs::remove_file(work.path().join("deleted")).unwrap();
        write(work.path(), "untouched", b"run changed\n", 0o644);
        let end = record(work.path(), &limits, &objects).unwrap().manifest;
        // Outside the session: `untouched` changes again, a stranger appears.
        write(work.path(), "untouched", b"user changed\n", 0o644);
        write(work.path(), "stranger", b"not ours\n", 0o644);
        let now = record(work.path(), &limits, &objects).unwrap().manifest;
        let done = rewind(work.path(), &start, &end, &now, &objects).unwrap();
        assert_eq!(done.conflicts, ["untouched"]);
        assert_eq!(done.removed, ["new/dir/created"]);
        assert_eq!(done.written, ["deleted", "edited"]);
        assert_eq!(
            std::fs::read(work.path().join("edited")).unwrap(),
            b"before\n"
        );
        let mode = std::fs::metadata(work.path().join("deleted"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(!work.path().join("new").exists(), "emptied directories go");
        assert_eq!(
            std::fs::read(work.path().join("untouched")).unwrap(),
            b"user changed\n"
        );
        assert!(work.path().join("stranger").exists());
        // And forward again.
        let back = record(work.path(), &limits, &objects).unwrap().manifest;
        let again = rewind(work.path(), &now, &back, &back, &objects).unwrap();
        assert!(again.conflicts.is_empty());
        assert_eq!(
            tree(work.path()).into_keys().collect::<Vec<_>>(),
            ["edited", "new/dir/created", "stranger", "untouched"]
        );
        assert_eq!(
            std::fs::read(work.path().join("edited")).unwrap(),
            b"after\n"
        );
    }

    #[test]
    fn a_changed_ignore_rule_makes_missing_paths_unknown_not_deleted() {
        let work = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let objects = ObjectDir::create(&store.path().join("s.snapshots")).unwrap();
        let limits = RecordLimits::default();
        write(work.path(), "notes.txt", b"v1\n", 0o644);
        write(work.path(), ".gitignore", b".env\n", 0o644);
        write(work.path(), ".env", b"KEY=x\n", 0o600);
        write(work.path(), "code.rs", b"fn a() {}\n", 0o644);
        let start = record(work.path(), &limits, &objects).unwrap().manifest;
        // The run hides notes.txt, un-hides .env, and edits code.rs.
        write(work.path(), ".gitignore", b"notes.txt\n", 0o644);
        write(work.path(), "code.rs", b"fn b() {}\n", 0o644);
        let end = record(work.path(), &limits, &objects).unwrap().manifest;
        // The user edits the now ignored notes.txt.
        write(work.path(), "notes.txt", b"v2 the user's\n", 0o644);
        let now = record(work.path(), &limits, &objects).unwrap().manifest;
        let done = rewind(work.path(), &start, &end, &now, &objects).unwrap();
        assert_eq!(done.written, [".gitignore", "code.rs"]);
        assert_eq!(done.unknown, [".env", "notes.txt"]);
        assert!(
            done.removed.is_empty() && done.conflicts.is_empty(),
            "{done:?}"
        );
        assert_eq!(
            std::fs::read(work.path().join("notes.txt")).unwrap(),
            b"v2 the user's\n"
        );
        assert_eq!(std::fs::read(work.path().join(".env")).unwrap(), b"KEY=x\n");
        assert_eq!(
            std::fs::read(work.path().join("code.rs")).unwrap(),
            b"fn a() {}\n"
        );
    }

    #[test]
    fn a_planted_ignore_file_fails_the_snapshot_instead_of_hanging_it() {
        let store = tempfile::tempdir().unwrap();
        let objects = ObjectDir::create(&store.path().join("s.snapshots")).unwrap();
        let limits = RecordLimits::default();
        for place in ["", "sub/"] {
            let work = tempfile::tempdir().unwrap();
            write(work.path(), "sub/f", b"x", 0o644);
            let at = work.path().join(format!("{place}.gitignore"));
            nix::unistd::mkfifo(&at, Mode::from_bits_truncate(0o600)).unwrap();
            let error = record(work.path(), &limits, &objects).unwrap_err();
            assert!(error.to_string().contains("not a regular file"), "{error}");
            std::fs::remove_file(&at).unwrap();
            symlink("/dev/zero", &at).unwrap();
            let error = record(work.path(), &limits, &objects).unwrap_err();
            assert!(error.to_string().contains("symbolic link"), "{error}");
        }
    }

    #[test]
    fn a_directory_in_the_way_is_a_conflict_and_the_rest_is_put_back() {
        let work = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let objects = ObjectDir::create(&store.path().join("s.snapshots")).unwrap();
        let limits = RecordLimits::default();
        write(work.path(), "a", b"orig\n", 0o644);
        write(work.path(), "f", b"orig\n", 0o644);
        let start = record(work.path(), &limits, &objects).unwrap().manifest;
        write(work.path(), "a", b"changed\n", 0o644);
        std::fs::remove_file(work.path().join("f")).unwrap();
        write(work.path(), "f/x", b"inside\n", 0o644);
        let end = record(work.path(), &limits, &objects).unwrap().manifest;
        let done = rewind(work.path(), &start, &end, &end, &objects).unwrap();
        assert_eq!(done.conflicts, ["f"]);
        assert_eq!(done.written, ["a"]);
        assert_eq!(std::fs::read(work.path().join("a")).unwrap(), b"orig\n");
    }

    #[test]
    fn rewind_never_writes_through_a_planted_symlink() {
        let work = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let objects = ObjectDir::create(&store.path().join("s.snapshots")).unwrap();
        let limits = RecordLimits::default();
        write(work.path(), "d/f", b"one\n", 0o644);
        let start = record(work.path(), &limits, &objects).unwrap().manifest;
        write(work.path(), "d/f", b"two\n", 0o644);
        let end = record(work.path(), &limits, &objects).unwrap().manifest;
        // `d` becomes a link outside after the session last looked, and the
        // caller's view of `now` is stale (a race): the write must not land
        // outside.
        std::fs::remove_dir_all(work.path().join("d")).unwrap();
        symlink(outside.path(), work.path().join("d")).unwrap();
        std::fs::write(outside.path().join("f"), b"two\n").unwrap();
        let done = rewind(work.path(), &start, &end, &end, &objects).unwrap();
        assert_eq!(done.conflicts, ["d/f"], "refused, reported as a conflict");
        assert_eq!(std::fs::read(outside.path().join("f")).unwrap(), b"two\n");
    }
}
