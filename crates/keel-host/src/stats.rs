//! What sessions cost and where their time went: `keel session stats`.
//!
//! Everything is read from the session's entries (every branch, in append
//! order), so a session tells the same story wherever it is read:
//! - tokens and cost from each assistant message's usage (a message
//!   without a price counts as a turn of unknown cost);
//! - runs by how they ended (`run_end`), turns (assistant messages), tool
//!   calls by tool (their results, failed ones counted apart);
//! - compactions (checkpoints) and permission decisions by who made them;
//! - time from entry timestamps: an assistant message's time since the
//!   entry it follows is *model time*; the time of the entries of its tool
//!   batch (effect records, permission decisions, results) since the entry
//!   each follows is *tool time*, which includes waits for a permission
//!   answer. A turn's time is its model time and its batch's tool time.
//!   This is time as recorded, to the millisecond of each append.

use std::collections::{BTreeMap, HashMap};

use keel_protocol::{
    DecisionSource, Entry, EntryPayload, Message, PermissionResolution, RunEndState, ToolStatus,
};
use keel_session::SessionStore;
use serde::Serialize;

use crate::HostError;

/// The calls of one tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ToolCalls {
    /// Results recorded.
    pub calls: u64,
    /// Of which failed (an error result).
    pub failed: u64,
}

/// Permission decisions, by who decided and how.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Permissions {
    /// Asked of the host (the user), and how it answered.
    pub asked: u64,
    /// Host answers that allowed.
    pub approved: u64,
    /// Host answers that denied (nobody answering included).
    pub denied: u64,
    /// Decided by the mode's policy without asking.
    pub by_policy: u64,
    /// Decided by a session rule (an earlier `always`).
    pub by_session_rule: u64,
    /// Decided by the kernel (a cancelled run, a recovery).
    pub by_kernel: u64,
}

/// The statistics of one session or of many.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Stats {
    /// How many sessions were read.
    pub sessions: u64,
    /// Runs by how they ended (`settled`, `cancelled`, `failed`), and
    /// `unfinished` for runs without an end (running, or interrupted).
    pub runs: BTreeMap<String, u64>,
    /// Model responses.
    pub turns: u64,
    /// Input tokens (not counting cache reads).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the provider's cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's cache.
    pub cache_write_tokens: u64,
    /// The cost of the turns whose model has prices, in USD.
    pub cost_usd: f64,
    /// Turns whose cost is unknown (no prices for their model).
    pub turns_without_cost: u64,
    /// Tool calls by tool.
    pub tool_calls: BTreeMap<String, ToolCalls>,
    /// Model time in ms (see the module's note on time).
    pub model_ms: u64,
    /// Tool time in ms, permission waits included.
    pub tool_ms: u64,
    /// The longest turn, in ms.
    pub longest_turn_ms: u64,
    /// Compactions (checkpoints written).
    pub compactions: u64,
    /// Permission decisions.
    pub permissions: Permissions,
}

impl Stats {
    /// The mean time of a turn in ms (0 without turns).
    pub fn mean_turn_ms(&self) -> u64 {
        (self.model_ms + self.tool_ms)
            .checked_div(self.turns)
            .unwrap_or(0)
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Stats) {
        self.sessions += other.sessions;
        for (state, count) in &other.runs {
            *self.runs.entry(state.clone()).or_default() += count;
        }
        self.turns += other.turns;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.cost_usd += other.cost_usd;
        self.turns_without_cost += other.turns_without_cost;
        for (tool, calls) in &other.tool_calls {
            let mine = self.tool_calls.entry(tool.clone()).or_default();
            mine.calls += calls.calls;
            mine.failed += calls.failed;
        }
        self.model_ms += other.model_ms;
        self.tool_ms += other.tool_ms;
        self.longest_turn_ms = self.longest_turn_ms.max(other.longest_turn_ms);
        self.compactions += other.compactions;
        let (mine, theirs) = (&mut self.permissions, &other.permissions);
        mine.asked += theirs.asked;
        mine.approved += theirs.approved;
        mine.denied += theirs.denied;
        mine.by_policy += theirs.by_policy;
        mine.by_session_rule += theirs.by_session_rule;
        mine.by_kernel += theirs.by_kernel;
    }
}

