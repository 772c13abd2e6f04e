//! Salvage: a new session from the intact records of a damaged one.
//!
//! A scan refuses any damage it cannot prove is a torn tail; salvage is the
//! way forward. It reads the source like every reader (regular file only,
//! no link followed, `O_NONBLOCK`, no lock, never a byte written) and
//! streams it twice, keeping in memory only an index of the kept tree and
//! where each kept line is — never the file:
//!
//! 1. **Plan.** Every complete group up to the first damage is kept, exactly
//!    what a scan would accept. After it, a later *write batch* is looked
//!    for: records whose checksums verify, starting a batch (`b == g`,
//!    record 0) and continuing it group by group (consecutive groups of that
//!    batch, each record in order). Each complete group of such a batch is
//!    kept when its group number comes after every kept group and its
//!    entries' parents (and its leaf moves' targets) are all in what was
//!    kept; an incomplete last group, and everything else, is lost. Every
//!    kept record must also decode fully, so the new session reads back.
//! 2. **Copy.** The kept lines are read again by offset, checked against
//!    the plan (their checksum) and the tree, and re-framed — the record's
//!    JSON bytes unchanged — into groups `1..` of one batch in a hidden
//!    temporary file with a fresh header naming the source as its
//!    `parent_session` (as a fork does) and keeping its workspace. It is
//!    synced and linked into place under a new id (never over an existing
//!    file), and the directory is synced; a failure leaves no session.
//!
//! The new session's leaf is the last kept entry on the branch the source
//! was on (the target of the last readable record, walked up through lost
//! entries whose parents are known), else the latest kept entry; a leaf
//! record is appended when replaying the kept records ends elsewhere.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::format::{self, Header, LineFault, Record, Skeleton, Slotted};
use super::index::{Index, TreeFault};
use super::scan::{self, io_error};
use super::{JsonlStore, meta};
use crate::SessionError;
use keel_protocol::now_ms;

/// What [`JsonlStore::salvage`] kept and lost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SalvageReport {
    /// The damaged session (its file was only read).
    pub source: String,
    /// The damaged session's file.
    pub source_path: String,
    /// The new session holding what was kept.
    pub session_id: String,
    /// Entries kept.
    pub kept_entries: usize,
    /// Records kept (entries and leaf moves).
    pub kept_records: usize,
    /// Groups kept.
    pub kept_groups: usize,
    /// Of the kept groups, those found after the first damage (later write
    /// batches the tree still connects).
    pub kept_later_groups: usize,
    /// Lines of the source not kept (records and unreadable lines).
    pub lost_lines: usize,
    /// Bytes of the source not kept.
    pub lost_bytes: u64,
    /// Entries that were readable but not kept (their group was incomplete,
    /// damaged, or does not connect to what was kept).
    pub lost_entries: usize,
    /// Each run of lost lines, in file order.
    pub lost: Vec<LostSpan>,
    /// The new session's leaf (`None` when nothing was kept).
    pub leaf: Option<String>,
    /// Whether the leaf lies on the branch the source was last on (else it
    /// is the latest kept entry).
    pub leaf_on_active_branch: bool,
}

impl SalvageReport {
    /// Whether anything of the source was lost.
    pub fn lost_anything(&self) -> bool {
        !self.lost.is_empty()
    }
}

/// A run of consecutive lines of the source that salvage did not keep.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostSpan {
    /// The 1-based line the span starts at.
    pub line: usize,
    /// The byte offset it starts at.
    pub offset: u64,
    /// How many lines it covers (0 for bytes missing at the end of a file
    /// its summary sidecar shows was longer).
    pub lines: usize,
    /// How many bytes it covers (for missing bytes: how many are missing).
    pub bytes: u64,
    /// The 1-based line of the damage that lost it.
    pub damage_line: usize,
    /// What is wrong there (never the line's contents).
    pub reason: String,
}

/// Where a kept record's line is, and what its checksum was when planned.
#[derive(Debug, Clone, Copy)]
struct KeptLine {
    offset: u64,
    len: u32,
    crc: u32,
}

/// One readable record of the source.
struct Read {
    line: usize,
    offset: u64,
    /// The line's length with its `\n`.
    bytes: u64,
    batch: u64,
    group: u64,
    index: u32,
    size: u32,
    record: Skeleton,
    crc: u32,
}

