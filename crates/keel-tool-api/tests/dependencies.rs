//! The Tool API stays small: a crate that implements a tool builds nothing
//! of the OS sandbox, the shell analysis or the search engines. This reads
//! the dependency graph through `cargo tree` (normal and build dependencies
//! for this machine's target; its own tests may use anything) and fails
//! when keel-tool-api reaches any of them, directly or through another crate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// Crates a tool must never have to build.
const FORBIDDEN: &[&str] = &[
    "keel-sandbox",
    "keel-shell",
    "keel-tools",
    "landlock",
    "seccompiler",
    "grep-searcher",
    "grep-regex",
    "grep-matcher",
    "ignore",
    "globset",
];

/// The only keel crate the API may depend on.
const KEEL_ALLOWED: &[&str] = &["keel-protocol"];

/// The names of the packages `package` reaches through normal and build
/// dependencies (itself included).
fn reached(package: &str) -> BTreeSet<String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--edges",
            "normal,build",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "--package", package])
        .arg("--manifest-path")
        .arg(manifest)
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Every package of `reached` that breaks the rule for `root`, one
/// sentence each.
fn violations(root: &str, reached: &BTreeSet<String>) -> Vec<String> {
    reached
        .iter()
        .filter(|name| name.as_str() != root)
        .filter(|name| {
            FORBIDDEN.contains(&name.as_str())
                || (name.starts_with("keel-") && !KEEL_ALLOWED.contains(&name.as_str()))
        })
        .map(|name| format!("{root} depends on {name}"))
        .collect()
}

#[test]
fn the_tool_api_builds_nothing_of_the_sandbox_the_shell_or_the_search() {
    let reached = reached("keel-tool-api");
    // The check must see the graph: the API's own dependencies are there.
    for expected in ["keel-tool-api", "keel-protocol", "jsonschema", "tokio"] {
        assert!(
            reached.contains(expected),
            "{expected} missing: {reached:?}"
        );
    }
    let found = violations("keel-tool-api", &reached);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_check_catches_what_keel_tools_builds() {
    let found = violations("keel-tool-api", &reached("keel-tools"));
    for expected in [
        "keel-tools",
        "keel-sandbox",
        "keel-shell",
        "landlock",
        "globset",
    ] {
        assert!(
            found
                .iter()
                .any(|line| line.ends_with(&format!(" {expected}"))),
            "{expected} not caught: {found:#?}"
        );
    }
}
