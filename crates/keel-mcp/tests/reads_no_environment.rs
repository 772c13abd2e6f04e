//! keel-mcp never reads the process environment or the current directory:
//! the host passes its environment in (`HostEnv`), and a stdio server's
//! environment is built from that alone. This scans the crate's `src/`
//! (not its tests or the test server) for the calls that read them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

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

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// Each line of `text` that reads the environment, as `number: line`.
fn reads(text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.trim_start();
            !code.starts_with("//") && READS.iter().any(|read| code.contains(read))
        })
        .map(|(number, line)| format!("{}: {}", number + 1, line.trim()))
        .collect()
}

#[test]
fn the_crate_never_reads_the_process_environment() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() >= 5, "{files:?}");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        found.extend(
            reads(&text)
                .into_iter()
                .map(|hit| format!("{}:{hit}", file.display())),
        );
    }
    assert!(
        found.is_empty(),
        "keel-mcp reads the environment:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_a_read() {
    assert_eq!(
        reads("let x = std::env::var(\"A\");\n// std::env::var\n").len(),
        1
    );
    assert_eq!(reads("let d = std::env::current_dir();").len(), 1);
}
