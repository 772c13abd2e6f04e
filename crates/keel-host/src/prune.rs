//! Keeping the session store bounded: `keel session prune` and the
//! `retention` setting.
//!
//! A prune removes the sessions whose last activity is older than a
//! duration, each with its summary and command journal
//! ([`JsonlStore::remove`]), except:
//! - the `keep` sessions with the latest activity, whatever their age;
//! - a session open for writing (a run holds it, here or in another
//!   process): the store refuses to remove it, and it is reported as open;
//! - a session whose last run a crash interrupted: `keel resume` needs it
//!   and its journal;
//! - a damaged session (one that does not open): `keel session salvage`
//!   may still recover it;
//! - the parent of a session that is kept, and its parent in turn: a fork
//!   names where it came from.
//!
//! Forks are removed before their parents, so a parent is removed only
//! once no remaining session names it. A dry run decides the same way and
//! removes nothing.
//!
//! `[sessions] retention = "30d"` in the user's `config.toml` (never the
//! project layer: a repository must not delete a user's sessions) is the
//! default age of `keel session prune`, and `keel run` applies it on its
//! own at most once a day ([`prune_if_due`]), recording when in the store
//! (`.pruned`).

use std::collections::HashSet;
use std::time::Duration;

use keel_session::{JsonlStore, SessionError, SessionStore};
use serde::Deserialize;

use crate::HostError;
use crate::settings::invalid;

/// `[sessions]` of the user's `config.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionSettings {
    /// How long a session is kept after its last activity, e.g. `"30d"`
    /// ([`parse_duration`]); unset, sessions are kept until pruned.
    pub retention: Option<String>,
    /// Whether each run records workspace snapshots in its session (the
    /// base of `keel rewind` and `keel session restore`); default true.
    pub snapshots: Option<bool>,
}

impl SessionSettings {
    /// Parses the `[sessions]` table, checking its retention.
    pub(crate) fn from_value(value: toml::Value, place: &str) -> Result<Self, HostError> {
        let settings: Self = value
            .try_into()
            .map_err(|error: toml::de::Error| invalid(place, error.message()))?;
        if let Some(text) = &settings.retention {
            parse_duration(text)
                .map_err(|message| invalid(place, &format!("[sessions] retention: {message}")))?;
        }
        Ok(settings)
    }

    /// The retention as a duration, when set (checked when it was read).
    pub fn retention(&self) -> Option<Duration> {
        self.retention
            .as_deref()
            .and_then(|text| parse_duration(text).ok())
    }
}

/// Parses a duration such as `90d`, `2w`, `12h`, `30m` or `45s`: a whole
/// number and one unit (s, m, h, d, w).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit: write e.g. 30d, 12h or 2w"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number"))?;
    let seconds = match unit.trim() {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        other => return Err(format!("unknown unit `{other}`: use s, m, h, d or w")),
    };
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// What to prune.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PruneRequest {
    /// Sessions whose last activity is older than this are removed.
    pub older_than: Duration,
    /// The sessions with the latest activity kept whatever their age.
    pub keep: usize,
    /// Decide, report, and remove nothing.
    pub dry_run: bool,
}

impl PruneRequest {
    /// Removes what is older than `older_than`, keeping no minimum.
    pub fn new(older_than: Duration) -> Self {
        Self {
            older_than,
            keep: 0,
            dry_run: false,
        }
    }
}

/// Why a session old enough to go was kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeptBecause {
    /// A run holds it open for writing.
    Open,
    /// A crash interrupted its last run: `keel resume` continues it.
    Interrupted,
    /// It does not open; `keel session salvage` may recover it.
    Damaged,
    /// A kept session is a fork of it.
    ParentOfKept,
}

impl KeptBecause {
    /// A stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Interrupted => "interrupted",
            Self::Damaged => "damaged",
            Self::ParentOfKept => "parent_of_kept",
        }
    }
}

/// What a prune did (or, dry, would do).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PruneReport {
    /// The sessions removed, each with the bytes it freed (estimated from
    /// its file and journal sizes in a dry run).
    pub removed: Vec<(String, u64)>,
    /// The sessions old enough that were kept, and why.
    pub kept: Vec<(String, KeptBecause)>,
    /// Sessions left alone for being recent (or among the `keep` latest).
    pub recent: usize,
}

