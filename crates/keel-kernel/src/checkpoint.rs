//! The rules of compaction, as pure functions over entries: the budgets a
//! context window allows, where to cut, the evidence a covered span holds,
//! the fixed summary prompt, and the checks a summary goes through (its
//! headings, which a corrective request asks for once, and whether it
//! merely repeats the instructions).
//!
//! `compaction.rs` drives these against a provider and the session; keeping
//! them here, without I/O, lets them be tested exhaustively.
//!
//! Invariants of a [`Plan`]:
//! - it covers a prefix of the context branch (the active branch from the
//!   previous checkpoint's first kept entry), holding at least one message,
//!   so coverage strictly grows;
//! - the first kept entry is a user or assistant message — never a tool
//!   result and never between an assistant message and its results (its
//!   permission decisions included) — so a tool call and its result are
//!   always on the same side of the cut; when no such cut keeps the tail
//!   within budget, nothing is kept;
//! - a later compaction summarises the previous summary plus the new span
//!   only, never the previous summary's own covered entries.

use std::collections::HashMap;

use keel_protocol::{
    CheckpointEvidence, CommandEvidence, ContentBlock, EntryPayload, Message, ToolCall,
    ToolErrorEvidence, ToolResultMessage, ToolStatus, UserContent,
};

use crate::context::BranchEntry;

/// When and how much to compact. The defaults are Pi's for large windows;
/// [`CompactionSettings::budget`] scales them down for small ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionSettings {
    /// Compact automatically near the window (overflow and manual
    /// compaction work either way).
    pub enabled: bool,
    /// Tokens kept free below the window for the response (default 16,384).
    pub reserve_tokens: u64,
    /// Tokens of the most recent messages kept verbatim (default 20,000).
    pub keep_recent_tokens: u64,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            reserve_tokens: 16_384,
            keep_recent_tokens: 20_000,
        }
    }
}

/// What a context window allows, from [`CompactionSettings::budget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Compact before a request estimated above this.
    pub(crate) threshold: u64,
    /// Tokens of recent messages to keep.
    pub(crate) keep_recent: u64,
    /// The summary's output limit.
    pub(crate) summary_output: u64,
    /// Tokens of conversation one summary request may carry.
    pub(crate) summary_input: u64,
}

/// Tokens the summary prompt's fixed text and framing take (the system
/// prompt is about 250 o200k tokens).
const SUMMARY_OVERHEAD: u64 = 512;

impl CompactionSettings {
    /// The budget for a `window`: the reserve and the kept tail are each at
    /// most a quarter of the window, so an 8k or 16k local model keeps
    /// room for a summary and a response.
    pub(crate) fn budget(&self, window: u64, max_output: Option<u32>) -> Budget {
        let reserve = self.reserve_tokens.min(window / 4);
        let keep_recent = self.keep_recent_tokens.min(window / 4);
        let mut summary_output = (reserve * 4 / 5).max(256);
        if let Some(limit) = max_output {
            summary_output = summary_output.min(u64::from(limit));
        }
        let summary_input = window
            .saturating_sub(summary_output + SUMMARY_OVERHEAD)
            .max(window / 4);
        Budget {
            threshold: window - reserve,
            keep_recent,
            summary_output,
            summary_input,
        }
    }
}

/// A compaction to make: what to cover and what to keep.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    /// The covered entries: a prefix of the context branch, shared with it.
    pub(crate) covered: Vec<BranchEntry>,
    /// The first kept entry (`None`: nothing is kept).
    pub(crate) first_kept: Option<String>,
    /// Entries kept after the summary.
    pub(crate) kept: usize,
    /// The checkpoint this one supersedes: its id and summary.
    pub(crate) previous: Option<(String, String)>,
}

/// Where to cut `branch` (a context branch) so that the kept messages hold
/// at most `keep_recent` tokens (`tokens` estimates an entry). `None` when
/// nothing can be covered (no message before the leaf).
pub(crate) fn plan(
    branch: &[BranchEntry],
    keep_recent: u64,
    mut tokens: impl FnMut(&BranchEntry) -> u64,
) -> Option<Plan> {
    let previous = branch.iter().rev().find_map(|entry| match entry.payload() {
        Some(EntryPayload::Checkpoint { summary, .. }) => Some((entry.id.clone(), summary.clone())),
        _ => None,
    });
    let is_message = |entry: &BranchEntry| entry.message().is_some();
    let first_message = branch.iter().position(is_message)?;
    // Walk back from the leaf: the earliest turn start whose tail fits.
    let mut tail = 0u64;
    let mut cut = branch.len();
    for position in (first_message + 1..branch.len()).rev() {
        let entry = &branch[position];
        if is_message(entry) {
            tail = tail.saturating_add(tokens(entry));
        }
        if tail > keep_recent {
            break;
        }
        if starts_turn(entry) {
            cut = position;
        }
    }
    let first_kept = branch.get(cut).map(|entry| entry.id.clone());
    Some(Plan {
        covered: branch[..cut].to_vec(),
        kept: branch.len() - cut,
        first_kept,
        previous,
    })
}

