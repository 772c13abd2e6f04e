//! `JsonlStore::salvage` and header versions, through the public API and the
//! documented file format (docs/session-format.md): a damaged session is
//! copied into a new one holding every complete record before the first
//! damage and the later write batches the tree still connects, the damaged
//! file is never changed, and a header version no Keel writes (0) or a newer
//! one is refused and never appended to.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use keel_session::conformance::entry;
use keel_session::{JsonlStore, NewSession, SalvageReport, SessionError, SessionStore};
use serde_json::{Value, json};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const ID: &str = "damaged";

/// A session file written by hand in the documented format, group by group.
struct Writer {
    text: String,
    next_group: u64,
}

impl Writer {
    fn new(version: u64) -> Self {
        Self {
            text: format!(
                "{{\"format\":\"keel-session\",\"version\":{version},\"id\":\"{ID}\",\"created\":1,\"parent_session\":null,\"workspace\":\"/work/space\"}}\n"
            ),
            next_group: 1,
        }
    }

    /// One write batch of `groups`, each a list of records.
    fn batch(mut self, groups: &[&[Value]]) -> Self {
        let batch = self.next_group;
        for records in groups {
            let group = self.next_group;
            for (index, record) in records.iter().enumerate() {
                let body = format!(
                    "{{\"b\":{batch},\"g\":{group},\"i\":{index},\"n\":{},\"r\":{record}",
                    records.len()
                );
                let crc = crc32fast::hash(body.as_bytes());
                self.text
                    .push_str(&format!("{body},\"crc\":\"{crc:08x}\"}}\n"));
            }
            self.next_group += 1;
        }
        self
    }

    /// A batch of one group of one entry.
    fn one(self, id: &str, parent: Option<&str>) -> Self {
        self.batch(&[&[record(id, parent)]])
    }

    /// An arbitrary line (damage).
    fn raw(mut self, line: &str) -> Self {
        self.text.push_str(line);
        self
    }

    fn lines(&self) -> Vec<String> {
        self.text.split_inclusive('\n').map(str::to_owned).collect()
    }
}

fn record(id: &str, parent: Option<&str>) -> Value {
    json!({"type": "entry", "entry": serde_json::to_value(entry(id, parent)).unwrap()})
}

fn leaf(id: &str) -> Value {
    json!({"type": "leaf", "leaf_id": id})
}

/// `bytes` as session `damaged` in a fresh directory.
fn place(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{ID}.jsonl"));
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

/// Every file in `dir` with its bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|item| {
            let item = item.unwrap();
            (
                item.file_name().to_string_lossy().into_owned(),
                std::fs::read(item.path()).unwrap(),
            )
        })
        .collect();
    all.sort();
    all
}

/// Salvages `bytes` and checks what every salvage must hold: the source is
/// refused by a reader before and after, its bytes (and every other file)
/// are unchanged, the new session reads, names the source as its parent,
/// keeps the workspace, holds `kept` in order with leaf `leaf`, and takes
/// appends.
fn salvage(bytes: &[u8], kept: &[&str], leaf: &str) -> SalvageReport {
    let (dir, path) = place(bytes);
    let store = JsonlStore::new(dir.path()).unwrap();
    let before = files(dir.path());
    let report = store.salvage(ID).unwrap();
    let mut after = files(dir.path());
    after.retain(|(name, _)| name != &format!("{}.jsonl", report.session_id));
    assert_eq!(
        after, before,
        "the damaged file (and all else) is untouched"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);

    let reader = store.reader(&report.session_id).unwrap();
    let ids: Vec<&str> = reader.entry_ids().collect();
    assert_eq!(ids, kept, "{report:#?}");
    assert_eq!(reader.leaf(), Some(leaf), "{report:#?}");
    assert_eq!(reader.parent_session(), Some(ID));
    assert_eq!(reader.workspace(), Some("/work/space"));
    assert!(reader.torn().is_none());
    assert_eq!(report.leaf.as_deref(), Some(leaf));
    assert_eq!(report.kept_entries, kept.len());
    assert_eq!(report.source, ID);
    drop(reader);
    runtime().block_on(async {
        store
            .append(&report.session_id, vec![entry("next", Some(leaf))])
            .await
            .unwrap();
        assert_eq!(
            store.leaf(&report.session_id).await.unwrap().as_deref(),
            Some("next")
        );
    });
    report
}

