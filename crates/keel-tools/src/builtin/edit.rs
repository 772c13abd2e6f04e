//! The `edit` tool: exact, unique, non-overlapping text replacements.
//!
//! Every edit is matched against the ORIGINAL file content, never against the
//! result of an earlier edit, so the order of edits does not matter. Each
//! `old_text` must be non-empty and occur exactly once, and no two edits may
//! overlap; otherwise nothing is written and a typed error says which edit
//! failed and why. Matching is done on LF-normalized text with any UTF-8 BOM
//! removed; the file's CRLF line endings and BOM are restored on write.

use std::sync::{Arc, OnceLock};

use keel_protocol::{ExecutionMode, IntentKind, OperationIntent, ToolErrorCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use similar::{DiffTag, TextDiff};

use super::{arguments_schema, parse_arguments, path_intent, read_text_file, within_deadline};
use crate::tool::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::workspace::Workspace;

const BOM: &str = "\u{feff}";

/// Replaces exact snippets of a file.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct EditTool;

/// The arguments of an `edit` call; its schema is the tool's parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EditArguments {
    /// Path of the file, relative to the workspace root.
    path: String,
    /// Replacements to apply, each matched against the original file.
    #[schemars(length(min = 1))]
    edits: Vec<Edit>,
}

// One replacement of an `edit` call. A plain comment: a doc comment would
// become a description of the `edits` items in the schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Edit {
    /// Exact text to replace; must occur exactly once.
    old_text: String,
    /// Text to put in its place.
    new_text: String,
}

/// One edit located in the original content.
#[derive(Debug)]
struct Located {
    index: usize,
    start: usize,
    end: usize,
    new_text: String,
}

impl Tool for EditTool {
    fn name(&self) -> &str {
        "edit"
    }

    fn description(&self) -> &str {
        "Edit a text file by exact replacement. Each old_text must match the current file exactly \
         (including whitespace) and occur exactly once; all edits are matched against the original file \
         and must not overlap. Read the file first."
    }

    fn parameters(&self) -> Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA
            .get_or_init(arguments_schema::<EditArguments>)
            .clone()
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Sequential
    }

    fn intent(&self, arguments: &Value, workspace: &Workspace) -> OperationIntent {
        path_intent(IntentKind::Write, arguments, workspace)
    }

    fn idempotency(&self) -> keel_protocol::Idempotency {
        keel_protocol::Idempotency::EditFile
    }

    fn planned_files(
        &self,
        arguments: &Value,
        workspace: &Workspace,
        current: &dyn Fn(&std::path::Path) -> Option<Vec<u8>>,
    ) -> Vec<crate::evidence::PlannedFile> {
        let Ok(arguments) = EditArguments::deserialize(arguments) else {
            return Vec::new();
        };
        let Ok(abs) = workspace.resolve(&arguments.path) else {
            return Vec::new();
        };
        let after = current(&abs)
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|text| edited(&text, &arguments.edits, &arguments.path).ok())
            .map(|(_, _, content)| content.into_bytes());
        vec![crate::evidence::PlannedFile::new(abs, after)]
    }

    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(within_deadline(self.name(), async move {
            let arguments: EditArguments = parse_arguments(self.name(), arguments)?;
            let file = read_text_file(&context.workspace, &arguments.path, "edit cannot change it")
                .await?;
            let path = file.display.as_str();
            let (original, updated, content) = edited(&file.text, &arguments.edits, path)?;
            let (workspace, abs) = (Arc::clone(&context.workspace), file.abs.clone());
            tokio::task::spawn_blocking(move || workspace.write_file(&abs, content.as_bytes()))
                .await
                .map_err(|error| {
                    ToolError::new(ToolErrorCode::Io, format!("writing {path} failed: {error}"))
                })??;
            Ok(summary(path, &original, &updated, arguments.edits.len()))
        }))
    }
}

