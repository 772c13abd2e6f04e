//! Full outputs of truncated tool results, kept where `read` can reach them.
//!
//! Every tool shares one output budget ([`crate::truncate`]); when a result
//! is cut, the whole output is saved here and the result names it as
//! `keel-output:<name>`. `read` resolves that reference to this directory and
//! nothing else: names are generated, validated against a strict alphabet,
//! and never contain a path separator. The directory is private to the user
//! (0700) and lives in the system temporary directory for the process's life.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The prefix that marks a saved output in a `read` path.
pub const SCHEME: &str = "keel-output:";

/// The directory, created on first use; `None` if it could not be created.
fn directory() -> Option<&'static PathBuf> {
    static DIRECTORY: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIRECTORY
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("keel-outputs-{}", uuid::Uuid::now_v7()));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => Some(dir),
                Err(error) => {
                    tracing::warn!(%error, "cannot create the directory for full tool outputs");
                    None
                }
            }
        })
        .as_ref()
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
