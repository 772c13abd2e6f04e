//! Markdown in the model's answers, shown on a colour terminal: one line
//! at a time, as the answer streams in.
//!
//! Headings and `**strong**` text are bold, `` `code` `` and fenced code
//! blocks in the code colour, list bullets become `•`, quotes get a bar and
//! rules a line; everything else is shown as written. Without colour (a
//! pipe, `NO_COLOR`, `--color never`) the view does not call this: the
//! answer is printed exactly as the model wrote it.
//!
//! Invariant: the input is text already made visible (`escape::visible`),
//! and only Keel's own styling is added, so no model text becomes an
//! escape sequence.

use crate::style::{self, Palette};

/// The state carried from one line to the next: inside a code fence or not.
#[derive(Debug, Default)]
pub struct Markdown {
    fenced: bool,
}

impl Markdown {
    /// One complete line of the answer (without its line break), styled.
    pub fn line(&mut self, line: &str, palette: Palette) -> String {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            self.fenced = !self.fenced;
            return palette.paint(style::DIM, line);
        }
        if self.fenced {
            return palette.paint(style::TOOL, line);
        }
        let indent = &line[..line.len() - trimmed.len()];
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            return palette.paint(style::BOLD, trimmed[hashes..].trim());
        }
        if matches!(trimmed, "---" | "***" | "___") {
            return palette.paint(style::DIM, &"─".repeat(40));
        }
        if let Some(quote) = trimmed
            .strip_prefix("> ")
            .or(trimmed.strip_prefix('>').filter(|q| q.is_empty()))
        {
            return format!(
                "{indent}{} {}",
                palette.paint(style::DIM, "│"),
                inline(quote, palette)
            );
        }
        for bullet in ["- ", "* ", "+ "] {
            if let Some(item) = trimmed.strip_prefix(bullet) {
                return format!("{indent}• {}", inline(item, palette));
            }
        }
        format!("{indent}{}", inline(trimmed, palette))
    }
}

/// `**strong**` in bold and `` `code` `` in the code colour; an unclosed
/// mark is shown as written.
fn inline(text: &str, palette: Palette) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        let code = rest.find('`');
        let strong = rest.find("**");
        let (at, mark, style) = match (code, strong) {
            (Some(c), Some(s)) if s < c => (s, "**", style::BOLD),
            (Some(c), _) => (c, "`", style::TOOL),
            (None, Some(s)) => (s, "**", style::BOLD),
            (None, None) => break,
        };
        let after = &rest[at + mark.len()..];
        match after.find(mark).filter(|end| *end > 0) {
            Some(end) => {
                out.push_str(&rest[..at]);
                out.push_str(&palette.paint(style, &after[..end]));
                rest = &after[end + mark.len()..];
            }
            None => {
                out.push_str(&rest[..at + mark.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ON: Palette = Palette { color: true };

    fn plain(text: &str) -> String {
        // The styles' escape codes removed: what a person reads.
        let mut out = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn marks_become_styles_and_code_blocks_are_left_as_written() {
        let mut md = Markdown::default();
        let heading = md.line("## Plan", ON);
        assert_eq!(plain(&heading), "Plan");
        assert!(heading.starts_with("\u{1b}[1m"), "{heading:?}");
        assert_eq!(
            plain(&md.line("- run **the tests** with `cargo test`", ON)),
            "• run the tests with cargo test"
        );
        assert_eq!(plain(&md.line("  * nested", ON)), "  • nested");
        assert_eq!(plain(&md.line("> quoted", ON)), "│ quoted");
        assert_eq!(
            plain(&md.line("a ** lone mark and a ` tick", ON)),
            "a ** lone mark and a ` tick"
        );
        assert_eq!(plain(&md.line("```rust", ON)), "```rust");
        assert_eq!(
            plain(&md.line("# not a heading in code", ON)),
            "# not a heading in code"
        );
        assert_eq!(plain(&md.line("```", ON)), "```");
        assert_eq!(plain(&md.line("# heading again", ON)), "heading again");
    }
}
