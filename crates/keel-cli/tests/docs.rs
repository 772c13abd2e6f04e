//! The repository stands alone (issue 27): the README and `docs/` refer to
//! nothing outside it, and every file they point to exists.
//!
//! - No text a reader or contributor sees — the README, `docs/`, the
//!   checked-in schemas (generated from doc comments), and the crates'
//!   sources and tests — cites the specification kept outside the
//!   repository (its file name, or a "§" section of it); the README and
//!   `docs/` also never send the reader to the folder that holds it. The
//!   contract lives in `docs/contract.md`.
//! - Every relative Markdown link in the README and `docs/*.md`, and every
//!   repository path they quote in backticks (`crates/…`, `docs/…`,
//!   `scripts/…`, `schema/…`, `.ci/…`), names a file or directory that
//!   exists.
//! - Every test they cite by name (a backticked snake_case name of four
//!   words or more) occurs in the crates' sources.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The repository root (two levels above this crate).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/keel-cli lies two levels below the root")
        .to_path_buf()
}

/// Every file under `dir` whose name ends with one of `suffixes`, sorted.
fn files(dir: &Path, suffixes: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "target" || name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            found.extend(files(&path, suffixes));
        } else if suffixes.iter().any(|suffix| name.ends_with(suffix)) {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The README and every Markdown page under `docs/`.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    pages.extend(files(&root.join("docs"), &[".md"]));
    pages
}

/// `file:line: text` for each line of `path` that contains one of `needles`.
fn hits(path: &Path, needles: &[String]) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let shown = path.strip_prefix(root()).unwrap_or(path).display();
    text.lines()
        .enumerate()
        .filter(|(_, line)| needles.iter().any(|needle| line.contains(needle.as_str())))
        .map(|(index, line)| format!("{shown}:{}: {}", index + 1, line.trim()))
        .collect()
}

#[test]
fn the_readme_and_docs_refer_to_nothing_outside_the_repository() {
    let root = root();
    // Spelled in pieces so that this file does not name them itself.
    let spec = ["SPEC", ".md"].concat();
    let section = ["SPEC", " §"].concat();
    let folder = ["shared", "/"].concat();
    let mut found = Vec::new();
    for page in pages() {
        found.extend(hits(
            &page,
            &[spec.clone(), section.clone(), folder.clone()],
        ));
    }
    let mut sources = files(&root.join("schema"), &[".json"]);
    sources.extend(files(&root.join("docs"), &[".py", ".sh", ".json", ".toml"]));
    sources.extend(files(&root.join("crates"), &[".rs", ".md", ".toml"]));
    for source in sources {
        found.extend(hits(&source, &[spec.clone(), section.clone()]));
    }
    assert!(
        found.is_empty(),
        "these lines cite a specification outside the repository; say it in \
         docs/contract.md (or the page that has the details) and point there \
         (schema/ is generated from doc comments: fix the comment and run \
         KEEL_UPDATE_SCHEMA=1 cargo test -p keel-protocol --test schema):\n  {}",
        found.join("\n  ")
    );
}

/// The targets of the Markdown links `[text](target)` in `text`.
fn markdown_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        links.push(after[..end].trim().to_owned());
        rest = &after[end..];
    }
    links
}

/// The repository paths `text` quotes in backticks: a backticked word that
/// starts with one of the repository's top-level directories and holds no
/// placeholder (`<id>`, `*`, `…`, `$VAR`, `{…}`) or space.
fn quoted_paths(text: &str) -> Vec<String> {
    const ROOTS: [&str; 5] = ["crates/", "docs/", "scripts/", "schema/", ".ci/"];
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| ROOTS.iter().any(|root| quoted.starts_with(root)))
        .filter(|quoted| {
            !quoted.contains(|c: char| {
                c.is_whitespace() || matches!(c, '<' | '>' | '*' | '…' | '$' | '{' | '}')
            })
        })
        .map(|quoted| quoted.trim_end_matches(':').to_owned())
        .collect()
}

#[test]
fn every_relative_link_in_the_readme_and_docs_points_to_a_file_that_exists() {
    let root = root();
    let mut missing = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let shown = page.strip_prefix(&root).unwrap().display().to_string();
        let directory = page.parent().unwrap();
        for link in markdown_links(&text) {
            let external = link.starts_with('#')
                || link
                    .split_once(':')
                    .is_some_and(|(scheme, _)| scheme.chars().all(|c| c.is_ascii_alphabetic()));
            if external || link.is_empty() {
                continue;
            }
            let target = link.split('#').next().unwrap_or_default();
            checked += 1;
            if !directory.join(target).exists() {
                missing.push(format!("{shown}: link ({link})"));
            }
        }
        for path in quoted_paths(&text) {
            checked += 1;
            if !root.join(&path).exists() {
                missing.push(format!("{shown}: `{path}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "these links and quoted paths name nothing in the repository:\n  {}",
        missing.join("\n  ")
    );
    // The README alone quotes dozens of paths: finding none means the
    // parser is broken, not that the docs are right.
    assert!(checked > 50, "only {checked} links and paths found");
}

/// The snake_case names of at least four words that `text` quotes in
/// backticks: the form of every test name the docs cite as proof.
fn quoted_names(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| {
            quoted.starts_with(|c: char| c.is_ascii_lowercase())
                && quoted
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && quoted.split('_').filter(|word| !word.is_empty()).count() >= 4
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_test_the_readme_and_docs_cite_exists() {
    let root = root();
    let mut words = std::collections::HashSet::new();
    for source in files(&root.join("crates"), &[".rs"]) {
        let text = std::fs::read_to_string(source).unwrap();
        words.extend(
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map(str::to_owned),
        );
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let shown = page.strip_prefix(&root).unwrap().display().to_string();
        for name in quoted_names(&text) {
            checked += 1;
            if !words.contains(&name) {
                missing.push(format!("{shown}: `{name}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "these names (tests, fields) occur nowhere in the crates' sources:\n  {}",
        missing.join("\n  ")
    );
    assert!(checked > 100, "only {checked} names found");
}

#[test]
fn the_link_parsers_find_links_and_quoted_paths() {
    assert_eq!(
        quoted_names(
            "`a_second_event_consumer_is_refused`, `keel run`, `max_turns`, `Foo_bar_baz_qux`"
        ),
        vec!["a_second_event_consumer_is_refused"]
    );
    assert_eq!(
        markdown_links("see [the map](docs/architecture.md#crates) and [web](https://x.org)"),
        vec!["docs/architecture.md#crates", "https://x.org"]
    );
    assert_eq!(
        quoted_paths(
            "`crates/keel-cli/tests/readme.rs`, `docs/x.md:`, `<id>.jsonl`, \
             `crates/*/src`, `keel run`, `docs/…`"
        ),
        vec!["crates/keel-cli/tests/readme.rs", "docs/x.md"]
    );
}
