//! Keel's crates point down only (docs/architecture.md): a crate may depend on a crate
//! of strictly lower rank, never on one beside or above it, and that holds
//! for dev-dependencies too (a test that needs a higher crate belongs in
//! that crate).
//!
//! The check reads the workspace's manifests through `cargo metadata`, so
//! it fails as soon as a `Cargo.toml` gains an edge that points up, and
//! when a new `keel-*` crate appears that the rank table does not place.
//! It lives in keel-protocol because the lowest crate is the one every
//! workspace test run builds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// Each keel crate's rank, lowest first: docs/architecture.md's picture as numbers.
const RANKS: &[(&str, u32)] = &[
    // The vocabulary: no keel dependency at all.
    ("keel-protocol", 0),
    // Test-only crash points, compiled to nothing outside test builds.
    ("keel-failpoint", 0),
    // The export configuration and (behind `export`) the OTLP exporter of
    // the kernel's spans: no keel dependency, so any host can name it.
    ("keel-telemetry", 0),
    // The Tool API: what every tool implements, over the vocabulary only.
    ("keel-tool-api", 1),
    // Engines and stores that speak only the vocabulary.
    ("keel-provider", 1),
    ("keel-session", 1),
    // The engines behind `bash`: the OS sandbox (the host's environment
    // snapshot is the Tool API's) and the shell analysis (its path helpers
    // are the rooted workspace's, in the Tool API).
    ("keel-sandbox", 2),
    ("keel-shell", 2),
    // The MCP client: servers' tools on the Tool API, nothing of the sandbox.
    ("keel-mcp", 2),
    // The built-in tools on the Tool API, a facade over sandbox and shell.
    ("keel-tools", 3),
    // The agent loop, over providers, sessions and tools.
    ("keel-kernel", 4),
    // Assembling a kernel from configuration, for every host.
    ("keel-host", 5),
    // Transports over the broker (the host protocol, authentication).
    ("keel-server", 6),
    // The SWE-bench evaluator: a host over the broker.
    ("keel-swebench", 6),
    // The `keel` binary.
    ("keel-cli", 7),
];

fn rank(name: &str) -> Option<u32> {
    RANKS
        .iter()
        .find(|(crate_name, _)| *crate_name == name)
        .map(|(_, rank)| *rank)
}

fn unknown(name: &str) -> String {
    format!(
        "`{name}` is not in the rank table: add it to RANKS in {} at the rank docs/architecture.md gives it (and draw it there)",
        file!()
    )
}

/// The workspace's packages, as `cargo metadata` reports them.
fn workspace_packages() -> Vec<Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    metadata["packages"].as_array().unwrap().clone()
}

/// Every way the workspace breaks the layering, one sentence each.
fn violations(packages: &[Value]) -> Vec<String> {
    let mut found = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap();
        if !name.starts_with("keel-") {
            continue;
        }
        let Some(own) = rank(name) else {
            found.push(unknown(name));
            continue;
        };
        for dependency in package["dependencies"].as_array().unwrap() {
            let target = dependency["name"].as_str().unwrap();
            // A crate's dev-dependency on itself only turns on a feature
            // (`test-util`) for its own tests; it is no edge between crates.
            if !target.starts_with("keel-") || target == name {
                continue;
            }
            let kind = dependency["kind"].as_str().unwrap_or("normal");
            match rank(target) {
                None => found.push(format!("{name} -> {target} ({kind}): {}", unknown(target))),
                Some(theirs) if theirs >= own => found.push(format!(
                    "{name} (rank {own}) -> {target} (rank {theirs}), a {kind} dependency: \
                     a crate may depend only on crates of strictly lower rank"
                )),
                Some(_) => {}
            }
        }
    }
    found
}

#[test]
fn crate_dependencies_point_down_only() {
    let packages = workspace_packages();
    let names: Vec<&str> = packages
        .iter()
        .filter_map(|package| package["name"].as_str())
        .collect();
    // The check must see the workspace, not an empty or partial listing.
    for expected in [
        "keel-protocol",
        "keel-tool-api",
        "keel-tools",
        "keel-kernel",
        "keel-cli",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let found = violations(&packages);
    assert!(
        found.is_empty(),
        "dependency edges that break the layering of docs/architecture.md:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_check_catches_an_upward_edge_and_an_unknown_crate() {
    let package = |name: &str, dependencies: &[(&str, Option<&str>)]| {
        let dependencies: Vec<Value> = dependencies
            .iter()
            .map(|(target, kind)| serde_json::json!({"name": target, "kind": kind}))
            .collect();
        serde_json::json!({"name": name, "dependencies": dependencies})
    };
    let packages = [
        package("keel-tools", &[("keel-shell", None), ("serde", None)]),
        package("keel-shell", &[("keel-sandbox", Some("dev"))]),
        package("keel-protocol", &[("keel-kernel", Some("build"))]),
        package("keel-mystery", &[]),
    ];
    let found = violations(&packages);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].starts_with("keel-shell (rank 2) -> keel-sandbox (rank 2), a dev dependency"));
    assert!(found[1].starts_with("keel-protocol (rank 0) -> keel-kernel (rank 4), a build"));
    assert!(found[2].contains("`keel-mystery` is not in the rank table"));
}
