//! The git snapshot of a workspace (a tree object in Keel's shadow
//! repository, built from bytes Keel read itself) and the patch between two
//! such trees; see the parent module for the invariants.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::files::{Side, push_file_diff};
use super::scan::{Content, Scan, Stamp};
use super::shadow::{Shadow, failure};
use super::{ChangesError, Deadline, WorkspaceChanges, io_err};

/// The largest index file of the user's repository Keel reads.
const MAX_INDEX: u64 = 256 << 20;

/// The user's repository, located without running git in it.
#[derive(Debug, Clone)]
pub(super) struct UserRepo {
    /// Its index file (`.git/index`, or a linked work tree's).
    index: PathBuf,
    /// The workspace root relative to the repository's top, as bytes with
    /// a trailing `/` (empty at the top).
    prefix: Vec<u8>,
}

/// Finds the git work tree `root` (canonical) lies in: the nearest ancestor
/// with a `.git` directory holding `HEAD`, or a `.git` file pointing at one.
pub(super) fn find_repository(root: &Path) -> Option<UserRepo> {
    for top in root.ancestors() {
        let dot_git = top.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
            continue;
        };
        let git_dir = if meta.is_dir() {
            dot_git
        } else if meta.is_file() {
            let text = read_small(&dot_git, 4096)?;
            let text = String::from_utf8(text).ok()?;
            top.join(text.trim_end().strip_prefix("gitdir: ")?)
        } else {
            return None;
        };
        if !git_dir.join("HEAD").is_file() {
            return None;
        }
        let mut prefix = root.strip_prefix(top).ok()?.as_os_str().as_bytes().to_vec();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        return Some(UserRepo {
            index: git_dir.join("index"),
            prefix,
        });
    }
    None
}

/// Reads a small regular file without following a final symlink or
/// blocking on a FIFO; `None` past `limit` bytes or on any error.
fn read_small(path: &Path, limit: u64) -> Option<Vec<u8>> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    crate::beneath::read_bounded(&mut file, limit).ok()?.ok()
}

/// The paths the user's index tracks under the root, relative to it: read
/// from a private copy of the index by the shadow repository, so that
/// tracked files are snapshotted even when ignored.
pub(super) fn tracked_paths(
    shadow: &Shadow,
    repo: &UserRepo,
    deadline: &Deadline,
) -> BTreeSet<Vec<u8>> {
    let Some(index) = read_small(&repo.index, MAX_INDEX) else {
        return BTreeSet::new();
    };
    let copy = shadow.scratch("index");
    let listed = std::fs::write(&copy, index)
        .map_err(|e| io_err("copying the index".to_owned(), e))
        .and_then(|()| {
            let env = [("GIT_INDEX_FILE", copy.as_os_str())];
            shadow.run(&["ls-files", "-z", "--cached"], &env, None, deadline)
        });
    let _ = std::fs::remove_file(&copy);
    match listed {
        Ok(out) if out.status.success() => out
            .stdout
            .split(|&b| b == 0)
            .filter_map(|path| path.strip_prefix(repo.prefix.as_slice()))
            .filter(|rel| !rel.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            tracing::warn!(stderr = %stderr.trim(), "could not list tracked files; ignored ones are left out");
            BTreeSet::new()
        }
        Err(err) => {
            tracing::warn!(%err, "could not list tracked files; ignored ones are left out");
            BTreeSet::new()
        }
    }
}

/// One snapshot: a tree in the shadow repository, plus the files it left
/// out because they were not read.
#[derive(Debug, Default)]
pub(super) struct Snapshot {
    /// The commit holding the tree. It has no parent and a fixed committer,
    /// date and message, so two snapshots of the same tree have the same
    /// commit id; fast-import reports it in its marks, sparing a
    /// `rev-parse` (each git command is a sandboxed process).
    commit: String,
    /// Each tree entry's mode.
    modes: HashMap<Vec<u8>, u32>,
    /// Files recorded by stamp only: their mode and stamp.
    unread: BTreeMap<Vec<u8>, (u32, Stamp)>,
    /// Blob ids of files whose stamp shows them settled, for reuse.
    blobs: HashMap<Vec<u8>, (Stamp, String)>,
}

