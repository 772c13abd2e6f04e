//! What a host registers on a kernel: [`Extension`]s with their tools,
//! session entry kinds and [`Hook`]s (docs/extensions.md).
//!
//! Registration is fixed: everything is given to the
//! [`crate::AgentKernelBuilder`] before the kernel is built and nothing is
//! added after. Names are unique: an extension's tool may not take a
//! built-in's name unless the host allows that override, and an entry kind
//! belongs to the one extension that registered it.
//!
//! A hook handler sees a [`HookEvent`] and answers a [`HookReply`]: an
//! outcome from the fixed set its [`HookPoint`] allows
//! ([`HookPoint::allowed`]) and, optionally, entries of its own
//! extension's kinds to record. The kernel checks all of it (the `hooks`
//! module): an outcome the point does not allow, a transformed value that
//! fails the point's checks, or an entry of another kind is rejected and
//! reported, never applied. What an extension can never do is built in by
//! having no way to say it: change the permission mode, answer a
//! permission request, or write an entry of a kind it did not register.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use keel_protocol::{ExtensionRecord, HookOutcomeKind, HookPoint};
use keel_tools::Tool;
use serde_json::Value;

/// The time budget of a hook handler unless its [`Hook`] sets one.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// Checks the data of one entry of a registered kind before it is
/// appended; the error says why it does not fit (it is reported, never
/// stored).
pub type EntryValidator = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// One extension: a name, a version, and what it registers.
#[derive(Clone)]
pub struct Extension {
    pub(crate) name: String,
    pub(crate) version: Option<String>,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) hooks: Vec<Hook>,
    pub(crate) entry_kinds: Vec<(String, EntryValidator)>,
    pub(crate) deferrable: bool,
    pub(crate) sources: Vec<Arc<dyn ToolSource>>,
}

/// Tools that join runs when they are ready: an MCP server still starting
/// when a run begins. The kernel asks before each turn; once a source
/// answers, its tools are offered from that turn on (announced by an
/// `extension_registered` event), and it is not asked again in that run.
pub trait ToolSource: Send + Sync {
    /// `None` while the source is still starting; once it settled, its
    /// tools, or why it has none (reported as a warning).
    fn ready(&self) -> Option<Result<Vec<Arc<dyn Tool>>, String>>;

    /// Its version, once known (an MCP server's from its `initialize`).
    fn version(&self) -> Option<String> {
        None
    }

    /// Whether a run may not start without it: the run waits for it to
    /// settle ([`ToolSource::settled`]) before its first request, and
    /// fails (`extension_failed`) when it settles without tools.
    fn required(&self) -> bool {
        false
    }

    /// Resolves once [`ToolSource::ready`] answers; the source bounds the
    /// wait itself (an MCP server's startup timeout). Awaited only for a
    /// required source.
    fn settled(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

impl Extension {
    /// An extension named `name` (unique among the kernel's extensions;
    /// events and the `configuration` entry name it).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: None,
            tools: Vec::new(),
            hooks: Vec::new(),
            entry_kinds: Vec::new(),
            deferrable: false,
            sources: Vec::new(),
        }
    }

    /// Registers tools that join runs when they are ready ([`ToolSource`]).
    /// Their names must not clash with the kernel's tools: a clashing
    /// tool is left out and reported with a warning.
    pub fn tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// Whether its tools may be deferred: listed by name and one-line
    /// description only, their schemas loaded through `tool_search`, when
    /// the deferrable tools' schemas would take more than their share of
    /// the context window ([`crate::AgentKernelBuilder::tool_search_share`]).
    /// An MCP server's tools are; a host's few own tools need not be.
    pub fn deferrable(mut self, deferrable: bool) -> Self {
        self.deferrable = deferrable;
        self
    }

