//! What the JSONL store does with a damaged file, through its public API and
//! the documented file format (docs/session-format.md).
//!
//! A crash can only leave a prefix of the last write batch after the last
//! complete group. That, and only that, is cut off and reported; every other
//! damage — CRLF line ends, re-serialised records, zeroed ranges, a shortened
//! or cut-off earlier batch, a duplicated or swapped earlier line, a flipped
//! byte — is refused with a typed error naming the first bad line, and the
//! file (and its summary sidecar) stay byte-identical.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use keel_protocol::Entry;
use keel_session::conformance::entry;
use keel_session::{JsonlStore, NewSession, SessionError, SessionStore};
use proptest::prelude::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A session written through the store, one append (one batch) per group.
struct Built {
    id: String,
    /// The whole file.
    full: Vec<u8>,
    /// Its summary sidecar after the last append.
    meta_full: Vec<u8>,
    /// The summary sidecar as it was before the last append.
    meta_before_last: Vec<u8>,
    /// The file length before the last append.
    before_last: u64,
    /// The 1-based line the last append starts at.
    last_first_line: usize,
    /// Entry ids acknowledged before the last append.
    acked_before_last: Vec<String>,
}

fn build(groups: &[usize]) -> Built {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime();
    let (last, rest) = groups.split_last().unwrap();
    let mut made = 0;
    let mut parent: Option<String> = None;
    let mut group_of = |size: usize| {
        (0..size)
            .map(|_| {
                made += 1;
                let id = format!("e{made}");
                let new = entry(&id, parent.as_deref());
                parent = Some(id);
                new
            })
            .collect::<Vec<Entry>>()
    };
    let groups: Vec<Vec<Entry>> = rest.iter().map(|&size| group_of(size)).collect();
    let last_group = group_of(*last);
    let id = runtime.block_on(async {
        // The first store closes before the last append, writing its summary.
        let store = JsonlStore::new(dir.path()).unwrap();
        let id = store.create(NewSession::default()).await.unwrap();
        for group in groups {
            store.append(&id, group).await.unwrap();
        }
        id
    });
    let path = dir.path().join(format!("{id}.jsonl"));
    let meta = dir.path().join(format!("{id}.meta.json"));
    let before_last = std::fs::metadata(&path).unwrap().len();
    let meta_before_last = std::fs::read(&meta).unwrap();
    let acked_before_last = runtime.block_on(async {
        let store = JsonlStore::new(dir.path()).unwrap();
        let ids = ids(&store, &id).await.unwrap();
        store.append(&id, last_group).await.unwrap();
        ids
    });
    let full = std::fs::read(&path).unwrap();
    let last_first_line = full[..before_last as usize]
        .iter()
        .filter(|&&byte| byte == b'\n')
        .count()
        + 1;
    Built {
        meta_full: std::fs::read(&meta).unwrap(),
        id,
        full,
        meta_before_last,
        before_last,
        last_first_line,
        acked_before_last,
    }
}

async fn ids(store: &JsonlStore, id: &str) -> Result<Vec<String>, SessionError> {
    Ok(store
        .entries(id)
        .await?
        .into_iter()
        .map(|entry| entry.id)
        .collect())
}

/// Writes `bytes` (and the sidecar, if any) as session `id` in a fresh directory.
fn place(id: &str, bytes: &[u8], meta: Option<&[u8]>) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{id}.jsonl"));
    let meta_path = dir.path().join(format!("{id}.meta.json"));
    std::fs::write(&path, bytes).unwrap();
    if let Some(meta) = meta {
        std::fs::write(&meta_path, meta).unwrap();
    }
    (dir, path, meta_path)
}

/// The file's lines, each with its `\n`.
fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|&byte| byte == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// One kind of damage: its name, the damaged bytes and, when known, the
/// 1-based line the refusal must name.
type Damage = (String, Vec<u8>, Option<usize>);

