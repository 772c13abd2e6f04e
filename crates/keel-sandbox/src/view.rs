//! The filesystem a sandboxed command sees: the plan of its mount namespace.
//!
//! The view is built on an empty tmpfs (the new root) and holds only what the
//! level grants, each at the path it has on the host so that absolute paths,
//! symlinks and `$HOME` keep working:
//!
//! - the configured readable locations (system directories, toolchains),
//!   bound read-only, symlinks recreated as symlinks (their targets bound
//!   too);
//! - the workspace, read-only or read-write by level, and the extra writable
//!   directories in workspace-write levels, with git's and Keel's metadata
//!   at their top bound read-only over itself (see `metadata`), and a
//!   linked work tree's git directories;
//! - a fresh `/proc` for the command's own PID namespace, a minimal `/dev`
//!   (null, zero, full, random, urandom, a private devpts, `/dev/shm`; no
//!   tty of the host), a private tmpfs `/tmp`; `/tmp` and `/dev/shm` are
//!   bounded in size and inodes (`ResourceLimits::tmp_size`), since tmpfs
//!   pages are not counted in any rlimit;
//! - secrets among the readable locations (`/etc/shadow`, SSH host keys,
//!   credential files of toolchains) masked: `/dev/null` is bound over a
//!   file, an empty read-only tmpfs over a directory.
//!
//! The child mounts an empty tmpfs on the host's `/tmp` inside its private
//! mount namespace (covering it there only), pivots into it with the host's
//! root kept at [`OLD_ROOT`], builds the view there — every source is read
//! through [`OLD_ROOT`], every target is the path itself — and then
//! detaches the old root. Nothing is created on the host.
//!
//! Everything here runs in the parent and may allocate; the child only walks
//! [`View::steps`], which hold ready-made C strings. A namespace holder
//! (see `zygote`) builds the view once per run and repeats
//! [`View::per_call`] (private `/tmp`, `/dev/shm` and `/dev/pts`, a `/proc`
//! for the call's own PID namespace) for every call. Invariants: a step's
//! parents come before it (entries are mounted shallowest first, and a
//! read-only bind is made read-only before anything is mounted beneath it,
//! so a writable workspace under a read-only directory stays writable);
//! masks come last, so no later bind uncovers what they hide.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::metadata::Metadata;
use super::{Sandbox, SandboxError};

/// One operation of the child: targets are inside paths, sources are read
/// through the old root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Create a directory (an existing one is fine).
    Dir(CString),
    /// Create an empty regular file to mount a file on (an existing one is fine).
    File(CString),
    /// Create a symlink `link` → `target`.
    Symlink { target: CString, link: CString },
    /// Bind `source` at `target` with everything mounted beneath it.
    Bind {
        source: CString,
        target: CString,
        read_only: bool,
    },
    /// Mount a tmpfs with these options.
    Tmpfs { target: CString, options: CString },
    /// Mount a fresh procfs.
    Proc(CString),
    /// Mount a new devpts instance.
    Devpts(CString),
    /// Make this mount (not the ones beneath it) read-only.
    ReadOnly(CString),
}

/// The plan of one command's mount namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    /// What to do after pivoting into the new root's tmpfs.
    pub steps: Vec<Step>,
    /// The mounts among them that give each call a fresh, private file
    /// system (`/tmp`, `/dev/shm`, `/dev/pts`, `/proc`): a holder that
    /// keeps the view for a whole run mounts these again, over the first
    /// ones, per call.
    pub per_call: Vec<Fresh>,
    /// Inside paths that the Landlock layer must grant, with what.
    pub landlock: Vec<(CString, Grant)>,
}

/// A mount made afresh for every call, over the holder's, with what the
/// view holds beneath it carried over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fresh {
    /// Where it is mounted.
    pub target: CString,
    /// The mount itself (a tmpfs, a procfs or a devpts).
    pub mount: Step,
    /// What the view has beneath it, in order.
    pub beneath: Vec<Beneath>,
}

/// Something the view holds beneath a [`Fresh`] mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Beneath {
    /// A directory, file or symlink, made again in the fresh mount.
    Make(Step),
    /// A mount (with everything mounted beneath it), moved from beneath
    /// the covered mount (`from`, relative to its root) to `to`.
    Move { from: CString, to: CString },
}

