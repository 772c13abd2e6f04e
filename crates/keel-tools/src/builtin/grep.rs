//! The `grep` tool: searches file contents with the ripgrep libraries.
//!
//! Regex or literal, optional glob filter, case-insensitive, context lines,
//! a match limit; gitignore-aware (see `walk`), binary files skipped, long
//! lines cut with a marker. Output is `path:line: text` for matches and
//! `path-line- text` for context, sorted by path, within the shared output
//! budget; the full output of a cut result is saved for `read`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::WalkState;
use keel_protocol::{ExecutionMode, IntentKind, OperationIntent, ToolErrorCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    arguments_schema, budgeted, parse_arguments, path_intent_or_root, walk, within_deadline,
};
use crate::tool::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::workspace::Workspace;

/// Longest line shown, in characters.
const MAX_LINE_CHARS: usize = 500;
/// Default and largest match limits.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 10_000;
/// Most lines of context around a match.
const MAX_CONTEXT: usize = 20;

/// Searches file contents.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct GrepTool;

/// The arguments of a `grep` call; its schema is the tool's parameters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GrepArguments {
    /// Regular expression (Rust syntax), or plain text with literal=true.
    #[schemars(length(min = 1))]
    pattern: String,
    /// File or directory to search, relative to the workspace root (default: the root).
    path: Option<String>,
    /// Only search files whose path matches this glob, e.g. `*.rs` or `src/**/*.ts`.
    glob: Option<String>,
    /// Match case-insensitively.
    #[serde(default)]
    ignore_case: bool,
    /// Treat the pattern as plain text, not a regex.
    #[serde(default)]
    literal: bool,
    /// Lines of context before and after each match.
    #[serde(default)]
    #[schemars(range(max = MAX_CONTEXT))]
    context: usize,
    /// Maximum number of matches (default 100).
    #[schemars(range(min = 1, max = MAX_LIMIT))]
    limit: Option<usize>,
}

impl Tool for GrepTool {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search file contents in the workspace (ripgrep). Respects .gitignore, skips binary files. \
         Returns `path:line: text` for matches and `path-line- text` for context lines, sorted by path."
    }

    fn parameters(&self) -> Value {
        static SCHEMA: OnceLock<Value> = OnceLock::new();
        SCHEMA
            .get_or_init(arguments_schema::<GrepArguments>)
            .clone()
    }

    fn idempotency(&self) -> keel_protocol::Idempotency {
        keel_protocol::Idempotency::ReadOnly
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }

    fn intent(&self, arguments: &Value, workspace: &Workspace) -> OperationIntent {
        path_intent_or_root(IntentKind::Read, arguments, workspace)
    }

    fn execute(&self, arguments: Value, context: ToolContext) -> ToolFuture<'_> {
        Box::pin(within_deadline(self.name(), async move {
            let arguments: GrepArguments = parse_arguments(self.name(), arguments)?;
            let search = Search::new(&arguments, &context.workspace)?;
            // Cancelled with the run, or when the deadline drops this call.
            let cancel = context.cancel.child_token();
            let _stop_on_drop = cancel.clone().drop_guard();
            let found = tokio::task::spawn_blocking(move || search.run(&cancel))
                .await
                .map_err(|error| {
                    ToolError::new(ToolErrorCode::ToolError, format!("grep failed: {error}"))
                })?;
            if context.cancel.is_cancelled() {
                return Err(ToolError::cancelled());
            }
            Ok(found.into_output(&context.outputs, &arguments))
        }))
    }
}

/// A prepared search.
struct Search {
    workspace: Arc<Workspace>,
    root: PathBuf,
    start: PathBuf,
    matcher: RegexMatcher,
    glob: Option<globset::GlobMatcher>,
    context: usize,
    limit: usize,
}

/// The lines found in one file.
struct FileHits {
    path: String,
    lines: Vec<Hit>,
}

enum Hit {
    Match(u64, String),
    Context(u64, String),
    Break,
}

/// Everything found.
struct Found {
    files: Vec<FileHits>,
    matches: usize,
    limit_reached: bool,
    limit: usize,
}

