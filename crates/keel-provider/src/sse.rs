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
        let mut bytes = bytes;
        if self.after_cr && bytes.first() == Some(&b'\n') {
            bytes = bytes.get(1..).unwrap_or_default();
        }
        self.after_cr = false;
        let mut start = 0;
        let mut position = 0;
        while position < bytes.len() {
            let byte = bytes[position];
            if byte == b'\n' || byte == b'\r' {
                let line_end = position;
                if byte == b'\r' {
                    match bytes.get(position + 1) {
                        Some(b'\n') => position += 1,
                        Some(_) => {}
                        None => self.after_cr = true,
                    }
                }
                if self.buffer.is_empty() {
                    self.line(&bytes[start..line_end], out);
                } else {
                    self.buffer.extend_from_slice(&bytes[start..line_end]);
                    let line = std::mem::take(&mut self.buffer);
                    self.line(&line, out);
                }
                start = position + 1;
            }
            position += 1;
        }
        self.buffer.extend_from_slice(&bytes[start..]);
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
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&String::from_utf8_lossy(value));
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
