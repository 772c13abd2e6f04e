//! The bytes of a JSONL session file: the header line and framed records.
//!
//! Line 1 is the header, a plain JSON object naming the format and version.
//! Every later line is one record framed with its group:
//!
//! ```text
//! {"b":7,"g":7,"i":0,"n":2,"r":{"type":"entry",…},"crc":"89abcdef"}
//! {"b":7,"g":7,"i":1,"n":2,"r":{"type":"leaf","leaf_id":"…"},"crc":"01234567"}
//! ```
//!
//! `g` numbers the append group (1, 2, 3, … with no gaps), `i` is the record's
//! index in it and `n` the group's size; a group counts only when all `n`
//! records are present and valid. `b` is the first group of the write batch
//! the record was written in (group commit writes several groups with one
//! fsync): a batch is only ever written after every earlier batch was synced,
//! which is how a scan tells a torn write from damage to acknowledged data. `crc` is the CRC-32 (hex) of the exact
//! bytes of the line before `,"crc":`, so verifying needs no re-serialising.

use keel_protocol::{Entry, TimestampMs};
use serde::{Deserialize, Serialize};

/// The format name in every header.
pub(crate) const FORMAT: &str = "keel-session";
/// The newest format version this build writes and reads.
pub(crate) const VERSION: u32 = 3;
/// The oldest format version any Keel wrote (and this build reads): a
/// header claiming less (version 0) was never written by Keel.
pub(crate) const OLDEST_VERSION: u32 = 1;

/// The first line of a session file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Header {
    pub(crate) format: String,
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) created: TimestampMs,
    #[serde(default)]
    pub(crate) parent_session: Option<String>,
    #[serde(default)]
    pub(crate) workspace: Option<String>,
}

/// One record of a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Record {
    /// A new entry; the leaf moves to it.
    Entry {
        /// The entry.
        entry: Box<Entry>,
    },
    /// The leaf moves to an existing entry (a branch switch).
    Leaf {
        /// The new leaf.
        leaf_id: String,
    },
}

#[derive(Serialize)]
struct FrameOut<'a> {
    b: u64,
    g: u64,
    i: u32,
    n: u32,
    r: &'a Record,
}

#[derive(Deserialize)]
struct FrameIn {
    b: u64,
    g: u64,
    i: u32,
    n: u32,
    r: Record,
}

/// Why a line is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineFault {
    /// The checksum suffix is missing or does not match the bytes.
    Checksum,
    /// The bytes match their checksum but are not a record.
    Malformed(String),
}

/// Encodes a group of records as lines (each ending in `\n`).
pub(crate) fn encode_group(
    batch: u64,
    group: u64,
    records: &[Record],
    out: &mut Vec<u8>,
) -> Result<(), serde_json::Error> {
    let size = records.len() as u32;
    for (index, record) in records.iter().enumerate() {
        let start = out.len();
        serde_json::to_writer(
            &mut *out,
            &FrameOut {
                b: batch,
                g: group,
                i: index as u32,
                n: size,
                r: record,
            },
        )?;
        // Drop the closing brace, checksum the prefix, then close with the crc.
        out.pop();
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(format!(",\"crc\":\"{crc:08x}\"}}\n").as_bytes());
    }
    Ok(())
}

/// The length of `,"crc":"xxxxxxxx"}`.
const SUFFIX: usize = 18;

/// Decodes one line (without its `\n`) completely, returning its record.
pub(crate) fn decode_line(line: &[u8]) -> Result<Record, LineFault> {
    verify_checksum(line)?;
    let frame: FrameIn =
        serde_json::from_slice(line).map_err(|error| LineFault::Malformed(error.to_string()))?;
    check_frame(frame.b, frame.g, frame.i, frame.n)?;
    Ok(frame.r)
}

/// Checks the `crc` suffix against the bytes before it.
fn verify_checksum(line: &[u8]) -> Result<(), LineFault> {
    if line.len() <= SUFFIX {
        return Err(LineFault::Checksum);
    }
    let (prefix, suffix) = line.split_at(line.len() - SUFFIX);
    let hex = suffix
        .strip_prefix(b",\"crc\":\"")
        .and_then(|rest| rest.strip_suffix(b"\"}"))
        .ok_or(LineFault::Checksum)?;
    if !hex
        .iter()
        .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(LineFault::Checksum);
    }
    let expected = std::str::from_utf8(hex)
        .ok()
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or(LineFault::Checksum)?;
    if crc32fast::hash(prefix) == expected {
        Ok(())
    } else {
        Err(LineFault::Checksum)
    }
}

