//! The `read` tool: shows a text file with line numbers, or an image.
//!
//! Output is numbered like `cat -n` and head-truncated to the shared limits;
//! whenever lines are left out, a trailing note tells the model which
//! `offset` continues. PNG, JPEG, GIF and WebP files (recognised by their
//! bytes) come back as image blocks within a size cap; other binary files
//! and directories are refused with typed errors naming what they are.
//! Nothing outside the workspace can be read, except the full outputs of
//! truncated tool results, named `keel-output:…` (see [`crate::outputs`]).

use std::sync::OnceLock;

use keel_protocol::{ExecutionMode, IntentKind, OperationIntent, ToolErrorCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use keel_protocol::{ImageContent, UserContent};

use super::{
    TextFile, arguments_schema, decode_text, image, io_error, load_file, parse_arguments,
    path_intent, within_deadline,
};
use crate::tool::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::truncate::{MAX_BYTES, MAX_LINES, truncate_head};
use crate::workspace::Workspace;

/// Reads a text file, line-numbered, in pages.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct ReadTool;

/// The arguments of a `read` call; its schema is the tool's parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArguments {
    /// Path of the file, relative to the workspace root.
    path: String,
    /// 1-based line number to start from.
    #[schemars(range(min = 1))]
    offset: Option<usize>,
    /// Maximum number of lines to show.
    #[schemars(range(min = 1))]
    limit: Option<usize>,
}

impl Tool for ReadTool {
    fn name(&self) -> &str {
        "read"
    }

    fn description(&self) -> &str {
        "Read a UTF-8 text file in the workspace, or an image (PNG, JPEG, GIF, WebP). Lines are numbered like `cat -n`. \
         Output is limited to 2000 lines or 50 KB; use offset and limit to page through larger files. \
         A `keel-output:…` path named in a truncated tool result reads that result's full output."
    }

    fn parameters(&self) -> Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA
            .get_or_init(arguments_schema::<ReadArguments>)
            .clone()
    }

    fn idempotency(&self) -> keel_protocol::Idempotency {
        keel_protocol::Idempotency::ReadOnly
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }

    fn intent(&self, arguments: &Value, workspace: &Workspace) -> OperationIntent {
        path_intent(IntentKind::Read, arguments, workspace)
    }

    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(within_deadline(self.name(), async move {
            let arguments: ReadArguments = parse_arguments(self.name(), arguments)?;
            let start = arguments.offset.unwrap_or(1).max(1);
            if let Some(saved) = context.outputs.resolve(&arguments.path) {
                let bytes = tokio::fs::read(&saved)
                    .await
                    .map_err(|error| io_error(&arguments.path, &error))?;
                let file = TextFile {
                    abs: saved,
                    display: arguments.path.clone(),
                    text: String::from_utf8_lossy(&bytes).into_owned(),
                };
                return render(&file, start, arguments.limit);
            }
            let (abs, display, bytes) = load_file(&context.workspace, &arguments.path).await?;
            if let Some(mime) = image::image_mime(&bytes) {
                return image_output(&display, mime, &bytes);
            }
            let text = decode_text(&display, bytes, "read cannot show it")?;
            render(&TextFile { abs, display, text }, start, arguments.limit)
        }))
    }
}

/// Renders the selected page of `file`.
fn render(file: &TextFile, start: usize, limit: Option<usize>) -> Result<ToolOutput, ToolError> {
    let lines = split_lines(&file.text);
    let total = lines.len();
    if total == 0 && start <= 1 {
        return Ok(ToolOutput::text("(empty file)").with_details(details(file, 0, 0, 0, false)));
    }
    if start > total {
        return Err(ToolError::new(
            ToolErrorCode::InvalidArguments,
            format!("offset {start} is beyond the end of the file ({total} lines)"),
        ));
    }
    let stop = limit.map_or(total, |limit| total.min((start - 1).saturating_add(limit)));
    let numbered: Vec<String> = (start..=stop)
        .zip(&lines[start - 1..stop])
        .map(|(number, line)| format!("{number:>6}\t{line}"))
        .collect();
    let page = truncate_head(&numbered.join("\n"), MAX_LINES, MAX_BYTES);
    if page.shown_lines == 0 {
        return Ok(oversized_line(file, start, lines[start - 1].len(), total));
    }
    let end = start + page.shown_lines - 1;
    let mut text = page.content.trim_end_matches('\n').to_owned();
    if end < total {
        text.push_str(&format!(
            "\n\n[Showing lines {start}-{end} of {total}. Use offset={} to continue.]",
            end + 1
        ));
    }
    Ok(ToolOutput::text(text).with_details(details(file, total, start, end, end < total)))
}

/// An image as a note plus an image block, if it is within the size cap.
fn image_output(display: &str, mime: &str, bytes: &[u8]) -> Result<ToolOutput, ToolError> {
    if bytes.len() > image::MAX_IMAGE_BYTES {
        return Err(ToolError::new(
            ToolErrorCode::ToolError,
            format!(
                "`{display}` is a {mime} image of {} bytes, over the {} byte limit; \
                 make a smaller copy first (for example with ImageMagick: convert {display} -resize 1600x1600 small.png)",
                bytes.len(),
                image::MAX_IMAGE_BYTES
            ),
        ));
    }
    let output = ToolOutput::new(vec![
        UserContent::Text {
            text: format!("Read image `{display}` ({mime}, {} bytes).", bytes.len()),
        },
        UserContent::Image(ImageContent::new(mime.to_owned(), image::base64(bytes))),
    ])
    .with_details(json!({"path": display, "mime_type": mime, "bytes": bytes.len()}));
    Ok(output)
}