/// Records being assembled into groups: the group in progress at the front
/// of the file, or a later batch.
struct Assembly {
    batch: u64,
    /// The group in progress.
    group: u64,
    size: u32,
    records: Vec<Read>,
    /// How many of `records` belong to complete groups.
    complete: usize,
}

impl Assembly {
    fn start(read: Read) -> Self {
        let mut assembly = Self {
            batch: read.batch,
            group: read.group,
            size: read.size,
            records: Vec::new(),
            complete: 0,
        };
        assembly.push(read);
        assembly
    }

    /// Records of the group in progress.
    fn in_group(&self) -> usize {
        self.records.len() - self.complete
    }

    /// Whether `read` is the next record of this group, or (`batch_wide`)
    /// starts the next group of the same batch after a complete one.
    fn continues(&self, read: &Read, batch_wide: bool) -> bool {
        let same_group = read.group == self.group
            && read.size == self.size
            && read.batch == self.batch
            && read.index as usize == self.in_group();
        let next_group = batch_wide
            && self.in_group() == 0
            && read.batch == self.batch
            && read.group == self.group + 1
            && read.index == 0;
        same_group || next_group
    }

    fn push(&mut self, read: Read) {
        if self.in_group() == 0 {
            self.group = read.group;
            self.size = read.size;
        }
        self.records.push(read);
        if self.in_group() == self.size as usize {
            self.complete = self.records.len();
        }
    }
}

/// The plan of pass 1.
#[derive(Default)]
struct Plan {
    index: Index,
    kept: Vec<KeptLine>,
    /// The size of each kept group, in order.
    groups: Vec<u32>,
    /// The highest group number kept.
    last_group: u64,
    /// The write batch of the last group kept before the first damage.
    last_batch: Option<u64>,
    kept_later_groups: usize,
    lost: Vec<LostSpan>,
    lost_entries: usize,
    /// Parents of readable entries that were not kept.
    lost_parents: HashMap<String, Option<String>>,
    /// The target of the last readable record (the source's leaf as far as
    /// it can be told).
    last_target: Option<String>,
    /// Where the lines end (the file's length as read).
    end: u64,
    /// How many lines were read, the header included.
    lines: usize,
}

impl Plan {
    /// Records a lost line in the current span, or opens one.
    fn lose(&mut self, line: usize, offset: u64, bytes: u64, why: &(usize, String)) {
        if let Some(span) = self.lost.last_mut()
            && span.offset + span.bytes == offset
            && span.lines > 0
        {
            span.lines += 1;
            span.bytes += bytes;
            return;
        }
        self.lost.push(LostSpan {
            line,
            offset,
            lines: 1,
            bytes,
            damage_line: why.0,
            reason: why.1.clone(),
        });
    }

    fn lose_read(&mut self, read: Read, why: &(usize, String)) {
        if let Skeleton::Entry(entry) = &read.record {
            self.lost_entries += 1;
            self.lost_parents
                .insert(entry.id.clone(), entry.parent_id.clone());
        }
        self.lose(read.line, read.offset, read.bytes, why);
    }

    /// Keeps a complete group (already checked to fit).
    fn keep(&mut self, group: Vec<Read>, later: bool) {
        let Some(number) = group.first().map(|read| read.group) else {
            return;
        };
        self.groups.push(group.len() as u32);
        self.last_group = number;
        if later {
            self.kept_later_groups += 1;
        }
        for read in group {
            self.kept.push(KeptLine {
                offset: read.offset,
                len: (read.bytes - 1) as u32,
                crc: read.crc,
            });
            let applied = match read.record {
                Skeleton::Entry(entry) => self.index.push(entry, read.offset, 0),
                Skeleton::Leaf(leaf) => self.index.move_leaf(&leaf),
            };
            // `fits` checked the group against the index just before.
            debug_assert!(applied.is_ok(), "a checked group fits the tree");
        }
    }

