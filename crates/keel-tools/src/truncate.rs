//! Shared output limits: what a tool may put in front of the model.
//!
//! Every tool result is bounded by [`MAX_LINES`] lines and [`MAX_BYTES`]
//! bytes. `read` keeps the head of a file ([`truncate_head`]) and tells the
//! model how to continue; `bash` keeps the tail of a command's output
//! ([`truncate_tail`]), where errors usually are.
//!
//! Invariants: a line is a run of text ending in `\n` (the last line may lack
//! it), and a kept line keeps its `\n`; the content is never cut inside a
//! UTF-8 character; head truncation keeps whole lines only; tail truncation
//! keeps whole lines, except that when the last line alone is over the byte
//! limit it keeps that line's final bytes.

/// The most lines a tool result shows.
pub const MAX_LINES: usize = 2000;

/// The most bytes a tool result shows (50 KiB).
pub const MAX_BYTES: usize = 50 * 1024;

/// The part of a text that fits the limits, and what was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Truncated {
    /// The kept text.
    pub content: String,
    /// Whether anything was left out.
    pub truncated: bool,
    /// Lines in the whole text.
    pub total_lines: usize,
    /// Bytes in the whole text.
    pub total_bytes: usize,
    /// Lines (whole or, see `last_line_partial`, partial) in `content`.
    pub shown_lines: usize,
    /// Tail only: `content` is the end of a last line too big to keep whole.
    pub last_line_partial: bool,
}

/// Keeps whole lines from the start of `text` within the limits.
///
/// If the first line alone is over `max_bytes`, nothing is kept
/// (`shown_lines == 0` while `total_lines > 0`).
pub fn truncate_head(text: &str, max_lines: usize, max_bytes: usize) -> Truncated {
    let total_lines = count_lines(text);
    let mut end = 0;
    let mut shown_lines = 0;
    for line in text.split_inclusive('\n') {
        if shown_lines == max_lines || end + line.len() > max_bytes {
            break;
        }
        end += line.len();
        shown_lines += 1;
    }
    Truncated {
        content: text[..end].to_owned(),
        truncated: shown_lines < total_lines,
        total_lines,
        total_bytes: text.len(),
        shown_lines,
        last_line_partial: false,
    }
}

/// Keeps whole lines from the end of `text` within the limits.
///
/// If the last line alone is over `max_bytes`, its final bytes are kept,
/// starting at a character boundary.
pub fn truncate_tail(text: &str, max_lines: usize, max_bytes: usize) -> Truncated {
    let total_lines = count_lines(text);
    let mut start = text.len();
    let mut shown_lines = 0;
    for line in text.split_inclusive('\n').rev() {
        if shown_lines == max_lines || text.len() - start + line.len() > max_bytes {
            break;
        }
        start -= line.len();
        shown_lines += 1;
    }
    let last_line_partial = shown_lines == 0 && total_lines > 0 && max_lines > 0;
    if last_line_partial {
        start = ceil_char_boundary(text, text.len().saturating_sub(max_bytes));
        shown_lines = 1;
    }
    Truncated {
        content: text[start..].to_owned(),
        truncated: start > 0,
        total_lines,
        total_bytes: text.len(),
        shown_lines,
        last_line_partial,
    }
}

/// The number of lines in `text` (a final line without `\n` counts).
pub fn count_lines(text: &str) -> usize {
    text.split_inclusive('\n').count()
}

/// The smallest character boundary at or after `index`.
fn ceil_char_boundary(text: &str, mut index: usize) -> usize {
    while index < text.len() && !text.is_char_boundary(index) {
        index += 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        for result in [
            truncate_head("a\nb\n", 10, 100),
            truncate_tail("a\nb\n", 10, 100),
        ] {
            assert_eq!(result.content, "a\nb\n");
            assert!(!result.truncated);
            assert_eq!(
                (result.total_lines, result.total_bytes, result.shown_lines),
                (2, 4, 2)
            );
        }
    }

    #[test]
    fn empty_text_has_no_lines() {
        let result = truncate_head("", 10, 100);
        assert_eq!(
            (result.total_lines, result.shown_lines, result.truncated),
            (0, 0, false)
        );
        let result = truncate_tail("", 10, 100);
        assert_eq!(
            (result.total_lines, result.shown_lines, result.truncated),
            (0, 0, false)
        );
    }

    #[test]
    fn head_keeps_first_lines_by_count() {
        let result = truncate_head("1\n2\n3\n4", 2, 100);
        assert_eq!(result.content, "1\n2\n");
        assert!(result.truncated);
        assert_eq!((result.total_lines, result.shown_lines), (4, 2));
    }

    #[test]
    fn head_keeps_whole_lines_by_bytes() {
        let result = truncate_head("aaaa\nbbbb\ncccc\n", 100, 12);
        assert_eq!(result.content, "aaaa\nbbbb\n");
        assert_eq!(result.shown_lines, 2);
    }

    #[test]
    fn head_keeps_nothing_when_first_line_is_too_big() {
        let result = truncate_head("aaaaaaaaaa\nb\n", 100, 5);
        assert_eq!(result.content, "");
        assert!(result.truncated);
        assert_eq!((result.total_lines, result.shown_lines), (2, 0));
    }

    #[test]
    fn tail_keeps_last_lines() {
        let result = truncate_tail("1\n2\n3\n4\n", 2, 100);
        assert_eq!(result.content, "3\n4\n");
        assert!(result.truncated);
        let result = truncate_tail("aaaa\nbbbb\ncccc", 100, 10);
        assert_eq!(result.content, "bbbb\ncccc");
        assert_eq!(result.shown_lines, 2);
    }

    #[test]
    fn tail_keeps_end_of_oversized_last_line_at_char_boundary() {
        let text = "short\nééééé";
        let result = truncate_tail(text, 100, 5);
        assert!(result.last_line_partial);
        assert!(result.truncated);
        assert_eq!(result.content, "éé");
        assert_eq!(result.shown_lines, 1);
    }

    #[test]
    fn never_splits_a_character() {
        let text = "é\n".repeat(100);
        for max in 0..20 {
            let head = truncate_head(&text, 1000, max);
            let tail = truncate_tail(&text, 1000, max);
            assert!(head.content.len() <= max && tail.content.len() <= max);
        }
    }
}