/// The LF-normalised original, the LF-normalised result and the bytes to
/// write (BOM and CRLF endings restored) of applying `edits` to `text`.
fn edited(text: &str, edits: &[Edit], path: &str) -> Result<(String, String, String), ToolError> {
    let (bom, body) = match text.strip_prefix(BOM) {
        Some(body) => (BOM, body),
        None => ("", text),
    };
    let crlf = body.contains("\r\n");
    let original = to_lf(body);
    let located = locate_all(&original, edits, path)?;
    let updated = apply(&original, located);
    if updated == original {
        return Err(ToolError::new(
            ToolErrorCode::EditNoChange,
            format!("The edits leave {path} unchanged"),
        ));
    }
    let on_disk = if crlf {
        updated.replace('\n', "\r\n")
    } else {
        updated.clone()
    };
    let content = format!("{bom}{on_disk}");
    Ok((original, updated, content))
}

fn to_lf(text: &str) -> String {
    text.replace("\r\n", "\n")
}

/// Finds every edit in `original` and checks uniqueness and overlaps.
fn locate_all(original: &str, edits: &[Edit], path: &str) -> Result<Vec<Located>, ToolError> {
    let mut located = edits
        .iter()
        .enumerate()
        .map(|(index, edit)| locate(original, index, edit, path))
        .collect::<Result<Vec<_>, _>>()?;
    located.sort_by_key(|edit| (edit.start, edit.index));
    for pair in located.windows(2) {
        if let [first, second] = pair
            && first.end > second.start
        {
            let (a, b) = (first.index.min(second.index), first.index.max(second.index));
            return Err(ToolError::new(
                ToolErrorCode::EditOverlap,
                format!("edits[{a}] and edits[{b}] overlap in {path}; merge them into one edit"),
            ));
        }
    }
    Ok(located)
}

/// Finds one edit's unique occurrence.
fn locate(original: &str, index: usize, edit: &Edit, path: &str) -> Result<Located, ToolError> {
    let old_text = to_lf(&edit.old_text);
    if old_text.is_empty() {
        return Err(ToolError::new(
            ToolErrorCode::InvalidArguments,
            format!("edits[{index}]: old_text must not be empty"),
        ));
    }
    let starts = occurrences(original, &old_text);
    match starts.as_slice() {
        [start] => Ok(Located {
            index,
            start: *start,
            end: start + old_text.len(),
            new_text: to_lf(&edit.new_text),
        }),
        [] => Err(ToolError::new(
            ToolErrorCode::EditNotFound,
            format!(
                "edits[{index}]: old_text not found in {path}. It must match the file exactly, \
                 including whitespace and indentation; read the file again to see its current content."
            ),
        )),
        many => Err(ToolError::new(
            ToolErrorCode::EditAmbiguous,
            format!(
                "edits[{index}]: old_text found {} times in {path}; add surrounding context to make it unique",
                many.len()
            ),
        )),
    }
}

/// Start offsets of every (possibly overlapping) occurrence of `needle`.
fn occurrences(haystack: &str, needle: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut from = 0;
    while let Some(found) = haystack.get(from..).and_then(|rest| rest.find(needle)) {
        let start = from + found;
        starts.push(start);
        let step = needle.chars().next().map_or(1, char::len_utf8);
        from = start + step;
    }
    starts
}

/// Applies located, non-overlapping edits from the last to the first.
fn apply(original: &str, mut located: Vec<Located>) -> String {
    let mut updated = original.to_owned();
    located.sort_by_key(|edit| std::cmp::Reverse(edit.start));
    for edit in located {
        updated.replace_range(edit.start..edit.end, &edit.new_text);
    }
    updated
}

