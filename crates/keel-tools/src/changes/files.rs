//! Keel's own snapshot and git-compatible diff, for workspaces outside git;
//! see the parent module for what it keeps and its limits.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::time::{Duration, Instant};

use similar::{Algorithm, DiffTag};

use super::scan::{Content, Item, Scan, Stamp};
use super::spill::{ContentId, Spill, same_content};
use super::{ChangesError, WorkspaceChanges};

/// Largest file whose starting content Keel keeps (in memory or spilled).
const MAX_KEPT_FILE: usize = 1 << 20;
/// Total starting content Keel keeps (in memory or spilled).
const KEPT_BUDGET: usize = 64 << 20;
/// Context lines around each hunk.
const CONTEXT: usize = 3;
/// After this long a line diff settles for a valid but non-minimal result.
const DIFF_TIMEOUT: Duration = Duration::from_secs(5);

/// A file or symlink as Keel remembers it.
pub(super) struct FileState {
    mode: u32,
    len: usize,
    hash: u64,
    /// The content, where it was kept (not at all when it did not fit the
    /// budget or was not read).
    content: Kept,
    /// Set when the file was not read (over the size cap, or hard-linked):
    /// it is then compared by size and modification time.
    unread: Option<Stamp>,
}

/// Where a file's content was kept.
enum Kept {
    /// Not kept: only length and hash (or the stamp) are known.
    Not,
    /// On the heap.
    Memory(Vec<u8>),
    /// In the baseline's spill directory, under this digest.
    Spilled(ContentId),
}

impl FileState {
    /// The state of a scanned item, keeping at most `keep` bytes of
    /// content: in `spill` when given, else in memory.
    fn of(item: Item, keep: usize, spill: Option<&Spill>) -> Result<FileState, ChangesError> {
        Ok(match item.content {
            Content::Bytes(bytes) => FileState {
                mode: item.mode,
                len: bytes.len(),
                hash: fnv1a(FNV_OFFSET, &bytes),
                content: match spill {
                    _ if bytes.len() > keep => Kept::Not,
                    Some(spill) => Kept::Spilled(spill.store(&bytes)?),
                    None => Kept::Memory(bytes),
                },
                unread: None,
            },
            Content::Unread | Content::Reused => FileState {
                mode: item.mode,
                len: usize::try_from(item.stamp.len).unwrap_or(usize::MAX),
                hash: 0,
                content: Kept::Not,
                unread: Some(item.stamp),
            },
        })
    }

    /// How many content bytes were kept (in memory or spilled).
    fn kept_len(&self) -> usize {
        match self.content {
            Kept::Not => 0,
            Kept::Memory(_) | Kept::Spilled(_) => self.len,
        }
    }

    /// Bytes of content this state holds on the heap.
    pub(super) fn heap_bytes(&self) -> usize {
        match &self.content {
            Kept::Memory(bytes) => bytes.capacity(),
            Kept::Not | Kept::Spilled(_) => 0,
        }
    }

    /// Whether `self` (the start) and `now` hold the same file.
    fn same_as(&self, now: &FileState) -> bool {
        if self.mode != now.mode {
            return false;
        }
        match (&self.unread, &now.unread) {
            (Some(a), Some(b)) => a.same_size_and_time(b),
            (None, None) => match (&self.content, &now.content) {
                (Kept::Memory(a), Kept::Memory(b)) => a == b,
                (Kept::Spilled(id), Kept::Memory(bytes))
                | (Kept::Memory(bytes), Kept::Spilled(id)) => {
                    self.len == now.len && same_content(id, bytes)
                }
                (Kept::Spilled(a), Kept::Spilled(b)) => a == b,
                _ => self.len == now.len && self.hash == now.hash,
            },
            _ => false,
        }
    }

    /// The kept content, read back from `spill` when it was spilled.
    fn content<'a>(&'a self, spill: Option<&Spill>) -> Result<Option<Cow<'a, [u8]>>, ChangesError> {
        Ok(match (&self.content, spill) {
            (Kept::Memory(bytes), _) => Some(Cow::Borrowed(bytes.as_slice())),
            (Kept::Spilled(id), Some(spill)) => Some(Cow::Owned(spill.load(id, self.len)?)),
            (Kept::Spilled(_), None) | (Kept::Not, _) => None,
        })
    }
}