/// Every damage other than a torn last batch, placed by `picks`.
fn damages(built: &Built, picks: &[usize]) -> Vec<Damage> {
    let all = lines(&built.full);
    // Lines 2..last_first_line (1-based) are records of earlier batches.
    let earlier: Vec<usize> = (1..built.last_first_line - 1).collect();
    let pick = |n: usize, within: usize| picks[n % picks.len()] % within;
    let mut out: Vec<Damage> = Vec::new();

    let crlf: Vec<u8> = built
        .full
        .iter()
        .flat_map(|&byte| {
            if byte == b'\n' {
                vec![b'\r', b'\n']
            } else {
                vec![byte]
            }
        })
        .collect();
    out.push(("CRLF line ends".into(), crlf, Some(2)));

    let reserialised: Vec<u8> = all
        .iter()
        .flat_map(|line| {
            let value: serde_json::Value = serde_json::from_slice(line).unwrap();
            let mut text = serde_json::to_vec(&value).unwrap();
            text.push(b'\n');
            text
        })
        .collect();
    out.push(("re-serialised records".into(), reserialised, Some(2)));

    // A zeroed range starting inside an earlier batch.
    let header_len = all[0].len();
    let start = header_len + pick(0, built.before_last as usize - header_len);
    let len = 1 + pick(1, built.full.len() - start);
    let mut zeroed = built.full.clone();
    zeroed[start..start + len].fill(0);
    let zero_line = built.full[..start].iter().filter(|&&b| b == b'\n').count() + 1;
    out.push((
        format!("zeroed bytes {start}..{}", start + len),
        zeroed,
        Some(zero_line),
    ));

    // An earlier line shortened (the rest of the file intact).
    let line = earlier[pick(2, earlier.len())];
    let keep = pick(3, all[line].len() - 1);
    let mut shortened = Vec::new();
    for (n, text) in all.iter().enumerate() {
        if n == line {
            shortened.extend_from_slice(&text[..keep]);
            shortened.push(b'\n');
        } else {
            shortened.extend_from_slice(text);
        }
    }
    out.push((
        format!("line {} cut to {keep} bytes", line + 1),
        shortened,
        Some(line + 1),
    ));

    // A duplicated earlier line, next to itself and at the end.
    let line = earlier[pick(4, earlier.len())];
    let mut twice = all.clone();
    twice.insert(line + 1, all[line].clone());
    out.push((
        format!("line {} twice", line + 1),
        twice.concat(),
        Some(line + 2),
    ));
    let mut at_end = all.clone();
    at_end.push(all[line].clone());
    out.push((
        format!("line {} repeated at the end", line + 1),
        at_end.concat(),
        Some(all.len() + 1),
    ));

    // Two lines swapped, the first in an earlier batch.
    let first = earlier[pick(5, earlier.len())];
    let second = first + 1 + pick(6, all.len() - first - 1);
    let mut swapped = all.clone();
    swapped.swap(first, second);
    out.push((
        format!("lines {} and {} swapped", first + 1, second + 1),
        swapped.concat(),
        Some(first + 1),
    ));

    // A byte of the last record flipped: no crash changes written bytes.
    let position =
        built.before_last as usize + pick(7, built.full.len() - built.before_last as usize);
    let mut flipped = built.full.clone();
    flipped[position] ^= 1 << pick(8, 8);
    out.push((format!("byte {position} flipped"), flipped, None));
    out
}