    /// Its version, recorded in the `configuration` entry.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// Registers a tool, offered to the model like a built-in.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Registers a hook handler.
    pub fn hook(mut self, hook: Hook) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Registers a session entry kind: `custom` entries with this
    /// `custom_kind`, which only this extension's handlers may write and
    /// every one of which `validator` passes before it is appended.
    pub fn entry_kind(
        mut self,
        kind: impl Into<String>,
        validator: impl Fn(&Value) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.entry_kinds.push((kind.into(), Arc::new(validator)));
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Debug for Extension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extension")
            .field("name", &self.name)
            .field("version", &self.version)
            .field(
                "tools",
                &self
                    .tools
                    .iter()
                    .map(|tool| tool.name())
                    .collect::<Vec<_>>(),
            )
            .field("hooks", &self.hooks.len())
            .field(
                "entry_kinds",
                &self
                    .entry_kinds
                    .iter()
                    .map(|(kind, _)| kind)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// A handler registered at some hook points.
#[derive(Clone)]
pub struct Hook {
    pub(crate) points: Vec<HookPoint>,
    pub(crate) handler: Arc<dyn HookHandler>,
    pub(crate) matcher: Option<ToolMatcher>,
    pub(crate) timeout: Duration,
    pub(crate) fail_closed: bool,
}

impl Hook {
    /// `handler` at `points`, for every tool, with the default time budget,
    /// failing open.
    pub fn new(points: impl IntoIterator<Item = HookPoint>, handler: Arc<dyn HookHandler>) -> Self {
        Self {
            points: points.into_iter().collect(),
            handler,
            matcher: None,
            timeout: DEFAULT_HOOK_TIMEOUT,
            fail_closed: false,
        }
    }

    /// At `tool_call` and `tool_result`, only calls of tools whose names
    /// match `pattern` ([`ToolMatcher`]); other points are not filtered.
    pub fn matching(mut self, pattern: &str) -> Self {
        self.matcher = Some(ToolMatcher::new(pattern));
        self
    }

    /// The handler's time budget; past it, the handler's answer is ignored
    /// as a failure.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether a handler that fails, panics or runs past its budget blocks
    /// what its point guards (at a point that allows `block`) instead of
    /// being ignored.
    pub fn fail_closed(mut self, fail_closed: bool) -> Self {
        self.fail_closed = fail_closed;
        self
    }
}

/// A tool-name pattern: alternatives separated by `|`, each matched whole
/// and without regard to case (`Write|Edit` is `write|edit`), where `*`
/// stands for any run of characters (`mcp__fs__*`, `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolMatcher {
    alternatives: Vec<String>,
}

impl ToolMatcher {
    /// The matcher of `pattern`; an empty pattern matches every tool.
    pub fn new(pattern: &str) -> Self {
        let alternatives = pattern
            .split('|')
            .map(str::trim)
            .filter(|alternative| !alternative.is_empty())
            .map(str::to_lowercase)
            .collect();
        Self { alternatives }
    }

    /// Whether `tool` matches.
    pub fn matches(&self, tool: &str) -> bool {
        let tool = tool.to_lowercase();
        self.alternatives.is_empty()
            || self
                .alternatives
                .iter()
                .any(|alternative| glob(alternative, &tool))
    }
}

/// `*`-only glob: the parts between stars appear in order, the first at
/// the start and the last at the end.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == text;
    };
    if parts.len() == 1 {
        return pattern == text;
    }
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// What a hook handler is given.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HookEvent {
    /// Where the run is.
    pub point: HookPoint,
    /// The run.
    pub run_id: String,
    /// The run's session.
    pub session_id: String,
    /// The point's data (docs/extensions.md lists it per point): for
    /// `tool_call`, `tool_name`, `call_id` and `arguments`; for
    /// `tool_result`, those and the result's `status`, `content` and
    /// `error`; for `input`, the prompt's `content`; and so on.
    pub payload: Value,
}

/// A handler's answer: an outcome, and entries of its extension's kinds.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HookReply {
    /// What the handler decided.
    pub outcome: HookOutcome,
    /// Entries to record: (kind, data), each of a kind this extension
    /// registered and passing that kind's validator.
    pub entries: Vec<(String, Value)>,
}

impl HookReply {
    /// Nothing changes.
    pub fn observe() -> Self {
        Self::from(HookOutcome::Observe)
    }

    /// The point's value becomes `value` (checked again).
    pub fn transform(value: Value) -> Self {
        Self::from(HookOutcome::Transform(value))
    }

    /// `text` is added as context.
    pub fn supplement(text: impl Into<String>) -> Self {
        Self::from(HookOutcome::Supplement(text.into()))
    }

    /// What the point guards does not happen; `message` tells the model
    /// (or the host) why.
    pub fn block(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::from(HookOutcome::Block {
            code: code.into(),
            message: message.into(),
        })
    }

    /// Adds an entry of `kind` to record.
    pub fn with_entry(mut self, kind: impl Into<String>, data: Value) -> Self {
        self.entries.push((kind.into(), data));
        self
    }
}

impl From<HookOutcome> for HookReply {
    fn from(outcome: HookOutcome) -> Self {
        Self {
            outcome,
            entries: Vec::new(),
        }
    }
}

/// What a handler decided at its point.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HookOutcome {
    /// Nothing changes.
    Observe,
    /// The point's value is replaced by this one, then checked again (a
    /// tool call's arguments against the tool's schema and by the
    /// permission policy).
    Transform(Value),
    /// Text added as context.
    Supplement(String),
    /// What the point guards does not happen.
    Block {
        /// A short machine code of the handler's choosing.
        code: String,
        /// Why, for the model or the host.
        message: String,
    },
}

