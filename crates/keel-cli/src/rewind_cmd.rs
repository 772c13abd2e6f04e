//! `keel rewind SESSION --to ENTRY` and `keel session restore ID [--at
//! ENTRY] --into DIR`: the session's workspace snapshots put back in place
//! (with the leaf) or written elsewhere, through keel-kernel's
//! `rewind` and `restore_snapshot`.
//!
//! A rewind works in the workspace the session records, whatever the
//! current directory. Text output lists what was written, removed and left
//! alone, and the command that undoes the rewind; `--output-format json`
//! prints one document. Exit codes: 0 done, 1 a rewind that left
//! conflicts (files changed outside the session, left as they are), 2 a
//! startup error (nothing changed).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use keel_kernel::{RecordLimits, Written};
use keel_session::{JsonlStore, SessionStore};
use serde_json::json;

use crate::args::{DataFormat, RewindArgs};
use crate::output::say;
use crate::session_cmd::{open_store, resolve_session};
use crate::startup::StartupError;

/// `keel rewind`.
pub async fn rewind(args: RewindArgs) -> Result<ExitCode, StartupError> {
    let store = open_store(&args.store)?;
    let id = resolve_session(&store, &args.session).await?;
    let workspace = store
        .reader(&id)?
        .workspace()
        .map(std::path::PathBuf::from)
        .filter(|path| path.is_dir())
        .ok_or_else(|| {
            StartupError::new(
                "workspace_missing",
                format!(
                    "session {id} records no workspace that still exists, so there is nothing \
                     to rewind in; `keel session restore {id} --into DIR` writes a snapshot \
                     elsewhere"
                ),
            )
        })?;
    let store: Arc<dyn SessionStore> = Arc::new(store);
    let limits = RecordLimits::default();
    let done = keel_kernel::rewind(&store, &workspace, &limits, &id, &args.to).await?;
    let clean = done.written.conflicts.is_empty();
    if args.format.data() == DataFormat::Text {
        say(format!(
            "session {id}: rewound to entry {} (the workspace of snapshot entry {})",
            done.leaf_entry_id, done.snapshot_entry_id
        ));
        list(&done.written);
        say(format!(
            "undo with: keel rewind {id} --to {}",
            done.undo_entry_id
        ));
    } else {
        say(json!({
            "type": "rewind",
            "session_id": id,
            "workspace": workspace,
            "leaf_entry_id": done.leaf_entry_id,
            "snapshot_entry_id": done.snapshot_entry_id,
            "undo_entry_id": done.undo_entry_id,
            "rewind_entry_id": done.rewind_entry_id,
            "written": done.written,
        }));
    }
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `keel session restore`.
pub async fn restore(
    store: JsonlStore,
    wanted: &str,
    at: Option<&str>,
    into: &Path,
    format: DataFormat,
) -> Result<ExitCode, StartupError> {
    let id = resolve_session(&store, wanted).await?;
    let store: Arc<dyn SessionStore> = Arc::new(store);
    let done = keel_kernel::restore_snapshot(&store, &id, at, into).await?;
    if format == DataFormat::Text {
        say(format!(
            "session {id}: wrote the workspace of snapshot entry {} ({} files, {} bytes) into {}",
            done.snapshot_entry_id,
            done.snapshot.files,
            done.snapshot.bytes,
            into.display()
        ));
        for path in &done.written.unknown {
            say(format!("  left out  {path} (not in the snapshot)"));
        }
    } else {
        say(json!({
            "type": "restore",
            "session_id": id,
            "snapshot_entry_id": done.snapshot_entry_id,
            "snapshot": done.snapshot,
            "into": into,
            "written": done.written,
        }));
    }
    Ok(ExitCode::SUCCESS)
}

/// A rewind's paths, one per line, grouped by what happened to them.
fn list(written: &Written) {
    let groups = [
        ("restored", &written.written, ""),
        ("removed ", &written.removed, ""),
        (
            "conflict",
            &written.conflicts,
            " (changed outside the session; left as it is)",
        ),
        (
            "unknown ",
            &written.unknown,
            " (not in a snapshot; left as it is)",
        ),
    ];
    for (label, paths, note) in groups {
        for path in paths {
            say(format!("  {label}  {path}{note}"));
        }
    }
    if written.written.is_empty() && written.removed.is_empty() {
        say("  no file needed to change");
    }
}
