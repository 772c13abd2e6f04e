//! What a run learns about its project before the first request: the
//! project instructions (`AGENTS.md` files) and the environment.
//!
//! Instructions come from the global configuration directory
//! (`$XDG_CONFIG_HOME/keel/AGENTS.md`, else `~/.config/keel/AGENTS.md`),
//! then from every directory from the repository root (the nearest
//! ancestor of the workspace holding `.git`; the filesystem root outside
//! git) down to the workspace, outermost first, so a deeper file can refine
//! an outer one. A directory without `AGENTS.md` contributes its
//! `CLAUDE.md`, if any. Together they are capped ([`Instructions::max_bytes`]);
//! a file cut by the cap ends with a notice the model sees, and the files
//! loaded are reported in `run_started`.
//!
//! Every file is read through [`keel_tools::untrusted`], as a file Keel did
//! not create: the workspace's own beneath the workspace root (a symlink is
//! followed only while it stays inside), those of the directories above it
//! only when the file itself is not a symlink (`O_NOFOLLOW`), the global one
//! as the user's (a symlink is followed). Each must be a regular file, is
//! opened without blocking and read only up to what is left of the cap.
//!
//! Invariants: loading never blocks (a FIFO or a device is refused at once);
//! a file that exists but is refused — a symlink to `/proc/self/environ` or
//! `~/.ssh/id_rsa`, a FIFO, a hard link — is skipped and named, with the
//! reason, in a `warning` event (`instruction_file_refused`), never quoted;
//! nothing here writes.

use std::path::{Path, PathBuf};

use keel_protocol::{InstructionFile, InstructionScope};
use keel_tools::untrusted::{self, Limit, Origin};

/// The default cap on all instruction files together.
pub const DEFAULT_INSTRUCTION_BYTES: usize = 32 * 1024;

/// Where a kernel looks for project instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Instructions {
    /// Load them at all.
    pub enabled: bool,
    /// The global directory (`None`: none).
    pub global_dir: Option<PathBuf>,
    /// The cap on all files together, in bytes.
    pub max_bytes: usize,
}

impl Default for Instructions {
    /// Enabled, capped at 32 KiB, with no global directory: the kernel
    /// reads no environment, so the host names the user's directory
    /// ([`Instructions::with_global_dir`]; keel-host passes Keel's
    /// configuration directory, `$XDG_CONFIG_HOME/keel` or `~/.config/keel`).
    fn default() -> Self {
        Self {
            enabled: true,
            global_dir: None,
            max_bytes: DEFAULT_INSTRUCTION_BYTES,
        }
    }
}

impl Instructions {
    /// These settings with `dir` as the global directory.
    pub fn with_global_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.global_dir = dir;
        self
    }

    /// No project instructions.
    pub fn none() -> Self {
        Self {
            enabled: false,
            global_dir: None,
            max_bytes: 0,
        }
    }
}

/// The instruction files a run loaded and the text the model sees.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Loaded {
    pub(crate) files: Vec<InstructionFile>,
    /// The section of the system prompt, empty without files.
    pub(crate) text: String,
    /// One sentence per instruction file that was refused (path and
    /// reason, never its content), for `warning` events.
    pub(crate) refused: Vec<String>,
}

/// The code of the `warning` event for a refused instruction file.
pub(crate) const REFUSED_CODE: &str = "instruction_file_refused";

/// The nearest ancestor of `root` (itself included) that holds `.git`.
pub(crate) fn repository_root(root: &Path) -> Option<&Path> {
    root.ancestors()
        .find(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok())
}

