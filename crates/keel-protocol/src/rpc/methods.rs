//! The host protocol's methods and notifications: their names, and each
//! method's parameters (`<Name>Params`) and result (`<Name>Response`).
//!
//! The broker in keel-host applies them (`keel_host::broker`); the
//! transports (`keel rpc`, `keel serve`) only frame them. Every type here
//! is part of the public wire format: its JSON Schema is generated
//! ([`crate::schema::all`]) and checked into `schema/`.
//!
//! Conventions (after Codex's app-server): methods are `<resource>/<verb>`;
//! optional parameters may be omitted; lists that can grow without bound
//! are cursor-paginated (`cursor`, `limit` in; `next_cursor` out, absent on
//! the last page); ids are the full ids the kernel and the store use.
//!
//! `run/steer` and `run/follow_up` put a message in the run's queue:
//! steering is delivered at the next model turn, a follow-up only when the
//! run would otherwise settle (the difference is documented once, on
//! keel-kernel's `AgentRun`). `run/queue` lists what still waits and
//! `run/queue/clear` takes it back.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Entry, HostDecision, PermissionMode, PermissionScope, QueueKind, QueuedMessage, RunEvent,
    RunResult, TimestampMs,
};

/// Every method a client may call, in the order the docs list them.
pub const METHODS: &[&str] = &[
    "initialize",
    "run/start",
    "run/steer",
    "run/follow_up",
    "run/cancel",
    "run/result",
    "run/subscribe",
    "run/queue",
    "run/queue/clear",
    "permission/resolve",
    "session/list",
    "session/get",
    "session/tree",
    "session/fork",
    "session/set_leaf",
    "session/compact",
    "session/resume",
    "models/list",
];

/// The notification that carries one run event: [`RunEventNotification`].
pub const RUN_EVENT: &str = "run/event";

/// The notification that ends a subscription whose client did not keep up:
/// [`EventsLaggedNotification`].
pub const EVENTS_LAGGED: &str = "run/events_lagged";

/// Every notification the server sends.
pub const NOTIFICATIONS: &[&str] = &[RUN_EVENT, EVENTS_LAGGED];

// ---------------------------------------------------------------------------
// initialize

/// `initialize`: who the client is. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct InitializeParams {
    /// The client's name, for logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_name: Option<String>,
    /// The client's version, for logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
    /// The protocol version the client speaks; a different one is refused
    /// (`invalid_params`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<u32>,
}

/// `initialize`'s result: the server and what it can do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct InitializeResponse {
    /// [`super::PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// `keel`.
    pub server_name: String,
    /// Keel's version.
    pub server_version: String,
    /// What this server supports.
    pub capabilities: Capabilities,
}

/// What a server supports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Capabilities {
    /// The methods it answers ([`METHODS`]).
    pub methods: Vec<String>,
    /// The notifications it sends ([`NOTIFICATIONS`]).
    pub notifications: Vec<String>,
    /// The permission modes a run may take.
    pub modes: Vec<PermissionMode>,
    /// The scopes a permission answer may have.
    pub permission_scopes: Vec<PermissionScope>,
}

// ---------------------------------------------------------------------------
// run/*

/// `run/start`: a prompt, run in a workspace, in a new or existing session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunStartParams {
    /// The user's prompt.
    pub prompt: String,
    /// The workspace root, an absolute path on the server (required: the
    /// server never runs in its own current directory).
    pub workspace: String,
    /// Continue this session (full id, or a unique prefix or suffix) on its
    /// active leaf; a new session when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// With `session_id`: fork that session at this entry and run in the
    /// fork (the source is only read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_entry_id: Option<String>,
    /// The provider by name (default: the server's configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model id or alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The permission mode, fixed for the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PermissionMode>,
    /// The built-in tools by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Fail the run after this many turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Fail the run once its cost passes this many USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Whether this connection receives the run's events from its first
    /// (default true); without it, `run/subscribe` later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscribe: Option<bool>,
}

/// `run/start`'s result (and `session/resume`'s).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunStartResponse {
    /// The run, for every later `run/*` call.
    pub run_id: String,
    /// The session the run writes to.
    pub session_id: String,
}

/// `run/steer`: a steering message for a run (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunSteerParams {
    /// The run.
    pub run_id: String,
    /// The message.
    pub text: String,
}

/// `run/follow_up`: a follow-up message for a run (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunFollowUpParams {
    /// The run.
    pub run_id: String,
    /// The message.
    pub text: String,
}

/// The result of `run/steer` and `run/follow_up`: the message is in the
/// run's queue (a `message_queued` event follows; `run/queue` lists it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunQueuedResponse {
    /// The run.
    pub run_id: String,
    /// The queue it went to.
    pub queue: QueueKind,
}

impl RunQueuedResponse {
    /// A message queued on run `run_id`'s `queue`.
    pub fn new(run_id: impl Into<String>, queue: QueueKind) -> Self {
        Self {
            run_id: run_id.into(),
            queue,
        }
    }
}