/// How a tree entry names its blob in fast-import's input.
enum Blob {
    Mark(u64),
    Id(String),
}

/// Snapshots the workspace into the shadow repository with one
/// `git fast-import`. Files whose stamp matches `previous` are not read
/// again; their blob is reused.
pub(super) fn snapshot(
    shadow: &Shadow,
    scan: &Scan<'_>,
    tracked: &BTreeSet<Vec<u8>>,
    previous: Option<&Snapshot>,
) -> Result<Snapshot, ChangesError> {
    let marks = shadow.scratch("marks");
    let mut marks_arg = OsStr::new("--export-marks=").to_os_string();
    marks_arg.push(&marks);
    let args = [
        OsStr::new("fast-import"),
        OsStr::new("--done"),
        OsStr::new("--quiet"),
        &marks_arg,
    ];
    let mut running = shadow.spawn(&args, &[], true)?;
    let Some(stdin) = running.child.stdin.take() else {
        running.kill();
        return Err(io_err(
            "running git fast-import".to_owned(),
            std::io::Error::other("no stdin"),
        ));
    };
    let mut input = std::io::BufWriter::with_capacity(1 << 16, stdin);
    let mut entries: Vec<(Vec<u8>, u32, Blob)> = Vec::new();
    let mut unread = BTreeMap::new();
    let mut stamps: Vec<(Vec<u8>, Stamp, u64)> = Vec::new();
    let mut reused: HashMap<Vec<u8>, (Stamp, String)> = HashMap::new();
    let known = |rel: &[u8]| previous.and_then(|p| p.blobs.get(rel));
    let reuse = |rel: &[u8], stamp: &Stamp| known(rel).is_some_and(|(old, _)| old == stamp);
    let mut next_mark = 0u64;
    let fed = scan.run(tracked, reuse, |item| {
        let write = |input: &mut std::io::BufWriter<_>, bytes: &[u8]| {
            input
                .write_all(bytes)
                .map_err(|e| io_err("writing to git fast-import".to_owned(), e))
        };
        match item.content {
            Content::Bytes(bytes) => {
                next_mark += 1;
                let header = format!("blob\nmark :{next_mark}\ndata {}\n", bytes.len());
                write(&mut input, header.as_bytes())?;
                write(&mut input, &bytes)?;
                write(&mut input, b"\n")?;
                if item.mode != 0o120000 && item.stamp.settled_before(scan.started) {
                    stamps.push((item.rel.clone(), item.stamp, next_mark));
                }
                entries.push((item.rel, item.mode, Blob::Mark(next_mark)));
            }
            Content::Reused => {
                if let Some((stamp, id)) = known(&item.rel) {
                    reused.insert(item.rel.clone(), (*stamp, id.clone()));
                    entries.push((item.rel, item.mode, Blob::Id(id.clone())));
                }
            }
            Content::Unread => {
                unread.insert(item.rel, (item.mode, item.stamp));
            }
        }
        Ok(())
    });
    let name = format!("refs/keel/s{}", shadow.unique());
    let commit_mark = next_mark + 1;
    let fed = fed.and_then(|()| {
        let mut commit = format!(
            "commit {name}\nmark :{commit_mark}\ncommitter Keel <keel@localhost> 0 +0000\ndata 0\n"
        )
        .into_bytes();
        for (rel, mode, blob) in &entries {
            let blob = match blob {
                Blob::Mark(mark) => format!(":{mark}"),
                Blob::Id(id) => id.clone(),
            };
            commit.extend_from_slice(format!("M {mode:o} {blob} ").as_bytes());
            quote_c(&mut commit, rel);
            commit.push(b'\n');
        }
        commit.extend_from_slice(b"\ndone\n");
        input
            .write_all(&commit)
            .and_then(|()| input.flush())
            .map_err(|e| io_err("writing to git fast-import".to_owned(), e))
    });
    drop(input);
    let deadline = scan.deadline();
    if let Err(err) = fed {
        let out = running.finish(deadline);
        // A broken pipe means git stopped first: its stderr says why.
        return Err(match out {
            Ok(out) if !out.status.success() => failure("fast-import", &out),
            _ => err,
        });
    }
    let out = running.finish(deadline)?;
    if !out.status.success() {
        return Err(failure("fast-import", &out));
    }
    let ids = read_marks(&marks);
    let _ = std::fs::remove_file(&marks);
    let Some(commit) = ids.get(&commit_mark).cloned() else {
        return Err(bad_output(
            "fast-import",
            "no mark for the snapshot's commit",
        ));
    };
    let commit = checked_id("fast-import", commit.as_bytes())?;
    let mut blobs = reused;
    for (rel, stamp, mark) in stamps {
        if let Some(id) = ids.get(&mark) {
            blobs.insert(rel, (stamp, id.clone()));
        }
    }
    let modes = entries
        .into_iter()
        .map(|(rel, mode, _)| (rel, mode))
        .collect();
    Ok(Snapshot {
        commit,
        modes,
        unread,
        blobs,
    })
}

