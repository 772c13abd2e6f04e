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
use crate::tool_search::{Deferral, ToolSearch};

/// One run's late tools, and its `tool_search`.
pub(crate) struct LateTools {
    /// Sources that have not answered yet, with their extension's name and
    /// whether its tools are deferrable.
    pending: Vec<(String, bool, Arc<dyn ToolSource>)>,
    /// The tools that joined, and `tool_search` once a tool is deferred.
    registry: ToolRegistry,
    /// The run's `tool_search`, once a tool is deferred.
    search: Option<ToolSearch>,
    /// When joining deferrable tools are deferred.
    deferral: Deferral,
}

/// One source that answered.
pub(crate) struct Joined {
    /// Why it has no tools, when it failed.
    pub(crate) failed: Option<String>,
    /// Its tools that are deferred (listed by name; `tool_search`).
    pub(crate) deferred: Vec<ToolSpec>,
    /// `tool_search`'s spec, when this join made the run's first deferral.
    pub(crate) search: Option<ToolSpec>,
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
        let mut registry = ToolRegistry::new();
        let search = (!parts.deferred.is_empty()).then(|| {
            let search = ToolSearch::new(parts.deferred.clone());
            // The registry is empty: the name is free.
            let _ = registry.register(Arc::new(search.clone()));
            search
        });
        Self {
            pending: parts.sources.clone(),
            registry,
            search,
            deferral: Deferral::from_parts(parts.deferral),
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
        for (_, _, source) in &self.pending {
            if source.required() {
                source.settled().await;
            }
        }
        let required: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, _, source)| source.required())
            .map(|(name, _, _)| name.clone())
            .collect();
        if required.is_empty() {
            return Ok(Vec::new());
        }
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
        if let Some((name, _, _)) = self.pending.iter().find(|(_, _, source)| source.required()) {
            return Err(format!("the required extension `{name}` did not settle"));
        }
        Ok(joined)
    }

    /// Splits a deferrable source's specs into those offered in full and
    /// those deferred, counting them; the first deferral of the run makes
    /// its `tool_search` (whose spec is returned then).
    fn defer(&mut self, specs: Vec<ToolSpec>) -> (Vec<ToolSpec>, Vec<ToolSpec>, Option<ToolSpec>) {
        let deferred = self.deferral.defer(&specs);
        self.deferral = self.deferral.counting(&specs);
        if deferred.is_empty() {
            return (specs, Vec::new(), None);
        }
        let mut made = None;
        let search = self.search.get_or_insert_with(|| {
            let search = ToolSearch::default();
            made = Some(search.spec());
            search
        });
        search.defer(&deferred);
        if made.is_some() {
            // Keel reserves the name: no other tool has it.
            let _ = self.registry.register(Arc::new(search.clone()));
        }
        (Vec::new(), deferred, made)
    }

    /// Asks each pending source; registers the tools of those that answered.
    pub(crate) fn join(&mut self, fixed: &ToolRegistry) -> Vec<Joined> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let mut joined = Vec::new();
        let mut still = Vec::new();
        for (extension, deferrable, source) in std::mem::take(&mut self.pending) {
            let Some(answer) = source.ready() else {
                still.push((extension, deferrable, source));
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
            let (specs, deferred, search) = match deferrable {
                true => self.defer(specs),
                false => (specs, Vec::new(), None),
            };
            joined.push(Joined {
                failed,
                deferred,
                search,
                record,
                specs,
                clashes,
            });
        }
        self.pending = still;
        joined
    }
}