/// Which rights an inside path created by the view needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// List directories (not read files): the root tmpfs, so that `ls /`
    /// and `ls ~` work; files still need a grant of their own.
    List,
    /// Read files and list directories.
    Read,
    /// Read, write and use ioctls on device files.
    Devices,
    /// Everything.
    All,
}

/// How an entry is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Entry {
    Read,
    Write,
    /// Read-only over itself, inside a writable bind (git's metadata).
    Protected,
    Tmp,
    Proc,
    Dev,
}

/// Where the host's root stays reachable while the view is built.
pub(crate) const OLD_ROOT: &str = "/.keel-old-root";

/// Device files bound from the host into the minimal `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// Builds the view of `sandbox` for a command in `workspace`, with the
/// `metadata` found there.
pub(crate) fn build(
    sandbox: &Sandbox,
    workspace: &Path,
    metadata: &Metadata,
) -> Result<View, SandboxError> {
    let mut entries: BTreeMap<PathBuf, Entry> = BTreeMap::new();
    entries.insert("/tmp".into(), Entry::Tmp);
    entries.insert("/proc".into(), Entry::Proc);
    entries.insert("/dev".into(), Entry::Dev);
    let mut add = |path: &Path, entry: Entry| {
        if path == Path::new("/") || !path.is_absolute() {
            return;
        }
        if path.starts_with("/proc") || path.starts_with("/dev") {
            return;
        }
        let slot = entries.entry(path.to_path_buf()).or_insert(entry);
        if entry == Entry::Write || *slot == Entry::Tmp {
            *slot = entry;
        }
    };
    for path in &sandbox.config.readable {
        add(path, Entry::Read);
        // A symlink is recreated as a symlink; what it points at must be there too.
        if path.is_symlink()
            && let Ok(resolved) = std::fs::canonicalize(path)
        {
            add(&resolved, Entry::Read);
        }
    }
    // With the network, name resolution must work: `/etc/resolv.conf` is
    // often a symlink into `/run` (systemd-resolved), which is not bound.
    if sandbox.level.allows_network()
        && let Ok(resolved) = std::fs::canonicalize("/etc/resolv.conf")
    {
        add(&resolved, Entry::Read);
    }
    let workspace_entry = if sandbox.level.writes_workspace() {
        Entry::Write
    } else {
        Entry::Read
    };
    add(workspace, workspace_entry);
    if sandbox.level.writes_workspace() {
        for path in &sandbox.config.writable {
            add(path, Entry::Write);
        }
    }
    let linked = match metadata.linked_writable {
        true => Entry::Write,
        false => Entry::Read,
    };
    for path in &metadata.linked {
        add(path, linked);
    }
    // Directories above Keel's protected configuration, bound over
    // themselves so that they cannot be renamed away (see `metadata`).
    for path in &metadata.pinned {
        add(path, Entry::Write);
    }
    // Last, so that protection wins over a writable entry of the same path.
    for path in &metadata.protected {
        entries.insert(path.clone(), Entry::Protected);
    }
    let mut sorted: Vec<(PathBuf, Entry)> = entries.into_iter().collect();
    sorted.sort_by_key(|(path, _)| (path.components().count(), path.clone()));
    let mut plan = Planner {
        steps: Vec::new(),
        fresh: Vec::new(),
        made: BTreeSet::new(),
        tmp_options: c_str(&sandbox.config.limits.tmpfs_options())?,
    };
    let mut bound: Vec<PathBuf> = Vec::new();
    for (path, entry) in sorted {
        // A readable path already visible through a bind adds nothing.
        if entry == Entry::Read && bound.iter().any(|root| path.starts_with(root)) {
            continue;
        }
        let from_host = matches!(entry, Entry::Read | Entry::Write);
        if plan.entry(&path, entry)? && from_host {
            bound.push(path);
        }
    }
    let mut masked = BTreeSet::new();
    for secret in &sandbox.config.masked {
        plan.mask(secret, &bound, &mut masked)?;
    }
    let landlock = vec![
        (c_path(Path::new("/"))?, Grant::List),
        (c_path(Path::new("/tmp"))?, Grant::All),
        (c_path(Path::new("/dev"))?, Grant::Devices),
        (c_path(Path::new("/dev/shm"))?, Grant::All),
        (c_path(Path::new("/proc"))?, Grant::Read),
    ];
    let per_call = plan
        .fresh
        .iter()
        .map(|&index| fresh(&plan.steps, index))
        .collect::<Result<_, _>>()?;
    Ok(View {
        steps: plan.steps,
        per_call,
        landlock,
    })
}

