//! Extensions: what a host registered on a kernel, the fixed hook points
//! and the outcomes each point allows (docs/extensions.md).
//!
//! These are the wire names of the kernel's extension machinery: the
//! `configuration` entry records each extension as an [`ExtensionRecord`],
//! and the run's extension events name a [`HookPoint`] and a
//! [`HookOutcomeKind`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One extension as the `configuration` entry and the
/// `extension_registered` event record it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ExtensionRecord {
    /// Its unique name.
    pub name: String,
    /// Its version, as the extension states it (an MCP server's from its
    /// `initialize` answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The tools it registered, by the names the model calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// The hook points it handles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hook_points: Vec<HookPoint>,
    /// The session entry kinds it registered (`custom` entries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entry_kinds: Vec<String>,
}

impl ExtensionRecord {
    /// An extension named `name` that registered nothing yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: None,
            tools: Vec::new(),
            hook_points: Vec::new(),
            entry_kinds: Vec::new(),
        }
    }
}

/// A fixed place in a run where hooks are dispatched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HookPoint {
    /// The prompt, before it is stored: observe, transform (the content),
    /// supplement (text added to it), block (the run fails).
    Input,
    /// After the prompt is stored, before the first request: observe,
    /// supplement (a user message of context), block (the run fails).
    BeforeRun,
    /// The assembled context of each request: observe, supplement (text
    /// added to that request's system prompt, not stored).
    Context,
    /// Each provider request as sent: observe.
    ProviderRequest,
    /// Each complete provider response: observe.
    ProviderResponse,
    /// Each tool call after argument validation, before the permission
    /// policy classifies it: observe, transform (the arguments, validated
    /// and classified again), block (a `blocked` tool error).
    ToolCall,
    /// Each tool result before the batch's results are stored: observe,
    /// transform (the content), block (the result becomes a `blocked`
    /// tool error).
    ToolResult,
    /// Before a compaction's summary request: observe, supplement (text
    /// added to the summary instructions).
    Compaction,
    /// The run's end: observe.
    RunEnd,
    /// A turn began: observe.
    TurnStart,
    /// A turn ended: observe.
    TurnEnd,
}

impl HookPoint {
    /// Every point, in the order a run meets them.
    pub const ALL: [HookPoint; 11] = [
        Self::Input,
        Self::BeforeRun,
        Self::TurnStart,
        Self::Context,
        Self::ProviderRequest,
        Self::ProviderResponse,
        Self::ToolCall,
        Self::ToolResult,
        Self::TurnEnd,
        Self::Compaction,
        Self::RunEnd,
    ];

    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Input => "input",
            Self::BeforeRun => "before_run",
            Self::Context => "context",
            Self::ProviderRequest => "provider_request",
            Self::ProviderResponse => "provider_response",
            Self::ToolCall => "tool_call",
            Self::ToolResult => "tool_result",
            Self::Compaction => "compaction",
            Self::RunEnd => "run_end",
            Self::TurnStart => "turn_start",
            Self::TurnEnd => "turn_end",
        }
    }

    /// The point with this wire name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|point| point.as_str() == name)
    }

    /// The outcomes a handler may give here; any other is rejected and
    /// reported (`hook_outcome_rejected`).
    pub fn allowed(self) -> &'static [HookOutcomeKind] {
        use HookOutcomeKind::{Block, Observe, Supplement, Transform};
        match self {
            Self::Input => &[Observe, Transform, Supplement, Block],
            Self::BeforeRun => &[Observe, Supplement, Block],
            Self::Context | Self::Compaction => &[Observe, Supplement],
            Self::ToolCall | Self::ToolResult => &[Observe, Transform, Block],
            Self::ProviderRequest
            | Self::ProviderResponse
            | Self::RunEnd
            | Self::TurnStart
            | Self::TurnEnd => &[Observe],
        }
    }

    /// Whether a handler here may give `outcome`.
    pub fn allows(self, outcome: HookOutcomeKind) -> bool {
        self.allowed().contains(&outcome)
    }
}

/// The kinds of outcome a hook handler gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HookOutcomeKind {
    /// Nothing changes.
    Observe,
    /// The value at the point is replaced (and checked again).
    Transform,
    /// Text is added as extra context.
    Supplement,
    /// What the point guards does not happen.
    Block,
}

impl HookOutcomeKind {
    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Observe => "observe",
            Self::Transform => "transform",
            Self::Supplement => "supplement",
            Self::Block => "block",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_parses_from_its_wire_name_and_allows_observe() {
        for point in HookPoint::ALL {
            assert_eq!(HookPoint::parse(point.as_str()), Some(point));
            let wire = serde_json::to_value(point).unwrap_or_default();
            assert_eq!(wire, point.as_str());
            assert!(point.allows(HookOutcomeKind::Observe));
        }
        assert_eq!(HookPoint::parse("tool-call"), None);
        assert!(!HookPoint::RunEnd.allows(HookOutcomeKind::Block));
        assert!(!HookPoint::ToolCall.allows(HookOutcomeKind::Supplement));
    }
}