#[test]
fn garbage_mid_file_loses_only_its_line_and_the_later_batches_that_connect_are_kept() {
    let file = Writer::new(2)
        .one("a", None)
        .batch(&[&[record("b", Some("a"))], &[record("c", Some("b"))]])
        .one("d", Some("c"))
        .raw("{\"b\":5,\"g\":5,\"i\":0,\"n\":1,\"r\":garbage\n")
        .one("e", Some("d"))
        .batch(&[&[record("f", Some("e"))], &[record("g", Some("f"))]]);
    let report = salvage(
        file.text.as_bytes(),
        &["a", "b", "c", "d", "e", "f", "g"],
        "g",
    );
    assert_eq!(report.lost.len(), 1, "{report:#?}");
    let span = &report.lost[0];
    assert_eq!((span.line, span.lines, span.damage_line), (6, 1, 6));
    let lines = file.lines();
    let offset: usize = lines[..5].iter().map(String::len).sum();
    assert_eq!(span.offset, offset as u64);
    assert_eq!(span.bytes, lines[5].len() as u64);
    assert!(span.reason.contains("checksum"), "{}", span.reason);
    assert_eq!(
        (
            report.kept_groups,
            report.kept_later_groups,
            report.lost_lines
        ),
        (7, 3, 1)
    );
    assert!(report.leaf_on_active_branch);
}

#[test]
fn a_checksum_mismatch_loses_its_group_and_what_hangs_from_it_and_keeps_what_connects() {
    let file = Writer::new(2)
        .one("a", None)
        .one("b", Some("a"))
        .one("c", Some("b"))
        .one("d", Some("c"))
        .one("e", Some("d"))
        .one("f", Some("b"))
        .one("g", Some("f"))
        .batch(&[&[leaf("e")]]);
    let mut bytes = file.text.clone().into_bytes();
    // Flip a byte inside d's line (line 5).
    let lines = file.lines();
    let at: usize = lines[..4].iter().map(String::len).sum::<usize>() + 30;
    bytes[at] ^= 0x01;
    let report = salvage(&bytes, &["a", "b", "c", "f", "g"], "g");
    let spans: Vec<(usize, usize, usize)> = report
        .lost
        .iter()
        .map(|span| (span.line, span.lines, span.damage_line))
        .collect();
    assert_eq!(spans, [(5, 2, 5), (9, 1, 9)], "{report:#?}");
    assert!(report.lost[0].reason.contains("checksum"));
    assert!(
        report.lost[1].reason.contains("does not connect"),
        "{}",
        report.lost[1].reason
    );
    // e was readable (its parent is d, which was lost); the leaf move to it
    // is lost with it, and d's parent is unknown: the latest kept entry leads.
    assert_eq!(report.lost_entries, 1);
    assert!(!report.leaf_on_active_branch);
    assert_eq!(report.kept_later_groups, 2);
}

#[test]
fn a_bad_group_is_lost_whole_and_a_later_batch_that_connects_is_kept() {
    // Group 2 (b, c, d) lost its middle record; group 3 hangs from a (kept),
    // group 4 from d (lost).
    let file = Writer::new(2)
        .one("a", None)
        .batch(&[&[
            record("b", Some("a")),
            record("c", Some("b")),
            record("d", Some("c")),
        ]])
        .one("e", Some("a"))
        .one("f", Some("d"));
    let mut lines = file.lines();
    lines.remove(3);
    let bytes = lines.concat();
    let report = salvage(bytes.as_bytes(), &["a", "e"], "e");
    let spans: Vec<(usize, usize, usize)> = report
        .lost
        .iter()
        .map(|span| (span.line, span.lines, span.damage_line))
        .collect();
    // Lines 3-4 (b and d: the group broken at line 4), line 6 (f: its
    // parent d was lost).
    assert_eq!(spans, [(3, 2, 4), (6, 1, 6)], "{report:#?}");
    assert!(
        report.lost[0]
            .reason
            .contains("group 2 has 1 of its 3 records"),
        "{}",
        report.lost[0].reason
    );
    assert_eq!(report.lost_entries, 3);
    assert_eq!(report.kept_later_groups, 1);
}