/// `run/steer`'s result.
pub type RunSteerResponse = RunQueuedResponse;

/// `run/follow_up`'s result.
pub type RunFollowUpResponse = RunQueuedResponse;

/// `run/cancel`: cancels a run. Idempotent; a finished run is left as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunCancelParams {
    /// The run.
    pub run_id: String,
}

/// `run/cancel`'s result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunCancelResponse {
    /// Whether the run was still active when asked (`false`: it had
    /// already ended and nothing changed).
    pub was_active: bool,
}

/// `run/result`: waits for a run's end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunResultParams {
    /// The run.
    pub run_id: String,
}

/// `run/result`'s result: the run's terminal result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunResultResponse {
    /// The same state, message and error as the terminal event.
    pub result: RunResult,
}

impl RunResultResponse {
    /// The run's `result`.
    pub fn new(result: RunResult) -> Self {
        Self { result }
    }
}

/// `run/subscribe`: this connection receives the run's events after
/// `after_seq`, every one exactly once, then the live tail.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunSubscribeParams {
    /// The run.
    pub run_id: String,
    /// The last `seq` the client has; absent: from the run's first event.
    /// Older than the run's event ring holds → `events_lagged`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
}

/// `run/subscribe`'s result. The replayed events follow as `run/event`
/// notifications.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunSubscribeResponse {
    /// The run.
    pub run_id: String,
    /// Its session.
    pub session_id: String,
    /// The oldest `seq` the ring still holds (absent: no event yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_seq: Option<u64>,
    /// The `seq` the next event will have.
    pub next_seq: u64,
    /// Whether the run has already ended (the replay then ends with its
    /// terminal event and nothing follows).
    pub finished: bool,
}

/// `run/queue`: what a run has queued and not yet injected.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunQueueParams {
    /// The run.
    pub run_id: String,
}

/// `run/queue`'s result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunQueueResponse {
    /// The queue, in delivery order (steering before follow-ups).
    pub queued: Vec<QueuedMessage>,
}

/// `run/queue/clear`: takes queued messages back before they are injected.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunQueueClearParams {
    /// The run.
    pub run_id: String,
    /// Only this queue (absent: both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueKind>,
}

/// `run/queue/clear`'s result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunQueueClearResponse {
    /// What was removed, in delivery order.
    pub cleared: Vec<QueuedMessage>,
}

/// `permission/resolve`: answers a `permission_requested` event. Any
/// connection of the run's tenant may answer; the first answer wins, a
/// later one gets `not_found`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PermissionResolveParams {
    /// The run.
    pub run_id: String,
    /// The request, from the event.
    pub request_id: String,
    /// `approve` or `deny`.
    pub decision: HostDecision,
    /// `once` (default) or `always` (a session rule for matching calls).
    #[serde(default)]
    pub scope: PermissionScope,
}

impl PermissionResolveParams {
    /// The answer `decision` with `scope` to permission request
    /// `request_id` of run `run_id`.
    pub fn new(
        run_id: impl Into<String>,
        request_id: impl Into<String>,
        decision: HostDecision,
        scope: PermissionScope,
    ) -> Self {
        Self {
            run_id: run_id.into(),
            request_id: request_id.into(),
            decision,
            scope,
        }
    }
}

/// `permission/resolve`'s result: the answer reached the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct PermissionResolveResponse {
    /// The request answered.
    pub request_id: String,
}

// ---------------------------------------------------------------------------
// session/*

/// `session/list`: the store's sessions, newest activity first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionListParams {
    /// Only the sessions of this workspace (absolute path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// From a previous page's `next_cursor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Sessions per page (default 50, at most 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// One session in a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SessionSummary {
    /// The session id.
    pub id: String,
    /// The first user text, shortened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Number of entries.
    pub entries: u64,
    /// When it was created.
    pub created: TimestampMs,
    /// When its last entry was appended.
    pub last_activity: TimestampMs,
    /// The session it was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// The workspace it was created for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Why it cannot be read, if it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Whether a run of this server is writing to it now.
    pub busy: bool,
}

/// `session/list`'s result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SessionListResponse {
    /// One page of sessions.
    pub sessions: Vec<SessionSummary>,
    /// The next page's cursor; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Which entries `session/get` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SessionView {
    /// The active branch, root to leaf.
    #[default]
    Active,
    /// Every entry of the tree, in append order.
    All,
}

/// `session/get`: a session's entries, paginated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionGetParams {
    /// The session (full id, or a unique prefix or suffix).
    pub session_id: String,
    /// The active branch (default) or the whole tree.
    #[serde(default)]
    pub view: SessionView,
    /// From a previous page's `next_cursor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Entries per page (default 200, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `session/get`'s result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SessionGetResponse {
    /// The session's full id.
    pub session_id: String,
    /// Its active leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_id: Option<String>,
    /// One page of entries.
    pub entries: Vec<Entry>,
    /// The next page's cursor; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `session/tree`: the shape of a session's tree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionTreeParams {
    /// The session.
    pub session_id: String,
}