/// Whether a cut may fall before `entry`: a user or assistant message.
fn starts_turn(entry: &BranchEntry) -> bool {
    matches!(
        entry.message(),
        Some(Message::User(_) | Message::Assistant(_))
    )
}

/// The tool calls of `entries` with their results, in call order.
fn calls(entries: &[BranchEntry]) -> Vec<(&ToolCall, Option<&ToolResultMessage>)> {
    let results: HashMap<&str, &ToolResultMessage> = entries
        .iter()
        .filter_map(|entry| match entry.message() {
            Some(Message::ToolResult(result)) => Some((result.call_id.as_str(), result)),
            _ => None,
        })
        .collect();
    entries
        .iter()
        .filter_map(|entry| match entry.message() {
            Some(Message::Assistant(message)) => Some(message.tool_calls()),
            _ => None,
        })
        .flatten()
        .map(|call| (call, results.get(call.id.as_str()).copied()))
        .collect()
}

/// What the covered entries did, gathered from the entries themselves.
pub(crate) fn evidence(covered: &[BranchEntry]) -> CheckpointEvidence {
    let mut evidence = CheckpointEvidence::default();
    let path = |call: &ToolCall| call.arguments.get("path")?.as_str().map(str::to_owned);
    for (call, result) in calls(covered) {
        let status = result.map_or(ToolStatus::Cancelled, |result| result.status);
        if let Some(result) = result
            && result.status == ToolStatus::Error
        {
            evidence.tool_errors.push(ToolErrorEvidence::new(
                call.id.clone(),
                call.name.clone(),
                result
                    .error
                    .as_ref()
                    .map_or(keel_protocol::ToolErrorCode::ToolError, |error| error.code),
            ));
        }
        match call.name.as_str() {
            "read" if status == ToolStatus::Success => {
                push_once(&mut evidence.files_read, path(call));
            }
            "write" | "edit" if status == ToolStatus::Success => {
                push_once(&mut evidence.files_modified, path(call));
            }
            "bash" => evidence.commands.push(CommandEvidence::new(
                call.id.clone(),
                call.arguments
                    .get("command")
                    .and_then(|command| command.as_str())
                    .unwrap_or_default()
                    .to_owned(),
                status,
                result.and_then(|result| result.details.as_ref()?.get("exit_code")?.as_i64()),
            )),
            _ => {}
        }
    }
    evidence
}

fn push_once(list: &mut Vec<String>, item: Option<String>) {
    if let Some(item) = item
        && !list.contains(&item)
    {
        list.push(item);
    }
}

/// The longest tool result, and the longest other item, a summary request
/// shows; oversized tool results are cut first.
const MAX_RESULT_CHARS: usize = 2_000;
const MAX_ITEM_CHARS: usize = 4_000;

/// The covered messages as the text items a summary request shows, oldest
/// first. Checkpoints and other non-message entries are left out (the
/// previous summary is passed on its own).
pub(crate) fn transcript(covered: &[BranchEntry]) -> Vec<String> {
    let mut items = Vec::new();
    for entry in covered {
        let Some(message) = entry.stored() else {
            continue;
        };
        match message.as_ref() {
            Message::User(user) => items.push(format!(
                "[User]: {}",
                cut(&user.plain_text(), MAX_ITEM_CHARS)
            )),
            Message::Assistant(assistant) => {
                for block in &assistant.content {
                    items.push(match block {
                        ContentBlock::Text { text } => {
                            format!("[Assistant]: {}", cut(text, MAX_ITEM_CHARS))
                        }
                        ContentBlock::Thinking { thinking, .. } => {
                            format!("[Assistant thinking]: {}", cut(thinking, MAX_RESULT_CHARS))
                        }
                        ContentBlock::ToolCall(call) => format!(
                            "[Assistant calls {} ({})]: {}",
                            call.name,
                            call.id,
                            cut(&call.arguments.to_string(), MAX_RESULT_CHARS)
                        ),
                    });
                }
            }
            Message::ToolResult(result) => {
                let text: String = result
                    .content
                    .iter()
                    .map(|block| match block {
                        UserContent::Text { text } => text.as_str(),
                        UserContent::Image(_) => "[image]",
                    })
                    .collect();
                items.push(format!(
                    "[Result of {} ({}), {}]: {}",
                    result.tool_name,
                    result.call_id,
                    status_word(result.status),
                    cut(&text, MAX_RESULT_CHARS)
                ));
            }
        }
    }
    items
}

