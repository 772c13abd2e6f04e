//! Finding sessions: the store a host uses, sessions and entries named by a
//! short id, and the sessions of one workspace.
//!
//! A session records the workspace it was created for (the canonical root,
//! in its header). A host resumes a session only in that workspace unless
//! it names the workspace explicitly ([`Resume::workspace_given`]): a
//! session id typed in the wrong directory is refused, naming both
//! workspaces, instead of silently running there. `--continue` picks the
//! session of this workspace with the latest activity. Sessions recorded
//! without a workspace belong to none: they resume anywhere and are never
//! picked by `--continue`.
//!
//! Ids may be shortened to a unique prefix or suffix (an entry's 8
//! characters that `session tree` shows); the store resolves session ids
//! (`SessionStore::resolve_id`). An exact id always wins over a longer id it
//! happens to prefix.

use std::path::{Path, PathBuf};

use keel_protocol::EntryPayload;
use keel_session::{JsonlStore, Repair, SalvageReport, SessionInfo, SessionStore};

use crate::HostError;

/// `$XDG_DATA_HOME/keel/sessions`, else `~/.local/share/keel/sessions`
/// (read from the process environment, which only hosts do).
pub fn default_dir() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share"))
        })?;
    Some(data.join("keel").join("sessions"))
}

/// The JSONL store in `dir`, or in the default directory
/// (`$XDG_DATA_HOME/keel/sessions`).
pub fn open_store(dir: Option<&Path>) -> Result<JsonlStore, HostError> {
    let dir = match dir {
        Some(dir) => dir.to_path_buf(),
        None => default_dir().ok_or(HostError::NoSessionDir)?,
    };
    Ok(JsonlStore::new(dir)?)
}

/// The file that holds a session of `store`.
pub fn session_file(store: &JsonlStore, session_id: &str) -> Result<PathBuf, HostError> {
    Ok(store.file(session_id)?)
}

/// Every session id of the store, each with its shortest unique prefix
/// ([`keel_session::short_ids`]): what `keel session list`, the picker and
/// the view show, which `--session`, `keel resume` and every `session`
/// command resolve back to the same session.
pub fn short_ids(
    store: &JsonlStore,
) -> Result<std::collections::HashMap<String, String>, HostError> {
    let ids = store.session_ids()?;
    let names: Vec<&str> = ids.iter().map(String::as_str).collect();
    let short = keel_session::short_ids(&names);
    Ok(ids.into_iter().zip(short).collect())
}

/// `session_id` shortened to its shortest unique prefix among the store's
/// sessions (the whole id when the store cannot be listed).
pub fn short_id(store: &JsonlStore, session_id: &str) -> String {
    short_ids(store)
        .ok()
        .and_then(|mut short| short.remove(session_id))
        .unwrap_or_else(|| session_id.to_owned())
}

/// The session whose id is `wanted`, or starts or ends with it (if only one
/// does), as the store resolves it.
pub async fn resolve_session(store: &dyn SessionStore, wanted: &str) -> Result<String, HostError> {
    Ok(store.resolve_id(wanted).await?)
}

/// Writes a new session from the intact records of the session `wanted`
/// names (a damaged one, typically), leaving its file untouched: see
/// [`JsonlStore::salvage`].
pub async fn salvage(store: &JsonlStore, wanted: &str) -> Result<SalvageReport, HostError> {
    let id = resolve_session(store, wanted).await?;
    Ok(store.salvage(&id)?)
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
#[non_exhaustive]
pub struct Continued {
    /// The session to continue (`None`: start a new one).
    pub session_id: Option<String>,
    /// The torn tail cut when the session was opened for writing, which a
    /// host must show its user.
    pub repair: Option<Repair>,
}

/// Which session a run continues, as a host was asked.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct Resume<'a> {
    /// A session id (or unique prefix or suffix).
    pub session: Option<&'a str>,
    /// With `session`: fork it at this entry (short id) and continue there.
    pub fork: Option<&'a str>,
    /// Continue the latest session of the workspace (ignored with `session`).
    pub latest: bool,
    /// The workspace the run works in (canonical: see [`workspace_root`]).
    pub workspace: Option<&'a Path>,
    /// Whether the host named the workspace explicitly, which allows
    /// resuming a session of another workspace there.
    pub workspace_given: bool,
}

/// The canonical root of the workspace `given` (default: the current
/// directory), as sessions record it.
pub fn workspace_root(given: Option<&Path>) -> Result<PathBuf, HostError> {
    let root = match given {
        Some(root) => root.to_path_buf(),
        None => std::env::current_dir().map_err(|error| HostError::Workspace(error.to_string()))?,
    };
    std::fs::canonicalize(&root)
        .map_err(|error| HostError::Workspace(format!("{}: {error}", root.display())))
}

