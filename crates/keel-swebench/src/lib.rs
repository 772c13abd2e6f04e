//! The SWE-bench evaluator behind `keel swebench`: instances from the
//! official dataset file, each run by Keel's agent in a workspace checked
//! out at its `base_commit`, into the official predictions file plus
//! per-instance artifacts — durable, resumable, concurrent.
//!
//! The evaluator is a host like any other: it drives its runs through
//! keel-host's broker (`keel_host::broker`), over one local connection
//! (`run/start`, `session/resume`, `run/cancel`, `permission/resolve`,
//! `run/event`), so a run here behaves exactly as under `keel rpc`. It
//! never builds a kernel of its own.
//!
//! ```text
//! OUTPUT/
//!   predictions.jsonl          every complete instance once, rewritten atomically
//!   sessions/<id>.jsonl        the Keel sessions (one per instance)
//!   <instance_id>/
//!     manifest.json            stage, status, version, model, budget, totals, checksums
//!     events.jsonl             every run's events
//!     workspace.patch          git diff --binary against base_commit
//!     workspace/               the checkout (environment `local`)
//! ```
//!
//! Modules: [`dataset`] (loading and selection), [`prompt`] (what the model
//! is shown: the problem statement and hints only), [`git`] (checkout and
//! patch, hermetic, hooks and filters off), [`manifest`] (the artifacts,
//! written atomically), [`runner`] (the batch), [`status`] (summaries and
//! the harness hand-off).

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

pub mod dataset;
pub mod docker;
pub mod git;
pub mod manifest;
pub mod prompt;
pub mod runner;
pub mod status;

pub use dataset::{Instance, Selection};
pub use manifest::{Budget, Manifest, Stage, Status, Totals};
pub use runner::{Counts, Environment, Progress, Report, RunOptions, Summary, run};

/// What can stop the evaluator as a whole (an instance's own failure is its
/// manifest's status, never this).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SwebenchError {
    /// The dataset file could not be read or parsed.
    #[error("dataset {path}: {message}")]
    Dataset {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An instance id cannot name a directory.
    #[error(
        "instance id `{0}` is not usable as a directory name (1 to 200 of A-Z a-z 0-9 . _ -, no leading dot, not predictions.jsonl, sessions or config.json)"
    )]
    InvalidId(String),
    /// The selection flags are wrong.
    #[error("{0}")]
    Selection(String),
    /// The flags contradict each other or name something missing.
    #[error("{0}")]
    Usage(String),
    /// A git command failed.
    #[error("git {what}: {message}")]
    Git {
        /// The git subcommand.
        what: String,
        /// Its error output.
        message: String,
    },
    /// A file of the output directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the operating system reported (or why the file's contents
        /// are unreadable, as `InvalidData`).
        #[source]
        source: std::io::Error,
    },
    /// The host (configuration, session store, broker) refused.
    #[error("{message}")]
    Host {
        /// A stable code (`configuration`, `invalid_script`, …).
        code: String,
        /// What went wrong.
        message: String,
    },
}

impl SwebenchError {
    /// A stable snake_case code.
    pub fn code(&self) -> &str {
        match self {
            Self::Dataset { .. } => "dataset",
            Self::InvalidId(_) => "invalid_instance_id",
            Self::Selection(_) => "selection",
            Self::Usage(_) => "usage",
            Self::Git { .. } => "git",
            Self::Io { .. } => "io",
            Self::Host { code, .. } => code,
        }
    }
}

impl From<keel_host::HostError> for SwebenchError {
    fn from(error: keel_host::HostError) -> Self {
        Self::Host {
            code: error.code().to_owned(),
            message: error.to_string(),
        }
    }
}