/// The result text and details: a unified diff and the first changed line.
fn summary(path: &str, original: &str, updated: &str, count: usize) -> ToolOutput {
    let diff = TextDiff::from_lines(original, updated);
    let first_changed_line = diff
        .ops()
        .iter()
        .find(|op| op.tag() != DiffTag::Equal)
        .map_or(1, |op| op.new_range().start + 1);
    let unified = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    ToolOutput::text(format!("Applied {count} edit(s) to {path}")).with_details(json!({
        "path": path,
        "diff": unified,
        "first_changed_line": first_changed_line,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::{setup, text_of};

    async fn edit(
        context: &ToolContext,
        path: &str,
        edits: Value,
    ) -> Result<ToolOutput, ToolError> {
        EditTool
            .execute(json!({"path": path, "edits": edits}), context.clone())
            .await
    }

    fn pair(old_text: &str, new_text: &str) -> Value {
        json!({"old_text": old_text, "new_text": new_text})
    }

    #[tokio::test]
    async fn applies_edits_against_the_original() {
        let (dir, context) = setup();
        std::fs::write(dir.path().join("f.txt"), "one\ntwo\nthree\nfour\n").unwrap();
        let edits = json!([pair("three", "3"), pair("one\ntwo", "1\n2")]);
        let output = edit(&context, "f.txt", edits).await.unwrap();
        assert_eq!(text_of(&output.content), "Applied 2 edit(s) to f.txt");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
            "1\n2\n3\nfour\n"
        );
        let details = output.details.unwrap();
        assert_eq!(details["first_changed_line"], 1);
        let diff = details["diff"].as_str().unwrap();
        assert!(diff.starts_with("--- a/f.txt\n+++ b/f.txt\n"), "{diff}");
        assert!(
            diff.contains("-three\n") && diff.contains("+3\n") && diff.contains(" four\n"),
            "{diff}"
        );
    }

    #[tokio::test]
    async fn preserves_crlf_and_bom() {
        let (dir, context) = setup();
        let path = dir.path().join("w.txt");
        std::fs::write(&path, "\u{feff}a\r\nb\r\nc\r\n").unwrap();
        let output = edit(&context, "w.txt", json!([pair("b\r\nc", "B\nC")]))
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "\u{feff}a\r\nB\r\nC\r\n"
        );
        assert_eq!(output.details.unwrap()["first_changed_line"], 2);
    }

    #[tokio::test]
    async fn reports_not_found_ambiguous_overlap_and_no_change() {
        let (dir, context) = setup();
        let path = dir.path().join("f.txt");
        std::fs::write(&path, "aaa bbb aaa\n").unwrap();
        let error = edit(&context, "f.txt", json!([pair("zzz", "y")]))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::EditNotFound);
        assert!(
            error
                .message
                .starts_with("edits[0]: old_text not found in f.txt")
        );
        let error = edit(
            &context,
            "f.txt",
            json!([pair("bbb", "c"), pair("aaa", "x")]),
        )
        .await
        .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::EditAmbiguous);
        assert_eq!(
            error.message,
            "edits[1]: old_text found 2 times in f.txt; add surrounding context to make it unique"
        );
        let error = edit(
            &context,
            "f.txt",
            json!([pair("aaa b", "x"), pair("bbb", "y")]),
        )
        .await
        .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::EditOverlap);
        assert!(error.message.contains("edits[0] and edits[1]"));
        let error = edit(&context, "f.txt", json!([pair("bbb", "bbb")]))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::EditNoChange);
        let error = edit(&context, "f.txt", json!([pair("", "x")]))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::InvalidArguments);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "aaa bbb aaa\n");
    }

    #[tokio::test]
    async fn counts_overlapping_occurrences_as_ambiguous() {
        let (dir, context) = setup();
        std::fs::write(dir.path().join("f.txt"), "aaa").unwrap();
        let error = edit(&context, "f.txt", json!([pair("aa", "b")]))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::EditAmbiguous);
    }

    #[tokio::test]
    async fn refuses_binary_missing_and_outside_files() {
        let (dir, context) = setup();
        std::fs::write(dir.path().join("bin"), [0xc3, 0x28]).unwrap();
        let error = edit(&context, "bin", json!([pair("a", "b")]))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::BinaryFile);
        let error = edit(&context, "missing", json!([pair("a", "b")]))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::NotFound);
        let error = edit(&context, "/etc/passwd", json!([pair("root", "toor")]))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::PathOutsideWorkspace);
    }
}
