//! What `build.rs` learns about the build (the commit, whether the tree was
//! dirty, the date), kept apart from it so the binary's unit tests check the
//! same code (`src/version.rs`).

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

/// The commit a build was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The abbreviated hash of `HEAD`.
    pub short: String,
    /// Whether tracked files differed from `HEAD` (untracked files do not count).
    pub dirty: bool,
}

/// Runs `git ARGS` in `dir`; its trimmed stdout if it succeeded.
fn git(program: &OsStr, dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new(program)
        // Never take the index lock (a concurrent `git commit` would fail).
        .arg("--no-optional-locks")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    Some(String::from_utf8(output.stdout).ok()?.trim().to_owned())
}

/// The commit `dir` was checked out at, when `dir` is tracked by a git
/// repository that `program` (normally `git`) can read: `None` without git,
/// outside a repository (a source tarball), or when the repository found
/// does not track `marker` (a tarball unpacked inside some other
/// repository must not claim that repository's commit).
pub fn commit(program: &OsStr, dir: &Path, marker: &str) -> Option<Commit> {
    git(program, dir, &["ls-files", "--error-unmatch", "--", marker])?;
    let short = git(program, dir, &["rev-parse", "--short=10", "HEAD"])?;
    if short.is_empty() || !short.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let status = git(
        program,
        dir,
        &["status", "--porcelain", "--untracked-files=no"],
    )?;
    Some(Commit {
        short,
        dirty: !status.is_empty(),
    })
}

/// The files whose change means `HEAD`, the branch it names or the index
/// moved: `HEAD`, the branch's ref file (or `packed-refs` when it has none)
/// and the index, as git locates them (a worktree's live elsewhere).
pub fn watched_git_files(program: &OsStr, dir: &Path) -> Vec<String> {
    let mut paths = vec!["HEAD".to_owned(), "index".to_owned()];
    if let Some(branch) = git(program, dir, &["symbolic-ref", "-q", "HEAD"]) {
        paths.push(branch);
        paths.push("packed-refs".to_owned());
    }
    paths
        .iter()
        .filter_map(|path| {
            git(
                program,
                dir,
                &["rev-parse", "--path-format=absolute", "--git-path", path],
            )
        })
        .filter(|path| Path::new(path).exists())
        .collect()
}

/// The build date, `YYYY-MM-DD` (UTC): from `SOURCE_DATE_EPOCH` when it is
/// set (reproducible builds), else from `now` (seconds since the epoch).
pub fn build_date(source_date_epoch: Option<&str>, now: u64) -> Result<String, String> {
    let seconds = match source_date_epoch {
        Some(value) => value.trim().parse::<u64>().map_err(|_| {
            format!("SOURCE_DATE_EPOCH must be a whole number of seconds, not {value:?}")
        })?,
        None => now,
    };
    Ok(civil_date(seconds))
}

/// `YYYY-MM-DD` of a Unix time (the proleptic Gregorian calendar, UTC).
pub fn civil_date(seconds: u64) -> String {
    // Days since 1970-01-01, shifted to start on 0000-03-01 so leap days
    // end each 400-year era.
    let days = seconds / 86_400 + 719_468;
    let era = days / 146_097;
    let day_of_era = days % 146_097;
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
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The text after `keel ` in `keel --version`.
pub fn version_line(version: &str, commit: Option<&Commit>, date: &str) -> String {
    let commit = match commit {
        Some(Commit { short, dirty: true }) => format!("{short}-dirty"),
        Some(Commit {
            short,
            dirty: false,
        }) => short.clone(),
        None => "unknown".to_owned(),
    };
    format!("{version} (commit {commit}, built {date})")
}