    /// Keeps the complete groups of `assembly` that connect, loses the rest;
    /// `damage` says why an incomplete last group is lost.
    fn settle(&mut self, assembly: Assembly, later: bool, damage: &(usize, String)) {
        let mut records = assembly.records.into_iter();
        let mut done = 0;
        while done < assembly.complete {
            let Some(first) = records.next() else { break };
            let size = first.size as usize;
            let mut group = vec![first];
            group.extend(records.by_ref().take(size - 1));
            done += group.len();
            match self.fits(&group) {
                Ok(()) => self.keep(group, later),
                Err(why) => {
                    for read in group {
                        self.lose_read(read, &why);
                    }
                }
            }
        }
        let incomplete: Vec<Read> = records.collect();
        if let Some(first) = incomplete.first() {
            let why = (
                damage.0,
                format!(
                    "group {} has {} of its {} records ({})",
                    first.group,
                    incomplete.len(),
                    first.size,
                    damage.1
                ),
            );
            for read in incomplete {
                self.lose_read(read, &why);
            }
        }
    }

    /// Whether a complete group comes after what was kept and its entries'
    /// parents and leaf targets are all kept (or earlier in the group).
    fn fits(&self, group: &[Read]) -> Result<(), (usize, String)> {
        let Some(first) = group.first() else {
            return Ok(());
        };
        if !self.groups.is_empty() && first.group <= self.last_group {
            return Err((
                first.line,
                format!(
                    "group {} repeats or precedes group {}, which was kept",
                    first.group, self.last_group
                ),
            ));
        }
        let mut pending: Vec<&str> = Vec::new();
        for read in group {
            let fault = match &read.record {
                Skeleton::Entry(entry) => {
                    let fault = self
                        .index
                        .check(&entry.id, entry.parent_id.as_deref(), &pending)
                        .err();
                    pending.push(&entry.id);
                    fault
                }
                Skeleton::Leaf(leaf) => (!self.index.contains(leaf)
                    && !pending.contains(&leaf.as_str()))
                .then(|| TreeFault::UnknownLeaf(leaf.clone())),
            };
            if let Some(fault) = fault {
                return Err((
                    read.line,
                    format!(
                        "group {} does not connect to what was kept: {}",
                        read.group,
                        scan::tree_fault(&fault)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The kept entry the new session's leaf should be, and whether it is
    /// on the branch the source was last on.
    fn leaf(&self) -> (Option<String>, bool) {
        let mut cursor = self.last_target.clone();
        // Each step moves to a lost entry's parent: at most one per entry.
        for _ in 0..=self.lost_parents.len() {
            let Some(id) = cursor else { break };
            if self.index.contains(&id) {
                return (Some(id), true);
            }
            cursor = self.lost_parents.get(&id).cloned().flatten();
        }
        let latest = self.index.slots.last().map(|slot| slot.id.clone());
        (latest, false)
    }
}

/// A record line as it is framed, with the record's JSON bytes untouched.
#[derive(Deserialize)]
struct RawFrame<'a> {
    #[serde(borrow)]
    r: &'a RawValue,
}

#[derive(Serialize)]
struct RawFrameOut<'a> {
    b: u64,
    g: u64,
    i: u32,
    n: u32,
    r: &'a RawValue,
}

/// Checks a line fully: its frame and tree facts (as a scan does), and that
/// its record decodes, so the new session reads back.
fn read_line(body: &[u8]) -> Result<format::ScannedFrame, LineFault> {
    let frame = format::decode_skeleton(body, false)?;
    let raw: RawFrame<'_> =
        serde_json::from_slice(body).map_err(|error| LineFault::Malformed(error.to_string()))?;
    serde_json::from_str::<Record>(raw.r.get())
        .map_err(|error| LineFault::Malformed(error.to_string()))?;
    Ok(frame)
}

impl JsonlStore {
    /// Writes a new session holding every complete record of `session_id`
    /// up to its first damage, and the complete later groups its tree still
    /// connects (see the module notes), and reports what was kept and lost.
    /// The source file (and its sidecar) is only read, never locked or
    /// written; a source without damage is copied whole (a torn tail is
    /// reported as lost). A header this build cannot read is refused as
    /// every reader refuses it.
    pub fn salvage(&self, session_id: &str) -> Result<SalvageReport, SessionError> {
        let path = self.file(session_id)?;
        let summary = meta::read(&self.meta_file(session_id));
        let file = scan::open_regular(&path, false)?;
        let reading = file.try_clone().map_err(|error| io_error(&path, error))?;
        let (header, mut plan) = plan(reading, &path, session_id)?;
        // A summary of the same creation that recorded more bytes than the
        // file holds: acknowledged records are missing from its end.
        if let Some(acknowledged) = summary
            .filter(|summary| summary.created == header.created)
            .map(|summary| summary.file_len)
            .filter(|&length| length > plan.end)
        {
            let line = plan.lines + 1;
            plan.lost.push(LostSpan {
                line,
                offset: plan.end,
                lines: 0,
                bytes: acknowledged - plan.end,
                damage_line: line,
                reason: format!(
                    "the file ends at byte {}, but its summary sidecar shows {acknowledged} bytes were acknowledged: records at its end are missing",
                    plan.end
                ),
            });
        }
        let (leaf, leaf_on_active_branch) = plan.leaf();
        let new_id = self.write_salvage(&file, &path, &header, &plan, leaf.as_deref())?;
        let lost_lines = plan.lost.iter().map(|span| span.lines).sum();
        let lost_bytes = plan
            .lost
            .iter()
            .filter(|span| span.lines > 0)
            .map(|span| span.bytes)
            .sum();
        tracing::info!(
            source = session_id,
            session = %new_id,
            kept = plan.kept.len(),
            lost_lines,
            "salvaged a session"
        );
        Ok(SalvageReport {
            source: session_id.to_owned(),
            source_path: path.display().to_string(),
            session_id: new_id,
            kept_entries: plan.index.len(),
            kept_records: plan.kept.len(),
            kept_groups: plan.groups.len(),
            kept_later_groups: plan.kept_later_groups,
            lost_lines,
            lost_bytes,
            lost_entries: plan.lost_entries,
            lost: plan.lost,
            leaf,
            leaf_on_active_branch,
        })
    }

    /// Pass 2: the kept lines, re-read, checked and re-framed into a new
    /// session linked into place only once complete and synced.
    fn write_salvage(
        &self,
        source: &File,
        source_path: &Path,
        header: &Header,
        plan: &Plan,
        leaf: Option<&str>,
    ) -> Result<String, SessionError> {
        let id = uuid::Uuid::now_v7().to_string();
        let path = self.file(&id)?;
        let temporary = self.dir().join(format!(".{id}.jsonl.salvage"));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&temporary)
            .map_err(|error| io_error(&temporary, error))?;
        let new_header = Header {
            format: format::FORMAT.into(),
            version: format::VERSION,
            id: id.clone(),
            created: now_ms(),
            parent_session: Some(header.id.clone()),
            workspace: header.workspace.clone(),
        };
        let written = copy_records(file, source, source_path, &new_header, plan, leaf)
            .and_then(|()| {
                std::fs::hard_link(&temporary, &path).map_err(|error| {
                    if error.kind() == std::io::ErrorKind::AlreadyExists {
                        SessionError::SessionExists(id.clone())
                    } else {
                        io_error(&path, error)
                    }
                })
            })
            .map(|()| {
                // The session is in place; a leftover hidden name is harmless.
                if let Err(error) = std::fs::remove_file(&temporary) {
                    tracing::warn!(%error, path = %temporary.display(), "could not remove a salvage's temporary name");
                }
            })
            .and_then(|()| {
                File::open(self.dir())
                    .and_then(|dir| dir.sync_all())
                    .map_err(|error| io_error(self.dir(), error))
            });
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(error);
        }
        Ok(id)
    }
}

/// Writes the header and every kept group (one batch), then a leaf record
/// if replaying them ends elsewhere than `leaf`, and syncs.
fn copy_records(
    file: File,
    source: &File,
    source_path: &Path,
    header: &Header,
    plan: &Plan,
    leaf: Option<&str>,
) -> Result<(), SessionError> {
    let target = Path::new("salvaged session");
    let mut out = BufWriter::new(file);
    let header_line = format::encode_header(header)
        .map_err(|error| SessionError::Unavailable(error.to_string()))?;
    out.write_all(&header_line)
        .map_err(|error| io_error(target, error))?;
    let mut tree = Index::default();
    let mut lines = plan.kept.iter();
    let mut line = Vec::new();
    let mut encoded = Vec::new();
    let mut group = 0u64;
    for &size in &plan.groups {
        group += 1;
        encoded.clear();
        let mut pending: Vec<String> = Vec::new();
        for index in 0..size {
            let kept = lines.next().ok_or_else(|| changed(source_path, 0))?;
            line.clear();
            line.resize(kept.len as usize, 0);
            source
                .read_exact_at(&mut line, kept.offset)
                .map_err(|error| io_error(source_path, error))?;
            if format::verified_crc(&line) != Some(kept.crc) {
                return Err(changed(source_path, kept.offset));
            }
            let frame = format::decode_skeleton(&line, false)
                .map_err(|_| changed(source_path, kept.offset))?;
            let raw: RawFrame<'_> =
                serde_json::from_slice(&line).map_err(|_| changed(source_path, kept.offset))?;
            let borrowed: Vec<&str> = pending.iter().map(String::as_str).collect();
            let fits = match &frame.record {
                Skeleton::Entry(entry) => tree
                    .check(&entry.id, entry.parent_id.as_deref(), &borrowed)
                    .is_ok(),
                Skeleton::Leaf(target) => {
                    tree.contains(target) || borrowed.contains(&target.as_str())
                }
            };
            if !fits {
                return Err(changed(source_path, kept.offset));
            }
            if let Skeleton::Entry(entry) = &frame.record {
                pending.push(entry.id.clone());
            }
            encode_raw(1, group, index, size, raw.r, &mut encoded)
                .map_err(|error| SessionError::Unavailable(error.to_string()))?;
            match frame.record {
                Skeleton::Entry(entry) => {
                    // Checked against `tree` just above.
                    let _ = tree.push(entry, 0, 0);
                }
                Skeleton::Leaf(target) => {
                    let _ = tree.move_leaf(&target);
                }
            }
        }
        out.write_all(&encoded)
            .map_err(|error| io_error(target, error))?;
    }
    let replayed = tree
        .leaf
        .and_then(|position| tree.slots.get(position))
        .map(|slot| slot.id.as_str());
    if let Some(leaf) = leaf.filter(|&leaf| Some(leaf) != replayed && tree.contains(leaf)) {
        encoded.clear();
        format::encode_group(
            1,
            group + 1,
            &[Record::Leaf {
                leaf_id: leaf.to_owned(),
            }],
            &mut encoded,
        )
        .map_err(|error| SessionError::Unavailable(error.to_string()))?;
        out.write_all(&encoded)
            .map_err(|error| io_error(target, error))?;
    }
    let file = out
        .into_inner()
        .map_err(|error| io_error(target, error.into_error()))?;
    file.sync_all().map_err(|error| io_error(target, error))
}

/// One record line with the record's bytes as they were.
fn encode_raw(
    batch: u64,
    group: u64,
    index: u32,
    size: u32,
    record: &RawValue,
    out: &mut Vec<u8>,
) -> Result<(), serde_json::Error> {
    let start = out.len();
    serde_json::to_writer(
        &mut *out,
        &RawFrameOut {
            b: batch,
            g: group,
            i: index,
            n: size,
            r: record,
        },
    )?;
    // As `format::encode_group` does: drop the closing brace, checksum the
    // prefix, close with the checksum.
    out.pop();
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(format!(",\"crc\":\"{crc:08x}\"}}\n").as_bytes());
    Ok(())
}

fn changed(path: &Path, offset: u64) -> SessionError {
    SessionError::Unavailable(format!(
        "{}: the file changed while it was salvaged (at byte {offset}); nothing was written, try again",
        path.display()
    ))
}

/// Pass 1: streams the source and decides what is kept.
fn plan(file: File, path: &Path, session_id: &str) -> Result<(Header, Plan), SessionError> {
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let header_len = reader
        .read_until(b'\n', &mut line)
        .map_err(|error| io_error(path, error))?;
    let header = scan::parse_header(path, &line)?;
    if header.id != session_id {
        return Err(SessionError::IdMismatch {
            path: path.display().to_string(),
            file_id: session_id.to_owned(),
            header_id: header.id,
        });
    }
    let mut plan = Plan::default();
    let mut offset = header_len as u64;
    let mut number = 1;
    // Before the first damage: the group in progress. After it: a later batch.
    let mut assembly: Option<Assembly> = None;
    let mut damaged = false;
    let mut latest_group = 0;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|error| io_error(path, error))?;
        if read == 0 {
            break;
        }
        number += 1;
        let start = offset;
        offset += read as u64;
        let decoded = match line.strip_suffix(b"\n") {
            None => Err("an incomplete last line (a write torn by a crash, or a cut file)".into()),
            Some(body) => read_line(body)
                .map_err(|fault| scan::describe(&fault))
                .map(|frame| (frame, format::line_crc(body))),
        };
        let read = match decoded {
            Ok((frame, crc)) => {
                // The latest write names the leaf; a stray copy of an
                // earlier record does not.
                if frame.group >= latest_group {
                    latest_group = frame.group;
                    plan.last_target = Some(match &frame.record {
                        Skeleton::Entry(Slotted { id, .. }) | Skeleton::Leaf(id) => id.clone(),
                    });
                }
                Read {
                    line: number,
                    offset: start,
                    bytes: read as u64,
                    batch: frame.batch,
                    group: frame.group,
                    index: frame.index,
                    size: frame.size,
                    record: frame.record,
                    crc,
                }
            }
            Err(reason) => {
                // An unreadable line ends whatever was being assembled.
                let why = (number, reason);
                if let Some(open) = assembly.take() {
                    plan.settle(open, damaged, &why);
                }
                damaged = true;
                plan.lose(number, start, read as u64, &why);
                continue;
            }
        };
        if !damaged {
            match front(&mut plan, &mut assembly, read) {
                Front::Accepted => continue,
                Front::Damage(read, why) => {
                    // The first damage: the group in progress is lost, and
                    // the record that broke the sequence may start a batch.
                    damaged = true;
                    if let Some(open) = assembly.take() {
                        plan.settle(open, false, &why);
                    }
                    match read {
                        Some(read) => later(&mut plan, &mut assembly, read, why),
                        None => continue,
                    }
                }
            }
        } else {
            let why = (
                read.line,
                format!(
                    "record {} of group {} (batch {}) does not continue a write batch",
                    read.index, read.group, read.batch
                ),
            );
            later(&mut plan, &mut assembly, read, why);
        }
    }
    if let Some(open) = assembly.take() {
        let why = (number + 1, "the file ends".to_owned());
        plan.settle(open, damaged, &why);
    }
    plan.end = offset;
    plan.lines = number;
    Ok((header, plan))
}