/// Opening for writing refuses `bytes`, naming `line`, and changes nothing.
fn assert_refused(
    built: &Built,
    name: &str,
    bytes: &[u8],
    meta: Option<&[u8]>,
    line: Option<usize>,
) {
    let (dir, path, meta_path) = place(&built.id, bytes, meta);
    let store = JsonlStore::new(dir.path()).unwrap();
    let opened = runtime().block_on(store.open_for_writing(&built.id));
    match (&opened, line) {
        (Err(SessionError::Corrupt { line: found, .. }), Some(line)) => {
            assert_eq!(
                *found, line,
                "{name}: the first bad line is named: {opened:?}"
            );
        }
        (Err(SessionError::Corrupt { .. }), None) => {}
        _ => panic!("{name}: opening for writing must refuse, got {opened:?}"),
    }
    assert!(
        matches!(store.reader(&built.id), Err(SessionError::Corrupt { .. })),
        "{name}: reading refuses too"
    );
    let listed = runtime().block_on(store.list()).unwrap();
    assert!(listed[0].problem.is_some(), "{name}: the listing says so");
    drop(store);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "{name}: the file is untouched"
    );
    if let Some(meta) = meta {
        assert_eq!(
            std::fs::read(&meta_path).unwrap(),
            meta,
            "{name}: the sidecar is untouched"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn only_a_torn_last_batch_is_cut_and_every_other_damage_is_refused_untouched(
        groups in prop::collection::vec(1usize..4, 3..7),
        picks in prop::collection::vec(any::<usize>(), 24),
    ) {
        let built = build(&groups);
        for (name, bytes, line) in damages(&built, &picks) {
            assert_refused(&built, &name, &bytes, Some(&built.meta_full), line);
            assert_refused(&built, &name, &bytes, None, line);
        }
        // Cut inside an earlier batch: only the summary can tell this from a
        // crash, and it says those bytes were acknowledged.
        let header_len = lines(&built.full)[0].len() as u64;
        for cut in [header_len + 1, built.before_last - 1, built.before_last] {
            let name = format!("file cut at byte {cut}, inside an earlier batch");
            assert_refused(&built, &name, &built.full[..cut as usize], Some(&built.meta_full), None);
        }

        // A torn last batch: cuts inside it, with the summary as it was
        // before that batch (what a crash leaves) or no summary at all.
        for cut in torn_cuts(&built, &picks) {
            for meta in [Some(built.meta_before_last.as_slice()), None] {
                let (dir, path, _) = place(&built.id, &built.full[..cut as usize], meta);
                let store = JsonlStore::new(dir.path()).unwrap();
                let runtime = runtime();
                let repair = runtime.block_on(store.open_for_writing(&built.id)).unwrap();
                if cut == built.before_last {
                    prop_assert!(repair.is_none(), "a complete file is not repaired");
                } else {
                    let repair = repair.expect("a torn batch is reported");
                    prop_assert_eq!(&repair.session_id, &built.id);
                    prop_assert_eq!(repair.torn.offset, built.before_last, "cut at {}", cut);
                    prop_assert_eq!(repair.torn.bytes, cut - built.before_last);
                    prop_assert_eq!(repair.torn.line, built.last_first_line);
                }
                prop_assert_eq!(
                    runtime.block_on(ids(&store, &built.id)).unwrap(),
                    built.acked_before_last.clone(),
                    "cut at {}: exactly the torn batch is gone", cut
                );
                prop_assert_eq!(std::fs::metadata(&path).unwrap().len(), built.before_last);
            }
            // The summary written after the last batch says it was
            // acknowledged: then it is not torn but truncated, and refused.
            if cut > built.before_last {
                let name = format!("acknowledged last batch cut at byte {cut}");
                assert_refused(&built, &name, &built.full[..cut as usize], Some(&built.meta_full), None);
            }
        }
    }
}

/// Where to cut the last batch: at and around every line boundary in it
/// (including its start), and at a few places chosen by `picks`.
fn torn_cuts(built: &Built, picks: &[usize]) -> Vec<u64> {
    let start = built.before_last as usize;
    let end = built.full.len();
    let mut cuts: Vec<usize> = vec![start];
    for (at, &byte) in built.full.iter().enumerate().skip(start) {
        if byte == b'\n' {
            cuts.extend([at.saturating_sub(1), at, at + 1, at + 2, at + 9]);
        }
    }
    cuts.extend([start + 1, start + 2, start + 5, start + 20]);
    cuts.extend(picks.iter().map(|pick| start + pick % (end - start)));
    cuts.retain(|&cut| (start..end).contains(&cut));
    cuts.sort_unstable();
    cuts.dedup();
    cuts.into_iter().map(|cut| cut as u64).collect()
}

/// Frames records as the format documents: `b`, `g`, `i`, `n`, the record,
/// then the CRC-32 of the bytes before `,"crc":`.
fn record(batch: u64, group: u64, index: u32, size: u32, entry: &Entry) -> String {
    let body = format!(
        "{{\"b\":{batch},\"g\":{group},\"i\":{index},\"n\":{size},\"r\":{{\"type\":\"entry\",\"entry\":{}}}",
        serde_json::to_string(entry).unwrap()
    );
    format!(
        "{body},\"crc\":\"{:08x}\"}}\n",
        crc32fast::hash(body.as_bytes())
    )
}

fn header(id: &str) -> String {
    format!("{{\"format\":\"keel-session\",\"version\":1,\"id\":\"{id}\",\"created\":1}}\n")
}

#[test]
fn a_batch_of_several_groups_torn_keeps_its_complete_groups() {
    let a = entry("a", None);
    let b = entry("b", Some("a"));
    let c = entry("c", Some("b"));
    let d = entry("d", Some("c"));
    // Batch 1 holds group 1; batch 2 holds groups 2 and 3 (group commit).
    let intact = [
        header("multi"),
        record(1, 1, 0, 1, &a),
        record(2, 2, 0, 1, &b),
        record(2, 3, 0, 2, &c),
        record(2, 3, 1, 2, &d),
    ]
    .concat();
    let group_three = intact.find("{\"b\":2,\"g\":3").unwrap();
    for cut in [group_three + 1, group_three + 40, intact.len() - 1] {
        let (dir, path, _) = place("multi", &intact.as_bytes()[..cut], None);
        let store = JsonlStore::new(dir.path()).unwrap();
        let runtime = runtime();
        let repair = runtime
            .block_on(store.open_for_writing("multi"))
            .unwrap()
            .unwrap();
        assert_eq!(repair.torn.offset, group_three as u64, "cut at {cut}");
        assert_eq!(repair.torn.line, 4);
        assert_eq!(runtime.block_on(ids(&store, "multi")).unwrap(), ["a", "b"]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), group_three as u64);
    }
}