/// `:mark id` lines of fast-import's marks file.
fn read_marks(path: &Path) -> HashMap<u64, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (mark, id) = line.strip_prefix(':')?.split_once(' ')?;
            Some((mark.parse().ok()?, id.trim().to_owned()))
        })
        .collect()
}

/// Appends `path` C-quoted, as fast-import reads it.
fn quote_c(out: &mut Vec<u8>, path: &[u8]) {
    out.push(b'"');
    for &b in path {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

fn checked_id(command: &str, stdout: &[u8]) -> Result<String, ChangesError> {
    let id = String::from_utf8_lossy(stdout).trim().to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad_output(command, format!("not an object id: {id:?}")));
    }
    Ok(id)
}

fn bad_output(cmd: &str, detail: impl Into<String>) -> ChangesError {
    ChangesError::GitOutput {
        command: cmd.to_string(),
        detail: detail.into(),
    }
}

const NAMES: &[&str] = &["diff-tree", "-r", "-z", "--name-status", "-M"];
const PATCH: &[&str] = &[
    "diff-tree",
    "-r",
    "-p",
    "--binary",
    "-M",
    "--full-index",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
];

/// The changes from `start` to `end`: git's diff of the two trees, without
/// the unread files, which are compared by stamp and appended as binary
/// sections ("Binary files … differ") that say a change without its bytes.
pub(super) fn git_changes(
    shadow: &Shadow,
    start: &Snapshot,
    end: &Snapshot,
    deadline: &Deadline,
) -> Result<WorkspaceChanges, ChangesError> {
    let unread: BTreeSet<&Vec<u8>> = start.unread.keys().chain(end.unread.keys()).collect();
    let mut changes = WorkspaceChanges {
        changed_paths: Vec::new(),
        patch: String::new(),
        git_code: Vec::new(),
    };
    if start.commit != end.commit {
        let mut tail: Vec<&OsStr> = vec![
            OsStr::new(start.commit.as_str()),
            OsStr::new(end.commit.as_str()),
        ];
        let excludes: Vec<Vec<u8>> = unread
            .iter()
            .map(|rel| [b":(exclude,literal)".as_slice(), rel].concat())
            .collect();
        if !excludes.is_empty() {
            tail.push(OsStr::new("--"));
            tail.push(OsStr::new("."));
            tail.extend(excludes.iter().map(|e| OsStr::from_bytes(e)));
        }
        let names = shadow.run_ok(&with(NAMES, &tail), None, deadline)?;
        changes.changed_paths = parse_name_status(&names);
        let raw = shadow.run_ok(&with(PATCH, &tail), None, deadline)?;
        changes.patch = match String::from_utf8(raw) {
            Ok(patch) => patch,
            Err(err) => utf8_patch(shadow, &tail, err.as_bytes(), deadline)?,
        };
    }
    for rel in unread {
        let side = |snapshot: &Snapshot| match snapshot.unread.get(rel) {
            Some((mode, stamp)) => Some((*mode, Some(*stamp))),
            None => snapshot.modes.get(rel).map(|mode| (*mode, None)),
        };
        let (old, new) = (side(start), side(end));
        if let (Some((a, Some(x))), Some((b, Some(y)))) = (old, new)
            && a == b
            && x.same_size_and_time(&y)
        {
            continue;
        }
        changes
            .changed_paths
            .push(String::from_utf8_lossy(rel).into_owned());
        let as_side = |side: Option<(u32, Option<Stamp>)>| {
            side.map(|(mode, _)| Side {
                mode,
                content: None,
            })
        };
        push_file_diff(&mut changes.patch, rel, as_side(old), as_side(new));
    }
    changes.changed_paths.sort();
    changes.changed_paths.dedup();
    Ok(changes)
}

