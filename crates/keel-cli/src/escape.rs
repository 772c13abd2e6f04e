//! Making model and tool text safe to print on a terminal.
//!
//! The human view prints text that Keel did not write: the model's words,
//! tool output, paths, reasons. Printed raw, an escape sequence in it would
//! act on the user's terminal — OSC 52 writes the clipboard, SGR 8 hides
//! text, a carriage return or backspaces overwrite what was shown. So every
//! C0 control except newline and tab, DEL, and every C1 control is shown as
//! a visible escape (`\x1b`, `\x7f`, `\u{9b}`) instead; an escape sequence
//! is then plain text. Keel's own styling is added around escaped text.

use std::borrow::Cow;

/// `text` as one line: [`visible`], with newlines shown as `\n` too, so a
/// warning that quotes what a repository or an extension wrote cannot
/// forge a line of its own.
pub fn one_line(text: &str) -> Cow<'_, str> {
    match visible(text) {
        Cow::Borrowed(text) if !text.contains('\n') => Cow::Borrowed(text),
        shown => Cow::Owned(shown.replace('\n', "\\n")),
    }
}

/// `text` with every control character but `\n` and `\t` shown escaped.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden_control) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if !is_hidden_control(c) => shown.push(c),
            '\u{80}'..='\u{9f}'
            | '\u{200e}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}' => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => shown.push_str(&format!("\\x{:02x}", u32::from(c))),
        }
    }
    Cow::Owned(shown)
}

/// A control character the terminal would act on, or a bidirectional
/// formatting character that would reorder what is shown (a command that
/// reads differently from what runs).
fn is_hidden_control(c: char) -> bool {
    (c != '\n' && c != '\t' && c.is_control())
        || matches!(c, '\u{200e}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::visible;

    #[test]
    fn one_line_escapes_newlines_too() {
        assert_eq!(
            super::one_line("a\nkeel: fake\x1b]0;t\x07"),
            "a\\nkeel: fake\\x1b]0;t\\x07"
        );
        assert_eq!(super::one_line("plain"), "plain");
    }

    #[test]
    fn controls_are_escaped_and_text_kept() {
        assert_eq!(visible("plain\ttext\nnext"), "plain\ttext\nnext");
        assert_eq!(
            visible("\x1b]52;c;SGVsbG8=\x07 and \x1b[8mhidden\x1b[0m"),
            "\\x1b]52;c;SGVsbG8=\\x07 and \\x1b[8mhidden\\x1b[0m"
        );
        assert_eq!(
            visible("a\rb\x08\x7f\u{9b}31m é"),
            "a\\x0db\\x08\\x7f\\u{9b}31m é"
        );
        assert_eq!(
            visible("rm -rf /tmp/x \u{202e}txt.exe\u{2066}"),
            "rm -rf /tmp/x \\u{202e}txt.exe\\u{2066}"
        );
    }
}
