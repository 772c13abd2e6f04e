//! The project layer: `.keel/config.toml` in the workspace, which may
//! narrow what the user's layers allow and never widen it.
//!
//! Why it can only narrow: the file comes with the repository (and a run in
//! `auto` may write it), so it speaks for the project, not for the user.
//! It may pick the `provider` and `model` among those the user's
//! configuration defines (it cannot define providers: a provider names a
//! URL and a key variable), choose a `mode` of no more authority than the
//! user's (plan < ask < auto < full), keep a subset of the user's `tools`,
//! keep a subset of the user's `sandbox_read` directories, and add
//! `[permissions]` `ask` and `deny` rules (never `allow` ones).
//!
//! Anything else is dropped with a [`Warning`] naming the file and the key
//! or value — never an error, and never silently: a widening attempt
//! (`project_widening`) or a key a project may not set
//! (`project_key_ignored`). A file that is not valid TOML, or a value of
//! the wrong type, is an error: the project meant to narrow something, and
//! running wider than it asked would be the silent failure.

use std::path::{Path, PathBuf};

use keel_protocol::PermissionMode;
use keel_tools::builtin::{BashOptions, default_tools};
use keel_tools::untrusted::Origin;

use crate::HostError;
use crate::modes::MODES;
use crate::settings::{DEFAULT_KEYS, Defaults, Warning, expand_home, read_table};

/// Where the project layer lives, relative to the workspace root.
pub const PROJECT_FILE: &str = ".keel/config.toml";

/// `base` narrowed by the project layer of `workspace`, if it has one.
pub(crate) fn narrow(
    base: Defaults,
    workspace: &Path,
    warnings: &mut Vec<Warning>,
) -> Result<Defaults, HostError> {
    let path = workspace.join(PROJECT_FILE);
    // Opened beneath the workspace: a command of an earlier run may have
    // planted it (a symlink out, a FIFO, a device); see `read_table`.
    let origin = Origin::Beneath {
        root: workspace,
        rel: Path::new(PROJECT_FILE),
    };
    let Some(mut table) = read_table(origin, false)? else {
        return Ok(base);
    };
    let shown = path.display().to_string();
    let ignored: Vec<String> = table
        .keys()
        .filter(|key| !DEFAULT_KEYS.contains(&key.as_str()))
        .cloned()
        .collect();
    for key in ignored {
        table.remove(&key);
        warnings.push(Warning {
            code: "project_key_ignored",
            message: format!(
                "{shown}: `{key}` is ignored; a project file may set only {}",
                DEFAULT_KEYS.join(", ")
            ),
        });
    }
    let project = Defaults::from_table(table, &shown)?;
    let mut widening = |message: String| {
        warnings.push(Warning {
            code: "project_widening",
            message: format!("{shown}: {message}"),
        });
    };
    let mut narrowed = base.clone();
    narrowed.provider = project.provider.or(base.provider);
    narrowed.model = project.model.or(base.model);
    if let Some(mode) = project.mode {
        let allowed = base.mode.unwrap_or_default();
        if rank(mode) <= rank(allowed) {
            narrowed.mode = Some(mode);
        } else {
            widening(format!(
                "mode `{}` is ignored: it has more authority than `{}`, which your configuration allows",
                mode.as_str(),
                allowed.as_str()
            ));
        }
    }
    if let Some(tools) = project.tools {
        let allowed = base.tools.clone().unwrap_or_else(default_tool_names);
        let (kept, extra): (Vec<String>, Vec<String>) =
            tools.into_iter().partition(|tool| allowed.contains(tool));
        if !extra.is_empty() {
            widening(format!(
                "tools {} are ignored: your configuration allows only {}",
                extra.join(", "),
                allowed.join(", ")
            ));
        }
        narrowed.tools = Some(kept);
    }
    if let Some(paths) = project.sandbox_read {
        let allowed: Vec<PathBuf> = base
            .sandbox_read
            .iter()
            .flatten()
            .map(|path| normal(path, None))
            .collect();
        let (kept, extra): (Vec<PathBuf>, Vec<PathBuf>) = paths
            .iter()
            .map(|path| normal(path, Some(workspace)))
            .partition(|path| allowed.contains(path));
        if !extra.is_empty() {
            let extra: Vec<String> = extra.iter().map(|p| p.display().to_string()).collect();
            widening(format!(
                "sandbox_read {} is ignored: a project may only keep directories your configuration already makes readable",
                extra.join(", ")
            ));
        }
        narrowed.sandbox_read = Some(kept);
    }
    if let Some(mut permissions) = project.permissions {
        if !permissions.allow.is_empty() {
            widening(format!(
                "`permissions.allow` ({} rule(s)) is ignored: a project may add only `ask` and `deny` rules",
                permissions.allow.len()
            ));
            permissions.allow.clear();
        }
        narrowed.permissions = Some(match narrowed.permissions.take() {
            Some(own) => own.overlaid(permissions),
            None => permissions,
        });
    }
    Ok(narrowed)
}

/// A mode's authority: its place in [`MODES`], least first.
fn rank(mode: PermissionMode) -> usize {
    MODES
        .iter()
        .position(|known| *known == mode)
        .unwrap_or(MODES.len())
}

fn default_tool_names() -> Vec<String> {
    default_tools(BashOptions::default())
        .iter()
        .map(|tool| tool.name().to_owned())
        .collect()
}

/// A path to compare: `~/` expanded, relative ones under `root` (when
/// given), symbolic links resolved where it exists.
fn normal(path: &Path, root: Option<&Path>) -> PathBuf {
    let expanded = expand_home(path);
    let absolute = match root {
        Some(root) if expanded.is_relative() => root.join(expanded),
        _ => expanded,
    };
    std::fs::canonicalize(&absolute).unwrap_or(absolute)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_rank_by_authority() {
        assert!(rank(PermissionMode::Plan) < rank(PermissionMode::Ask));
        assert!(rank(PermissionMode::Ask) < rank(PermissionMode::Auto));
        assert!(rank(PermissionMode::Auto) < rank(PermissionMode::Full));
    }
}
