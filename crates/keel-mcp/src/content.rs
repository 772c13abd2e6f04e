//! An MCP `tools/call` result as Keel's content blocks.
//!
//! Text becomes a text block and an image an image block (base64 data and
//! MIME type, as the server sent them). Keel's content has no audio or
//! resource blocks, so audio, resource links and embedded resources become
//! text blocks that describe them (URI, MIME type, size): nothing is dropped
//! silently. `structuredContent` goes into [`ToolOutput::details`] and, when
//! the result holds no text, into a text block as JSON. The text of one
//! result is bounded by [`MAX_TEXT_BYTES`]; what is cut is replaced by a
//! marker that says so.

use keel_protocol::{ImageContent, ToolErrorCode, UserContent};
use keel_tool_api::{ToolError, ToolOutput};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};

/// The most text (in bytes, over all text blocks) one tool result keeps:
/// 256 KiB. Base64 image data is not counted here.
pub const MAX_TEXT_BYTES: usize = 256 * 1024;

/// The most content blocks one result keeps; the rest are summed up in one
/// line.
pub const MAX_BLOCKS: usize = 256;

/// The most base64 image data one result keeps (over all its images):
/// 8 MiB. An image past it is described instead.
pub const MAX_IMAGE_BYTES: usize = 8 * 1024 * 1024;

/// The image types a result may carry; any other image is described.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Whether `data` is standard base64: its alphabet, padded to whole
/// quads, `=` only at the end.
fn is_base64(data: &str) -> bool {
    let bytes = data.as_bytes();
    let body = bytes
        .iter()
        .rposition(|byte| *byte != b'=')
        .map_or(0, |last| last + 1);
    !bytes.is_empty()
        && bytes.len().is_multiple_of(4)
        && bytes.len() - body <= 2
        && bytes[..body]
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || *byte == b'+' || *byte == b'/')
}

/// The mapped result of one call: its content and details.
pub(crate) fn map_result(
    server: &str,
    tool: &str,
    result: CallToolResult,
) -> Result<ToolOutput, ToolError> {
    let mut content: Vec<UserContent> = Vec::new();
    let mut budget = TextBudget::new(MAX_TEXT_BYTES);
    let mut has_text = false;
    let mut image_bytes = 0usize;
    let total = result.content.len();
    for (index, block) in result.content.into_iter().enumerate() {
        if index == MAX_BLOCKS {
            content.push(budget.text(format!(
                "[{} more content blocks, not shown: a result keeps at most {MAX_BLOCKS}]",
                total - MAX_BLOCKS
            )));
            break;
        }
        match block {
            ContentBlock::Text(text) => {
                has_text = true;
                content.push(budget.text(text.text));
            }
            ContentBlock::Image(image) => {
                // A provider refuses a request with a bad image, and every
                // later one of the session would carry it: only a known
                // type with well-formed base64, within the budget, passes.
                let known = IMAGE_TYPES.contains(&image.mime_type.as_str());
                let fits = image_bytes + image.data.len() <= MAX_IMAGE_BYTES;
                if known && fits && is_base64(&image.data) {
                    image_bytes += image.data.len();
                    content.push(UserContent::Image(ImageContent::new(
                        image.mime_type,
                        image.data,
                    )));
                } else {
                    let why = match (known, fits) {
                        (false, _) => "not an image type Keel passes on",
                        (true, false) => "past the result's image budget",
                        (true, true) => "not well-formed base64",
                    };
                    content.push(budget.text(format!(
                        "[image, {} bytes of base64, not shown: {why}]",
                        image.data.len()
                    )));
                }
            }
            ContentBlock::Audio(audio) => {
                let size = base64_decoded_len(&audio.data);
                content.push(budget.text(format!(
                    "[audio: {}, {size} bytes, not shown]",
                    audio.mime_type
                )));
            }
            ContentBlock::ResourceLink(link) => {
                let mut line = format!("[resource link: {}", link.uri);
                line.push_str(&format!(" (name: {}", link.name));
                if let Some(mime) = &link.mime_type {
                    line.push_str(&format!(", type: {mime}"));
                }
                if let Some(size) = link.size {
                    line.push_str(&format!(", {size} bytes"));
                }
                line.push(')');
                if let Some(description) = &link.description {
                    line.push_str(&format!(": {description}"));
                }
                line.push(']');
                content.push(budget.text(line));
            }
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => {
                    has_text = true;
                    let mime = mime_type.unwrap_or_else(|| "unknown type".to_owned());
                    content.push(budget.text(format!("[resource: {uri} ({mime})]\n{text}")));
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => {
                    let mime = mime_type.unwrap_or_else(|| "unknown type".to_owned());
                    let size = base64_decoded_len(&blob);
                    content.push(budget.text(format!(
                        "[resource: {uri} ({mime}, {size} bytes of binary content, not shown)]"
                    )));
                }
                other => content.push(budget.text(format!(
                    "[embedded resource of a kind this client does not know: {}]",
                    describe_unknown(&other)
                ))),
            },
            other => {
                // A kind newer than this client: described, never dropped.
                content.push(budget.text(format!(
                    "[content this client does not know, not shown: {}]",
                    describe_unknown(&other)
                )));
            }
        }
    }
    let mut details = None;
    if let Some(structured) = result.structured_content {
        if !has_text {
            let text = serde_json::to_string_pretty(&structured)
                .unwrap_or_else(|_| structured.to_string());
            content.push(budget.text(text));
        }
        details = Some(json!({ "structured_content": structured }));
    }
    let mut output = ToolOutput::new(content);
    if let Some(details) = details {
        output = output.with_details(details);
    }
    if result.is_error == Some(true) {
        let first_text = output.content.iter().find_map(|block| match block {
            UserContent::Text { text } => Some(text.clone()),
            _ => None,
        });
        let message = match first_text {
            Some(text) => format!(
                "MCP tool `{tool}` of server `{server}` failed: {}",
                first_line(&text)
            ),
            None => format!("MCP tool `{tool}` of server `{server}` failed"),
        };
        return Err(ToolError::new(ToolErrorCode::ToolError, message).with_output(output));
    }
    Ok(output)
}