fn status_word(status: ToolStatus) -> &'static str {
    match status {
        ToolStatus::Success => "success",
        ToolStatus::Error => "error",
        ToolStatus::Cancelled => "cancelled",
    }
}

/// `text` cut to `max` characters with a note of what was left out.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!(
            "{}… [{} more characters not shown]",
            &text[..at],
            text[at..].chars().count()
        ),
        None => text.to_owned(),
    }
}

/// The summary's headings, in order.
pub(crate) const HEADINGS: [&str; 8] = [
    "Goal",
    "Constraints and preferences",
    "Done and verified",
    "In progress",
    "Blocked",
    "Key decisions",
    "Exact files, symbols, commands and errors",
    "Next steps",
];

/// The fixed system prompt of every summary request.
pub(crate) const SUMMARY_SYSTEM_PROMPT: &str =
    "You write checkpoint summaries of a coding agent's \
conversation. The agent will continue the task from your summary alone: the conversation you \
summarise is removed from its context. Do not continue the conversation, do not answer \
questions asked in it, and do not call tools. Write only the summary, in Markdown, under \
exactly these eight headings, in this order, each as a `## ` line:

## Goal
## Constraints and preferences
## Done and verified
## In progress
## Blocked
## Key decisions
## Exact files, symbols, commands and errors
## Next steps

Under each heading write short bullet points (or `- none`). Be exact: keep file paths, function \
and type names, commands, error messages and numbers verbatim, because the agent will act on \
them. Count as done and verified only what a tool result in the conversation showed. When a \
previous summary is given, produce one updated summary that keeps what still holds from it and \
adds the new conversation.";

/// The last sentence of a summary request's user message: without, and
/// with, a previous summary.
const WRITE_NOW: &str = "Write the summary of the conversation above now.";
const UPDATE_NOW: &str =
    "Update the previous summary with the conversation above. Write the summary now.";

/// The user message of a summary request.
pub(crate) fn summary_input(
    previous: Option<&str>,
    items: &[String],
    evidence: &CheckpointEvidence,
    instructions: Option<&str>,
) -> String {
    let mut text = String::new();
    if let Some(previous) = previous {
        text.push_str("<previous-summary>\n");
        text.push_str(previous.trim());
        text.push_str("\n</previous-summary>\n\n");
    }
    text.push_str("<conversation>\n");
    text.push_str(&items.join("\n\n"));
    text.push_str("\n</conversation>\n");
    if !evidence.is_empty() {
        text.push_str("\n<evidence>\n");
        text.push_str(&render_evidence(evidence));
        text.push_str("</evidence>\n");
    }
    text.push('\n');
    text.push_str(if previous.is_some() {
        UPDATE_NOW
    } else {
        WRITE_NOW
    });
    if let Some(instructions) = instructions.map(str::trim).filter(|text| !text.is_empty()) {
        text.push_str("\n\nAdditional focus: ");
        text.push_str(instructions);
    }
    text
}

/// The evidence as lines a summary request shows.
fn render_evidence(evidence: &CheckpointEvidence) -> String {
    let mut text = String::new();
    if !evidence.files_read.is_empty() {
        text.push_str(&format!("Files read: {}\n", evidence.files_read.join(", ")));
    }
    if !evidence.files_modified.is_empty() {
        text.push_str(&format!(
            "Files modified: {}\n",
            evidence.files_modified.join(", ")
        ));
    }
    for command in &evidence.commands {
        let outcome = match command.exit_code {
            Some(code) => format!("exit {code}"),
            None => status_word(command.status).to_owned(),
        };
        text.push_str(&format!(
            "Command: {} ({outcome})\n",
            cut(&command.command, 300)
        ));
    }
    for error in &evidence.tool_errors {
        text.push_str(&format!(
            "Tool error: {} {} ({})\n",
            error.tool_name,
            error.call_id,
            error.code.as_str()
        ));
    }
    text
}

