//! The context pipeline: the one place a provider request is built.
//!
//! Every request a run sends — each turn's, and each compaction's summary
//! request — is assembled here, in this fixed order, and nothing else
//! reaches a provider:
//!
//! 1. **System prompt** — the host's (`AgentKernelBuilder::system_prompt`)
//!    or Keel's default (`system_prompt.md`), then the host's addition
//!    (`append_system_prompt`).
//! 2. **Tool specs** — the registered tools, in registration order, in the
//!    request's `tools` — except deferred tools (`tool_search`): those are
//!    listed by name in the system prompt, after the host's addition, and
//!    a request carries the ones a `tool_search` result in its context
//!    loaded, after the others.
//! 3. **Project instructions** — the `AGENTS.md` / `CLAUDE.md` files the run
//!    loaded (`project.rs`), outermost first, appended to the system prompt.
//! 4. **Environment** — date, working directory, OS, shell, whether the
//!    workspace is a git repository; appended last to the system prompt
//!    (unless the host turned it off: `AgentKernelBuilder::environment`).
//! 5. **The latest checkpoint's summary** — as the first message.
//! 6. **The active branch after the checkpoint's first kept entry** — its
//!    messages, oldest first (`context::project`); no sibling branch, no
//!    partial output.
//! 7. **Injected messages** — steering and follow-up messages the host
//!    queued. They are persisted as user entries at their drain point before
//!    the next request (a fact is in the session before it is acted on), so
//!    they arrive as the newest messages of the branch; a message still
//!    queued is in no request.
//!
//! Items 1–4 are fixed for a run ([`Frame`], built once when it starts);
//! items 5–7 come from the session for each request. Provider-specific
//! adaptation of the history (`keel_provider::transform`) is the last step.

use std::sync::Arc;

use keel_protocol::{Message, ToolSpec, UserMessage};
use keel_provider::ModelRequest;

use crate::parts::KernelParts;
use crate::project::{Environment, Loaded};

/// The frame of a run that starts now: loads the project instructions and
/// detects the environment; also returns what was loaded (the files for
/// `run_started`, the refused files for `warning` events).
pub(crate) fn open(parts: &KernelParts) -> (Frame, Loaded) {
    let root = parts.workspace.root();
    let instructions = crate::project::load(&parts.instructions, root);
    let environment = parts
        .environment
        .then(|| Environment::detect(root, crate::ids::now_ms(), parts.shell.as_deref()));
    let frame = Frame::new(parts, &instructions, environment.as_ref());
    (frame, instructions)
}

/// The parts of every request of one run that do not change between turns.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frame {
    /// The provider's name (for history adaptation).
    pub(crate) provider: String,
    /// The model id.
    pub(crate) model: String,
    /// Items 1, 3 and 4: the composed system prompt.
    pub(crate) system_prompt: String,
    /// Item 2, without the deferred tools.
    pub(crate) tools: Vec<ToolSpec>,
    /// The deferred tools (`crate::tool_search`), listed in the system
    /// prompt; a request carries those a `tool_search` result loaded.
    pub(crate) deferred: Vec<ToolSpec>,
    /// The output limit of a turn's request.
    pub(crate) max_output_tokens: Option<u32>,
}

impl Frame {
    /// The frame of a run of `parts`, with the instructions it loaded and
    /// its environment.
    pub(crate) fn new(
        parts: &KernelParts,
        instructions: &Loaded,
        environment: Option<&Environment>,
    ) -> Self {
        Self {
            provider: parts.provider.name().to_owned(),
            model: parts.model.clone(),
            system_prompt: system_prompt(
                &parts.system_prompt,
                parts.append_system_prompt.as_deref(),
                &instructions.text,
                &parts.deferred,
                environment,
            ),
            tools: {
                let mut tools: Vec<ToolSpec> = parts
                    .tools
                    .specs()
                    .into_iter()
                    .filter(|spec| {
                        !parts
                            .deferred
                            .iter()
                            .any(|deferred| deferred.name == spec.name)
                    })
                    .collect();
                // The run's `tool_search` (`crate::late_tools`) finds them.
                if !parts.deferred.is_empty() {
                    tools.push(crate::tool_search::ToolSearch::default().spec());
                }
                tools
            },
            deferred: parts.deferred.clone(),
            max_output_tokens: parts.max_output_tokens,
        }
    }

    /// A turn's request: the frame, then `messages` (items 5–7, as
    /// `context::project` gives them, shared with the context branch).
    pub(crate) fn request(&self, messages: Vec<Arc<Message>>) -> ModelRequest {
        let loaded = crate::tool_search::loaded(&self.deferred, &messages);
        {
            let mut model_request = ModelRequest::new(
                self.model.clone(),
                self.system_prompt.clone(),
                keel_provider::transform::adapt_history(
                    crate::ids::for_wire(messages),
                    &self.provider,
                    &self.model,
                ),
            );
            model_request.tools = self.tools.clone();
            model_request.tools.extend(loaded);
            model_request.max_output_tokens = self.max_output_tokens;
            model_request
        }
    }

    /// A compaction's summary request: the fixed summary prompt, no tools,
    /// one user message holding what to summarise.
    pub(crate) fn summary_request(&self, input: String, max_output_tokens: u32) -> ModelRequest {
        {
            let mut model_request = ModelRequest::new(
                self.model.clone(),
                crate::checkpoint::SUMMARY_SYSTEM_PROMPT.to_owned(),
                vec![Arc::new(Message::User(UserMessage::text(input)))],
            );
            model_request.tools = Vec::new();
            model_request.max_output_tokens = Some(max_output_tokens);
            model_request.purpose = keel_provider::RequestPurpose::Summary;
            model_request
        }
    }
}

/// Items 1, 3 and 4 as one system prompt, sections separated by a blank line.
fn system_prompt(
    base: &str,
    append: Option<&str>,
    instructions: &str,
    deferred: &[ToolSpec],
    environment: Option<&Environment>,
) -> String {
    let environment = environment.map(Environment::render).unwrap_or_default();
    let listing = match deferred.is_empty() {
        true => String::new(),
        false => crate::tool_search::listing(deferred),
    };
    [
        base,
        append.unwrap_or_default(),
        &listing,
        instructions,
        &environment,
    ]
    .iter()
    .map(|part| part.trim())
    .filter(|part| !part.is_empty())
    .collect::<Vec<_>>()
    .join("\n\n")
}