/// What became of a record before the first damage.
enum Front {
    /// It continues the sequence (and its group, once complete, was kept).
    Accepted,
    /// The first damage, and why: the record comes back when it may still
    /// start a later batch.
    Damage(Option<Read>, (usize, String)),
}

/// A readable record before the first damage, checked as a scan checks it.
/// On damage, returns the record back (when it may still start a later
/// batch) with why the front ends there.
fn front(plan: &mut Plan, assembly: &mut Option<Assembly>, read: Read) -> Front {
    match assembly {
        None => {
            let next_group = plan.last_group + 1;
            let starts_batch = read.batch == read.group;
            let continues = plan.last_batch == Some(read.batch);
            if read.index != 0 || read.group != next_group || !(starts_batch || continues) {
                let why = (
                    read.line,
                    format!(
                        "expected the start of group {next_group}, found record {} of group {} (batch {})",
                        read.index, read.group, read.batch
                    ),
                );
                return Front::Damage(Some(read), why);
            }
            *assembly = Some(Assembly::start(read));
        }
        Some(open) if open.continues(&read, false) => open.push(read),
        Some(open) => {
            let why = (
                read.line,
                format!(
                    "record {} of group {} (batch {}) interrupts group {} at record {}",
                    read.index,
                    read.group,
                    read.batch,
                    open.group,
                    open.in_group()
                ),
            );
            return Front::Damage(Some(read), why);
        }
    }
    if let Some(open) = assembly.take_if(|open| open.complete == open.records.len()) {
        let group = open.records;
        if let Err(why) = plan.fits(&group) {
            for read in group {
                plan.lose_read(read, &why);
            }
            return Front::Damage(None, why);
        }
        plan.last_batch = Some(open.batch);
        plan.keep(group, false);
    }
    Front::Accepted
}

/// A readable record after the first damage: it continues the later batch
/// being assembled, or ends it and perhaps starts another.
fn later(plan: &mut Plan, assembly: &mut Option<Assembly>, read: Read, why: (usize, String)) {
    if let Some(open) = assembly.as_mut()
        && open.continues(&read, true)
    {
        open.push(read);
        return;
    }
    if let Some(open) = assembly.take() {
        let ended = (
            read.line,
            format!(
                "its batch {} ends at line {} before the group is complete",
                open.batch, read.line
            ),
        );
        plan.settle(open, true, &ended);
    }
    if read.index == 0 && read.batch == read.group {
        *assembly = Some(Assembly::start(read));
    } else {
        plan.lose_read(read, &why);
    }
}
