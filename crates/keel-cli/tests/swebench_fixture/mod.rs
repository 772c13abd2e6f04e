//! SWE-bench fixture instances in the official schema, built at test time
//! from the vendored `inflection` 0.5.1 source (tests/fixtures/swebench):
//! a mirror repository `jpvanhala__inflection` in which each instance is a
//! real bug put back into one function (its `base_commit`), the fix after
//! it (a later commit the checkout must not hold), and the instance's own
//! failing test (`test_patch`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The package source, unchanged from the sdist.
pub fn source() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/swebench/inflection-0.5.1/inflection/__init__.py"),
    )
    .unwrap()
}

/// The tests every instance's repository has (its PASS_TO_PASS).
const BASE_TESTS: &str = r#"import unittest

import inflection


class CamelizeTest(unittest.TestCase):
    def test_camelize(self):
        self.assertEqual(inflection.camelize("device_type"), "DeviceType")


class HumanizeTest(unittest.TestCase):
    def test_humanize(self):
        self.assertEqual(inflection.humanize("employee_salary"), "Employee salary")
"#;

/// One kind of bug: what the fix restores, what the bug is, and the test
/// that fails with it.
pub struct Bug {
    pub name: &'static str,
    pub good: &'static str,
    pub bad: &'static str,
    pub test_class: &'static str,
    pub test: &'static str,
    pub problem: &'static str,
}

/// `dasherize` turns underscores into spaces.
pub const DASHERIZE: Bug = Bug {
    name: "dasherize",
    good: "    return word.replace('_', '-')\n",
    bad: "    return word.replace('_', ' ')\n",
    test_class: "DasherizeTest",
    test: r#"

class DasherizeTest(unittest.TestCase):
    def test_dasherize(self):
        self.assertEqual(inflection.dasherize("puni_puni"), "puni-puni")
"#,
    problem: "dasherize(\"puni_puni\") returns 'puni puni' instead of 'puni-puni'.",
};

/// `ordinal(13)` is `rd`.
pub const ORDINAL: Bug = Bug {
    name: "ordinal",
    good: "    if number % 100 in (11, 12, 13):\n",
    bad: "    if number % 100 in (11, 12):\n",
    test_class: "OrdinalTest",
    test: r#"

class OrdinalTest(unittest.TestCase):
    def test_thirteenth(self):
        self.assertEqual(inflection.ordinal(13), "th")
"#,
    problem: "ordinal(13) returns 'rd'; 13th is right.",
};

/// The script edit that fixes [`DASHERIZE`] (and fails elsewhere).
pub fn fixing_edit() -> Value {
    json!({"type": "tool_call", "name": "edit", "arguments": {"path": "inflection/__init__.py",
        "edits": [{"old_text": "return word.replace('_', ' ')", "new_text": "return word.replace('_', '-')"}]}})
}

/// A hermetic git in `dir`.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "fixture")
        .env("GIT_AUTHOR_EMAIL", "fixture@example.invalid")
        .env("GIT_COMMITTER_NAME", "fixture")
        .env("GIT_COMMITTER_EMAIL", "fixture@example.invalid")
        .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn commit_all(repo: &Path, message: &str) -> String {
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", message]);
    git(repo, &["rev-parse", "HEAD"]).trim().to_owned()
}

/// One built instance.
pub struct Built {
    pub instance: Value,
    pub base_commit: String,
    pub fix_commit: String,
}

