//! `keel --version` and `keel version [--json]`: which build this is (the
//! version, the commit and date `build.rs` found) and which formats it
//! speaks, so a user or a packager knows what they run.

use std::process::ExitCode;

use serde_json::{Value, json};

use crate::args::DataFormat;
use crate::startup::StartupError;

/// What follows `keel ` in `keel --version`: `0.1.0 (commit 1a2b3c4d5e,
/// built 2026-12-03)`, `-dirty` after the hash when tracked files differed
/// from it, `commit unknown` for a build made without git.
pub const VERSION_LINE: &str = env!("KEEL_BUILD_VERSION_LINE");

/// The build as one JSON object (`keel version --json`).
pub fn info() -> Value {
    let commit = env!("KEEL_BUILD_COMMIT");
    let dirty = match env!("KEEL_BUILD_DIRTY") {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::Null,
    };
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "commit": if commit.is_empty() { Value::Null } else { Value::from(commit) },
        "dirty": dirty,
        "build_date": env!("KEEL_BUILD_DATE"),
        "session_format_version": keel_session::jsonl::FORMAT_VERSION,
        "oldest_session_format_version": keel_session::jsonl::OLDEST_FORMAT_VERSION,
        "protocol_version": keel_protocol::rpc::PROTOCOL_VERSION,
        "features": features(),
    })
}

/// The features this build was made with: keel-cli's Cargo features, and
/// `failpoints` when the crash points are compiled in (test builds only;
/// a release must never have it).
fn features() -> Vec<String> {
    let mut features: Vec<String> = env!("KEEL_BUILD_FEATURES")
        .split(',')
        .filter(|feature| !feature.is_empty())
        .map(str::to_owned)
        .collect();
    if keel_failpoint::ENABLED {
        features.push("failpoints".to_owned());
    }
    features.sort();
    features
}

/// `keel version`: the `--version` line, or one JSON object (with
/// `"type": "version"` as a JSON line of `stream-json`).
pub fn run(format: DataFormat) -> Result<ExitCode, StartupError> {
    let text = match format {
        DataFormat::Text => format!("keel {VERSION_LINE}"),
        DataFormat::Json => info().to_string(),
        DataFormat::StreamJson => {
            let mut line = info();
            line["type"] = Value::from("version");
            line.to_string()
        }
    };
    crate::install::write_stdout(format!("{text}\n").as_bytes())
}