#[test]
fn a_later_batch_must_start_a_batch_follow_the_kept_groups_and_be_intact() {
    // After damage: a group in the middle of a batch (b != g) is no batch
    // start; a copy of an earlier batch repeats kept groups; a batch broken
    // by a bad line keeps only its complete groups.
    let file = Writer::new(2)
        .one("a", None)
        .one("b", Some("a"))
        .raw("zeroed\n")
        .batch(&[&[record("c", Some("b"))], &[record("d", Some("c"))]]);
    let mut lines = file.lines();
    // Drop c's line: d (record 0 of group 5 in batch 4) starts no batch.
    lines.remove(4);
    let copy_of_b = lines[2].clone();
    lines.push(copy_of_b);
    let tail = Writer {
        text: String::new(),
        next_group: 6,
    }
    .batch(&[
        &[record("x", Some("b"))],
        &[record("y", Some("x")), record("z", Some("y"))],
    ]);
    let mut tail_lines = tail.lines();
    tail_lines.pop();
    lines.extend(tail_lines);
    let bytes = lines.concat();
    let report = salvage(bytes.as_bytes(), &["a", "b", "x"], "x");
    let spans: Vec<(usize, usize)> = report
        .lost
        .iter()
        .map(|span| (span.line, span.lines))
        .collect();
    // Line 4 (zeroed), 5 (d), 6 (the copy of b), then y of the torn group.
    assert_eq!(spans, [(4, 3), (8, 1)], "{report:#?}");
    // x's group comes after group 2 and connects; y is readable and its
    // parent x is kept, so the leaf stays on that branch.
    assert!(report.leaf_on_active_branch);
    assert_eq!(report.kept_later_groups, 1);
}

#[test]
fn a_torn_tail_is_lost_and_the_leaf_follows_the_branch_being_written() {
    // Group 4 switched to a branch under b; the torn group 5 was writing
    // under c: the salvaged leaf is c, the last kept entry on that branch.
    let file = Writer::new(2)
        .one("a", None)
        .one("b", Some("a"))
        .one("c", Some("b"))
        .one("d", Some("b"))
        .batch(&[&[record("x", Some("c")), record("y", Some("x"))]]);
    let text = &file.text[..file.text.len() - 20];
    let report = salvage(text.as_bytes(), &["a", "b", "c", "d"], "c");
    assert_eq!(report.lost.len(), 1);
    assert_eq!((report.lost[0].line, report.lost[0].lines), (6, 2));
    assert!(report.leaf_on_active_branch);
    assert_eq!(report.kept_later_groups, 0);
}

#[test]
fn an_intact_session_is_copied_whole() {
    let file = Writer::new(1)
        .one("a", None)
        .one("b", Some("a"))
        .batch(&[&[leaf("a")]]);
    let report = salvage(file.text.as_bytes(), &["a", "b"], "a");
    assert!(!report.lost_anything(), "{report:#?}");
    assert_eq!((report.kept_records, report.kept_groups), (3, 3));
}

/// A session written by the store (each append a batch, with its summary
/// sidecar), then damaged.
fn written(dir: &Path) -> (String, PathBuf) {
    let id = runtime().block_on(async {
        let store = JsonlStore::new(dir).unwrap();
        let id = store.create(NewSession::default()).await.unwrap();
        store.append(&id, vec![entry("a", None)]).await.unwrap();
        store
            .append(&id, vec![entry("b", Some("a")), entry("c", Some("b"))])
            .await
            .unwrap();
        store
            .append(&id, vec![entry("d", Some("c"))])
            .await
            .unwrap();
        id
    });
    let path = dir.join(format!("{id}.jsonl"));
    (id, path)
}

#[test]
fn a_refused_session_names_salvage_and_salvage_keeps_what_the_writer_acknowledged_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (id, path) = written(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let third_line = bytes
        .iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'\n')
        .nth(1)
        .unwrap()
        .0
        + 12;
    bytes[third_line] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();
    let store = JsonlStore::new(dir.path()).unwrap();
    let refused = store.reader(&id).unwrap_err();
    assert!(matches!(refused, SessionError::Corrupt { line: 3, .. }));
    let hint = format!("`keel session salvage {id}`");
    assert!(refused.to_string().contains(&hint), "{refused}");
    let opened = runtime().block_on(store.leaf(&id)).unwrap_err();
    assert!(opened.to_string().contains(&hint), "{opened}");
    let listed = runtime().block_on(store.list()).unwrap();
    assert!(listed[0].problem.as_deref().unwrap().contains(&hint));

    let meta = dir.path().join(format!("{id}.meta.json"));
    let meta_before = std::fs::read(&meta).unwrap();
    let report = store.salvage(&id[..8]).unwrap_err();
    assert!(
        matches!(report, SessionError::SessionNotFound(_)),
        "salvage takes a full id; hosts resolve prefixes: {report}"
    );
    let report = store.salvage(&id).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(std::fs::read(&meta).unwrap(), meta_before);
    let reader = store.reader(&report.session_id).unwrap();
    assert_eq!(reader.entry_ids().collect::<Vec<_>>(), ["a"]);
    // b and c are one group: c is lost with b's line, d hangs from c.
    assert_eq!(report.lost_lines, 3, "{report:#?}");
    assert_eq!(report.lost[0].damage_line, 3);
}

