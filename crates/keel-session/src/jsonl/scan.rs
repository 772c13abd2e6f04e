//! Reads a session file front to back, as a stream, into an [`Index`].
//!
//! Memory is bounded by the longest line and the index, never by the file.
//! A damaged tail — an incomplete line, or bad records followed by nothing
//! but records of the same write batch — is a write torn by a crash: the scan
//! reports where the last complete group ends so a writer can truncate there.
//! Damage followed by a record of a later batch is not a torn write (that
//! batch was written only after the damaged one was synced); it is refused,
//! naming the line.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::format::{self, Header, LineFault, ScannedFrame, Skeleton};
use super::index::{Index, TreeFault};
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
    /// The damaged tail beyond `valid_len`, if any.
    pub(crate) torn: Option<TornTail>,
}

struct Pending {
    group: u64,
    size: u32,
    records: Vec<(ScannedFrame, usize, u64, u32)>,
}

/// Scans the file at `path`.
pub(crate) fn scan(path: &Path) -> Result<Scan, SessionError> {
    let file = File::open(path).map_err(|error| io_error(path, &error))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let header_len = reader
        .read_until(b'\n', &mut line)
        .map_err(|error| io_error(path, &error))?;
    let header = parse_header(path, &line)?;
    let mut scan = Scan {
        header,
        index: Index::default(),
        next_group: 1,
        valid_len: header_len as u64,
        torn: None,
    };
    let mut offset = header_len as u64;
    let mut line_number = 1;
    let mut pending: Option<Pending> = None;
    let mut fault: Option<(usize, String)> = None;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|error| io_error(path, &error))?;
        if read == 0 {
            break;
        }
        line_number += 1;
        let start = offset;
        offset += read as u64;
        let decoded = match line.strip_suffix(b"\n") {
            Some(body) => format::decode_skeleton(body, scan.index.wants_title()),
            None => Err(LineFault::Malformed("incomplete line".into())),
        };
        if let Some((fault_line, reason)) = &fault {
            // A valid record of a batch written after the damaged one proves the
            // damaged batch had been synced: that is corruption, not a torn write.
            if decoded
                .as_ref()
                .is_ok_and(|frame| frame.batch > scan.next_group)
            {
                return Err(corrupt(path, *fault_line, reason.clone()));
            }
            continue;
        }
        let frame = match decoded {
            Ok(frame) => frame,
            Err(problem) => {
                fault = Some((line_number, describe(&problem)));
                continue;
            }
        };
        let body_len = (read - 1) as u32;
        match accept(
            &mut pending,
            scan.next_group,
            frame,
            line_number,
            start,
            body_len,
        ) {
            Ok(Some(group)) => {
                apply(path, &mut scan.index, group)?;
                scan.next_group += 1;
                scan.valid_len = offset;
            }
            Ok(None) => {}
            Err(reason) => fault = Some((line_number, reason)),
        }
    }
    if fault.is_some() || pending.is_some() {
        let (line, reason) = fault.unwrap_or((line_number, "the last group is incomplete".into()));
        scan.torn = Some(TornTail {
            offset: scan.valid_len,
            bytes: offset - scan.valid_len,
            line,
            reason,
        });
    }
    Ok(scan)
}

fn parse_header(path: &Path, line: &[u8]) -> Result<Header, SessionError> {
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
    let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
    if version > u64::from(format::VERSION) {
        return Err(SessionError::UnsupportedVersion {
            path: path.display().to_string(),
            found: version,
            supported: format::VERSION,
        });
    }
    serde_json::from_value(value)
        .map_err(|error| not_a_session(&format!("invalid header: {error}")))
}

/// Adds a frame to the pending group; returns the group once complete.
fn accept(
    pending: &mut Option<Pending>,
    next_group: u64,
    frame: ScannedFrame,
    line: usize,
    offset: u64,
    len: u32,
) -> Result<Option<Pending>, String> {
    let group = match pending.take() {
        None if frame.index == 0 && frame.group == next_group => Pending {
            group: frame.group,
            size: frame.size,
            records: Vec::new(),
        },
        None => {
            return Err(format!(
                "expected the start of group {next_group}, found record {} of group {}",
                frame.index, frame.group
            ));
        }
        Some(group)
            if frame.group == group.group
                && frame.size == group.size
                && frame.index as usize == group.records.len() =>
        {
            group
        }
        Some(group) => {
            return Err(format!(
                "group {} is interrupted by record {} of group {}",
                group.group, frame.index, frame.group
            ));
        }
    };
    let mut group = group;
    group.records.push((frame, line, offset, len));
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

fn describe(problem: &LineFault) -> String {
    match problem {
        LineFault::Checksum => "checksum mismatch (damaged or incomplete record)".into(),
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

pub(crate) fn io_error(path: &Path, error: &std::io::Error) -> SessionError {
    SessionError::Io(format!("{}: {error}", path.display()))
}