/// `head` followed by `tail`, as arguments.
fn with<'a>(head: &[&'a str], tail: &[&'a OsStr]) -> Vec<&'a OsStr> {
    head.iter()
        .map(|arg| OsStr::new(*arg))
        .chain(tail.iter().copied())
        .collect()
}

/// Parses `--name-status -z` output: renames and copies carry two paths.
fn parse_name_status(raw: &[u8]) -> Vec<String> {
    let mut tokens = raw.split(|&b| b == 0).filter(|t| !t.is_empty());
    let mut paths = Vec::new();
    while let Some(status) = tokens.next() {
        let count = if matches!(status.first(), Some(b'R' | b'C')) {
            2
        } else {
            1
        };
        for path in tokens.by_ref().take(count) {
            paths.push(String::from_utf8_lossy(path).into_owned());
        }
    }
    paths
}

/// Replaces the non-UTF-8 file sections of `raw` with binary, quoted
/// versions: the diff is run again with every path marked binary.
fn utf8_patch(
    shadow: &Shadow,
    tail: &[&OsStr],
    raw: &[u8],
    deadline: &Deadline,
) -> Result<String, ChangesError> {
    let blob_args = ["hash-object", "-w", "--stdin"];
    let stdout = shadow.run_ok(&blob_args, Some(b"* binary\n"), deadline)?;
    let blob = checked_id(&blob_args.join(" "), &stdout)?;
    let listing = format!("100644 blob {blob}\t.gitattributes\n");
    let stdout = shadow.run_ok(&["mktree"], Some(listing.as_bytes()), deadline)?;
    let attrs = checked_id("mktree", &stdout)?;
    let attr_source = format!("--attr-source={attrs}");
    let head: Vec<&str> = ["-c", "core.quotepath=on", attr_source.as_str()]
        .into_iter()
        .chain(PATCH.iter().copied())
        .collect();
    let args = with(&head, tail);
    let binary = shadow.run_ok(&args, None, deadline)?;
    let (text, binary) = (split_sections(raw), split_sections(&binary));
    let command = "diff-tree (binary)";
    if text.len() != binary.len() {
        return Err(bad_output(
            command,
            "binary re-run disagrees on the file list",
        ));
    }
    let mut patch = String::new();
    for (section, fallback) in text.into_iter().zip(binary) {
        let chosen = std::str::from_utf8(section).or_else(|_| std::str::from_utf8(fallback));
        let Ok(chosen) = chosen else {
            return Err(bad_output(
                command,
                "patch is not UTF-8 even with binary sections",
            ));
        };
        patch.push_str(chosen);
    }
    Ok(patch)
}

/// Splits a patch before each line that starts with `diff --git `.
fn split_sections(patch: &[u8]) -> Vec<&[u8]> {
    let mut starts: Vec<usize> = Vec::new();
    let mut line_start = 0;
    while line_start < patch.len() {
        if patch[line_start..].starts_with(b"diff --git ") {
            starts.push(line_start);
        }
        match patch[line_start..].iter().position(|&b| b == b'\n') {
            Some(nl) => line_start += nl + 1,
            None => break,
        }
    }
    let mut sections = Vec::new();
    if let Some(&first) = starts.first()
        && first > 0
    {
        sections.push(&patch[..first]);
    }
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(patch.len());
        sections.push(&patch[start..end]);
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_import_paths_are_c_quoted() {
        let mut out = Vec::new();
        quote_c(&mut out, b"a \"b\"\\c\nd\x01\xc3\xa9");
        assert_eq!(out, b"\"a \\\"b\\\"\\\\c\\nd\\001\xc3\xa9\"");
    }
}