#[test]
fn an_incomplete_last_line_that_cannot_begin_the_next_record_is_damage() {
    let a = entry("a", None);
    let b = entry("b", Some("a"));
    let base = [header("tail"), record(1, 1, 0, 1, &a)].concat();
    let next = record(2, 2, 0, 1, &b);
    let cases = [
        // Another batch number than the next batch or the last one.
        ("a later batch", next.replacen("\"b\":2", "\"b\":7", 1)),
        // A record of a later group.
        ("a later group", next.replacen("\"g\":2", "\"g\":5", 1)),
        // A whole record and then more bytes on the same line.
        ("a record and more", next.replacen('\n', " ", 1)),
        // Bytes the encoder never writes.
        ("a NUL byte", next.replacen("\"type\"", "\"ty\0e\"", 1)),
    ];
    for (name, line) in cases {
        let bytes = format!("{base}{}", line.trim_end_matches('\n'));
        let (dir, path, _) = place("tail", bytes.as_bytes(), None);
        let store = JsonlStore::new(dir.path()).unwrap();
        let opened = runtime().block_on(store.open_for_writing("tail"));
        assert!(
            matches!(opened, Err(SessionError::Corrupt { line: 3, .. })),
            "{name}: {opened:?}"
        );
        drop(store);
        assert_eq!(std::fs::read(&path).unwrap(), bytes.as_bytes(), "{name}");
    }
    // The same record, only short of its newline, is a torn write.
    let bytes = format!("{base}{}", next.trim_end_matches('\n'));
    let (dir, _, _) = place("tail", bytes.as_bytes(), None);
    let store = JsonlStore::new(dir.path()).unwrap();
    let repair = runtime().block_on(store.open_for_writing("tail")).unwrap();
    assert_eq!(repair.unwrap().torn.offset, base.len() as u64);
}

#[test]
fn a_renamed_or_copied_file_is_refused_naming_both_ids() {
    let a = entry("a", None);
    let bytes = [header("original"), record(1, 1, 0, 1, &a)].concat();
    let (dir, path, _) = place("copy", bytes.as_bytes(), None);
    let store = JsonlStore::new(dir.path()).unwrap();
    for error in [
        runtime()
            .block_on(store.open_for_writing("copy"))
            .unwrap_err(),
        store.reader("copy").unwrap_err(),
    ] {
        assert!(
            matches!(&error, SessionError::IdMismatch { file_id, header_id, .. }
                if file_id == "copy" && header_id == "original"),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains("`copy`") && text.contains("`original`"),
            "{text}"
        );
    }
    drop(store);
    assert_eq!(std::fs::read(&path).unwrap(), bytes.as_bytes());
}