struct Planner {
    steps: Vec<Step>,
    /// Indices of the steps every call must have afresh.
    fresh: Vec<usize>,
    made: BTreeSet<PathBuf>,
    /// The options of the private `/tmp` and `/dev/shm` (their size bound).
    tmp_options: CString,
}

impl Planner {
    /// An inside path (a mount target).
    fn inside(&self, path: &Path) -> Result<CString, SandboxError> {
        c_path(path)
    }

    /// Adds a mount that every call must have afresh.
    fn fresh(&mut self, step: Step) {
        self.fresh.push(self.steps.len());
        self.steps.push(step);
    }

    /// Creates `path`'s parents (and `path` itself when `with_self`).
    fn dirs(&mut self, path: &Path, with_self: bool) -> Result<(), SandboxError> {
        let mut chain: Vec<&Path> = path.ancestors().skip(usize::from(!with_self)).collect();
        chain.reverse();
        for dir in chain {
            if dir == Path::new("/") || !self.made.insert(dir.to_path_buf()) {
                continue;
            }
            let target = self.inside(dir)?;
            self.steps.push(Step::Dir(target));
        }
        Ok(())
    }

    /// Plans one entry; whether something was mounted (a missing path or a
    /// symlink is not).
    fn entry(&mut self, path: &Path, entry: Entry) -> Result<bool, SandboxError> {
        match entry {
            Entry::Tmp => {
                self.dirs(path, true)?;
                let target = self.inside(path)?;
                self.fresh(Step::Tmpfs {
                    target,
                    options: self.tmp_options.clone(),
                });
            }
            Entry::Proc => {
                self.dirs(path, true)?;
                self.fresh(Step::Proc(self.inside(path)?));
            }
            Entry::Dev => self.dev(path)?,
            // The path exists beneath a writable bind already: nothing is
            // created on the host, and a path that vanished meanwhile makes
            // the bind, and so the command, fail.
            Entry::Protected => {
                let source = host_source(path)?;
                self.made.insert(path.to_path_buf());
                self.steps.push(Step::Bind {
                    source,
                    target: self.inside(path)?,
                    read_only: true,
                });
            }
            Entry::Read | Entry::Write => {
                let Ok(metadata) = std::fs::symlink_metadata(path) else {
                    tracing::debug!(path = %path.display(), "sandbox view: skipped a missing path");
                    return Ok(false);
                };
                if metadata.file_type().is_symlink() {
                    let target = std::fs::read_link(path)
                        .map_err(|error| io_error("reading a symlink", path, error))?;
                    self.dirs(path, false)?;
                    self.made.insert(path.to_path_buf());
                    self.steps.push(Step::Symlink {
                        target: c_path(&target)?,
                        link: self.inside(path)?,
                    });
                    return Ok(false);
                }
                if metadata.is_dir() {
                    self.dirs(path, true)?;
                } else {
                    self.dirs(path, false)?;
                    self.steps.push(Step::File(self.inside(path)?));
                }
                self.steps.push(Step::Bind {
                    source: host_source(path)?,
                    target: self.inside(path)?,
                    read_only: entry == Entry::Read,
                });
            }
        }
        Ok(true)
    }