/// A content kind newer than this client: its `type` and `uri`, when it
/// has them.
fn describe_unknown<T: serde::Serialize>(value: &T) -> String {
    let value = serde_json::to_value(value).unwrap_or(Value::Null);
    let field = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_owned);
    let kind = field("type").unwrap_or_else(|| "unknown".to_owned());
    match field("uri") {
        Some(uri) => format!("type `{kind}`, uri {uri}"),
        None => format!("type `{kind}`"),
    }
}

/// The first line of `text`, at most 200 characters.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let mut cut: String = line.chars().take(200).collect();
    if cut.len() < line.len() {
        cut.push('…');
    }
    cut
}

/// How many bytes base64 `data` decodes to (padding taken off).
fn base64_decoded_len(data: &str) -> usize {
    let trimmed = data.trim_end_matches('=');
    let chars = trimmed
        .bytes()
        .filter(|byte| !byte.is_ascii_whitespace())
        .count();
    chars * 3 / 4
}

/// What is left of a result's text allowance.
struct TextBudget {
    left: usize,
    cut: bool,
}

impl TextBudget {
    fn new(limit: usize) -> Self {
        Self {
            left: limit,
            cut: false,
        }
    }

    /// `text` as a block, cut to what is left (on a character boundary)
    /// with a marker that says how much was dropped.
    fn text(&mut self, text: String) -> UserContent {
        if text.len() <= self.left {
            self.left -= text.len();
            return UserContent::Text { text };
        }
        let mut end = self.left;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let dropped = text.len() - end;
        let mut kept = text;
        kept.truncate(end);
        self.left = 0;
        let first = !self.cut;
        self.cut = true;
        if first {
            kept.push_str(&format!(
                "\n[keel: MCP tool output truncated: {dropped} more bytes not shown; a result keeps at most {MAX_TEXT_BYTES} bytes of text]"
            ));
        } else {
            kept.push_str(&format!("[keel: {dropped} more bytes not shown]"));
        }
        UserContent::Text { text: kept }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use rmcp::model::{AudioContent, EmbeddedResource, Resource};

    fn texts(output: &ToolOutput) -> Vec<String> {
        output
            .content
            .iter()
            .filter_map(|block| match block {
                UserContent::Text { text } => Some(text.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_kind_is_kept_or_described() {
        let mut link = Resource::new("file:///tmp/a.txt", "a.txt");
        link.mime_type = Some("text/plain".into());
        link.size = Some(12);
        let result = CallToolResult::success(vec![
            ContentBlock::text("hello"),
            ContentBlock::image("aGVsbG8=", "image/png"),
            ContentBlock::Audio(AudioContent::new("AAAA", "audio/wav")),
            ContentBlock::ResourceLink(link),
            ContentBlock::Resource(EmbeddedResource::new(
                ResourceContents::blob("AAAAAAAA", "mem://blob").with_mime_type("application/gzip"),
            )),
            ContentBlock::embedded_text("mem://t", "inside"),
        ]);
        let output = map_result("s", "t", result).unwrap();
        assert_eq!(output.content.len(), 6);
        assert_eq!(
            output.content[1],
            UserContent::Image(ImageContent::new("image/png", "aGVsbG8="))
        );
        let texts = texts(&output);
        assert_eq!(texts[0], "hello");
        assert!(
            texts[1].contains("audio/wav") && texts[1].contains("3 bytes"),
            "{}",
            texts[1]
        );
        assert!(
            texts[2].contains("file:///tmp/a.txt") && texts[2].contains("12 bytes"),
            "{}",
            texts[2]
        );
        assert!(
            texts[3].contains("mem://blob") && texts[3].contains("application/gzip"),
            "{}",
            texts[3]
        );
        assert!(
            texts[4].contains("mem://t") && texts[4].contains("inside"),
            "{}",
            texts[4]
        );
    }

    #[test]
    fn bad_images_and_too_many_blocks_are_described_not_passed_on() {
        let result = CallToolResult::success(vec![
            ContentBlock::image("!!!not base64\u{1b}[2J", "image/png"),
            ContentBlock::image("aGVsbG8=", "image/png\u{1b}[31m"),
            ContentBlock::image("aGVsbG8=", "image/png"),
        ]);
        let output = map_result("s", "t", result).unwrap();
        let images = output
            .content
            .iter()
            .filter(|block| matches!(block, UserContent::Image(_)))
            .count();
        assert_eq!(images, 1);
        let shown = texts(&output);
        assert!(shown[0].contains("not well-formed base64"), "{}", shown[0]);
        assert!(shown[1].contains("not an image type"), "{}", shown[1]);
        assert!(is_base64("aGVsbG8=") && is_base64("aGk=") && !is_base64("a=GV") && !is_base64(""));

        let many = (0..1000).map(|_| ContentBlock::text("x")).collect();
        let output = map_result("s", "t", CallToolResult::success(many)).unwrap();
        assert_eq!(output.content.len(), MAX_BLOCKS + 1);
        assert!(
            texts(&output)
                .last()
                .unwrap()
                .contains("744 more content blocks")
        );
    }

    #[test]
    fn structured_content_goes_to_details_and_to_text_when_there_is_none() {
        let mut result = CallToolResult::success(Vec::new());
        result.structured_content = Some(json!({"temperature": 21}));
        let output = map_result("s", "t", result).unwrap();
        assert_eq!(
            output.details,
            Some(json!({"structured_content": {"temperature": 21}}))
        );
        assert!(texts(&output)[0].contains("\"temperature\": 21"));

        let mut result = CallToolResult::success(vec![ContentBlock::text("21 degrees")]);
        result.structured_content = Some(json!({"temperature": 21}));
        let output = map_result("s", "t", result).unwrap();
        assert_eq!(texts(&output), vec!["21 degrees".to_owned()]);
        assert!(output.details.is_some());
    }

    #[test]
    fn is_error_is_a_tool_error_with_the_content() {
        let result = CallToolResult::error(vec![ContentBlock::text("no such city\nmore")]);
        let error = map_result("weather", "forecast", result).unwrap_err();
        assert_eq!(error.code, ToolErrorCode::ToolError);
        assert!(error.message.contains("`forecast`") && error.message.contains("no such city"));
        assert!(!error.message.contains("more"));
        assert_eq!(error.content.len(), 1);
    }

    #[test]
    fn text_is_bounded_with_a_marker() {
        let big = "é".repeat(MAX_TEXT_BYTES); // two bytes each: twice the bound
        let result =
            CallToolResult::success(vec![ContentBlock::text(big), ContentBlock::text("after")]);
        let output = map_result("s", "t", result).unwrap();
        let texts = texts(&output);
        assert!(texts[0].len() < MAX_TEXT_BYTES + 200);
        assert!(texts[0].contains("truncated"), "marker missing");
        assert!(texts[1].contains("5 more bytes not shown"), "{}", texts[1]);
    }
}
