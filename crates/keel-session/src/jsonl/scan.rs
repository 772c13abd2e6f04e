//! Reads a session file front to back, as a stream, into an [`Index`].
//!
//! Memory is bounded by the longest line and the index, never by the file.
//!
//! The scan tells a torn write from damage by what a crash can leave: the
//! writer appends one write batch at a time and starts a batch only after the
//! previous one was synced, so a crash can only leave a *prefix of the last
//! batch's bytes* after the last complete group. The tail is therefore torn
//! (and may be cut) only when every complete line in it is a valid record
//! continuing the sequence — records of one incomplete group, all of one
//! batch — and at most the final line is incomplete and could still begin
//! the record that comes next (its frame matches, its bytes are what the
//! encoder writes, and it does not hold a whole record followed by more).
//! Anything else — a line that fails its checksum or framing, a record out
//! of sequence, a duplicated or swapped line, CRLF line ends, zeroed bytes,
//! a shortened earlier line — is damage, refused naming the first bad line.
//! The scan itself never writes.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::format::{self, Header, LineFault, ScannedFrame, Skeleton};
use super::index::{Index, TreeFault};
use super::meta::Meta;
use crate::{SessionError, TornTail};

/// What a scan found.
#[derive(Debug)]
pub(crate) struct Scan {
    pub(crate) header: Header,
    pub(crate) index: Index,
    /// The number the next group must carry.
    pub(crate) next_group: u64,
    /// Bytes up to the end of the last complete group.
    pub(crate) valid_len: u64,
    /// The last record of the last complete group, if any.
    pub(crate) last: Option<LastRecord>,
    /// The torn tail beyond `valid_len`, if any.
    pub(crate) torn: Option<TornTail>,
}

/// Where the last complete record is and what it carries: what the summary
/// sidecar is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastRecord {
    /// The offset of its line.
    pub(crate) offset: u64,
    /// Its write batch.
    pub(crate) batch: u64,
    /// Its checksum.
    pub(crate) crc: u32,
}

/// The records of a group seen so far.
struct Pending {
    batch: u64,
    group: u64,
    size: u32,
    first_line: usize,
    records: Vec<(ScannedFrame, usize, u64, u32)>,
}

/// Opens `path` for reading (and writing, if `write`) only if it is a regular
/// file: a FIFO or device named like a session never blocks the open, and a
/// symbolic link is not followed. A missing file is `SessionNotFound`
/// naming the file's stem.
pub(crate) fn open_regular(path: &Path, write: bool) -> Result<File, SessionError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(|error| match (error.kind(), error.raw_os_error()) {
            (std::io::ErrorKind::NotFound, _) => SessionError::SessionNotFound(
                path.file_stem()
                    .map(|stem| stem.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            (_, Some(nix::libc::ELOOP)) => not_regular(path),
            _ => io_error(path, error),
        })?;
    let regular = file
        .metadata()
        .map_err(|error| io_error(path, error))?
        .is_file();
    if regular {
        Ok(file)
    } else {
        Err(not_regular(path))
    }
}

fn not_regular(path: &Path) -> SessionError {
    SessionError::NotASession {
        path: path.display().to_string(),
        reason: "it is not a regular file".into(),
    }
}

/// Scans `file` (positioned at its start), the session `session_id` at `path`.
/// `summary` is its sidecar, read before the scan began, if any: when it
/// describes the same creation, the length it records was acknowledged, so a
/// file whose complete groups end earlier was truncated, not torn.
pub(crate) fn scan(
    file: File,
    path: &Path,
    session_id: &str,
    summary: Option<&Meta>,
) -> Result<Scan, SessionError> {
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let header_len = reader
        .read_until(b'\n', &mut line)
        .map_err(|error| io_error(path, error))?;
    let header = parse_header(path, &line)?;
    if header.id != session_id {
        return Err(SessionError::IdMismatch {
            path: path.display().to_string(),
            file_id: session_id.to_owned(),
            header_id: header.id,
        });
    }
    let mut scan = Scan {
        header,
        index: Index::default(),
        next_group: 1,
        valid_len: header_len as u64,
        last: None,
        torn: None,
    };
    let mut offset = header_len as u64;
    let mut line_number = 1;
    let mut pending: Option<Pending> = None;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|error| io_error(path, error))?;
        if read == 0 {
            break;
        }
        line_number += 1;
        let start = offset;
        offset += read as u64;
        let Some(body) = line.strip_suffix(b"\n") else {
            // The final line is incomplete: torn only if it can begin the
            // record the sequence expects next.
            let heads = expected_heads(&scan, pending.as_ref());
            if let Some(reason) = partial_line_fault(&line, &heads) {
                return Err(corrupt(path, line_number, reason));
            }
            let first_line = pending
                .as_ref()
                .map_or(line_number, |group| group.first_line);
            scan.torn = Some(torn(
                &scan,
                offset,
                first_line,
                "its last line is incomplete",
            ));
            pending = None;
            break;
        };
        let frame = format::decode_skeleton(body, scan.index.wants_title())
            .map_err(|problem| corrupt(path, line_number, describe(&problem)))?;
        let crc = format::line_crc(body);
        let batch = frame.batch;
        let record = (frame, line_number, start, body.len() as u32);
        let complete =
            accept(&mut pending, &scan, record).map_err(|r| corrupt(path, line_number, r))?;
        if let Some(group) = complete {
            apply(path, &mut scan.index, group)?;
            scan.next_group += 1;
            scan.valid_len = offset;
            scan.last = Some(LastRecord {
                offset: start,
                batch,
                crc,
            });
        }
    }
    if let Some(group) = pending {
        let reason = format!(
            "group {} has {} of its {} records",
            group.group,
            group.records.len(),
            group.size
        );
        scan.torn = Some(torn(&scan, offset, group.first_line, &reason));
    }
    let acknowledged = summary
        .filter(|summary| summary.created == scan.header.created)
        .map(|summary| summary.file_len);
    if let Some(acknowledged) = acknowledged.filter(|&length| length > scan.valid_len) {
        let line = scan.torn.as_ref().map_or(line_number + 1, |torn| torn.line);
        return Err(corrupt(
            path,
            line,
            format!(
                "the complete records end at byte {}, but its summary sidecar shows {acknowledged} bytes were acknowledged: the file lost records a crash cannot lose (restore it, or delete the `.meta.json` sidecar to accept the loss)",
                scan.valid_len
            ),
        ));
    }
    Ok(scan)
}