/// The mirror directory `mirrors/jpvanhala__inflection` with a branch per
/// instance; returns the instances (`ids[i]` with `bugs[i]`).
pub fn build(mirrors: &Path, instances: &[(&str, &Bug)]) -> Vec<Built> {
    let repo = mirrors.join("jpvanhala__inflection");
    std::fs::create_dir_all(repo.join("inflection")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("inflection/__init__.py"), source()).unwrap();
    std::fs::write(repo.join("test_fixture.py"), BASE_TESTS).unwrap();
    std::fs::write(repo.join(".gitignore"), "__pycache__/\n*.pyc\n").unwrap();
    let root = commit_all(&repo, "inflection 0.5.1");
    let mut built = Vec::new();
    for (id, bug) in instances {
        git(&repo, &["checkout", "-q", "-B", id, &root]);
        let source = source();
        assert!(source.contains(bug.good), "{}", bug.name);
        std::fs::write(
            repo.join("inflection/__init__.py"),
            source.replacen(bug.good, bug.bad, 1),
        )
        .unwrap();
        let base_commit = commit_all(&repo, &format!("{}: the bug", bug.name));
        std::fs::write(repo.join("inflection/__init__.py"), &source).unwrap();
        let fix_commit = commit_all(&repo, &format!("{}: the fix", bug.name));
        let patch = git(&repo, &["diff", &base_commit, &fix_commit]);
        std::fs::write(
            repo.join("test_fixture.py"),
            format!("{BASE_TESTS}{}", bug.test),
        )
        .unwrap();
        let tested = commit_all(&repo, &format!("{}: the test", bug.name));
        let test_patch = git(&repo, &["diff", &fix_commit, &tested]);
        let test_id = format!(
            "test_fixture.{}.{}",
            bug.test_class,
            bug.test
                .split("def ")
                .nth(1)
                .unwrap()
                .split('(')
                .next()
                .unwrap()
        );
        built.push(Built {
            instance: json!({
                "instance_id": id,
                "repo": "jpvanhala/inflection",
                "base_commit": base_commit,
                "problem_statement": bug.problem,
                "hints_text": "",
                "created_at": "2024-01-01T00:00:00Z",
                "version": "0.5",
                "FAIL_TO_PASS": serde_json::to_string(&[test_id]).unwrap(),
                "PASS_TO_PASS": serde_json::to_string(&[
                    "test_fixture.CamelizeTest.test_camelize",
                    "test_fixture.HumanizeTest.test_humanize"
                ]).unwrap(),
                "environment_setup_commit": root,
                "patch": patch,
                "test_patch": test_patch,
            }),
            base_commit,
            fix_commit,
        });
    }
    git(&repo, &["checkout", "-q", "main"]);
    built
}

/// Writes the instances as a `.jsonl` dataset.
pub fn dataset(path: &Path, built: &[Built]) {
    let text: String = built
        .iter()
        .map(|built| format!("{}\n", built.instance))
        .collect();
    std::fs::write(path, text).unwrap();
}

/// `python3`, if there is one; under CI it must be there.
pub fn python3() -> Option<PathBuf> {
    let found = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found && std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("python3 is missing, and CI=true: this test must not be skipped");
    }
    found.then(|| PathBuf::from("python3"))
}

/// Runs unittest ids in `dir`; whether they passed.
pub fn tests_pass(python: &Path, dir: &Path, ids: &[String]) -> bool {
    Command::new(python)
        .args(["-m", "unittest", "-q"])
        .args(ids)
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// A fresh checkout of the mirror at `commit` in `dir`.
pub fn checkout(mirrors: &Path, commit: &str, dir: &Path) {
    let repo = mirrors.join("jpvanhala__inflection");
    git(
        dir.parent().unwrap(),
        &["clone", "-q", repo.to_str().unwrap(), dir.to_str().unwrap()],
    );
    git(dir, &["checkout", "-q", "--detach", commit]);
}

/// `git apply` of `patch` in `dir`.
pub fn apply(dir: &Path, patch: &str) {
    let file = dir.join("../apply.patch");
    std::fs::write(&file, patch).unwrap();
    git(
        dir,
        &["apply", file.canonicalize().unwrap().to_str().unwrap()],
    );
}

/// The test ids of a dataset list field (a JSON string holding an array).
pub fn ids(field: &Value) -> Vec<String> {
    serde_json::from_str(field.as_str().unwrap()).unwrap()
}
