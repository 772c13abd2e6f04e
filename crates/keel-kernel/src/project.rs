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
//! Invariants: only regular files are read (a FIFO or a directory named
//! `AGENTS.md` is skipped, so loading never blocks); a file that cannot be
//! read is skipped with a `warn` trace, never an error; nothing here writes.

use std::io::Read;
use std::path::{Path, PathBuf};

use keel_protocol::{InstructionFile, InstructionScope};

/// The default cap on all instruction files together.
pub const DEFAULT_INSTRUCTION_BYTES: usize = 32 * 1024;

/// Where a kernel looks for project instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instructions {
    /// Load them at all.
    pub enabled: bool,
    /// The global directory (`None`: none).
    pub global_dir: Option<PathBuf>,
    /// The cap on all files together, in bytes.
    pub max_bytes: usize,
}

impl Default for Instructions {
    /// Enabled, the global directory from `XDG_CONFIG_HOME` (else
    /// `~/.config`) plus `keel`, capped at 32 KiB.
    fn default() -> Self {
        let global_dir = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))
            .map(|base| base.join("keel"));
        Self {
            enabled: true,
            global_dir,
            max_bytes: DEFAULT_INSTRUCTION_BYTES,
        }
    }
}

impl Instructions {
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
}

/// The nearest ancestor of `root` (itself included) that holds `.git`.
pub(crate) fn repository_root(root: &Path) -> Option<&Path> {
    root.ancestors()
        .find(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok())
}

/// Loads the instruction files for a workspace at `root`.
pub(crate) fn load(settings: &Instructions, root: &Path) -> Loaded {
    if !settings.enabled {
        return Loaded::default();
    }
    let mut candidates: Vec<(PathBuf, InstructionScope)> = Vec::new();
    if let Some(dir) = &settings.global_dir
        && let Some(path) = pick(dir)
    {
        candidates.push((path, InstructionScope::Global));
    }
    let top = repository_root(root);
    let mut dirs: Vec<&Path> = root
        .ancestors()
        .take_while(|dir| top.is_none_or(|top| dir.starts_with(top)))
        .collect();
    dirs.reverse();
    for dir in dirs {
        if let Some(path) = pick(dir)
            && !candidates.iter().any(|(seen, _)| seen == &path)
        {
            candidates.push((path, InstructionScope::Project));
        }
    }
    let mut loaded = Loaded::default();
    let mut left = settings.max_bytes;
    for (path, scope) in candidates {
        let Some((content, bytes)) = read_capped(&path, left) else {
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
        loaded.files.push(InstructionFile {
            path: path.display().to_string(),
            scope,
            bytes,
            truncated,
        });
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

/// `AGENTS.md` in `dir` if it is a regular file, else `CLAUDE.md` if that is.
fn pick(dir: &Path) -> Option<PathBuf> {
    ["AGENTS.md", "CLAUDE.md"]
        .iter()
        .map(|name| dir.join(name))
        .find(|path| std::fs::metadata(path).is_ok_and(|meta| meta.is_file()))
}

/// At most `cap` bytes of the file (cut at a character boundary), and
/// its full size; `None` if it cannot be read.
fn read_capped(path: &Path, cap: usize) -> Option<(String, u64)> {
    let read = || -> std::io::Result<(String, u64)> {
        let file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        let mut bytes = Vec::new();
        file.take(cap as u64).read_to_end(&mut bytes)?;
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if bytes.len() as u64 == meta.len() {
            return Ok((text, meta.len()));
        }
        // A character cut at the cap shows as a replacement; drop it.
        while text.ends_with('\u{fffd}') {
            text.pop();
        }
        Ok((text, meta.len()))
    };
    match read() {
        Ok(found) => Some(found),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "skipping an instruction file");
            None
        }
    }
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
    /// The user's shell, from `SHELL`.
    pub(crate) shell: Option<String>,
    /// Whether the workspace is inside a git repository.
    pub(crate) git_repository: bool,
}

impl Environment {
    /// The environment of a workspace at `root`, on the day `now_ms` falls in.
    pub(crate) fn detect(root: &Path, now_ms: u64) -> Self {
        Self {
            date: date(now_ms),
            working_directory: root.to_path_buf(),
            os: format!("{} ({})", std::env::consts::OS, std::env::consts::ARCH),
            shell: std::env::var("SHELL")
                .ok()
                .filter(|shell| !shell.is_empty()),
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