/// The checksum a verified line (without its `\n`) carries.
pub(crate) fn line_crc(line: &[u8]) -> u32 {
    line.len()
        .checked_sub(SUFFIX - 8)
        .and_then(|start| line.get(start..start + 8))
        .and_then(|hex| std::str::from_utf8(hex).ok())
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .unwrap_or_default()
}

/// The checksum of a line (without its `\n`) if its bytes match it.
pub(crate) fn verified_crc(line: &[u8]) -> Option<u32> {
    verify_checksum(line).ok().map(|()| line_crc(line))
}

/// Whether `bytes` begin with a whole record (its checksum verifies) that is
/// followed by more bytes: something the writer never leaves on one line.
pub(crate) fn holds_complete_record(bytes: &[u8]) -> bool {
    const MARK: &[u8] = b",\"crc\":\"";
    (0..bytes.len()).any(|at| {
        bytes[at..].starts_with(MARK)
            && at + SUFFIX < bytes.len()
            && verify_checksum(&bytes[..at + SUFFIX]).is_ok()
    })
}

/// What a scan needs of a record: the tree facts, not the payload.
#[derive(Debug)]
pub(crate) enum Skeleton {
    /// An entry: where it hangs and the little the index keeps.
    Entry(Slotted),
    /// A leaf move.
    Leaf(String),
}

/// The index-relevant facts of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slotted {
    pub(crate) id: String,
    pub(crate) parent_id: Option<String>,
    pub(crate) timestamp: TimestampMs,
    /// For a checkpoint, the first entry kept after its summary.
    pub(crate) first_kept: Option<String>,
    /// For a user message, its text (the session's title candidate).
    pub(crate) user_text: Option<String>,
}

impl Slotted {
    /// The facts of a full entry.
    pub(crate) fn of(entry: &Entry) -> Self {
        use keel_protocol::{EntryPayload, Message};
        Self {
            id: entry.id.clone(),
            parent_id: entry.parent_id.clone(),
            timestamp: entry.timestamp,
            first_kept: match &entry.payload {
                EntryPayload::Checkpoint {
                    first_kept_entry_id,
                    ..
                } => Some(first_kept_entry_id.clone()),
                _ => None,
            },
            user_text: match &entry.payload {
                EntryPayload::Message {
                    message: Message::User(user),
                } => Some(user.plain_text()),
                _ => None,
            },
        }
    }
}

#[derive(Deserialize)]
struct SkeletonFrame<'a> {
    b: u64,
    g: u64,
    i: u32,
    n: u32,
    #[serde(borrow)]
    r: SkeletonRecord<'a>,
}

#[derive(Deserialize)]
struct SkeletonRecord<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    entry: Option<SkeletonEntry<'a>>,
    #[serde(default)]
    leaf_id: Option<String>,
}

#[derive(Deserialize)]
struct SkeletonEntry<'a> {
    id: String,
    parent_id: Option<String>,
    timestamp: TimestampMs,
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default)]
    first_kept_entry_id: Option<String>,
    #[serde(default, borrow)]
    message: Option<&'a serde_json::value::RawValue>,
}

/// The entry kinds this version knows; anything else is not a valid record.
/// Every kind of `EntryPayload` must be here (the test
/// `every_entry_payload_kind_is_known_to_the_scan` compares this list with
/// the entry schema), or a session holding it cannot be opened again.
const KINDS: &[&str] = &[
    "configuration",
    "message",
    "checkpoint",
    "permission_decision",
    "permission_rule",
    "branch_summary",
    "label",
    "run_start",
    "run_end",
    "effect_started",
    "effect_recovered",
    "workspace_snapshot",
    "custom",
];

/// A scanned record: the frame and its skeleton.
#[derive(Debug)]
pub(crate) struct ScannedFrame {
    pub(crate) batch: u64,
    pub(crate) group: u64,
    pub(crate) index: u32,
    pub(crate) size: u32,
    pub(crate) record: Skeleton,
}

/// Decodes one line (without its `\n`) as cheaply as a scan allows: the
/// checksum covers every byte, but only the tree facts are parsed; payloads
/// are skipped (a user message is parsed only while `want_title`).
pub(crate) fn decode_skeleton(line: &[u8], want_title: bool) -> Result<ScannedFrame, LineFault> {
    verify_checksum(line)?;
    let frame: SkeletonFrame<'_> =
        serde_json::from_slice(line).map_err(|error| LineFault::Malformed(error.to_string()))?;
    check_frame(frame.b, frame.g, frame.i, frame.n)?;
    let record = match (frame.r.kind.as_ref(), frame.r.entry, frame.r.leaf_id) {
        ("entry", Some(entry), None) => Skeleton::Entry(slotted(entry, want_title)?),
        ("leaf", None, Some(leaf_id)) => Skeleton::Leaf(leaf_id),
        (kind, _, _) => {
            return Err(LineFault::Malformed(format!(
                "unknown or incomplete record of type `{kind}`"
            )));
        }
    };
    Ok(ScannedFrame {
        batch: frame.b,
        group: frame.g,
        index: frame.i,
        size: frame.n,
        record,
    })
}

