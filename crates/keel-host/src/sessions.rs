//! Finding sessions: the store a host uses, and sessions and entries named
//! by a short id.
//!
//! Ids may be shortened: a session to a unique prefix, an entry to a unique
//! prefix or suffix (the 8 characters `session tree` shows). An exact id
//! always wins over a longer id it happens to prefix.

use std::path::{Path, PathBuf};

use keel_session::{JsonlStore, Snapshot};

use crate::HostError;

/// The JSONL store in `dir`, or in the default directory
/// (`$XDG_DATA_HOME/keel/sessions`).
pub fn open_store(dir: Option<&Path>) -> Result<JsonlStore, HostError> {
    let dir = match dir {
        Some(dir) => dir.to_path_buf(),
        None => JsonlStore::default_dir().ok_or(HostError::NoSessionDir)?,
    };
    Ok(JsonlStore::new(dir)?)
}

/// The file that holds a session of `store`.
pub fn session_file(store: &JsonlStore, session_id: &str) -> PathBuf {
    store.dir().join(format!("{session_id}.jsonl"))
}

/// The session whose id is `wanted` or starts with it (if only one does).
pub fn resolve_session(store: &JsonlStore, wanted: &str) -> Result<String, HostError> {
    if session_file(store, wanted).is_file() {
        return Ok(wanted.to_owned());
    }
    let listing =
        std::fs::read_dir(store.dir()).map_err(|error| HostError::SessionDir(error.to_string()))?;
    let matches: Vec<String> = listing
        .flatten()
        .filter_map(|item| {
            item.file_name()
                .to_str()?
                .strip_suffix(".jsonl")
                .map(str::to_owned)
        })
        .filter(|id| id.starts_with(wanted))
        .collect();
    unique(matches, wanted, "session")
}

/// The entry of `snapshot` whose id is `wanted`, or starts or ends with it
/// (if only one does).
pub fn resolve_entry(snapshot: &Snapshot, wanted: &str) -> Result<String, HostError> {
    if snapshot.entries.iter().any(|entry| entry.id == wanted) {
        return Ok(wanted.to_owned());
    }
    let matches = snapshot
        .entries
        .iter()
        .filter(|entry| entry.id.starts_with(wanted) || entry.id.ends_with(wanted))
        .map(|entry| entry.id.clone())
        .collect();
    unique(matches, wanted, "entry")
}

/// The session a run continues: `session` (a short id), or a new fork of it
/// at `fork` (a short entry id). `None` when no session was named.
pub async fn continued_session(
    store: &JsonlStore,
    session: Option<&str>,
    fork: Option<&str>,
) -> Result<Option<String>, HostError> {
    let Some(wanted) = session else {
        return Ok(None);
    };
    let id = resolve_session(store, wanted)?;
    let Some(entry) = fork else {
        return Ok(Some(id));
    };
    let snapshot = store.snapshot(&id)?;
    let entry = resolve_entry(&snapshot, entry)?;
    let fork = keel_session::SessionStore::fork(store, &id, &entry).await?;
    Ok(Some(fork))
}

fn unique(matches: Vec<String>, wanted: &str, what: &'static str) -> Result<String, HostError> {
    match matches.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(HostError::NotFound {
            what,
            wanted: wanted.to_owned(),
        }),
        many => Err(HostError::Ambiguous {
            what,
            wanted: wanted.to_owned(),
            count: many.len(),
        }),
    }
}
