//! `keel man` (issue 27): one page per command, generated from the same
//! argument definitions as `--help`, so every page a page refers to exists.
//! `keel man --dir DIR` writes them all; `keel man run` prints one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;

/// Runs `keel ARGS` (isolated home) to the end: exit code, stdout, stderr.
fn keel(args: &[&str], home: &Path) -> (i32, String, String) {
    let mut child = common::spawn_keel(args, home, &[]);
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The commands `keel ARGS --help` lists (without `help`).
fn commands(args: &[&str], home: &Path) -> Vec<String> {
    let mut full = args.to_vec();
    full.push("--help");
    let (code, help, _) = keel(&full, home);
    assert_eq!(code, 0);
    help.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The `keel-…(1)` pages a page refers to.
fn references(page: &str) -> BTreeSet<String> {
    let page = page.replace("\\-", "-");
    let mut found = BTreeSet::new();
    for (at, _) in page.match_indices("(1)") {
        let start = page[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map_or(0, |i| i + 1);
        let name = &page[start..at];
        if name.starts_with("keel") {
            found.insert(format!("{name}.1"));
        }
    }
    found
}

/// The text of the NAME section: `keel\-run \- Run the agent …`.
fn name_line(page: &str) -> String {
    let mut lines = page.lines().skip_while(|line| *line != ".SH NAME");
    lines.next();
    lines.next().unwrap_or_default().replace("\\-", "-")
}

#[test]
fn every_command_has_a_page_and_every_page_referred_to_exists() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("man1");
    let (code, listed, stderr) = keel(&["man", "--dir", dir.to_str().unwrap()], home.path());
    assert_eq!(code, 0, "{stderr}");

    let written: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let printed: BTreeSet<String> = listed.lines().map(str::to_owned).collect();
    assert_eq!(printed, written, "stdout lists the pages written");

    // One page per command `--help` lists, nested commands included.
    let mut expected = BTreeSet::from(["keel.1".to_owned()]);
    for command in commands(&[], home.path()) {
        expected.insert(format!("keel-{command}.1"));
        for sub in commands(&[&command], home.path()) {
            expected.insert(format!("keel-{command}-{sub}.1"));
        }
    }
    assert!(expected.contains("keel-run.1") && expected.contains("keel-session-list.1"));
    assert_eq!(written, expected);

    for name in &written {
        let page = std::fs::read_to_string(dir.join(name)).unwrap();
        let stem = name.strip_suffix(".1").unwrap();
        assert!(
            page.contains(&format!(".TH {stem} 1 ")),
            "{name} is titled for itself"
        );
        for referred in references(&page) {
            assert!(
                written.contains(&referred),
                "{name} refers to {referred}, which was not written"
            );
        }
        // NAME: `keel-run - what it does`, one short line a user reads.
        let line = name_line(&page);
        let (named, what) = line
            .split_once(" - ")
            .unwrap_or_else(|| panic!("{name}: {line}"));
        assert_eq!(named, stem);
        assert!(
            !what.is_empty() && what.len() <= 80,
            "{name}: the NAME line should be one short sentence, not {} characters: {what}",
            what.len()
        );
    }
    let top = name_line(&std::fs::read_to_string(dir.join("keel.1")).unwrap());
    assert!(
        !top.contains("kernel"),
        "keel.1's NAME line describes the tool for its user: {top}"
    );
}

#[test]
fn one_page_is_printed_by_its_command_name() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("man1");
    assert_eq!(
        keel(&["man", "--dir", dir.to_str().unwrap()], home.path()).0,
        0
    );
    for (args, file) in [
        (&["man"][..], "keel.1"),
        (&["man", "run"][..], "keel-run.1"),
        (&["man", "session", "list"][..], "keel-session-list.1"),
    ] {
        let (code, page, stderr) = keel(args, home.path());
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert_eq!(
            page,
            std::fs::read_to_string(dir.join(file)).unwrap(),
            "{args:?} prints {file}"
        );
    }
    let (code, stdout, stderr) = keel(&["man", "nope"], home.path());
    assert_eq!(code, 2);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("no man page for `nope`"), "{stderr}");
}