impl Search {
    fn new(arguments: &GrepArguments, workspace: &Arc<Workspace>) -> Result<Self, ToolError> {
        let start = workspace.resolve(arguments.path.as_deref().unwrap_or("."))?;
        if !start.exists() {
            return Err(ToolError::new(
                ToolErrorCode::NotFound,
                format!(
                    "`{}` does not exist",
                    arguments.path.as_deref().unwrap_or(".")
                ),
            ));
        }
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(arguments.ignore_case)
            .fixed_strings(arguments.literal)
            .line_terminator(Some(b'\n'))
            .build(&arguments.pattern)
            .map_err(|error| {
                ToolError::new(
                    ToolErrorCode::InvalidArguments,
                    format!("Invalid pattern: {error}"),
                )
            })?;
        let glob = match &arguments.glob {
            Some(glob) => Some(compile_glob(glob)?),
            None => None,
        };
        walk::start_is_safe(workspace.root(), &start)
            .map_err(|why| ToolError::new(ToolErrorCode::ToolError, why))?;
        Ok(Self {
            workspace: Arc::clone(workspace),
            root: workspace.root().to_path_buf(),
            start,
            matcher,
            glob,
            context: arguments.context.min(MAX_CONTEXT),
            limit: arguments.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT),
        })
    }

    fn run(self, cancel: &CancellationToken) -> Found {
        let matches = Arc::new(AtomicUsize::new(0));
        let files = Arc::new(Mutex::new(Vec::new()));
        let search = Arc::new(self);
        walk::parallel(&search.start).run(|| {
            let search = Arc::clone(&search);
            let matches = Arc::clone(&matches);
            let files = Arc::clone(&files);
            let cancel = cancel.clone();
            let mut searcher = SearcherBuilder::new()
                .binary_detection(BinaryDetection::quit(0))
                .line_number(true)
                .before_context(search.context)
                .after_context(search.context)
                .build();
            Box::new(move |entry| {
                if cancel.is_cancelled() || matches.load(Ordering::Relaxed) >= search.limit {
                    return WalkState::Quit;
                }
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                if !entry.file_type().is_some_and(|kind| kind.is_file()) {
                    return WalkState::Continue;
                }
                let relative = walk::relative(&search.root, entry.path());
                if search
                    .glob
                    .as_ref()
                    .is_some_and(|glob| !glob_matches(glob, &relative))
                {
                    return WalkState::Continue;
                }
                let mut sink = Collect {
                    lines: Vec::new(),
                    matches: &matches,
                    limit: search.limit,
                };
                // Unreadable files and anything but a regular file (a FIFO
                // would block) are skipped, as ripgrep skips what it cannot read.
                let Some(file) = search.open(entry.path()) else {
                    return WalkState::Continue;
                };
                let _ = searcher.search_file(&search.matcher, &file, &mut sink);
                if sink.lines.iter().any(|hit| matches!(hit, Hit::Match(..)))
                    && let Ok(mut files) = files.lock()
                {
                    files.push(FileHits {
                        path: relative,
                        lines: sink.lines,
                    });
                }
                WalkState::Continue
            })
        });
        let mut files = Arc::try_unwrap(files)
            .ok()
            .and_then(|files| files.into_inner().ok())
            .unwrap_or_default();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let total = matches.load(Ordering::Relaxed);
        Found {
            files,
            matches: total.min(search.limit),
            limit_reached: total >= search.limit,
            limit: search.limit,
        }
    }
}

impl Search {
    /// Opens a walked file beneath the root (no symlink followed, so a
    /// directory swapped for one meanwhile fails the open), if it is a
    /// regular file with one name: another hard link may lie outside the
    /// workspace, so, as `read` refuses it, grep skips it (unless outside
    /// access was allowed).
    fn open(&self, path: &Path) -> Option<std::fs::File> {
        let file = self.workspace.open_read(path).ok()?;
        match crate::beneath::regular(&file) {
            Ok(Ok(metadata))
                if crate::beneath::extra_links(&metadata).is_none()
                    || self.workspace.allows_outside() =>
            {
                Some(file)
            }
            _ => None,
        }
    }
}

fn compile_glob(glob: &str) -> Result<globset::GlobMatcher, ToolError> {
    globset::GlobBuilder::new(glob)
        .literal_separator(glob.contains('/'))
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|error| {
            ToolError::new(
                ToolErrorCode::InvalidArguments,
                format!("Invalid glob: {error}"),
            )
        })
}

/// A glob without `/` matches the file name; with `/`, the relative path.
fn glob_matches(glob: &globset::GlobMatcher, relative: &str) -> bool {
    if glob.glob().glob().contains('/') {
        glob.is_match(relative)
    } else {
        glob.is_match(
            Path::new(relative)
                .file_name()
                .map(Path::new)
                .unwrap_or(Path::new(relative)),
        )
    }
}

struct Collect<'a> {
    lines: Vec<Hit>,
    matches: &'a AtomicUsize,
    limit: usize,
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        if self.matches.fetch_add(1, Ordering::Relaxed) >= self.limit {
            return Ok(false);
        }
        self.lines.push(Hit::Match(
            found.line_number().unwrap_or(0),
            line_text(found.bytes()),
        ));
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        self.lines.push(Hit::Context(
            context.line_number().unwrap_or(0),
            line_text(context.bytes()),
        ));
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, std::io::Error> {
        self.lines.push(Hit::Break);
        Ok(true)
    }
}

/// One line, lossily decoded, without its terminator, cut if too long.
fn line_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end_matches(['\n', '\r']);
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!("{}… [line truncated]", &text[..cut]),
        None => text.to_owned(),
    }
}

impl Found {
    fn into_output(
        self,
        outputs: &crate::outputs::OutputStore,
        arguments: &GrepArguments,
    ) -> ToolOutput {
        let files = self.files.len();
        if self.matches == 0 {
            return ToolOutput::text(format!("No matches for `{}`.", arguments.pattern))
                .with_details(json!({"matches": 0, "files": 0, "truncated": false}));
        }
        let mut text = String::new();
        for file in &self.files {
            if !text.is_empty() && arguments.context > 0 {
                text.push_str("--\n");
            }
            for hit in &file.lines {
                match hit {
                    Hit::Match(line, body) => {
                        text.push_str(&format!("{}:{line}: {body}\n", file.path))
                    }
                    Hit::Context(line, body) => {
                        text.push_str(&format!("{}-{line}- {body}\n", file.path))
                    }
                    Hit::Break => text.push_str("--\n"),
                }
            }
        }
        let mut notes = Vec::new();
        if self.limit_reached {
            notes.push(format!(
                "Match limit of {} reached; narrow the pattern, path or glob, or raise limit.",
                self.limit
            ));
        }
        let (shown, truncated, full) = budgeted(outputs, "grep", &text, &mut notes);
        let details = json!({
            "matches": self.matches, "files": files, "limit_reached": self.limit_reached,
            "truncated": truncated, "full_output": full,
        });
        ToolOutput::text(shown).with_details(details)
    }
}
