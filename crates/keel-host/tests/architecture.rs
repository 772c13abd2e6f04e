//! Only hosts (keel-host, keel-cli) read the process environment or the
//! current directory; the library crates take explicit values. This test
//! scans the libraries' `src/` (not their tests) for the calls that read
//! them and fails naming each `file:line` not on the allowlist below.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The crates that are libraries (everything but the hosts).
const LIBRARIES: &[&str] = &[
    "keel-failpoint",
    "keel-kernel",
    "keel-protocol",
    "keel-provider",
    "keel-sandbox",
    "keel-session",
    "keel-shell",
    "keel-tools",
];

/// What reads the environment or the current directory.
const READS: &[&str] = &[
    "std::env::var",
    "env::var(",
    "env::var_os",
    "var_os(",
    "env::vars",
    "vars_os(",
    "current_dir()",
    "temp_dir()",
    "home_dir",
];

/// Reads that stay, each with its reason: (file under `crates/`, the
/// text of the line's read, why).
const ALLOWED: &[(&str, &str, &str)] = &[(
    "keel-failpoint/src/lib.rs",
    "std::env::var(super::ENV)",
    "failpoints are a test-only mechanism armed through KEEL_FAILPOINTS in the \
         process under test; compiled to nothing unless the failpoints feature is on",
)];

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// Every read in the libraries' sources that is not allowed, as
/// `file:line: text`.
fn unallowed_reads(crates: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for library in LIBRARIES {
        let mut files = Vec::new();
        rust_files(&crates.join(library).join("src"), &mut files);
        files.sort();
        for file in files {
            let relative = file
                .strip_prefix(crates)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&file).unwrap();
            for (number, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") || !READS.iter().any(|read| code.contains(read)) {
                    continue;
                }
                let allowed = ALLOWED
                    .iter()
                    .any(|(path, read, _)| relative == *path && code.contains(read));
                if !allowed {
                    found.push(format!("{relative}:{}: {}", number + 1, code));
                }
            }
        }
    }
    found
}

#[test]
fn only_hosts_read_the_environment_or_the_current_directory() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let found = unallowed_reads(crates);
    assert!(
        found.is_empty(),
        "library code reads the process environment or the current directory (pass the \
         value from keel-host instead, or allow it with a reason):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_allowed_read_still_exists() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for (path, read, _) in ALLOWED {
        let text = std::fs::read_to_string(crates.join(path)).unwrap();
        assert!(
            text.contains(read),
            "{path} no longer has {read}: drop it from ALLOWED"
        );
    }
}
