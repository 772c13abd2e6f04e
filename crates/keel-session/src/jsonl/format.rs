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
pub(crate) const VERSION: u32 = 1;

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
        entry: Entry,
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
    #[allow(dead_code)]
    crc: String,
}

/// A decoded record line.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) batch: u64,
    pub(crate) group: u64,
    pub(crate) index: u32,
    pub(crate) size: u32,
    pub(crate) record: Record,
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

/// Decodes one line (without its `\n`).
pub(crate) fn decode_line(line: &[u8]) -> Result<Frame, LineFault> {
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
    if crc32fast::hash(prefix) != expected {
        return Err(LineFault::Checksum);
    }
    let frame: FrameIn =
        serde_json::from_slice(line).map_err(|error| LineFault::Malformed(error.to_string()))?;
    if frame.n == 0 || frame.i >= frame.n {
        return Err(LineFault::Malformed(format!(
            "record {} of a group of {}",
            frame.i, frame.n
        )));
    }
    if frame.b > frame.g {
        return Err(LineFault::Malformed(format!(
            "group {} claims a later batch {}",
            frame.g, frame.b
        )));
    }
    Ok(Frame {
        batch: frame.b,
        group: frame.g,
        index: frame.i,
        size: frame.n,
        record: frame.r,
    })
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

    fn entry(id: &str) -> Record {
        Record::Entry {
            entry: Entry {
                id: id.into(),
                parent_id: None,
                timestamp: 1,
                payload: EntryPayload::Message {
                    message: Message::User(UserMessage::text("hé \"quoted\"\n")),
                },
            },
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
        let frame = decode_line(lines[0]).unwrap();
        assert_eq!((frame.group, frame.index, frame.size), (3, 0, 2));
        assert_eq!(frame.record, entry("a"));
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
