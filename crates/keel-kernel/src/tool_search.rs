//! Deferred tools and `tool_search`: when the schemas of the tools an
//! extension marked deferrable (an MCP server's) would take more than a
//! share of the context window, requests carry them by name and one-line
//! description only, in the system prompt, and the model asks `tool_search`
//! for the full schemas of the ones it needs.
//!
//! Invariants:
//! - A deferred tool stays registered: a call to it is validated and
//!   classified like any other. Only its spec leaves the request.
//! - A tool `tool_search` returned is loaded: its spec is in every later
//!   request whose context still holds that `tool_search` result
//!   ([`loaded`] reads the result's `details.loaded`), so a resumed run
//!   and a replay build the same requests from the session alone.
//! - `tool_search` has no effect: it reads only the specs it was built
//!   with, and the policy allows it in every mode.

use std::collections::HashSet;
use std::sync::Arc;

use keel_protocol::{ExecutionMode, IntentKind, IntentScope, Message, OperationIntent, ToolSpec};
use keel_tools::{Tool, ToolContext, ToolFuture, ToolOutput, Workspace};
use serde_json::{Value, json};

/// The name the model calls.
pub(crate) const NAME: &str = "tool_search";

/// The share of the context window deferrable tools' schemas may take
/// before they are deferred, unless the host sets one.
pub const DEFAULT_SHARE: f64 = 0.10;

/// The window assumed when the model's is unknown.
pub(crate) const ASSUMED_WINDOW: u64 = 128_000;

/// The most tools one search returns.
const MAX_RESULTS: usize = 10;

/// The most characters of a deferred tool's description the listing shows.
const LISTED_DESCRIPTION: usize = 120;

/// When deferrable tools are deferred: once the deferrable tools' specs,
/// counted in tokens, pass a share of the context window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Deferral {
    /// The most tokens deferrable specs may take in full.
    budget: u64,
    /// What the deferrable specs counted so far take.
    spent: u64,
}

impl Deferral {
    pub(crate) fn new(window: u64, share: f64) -> Self {
        Self {
            budget: (window as f64 * share.clamp(0.0, 1.0)) as u64,
            spent: 0,
        }
    }

    /// Which of `deferrable` to defer: all of them when they pass the
    /// budget with what was counted before; none otherwise.
    pub(crate) fn defer(&self, deferrable: &[ToolSpec]) -> Vec<ToolSpec> {
        let cost: u64 = deferrable.iter().map(spec_tokens).sum();
        match self.spent + cost > self.budget {
            true => deferrable.to_vec(),
            false => Vec::new(),
        }
    }

    /// Its budget and what it counted, for a kernel to keep.
    pub(crate) fn parts(&self) -> (u64, u64) {
        (self.budget, self.spent)
    }

    /// The deferral a kernel kept ([`Deferral::parts`]).
    pub(crate) fn from_parts((budget, spent): (u64, u64)) -> Self {
        Self { budget, spent }
    }

    /// This deferral with `specs` counted.
    pub(crate) fn counting(mut self, specs: &[ToolSpec]) -> Self {
        self.spent += specs.iter().map(spec_tokens).sum::<u64>();
        self
    }
}

/// A spec's size in tokens, as a request would carry it.
pub(crate) fn spec_tokens(spec: &ToolSpec) -> u64 {
    crate::tokens::count_tokens(&serde_json::to_string(spec).unwrap_or_default())
}

/// The system prompt section that lists the deferred tools.
pub(crate) fn listing(deferred: &[ToolSpec]) -> String {
    let mut text = format!(
        "These tools are available but their schemas are not loaded. Call `{NAME}` with \
         their names (or a query) to load them, then call them as usual:"
    );
    for spec in deferred {
        // A server wrote it: one line, no control characters, capped.
        let line = spec.description.lines().next().unwrap_or_default().trim();
        let mut line: String = line
            .chars()
            .filter(|c| !c.is_control())
            .take(LISTED_DESCRIPTION)
            .collect();
        if line.len() < spec.description.trim().len() {
            line.push('…');
        }
        text.push_str(&format!("\n- {}: {line}", spec.name));
    }
    text
}

/// The deferred tools that `tool_search` results in `messages` loaded, in
/// the order `deferred` lists them.
pub(crate) fn loaded(deferred: &[ToolSpec], messages: &[Arc<Message>]) -> Vec<ToolSpec> {
    let mut names: HashSet<&str> = HashSet::new();
    for message in messages {
        if let Message::ToolResult(result) = message.as_ref()
            && result.tool_name == NAME
            && let Some(Value::Array(loaded)) = result
                .details
                .as_ref()
                .and_then(|details| details.get("loaded"))
        {
            names.extend(loaded.iter().filter_map(Value::as_str));
        }
    }
    deferred
        .iter()
        .filter(|spec| names.contains(spec.name.as_str()))
        .cloned()
        .collect()
}