/// Where the instruction files of one directory are, and how they are opened.
enum Place<'a> {
    /// The global directory: the user's own files.
    Global(&'a Path),
    /// A directory above the workspace: no symlink as the last component.
    Above(&'a Path),
    /// A directory of the workspace (`dir` relative to `root`; empty for
    /// the root itself): beneath the root's handle. The global directory is
    /// read this way too when it lies inside the workspace (a workspace
    /// that is the home directory), since a command could have planted it.
    Workspace {
        root: &'a Path,
        dir: PathBuf,
        scope: InstructionScope,
    },
}

/// Loads the instruction files for a workspace at `root`.
pub(crate) fn load(settings: &Instructions, root: &Path) -> Loaded {
    let mut loaded = Loaded::default();
    if !settings.enabled {
        return loaded;
    }
    let mut places: Vec<Place<'_>> = Vec::new();
    if let Some(dir) = &settings.global_dir {
        match untrusted::user_dir_within(dir, root, &dir.join("AGENTS.md")) {
            Ok(Some(dir)) => places.push(Place::Workspace {
                root,
                dir,
                scope: InstructionScope::Global,
            }),
            Ok(None) => places.push(Place::Global(dir)),
            Err(error) if error.is_not_found() => {}
            Err(error) => {
                tracing::warn!(%error, "skipping the global instructions");
                loaded.refused.push(format!(
                    "project instructions: {error}; the file was not loaded"
                ));
            }
        }
    }
    let top = repository_root(root);
    let mut dirs: Vec<&Path> = root
        .ancestors()
        .take_while(|dir| top.is_none_or(|top| dir.starts_with(top)))
        .collect();
    dirs.reverse();
    for dir in dirs {
        // The global directory is read once, as the user's.
        if settings.global_dir.as_deref() == Some(dir) {
            continue;
        }
        places.push(match dir == root {
            true => Place::Workspace {
                root,
                dir: PathBuf::new(),
                scope: InstructionScope::Project,
            },
            false => Place::Above(dir),
        });
    }
    let mut left = settings.max_bytes;
    for place in places {
        let Some((path, scope, content, bytes)) = pick(&place, left, &mut loaded.refused) else {
            continue;
        };
        let truncated = (content.len() as u64) < bytes;
        left = left.saturating_sub(content.len());
        loaded.text.push_str(&format!(
            "\n## {}\n\n{}",
            path.display(),
            content.trim_end()
        ));
        if truncated {
            loaded.text.push_str(&format!(
                "\n\n[Truncated: this file has {bytes} bytes; only the first {} are shown \
                 because project instructions are capped at {} bytes. Read the file for the rest.]",
                content.len(),
                settings.max_bytes
            ));
        }
        loaded.text.push('\n');
        loaded.files.push(InstructionFile::new(
            path.display().to_string(),
            scope,
            bytes,
            truncated,
        ));
    }
    if !loaded.files.is_empty() {
        loaded.text = format!(
            "# Project instructions\n\nThe files below hold instructions for this project, \
             outermost first; where they disagree, the later (deeper) file wins.\n{}",
            loaded.text
        );
    }
    loaded
}

/// The first of `AGENTS.md`, `CLAUDE.md` in `place` that can be read: its
/// path, scope, at most `cap` bytes of it (cut at a character boundary) and
/// its full size. A file that exists but is refused (a symlink leading out
/// of the workspace, a FIFO, a device, …) is named in `refused`, and the
/// next name is tried.
fn pick(
    place: &Place<'_>,
    cap: usize,
    refused: &mut Vec<String>,
) -> Option<(PathBuf, InstructionScope, String, u64)> {
    for name in ["AGENTS.md", "CLAUDE.md"] {
        let name = Path::new(name);
        let joined = match place {
            Place::Global(dir) | Place::Above(dir) => dir.join(name),
            Place::Workspace { dir, .. } => dir.join(name),
        };
        let (origin, scope) = match place {
            Place::Global(_) => (Origin::User(&joined), InstructionScope::Global),
            Place::Above(_) => (Origin::NoFollow(&joined), InstructionScope::Project),
            Place::Workspace { root, scope, .. } => {
                (Origin::Beneath { root, rel: &joined }, *scope)
            }
        };
        match untrusted::read(origin, Limit::Truncate(cap as u64)) {
            Ok(contents) => {
                let mut text = String::from_utf8_lossy(&contents.bytes).into_owned();
                if contents.truncated {
                    // A character cut at the cap shows as a replacement; drop it.
                    while text.ends_with('\u{fffd}') {
                        text.pop();
                    }
                }
                return Some((origin.shown(), scope, text, contents.len));
            }
            Err(error) if error.is_not_found() => {}
            Err(error) => {
                tracing::warn!(%error, "skipping an instruction file");
                refused.push(format!(
                    "project instructions: {error}; the file was not loaded"
                ));
            }
        }
    }
    None
}

/// The facts about the machine a request states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Environment {
    /// Today's date (UTC), `YYYY-MM-DD`.
    pub(crate) date: String,
    /// The workspace root.
    pub(crate) working_directory: PathBuf,
    /// Operating system and architecture.
    pub(crate) os: String,
    /// The user's shell, as the host gave it (its `SHELL`).
    pub(crate) shell: Option<String>,
    /// Whether the workspace is inside a git repository.
    pub(crate) git_repository: bool,
}

impl Environment {
    /// The environment of a workspace at `root`, on the day `now_ms` falls in.
    pub(crate) fn detect(root: &Path, now_ms: u64, shell: Option<&str>) -> Self {
        Self {
            date: date(now_ms),
            working_directory: root.to_path_buf(),
            os: format!("{} ({})", std::env::consts::OS, std::env::consts::ARCH),
            shell: shell.filter(|shell| !shell.is_empty()).map(str::to_owned),
            git_repository: repository_root(root).is_some(),
        }
    }

    /// The section of the system prompt.
    pub(crate) fn render(&self) -> String {
        format!(
            "# Environment\n\n- Date: {}\n- Working directory: {}\n- Operating system: {}\n- Shell: {}\n- Git repository: {}",
            self.date,
            self.working_directory.display(),
            self.os,
            self.shell.as_deref().unwrap_or("unknown"),
            if self.git_repository { "yes" } else { "no" },
        )
    }
}

/// The UTC calendar date of a Unix time in milliseconds, `YYYY-MM-DD`.
fn date(now_ms: u64) -> String {
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let days = (now_ms / 86_400_000) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_days() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400_000), "2000-02-29");
        assert_eq!(date(1_767_225_599_999), "2025-12-31");
        assert_eq!(date(1_767_225_600_000), "2026-01-01");
    }
}
