//! [`KernelError`]: why a kernel could not be built, a run could not
//! start, or a session operation (compaction, restore, rewind) failed.

use keel_protocol::RunError;
use keel_session::SessionError;
use keel_tools::registry::RegistryError;

/// Why a kernel could not be built or a run could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A required part was not given to the builder.
    #[error("the kernel needs a {0}")]
    Missing(&'static str),
    /// A tool could not be registered.
    #[error(transparent)]
    Tool(#[from] RegistryError),
    /// An extension could not be registered (a name clash, an entry kind
    /// registered twice, a hook at no point).
    #[error("extension registration: {0}")]
    Extension(#[from] crate::extension::ExtensionError),
    /// The session store refused.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The prompt has no non-blank text and no image.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The session's last run was interrupted with tool calls left without
    /// results: it must be resumed first.
    #[error(
        "session {0} ends in an interrupted run; continue it with `keel resume {0}` \
         before starting a new one"
    )]
    Interrupted(String),
    /// The session already has a writer in this process (a live run or a
    /// compaction): a session has one writer, so a second is refused until
    /// the first ends.
    #[error(
        "session {0} is busy: a run (or compaction) is writing it in this process; \
         wait for its result or cancel it, then try again"
    )]
    SessionBusy(String),
    /// `resume` was asked for a session whose last run is not interrupted.
    #[error("session {0} has no interrupted run to resume")]
    NotInterrupted(String),
    /// A manual compaction wrote nothing (the error says why).
    #[error("{0}")]
    Compaction(RunError),
    /// The session store keeps its command journal where a sandboxed
    /// command of the run could write (issue 21): it could forge receipts
    /// or plant links in it, so Keel refuses to run.
    #[error(
        "the session directory {journal} is inside {root}, which sandboxed commands may \
         write, so a command could forge Keel's command journal; keep sessions outside \
         it (e.g. `--session-dir DIR` or XDG_DATA_HOME elsewhere) or use a workspace \
         that does not contain them"
    )]
    JournalExposed {
        /// Where the store keeps sessions and their journals.
        journal: std::path::PathBuf,
        /// The writable root that contains it.
        root: std::path::PathBuf,
    },
    /// No workspace snapshot is recorded where a restore or rewind needs one.
    #[error(
        "session {session_id} records no workspace snapshot at or before {at} (sessions \
         written before format version 3, and stores that keep no snapshots, record none); \
         nothing was changed"
    )]
    NoSnapshot {
        /// The session.
        session_id: String,
        /// Where one was looked for.
        at: String,
    },
    /// No entry of the session has this id (or unique id prefix).
    #[error("session {session_id} has no entry {entry_id} (or the prefix names several)")]
    NoSuchEntry {
        /// The session.
        session_id: String,
        /// The id asked for.
        entry_id: String,
    },
    /// A rewind to the session's first run: no entry precedes it to move
    /// the leaf to.
    #[error(
        "entry {0} belongs to a run nothing precedes in the session, so there is no entry \
         before it to move the leaf to; nothing was changed"
    )]
    NothingBefore(String),
    /// A rewind between snapshots recorded in another workspace than the
    /// one it would change.
    #[error(
        "the snapshots this rewind needs were recorded in {recorded}, not in {root}; \
         rewind there, or use `keel session restore` to write them elsewhere; nothing \
         was changed"
    )]
    OtherWorkspace {
        /// Where the snapshots were recorded.
        recorded: String,
        /// The workspace the rewind would change.
        root: String,
    },
    /// A snapshot could not be recorded, read or written back.
    #[error(transparent)]
    Snapshot(#[from] keel_tools::changes::record::SnapshotError),
}

impl KernelError {
    /// A stable snake_case code for startup error lines.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Missing(_) => "kernel_incomplete",
            Self::Tool(_) => "tool_registration",
            Self::Extension(_) => "extension_registration",
            Self::Session(error) => error.code(),
            Self::EmptyPrompt => "empty_prompt",
            Self::Interrupted(_) => "session_interrupted",
            Self::NotInterrupted(_) => "nothing_to_resume",
            Self::SessionBusy(_) => "session_busy",
            Self::Compaction(error) => error.code.as_str(),
            Self::JournalExposed { .. } => "session_dir_writable",
            Self::NoSnapshot { .. } => "no_snapshot",
            Self::NoSuchEntry { .. } => "entry_not_found",
            Self::NothingBefore(_) => "nothing_before",
            Self::OtherWorkspace { .. } => "workspace_mismatch",
            Self::Snapshot(keel_tools::changes::record::SnapshotError::NotEmpty { .. }) => {
                "directory_not_empty"
            }
            Self::Snapshot(keel_tools::changes::record::SnapshotError::Damaged { .. }) => {
                "snapshot_damaged"
            }
            Self::Snapshot(_) => "snapshot_failed",
        }
    }
}
