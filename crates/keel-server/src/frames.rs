//! Lines of a byte stream, each at most a limit long; a longer line is
//! skipped as it streams by, never read into memory whole.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// One line read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A line (without its `\n` or `\r\n`), not empty.
    Line(Vec<u8>),
    /// A line longer than the limit; its bytes were discarded.
    TooLarge,
    /// The stream ended.
    End,
}

/// Reads [`Frame`]s from a buffered reader.
///
/// # Cancel safety
///
/// [`LineReader::next`] is not cancel safe: a partly read line is kept in
/// the reader only until the next call, which starts a new line. Callers
/// drop the reader when they stop waiting for it.
pub(crate) struct LineReader<R> {
    inner: R,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// Lines of `inner`, each at most `max` bytes.
    pub(crate) fn new(inner: R, max: usize) -> Self {
        Self { inner, max }
    }

    /// The next line that is not blank, a too-large marker, or the end.
    pub(crate) async fn next(&mut self) -> std::io::Result<Frame> {
        loop {
            match self.line().await? {
                Frame::Line(line) if line.iter().all(u8::is_ascii_whitespace) => {}
                frame => return Ok(frame),
            }
        }
    }

    async fn line(&mut self) -> std::io::Result<Frame> {
        let mut line = Vec::new();
        let mut over = false;
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                return Ok(match (over, line.is_empty()) {
                    (true, _) => Frame::TooLarge,
                    (false, true) => Frame::End,
                    (false, false) => Frame::Line(trimmed(line)),
                });
            }
            let newline = available.iter().position(|byte| *byte == b'\n');
            let chunk = &available[..newline.unwrap_or(available.len())];
            if !over {
                if line.len() + chunk.len() > self.max {
                    over = true;
                    line = Vec::new();
                } else {
                    line.extend_from_slice(chunk);
                }
            }
            let used = newline.map_or(available.len(), |at| at + 1);
            self.inner.consume(used);
            if newline.is_some() {
                return Ok(if over {
                    Frame::TooLarge
                } else {
                    Frame::Line(trimmed(line))
                });
            }
        }
    }
}

/// Without a trailing `\r`.
fn trimmed(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn all(input: &[u8], max: usize) -> Vec<Frame> {
        // A tiny buffer, so lines cross many reads.
        let reader = tokio::io::BufReader::with_capacity(3, input);
        let mut lines = LineReader::new(reader, max);
        let mut frames = Vec::new();
        loop {
            let frame = lines.next().await.unwrap();
            let end = frame == Frame::End;
            frames.push(frame);
            if end {
                return frames;
            }
        }
    }

    #[tokio::test]
    async fn long_lines_are_skipped_and_reading_goes_on() {
        let frames = all(b"abc\r\n\n0123456789ab\nxyz\n  \nlast", 10).await;
        assert_eq!(
            frames,
            vec![
                Frame::Line(b"abc".to_vec()),
                Frame::TooLarge,
                Frame::Line(b"xyz".to_vec()),
                Frame::Line(b"last".to_vec()),
                Frame::End,
            ]
        );
        assert_eq!(
            all(b"0123456789", 10).await[0],
            Frame::Line(b"0123456789".to_vec())
        );
        assert_eq!(all(b"0123456789A", 10).await[0], Frame::TooLarge);
    }
}
