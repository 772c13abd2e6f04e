//! What `keel --version` and `keel version --json` say about the build
//! (issue 27): the version, the commit `build.rs` found (checked against
//! git here when the sources are a repository), the build date and the
//! format versions this build speaks — through the binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Runs `keel ARGS` (isolated home) to the end: exit code, stdout, stderr.
fn keel(args: &[&str]) -> (i32, String, String) {
    let home = tempfile::tempdir().unwrap();
    let mut child = common::spawn_keel(args, home.path(), &[]);
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `git ARGS` in this crate's directory, if git and a repository are there.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The commit the sources are at, when they are a git checkout that
/// tracks this crate (as `build.rs` decides).
fn head() -> Option<String> {
    git(&["ls-files", "--error-unmatch", "build.rs"])?;
    git(&["rev-parse", "--short=10", "HEAD"])
}

/// Splits `keel 0.1.0 (commit X, built D)` into its parts.
fn parse_line(line: &str) -> (String, String, String) {
    let rest = line.strip_prefix("keel ").expect("starts with `keel `");
    let (version, rest) = rest.split_once(" (commit ").expect("names the commit");
    let (commit, rest) = rest.split_once(", built ").expect("names the date");
    let date = rest.strip_suffix(')').expect("ends with `)`");
    (version.to_owned(), commit.to_owned(), date.to_owned())
}

fn is_date(date: &str) -> bool {
    let bytes = date.as_bytes();
    bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit())
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let (code, stdout, stderr) = keel(&["--version"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.ends_with('\n') && stdout.lines().count() == 1,
        "{stdout:?}"
    );
    let (version, commit, date) = parse_line(stdout.trim_end());
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    assert!(is_date(&date), "{date}");
    match head() {
        // The build this test runs against was made from the checkout the
        // test runs in; a commit made since would have rebuilt it.
        Some(head) => assert!(
            commit == head || commit == format!("{head}-dirty"),
            "{commit} vs HEAD {head}"
        ),
        None => assert_eq!(commit, "unknown"),
    }
    // `-V` and `keel version` say the same.
    assert_eq!(keel(&["-V"]).1, stdout);
    assert_eq!(keel(&["version"]).1, stdout);
}

#[test]
fn version_json_names_the_build_and_the_formats_it_speaks() {
    let (code, stdout, stderr) = keel(&["version", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let info: Value = serde_json::from_str(&stdout).unwrap();
    let keys: Vec<&str> = info
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = vec![
        "build_date",
        "commit",
        "dirty",
        "features",
        "oldest_session_format_version",
        "protocol_version",
        "session_format_version",
        "version",
    ];
    expected.sort_unstable();
    let mut keys_sorted = keys.clone();
    keys_sorted.sort_unstable();
    assert_eq!(keys_sorted, expected);

    let (_, text, _) = keel(&["--version"]);
    let (version, commit, date) = parse_line(text.trim_end());
    assert_eq!(info["version"], version.as_str());
    assert_eq!(info["build_date"], date.as_str());
    match commit.strip_suffix("-dirty") {
        _ if commit == "unknown" => {
            assert_eq!(info["commit"], Value::Null);
            assert_eq!(info["dirty"], Value::Null);
        }
        Some(short) => {
            assert_eq!(info["commit"], short);
            assert_eq!(info["dirty"], true);
        }
        None => {
            assert_eq!(info["commit"], commit.as_str());
            assert_eq!(info["dirty"], false);
        }
    }
    assert_eq!(
        info["session_format_version"],
        keel_session::jsonl::FORMAT_VERSION
    );
    assert_eq!(
        info["oldest_session_format_version"],
        keel_session::jsonl::OLDEST_FORMAT_VERSION
    );
    assert!(
        info["oldest_session_format_version"].as_u64() <= info["session_format_version"].as_u64()
    );
    assert_eq!(
        info["protocol_version"],
        keel_protocol::rpc::PROTOCOL_VERSION
    );
    // Test builds of `keel` have the crash points compiled in (tests/crash.rs
    // needs them), and say so; `scripts/release.sh` checks a release does not.
    assert_eq!(info["features"], serde_json::json!(["failpoints"]));

    // `keel --version --json` is the same object.
    let (code, same, _) = keel(&["--version", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(same, stdout);
}

/// The session format versions the binary reports are the ones the fixture
/// directories of `tests/compat.rs` hold (one directory per version read).
#[test]
fn the_reported_session_formats_are_the_ones_with_fixtures() {
    let (_, stdout, _) = keel(&["version", "--json"]);
    let info: Value = serde_json::from_str(&stdout).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sessions");
    let newest = info["session_format_version"].as_u64().unwrap();
    assert!(
        fixtures.join(format!("v{newest}")).is_dir(),
        "no fixtures for the format version this build writes"
    );
}

/// The protocol version `version --json` reports is the one `keel rpc`
/// announces in its `initialize` answer.
#[test]
fn the_reported_protocol_version_is_the_one_rpc_announces() {
    use std::io::{BufRead, BufReader, Write};
    let (_, stdout, _) = keel(&["version", "--json"]);
    let info: Value = serde_json::from_str(&stdout).unwrap();
    let home = tempfile::tempdir().unwrap();
    let sessions = home.path().join("sessions");
    let mut child = common::spawn_keel(
        &["rpc", "--session-dir", &sessions.display().to_string()],
        home.path(),
        &[],
    );
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{}}}}"#
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(
        answer["result"]["protocol_version"], info["protocol_version"],
        "{answer}"
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// CHANGELOG.md has an entry (a `## [VERSION]` heading, Keep a Changelog
/// style) for the version `keel --version` prints, and a link for it.
#[test]
fn the_changelog_has_an_entry_for_the_version_keel_prints() {
    let (_, stdout, _) = keel(&["--version"]);
    let (version, _, _) = parse_line(stdout.trim_end());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap();
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
    let heading = format!("## [{version}]");
    assert!(
        changelog
            .lines()
            .any(|line| line == heading || line.starts_with(&format!("{heading} "))),
        "CHANGELOG.md has no `{heading}` entry for the version keel prints"
    );
    assert!(
        changelog
            .lines()
            .any(|line| line.starts_with(&format!("[{version}]: "))),
        "CHANGELOG.md has no link for [{version}]"
    );
    assert!(
        changelog.contains("## [Unreleased]"),
        "CHANGELOG.md keeps an Unreleased section"
    );
}