/// Whether `text` has Keel's eight headings in order (`Err`: what is
/// wrong, for the corrective request). The headings guide a summary; they
/// do not gate it: a non-empty summary without them is kept as free text
/// after one corrective request.
pub(crate) fn check_headings(text: &str) -> Result<(), String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the summary is empty".into());
    }
    let headings: Vec<String> = text
        .lines()
        .filter(|line| line.trim_start().starts_with('#'))
        .map(normalize)
        .collect();
    let mut found = headings.iter();
    for wanted in HEADINGS {
        let normalized = normalize(wanted);
        if !found.any(|heading| heading.starts_with(&normalized)) {
            return Err(format!(
                "the summary lacks the heading `{wanted}` (or has it out of order)"
            ));
        }
    }
    Ok(())
}

/// The sentences that open a corrective summary request's note and ask
/// for the summary again; the note names what was wrong in between.
const CORRECTION_LEAD: &str = "Your previous answer could not be used as the summary:";
const CORRECTION_ASK: &str = "Write the summary again: only the summary of the conversation \
above, under the eight `## ` headings of the instructions, in their order.";

/// What a corrective summary request adds to the first request's input:
/// `reason`, the validation error of the first answer.
pub(crate) fn correction(reason: &str) -> String {
    format!("\n\n{CORRECTION_LEAD} {reason}. {CORRECTION_ASK}")
}

/// Words per shingle when a summary is compared with the instructions.
const SHINGLE_WORDS: usize = 4;
/// A summary is an echo when at least this share of its shingles (its
/// Keel headings left out) appears in Keel's summary instructions.
const ECHO_SHARE: f64 = 0.5;

/// Keel's own text in every summary request: the system prompt, the fixed
/// sentences of the user message and the correction note.
fn instruction_text() -> String {
    [
        SUMMARY_SYSTEM_PROMPT,
        WRITE_NOW,
        UPDATE_NOW,
        CORRECTION_LEAD,
        CORRECTION_ASK,
    ]
    .join("\n")
}

/// The lower-case words of `text`.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// How many of the shingles of `summary` (its Keel heading lines left
/// out) appear in Keel's summary instructions, and how many it has.
pub(crate) fn echoed_shingles(summary: &str) -> (usize, usize) {
    let keel_heading = |line: &&str| {
        line.trim_start().starts_with('#')
            && HEADINGS
                .iter()
                .any(|heading| normalize(line).starts_with(&normalize(heading)))
    };
    let own: Vec<&str> = summary.lines().filter(|line| !keel_heading(line)).collect();
    let summary_words = words(&own.join("\n"));
    let instruction_words = words(&instruction_text());
    let known: std::collections::HashSet<&[String]> =
        instruction_words.windows(SHINGLE_WORDS).collect();
    let shingles: Vec<&[String]> = summary_words.windows(SHINGLE_WORDS).collect();
    let echoed = shingles
        .iter()
        .filter(|shingle| known.contains(*shingle))
        .count();
    (echoed, shingles.len())
}

/// `Err` (why) when `summary` mostly repeats Keel's summary instructions
/// instead of summarising the conversation: half or more of its
/// four-word shingles, its Keel headings left out, are theirs.
pub(crate) fn check_not_echo(summary: &str) -> Result<(), String> {
    let (echoed, total) = echoed_shingles(summary);
    if total > 0 && echoed as f64 >= total as f64 * ECHO_SHARE {
        return Err(format!(
            "the summary mostly repeats Keel's summary instructions ({echoed} of its {total} \
             four-word phrases are theirs) instead of summarising the conversation"
        ));
    }
    Ok(())
}

/// A heading reduced to lower-case words: `## Constraints & Preferences:`
/// becomes `constraints and preferences`.
fn normalize(heading: &str) -> String {
    let words: String = heading
        .trim_start_matches(|c: char| c == '#' || c.is_whitespace())
        .replace('&', " and ")
        .chars()
        .map(|c| {
            if c.is_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                ' '
            }
        })
        .collect();
    words.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Splits `items` into consecutive chunks of at most `budget` tokens each
