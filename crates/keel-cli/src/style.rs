//! Colour: whether the view may colour (and redraw) its output, and the
//! few styles it uses.
//!
//! Colour is on with `--color always`, off with `--color never`, and with
//! `auto` on only when the stream is a terminal, `NO_COLOR` is unset or
//! empty (no-color.org) and `TERM` is not `dumb`. Off means no escape code
//! of any kind: no colour, and no cursor movement either.

use std::io::IsTerminal;

use anstyle::{AnsiColor, Style};

use crate::args::ColorArg;

/// Styles, applied only when colour is on.
#[derive(Debug, Clone, Copy)]
pub struct Palette {
    /// Whether escape codes may be written.
    pub color: bool,
}

/// Dim text: thinking, details, totals.
pub const DIM: Style = Style::new().dimmed();
/// Bold text: the closing line.
pub const BOLD: Style = Style::new().bold();
/// Success marks.
pub const GOOD: Style = AnsiColor::Green.on_default();
/// Failure marks and errors.
pub const BAD: Style = AnsiColor::Red.on_default();
/// Warnings and permission requests.
pub const WARN: Style = AnsiColor::Yellow.on_default();
/// Tool names.
pub const TOOL: Style = AnsiColor::Cyan.on_default();
/// Messages from the user (steering, follow-ups).
pub const USER: Style = AnsiColor::Magenta.on_default();

impl Palette {
    /// The palette for stdout (`stderr: false`) or stderr under `choice`.
    pub fn for_stream(choice: ColorArg, stderr: bool) -> Self {
        let terminal = if stderr {
            std::io::stderr().is_terminal()
        } else {
            std::io::stdout().is_terminal()
        };
        Self {
            color: decide(
                choice,
                terminal,
                std::env::var_os("NO_COLOR").as_deref(),
                std::env::var_os("TERM").as_deref(),
            ),
        }
    }

    /// `text` in `style` (plain when colour is off).
    pub fn paint(&self, style: Style, text: &str) -> String {
        if self.color {
            format!("{}{text}{}", style.render(), style.render_reset())
        } else {
            text.to_owned()
        }
    }
}

/// Whether to colour, from the choice, the stream and the environment.
fn decide(
    choice: ColorArg,
    terminal: bool,
    no_color: Option<&std::ffi::OsStr>,
    term: Option<&std::ffi::OsStr>,
) -> bool {
    match choice {
        ColorArg::Always => true,
        ColorArg::Never => false,
        ColorArg::Auto => {
            terminal
                && no_color.is_none_or(|value| value.is_empty())
                && term.is_none_or(|term| term != "dumb")
        }
    }
}

/// The colour choice `--color` made, for code that has no arguments at hand.
static CHOICE: std::sync::OnceLock<ColorArg> = std::sync::OnceLock::new();

/// Records `--color` once, at start-up.
pub fn set_choice(choice: ColorArg) {
    let _ = CHOICE.set(choice);
}

/// The recorded `--color` (auto when none was recorded).
pub fn choice() -> ColorArg {
    CHOICE.get().copied().unwrap_or(ColorArg::Auto)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn no_color_and_dumb_terminals_turn_auto_off() {
        let on = |no_color: Option<&str>, term: Option<&str>| {
            decide(
                ColorArg::Auto,
                true,
                no_color.map(OsStr::new),
                term.map(OsStr::new),
            )
        };
        assert!(on(None, Some("xterm-256color")));
        assert!(on(Some(""), None), "an empty NO_COLOR is unset");
        assert!(!on(Some("1"), Some("xterm")));
        assert!(!on(None, Some("dumb")));
        assert!(!decide(ColorArg::Auto, false, None, None), "not a terminal");
        assert!(decide(ColorArg::Always, false, Some(OsStr::new("1")), None));
        assert!(!decide(ColorArg::Never, true, None, None));
        assert_eq!(Palette { color: false }.paint(BAD, "x"), "x");
        assert!(
            Palette { color: true }
                .paint(BAD, "x")
                .starts_with('\u{1b}')
        );
    }
}