/// The note shown when the first selected line alone is over the byte limit.
fn oversized_line(file: &TextFile, line: usize, bytes: usize, total: usize) -> ToolOutput {
    let text = format!(
        "[Line {line} of `{path}` is {bytes} bytes, over the {limit} byte limit. \
         Use bash to see part of it: sed -n '{line}p' {path} | head -c 50000]",
        path = file.display,
        limit = MAX_BYTES,
    );
    ToolOutput::text(text).with_details(details(file, total, line, line.saturating_sub(1), true))
}

/// The file's lines without terminators; a final newline ends the last line.
fn split_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let text = text.strip_suffix('\n').unwrap_or(text);
    text.split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect()
}

fn details(file: &TextFile, total: usize, start: usize, end: usize, truncated: bool) -> Value {
    json!({
        "path": file.display,
        "total_lines": total,
        "start_line": start,
        "end_line": end,
        "truncated": truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::{setup, text_of};

    async fn read(context: &ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        ReadTool.execute(arguments, context.clone()).await
    }

    #[tokio::test]
    async fn numbers_lines_like_cat_n() {
        let (dir, context) = setup();
        std::fs::write(dir.path().join("a.txt"), "alpha\r\nbeta\n").unwrap();
        let output = read(&context, json!({"path": "a.txt"})).await.unwrap();
        assert_eq!(text_of(&output.content), "     1\talpha\n     2\tbeta");
        let details = output.details.unwrap();
        assert_eq!(details["total_lines"], 2);
        assert_eq!(details["truncated"], false);
    }

    #[tokio::test]
    async fn empty_file_says_so() {
        let (dir, context) = setup();
        std::fs::write(dir.path().join("e.txt"), "").unwrap();
        let output = read(&context, json!({"path": "e.txt"})).await.unwrap();
        assert_eq!(text_of(&output.content), "(empty file)");
    }

    #[tokio::test]
    async fn offset_and_limit_page_with_a_continuation_hint() {
        let (dir, context) = setup();
        let body: String = (1..=10).map(|n| format!("line {n}\n")).collect();
        std::fs::write(dir.path().join("f.txt"), body).unwrap();
        let output = read(&context, json!({"path": "f.txt", "offset": 3, "limit": 2}))
            .await
            .unwrap();
        assert_eq!(
            text_of(&output.content),
            "     3\tline 3\n     4\tline 4\n\n[Showing lines 3-4 of 10. Use offset=5 to continue.]"
        );
        let output = read(&context, json!({"path": "f.txt", "offset": 9}))
            .await
            .unwrap();
        assert_eq!(text_of(&output.content), "     9\tline 9\n    10\tline 10");
    }

    #[tokio::test]
    async fn large_files_are_head_truncated() {
        let (dir, context) = setup();
        let body: String = (1..=3000).map(|n| format!("{n}\n")).collect();
        std::fs::write(dir.path().join("big.txt"), body).unwrap();
        let output = read(&context, json!({"path": "big.txt"})).await.unwrap();
        let text = text_of(&output.content);
        assert!(text.ends_with("[Showing lines 1-2000 of 3000. Use offset=2001 to continue.]"));
        assert_eq!(output.details.unwrap()["truncated"], true);
    }

    #[tokio::test]
    async fn oversized_first_line_suggests_sed() {
        let (dir, context) = setup();
        std::fs::write(dir.path().join("min.js"), "x".repeat(MAX_BYTES + 10)).unwrap();
        let output = read(&context, json!({"path": "min.js"})).await.unwrap();
        assert!(text_of(&output.content).contains("sed -n '1p' min.js | head -c 50000"));
    }

    #[tokio::test]
    async fn offset_past_end_is_an_error() {
        let (dir, context) = setup();
        std::fs::write(dir.path().join("f.txt"), "a\nb\n").unwrap();
        let error = read(&context, json!({"path": "f.txt", "offset": 5}))
            .await
            .unwrap_err();
        assert_eq!(error.code, ToolErrorCode::InvalidArguments);
        assert_eq!(
            error.message,
            "offset 5 is beyond the end of the file (2 lines)"
        );
    }

    #[tokio::test]
    async fn refuses_missing_directories_and_binaries() {
        let (dir, context) = setup();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("bin"), [0xff, 0xfe, 0x00]).unwrap();
        std::fs::write(dir.path().join("nul"), "a\0b").unwrap();
        let missing = read(&context, json!({"path": "nope.txt"}))
            .await
            .unwrap_err();
        assert_eq!(missing.code, ToolErrorCode::NotFound);
        let directory = read(&context, json!({"path": "sub"})).await.unwrap_err();
        assert_eq!(directory.message, "`sub` is a directory; use ls to list it");
        for name in ["bin", "nul"] {
            let binary = read(&context, json!({"path": name})).await.unwrap_err();
            assert_eq!(binary.code, ToolErrorCode::BinaryFile);
            assert!(
                binary
                    .message
                    .contains(&format!("`{name}` is a binary file"))
            );
        }
    }

    #[tokio::test]
    async fn refuses_paths_outside_the_workspace() {
        let (dir, context) = setup();
        std::os::unix::fs::symlink("/etc", dir.path().join("etc")).unwrap();
        for path in ["../x", "/etc/passwd", "etc/passwd"] {
            let error = read(&context, json!({"path": path})).await.unwrap_err();
            assert_eq!(error.code, ToolErrorCode::PathOutsideWorkspace, "{path}");
        }
    }
}
