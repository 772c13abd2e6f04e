//! What a host's "always" answer binds to: a call's targets as they resolve
//! now, not the text that named them.
//!
//! A session rule made from an answer with scope `always` holds only while
//! the call's targets resolve to the same objects as when the host
//! answered ([`Tool::approval_binding`](crate::Tool::approval_binding)). A
//! path binds to its canonical location and the identity of what is there
//! ([`path`] and [`located`], the Tool API's `keel_tool_api::binding`,
//! re-exported here: the default binding every tool has).
//!
//! A command binds to its statically expanded words, each command name
//! resolved through the `PATH` the command gets to its canonical file
//! (device and inode), its kind and scope, and every path it names bound as
//! a path is — `~/…` expanded with the `HOME` the command gets. Both come from
//! the host's environment snapshot ([`HostEnv`]), never from the process
//! environment: with an empty snapshot, `PATH` is Keel's default
//! ([`crate::env::DEFAULT_PATH`]) and there is no `HOME`. So re-pointing a workspace symlink,
//! swapping a directory, planting a hard link or a program earlier on
//! `PATH` changes the binding, and Keel asks again.
//!
//! A command that names something only its text identifies binds to
//! nothing ([`command`] is `None`), so an "always" answer about it decides
//! no later call: a word not known statically (`$VAR`, `$(…)`), a glob
//! (its matches are not bound), `~user`, `~` without a usable `HOME`, a
//! path under a home directory the analysis did not follow (`~/…/x`), and
//! an analysis cut at its caps.
//!
//! Nothing here opens a file: only metadata is read and links resolved.
//! The binding is hashed before it is stored; it may hold paths and
//! command words and is never shown.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

pub use keel_tool_api::binding::{located, path};

use crate::env::HostEnv;
use crate::shell::paths::normalize;
use crate::workspace::Workspace;

/// The binding of a shell command run from the workspace root, with
/// `temp_dir` standing for the private temp dir as in the analysis and
/// `env` the host's environment snapshot the command gets its `PATH` (where
/// its programs are found) and `HOME` (what `~` expands to) from; `None`
/// when part of the command can only be bound by its text (see the module
/// docs).
pub fn command(
    workspace: &Workspace,
    command: &str,
    temp_dir: Option<&Path>,
    env: &HostEnv,
) -> Option<Value> {
    let root = workspace.root();
    let home = child_home(env);
    let home = home.as_deref();
    let analysis = crate::shell::analyze(command, root, temp_dir);
    let cut = analysis.targets.len() >= crate::shell::MAX_TARGETS
        || analysis.commands.len() >= crate::shell::MAX_COMMANDS
        || analysis
            .commands
            .iter()
            .any(|words| words.len() >= crate::shell::MAX_WORDS);
    if cut {
        return None;
    }
    let mut commands = Vec::with_capacity(analysis.commands.len());
    for words in &analysis.commands {
        if words.iter().any(|word| !bound_by_text(word)) {
            return None;
        }
        let program = words
            .first()
            .map_or(Value::Null, |name| program(name, root, env.search_path()));
        commands.push(json!({ "words": words, "program": program }));
    }
    let targets = analysis
        .targets
        .iter()
        .map(|target| target_binding(target, root, home))
        .collect::<Option<Vec<Value>>>()?;
    Some(json!({
        "kind": analysis.kind,
        "scope": analysis.scope,
        "commands": commands,
        "targets": targets,
    }))
}

/// Whether a command word is what the command gets: known statically (no
/// `\u{0}?` marking an unknown part) and not a glob, whose matches may
/// change while its text does not. A quoted `*` counts as a glob too: the
/// words no longer show quoting, and asking again is the safe side.
fn bound_by_text(word: &str) -> bool {
    let globs = word.contains(['*', '?'])
        || word
            .find('[')
            .is_some_and(|open| word.get(open + 1..).is_some_and(|rest| rest.contains(']')));
    !word.contains('\0') && !globs
}

/// A target the analysis named: a path (workspace-relative, absolute or
/// under `home`) bound to what is there; a URL or host as it is; `None`
/// for what cannot be bound (see the module docs).
fn target_binding(target: &str, root: &Path, home: Option<&Path>) -> Option<Value> {
    if target.contains("://") {
        return Some(json!({ "text": target }));
    }
    if !bound_by_text(target) {
        return None;
    }
    let path = match target.strip_prefix('~') {
        Some(rest) => {
            // `~user/…` (another user's home) is not resolved here.
            let rest = match rest.strip_prefix('/') {
                Some(rest) => rest,
                None if rest.is_empty() => rest,
                None => return None,
            };
            // `~/…/x`: somewhere under a home directory, not known where.
            if Path::new(rest)
                .components()
                .any(|part| part.as_os_str() == "…")
            {
                return None;
            }
            home.filter(|home| home.is_absolute())?.join(rest)
        }
        None => root.join(target),
    };
    Some(located(&resolve_now(&path)))
}

/// The `HOME` a command the `bash` tool runs gets: the one in its
/// allowlisted environment ([`crate::env::child_env`] of the host's
/// snapshot `env`), when set, not empty and absolute; `None` otherwise
/// (bash would then expand `~` from the password database, which is not
/// looked up here).
pub fn child_home(env: &HostEnv) -> Option<PathBuf> {
    crate::env::child_env(env, &[])
        .into_iter()
        .find(|(name, _)| name == "HOME")
        .map(|(_, home)| PathBuf::from(home))
        .filter(|home| home.is_absolute())
}