fn slotted(entry: SkeletonEntry<'_>, want_title: bool) -> Result<Slotted, LineFault> {
    if !KINDS.contains(&entry.kind.as_ref()) {
        return Err(LineFault::Malformed(format!(
            "unknown entry kind `{}`",
            entry.kind
        )));
    }
    let user_text = match (want_title, entry.kind.as_ref(), entry.message) {
        (true, "message", Some(raw)) => {
            match serde_json::from_str::<keel_protocol::Message>(raw.get()) {
                Ok(keel_protocol::Message::User(user)) => Some(user.plain_text()),
                Ok(_) => None,
                Err(error) => return Err(LineFault::Malformed(error.to_string())),
            }
        }
        _ => None,
    };
    Ok(Slotted {
        id: entry.id,
        parent_id: entry.parent_id,
        timestamp: entry.timestamp,
        first_kept: entry
            .first_kept_entry_id
            .filter(|_| entry.kind == "checkpoint"),
        user_text,
    })
}

fn check_frame(batch: u64, group: u64, index: u32, size: u32) -> Result<(), LineFault> {
    if size == 0 || index >= size {
        return Err(LineFault::Malformed(format!(
            "record {index} of a group of {size}"
        )));
    }
    if batch > group {
        return Err(LineFault::Malformed(format!(
            "group {group} claims a later batch {batch}"
        )));
    }
    Ok(())
}

/// Encodes the header line (ending in `\n`).
pub(crate) fn encode_header(header: &Header) -> Result<Vec<u8>, serde_json::Error> {
    let mut line = serde_json::to_vec(header)?;
    line.push(b'\n');
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_protocol::{EntryPayload, Message, UserMessage};

    /// The `kind` constants of every variant in the entry schema.
    fn schema_kinds(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(kind) = map
                    .get("properties")
                    .and_then(|properties| properties.get("kind"))
                    .and_then(|kind| kind.get("const"))
                    .and_then(serde_json::Value::as_str)
                {
                    out.push(kind.to_owned());
                }
                map.values().for_each(|item| schema_kinds(item, out));
            }
            serde_json::Value::Array(items) => {
                items.iter().for_each(|item| schema_kinds(item, out))
            }
            _ => {}
        }
    }

    #[test]
    fn every_entry_payload_kind_is_known_to_the_scan() {
        let (_, schema) = keel_protocol::schema::all()
            .into_iter()
            .find(|(name, _)| *name == "entry")
            .expect("the entry schema");
        let mut kinds = Vec::new();
        schema_kinds(
            &serde_json::to_value(&schema).expect("a schema is JSON"),
            &mut kinds,
        );
        assert!(kinds.len() >= KINDS.len(), "{kinds:?}");
        for kind in kinds {
            assert!(KINDS.contains(&kind.as_str()), "`{kind}` is not in KINDS");
        }
    }

    fn entry(id: &str) -> Record {
        Record::Entry {
            entry: Box::new(Entry::new(
                id,
                None,
                1,
                EntryPayload::Message {
                    message: Message::User(UserMessage::text("hé \"quoted\"\n")),
                },
            )),
        }
    }

    #[test]
    fn lines_round_trip_and_any_flipped_byte_is_caught() {
        let mut out = Vec::new();
        encode_group(
            3,
            3,
            &[
                entry("a"),
                Record::Leaf {
                    leaf_id: "a".into(),
                },
            ],
            &mut out,
        )
        .unwrap();
        let lines: Vec<&[u8]> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(decode_line(lines[0]).unwrap(), entry("a"));
        let frame = decode_skeleton(lines[1], true).unwrap();
        assert_eq!(
            (frame.batch, frame.group, frame.index, frame.size),
            (3, 3, 1, 2)
        );
        assert!(matches!(frame.record, Skeleton::Leaf(ref id) if id == "a"));
        let Skeleton::Entry(slot) = decode_skeleton(lines[0], true).unwrap().record else {
            panic!("an entry");
        };
        assert_eq!(slot.user_text.as_deref(), Some("hé \"quoted\"\n"));
        for position in 0..lines[0].len() {
            for bit in [0x01u8, 0x20, 0x80] {
                let mut damaged = lines[0].to_vec();
                damaged[position] ^= bit;
                assert!(
                    decode_line(&damaged).is_err(),
                    "flip at {position} went unnoticed"
                );
            }
        }
    }
}
