//! The lines a host prints beside the `RunEvent`s: the result with the
//! run's totals, the workspace's changes, where the session is stored, a
//! startup error, and the outcome of a manual compaction.
//!
//! Each is tagged by `type` like the events, so a consumer of a host's JSON
//! Lines (`keel run --output-format stream-json`) dispatches every line on
//! one field: a `RunEvent` type, or one of [`HostLine`]'s. Their schema is
//! checked in (`schema/host_line.json`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RunError;
use crate::run::RunResult;

/// One line a host prints that is not a `RunEvent`, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum HostLine {
    /// The run's result and totals: after the terminal event in a stream,
    /// or the whole output of a single-document format (which then also
    /// holds the workspace changes and the session).
    Result(Box<ResultLine>),
    /// The workspace's changes since the run started.
    WorkspaceChanges(WorkspaceChangesLine),
    /// Where the run's session is stored.
    Session(SessionLine),
    /// The host could not start (bad flag, missing file, unknown provider);
    /// no run started.
    StartupError(StartupErrorLine),
    /// A manual compaction wrote a checkpoint (`keel session compact`).
    Compaction(CompactionLine),
    /// A manual compaction failed and wrote nothing.
    CompactionFailed(CompactionFailedLine),
}

/// The `result` line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ResultLine {
    /// The run's result, its fields inline.
    #[serde(flatten)]
    pub result: RunResult,
    /// What the run took.
    pub totals: RunTotals,
    /// The workspace's changes (single-document output only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_changes: Option<WorkspaceChangesLine>,
    /// The session (single-document output only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionLine>,
}

impl ResultLine {
    /// The run's `result` and `totals`, with no workspace changes and no session.
    pub fn new(result: RunResult, totals: RunTotals) -> Self {
        Self {
            result,
            totals,
            workspace_changes: None,
            session: None,
        }
    }
}

/// What one run took, summed over its model responses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct RunTotals {
    /// Turns started.
    pub turns: u32,
    /// Input tokens not served from cache.
    pub input_tokens: u64,
    /// Output tokens (including reasoning).
    pub output_tokens: u64,
    /// Input tokens read from the provider's cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's cache.
    pub cache_write_tokens: u64,
    /// What the responses cost in USD; absent when any response's cost is
    /// unknown (the model has no prices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Wall time from the run's start to its result, in milliseconds.
    pub duration_ms: u64,
    /// Tool calls denied because nobody answered their permission request
    /// (the host's input ended, or it has no one to ask); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub denied_unanswered: u32,
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

/// The `workspace_changes` line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkspaceChangesLine {
    /// Changed paths relative to the workspace, sorted; a rename lists both.
    pub changed_paths: Vec<String>,
    /// A unified patch from the start state (`git apply --binary` applies it).
    pub patch: String,
    /// Repository code the run's commands planted or changed: git hooks and
    /// configuration that runs programs (`core.fsmonitor`, filter and diff
    /// drivers, …) in any repository in the workspace, which the user's
    /// next `git` command there would run. Each was also a `warning` event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub git_code: Vec<GitCodeChange>,
}

/// One piece of repository code a command planted or changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct GitCodeChange {
    /// The repository's git directory, relative to the workspace (`.git`,
    /// `vendor/lib/.git`).
    pub repository: String,
    /// What: `hooks/pre-commit`, or a configuration key such as
    /// `core.fsmonitor` or `filter.lfs.smudge` (never its value).
    pub item: String,
    /// Whether it is new or was changed.
    pub change: GitCodeChangeKind,
    /// The call after which Keel noticed it.
    pub call_id: String,
    /// Where Keel moved the new repository's entrance (its `.git`
    /// directory, file or symlink, or the bare repository itself) so that
    /// git no longer finds it, relative to the workspace: a repository the
    /// call created with code in it, when the call was not approved to
    /// write `.git`. Absent when it was left in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<String>,
}

impl GitCodeChange {
    /// A change to `item` of the repository at `repository`.
    pub fn new(
        repository: impl Into<String>,
        item: impl Into<String>,
        change: GitCodeChangeKind,
        call_id: impl Into<String>,
    ) -> Self {
        Self {
            repository: repository.into(),
            item: item.into(),
            change,
            call_id: call_id.into(),
            quarantined: None,
        }
    }
}

/// How a piece of repository code changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GitCodeChangeKind {
    /// It was not there before the call.
    Added,
    /// It was there and is different now.
    Changed,
}

/// The `session` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SessionLine {
    /// The session's id.
    pub id: String,
    /// The file that holds it.
    pub path: String,
}

impl SessionLine {
    /// Session `id`, stored at `path`.
    pub fn new(id: impl Into<String>, path: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            path: path.into(),
        }
    }
}

/// The `startup_error` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct StartupErrorLine {
    /// A stable snake_case code.
    pub code: String,
    /// What went wrong and what to do, in words.
    pub message: String,
}

impl StartupErrorLine {
    /// A start-up error `code` and its `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// The `compaction` line: the checkpoint a manual compaction wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct CompactionLine {
    /// The compacted session.
    pub session_id: String,
    /// The checkpoint entry, now at the session's leaf.
    pub checkpoint_id: String,
    /// Entries the checkpoint covers.
    pub covered_entries: u64,
    /// Estimated tokens of the model context before.
    pub tokens_before: u64,
    /// Estimated tokens of the model context after.
    pub tokens_after: u64,
    /// The file that holds the session.
    pub path: String,
}

/// The `compaction_failed` line: nothing was written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct CompactionFailedLine {
    /// The session that was to be compacted.
    pub session_id: String,
    /// Why it failed (code `compaction_failed` or the provider's).
    pub error: RunError,
}

impl CompactionFailedLine {
    /// Compacting session `session_id` failed with `error`.
    pub fn new(session_id: impl Into<String>, error: RunError) -> Self {
        Self {
            session_id: session_id.into(),
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::RunState;

    #[test]
    fn every_line_is_tagged_by_type_and_round_trips() {
        let result = HostLine::Result(Box::new(ResultLine {
            result: RunResult {
                run_id: "r".into(),
                session_id: "s".into(),
                state: RunState::Settled,
                message: None,
                error: None,
            },
            totals: RunTotals {
                turns: 2,
                cost_usd: Some(0.5),
                ..RunTotals::default()
            },
            workspace_changes: None,
            session: None,
        }));
        let value = serde_json::to_value(&result).unwrap();
        assert_eq!(value["type"], "result");
        assert_eq!(value["state"], "settled", "the result's fields are inline");
        assert_eq!(value["totals"]["turns"], 2);
        assert_eq!(serde_json::from_value::<HostLine>(value).unwrap(), result);
        let session = json!({"type": "session", "id": "s", "path": "/p"});
        assert!(matches!(
            serde_json::from_value::<HostLine>(session).unwrap(),
            HostLine::Session(_)
        ));
        let error = json!({"type": "startup_error", "code": "usage", "message": "m"});
        assert!(serde_json::from_value::<HostLine>(error).is_ok());
    }
}
