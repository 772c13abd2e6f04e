//! An instance's `manifest.json` (its stage and status, the Keel version,
//! model, budget, totals, session and artifact checksums), the files
//! beside it, and the predictions file.
//!
//! Every file the evaluator rewrites is written whole to a temporary file
//! in the same directory, synced, and renamed over the old one, so a crash
//! leaves either the old file or the new one.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::SwebenchError;

/// The manifest's file name in an instance's directory.
pub const MANIFEST: &str = "manifest.json";
/// The run events, one JSON object per line, every run of the instance.
pub const EVENTS: &str = "events.jsonl";
/// The prediction's patch.
pub const PATCH: &str = "workspace.patch";
/// The predictions file in the output directory.
pub const PREDICTIONS: &str = "predictions.jsonl";
/// The session store in the output directory.
pub const SESSIONS: &str = "sessions";
/// An instance's workspace in its directory.
pub const WORKSPACE: &str = "workspace";

/// How far an instance got. Ordered: a later stage compares greater.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Stage {
    /// Read from the dataset and the flags; nothing prepared yet.
    Configuration,
    /// Preparing the workspace (checkout at `base_commit`).
    EnvironmentPreparation,
    /// The agent's runs.
    Agent,
    /// Reading the patch from the workspace.
    Prediction,
    /// Done: its prediction is in the predictions file.
    Complete,
}

impl Stage {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configuration => "configuration",
            Self::EnvironmentPreparation => "environment_preparation",
            Self::Agent => "agent",
            Self::Prediction => "prediction",
            Self::Complete => "complete",
        }
    }
}

/// How an instance ended (or `running` while it has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Status {
    /// Not finished (or interrupted: run again to resume it).
    Running,
    /// The agent settled and the patch is not empty.
    Success,
    /// The workspace could not be prepared (no checkout, no image).
    EnvironmentPreparationFailed,
    /// The run failed (provider, session store, …).
    AgentFailed,
    /// A budget ended the run: turns, cost or tokens.
    BudgetExhausted,
    /// `--timeout-sec` ended the run.
    TimedOut,
    /// The run was cancelled (Ctrl-C); resumable.
    Cancelled,
    /// The agent settled without changing the workspace.
    NoPatch,
}

impl Status {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Success => "success",
            Self::EnvironmentPreparationFailed => "environment_preparation_failed",
            Self::AgentFailed => "agent_failed",
            Self::BudgetExhausted => "budget_exhausted",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::NoPatch => "no_patch",
        }
    }

    /// Whether this is a failure (for the progress counts).
    pub fn is_failure(self) -> bool {
        !matches!(self, Self::Running | Self::Success | Self::NoPatch)
    }
}

/// The per-instance budget.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Budget {
    /// Most turns per run (the kernel stops the run: `budget_exhausted`).
    pub max_turns: Option<u32>,
    /// Most cost per run in USD (the kernel stops the run).
    pub max_cost_usd: Option<f64>,
    /// Most tokens (input + output) over all the instance's runs; the
    /// evaluator cancels the run past it.
    pub max_tokens: Option<u64>,
    /// Longest an instance's run may take, in seconds; the evaluator
    /// cancels it then (`timed_out`).
    pub timeout_sec: Option<u64>,
}

/// What the instance's runs used, summed over every run's events.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Totals {
    /// Runs started (first run, resumptions, continuations).
    pub runs: u32,
    /// Turns ended.
    pub turns: u32,
    /// Tool calls ended.
    pub tool_calls: u32,
    /// Input tokens not served from cache.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to cache.
    pub cache_write_tokens: u64,
    /// Cost in USD, when the model's prices are known.
    pub cost_usd: Option<f64>,
}

impl Totals {
    /// Input (cached or not) and output tokens.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    /// Adds one assistant message's usage.
    pub fn add_usage(&mut self, usage: &keel_protocol::Usage) {
        self.input_tokens += usage.input_tokens;
        self.output_tokens += usage.output_tokens;
        self.cache_read_tokens += usage.cache_read_tokens;
        self.cache_write_tokens += usage.cache_write_tokens;
        if let Some(cost) = usage.cost_usd {
            self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + cost);
        }
    }

    /// Counts one event.
    pub fn add_event(&mut self, event: &keel_protocol::RunEvent) {
        use keel_protocol::{Message, RunEventKind};
        match &event.kind {
            RunEventKind::RunStarted { .. } => self.runs += 1,
            RunEventKind::TurnEnd { .. } => self.turns += 1,
            RunEventKind::ToolExecutionEnd { .. } => self.tool_calls += 1,
            RunEventKind::MessageEnd {
                message: Message::Assistant(message),
            } => self.add_usage(&message.usage),
            _ => {}
        }
    }

    /// The totals of an events file (lines that do not parse — a line a
    /// crash cut short — are skipped).
    pub fn of_events(path: &Path) -> Totals {
        let mut totals = Totals::default();
        let Ok(text) = std::fs::read_to_string(path) else {
            return totals;
        };
        for line in text.lines() {
            if let Ok(event) = serde_json::from_str::<keel_protocol::RunEvent>(line) {
                totals.add_event(&event);
            }
        }
        totals
    }
}

/// The instance's durable Keel session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionRef {
    /// The session id.
    pub id: String,
    /// Its file.
    pub path: String,
}