    /// The minimal `/dev`: a few device files, a private devpts, `/dev/shm`.
    fn dev(&mut self, dev: &Path) -> Result<(), SandboxError> {
        self.dirs(dev, true)?;
        let inside = |name: &str| c_path(&dev.join(name));
        self.steps.push(Step::Tmpfs {
            target: inside("")?,
            options: c_str("mode=755")?,
        });
        for device in DEVICES {
            let host = dev.join(device);
            if !host.exists() {
                continue;
            }
            self.steps.push(Step::File(inside(device)?));
            self.steps.push(Step::Bind {
                source: host_source(&host)?,
                target: inside(device)?,
                read_only: false,
            });
        }
        self.steps.push(Step::Dir(inside("pts")?));
        // Per call: a pseudo-terminal one call opened is none of another's.
        self.fresh(Step::Devpts(inside("pts")?));
        self.steps.push(Step::Symlink {
            target: c_str("pts/ptmx")?,
            link: inside("ptmx")?,
        });
        self.steps.push(Step::Dir(inside("shm")?));
        self.fresh(Step::Tmpfs {
            target: inside("shm")?,
            options: self.tmp_options.clone(),
        });
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            self.steps.push(Step::Symlink {
                target: c_str(target)?,
                link: inside(name)?,
            });
        }
        self.steps.push(Step::ReadOnly(inside("")?));
        self.made.insert(dev.to_path_buf());
        Ok(())
    }

    /// Hides `secret` if it would be visible through one of `bound`.
    fn mask(
        &mut self,
        secret: &Path,
        bound: &[PathBuf],
        masked: &mut BTreeSet<PathBuf>,
    ) -> Result<(), SandboxError> {
        let Ok(resolved) = std::fs::canonicalize(secret) else {
            return Ok(());
        };
        for path in [secret, resolved.as_path()] {
            if !bound.iter().any(|root| path.starts_with(root))
                || !masked.insert(path.to_path_buf())
            {
                continue;
            }
            let Ok(metadata) = std::fs::symlink_metadata(path) else {
                continue;
            };
            let target = self.inside(path)?;
            if metadata.is_dir() {
                self.steps.push(Step::Tmpfs {
                    target: self.inside(path)?,
                    options: c_str("mode=000,size=4k")?,
                });
                self.steps.push(Step::ReadOnly(target));
            } else if !metadata.file_type().is_symlink() {
                self.steps.push(Step::Bind {
                    source: host_source(Path::new("/dev/null"))?,
                    target,
                    read_only: true,
                });
            }
        }
        Ok(())
    }
}

/// The per-call plan of the fresh mount `steps[index]`: what the steps
/// after it make or mount beneath its target. Only the outermost mounts
/// beneath it move (theirs come along); nothing inside them is made again.
fn fresh(steps: &[Step], index: usize) -> Result<Fresh, SandboxError> {
    let mount = steps
        .get(index)
        .cloned()
        .ok_or_else(|| SandboxError::Setup("the view's plan lost a step".into()))?;
    let target = match &mount {
        Step::Tmpfs { target, .. } | Step::Proc(target) | Step::Devpts(target) => target.clone(),
        other => {
            return Err(SandboxError::Setup(format!(
                "the view cannot renew {other:?} per call"
            )));
        }
    };
    let root = c_as_path(&target).to_path_buf();
    let mut beneath = Vec::new();
    let mut moved: Vec<PathBuf> = Vec::new();
    for step in steps.iter().skip(index + 1) {
        let (path, is_mount) = match step {
            Step::Dir(path) | Step::File(path) | Step::Symlink { link: path, .. } => (path, false),
            Step::Bind { target, .. }
            | Step::Tmpfs { target, .. }
            | Step::Proc(target)
            | Step::Devpts(target) => (target, true),
            Step::ReadOnly(_) => continue,
        };
        let path = c_as_path(path);
        let inside = path
            .strip_prefix(&root)
            .ok()
            .filter(|rest| !rest.as_os_str().is_empty());
        let Some(relative) = inside else { continue };
        if moved.iter().any(|mount| path.starts_with(mount)) {
            continue;
        }
        if is_mount {
            moved.push(path.to_path_buf());
            beneath.push(Beneath::Move {
                from: c_path(relative)?,
                to: c_path(path)?,
            });
        } else {
            beneath.push(Beneath::Make(step.clone()));
        }
    }
    Ok(Fresh {
        target,
        mount,
        beneath,
    })
}

/// A C string path as a `Path`.
fn c_as_path(path: &CString) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(path.as_bytes()))
}

/// A host path as the child reaches it while building the view: under [`OLD_ROOT`].
fn host_source(path: &Path) -> Result<CString, SandboxError> {
    let relative: PathBuf = path
        .components()
        .filter(|part| matches!(part, Component::Normal(_)))
        .collect();
    c_path(&Path::new(OLD_ROOT).join(relative))
}

/// A path as a C string.
pub(crate) fn c_path(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        SandboxError::InvalidCommand(format!(
            "the path {} holds a NUL byte and cannot be mounted",
            path.display()
        ))
    })
}

fn c_str(text: &str) -> Result<CString, SandboxError> {
    c_path(Path::new(text))
}

fn io_error(what: &str, path: &Path, source: std::io::Error) -> SandboxError {
    SandboxError::Io {
        what: format!("{what} {}", path.display()),
        source,
    }
}
