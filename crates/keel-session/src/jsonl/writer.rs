//! The single writer of one session file, with group commit.
//!
//! Appends are queued to a dedicated thread. The thread takes everything
//! queued, writes it in one `write`, syncs once, then updates the index and
//! acknowledges every append in the batch: concurrent appends share one
//! fsync. The `.meta.json` summary is refreshed only when appends pause.
//! A failed write is cut back off the file — the only bytes the writer ever
//! truncates besides a torn tail the scan proved, and they are its own
//! unacknowledged batch — and poisons the session, so nothing unacknowledged
//! is ever read back as if it were stored.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::format::{self, Record, Slotted};
use super::index::Index;
use super::meta;
use super::scan::LastRecord;

/// The in-memory side of an open session, shared by readers and the writer.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) index: Index,
    /// Ids queued for writing but not yet acknowledged.
    pub(crate) pending: Vec<String>,
    /// Set after a failed write; the session must be reopened.
    pub(crate) poisoned: Option<String>,
}

/// One queued append.
pub(crate) struct Job {
    pub(crate) records: Vec<Record>,
    pub(crate) ack: oneshot::Sender<Result<(), String>>,
}

/// What the writer thread needs.
pub(crate) struct WriterSetup {
    pub(crate) file: File,
    pub(crate) len: u64,
    pub(crate) next_group: u64,
    pub(crate) state: Arc<Mutex<State>>,
    pub(crate) meta_path: PathBuf,
    pub(crate) meta_base: meta::Meta,
}

/// Starts the writer thread; it runs until every sender is dropped.
pub(crate) fn spawn(
    setup: WriterSetup,
    jobs: mpsc::Receiver<Job>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("keel-session-writer".into())
        .spawn(move || run(setup, jobs))
}

/// How long the writer waits for more appends before refreshing the summary.
const SUMMARY_DELAY: Duration = Duration::from_millis(50);

fn run(mut setup: WriterSetup, jobs: mpsc::Receiver<Job>) {
    // The summary is a cache: it is refreshed only once appends pause (or the
    // session closes), so it never sits on an append's latency path.
    let mut stale: Option<meta::Meta> = None;
    loop {
        let first = match &stale {
            None => jobs
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some(_) => jobs.recv_timeout(SUMMARY_DELAY),
        };
        let first = match first {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(summary) = stale.take() {
                    meta::write(&setup.meta_path, &summary);
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut batch = vec![first];
        while let Ok(job) = jobs.try_recv() {
            batch.push(job);
        }
        let outcome = write_batch(&mut setup, &batch);
        if let Err(reason) = &outcome {
            tracing::error!(%reason, "session write failed; the session is poisoned");
        }
        if let Ok(summary) = &outcome {
            stale = Some(summary.clone());
        }
        for job in batch {
            // The appender may have been dropped; the write stands regardless.
            let _ = job.ack.send(outcome.clone().map(|_| ()));
        }
    }
    if let Some(summary) = stale {
        meta::write(&setup.meta_path, &summary);
    }
}

/// Writes the batch's bytes. When the crash test arms the failpoint
/// `between_group_records` and the batch opens with a group of several
/// records, the first record reaches the file alone before the point is hit,
/// so a kill there leaves a torn group for the next open to cut off.
fn write_all(file: &mut File, bytes: &[u8], batch: &[Job]) -> std::io::Result<()> {
    let point = keel_failpoint::BETWEEN_GROUP_RECORDS;
    let torn =
        batch.first().is_some_and(|job| job.records.len() > 1) && keel_failpoint::is_armed(point);
    let first_line = bytes
        .iter()
        .position(|&byte| byte == b'\n')
        .map(|at| at + 1);
    match (torn, first_line) {
        (true, Some(split)) => {
            let (head, rest) = bytes.split_at(split);
            file.write_all(head)?;
            keel_failpoint::hit(point);
            file.write_all(rest)
        }
        _ => file.write_all(bytes),
    }
}

fn write_batch(setup: &mut WriterSetup, batch: &[Job]) -> Result<meta::Meta, String> {
    let first_group = setup.next_group;
    let mut bytes = Vec::new();
    for (offset, job) in batch.iter().enumerate() {
        format::encode_group(
            first_group,
            first_group + offset as u64,
            &job.records,
            &mut bytes,
        )
        .map_err(|error| format!("cannot encode a record: {error}"))?;
    }
    let written = write_all(&mut setup.file, &bytes, batch).and_then(|()| setup.file.sync_data());
    if let Err(error) = written {
        // Cut the partial batch off so the file ends at the last good group.
        let _ = setup
            .file
            .set_len(setup.len)
            .and_then(|()| setup.file.sync_data());
        let reason = format!("write failed: {error}");
        poison(&setup.state, &reason);
        return Err(reason);
    }
    let start = setup.len;
    setup.len += bytes.len() as u64;
    setup.next_group += batch.len() as u64;
    let last_line = bytes
        .get(..bytes.len().saturating_sub(1))
        .and_then(|body| body.iter().rposition(|&byte| byte == b'\n'))
        .map_or(0, |newline| newline + 1);
    let last = LastRecord {
        offset: start + last_line as u64,
        batch: first_group,
        crc: format::line_crc(
            bytes
                .get(last_line..bytes.len().saturating_sub(1))
                .unwrap_or_default(),
        ),
    };
    let modified = setup
        .file
        .metadata()
        .ok()
        .and_then(|metadata| meta::modified_ns(&metadata))
        .unwrap_or_default();
    index_batch(setup, batch, start, &bytes, (last, modified))
}

/// Adds the written records to the index, with the offsets of their lines,
/// and returns the session's refreshed summary.
fn index_batch(
    setup: &WriterSetup,
    batch: &[Job],
    start: u64,
    bytes: &[u8],
    (last, modified): (LastRecord, u128),
) -> Result<meta::Meta, String> {
    let mut state = setup
        .state
        .lock()
        .map_err(|_| "session state lock poisoned".to_owned())?;
    let mut offset = start;
    let mut lines = bytes.split_inclusive(|&byte| byte == b'\n');
    for record in batch.iter().flat_map(|job| &job.records) {
        let line_len = lines.next().map(<[u8]>::len).unwrap_or_default() as u64;
        let outcome = match record {
            Record::Entry { entry } => {
                state.pending.retain(|id| id != &entry.id);
                state.index.push(
                    Slotted::of(entry),
                    offset,
                    line_len.saturating_sub(1) as u32,
                )
            }
            Record::Leaf { leaf_id } => state.index.move_leaf(leaf_id),
        };
        if let Err(fault) = outcome {
            let reason = format!("written record does not fit the tree: {fault:?}");
            state.poisoned = Some(reason.clone());
            return Err(reason);
        }
        offset += line_len;
    }
    Ok(setup
        .meta_base
        .with_index(&state.index, setup.len, Some(last), modified))
}

fn poison(state: &Mutex<State>, reason: &str) {
    if let Ok(mut state) = state.lock() {
        state.poisoned = Some(reason.to_owned());
    }
}