fn torn(scan: &Scan, end: u64, line: usize, what: &str) -> TornTail {
    TornTail {
        offset: scan.valid_len,
        bytes: end - scan.valid_len,
        line,
        reason: format!(
            "a write torn by a crash: the bytes after the last complete group are the start of one write batch, and {what}"
        ),
    }
}

/// The header alone, read at offset 0 without moving `file`'s cursor: for
/// a listing whose cached summary lacks a header field. `None` when the
/// first line is not a valid header (a scan reports why).
pub(crate) fn header_at(file: &File, path: &Path) -> Option<Header> {
    use std::os::unix::fs::FileExt;
    // A header is a few hundred bytes; a path of PATH_MAX fits many times.
    let mut buffer = vec![0; 64 * 1024];
    let read = file.read_at(&mut buffer, 0).ok()?;
    let buffer = buffer.get(..read)?;
    let end = buffer.iter().position(|&byte| byte == b'\n')?;
    parse_header(path, buffer.get(..=end)?).ok()
}

pub(crate) fn parse_header(path: &Path, line: &[u8]) -> Result<Header, SessionError> {
    let not_a_session = |reason: &str| SessionError::NotASession {
        path: path.display().to_string(),
        reason: reason.to_owned(),
    };
    let body = line
        .strip_suffix(b"\n")
        .ok_or_else(|| not_a_session("the header line is missing or incomplete"))?;
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|_| not_a_session("the first line is not a JSON header"))?;
    if value.get("format").and_then(|f| f.as_str()) != Some(format::FORMAT) {
        return Err(not_a_session(
            "the header does not name the keel-session format",
        ));
    }
    let version = value
        .get("version")
        .ok_or_else(|| not_a_session("the header names no format version"))?
        .as_u64()
        .ok_or_else(|| not_a_session("the header's format version is not a whole number"))?;
    // Only versions some Keel wrote and this build reads: never guess at
    // the records below a version 0 (no Keel writes it) or a newer one.
    if !(u64::from(format::OLDEST_VERSION)..=u64::from(format::VERSION)).contains(&version) {
        return Err(SessionError::UnsupportedVersion {
            path: path.display().to_string(),
            found: version,
            oldest: format::OLDEST_VERSION,
            supported: format::VERSION,
        });
    }
    serde_json::from_value(value)
        .map_err(|error| not_a_session(&format!("invalid header: {error}")))
}

/// Adds a record to the pending group; returns the group once complete.
/// A record that does not continue the sequence is damage.
fn accept(
    pending: &mut Option<Pending>,
    scan: &Scan,
    record: (ScannedFrame, usize, u64, u32),
) -> Result<Option<Pending>, String> {
    let frame = &record.0;
    let mut group = match pending.take() {
        None => {
            if frame.index != 0 || frame.group != scan.next_group {
                return Err(format!(
                    "expected the start of group {}, found record {} of group {}",
                    scan.next_group, frame.index, frame.group
                ));
            }
            let continues = scan.last.is_some_and(|last| last.batch == frame.batch);
            if frame.batch != frame.group && !continues {
                return Err(format!(
                    "group {} names write batch {}, which does not end at the group before it",
                    frame.group, frame.batch
                ));
            }
            Pending {
                batch: frame.batch,
                group: frame.group,
                size: frame.size,
                first_line: record.1,
                records: Vec::new(),
            }
        }
        Some(group)
            if frame.group == group.group
                && frame.size == group.size
                && frame.batch == group.batch
                && frame.index as usize == group.records.len() =>
        {
            group
        }
        Some(group) => {
            return Err(format!(
                "record {} of group {} (batch {}) interrupts group {} (batch {}) at record {}",
                frame.index,
                frame.group,
                frame.batch,
                group.group,
                group.batch,
                group.records.len()
            ));
        }
    };
    group.records.push(record);
    if group.records.len() == group.size as usize {
        Ok(Some(group))
    } else {
        *pending = Some(group);
        Ok(None)
    }
}