/// The `tool_search` tool over one run's deferred specs: those deferred
/// when the kernel was built, and those of tools that joined late past
/// their share ([`ToolSearch::defer`]).
#[derive(Clone, Default)]
pub(crate) struct ToolSearch {
    deferred: Arc<std::sync::Mutex<Vec<ToolSpec>>>,
}

impl ToolSearch {
    pub(crate) fn new(deferred: Vec<ToolSpec>) -> Self {
        Self {
            deferred: Arc::new(std::sync::Mutex::new(deferred)),
        }
    }

    /// Adds specs it can return.
    pub(crate) fn defer(&self, specs: &[ToolSpec]) {
        if let Ok(mut deferred) = self.deferred.lock() {
            deferred.extend_from_slice(specs);
        }
    }

    /// Its own spec, for a request's tools.
    pub(crate) fn spec(&self) -> ToolSpec {
        ToolSpec::new(NAME, self.description(), self.parameters())
    }

    /// The specs `arguments` ask for: by exact name, else by a query's
    /// words all found in the name or description (case-insensitive).
    fn find(&self, arguments: &Value) -> Vec<ToolSpec> {
        let Ok(deferred) = self.deferred.lock() else {
            return Vec::new();
        };
        let names: Vec<&str> = arguments["names"]
            .as_array()
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let query = arguments["query"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase();
        let words: Vec<&str> = query.split_whitespace().collect();
        deferred
            .iter()
            .filter(|spec| {
                names.contains(&spec.name.as_str())
                    || (!words.is_empty() && {
                        let haystack = format!("{} {}", spec.name, spec.description).to_lowercase();
                        words.iter().all(|word| haystack.contains(word))
                    })
            })
            .take(MAX_RESULTS)
            .cloned()
            .collect()
    }
}

impl Tool for ToolSearch {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Loads the full schemas of tools listed in the system prompt as available but not \
         loaded. Give `names` (exact tool names) or a `query` (words to find in their names \
         and descriptions); at most 10 tools are returned. After this, call them as usual."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "names": {"type": "array", "items": {"type": "string"}, "description": "Exact tool names."},
                "query": {"type": "string", "description": "Words to search for."}
            },
            "additionalProperties": false
        })
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }

    fn intent(&self, _arguments: &Value, _workspace: &Workspace) -> OperationIntent {
        // Reads only the specs it holds: no effect anywhere.
        OperationIntent::new(IntentKind::Read, IntentScope::Workspace)
    }

    fn approval_binding(
        &self,
        _arguments: &Value,
        _workspace: &Workspace,
        _env: &keel_tools::env::HostEnv,
    ) -> Option<Value> {
        Some(Value::Null)
    }

    fn execute(&self, arguments: Value, _context: ToolContext) -> ToolFuture<'_> {
        let found = self.find(&arguments);
        let loaded: Vec<&str> = found.iter().map(|spec| spec.name.as_str()).collect();
        let text = match found.is_empty() {
            true => {
                "No tool matches; the system prompt lists the tools that can be loaded.".to_owned()
            }
            false => serde_json::to_string_pretty(&found).unwrap_or_default(),
        };
        let output = ToolOutput::text(text).with_details(json!({ "loaded": loaded }));
        Box::pin(async move { Ok(output) })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec::new(name, description, json!({"type": "object"}))
    }

    #[test]
    fn tools_are_deferred_only_past_their_share() {
        let specs = vec![spec("a", &"word ".repeat(200)), spec("b", "short")];
        let cost: u64 = specs.iter().map(spec_tokens).sum();
        assert!(Deferral::new(cost * 20, 0.10).defer(&specs).is_empty());
        assert_eq!(Deferral::new(cost * 5, 0.10).defer(&specs).len(), 2);
        // What was counted before counts too.
        let counted = Deferral::new(cost * 15, 0.10).counting(&specs);
        assert_eq!(counted.defer(&specs).len(), 2);
    }

    #[test]
    fn a_search_finds_by_name_or_by_every_word_of_a_query() {
        let search = ToolSearch::new(vec![
            spec("mcp__fs__read_file", "Read a file from disk"),
            spec("mcp__fs__write_file", "Write a file to disk"),
            spec("mcp__web__fetch", "Fetch a URL"),
        ]);
        let names = |arguments: Value| -> Vec<String> {
            search
                .find(&arguments)
                .iter()
                .map(|spec| spec.name.clone())
                .collect()
        };
        assert_eq!(
            names(json!({"names": ["mcp__web__fetch"]})),
            ["mcp__web__fetch"]
        );
        assert_eq!(
            names(json!({"query": "FILE disk"})),
            ["mcp__fs__read_file", "mcp__fs__write_file"]
        );
        assert_eq!(
            names(json!({"query": "write disk"})),
            ["mcp__fs__write_file"]
        );
        assert!(names(json!({})).is_empty());
    }
}
