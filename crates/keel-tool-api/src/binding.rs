//! What a host's "always" answer binds to, for a path: its target as it
//! resolves now, not the text that named it.
//!
//! A session rule made from an answer with scope `always` holds only while
//! the call's targets resolve to the same objects as when the host
//! answered ([`Tool::approval_binding`](crate::Tool::approval_binding)). A
//! path binds to its canonical location (every symlink followed) and to the
//! identity of what is there:
//!
//! - the directory that holds the name (device and inode), for a regular
//!   file with one link or a name that does not exist yet — the `write` and
//!   `edit` tools replace a file by renaming a new one over it, so the file's
//!   own inode changes with every write while the place stays the same;
//! - its own device and inode, for anything else: a directory, a file with
//!   several hard links (another name may be anywhere), a device or a FIFO.
//!
//! So re-pointing a workspace symlink, swapping a directory or planting a
//! hard link changes the binding, and Keel asks again. A command's binding
//! (keel-tools' `binding::command`) binds every path it names with
//! [`located`] as well.
//!
//! Nothing here opens a file: only metadata is read and links resolved.
//! The binding is hashed before it is stored; it may hold paths and is
//! never shown.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::{Value, json};

use crate::workspace::Workspace;

/// The binding of a file tool's `path`: its canonical location and the
/// identity of what is there; `None` when it cannot be resolved (a dangling
/// symlink, an invalid path), so an answer about it binds to nothing.
pub fn path(workspace: &Workspace, path: &str) -> Option<Value> {
    let resolved = workspace.allowing_outside().resolve(path).ok()?;
    Some(located(&resolved))
}

/// A resolved path (absolute, as it resolves now) and the identity of
/// what is there (see the module docs).
pub fn located(path: &Path) -> Value {
    let holder = nearest_directory(path);
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() && meta.nlink() == 1 => {
            json!({ "path": path, "in": holder })
        }
        Ok(meta) => json!({
            "path": path,
            "in": holder,
            "type": type_name(&meta),
            "dev": meta.dev(),
            "ino": meta.ino(),
            "links": meta.nlink(),
        }),
        // Absent (or not inspectable): the place it would be created in.
        Err(_) => json!({ "path": path, "in": holder }),
    }
}

/// The nearest existing directory above `path`, with its device and inode.
fn nearest_directory(path: &Path) -> Value {
    let mut current = path.parent();
    while let Some(dir) = current {
        if let Ok(meta) = fs::metadata(dir) {
            return json!({ "dir": dir, "dev": meta.dev(), "ino": meta.ino() });
        }
        current = dir.parent();
    }
    Value::Null
}

fn type_name(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_dir() {
        "directory"
    } else if kind.is_file() {
        "file"
    } else if kind.is_symlink() {
        "symlink"
    } else if kind.is_fifo() {
        "fifo"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "device"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn a_repointed_symlink_or_a_hard_link_changes_a_path_binding_a_rewrite_does_not() {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        for dir in ["ws", "a", "b"] {
            fs::create_dir(base.path().join(dir)).unwrap();
        }
        fs::write(base.path().join("a/config"), "a").unwrap();
        fs::write(base.path().join("b/config"), "b").unwrap();
        symlink(base.path().join("a"), ws.join("link")).unwrap();
        let workspace = Workspace::new(&ws).unwrap();
        let before = path(&workspace, "link/config").unwrap();
        // Rewritten by rename, as the write tool does: the same place.
        fs::write(base.path().join("a/new"), "a2").unwrap();
        fs::rename(base.path().join("a/new"), base.path().join("a/config")).unwrap();
        assert_eq!(path(&workspace, "link/config").unwrap(), before);
        fs::remove_file(ws.join("link")).unwrap();
        symlink(base.path().join("b"), ws.join("link")).unwrap();
        assert_ne!(path(&workspace, "link/config").unwrap(), before);
        // A hard link in place of a single-link file: bound to its inode.
        fs::write(ws.join("f"), "x").unwrap();
        let single = path(&workspace, "f").unwrap();
        fs::remove_file(ws.join("f")).unwrap();
        fs::hard_link(base.path().join("b/config"), ws.join("f")).unwrap();
        assert_ne!(path(&workspace, "f").unwrap(), single);
        // A dangling symlink binds to nothing.
        symlink(base.path().join("gone"), ws.join("dangling")).unwrap();
        assert_eq!(path(&workspace, "dangling/x"), None);
    }
}