/// Keel's own start snapshot: every file's state, with the kept contents
/// in `spill` when the caller gave a directory for it.
pub(super) struct FilesBaseline {
    pub(super) files: BTreeMap<Vec<u8>, FileState>,
    pub(super) spill: Option<Spill>,
}

impl FilesBaseline {
    /// Approximate heap bytes held: paths, per-file records and in-memory
    /// contents (the map's own nodes are not counted).
    pub(super) fn heap_bytes(&self) -> usize {
        self.files
            .iter()
            .map(|(rel, state)| {
                rel.capacity() + std::mem::size_of::<(Vec<u8>, FileState)>() + state.heap_bytes()
            })
            .sum()
    }
}

pub(super) fn capture_files(
    scan: &Scan<'_>,
    spill: Option<Spill>,
) -> Result<FilesBaseline, ChangesError> {
    let mut files = BTreeMap::new();
    let mut kept = 0usize;
    scan.run(
        &BTreeSet::new(),
        |_, _| false,
        |item| {
            let keep = MAX_KEPT_FILE.min(KEPT_BUDGET.saturating_sub(kept));
            let rel = item.rel.clone();
            let state = FileState::of(item, keep, spill.as_ref())?;
            kept += state.kept_len();
            files.insert(rel, state);
            Ok(())
        },
    )?;
    Ok(FilesBaseline { files, spill })
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Continues an FNV-1a 64 hash over `bytes`.
fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One side of a file change: its mode and content, if known.
pub(super) struct Side<'a> {
    /// git's mode.
    pub(super) mode: u32,
    /// The content, when known.
    pub(super) content: Option<&'a [u8]>,
}

pub(super) fn files_changes(
    scan: &Scan<'_>,
    baseline: &FilesBaseline,
) -> Result<WorkspaceChanges, ChangesError> {
    let start = &baseline.files;
    let spill = baseline.spill.as_ref();
    // Read one current file at a time; only what changed is kept.
    let mut present = BTreeSet::new();
    let mut changed = BTreeMap::new();
    scan.run(
        &BTreeSet::new(),
        |_, _| false,
        |item| {
            let rel = item.rel.clone();
            let now = FileState::of(item, usize::MAX, None)?;
            if !start.get(&rel).is_some_and(|old| old.same_as(&now)) {
                changed.insert(rel.clone(), now);
            }
            present.insert(rel);
            Ok(())
        },
    )?;
    let mut paths: Vec<&Vec<u8>> = start.keys().chain(present.iter()).collect();
    paths.sort();
    paths.dedup();

    let mut changes = WorkspaceChanges {
        changed_paths: Vec::new(),
        patch: String::new(),
        git_code: Vec::new(),
    };
    for rel in paths {
        let new = changed.get(rel);
        if present.contains(rel) && new.is_none() {
            continue;
        }
        let old_state = start.get(rel);
        let old_content = match old_state {
            Some(state) => state.content(spill)?,
            None => None,
        };
        let old = old_state.map(|o| Side {
            mode: o.mode,
            content: old_content.as_deref(),
        });
        let new_content = match new {
            Some(state) => state.content(None)?,
            None => None,
        };
        let new = new.map(|n| Side {
            mode: n.mode,
            content: new_content.as_deref(),
        });
        changes
            .changed_paths
            .push(String::from_utf8_lossy(rel).into_owned());
        let is_link = |side: &Option<Side>| side.as_ref().is_some_and(|s| s.mode == 0o120000);
        if old.is_some() && new.is_some() && is_link(&old) != is_link(&new) {
            // A type change is a deletion plus an addition, as git writes it.
            push_file_diff(&mut changes.patch, rel, old, None);
            push_file_diff(&mut changes.patch, rel, None, new);
        } else {
            push_file_diff(&mut changes.patch, rel, old, new);
        }
    }
    Ok(changes)
}