/// One entry of a session tree, without its payload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct TreeNode {
    /// The entry's id.
    pub id: String,
    /// Its parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// Its kind (`message`, `checkpoint`, …).
    pub kind: String,
    /// When it was created.
    pub timestamp: TimestampMs,
    /// Whether it is on the active branch.
    pub active: bool,
}

/// `session/tree`'s result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SessionTreeResponse {
    /// The session's full id.
    pub session_id: String,
    /// Its active leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_id: Option<String>,
    /// Every entry, in append order.
    pub nodes: Vec<TreeNode>,
}

/// `session/fork`: a new session holding the path from the root to an
/// entry; the source is only read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionForkParams {
    /// The source session.
    pub session_id: String,
    /// The entry to fork at (full id, or a unique prefix or suffix).
    pub entry_id: String,
}

/// `session/fork`'s result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SessionForkResponse {
    /// The new session.
    pub session_id: String,
    /// Its leaf: the entry forked at, or the last result that closed the
    /// calls it left without results.
    pub leaf_id: String,
    /// The calls the fork point left without results, closed in the new
    /// session as not run (their call ids).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed_calls: Vec<String>,
}

/// `session/set_leaf`: moves a session's active leaf (a branch switch).
/// Refused (`session_busy`) while a run writes to the session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionSetLeafParams {
    /// The session.
    pub session_id: String,
    /// The new leaf (full id, or a unique prefix or suffix).
    pub entry_id: String,
}

/// `session/set_leaf`'s result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SessionSetLeafResponse {
    /// The session's full id.
    pub session_id: String,
    /// The new leaf's full id.
    pub leaf_id: String,
}

/// `session/compact`: summarises the oldest part of a session's active
/// branch into a checkpoint now, with the model of the kernel the
/// workspace and choices give. Refused while a run writes to the session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionCompactParams {
    /// The session.
    pub session_id: String,
    /// The workspace (default: the one the session records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Extra focus for the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The provider by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model id or alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `session/compact`'s result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SessionCompactResponse {
    /// The checkpoint entry, now the session's leaf.
    pub checkpoint_id: String,
    /// Estimated tokens of the model context before.
    pub tokens_before: u64,
    /// Estimated tokens after.
    pub tokens_after: u64,
    /// Entries the checkpoint covers.
    pub covered_entries: u64,
}

/// `session/resume`: continues the run a crash interrupted in a session
/// (as `keel resume`), under the mode and limits given now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionResumeParams {
    /// The session.
    pub session_id: String,
    /// The workspace (default: the one the session records). Another
    /// workspace than the session's is recorded and warned about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The provider by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model id or alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The permission mode of the resumed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PermissionMode>,
    /// The built-in tools by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Fail the run after this many turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Fail the run once its cost passes this many USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Whether this connection receives the run's events (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscribe: Option<bool>,
}

/// `session/resume`'s result.
pub type SessionResumeResponse = RunStartResponse;

// ---------------------------------------------------------------------------
// models/list

/// `models/list`: the providers and models of the server's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ModelsListParams {
    /// Only this provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// One provider of the catalog.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ProviderModels {
    /// The provider's name.
    pub name: String,
    /// Its default model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_model: Option<String>,
    /// Whether its key is available to the server (never the key itself);
    /// `true` for providers that need none.
    pub key_available: bool,
    /// Its known models.
    pub models: Vec<ModelSummary>,
    /// Short names: alias → model id.
    pub aliases: BTreeMap<String, String>,
}

/// What the catalog knows about one model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ModelSummary {
    /// The model id.
    pub id: String,
    /// Tokens it accepts in one request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Tokens it may write in one response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output: Option<u32>,
    /// USD per million uncached input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_price: Option<f64>,
    /// USD per million output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_price: Option<f64>,
}

/// `models/list`'s result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ModelsListResponse {
    /// The providers, by name.
    pub providers: Vec<ProviderModels>,
}

// ---------------------------------------------------------------------------
// notifications

/// `run/event`: one event of a run this connection subscribed to. The
/// run's terminal event (`run_settled`, `run_cancelled`, `run_failed`)
/// comes exactly once, last, with `result` set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunEventNotification {
    /// The run.
    pub run_id: String,
    /// The event.
    pub event: RunEvent,
    /// With the terminal event only: the run's result, as `run/result`
    /// returns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<RunResult>,
}

impl RunEventNotification {
    /// `event` of run `run_id`, without the run's result.
    pub fn new(run_id: impl Into<String>, event: RunEvent) -> Self {
        Self {
            run_id: run_id.into(),
            event,
            result: None,
        }
    }
}

/// `run/events_lagged`: this connection read too slowly and its
/// subscription to the run ended (the server never buffers without
/// bound). `run/subscribe` with `after_seq` = `last_seq` continues it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct EventsLaggedNotification {
    /// The run.
    pub run_id: String,
    /// Its session.
    pub session_id: String,
    /// The last `seq` delivered to this connection (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seq: Option<u64>,
}