impl HookOutcome {
    /// Its kind.
    pub fn kind(&self) -> HookOutcomeKind {
        match self {
            Self::Observe => HookOutcomeKind::Observe,
            Self::Transform(_) => HookOutcomeKind::Transform,
            Self::Supplement(_) => HookOutcomeKind::Supplement,
            Self::Block { .. } => HookOutcomeKind::Block,
        }
    }
}

/// A handler's failure: reported, and its outcome ignored (or, fail-closed,
/// the action blocked).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct HookError {
    message: String,
}

impl HookError {
    /// A failure saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// The future a handler returns.
pub type HookFuture<'a> = BoxFuture<'a, Result<HookReply, HookError>>;

/// Code a host runs at hook points. It runs on the kernel's runtime, in a
/// task of its own with a time budget: it must not block the thread.
pub trait HookHandler: Send + Sync {
    /// Answers one event.
    fn handle(&self, event: HookEvent) -> HookFuture<'_>;
}

impl<F, Fut> HookHandler for F
where
    F: Fn(HookEvent) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = Result<HookReply, HookError>> + Send + 'static,
{
    fn handle(&self, event: HookEvent) -> HookFuture<'_> {
        Box::pin(self(event))
    }
}

/// Every hook of a kernel, and the entry kinds its extensions own.
#[derive(Default)]
pub(crate) struct Hooks {
    pub(crate) hooks: Vec<(Arc<str>, Hook)>,
    pub(crate) kinds: HashMap<String, (Arc<str>, EntryValidator)>,
    records: Vec<ExtensionRecord>,
}

/// Why a set of extensions cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ExtensionError(String);

impl ExtensionError {
    pub(crate) fn new(message: String) -> Self {
        Self(message)
    }
}

impl Hooks {
    /// Checks and keeps the extensions' hooks and entry kinds; the tools
    /// are the kernel's to register.
    pub(crate) fn new(extensions: &[Extension]) -> Result<Self, ExtensionError> {
        let mut hooks = Self::default();
        for extension in extensions {
            let name = extension.name.as_str();
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            {
                return Err(ExtensionError(format!(
                    "extension name {name:?} must be letters, digits, `_`, `-` or `.`"
                )));
            }
            if hooks.records.iter().any(|record| record.name == name) {
                return Err(ExtensionError(format!("two extensions are named `{name}`")));
            }
            let owner: Arc<str> = Arc::from(name);
            let mut record = ExtensionRecord::new(name);
            record.version.clone_from(&extension.version);
            record.tools = extension
                .tools
                .iter()
                .map(|tool| tool.name().to_owned())
                .collect();
            for (kind, validator) in &extension.entry_kinds {
                if kind.is_empty() {
                    return Err(ExtensionError(format!(
                        "extension `{name}` registers an entry kind with no name"
                    )));
                }
                if let Some((other, _)) = hooks.kinds.get(kind) {
                    return Err(ExtensionError(format!(
                        "entry kind `{kind}` is registered by both `{other}` and `{name}`"
                    )));
                }
                hooks
                    .kinds
                    .insert(kind.clone(), (owner.clone(), validator.clone()));
                record.entry_kinds.push(kind.clone());
            }
            for hook in &extension.hooks {
                if hook.points.is_empty() {
                    return Err(ExtensionError(format!(
                        "a hook of extension `{name}` is registered at no point"
                    )));
                }
                for point in &hook.points {
                    if !record.hook_points.contains(point) {
                        record.hook_points.push(*point);
                    }
                }
                hooks.hooks.push((owner.clone(), hook.clone()));
            }
            hooks.records.push(record);
        }
        Ok(hooks)
    }

    /// What each extension registered, in registration order.
    pub(crate) fn records(&self) -> &[ExtensionRecord] {
        &self.records
    }

    /// Whether any handler is registered at `point`.
    pub(crate) fn handles(&self, point: HookPoint) -> bool {
        self.hooks
            .iter()
            .any(|(_, hook)| hook.points.contains(&point))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matcher_takes_alternatives_and_stars() {
        let matcher = ToolMatcher::new("edit|write");
        assert!(matcher.matches("edit"));
        assert!(matcher.matches("write"));
        assert!(!matcher.matches("editor"));
        assert!(
            ToolMatcher::new("Write|Edit").matches("write"),
            "case does not matter"
        );
        let matcher = ToolMatcher::new("mcp__fs__*");
        assert!(matcher.matches("mcp__fs__read_file"));
        assert!(!matcher.matches("mcp__git__log"));
        assert!(ToolMatcher::new("*").matches("anything"));
        assert!(ToolMatcher::new("").matches("anything"));
        assert!(ToolMatcher::new("a*b*c").matches("aXbYc"));
        assert!(!ToolMatcher::new("a*b*c").matches("aXcYb"));
        assert!(!ToolMatcher::new("ab*ba").matches("aba"));
    }
}