/// Appends one file's `diff --git` section.
pub(super) fn push_file_diff(out: &mut String, rel: &[u8], old: Option<Side>, new: Option<Side>) {
    let a = quote_path("a/", rel);
    let b = quote_path("b/", rel);
    out.push_str(&format!("diff --git {a} {b}\n"));
    match (&old, &new) {
        (None, Some(n)) => out.push_str(&format!("new file mode {:o}\n", n.mode)),
        (Some(o), None) => out.push_str(&format!("deleted file mode {:o}\n", o.mode)),
        (Some(o), Some(n)) if o.mode != n.mode => {
            out.push_str(&format!("old mode {:o}\nnew mode {:o}\n", o.mode, n.mode));
        }
        _ => {}
    }
    let old_content = old.as_ref().map(|o| o.content);
    let new_content = new.as_ref().map(|n| n.content);
    let old_label = if old.is_some() {
        a
    } else {
        "/dev/null".to_string()
    };
    let new_label = if new.is_some() {
        b
    } else {
        "/dev/null".to_string()
    };
    match (as_text(old_content), as_text(new_content)) {
        (Some(old_text), Some(new_text)) => {
            if old_text == new_text {
                return; // a mode change, or an empty file added or deleted
            }
            let tab = if rel.contains(&b' ') { "\t" } else { "" };
            out.push_str(&format!("--- {old_label}{tab}\n+++ {new_label}{tab}\n"));
            push_hunks(out, old_text, new_text);
        }
        _ => out.push_str(&format!(
            "Binary files {old_label} and {new_label} differ\n"
        )),
    }
}

/// A side's text: empty when absent, `None` when unknown or binary.
fn as_text(side: Option<Option<&[u8]>>) -> Option<&str> {
    match side {
        None => Some(""),
        Some(None) => None,
        Some(Some(bytes)) if bytes.contains(&0) => None,
        Some(Some(bytes)) => std::str::from_utf8(bytes).ok(),
    }
}

/// Appends unified hunks turning `old` into `new`, splitting lines at `\n` only.
fn push_hunks(out: &mut String, old: &str, new: &str) {
    let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
    let new_lines: Vec<&str> = new.split_inclusive('\n').collect();
    let deadline = Some(Instant::now() + DIFF_TIMEOUT);
    let ops =
        similar::capture_diff_slices_deadline(Algorithm::Myers, &old_lines, &new_lines, deadline);
    for group in similar::group_diff_ops(ops, CONTEXT) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            hunk_range(old_range),
            hunk_range(new_range)
        ));
        for op in &group {
            let (tag, old_range, new_range) = op.as_tag_tuple();
            match tag {
                DiffTag::Equal => push_lines(out, ' ', &old_lines, old_range),
                DiffTag::Delete => push_lines(out, '-', &old_lines, old_range),
                DiffTag::Insert => push_lines(out, '+', &new_lines, new_range),
                DiffTag::Replace => {
                    push_lines(out, '-', &old_lines, old_range);
                    push_lines(out, '+', &new_lines, new_range);
                }
            }
        }
    }
}

/// Formats a hunk range as git does: 1-based start, count omitted when 1.
fn hunk_range(range: Range<usize>) -> String {
    let len = range.len();
    let start = if len == 0 {
        range.start
    } else {
        range.start + 1
    };
    if len == 1 {
        start.to_string()
    } else {
        format!("{start},{len}")
    }
}

fn push_lines(out: &mut String, sign: char, lines: &[&str], range: Range<usize>) {
    for line in lines.get(range).unwrap_or_default() {
        out.push(sign);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

/// Prefixes a path, C-quoting it as git does when it has special bytes.
fn quote_path(prefix: &str, rel: &[u8]) -> String {
    let special = |b: u8| b < 0x20 || b == 0x7f || b == b'"' || b == b'\\';
    let utf8 = std::str::from_utf8(rel);
    match utf8 {
        Ok(plain) if !rel.iter().any(|&b| special(b)) => return format!("{prefix}{plain}"),
        _ => {}
    }
    let mut quoted = format!("\"{prefix}");
    for &b in rel {
        match b {
            b'"' => quoted.push_str("\\\""),
            b'\\' => quoted.push_str("\\\\"),
            b'\t' => quoted.push_str("\\t"),
            b'\n' => quoted.push_str("\\n"),
            b'\r' => quoted.push_str("\\r"),
            0x20..=0x7e => quoted.push(char::from(b)),
            _ => quoted.push_str(&format!("\\{b:03o}")),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_escapes_special_bytes() {
        assert_eq!(
            quote_path("a/", b"plain/p\xc3\xa9.txt"),
            "a/plain/p\u{e9}.txt"
        );
        assert_eq!(quote_path("b/", b"tab\there"), "\"b/tab\\there\"");
        assert_eq!(quote_path("a/", b"bad\xff"), "\"a/bad\\377\"");
    }
}