/// The sessions of `workspace` (every session for `None`), newest activity
/// first, and how many others the store holds.
pub async fn sessions_of(
    store: &dyn SessionStore,
    workspace: Option<&Path>,
) -> Result<(Vec<SessionInfo>, usize), HostError> {
    let all = store.list().await?;
    let Some(workspace) = workspace else {
        return Ok((all, 0));
    };
    let total = all.len();
    let mine: Vec<SessionInfo> = all
        .into_iter()
        .filter(|info| belongs(info.workspace.as_deref(), workspace))
        .collect();
    let others = total - mine.len();
    Ok((mine, others))
}

fn belongs(recorded: Option<&str>, workspace: &Path) -> bool {
    recorded.is_some_and(|recorded| Path::new(recorded) == workspace)
}

/// The session a run continues (see [`Resume`]): `session` opened for
/// writing, or a new fork of it at `fork` (the source is only read), or the
/// latest session of the workspace (with none of them asked: a new session).
pub async fn continued_session(
    store: &JsonlStore,
    resume: Resume<'_>,
) -> Result<Continued, HostError> {
    let id = match (resume.session, resume.latest) {
        (Some(wanted), _) => {
            let id = resolve_session(store, wanted).await?;
            check_workspace(store, &id, &resume).await?;
            id
        }
        (None, true) => latest(store, &resume).await?,
        (None, false) => return Ok(Continued::default()),
    };
    let Some(entry) = resume.fork else {
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
    let fork = fork(store, &id, &entry).await?;
    Ok(Continued {
        session_id: Some(fork.session_id),
        repair: None,
    })
}

/// Forks `session_id` at `entry_id` into a new session; the calls the fork
/// point leaves without results are closed in the new session, so it
/// continues like any other (`keel_kernel::fork_session`).
pub async fn fork(
    store: &dyn SessionStore,
    session_id: &str,
    entry_id: &str,
) -> Result<keel_kernel::Fork, HostError> {
    Ok(keel_kernel::fork_session(store, session_id, entry_id).await?)
}

/// The latest session of the workspace (with no damage).
async fn latest(store: &JsonlStore, resume: &Resume<'_>) -> Result<String, HostError> {
    let workspace = match resume.workspace {
        Some(workspace) => workspace.to_path_buf(),
        None => workspace_root(None)?,
    };
    let (mine, _) = sessions_of(store, Some(&workspace)).await?;
    mine.into_iter()
        .find(|info| info.problem.is_none())
        .map(|info| info.id)
        .ok_or_else(|| HostError::NothingToContinue {
            workspace: workspace.display().to_string(),
        })
}

/// Refuses a session of another workspace unless the host named one.
async fn check_workspace(
    store: &JsonlStore,
    id: &str,
    resume: &Resume<'_>,
) -> Result<(), HostError> {
    if resume.workspace_given {
        return Ok(());
    }
    let Some(recorded) = recorded_workspace(store, id).await? else {
        return Ok(());
    };
    let workspace = match resume.workspace {
        Some(workspace) => workspace.to_path_buf(),
        None => workspace_root(None)?,
    };
    if belongs(Some(&recorded), &workspace) {
        return Ok(());
    }
    Err(HostError::WorkspaceMismatch {
        session: id.to_owned(),
        session_workspace: recorded,
        workspace: workspace.display().to_string(),
    })
}

/// The workspace session `id` records, if it records one.
pub async fn recorded_workspace(store: &JsonlStore, id: &str) -> Result<Option<String>, HostError> {
    Ok(store
        .list()
        .await?
        .into_iter()
        .find(|info| info.id == id)
        .and_then(|info| info.workspace))
}

/// Where `keel resume` continues session `id` when the host named the
/// workspace explicitly (a session of another workspace is refused without
/// that, by [`continued_session`]): `None` in the session's own workspace
/// (or one it does not record), else the session's workspace, for the host
/// to warn about and the run to record. A session whose calls changed
/// files (it holds an `effect_started` entry) is refused in an empty
/// workspace.
pub async fn resume_workspace(
    store: &JsonlStore,
    id: &str,
    workspace: &Path,
) -> Result<Option<String>, HostError> {
    let Some(recorded) = recorded_workspace(store, id).await? else {
        return Ok(None);
    };
    if belongs(Some(&recorded), workspace) {
        return Ok(None);
    }
    let empty = std::fs::read_dir(workspace)
        .map_err(|error| HostError::Workspace(format!("{}: {error}", workspace.display())))?
        .next()
        .is_none();
    if empty {
        let changed_files = store
            .entries(id)
            .await?
            .iter()
            .any(|entry| matches!(entry.payload, EntryPayload::EffectStarted { .. }));
        if changed_files {
            return Err(HostError::EmptyWorkspace {
                session: id.to_owned(),
                session_workspace: recorded,
                workspace: workspace.display().to_string(),
            });
        }
    }
    Ok(Some(recorded))
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