fn apply(path: &Path, index: &mut Index, group: Pending) -> Result<(), SessionError> {
    for (frame, line, offset, len) in group.records {
        let outcome = match frame.record {
            Skeleton::Entry(entry) => index.push(entry, offset, len),
            Skeleton::Leaf(leaf_id) => index.move_leaf(&leaf_id),
        };
        outcome.map_err(|fault| corrupt(path, line, tree_fault(&fault)))?;
    }
    Ok(())
}

/// How the record that comes next must begin: its frame up to the record
/// type, as `(before the group size, the rest)`; the size is unknown (and
/// `None`) at the start of a group.
fn expected_heads(scan: &Scan, pending: Option<&Pending>) -> Vec<(String, Option<&'static str>)> {
    const AFTER_SIZE: &str = ",\"r\":{\"type\":\"";
    match pending {
        Some(group) => vec![(
            format!(
                "{{\"b\":{},\"g\":{},\"i\":{},\"n\":{}{AFTER_SIZE}",
                group.batch,
                group.group,
                group.records.len(),
                group.size
            ),
            None,
        )],
        None => {
            // A new batch starts at its first group; a batch in progress
            // continues with the batch of the last complete group.
            let mut batches = vec![scan.next_group];
            if let Some(last) = scan.last.filter(|last| last.batch != scan.next_group) {
                batches.push(last.batch);
            }
            batches
                .into_iter()
                .map(|batch| {
                    (
                        format!("{{\"b\":{batch},\"g\":{},\"i\":0,\"n\":", scan.next_group),
                        Some(AFTER_SIZE),
                    )
                })
                .collect()
        }
    }
}

/// Why an incomplete final line cannot be the start of the expected record,
/// or `None` when it can.
fn partial_line_fault(partial: &[u8], heads: &[(String, Option<&'static str>)]) -> Option<String> {
    if !heads
        .iter()
        .any(|(before, after)| matches_head(partial, before.as_bytes(), *after))
    {
        return Some("an incomplete last line that does not begin the record expected next".into());
    }
    if partial.iter().any(|&byte| byte < 0x20) {
        return Some("an incomplete last line holding bytes the writer never writes".into());
    }
    if let Err(error) = std::str::from_utf8(partial)
        && error.error_len().is_some()
    {
        return Some("an incomplete last line that is not UTF-8".into());
    }
    if format::holds_complete_record(partial) {
        return Some("a complete record followed by more bytes on the same line".into());
    }
    None
}

/// Whether `partial` agrees with `before`, a decimal group size, then
/// `after`, as far as it goes (with `after` `None`, `before` is the whole
/// head).
fn matches_head(partial: &[u8], before: &[u8], after: Option<&str>) -> bool {
    let shared = partial.len().min(before.len());
    if partial[..shared] != before[..shared] {
        return false;
    }
    let Some(rest) = partial.get(before.len()..) else {
        return true;
    };
    let Some(after) = after else {
        return true;
    };
    let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
    if digits == 0 {
        return rest.is_empty();
    }
    if rest[0] == b'0' {
        return false;
    }
    let rest = &rest[digits..];
    let shared = rest.len().min(after.len());
    rest[..shared] == after.as_bytes()[..shared]
}

pub(crate) fn tree_fault(fault: &TreeFault) -> String {
    match fault {
        TreeFault::Duplicate(id) => format!("entry id `{id}` is used twice"),
        TreeFault::SecondRoot(id) => {
            format!("entry `{id}` has no parent but the session already has a root")
        }
        TreeFault::MissingParent {
            entry_id,
            parent_id,
        } => {
            format!("entry `{entry_id}` names parent `{parent_id}`, which is not in the session")
        }
        TreeFault::UnknownLeaf(id) => {
            format!("the leaf moves to `{id}`, which is not in the session")
        }
    }
}

pub(crate) fn describe(problem: &LineFault) -> String {
    match problem {
        LineFault::Checksum => "checksum mismatch (the line's bytes changed)".into(),
        LineFault::Malformed(reason) => format!("not a valid record: {reason}"),
    }
}

fn corrupt(path: &Path, line: usize, reason: String) -> SessionError {
    SessionError::Corrupt {
        path: path.display().to_string(),
        line,
        reason,
    }
}

pub(crate) fn io_error(path: &Path, error: std::io::Error) -> SessionError {
    SessionError::Io {
        path: path.to_path_buf(),
        source: error,
    }
}