#[cfg(test)]
#[path = "../build/info.rs"]
#[allow(dead_code)]
mod build_info;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::build_info::{self, Commit};
    use std::ffi::OsStr;
    use std::path::Path;

    #[test]
    fn civil_dates_match_the_calendar() {
        assert_eq!(build_info::civil_date(0), "1970-01-01");
        assert_eq!(build_info::civil_date(951_782_400), "2000-02-29");
        assert_eq!(build_info::civil_date(951_868_799), "2000-02-29");
        assert_eq!(build_info::civil_date(951_868_800), "2000-03-01");
        assert_eq!(build_info::civil_date(1_709_164_800), "2024-02-29");
        assert_eq!(build_info::civil_date(1_735_689_599), "2024-12-31");
        assert_eq!(build_info::civil_date(4_107_542_400), "2100-03-01");
    }

    #[test]
    fn source_date_epoch_wins_over_the_clock_and_must_be_seconds() {
        assert_eq!(
            build_info::build_date(Some("1709164800"), 0).unwrap(),
            "2024-02-29"
        );
        assert_eq!(
            build_info::build_date(None, 1_709_164_800).unwrap(),
            "2024-02-29"
        );
        let error = build_info::build_date(Some("yesterday"), 0).unwrap_err();
        assert!(error.contains("SOURCE_DATE_EPOCH"), "{error}");
    }

    #[test]
    fn the_version_line_names_the_commit_or_says_it_is_unknown() {
        let clean = Commit {
            short: "1a2b3c4d5e".to_owned(),
            dirty: false,
        };
        let dirty = Commit {
            dirty: true,
            ..clean.clone()
        };
        assert_eq!(
            build_info::version_line("0.1.0", Some(&clean), "2026-12-03"),
            "0.1.0 (commit 1a2b3c4d5e, built 2026-12-03)"
        );
        assert_eq!(
            build_info::version_line("0.1.0", Some(&dirty), "2026-12-03"),
            "0.1.0 (commit 1a2b3c4d5e-dirty, built 2026-12-03)"
        );
        assert_eq!(
            build_info::version_line("0.1.0", None, "2026-12-03"),
            "0.1.0 (commit unknown, built 2026-12-03)"
        );
    }

    /// A build without git (no program, or a source tree that is no
    /// repository) has no commit.
    #[test]
    fn a_build_without_git_has_no_commit() {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        assert_eq!(
            build_info::commit(OsStr::new("/nonexistent/git"), manifest, "build.rs"),
            None
        );
        if std::process::Command::new("git")
            .arg("--version")
            .output()
            .is_err()
        {
            return;
        }
        let plain = tempfile::tempdir().unwrap();
        std::fs::write(plain.path().join("build.rs"), "fn main() {}\n").unwrap();
        let outside = std::process::Command::new("git")
            .args(["rev-parse", "--git-dir"])
            .current_dir(plain.path())
            .output()
            .unwrap();
        if outside.status.success() {
            // The temporary directory lies inside some repository: a build
            // there would be judged by the marker instead (tested below).
            return;
        }
        assert_eq!(
            build_info::commit(OsStr::new("git"), plain.path(), "build.rs"),
            None
        );
    }

    /// A repository that does not track the marker (a source tarball
    /// unpacked inside another repository) does not lend its commit; one
    /// that does names it, dirty once a tracked file changes.
    #[test]
    fn only_a_repository_tracking_the_sources_names_the_commit() {
        let git = |dir: &Path, args: &[&str]| {
            std::process::Command::new("git")
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "commit.gpgsign=false",
                ])
                .args(args)
                .current_dir(dir)
                .output()
        };
        let repo = tempfile::tempdir().unwrap();
        let Ok(init) = git(repo.path(), &["init", "-q"]) else {
            return; // no git on this machine
        };
        assert!(init.status.success());
        std::fs::write(repo.path().join("other.txt"), "x\n").unwrap();
        assert!(
            git(repo.path(), &["add", "other.txt"])
                .unwrap()
                .status
                .success()
        );
        assert!(
            git(repo.path(), &["commit", "-q", "-m", "one"])
                .unwrap()
                .status
                .success()
        );
        std::fs::write(repo.path().join("build.rs"), "fn main() {}\n").unwrap();
        let program = OsStr::new("git");
        assert_eq!(build_info::commit(program, repo.path(), "build.rs"), None);

        assert!(
            git(repo.path(), &["add", "build.rs"])
                .unwrap()
                .status
                .success()
        );
        assert!(
            git(repo.path(), &["commit", "-q", "-m", "two"])
                .unwrap()
                .status
                .success()
        );
        let head = git(repo.path(), &["rev-parse", "--short=10", "HEAD"]).unwrap();
        let head = String::from_utf8(head.stdout).unwrap().trim().to_owned();
        assert_eq!(
            build_info::commit(program, repo.path(), "build.rs"),
            Some(Commit {
                short: head.clone(),
                dirty: false
            })
        );
        // An untracked file leaves it clean; a changed tracked one does not.
        std::fs::write(repo.path().join("new.txt"), "y\n").unwrap();
        assert_eq!(
            build_info::commit(program, repo.path(), "build.rs").map(|c| c.dirty),
            Some(false)
        );
        std::fs::write(repo.path().join("other.txt"), "changed\n").unwrap();
        assert_eq!(
            build_info::commit(program, repo.path(), "build.rs"),
            Some(Commit {
                short: head,
                dirty: true
            })
        );
        let watched = build_info::watched_git_files(program, repo.path());
        for name in ["HEAD", "index"] {
            assert!(
                watched
                    .iter()
                    .any(|path| path.ends_with(&format!(".git/{name}"))),
                "{watched:?}"
            );
        }
        assert!(
            watched.iter().any(|path| path.contains("refs/heads/")),
            "{watched:?}"
        );
    }
}
