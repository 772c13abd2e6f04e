//! A server-sent events decoder: bytes in, whole events out.
//!
//! It follows the WHATWG `text/event-stream` rules that providers rely on:
//! lines end in `\n`, `\r\n` or `\r`; `event:` names the event, `data:` lines
//! accumulate (joined by `\n`), a blank line dispatches, `:` starts a
//! comment, one space after the colon is dropped, an event without data is
//! not dispatched, and an unfinished event at the end of the stream is
//! discarded. Bytes are buffered until a line is complete, so a UTF-8
//! character split across network chunks is decoded whole; invalid UTF-8 is
//! replaced, never a panic.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SseEvent {
    /// The `event:` field (`message` when absent).
    pub event: String,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// Incremental decoder state.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buffer: Vec<u8>,
    /// Whether the previous chunk ended in `\r` (a following `\n` belongs to it).
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// Feeds bytes; complete events are appended to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut impl Extend<SseEvent>) {
        let mut rest = bytes;
        if self.after_cr && rest.first() == Some(&b'\n') {
            rest = rest.get(1..).unwrap_or_default();
        }
        self.after_cr = false;
        while let Some(end) = find_line_end(rest) {
            let line = rest.get(..end).unwrap_or_default();
            let mut next = end + 1;
            if rest.get(end) == Some(&b'\r') {
                match rest.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if self.buffer.is_empty() {
                self.line(line, out);
            } else {
                // The line began in an earlier chunk; the buffer is reused.
                let mut whole = std::mem::take(&mut self.buffer);
                whole.extend_from_slice(line);
                self.line(&whole, out);
                whole.clear();
                self.buffer = whole;
            }
            rest = rest.get(next..).unwrap_or_default();
        }
        self.buffer.extend_from_slice(rest);
    }

    fn line(&mut self, line: &[u8], out: &mut impl Extend<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.first() == Some(&b':') {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => {
                self.event.clear();
                push_lossy(&mut self.event, value);
            }
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                push_lossy(&mut self.data, value);
                self.has_data = true;
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut impl Extend<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        let data = std::mem::take(&mut self.data);
        if std::mem::take(&mut self.has_data) {
            let event = if event.is_empty() {
                "message".to_owned()
            } else {
                event
            };
            out.extend(std::iter::once(SseEvent { event, data }));
        }
    }
}

/// Appends `bytes` as text, invalid UTF-8 replaced (valid text, the usual
/// case, takes the fast check).
fn push_lossy(target: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => target.push_str(text),
        Err(_) => target.push_str(&String::from_utf8_lossy(bytes)),
    }
}

/// The position of the first `\n` or `\r` in `bytes`, eight bytes at a time.
fn find_line_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const LF: u64 = u64::from_ne_bytes([b'\n'; 8]);
    const CR: u64 = u64::from_ne_bytes([b'\r'; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut offset = 0;
    for word in &mut words {
        let mut array = [0; 8];
        array.copy_from_slice(word);
        let word = u64::from_le_bytes(array);
        // A byte of `lf` (`cr`) is zero where the word holds `\n` (`\r`).
        // The zero-byte test flags every such byte; it may also flag a
        // byte above a true one (a borrow), so only the lowest flag counts.
        let (lf, cr) = (word ^ LF, word ^ CR);
        let found = ((lf.wrapping_sub(ONES) & !lf) | (cr.wrapping_sub(ONES) & !cr)) & HIGHS;
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&byte| byte == b'\n' || byte == b'\r')
        .map(|position| offset + position)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push(chunk, &mut out);
        }
        out
    }

    fn event(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn follows_the_event_stream_rules() {
        let text = b": comment\nevent: ping\ndata: {}\n\ndata:a\ndata: b\n\nevent: lonely\n\ndata: x\r\n\r\ndata: cr\r\rdata: tail";
        assert_eq!(
            decode(&[text]),
            [
                event("ping", "{}"),
                event("message", "a\nb"),
                event("message", "x"),
                event("message", "cr")
            ]
        );
    }

    #[test]
    fn line_ends_are_found_in_every_position() {
        for length in 0..40 {
            for at in 0..length {
                for end in [b'\n', b'\r'] {
                    // `end ^ 1` is where the zero-byte test could misfire.
                    let mut bytes = vec![end ^ 1; length];
                    bytes[at] = end;
                    assert_eq!(find_line_end(&bytes), Some(at), "{bytes:?}");
                }
            }
            assert_eq!(find_line_end(&vec![b'\n' ^ 1; length]), None);
            assert_eq!(find_line_end(&vec![b'\r' ^ 1; length]), None);
        }
    }

    #[test]
    fn any_split_gives_the_same_events() {
        let text = "event: a\ndata: héllo wörld ✓\r\n\r\ndata: [DONE]\n\n".as_bytes();
        let whole = decode(&[text]);
        for cut in 0..text.len() {
            for second in cut..text.len() {
                let parts = [&text[..cut], &text[cut..second], &text[second..]];
                assert_eq!(decode(&parts), whole, "cut at {cut} and {second}");
            }
        }
    }
}