impl PruneReport {
    /// The bytes freed in all.
    pub fn freed(&self) -> u64 {
        self.removed.iter().map(|(_, bytes)| bytes).sum()
    }
}

/// Prunes `store` as `request` says (see the module's rules), as of `now_ms`.
pub async fn prune(
    store: &JsonlStore,
    request: &PruneRequest,
    now_ms: u64,
) -> Result<PruneReport, HostError> {
    let all = store.list().await?;
    let cutoff =
        now_ms.saturating_sub(u64::try_from(request.older_than.as_millis()).unwrap_or(u64::MAX));
    let mut report = PruneReport::default();
    let mut candidates = Vec::new();
    for (rank, info) in all.iter().enumerate() {
        if rank < request.keep || info.last_activity >= cutoff {
            report.recent += 1;
        } else if store.is_open(&info.id) {
            report.kept.push((info.id.clone(), KeptBecause::Open));
        } else if info.problem.is_some() {
            report.kept.push((info.id.clone(), KeptBecause::Damaged));
        } else if keel_kernel::session_interrupted(store, &info.id)
            .await
            .unwrap_or(true)
        {
            report
                .kept
                .push((info.id.clone(), KeptBecause::Interrupted));
        } else {
            candidates.push(info);
        }
    }
    let mut gone: HashSet<&str> = HashSet::new();
    let mut refused: HashSet<&str> = HashSet::new();
    // Leaves first: a candidate goes only when no session that stays names
    // it as its parent; repeat until nothing more can go.
    loop {
        let named: HashSet<&str> = all
            .iter()
            .filter(|info| !gone.contains(info.id.as_str()))
            .filter_map(|info| info.parent_session.as_deref())
            .collect();
        let mut progressed = false;
        for info in &candidates {
            let id = info.id.as_str();
            if gone.contains(id) || refused.contains(id) || named.contains(id) {
                continue;
            }
            if request.dry_run {
                gone.insert(id);
                report.removed.push((info.id.clone(), info.bytes));
                progressed = true;
                continue;
            }
            match store.remove(id) {
                Ok(bytes) => {
                    gone.insert(id);
                    report.removed.push((info.id.clone(), bytes));
                    progressed = true;
                }
                Err(SessionError::Locked(_) | SessionError::SessionBusy(_)) => {
                    refused.insert(id);
                    report.kept.push((info.id.clone(), KeptBecause::Open));
                }
                // Removed meanwhile by another prune: nothing left to free.
                Err(SessionError::SessionNotFound(_)) => {
                    gone.insert(id);
                }
                Err(error) => return Err(error.into()),
            }
        }
        if !progressed {
            break;
        }
    }
    for info in &candidates {
        let id = info.id.as_str();
        if !gone.contains(id) && !refused.contains(id) {
            report
                .kept
                .push((info.id.clone(), KeptBecause::ParentOfKept));
        }
    }
    Ok(report)
}

/// How often [`prune_if_due`] prunes.
const AUTOMATIC_EVERY: Duration = Duration::from_secs(86_400);

/// The file in the store that records the last automatic prune.
const STAMP: &str = ".pruned";

/// Prunes `store` by `retention` when the last automatic prune (recorded
/// in the store) is a day old or more, or never happened; `None` when it
/// was not due.
pub async fn prune_if_due(
    store: &JsonlStore,
    retention: Duration,
    now_ms: u64,
) -> Result<Option<PruneReport>, HostError> {
    let stamp = store.dir().join(STAMP);
    let last = std::fs::symlink_metadata(&stamp)
        .ok()
        .filter(|meta| meta.is_file())
        .and_then(|meta| meta.modified().ok())
        .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
    let every = u64::try_from(AUTOMATIC_EVERY.as_millis()).unwrap_or(u64::MAX);
    if now_ms.saturating_sub(last) < every {
        return Ok(None);
    }
    // Stamped first: a prune that fails is not retried on every run.
    // Created anew, never through a link left in its place.
    let _ = std::fs::remove_file(&stamp);
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&stamp);
    if let Err(error) = created {
        tracing::warn!(path = %stamp.display(), %error, "cannot record the automatic prune");
    }
    prune(store, &PruneRequest::new(retention), now_ms)
        .await
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_one_unit_and_refuse_the_rest() {
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse_duration(" 0s "), Ok(Duration::ZERO));
        for bad in ["30", "d", "3x", "-1d", "1.5d", "99999999999999999999w", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