#[test]
fn a_file_cut_inside_an_earlier_batch_reports_the_bytes_its_sidecar_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (id, path) = written(dir.path());
    let full = std::fs::read(&path).unwrap();
    // Cut inside the line of c (line 4): the sidecar knows more was acknowledged.
    let cut_at = full
        .iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'\n')
        .nth(2)
        .unwrap()
        .0
        + 10;
    std::fs::write(&path, &full[..cut_at]).unwrap();
    let store = JsonlStore::new(dir.path()).unwrap();
    assert!(matches!(
        store.reader(&id),
        Err(SessionError::Corrupt { .. })
    ));
    let report = store.salvage(&id).unwrap();
    let missing = report.lost.last().unwrap();
    assert_eq!(missing.lines, 0, "{report:#?}");
    assert_eq!(missing.offset, cut_at as u64);
    assert_eq!(missing.bytes, (full.len() - cut_at) as u64);
    assert!(missing.reason.contains("acknowledged"));
    let reader = store.reader(&report.session_id).unwrap();
    assert_eq!(reader.entry_ids().collect::<Vec<_>>(), ["a"]);
}

#[test]
fn header_versions_no_keel_writes_or_newer_ones_are_refused_and_never_appended_to() {
    for (version, message) in [
        (0, "which no Keel writes"),
        (4, "written by a newer Keel"),
        (u64::MAX, "written by a newer Keel"),
    ] {
        let file = Writer::new(version).one("a", None);
        let (dir, path) = place(file.text.as_bytes());
        let store = JsonlStore::new(dir.path()).unwrap();
        let appended = runtime().block_on(store.append(ID, vec![entry("b", Some("a"))]));
        let error = appended.unwrap_err();
        assert!(
            matches!(
                error,
                SessionError::UnsupportedVersion { found, oldest: 1, supported: 3, .. }
                    if found == version
            ),
            "{version}: {error:?}"
        );
        assert!(error.to_string().contains(message), "{error}");
        assert_eq!(error.code(), "session_version");
        assert!(matches!(
            store.reader(ID),
            Err(SessionError::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            store.salvage(ID),
            Err(SessionError::UnsupportedVersion { .. })
        ));
        let listed = runtime().block_on(store.list()).unwrap();
        assert!(listed[0].problem.as_deref().unwrap().contains(message));
        assert_eq!(
            std::fs::read(&path).unwrap(),
            file.text.as_bytes(),
            "version {version}: byte-identical"
        );
        assert_eq!(files(dir.path()).len(), 1, "nothing else was written");
    }
    // A header without a version, or with one that is not a number, is not a session.
    for header in [
        "{\"format\":\"keel-session\",\"id\":\"damaged\",\"created\":1}\n",
        "{\"format\":\"keel-session\",\"version\":\"2\",\"id\":\"damaged\",\"created\":1}\n",
    ] {
        let (dir, _) = place(header.as_bytes());
        let store = JsonlStore::new(dir.path()).unwrap();
        assert!(
            matches!(store.reader(ID), Err(SessionError::NotASession { .. })),
            "{header}"
        );
    }
}

#[test]
fn salvage_reads_only_regular_files_and_never_follows_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("real.jsonl");
    std::fs::write(&target, Writer::new(2).one("a", None).text).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join(format!("{ID}.jsonl"))).unwrap();
    let fifo = dir.path().join("fifo.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let store = JsonlStore::new(dir.path()).unwrap();
    for id in [ID, "fifo"] {
        let error = store.salvage(id).unwrap_err();
        assert!(
            matches!(error, SessionError::NotASession { .. }),
            "{id}: {error:?}"
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "no session was written"
    );
}

/// A group's entry ids and the byte offset its last line ends at.
type Group = (Vec<String>, usize);

/// A session written by the store, one append (one batch) per group of
/// `sizes`, each entry under the previous one; the file and each group's
/// entry ids with the byte offset its last line ends at.
fn chain(dir: &Path, sizes: &[usize]) -> (String, Vec<u8>, Vec<Group>) {
    let id = runtime().block_on(async {
        let store = JsonlStore::new(dir).unwrap();
        let id = store.create(NewSession::default()).await.unwrap();
        let mut parent: Option<String> = None;
        let mut made = 0;
        for &size in sizes {
            let group = (0..size)
                .map(|_| {
                    made += 1;
                    let new = entry(&format!("e{made}"), parent.as_deref());
                    parent = Some(new.id.clone());
                    new
                })
                .collect();
            store.append(&id, group).await.unwrap();
        }
        id
    });
    let bytes = std::fs::read(dir.join(format!("{id}.jsonl"))).unwrap();
    let header = header_len(&bytes);
    let mut line_ends = bytes[header..]
        .iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'\n')
        .map(|(at, _)| header + at + 1);
    let mut made = 0;
    let groups = sizes
        .iter()
        .map(|&size| {
            let ids = (0..size)
                .map(|_| {
                    made += 1;
                    format!("e{made}")
                })
                .collect();
            (ids, line_ends.nth(size - 1).unwrap())
        })
        .collect();
    (id, bytes, groups)
}

