//! `keel demo context-compaction`: a run whose context outgrows its window.
//!
//! The scripted model fixes the fixture's bug, but its first command prints
//! a long trace. The case decides what happens next:
//! - `success`: the kernel knows the window (8,192 tokens), sees that the
//!   next request would pass it minus the reserve, and compacts first —
//!   the model writes the summary (the script's second turn) — then the run
//!   goes on from the summary and settles;
//! - `overflow`: the window is unknown, the provider refuses the request
//!   with a context-length error; the kernel compacts and retries the
//!   request once, and the run settles;
//! - `summary-error`: as `overflow`, but the summary lacks the required
//!   headings; Keel asks once more, naming what was missing, and the
//!   model's second answer only repeats Keel's summary instructions: it is
//!   rejected, nothing is written, `compaction_failed` says why, and the
//!   run — whose request the provider refused as too long — fails with the
//!   typed `compaction_failed` error.
//!
//! The scripted turns state what each request must hold (`expect`): the
//! summary request has no tools and carries the conversation; the request
//! after it holds only the summary.

use std::path::Path;
use std::process::ExitCode;

use crate::output::Output;
use crate::startup::StartupError;

/// The window the `success` case declares.
const WINDOW: u64 = 8_192;

pub async fn run(case: &str, workspace: &Path, output: &Output) -> Result<ExitCode, StartupError> {
    let (script, window) = match case {
        "success" => (
            include_str!("../demos/context-compaction-success.json"),
            Some(WINDOW),
        ),
        "overflow" => (
            include_str!("../demos/context-compaction-overflow.json"),
            None,
        ),
        "summary-error" => (
            include_str!("../demos/context-compaction-summary-error.json"),
            None,
        ),
        _ => {
            return Err(StartupError::new(
                "unknown_case",
                format!("unknown case `{case}`"),
            ));
        }
    };
    crate::demo::fix_the_bug(script, workspace, output, |config| {
        config.context_window = window;
    })
    .await
}