/// (`tokens` estimates an item); an item larger than the budget is cut to
/// fit and is a chunk of its own.
pub(crate) fn chunks(
    items: Vec<String>,
    budget: u64,
    mut tokens: impl FnMut(&str) -> u64,
) -> Vec<Vec<String>> {
    let mut chunks: Vec<Vec<String>> = Vec::new();
    let mut current = Vec::new();
    let mut size = 0;
    for mut item in items {
        let mut item_tokens = tokens(&item) + 2;
        if item_tokens > budget {
            // Keep the share of characters the budget allows, with margin.
            let chars = item.chars().count() as u64;
            let keep = chars * budget * 4 / (item_tokens * 5);
            item = cut(&item, usize::try_from(keep).unwrap_or(usize::MAX));
            item_tokens = budget;
        }
        if !current.is_empty() && size + item_tokens > budget {
            chunks.push(std::mem::take(&mut current));
            size = 0;
        }
        size += item_tokens;
        current.push(item);
    }
    if !current.is_empty() || chunks.is_empty() {
        chunks.push(current);
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(headings: &[&str]) -> String {
        headings
            .iter()
            .map(|heading| format!("## {heading}\n- x\n"))
            .collect()
    }

    #[test]
    fn the_headings_are_checked_in_order() {
        assert!(check_headings(&summary(&HEADINGS)).is_ok());
        let loose = summary(&[
            "Goal:",
            "Constraints & Preferences",
            "DONE AND VERIFIED",
            "In Progress",
            "Blocked",
            "Key decisions and rejected approaches",
            "Exact files, symbols, commands, and errors",
            "Next steps",
        ]);
        assert!(check_headings(&loose).is_ok(), "{loose}");
        let mut swapped = HEADINGS;
        swapped.swap(0, 1);
        assert!(check_headings(&summary(&swapped)).is_err());
        let missing = check_headings(&summary(&HEADINGS[..7])).unwrap_err();
        assert!(missing.contains("Next steps"), "{missing}");
        assert_eq!(check_headings("  \n").unwrap_err(), "the summary is empty");
        let correction = correction(&missing);
        assert!(correction.contains(&missing), "{correction}");
    }

    #[test]
    fn an_echo_of_the_instructions_is_told_from_a_summary() {
        // The instructions themselves, and their opening, are echoes.
        assert!(check_not_echo(SUMMARY_SYSTEM_PROMPT).is_err());
        let opening: String = SUMMARY_SYSTEM_PROMPT.chars().take(300).collect();
        let error = check_not_echo(&opening).unwrap_err();
        assert!(
            error.contains("repeats Keel's summary instructions"),
            "{error}"
        );
        assert!(check_not_echo(&format!("{opening}\n{}", correction("x"))).is_err());
        // A summary under Keel's headings is not: the headings do not count.
        let real = "## Goal\n- fix the failing check in check.sh\n## Constraints and \
            preferences\n- none\n## Done and verified\n- `bash check.sh` fails: add 2 3 -> -1\n\
            ## In progress\n- none\n## Blocked\n- none\n## Key decisions\n- none\n\
            ## Exact files, symbols, commands and errors\n- src/add.sh: `add` subtracts\n\
            ## Next steps\n- change `-` to `+` in src/add.sh and rerun the check";
        assert_eq!(echoed_shingles(real).0, 0, "{:?}", echoed_shingles(real));
        assert!(check_not_echo(real).is_ok());
        assert!(check_not_echo(&summary(&HEADINGS)).is_ok());
        // Free text of the model's own, and text too short to judge, pass.
        assert!(check_not_echo("### Status\n- the file was read; it has 500 lines").is_ok());
        assert!(check_not_echo("done").is_ok());
        // A summary that quotes one instruction among its own lines passes.
        let quoting = format!("{real}\n- the user asked: do not call tools");
        assert!(check_not_echo(&quoting).is_ok());
    }

    #[test]
    fn chunks_stay_within_the_budget_and_keep_the_order() {
        let items: Vec<String> = (0..10).map(|n| format!("item {n}")).collect();
        let chunks = chunks(items.clone(), 12, |_| 4);
        assert!(chunks.iter().all(|chunk| chunk.len() == 2), "{chunks:?}");
        assert_eq!(chunks.concat(), items);
        assert_eq!(
            super::chunks(Vec::new(), 10, |_| 1),
            vec![Vec::<String>::new()]
        );
        let big = super::chunks(vec!["a".repeat(100), "b".into()], 30, |item| {
            item.len() as u64
        });
        assert_eq!(big.len(), 2, "{big:?}");
        assert!(big[0][0].starts_with(&"a".repeat(20)), "{big:?}");
        assert!(big[0][0].contains("more characters not shown"), "{big:?}");
    }

    #[test]
    fn cut_text_says_how_much_is_left_out() {
        assert_eq!(cut("abcdef", 3), "abc… [3 more characters not shown]");
        assert_eq!(cut("abc", 3), "abc");
    }
}