fn header_len(bytes: &[u8]) -> usize {
    bytes.iter().position(|&byte| byte == b'\n').unwrap() + 1
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 12, ..Default::default() })]

    /// Whatever the damage, salvage keeps every entry of each group that
    /// ends before the first changed byte, in order, and the damaged file
    /// stays as it was; garbage inserted between two groups loses only
    /// itself (every later group is its own batch and connects).
    #[test]
    fn salvage_keeps_every_complete_group_before_the_first_changed_byte(
        sizes in proptest::collection::vec(1usize..4, 2..7),
        kind in 0usize..4,
        at in proptest::prelude::any::<usize>(),
        len in 1usize..40,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (id, full, groups) = chain(dir.path(), &sizes);
        let header = header_len(&full);
        let boundaries: Vec<usize> = std::iter::once(header)
            .chain(groups.iter().map(|(_, end)| *end))
            .collect();
        let (damaged, first_change) = match kind {
            // A garbage line between two groups (or at the end).
            0 => {
                let place = boundaries[at % boundaries.len()];
                let mut bytes = full[..place].to_vec();
                bytes.extend_from_slice(b"{\"b\":1,\"g\":1,\"i\":0,\"n\":1,\"r\":nothing}\n");
                bytes.extend_from_slice(&full[place..]);
                (bytes, place)
            }
            // A flipped byte.
            1 => {
                let place = header + at % (full.len() - header);
                let mut bytes = full.clone();
                bytes[place] ^= 1 << (len % 8);
                (bytes, place)
            }
            // A zeroed range.
            2 => {
                let place = header + at % (full.len() - header);
                let end = (place + len).min(full.len());
                let mut bytes = full.clone();
                bytes[place..end].fill(0);
                (bytes, place)
            }
            // A removed line.
            _ => {
                let starts: Vec<usize> = std::iter::once(header)
                    .chain(full[header..].iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| header + i + 1))
                    .filter(|&start| start < full.len())
                    .collect();
                let start = starts[at % starts.len()];
                let end = start + full[start..].iter().position(|&b| b == b'\n').unwrap() + 1;
                let mut bytes = full[..start].to_vec();
                bytes.extend_from_slice(&full[end..]);
                (bytes, start)
            }
        };
        std::fs::write(dir.path().join(format!("{id}.jsonl")), &damaged).unwrap();
        let _ = std::fs::remove_file(dir.path().join(format!("{id}.meta.json")));
        let store = JsonlStore::new(dir.path()).unwrap();
        let report = store.salvage(&id).unwrap();
        proptest::prop_assert_eq!(
            std::fs::read(dir.path().join(format!("{id}.jsonl"))).unwrap(),
            damaged.clone()
        );
        let reader = store.reader(&report.session_id).unwrap();
        let kept: Vec<String> = reader.entry_ids().map(str::to_owned).collect();
        let before: Vec<String> = groups
            .iter()
            .filter(|(_, end)| *end <= first_change)
            .flat_map(|(ids, _)| ids.clone())
            .collect();
        proptest::prop_assert!(kept.starts_with(&before), "{kept:?} {before:?} {report:#?}");
        let all: Vec<String> = groups.iter().flat_map(|(ids, _)| ids.clone()).collect();
        proptest::prop_assert!(kept.iter().all(|id| all.contains(id)));
        if kind == 0 {
            proptest::prop_assert_eq!(&kept, &all, "{:#?}", report);
            proptest::prop_assert_eq!(report.lost_lines, 1);
        }
    }
}
