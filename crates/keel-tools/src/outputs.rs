//! Full outputs of truncated tool results, kept where `read` can reach them.
//!
//! Every tool shares one output budget ([`crate::truncate`]); when a result
//! is cut, the whole output is saved here and the result names it as
//! `keel-output:<name>`. `read` resolves that reference to this directory and
//! nothing else: names are generated, validated against a strict alphabet,
//! and never contain a path separator. The directory is private to the user
//! (0700) and lives in the system temporary directory.
//!
//! Saved outputs last as long as the runs that may read them: every run
//! holds a [`RunOutputs`] guard, and when the last guard of the process is
//! dropped the directory is removed with everything in it, unless the host
//! asked to keep outputs ([`keep_after_runs`]). A later run starts a new one.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The prefix that marks a saved output in a `read` path.
pub const SCHEME: &str = "keel-output:";

/// The directory (created on first use) and the number of runs holding it.
struct State {
    directory: Option<PathBuf>,
    runs: usize,
}

static STATE: Mutex<State> = Mutex::new(State {
    directory: None,
    runs: 0,
});

/// Whether saved outputs outlive the runs (the host reads them later).
static KEEP: AtomicBool = AtomicBool::new(false);

fn state() -> MutexGuard<'static, State> {
    // A panic while holding the lock leaves consistent data: recover it.
    STATE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The directory, created on first use; `None` if it could not be created.
fn directory() -> Option<PathBuf> {
    let mut state = state();
    if state.directory.is_none() {
        let dir = std::env::temp_dir().join(format!("keel-outputs-{}", uuid::Uuid::now_v7()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => state.directory = Some(dir),
            Err(error) => {
                tracing::warn!(%error, "cannot create the directory for full tool outputs");
            }
        }
    }
    state.directory.clone()
}

/// Keeps saved outputs after the runs end (the host removes them itself).
pub fn keep_after_runs(keep: bool) {
    KEEP.store(keep, Ordering::Relaxed);
}

/// A run's hold on the saved outputs; see the module docs.
#[derive(Debug)]
#[must_use = "the outputs are removed when the last guard is dropped"]
pub struct RunOutputs(());

/// Holds the saved outputs for a run until the guard is dropped.
pub fn hold() -> RunOutputs {
    state().runs += 1;
    RunOutputs(())
}

impl Drop for RunOutputs {
    fn drop(&mut self) {
        let mut state = state();
        state.runs = state.runs.saturating_sub(1);
        if state.runs > 0 || KEEP.load(Ordering::Relaxed) {
            return;
        }
        if let Some(dir) = state.directory.take()
            && let Err(error) = std::fs::remove_dir_all(&dir)
        {
            tracing::warn!(path = %dir.display(), %error, "removing the full tool outputs failed");
        }
    }
}

/// A fresh name and its path, for a tool (e.g. `bash`) that streams into it.
pub fn reserve(tool: &str) -> Option<(String, PathBuf)> {
    let name = format!("{tool}-{}.log", uuid::Uuid::now_v7());
    let path = directory()?.join(&name);
    Some((format!("{SCHEME}{name}"), path))
}

/// Saves `contents` and returns the `keel-output:` reference to it.
pub fn save(tool: &str, contents: &[u8]) -> Option<String> {
    let (reference, path) = reserve(tool)?;
    match std::fs::write(&path, contents) {
        Ok(()) => Some(reference),
        Err(error) => {
            tracing::warn!(%error, path = %path.display(), "cannot save a full tool output");
            None
        }
    }
}

/// The file a `keel-output:` reference names, if it is one of ours.
pub fn resolve(reference: &str) -> Option<PathBuf> {
    let name = reference.strip_prefix(SCHEME)?;
    let valid = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !valid {
        return None;
    }
    directory().map(|dir| dir.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_outputs_resolve_and_hostile_names_do_not() {
        let reference = save("grep", b"all of it").unwrap();
        let path = resolve(&reference).unwrap();
        assert_eq!(std::fs::read(path).unwrap(), b"all of it");
        for hostile in [
            "keel-output:../etc/passwd",
            "keel-output:/etc/passwd",
            "keel-output:",
            "keel-output:..",
            "etc/passwd",
        ] {
            assert!(resolve(hostile).is_none(), "{hostile}");
        }
    }
}
