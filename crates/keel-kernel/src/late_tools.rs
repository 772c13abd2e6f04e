//! Tools that join a run when their source is ready ([`ToolSource`]): an
//! MCP server still starting when the run began.
//!
//! Invariants: a source is asked before each turn until it answers, then
//! never again in that run; a joined tool is validated, classified and
//! hooked like a built-in (the tool pipeline looks it up after the
//! kernel's own); a tool whose name is taken is left out, never replaces
//! the one that has it.

use std::sync::Arc;

use keel_protocol::{ExtensionRecord, ToolSpec};
use keel_tools::ToolRegistry;

use crate::extension::ToolSource;
use crate::parts::KernelParts;

/// One run's late tools.
pub(crate) struct LateTools {
    /// Sources that have not answered yet, with their extension's name.
    pending: Vec<(String, Arc<dyn ToolSource>)>,
    /// The tools that joined.
    registry: ToolRegistry,
}

/// One source that answered.
pub(crate) struct Joined {
    /// Why it has no tools, when it failed.
    pub(crate) failed: Option<String>,
    /// Its extension, with the tools that joined and its version.
    pub(crate) record: ExtensionRecord,
    /// The specs to offer from now on.
    pub(crate) specs: Vec<ToolSpec>,
    /// Tools left out because their names were taken.
    pub(crate) clashes: Vec<String>,
}

impl LateTools {
    /// The late tools of a run of `parts`: none joined yet.
    pub(crate) fn new(parts: &KernelParts) -> Self {
        Self {
            pending: parts.sources.clone(),
            registry: ToolRegistry::new(),
        }
    }

    /// The tools that joined.
    pub(crate) fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// Waits for each pending required source to settle; the first that
    /// settles without tools fails the run's start (its extension's name
    /// and why).
    pub(crate) async fn await_required(
        &mut self,
        fixed: &ToolRegistry,
    ) -> Result<Vec<Joined>, String> {
        for (_, source) in &self.pending {
            if source.required() {
                source.settled().await;
            }
        }
        let required: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, source)| source.required())
            .map(|(name, _)| name.clone())
            .collect();
        let joined = self.join(fixed);
        for done in &joined {
            if required.contains(&done.record.name)
                && let Some(reason) = &done.failed
            {
                return Err(format!(
                    "the required extension `{}` did not start: {reason}",
                    done.record.name
                ));
            }
        }
        if let Some((name, _)) = self.pending.iter().find(|(_, source)| source.required()) {
            return Err(format!("the required extension `{name}` did not settle"));
        }
        Ok(joined)
    }

    /// Asks each pending source; registers the tools of those that answered.
    pub(crate) fn join(&mut self, fixed: &ToolRegistry) -> Vec<Joined> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let mut joined = Vec::new();
        let mut still = Vec::new();
        for (extension, source) in std::mem::take(&mut self.pending) {
            let Some(answer) = source.ready() else {
                still.push((extension, source));
                continue;
            };
            let mut record = ExtensionRecord::new(extension);
            record.version = source.version();
            let (tools, failed) = match answer {
                Ok(tools) => (tools, None),
                Err(reason) => (Vec::new(), Some(reason)),
            };
            let mut specs = Vec::new();
            let mut clashes = Vec::new();
            for tool in tools {
                let name = tool.name().to_owned();
                if fixed.get(&name).is_some() {
                    clashes.push(name);
                    continue;
                }
                let spec = ToolSpec::new(name.clone(), tool.description(), tool.parameters());
                match self.registry.register(tool) {
                    Ok(()) => {
                        record.tools.push(name);
                        specs.push(spec);
                    }
                    Err(_) => clashes.push(name),
                }
            }
            joined.push(Joined {
                failed,
                record,
                specs,
                clashes,
            });
        }
        self.pending = still;
        joined
    }
}