/// Where a command name runs from: a name with a slash relative to the
/// root, else the first executable file of that name on `search_path` (the
/// `PATH` the command gets).
fn program(name: &str, root: &Path, search_path: &OsStr) -> Value {
    if name.contains('\0') {
        return json!({ "unknown": name });
    }
    if name.contains('/') {
        return located(&resolve_now(&root.join(name)));
    }
    for dir in std::env::split_paths(search_path) {
        let candidate = root.join(dir).join(name);
        if fs::metadata(&candidate).is_ok_and(|meta| meta.is_file()) {
            return located(&resolve_now(&candidate));
        }
    }
    json!({ "not_on_path": name })
}

/// An absolute path with every existing prefix resolved physically (the
/// rest kept lexically), as the kernel would resolve it now.
fn resolve_now(path: &Path) -> PathBuf {
    let normalized = normalize(path);
    let mut existing = normalized.as_path();
    let mut rest: Vec<&OsStr> = Vec::new();
    loop {
        if let Ok(real) = fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |acc, part| acc.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return normalized,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn a_command_binds_to_the_paths_it_names_as_they_resolve_now() {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        for dir in ["ws", "a", "b"] {
            fs::create_dir(base.path().join(dir)).unwrap();
        }
        symlink(base.path().join("a"), ws.join("link")).unwrap();
        let workspace = Workspace::new(&ws).unwrap();
        let text = "cat link/credentials";
        let env = HostEnv::empty();
        let before = command(&workspace, text, None, &env).unwrap();
        assert_eq!(command(&workspace, text, None, &env).unwrap(), before);
        fs::remove_file(ws.join("link")).unwrap();
        symlink(base.path().join("b"), ws.join("link")).unwrap();
        assert_ne!(command(&workspace, text, None, &env).unwrap(), before);
        let words = &before["commands"][0]["words"];
        assert_eq!(words, &json!(["cat", "link/credentials"]));
    }

    #[test]
    fn a_home_path_binds_to_where_it_resolves_under_the_commands_home() {
        // HOME is `base`, the workspace `~/ws`, `ws/link` points at `a`.
        let base = tempfile::tempdir().unwrap();
        let home = base.path().canonicalize().unwrap();
        let ws = home.join("ws");
        for dir in ["ws", "a", "b"] {
            fs::create_dir(home.join(dir)).unwrap();
        }
        symlink(home.join("a"), ws.join("link")).unwrap();
        let workspace = Workspace::new(&ws).unwrap();
        let text = "cat ~/ws/link/id_rsa";
        let env = HostEnv::new([("HOME", &home)]);
        let before = command(&workspace, text, None, &env).unwrap();
        assert_eq!(before["targets"][0]["path"], json!(home.join("a/id_rsa")));
        assert_eq!(command(&workspace, text, None, &env), Some(before.clone()));
        fs::remove_file(ws.join("link")).unwrap();
        symlink(home.join("b"), ws.join("link")).unwrap();
        assert_ne!(command(&workspace, text, None, &env), Some(before));
        // What cannot be bound to a resolved target binds to nothing.
        for unbound in [
            "cat ~/ws/link/id_rsa",
            "cat ~other/id_rsa",
            "cd ~/ws && cat link/id_rsa",
            "cat $HOME/ws/link/id_rsa",
            "cat \"$(cat name)\"",
            "cat /etc/*.conf",
            "cat ~/ws/link/*",
        ] {
            let env = match unbound != text {
                true => env.clone(),
                false => HostEnv::empty(),
            };
            assert_eq!(command(&workspace, unbound, None, &env), None, "{unbound}");
        }
    }

    #[test]
    fn a_program_is_found_on_the_snapshots_path_not_the_process_path() {
        use std::os::unix::fs::PermissionsExt;

        let base = tempfile::tempdir().unwrap();
        let base = base.path().canonicalize().unwrap();
        for dir in ["ws", "first", "second"] {
            fs::create_dir(base.join(dir)).unwrap();
        }
        for dir in ["first", "second"] {
            let program = base.join(dir).join("keel-test-tool");
            fs::write(&program, "#!/bin/sh\n").unwrap();
            fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let workspace = Workspace::new(base.join("ws")).unwrap();
        let on = |path: &Path| {
            let env = HostEnv::new([("PATH", path)]);
            command(&workspace, "keel-test-tool", None, &env).unwrap()["commands"][0]["program"]
                ["path"]
                .clone()
        };
        assert_eq!(
            on(&base.join("first")),
            json!(base.join("first/keel-test-tool"))
        );
        assert_eq!(
            on(&base.join("second")),
            json!(base.join("second/keel-test-tool"))
        );
        // An empty snapshot searches Keel's default PATH only.
        let empty = command(&workspace, "keel-test-tool", None, &HostEnv::empty()).unwrap();
        assert_eq!(
            empty["commands"][0]["program"],
            json!({ "not_on_path": "keel-test-tool" })
        );
        let sh = command(&workspace, "sh", None, &HostEnv::empty()).unwrap();
        assert!(sh["commands"][0]["program"]["path"].is_string(), "{sh}");
    }
}
