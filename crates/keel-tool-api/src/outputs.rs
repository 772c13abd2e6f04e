//! Full outputs of truncated tool results, kept where `read` can reach them.
//!
//! Every tool shares one output budget (keel-tools' `truncate`); when a result
//! is cut, the whole output is saved in the call's [`OutputStore`]
//! ([`crate::ToolContext::outputs`]) and the result names it as
//! `keel-output:<name>`. `read` resolves that reference in the same store
//! and nothing else: names are generated, validated against a strict
//! alphabet, and never contain a path separator. The store's directory is
//! private to the user (0700), created on first use beneath the parent
//! directory the host gives ([`OutputStore::new`]).
//!
//! A store is a value the kernel owns (one per kernel): two kernels in one
//! process never see each other's outputs. Saved outputs last as long as
//! the runs that may read them: every run holds a [`RunOutputs`] guard on
//! its kernel's store, and when the store's last guard is dropped its
//! directory is removed with everything in it, unless the host asked to
//! keep outputs ([`OutputStore::keep_after_runs`]). A later run starts a
//! new directory. Dropping the store (the kernel) removes it as well.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The prefix that marks a saved output in a `read` path.
pub const SCHEME: &str = "keel-output:";

/// Where a kernel's tools save full outputs; see the module docs. A cheap
/// handle: clones share the store.
#[derive(Clone, Debug)]
pub struct OutputStore {
    inner: Arc<Store>,
}

/// What a store holds.
#[derive(Debug)]
struct Store {
    /// The directory the store's own directory is made in.
    parent: PathBuf,
    /// Whether saved outputs outlive the runs (the host reads them later).
    keep: AtomicBool,
    state: Mutex<State>,
}

/// The directory (created on first use) and the number of runs holding it.
#[derive(Debug, Default)]
struct State {
    directory: Option<PathBuf>,
    runs: usize,
}

impl Default for OutputStore {
    /// A store beneath `/tmp`. Hosts pass the system's temporary
    /// directory instead ([`OutputStore::new`]); a library never reads the
    /// process environment.
    fn default() -> Self {
        Self::new("/tmp")
    }
}

impl OutputStore {
    /// A store whose directory will be made in `parent` on first use.
    pub fn new(parent: impl Into<PathBuf>) -> Self {
        Self {
            inner: Arc::new(Store {
                parent: parent.into(),
                keep: AtomicBool::new(false),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Keeps saved outputs after the runs end (the host removes them itself).
    pub fn keep_after_runs(&self, keep: bool) {
        self.inner.keep.store(keep, Ordering::Relaxed);
    }

    /// The store's directory, if it has been made (and not yet removed).
    pub fn directory(&self) -> Option<PathBuf> {
        self.inner.state().directory.clone()
    }

    /// Holds the saved outputs for a run until the guard is dropped.
    pub fn hold(&self) -> RunOutputs {
        self.inner.state().runs += 1;
        RunOutputs {
            store: Arc::clone(&self.inner),
        }
    }

    /// A fresh name and its path, for a tool (e.g. `bash`) that streams into it.
    pub fn reserve(&self, tool: &str) -> Option<(String, PathBuf)> {
        let name = format!("{tool}-{}.log", uuid::Uuid::now_v7());
        let path = self.inner.directory()?.join(&name);
        Some((format!("{SCHEME}{name}"), path))
    }

    /// Saves `contents` and returns the `keel-output:` reference to it.
    pub fn save(&self, tool: &str, contents: &[u8]) -> Option<String> {
        let (reference, path) = self.reserve(tool)?;
        match std::fs::write(&path, contents) {
            Ok(()) => Some(reference),
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "cannot save a full tool output");
                None
            }
        }
    }

    /// The file a `keel-output:` reference names in this store, if it is
    /// one of ours and the store has a directory.
    pub fn resolve(&self, reference: &str) -> Option<PathBuf> {
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
        self.inner.directory().map(|dir| dir.join(name))
    }
}

impl Store {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data: recover it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The directory, created on first use; `None` if it could not be created.
    fn directory(&self) -> Option<PathBuf> {
        let mut state = self.state();
        if state.directory.is_none() {
            let dir = self
                .parent
                .join(format!("keel-outputs-{}", uuid::Uuid::now_v7()));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => state.directory = Some(dir),
                Err(error) => {
                    tracing::warn!(%error, "cannot create the directory for full tool outputs");
                }
            }
        }
        state.directory.clone()
    }

    /// Removes the directory unless the host keeps outputs.
    fn remove(&self, state: &mut State) {
        if self.keep.load(Ordering::Relaxed) {
            return;
        }
        if let Some(dir) = state.directory.take() {
            remove_dir(&dir);
        }
    }
}

fn remove_dir(dir: &Path) {
    if let Err(error) = std::fs::remove_dir_all(dir) {
        tracing::warn!(path = %dir.display(), %error, "removing the full tool outputs failed");
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let state = self
            .state
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !self.keep.load(Ordering::Relaxed)
            && let Some(dir) = state.directory.take()
        {
            remove_dir(&dir);
        }
    }
}

/// A run's hold on its kernel's saved outputs; see the module docs.
#[derive(Debug)]
#[must_use = "the outputs are removed when the last guard is dropped"]
pub struct RunOutputs {
    store: Arc<Store>,
}

impl Drop for RunOutputs {
    fn drop(&mut self) {
        let mut state = self.store.state();
        state.runs = state.runs.saturating_sub(1);
        if state.runs == 0 {
            self.store.remove(&mut state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_outputs_resolve_and_hostile_names_do_not() {
        let parent = tempfile::tempdir().unwrap();
        let store = OutputStore::new(parent.path());
        let reference = store.save("grep", b"all of it").unwrap();
        let path = store.resolve(&reference).unwrap();
        assert_eq!(std::fs::read(path).unwrap(), b"all of it");
        for hostile in [
            "keel-output:../etc/passwd",
            "keel-output:/etc/passwd",
            "keel-output:",
            "keel-output:..",
            "etc/passwd",
        ] {
            assert!(store.resolve(hostile).is_none(), "{hostile}");
        }
    }
}