/// The statistics of one session's entries (in append order).
pub fn of_entries(entries: &[Entry]) -> Stats {
    let mut stats = Stats {
        sessions: 1,
        ..Stats::default()
    };
    let time: HashMap<&str, u64> = entries
        .iter()
        .map(|entry| (entry.id.as_str(), entry.timestamp))
        .collect();
    let since_parent = |entry: &Entry| {
        entry
            .parent_id
            .as_deref()
            .and_then(|parent| time.get(parent))
            .map_or(0, |before| entry.timestamp.saturating_sub(*before))
    };
    let mut started = 0u64;
    let mut ended = 0u64;
    // The turn being timed: its model time and its batch's tool time.
    let mut turn_ms: Option<u64> = None;
    for entry in entries {
        match &entry.payload {
            EntryPayload::Message {
                message: Message::Assistant(message),
            } => {
                end_turn(&mut stats, &mut turn_ms);
                let model = since_parent(entry);
                stats.model_ms += model;
                turn_ms = Some(model);
                stats.turns += 1;
                let usage = &message.usage;
                stats.input_tokens += usage.input_tokens;
                stats.output_tokens += usage.output_tokens;
                stats.cache_read_tokens += usage.cache_read_tokens;
                stats.cache_write_tokens += usage.cache_write_tokens;
                match usage.cost_usd {
                    Some(cost) => stats.cost_usd += cost,
                    None => stats.turns_without_cost += 1,
                }
            }
            EntryPayload::Message {
                message: Message::ToolResult(result),
            } => {
                let calls = stats
                    .tool_calls
                    .entry(result.tool_name.clone())
                    .or_default();
                calls.calls += 1;
                if result.status != ToolStatus::Success {
                    calls.failed += 1;
                }
                tool_time(&mut stats, &mut turn_ms, since_parent(entry));
            }
            EntryPayload::EffectStarted { .. }
            | EntryPayload::EffectRecovered { .. }
            | EntryPayload::PermissionRule { .. } => {
                tool_time(&mut stats, &mut turn_ms, since_parent(entry));
            }
            EntryPayload::PermissionDecision { decision } => {
                tool_time(&mut stats, &mut turn_ms, since_parent(entry));
                let counts = &mut stats.permissions;
                match decision.source {
                    DecisionSource::Host => {
                        counts.asked += 1;
                        match decision.resolution {
                            PermissionResolution::Approved => counts.approved += 1,
                            _ => counts.denied += 1,
                        }
                    }
                    DecisionSource::Policy => counts.by_policy += 1,
                    DecisionSource::SessionRule => counts.by_session_rule += 1,
                    _ => counts.by_kernel += 1,
                }
            }
            EntryPayload::Checkpoint { .. } => stats.compactions += 1,
            EntryPayload::RunStart { .. } => started += 1,
            EntryPayload::RunEnd { state, .. } => {
                ended += 1;
                let name = match state {
                    RunEndState::Settled => "settled",
                    RunEndState::Cancelled => "cancelled",
                    _ => "failed",
                };
                *stats.runs.entry(name.to_owned()).or_default() += 1;
            }
            EntryPayload::Message { .. } => {
                // A user message ends the turn before it.
                end_turn(&mut stats, &mut turn_ms);
            }
            _ => {}
        }
    }
    end_turn(&mut stats, &mut turn_ms);
    if started > ended {
        stats.runs.insert("unfinished".to_owned(), started - ended);
    }
    stats
}

/// Ends the turn being timed, if any, keeping the longest.
fn end_turn(stats: &mut Stats, turn_ms: &mut Option<u64>) {
    if let Some(done) = turn_ms.take() {
        stats.longest_turn_ms = stats.longest_turn_ms.max(done);
    }
}

/// Counts `ms` as tool time of the turn being timed (none before the first
/// model response).
fn tool_time(stats: &mut Stats, turn_ms: &mut Option<u64>, ms: u64) {
    if let Some(turn) = turn_ms {
        stats.tool_ms += ms;
        *turn += ms;
    }
}

/// The statistics of session `session_id` of `store`.
pub async fn of_session(store: &dyn SessionStore, session_id: &str) -> Result<Stats, HostError> {
    Ok(of_entries(&store.entries(session_id).await?))
}

/// The statistics of every session of `store` that opens, added up; the
/// second value counts the sessions that could not be read.
pub async fn of_store(store: &dyn SessionStore) -> Result<(Stats, u64), HostError> {
    let mut total = Stats::default();
    let mut unreadable = 0;
    for info in store.list().await? {
        if info.problem.is_some() {
            unreadable += 1;
            continue;
        }
        match store.entries(&info.id).await {
            Ok(entries) => total.add(&of_entries(&entries)),
            Err(error) => {
                tracing::warn!(session = %info.id, %error, "session skipped in the totals");
                unreadable += 1;
            }
        }
    }
    Ok((total, unreadable))
}
