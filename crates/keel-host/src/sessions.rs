//! Finding sessions: the store a host uses, and sessions and entries named
//! by a short id.
//!
//! Ids may be shortened to a unique prefix or suffix (an entry's 8
//! characters that `session tree` shows); the store resolves session ids
//! (`SessionStore::resolve_id`). An exact id always wins over a longer id it
//! happens to prefix.

use std::path::{Path, PathBuf};

use keel_session::{JsonlStore, Repair, SessionStore};

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
pub fn session_file(store: &JsonlStore, session_id: &str) -> Result<PathBuf, HostError> {
    Ok(store.file(session_id)?)
}

/// The session whose id is `wanted`, or starts or ends with it (if only one
/// does), as the store resolves it.
pub async fn resolve_session(store: &dyn SessionStore, wanted: &str) -> Result<String, HostError> {
    Ok(store.resolve_id(wanted).await?)
}

/// The entry among `ids` whose id is `wanted`, or starts or ends with it
/// (if only one does).
pub fn resolve_entry<'a>(
    ids: impl Iterator<Item = &'a str> + Clone,
    wanted: &str,
) -> Result<String, HostError> {
    if ids.clone().any(|id| id == wanted) {
        return Ok(wanted.to_owned());
    }
    let matches = ids
        .filter(|id| id.starts_with(wanted) || id.ends_with(wanted))
        .map(str::to_owned)
        .collect();
    unique(matches, wanted, "entry")
}

/// The session a run continues, and what opening it repaired.
#[derive(Debug, Default)]
pub struct Continued {
    /// The session to continue (`None`: start a new one).
    pub session_id: Option<String>,
    /// The torn tail cut when the session was opened for writing, which a
    /// host must show its user.
    pub repair: Option<Repair>,
}

/// The session a run continues: `session` (a short id) opened for writing,
/// or a new fork of it at `fork` (a short entry id; the source is only read).
pub async fn continued_session(
    store: &JsonlStore,
    session: Option<&str>,
    fork: Option<&str>,
) -> Result<Continued, HostError> {
    let Some(wanted) = session else {
        return Ok(Continued::default());
    };
    let id = resolve_session(store, wanted).await?;
    let Some(entry) = fork else {
        let repair = store.open_for_writing(&id).await?;
        return Ok(Continued {
            session_id: Some(id),
            repair,
        });
    };
    let snapshot = store.snapshot(&id)?;
    let entry = resolve_entry(
        snapshot.entries.iter().map(|entry| entry.id.as_str()),
        entry,
    )?;
    let fork = store.fork(&id, &entry).await?;
    Ok(Continued {
        session_id: Some(fork),
        repair: None,
    })
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
