//! The host's environment snapshot, as the Tool API passes it.
//!
//! This crate never reads the process environment: the host captures it
//! once ([`HostEnv::new`], keel-host from `std::env::vars_os`) and hands it
//! to the kernel, which passes it to [`Tool::approval_binding`](crate::Tool::approval_binding)
//! (where a command's programs and `~` resolve) and to the sandbox (what a
//! child process may inherit: `keel-sandbox`'s `env::child_env`, the only
//! place that decides what leaves a snapshot). An empty snapshot (the
//! default) means commands see only Keel's fixed defaults: [`DEFAULT_PATH`]
//! and nothing of the process that runs the library.

use std::ffi::{OsStr, OsString};
use std::sync::Arc;

/// The `PATH` commands get, and programs are looked up on, when the host's
/// snapshot has none (an empty [`HostEnv`], say).
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A snapshot of the host process's environment, taken once by the host.
///
/// It is where every value a child process or a lookup on its behalf needs
/// comes from: the allowlisted part a command receives (keel-sandbox's
/// `env::child_env`), the `PATH` and `HOME` an approval binding resolves
/// with, the `PATH` Keel's own git is found on. It may hold secrets (every
/// variable of the host), so its `Debug` shows only how many variables it
/// holds. Cloning is cheap (shared).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HostEnv {
    vars: Arc<Vec<(OsString, OsString)>>,
}

impl HostEnv {
    /// A snapshot holding `vars` (a later duplicate name wins, as in
    /// `std::process::Command::env`).
    pub fn new<K, V>(vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<OsString>,
        V: Into<OsString>,
    {
        let mut kept: Vec<(OsString, OsString)> = Vec::new();
        for (name, value) in vars {
            let (name, value) = (name.into(), value.into());
            kept.retain(|(old, _)| *old != name);
            kept.push((name, value));
        }
        Self {
            vars: Arc::new(kept),
        }
    }

    /// An empty snapshot: commands see only Keel's fixed defaults.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The value of `name`, when the snapshot holds it.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_os_str())
    }

    /// Every variable of the snapshot, in the order they were given (the
    /// last of duplicate names only). What a child may receive of them is
    /// decided by keel-sandbox's `env::child_env`, never by the caller.
    pub fn vars(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars
            .iter()
            .map(|(name, value)| (name.as_os_str(), value.as_os_str()))
    }

    /// The `PATH` commands search, as a child receives it: the snapshot's
    /// when it is valid UTF-8, else [`DEFAULT_PATH`].
    pub fn search_path(&self) -> &OsStr {
        self.get("PATH")
            .filter(|path| path.to_str().is_some())
            .unwrap_or(OsStr::new(DEFAULT_PATH))
    }

    /// Whether the snapshot holds no variable.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }
}

impl std::fmt::Debug for HostEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values (secrets), nor the names.
        f.debug_struct("HostEnv")
            .field("variables", &self.vars.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_duplicate_wins_and_debug_shows_no_value() {
        let env = HostEnv::new([("PATH", "/a"), ("KEY", "sk-secret"), ("PATH", "/b")]);
        assert_eq!(env.get("PATH"), Some(OsStr::new("/b")));
        assert_eq!(env.vars().count(), 2);
        assert_eq!(env.search_path(), "/b");
        assert!(!format!("{env:?}").contains("sk-secret"));
        assert_eq!(HostEnv::empty().search_path(), DEFAULT_PATH);
    }
}