/// One run of the instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunRecord {
    /// The run id.
    pub run_id: String,
    /// `start` (the first run), `resume` (continuing an interrupted run
    /// from its session) or `continue` (a new run in the session after one
    /// that ended unfinished).
    pub kind: String,
    /// Its terminal state (`settled`, `cancelled`, `failed`), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Its error code, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A file of the instance and its SHA-256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Artifact {
    /// Its path, relative to the output directory.
    pub path: String,
    /// Its size.
    pub bytes: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
}

/// `OUTPUT/<instance_id>/manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Manifest {
    /// The instance.
    pub instance_id: String,
    /// How far it got.
    pub stage: Stage,
    /// How it ended (`running` until it has).
    pub status: Status,
    /// The Keel that ran it.
    pub keel_version: String,
    /// The predictions' `model_name_or_path`.
    pub model_name_or_path: String,
    /// The provider the runs used (from `run_started`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model the runs used (from `run_started`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `local` or `docker`.
    pub environment: String,
    /// The commit the workspace was checked out at.
    pub base_commit: String,
    /// The workspace.
    pub workspace: String,
    /// When the workspace was made (ms since the epoch): only a session
    /// created after it can be this instance's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared_at_ms: Option<u64>,
    /// The budget.
    pub budget: Budget,
    /// What the runs used.
    pub totals: Totals,
    /// The session, once the first run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionRef>,
    /// The runs, in order.
    #[serde(default)]
    pub runs: Vec<RunRecord>,
    /// Why it failed, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
    /// The artifacts and their checksums (when complete).
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
}

impl Manifest {
    /// Reads `dir/manifest.json`; `None` when there is none.
    pub fn read(dir: &Path) -> Result<Option<Manifest>, SwebenchError> {
        let path = dir.join(MANIFEST);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|error| SwebenchError::Io {
                        path: path.display().to_string(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("not a manifest: {error}"),
                        ),
                    })
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(SwebenchError::Io {
                path: path.display().to_string(),
                source: error,
            }),
        }
    }

    /// Writes `dir/manifest.json` atomically.
    pub fn write(&self, dir: &Path) -> Result<(), SwebenchError> {
        let mut text = serde_json::to_vec_pretty(self).map_err(|error| SwebenchError::Io {
            path: dir.join(MANIFEST).display().to_string(),
            source: error.into(),
        })?;
        text.push(b'\n');
        write_atomic(&dir.join(MANIFEST), &text)
    }
}

/// Writes `bytes` to `path` through a synced temporary file renamed over it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SwebenchError> {
    let io = |error: std::io::Error| SwebenchError::Io {
        path: path.display().to_string(),
        source: error,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.as_file().sync_all().map_err(io)?;
    file.persist(path).map_err(|error| io(error.error))?;
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// The artifact record of `path` (named relative to `root`).
pub fn artifact(root: &Path, path: &Path) -> Result<Artifact, SwebenchError> {
    let bytes = std::fs::read(path).map_err(|error| SwebenchError::Io {
        path: path.display().to_string(),
        source: error,
    })?;
    let name = path
        .strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string();
    Ok(Artifact {
        path: name,
        bytes: bytes.len() as u64,
        sha256: hex(&Sha256::digest(&bytes)),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// One line of the predictions file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Prediction {
    /// The instance.
    pub instance_id: String,
    /// The model's name as the harness reports it.
    pub model_name_or_path: String,
    /// The patch (empty when there is none).
    pub model_patch: String,
}

/// Every complete instance under `output`, by id: its manifest.
pub fn complete_instances(output: &Path) -> Result<Vec<(PathBuf, Manifest)>, SwebenchError> {
    let mut found = Vec::new();
    let entries = std::fs::read_dir(output).map_err(|error| SwebenchError::Io {
        path: output.display().to_string(),
        source: error,
    })?;
    for entry in entries.flatten() {
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        // A directory without a readable manifest is not an instance.
        if let Ok(Some(manifest)) = Manifest::read(&dir) {
            found.push((dir, manifest));
        }
    }
    found.sort_by(|a, b| a.1.instance_id.cmp(&b.1.instance_id));
    Ok(found)
}

/// Rewrites `output/predictions.jsonl` atomically from the complete
/// instances' manifests and patches: each complete instance exactly once,
/// by id. Returns how many lines it holds.
pub fn write_predictions(output: &Path) -> Result<usize, SwebenchError> {
    let mut text = Vec::new();
    let mut count = 0;
    for (dir, manifest) in complete_instances(output)? {
        if manifest.stage != Stage::Complete {
            continue;
        }
        let model_patch = match std::fs::read_to_string(dir.join(PATCH)) {
            Ok(patch) => patch,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => {
                return Err(SwebenchError::Io {
                    path: dir.join(PATCH).display().to_string(),
                    source: error,
                });
            }
        };
        let line = Prediction {
            instance_id: manifest.instance_id,
            model_name_or_path: manifest.model_name_or_path,
            model_patch,
        };
        serde_json::to_writer(&mut text, &line).map_err(|error| SwebenchError::Io {
            path: output.join(PREDICTIONS).display().to_string(),
            source: error.into(),
        })?;
        text.push(b'\n');
        count += 1;
    }
    write_atomic(&output.join(PREDICTIONS), &text)?;
    Ok(count)
}
