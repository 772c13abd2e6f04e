//! The session picker of `keel resume` with no session named: a numbered
//! list on stderr, one line of input naming a number (or an id prefix).
//!
//! Reading and writing go through the given handles, so the picker is the
//! same on a terminal and in its tests; only `run_cmd` decides that a
//! terminal is there to ask.

use std::io::{BufRead, Write};

use crate::session_cmd::human_time;
use crate::startup::StartupError;

/// One session the user may pick.
pub struct Choice {
    /// The full session id.
    pub id: String,
    /// Its shortest unique prefix, as shown.
    pub short_id: String,
    /// The session's title (its first prompt), maybe empty.
    pub title: String,
    /// When it was last written (ms since the epoch).
    pub last_activity: u64,
}

/// The longest title shown, in characters.
const TITLE_CHARS: usize = 60;

/// Lists `choices` on `out` and reads the pick from `input`: a number, an
/// id prefix of one listed session, or an empty line for the first; `q`
/// or end of input picks none. A line that names nothing asks again.
pub fn pick(
    choices: &[Choice],
    input: &mut impl BufRead,
    out: &mut impl Write,
) -> Result<Option<String>, StartupError> {
    let written = |error: std::io::Error| StartupError::new("io", error.to_string());
    if choices.is_empty() {
        return Err(StartupError::new(
            "usage",
            "there is no session to resume (keel run starts one)",
        ));
    }
    let width = choices.iter().map(|c| c.short_id.len()).max().unwrap_or(0);
    for (number, choice) in choices.iter().enumerate() {
        let title: String = choice.title.chars().take(TITLE_CHARS).collect();
        let title = crate::escape::visible(&title);
        writeln!(
            out,
            "{:>3}  {:<width$}  {:<12}  {title}",
            number + 1,
            choice.short_id,
            human_time(choice.last_activity)
        )
        .map_err(written)?;
    }
    let mut line = String::new();
    loop {
        write!(
            out,
            "resume which session? [1-{}, Enter = 1, q = none] ",
            choices.len()
        )
        .map_err(written)?;
        out.flush().map_err(written)?;
        line.clear();
        if input.read_line(&mut line).map_err(written)? == 0 {
            return Ok(None);
        }
        let answer = line.trim();
        if answer == "q" {
            return Ok(None);
        }
        if answer.is_empty() {
            return Ok(Some(choices[0].id.clone()));
        }
        if let Ok(number) = answer.parse::<usize>()
            && let Some(choice) = number.checked_sub(1).and_then(|at| choices.get(at))
        {
            return Ok(Some(choice.id.clone()));
        }
        let named: Vec<&Choice> = choices
            .iter()
            .filter(|c| c.id.starts_with(answer))
            .collect();
        if let [only] = named[..] {
            return Ok(Some(only.id.clone()));
        }
        writeln!(out, "not one of the sessions listed").map_err(written)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choices() -> Vec<Choice> {
        ["01a23582-0001-aaaa", "01a23582-0002-bbbb"]
            .iter()
            .map(|id| Choice {
                id: (*id).to_owned(),
                short_id: id[..13].to_owned(),
                title: format!("title of {id}"),
                last_activity: 0,
            })
            .collect()
    }

    fn picked(typed: &str) -> (Option<String>, String) {
        let mut out = Vec::new();
        let picked = pick(&choices(), &mut typed.as_bytes(), &mut out).unwrap();
        (picked, String::from_utf8(out).unwrap())
    }

    #[test]
    fn a_number_a_prefix_or_enter_picks_and_q_or_the_end_picks_none() {
        let (first, listing) = picked("\n");
        assert_eq!(first.as_deref(), Some("01a23582-0001-aaaa"));
        assert!(listing.contains("  1  01a23582-0001  "), "{listing}");
        assert!(listing.contains("title of 01a23582-0002-bbbb"), "{listing}");
        assert_eq!(picked("2\n").0.as_deref(), Some("01a23582-0002-bbbb"));
        assert_eq!(
            picked("01a23582-0002\n").0.as_deref(),
            Some("01a23582-0002-bbbb")
        );
        let (again, listing) = picked("7\n01a2\n1\n");
        assert_eq!(again.as_deref(), Some("01a23582-0001-aaaa"));
        assert_eq!(listing.matches("not one of the sessions listed").count(), 2);
        assert_eq!(picked("q\n").0, None);
        assert_eq!(picked("").0, None);
    }
}
