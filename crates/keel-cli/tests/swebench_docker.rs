//! `keel swebench run --environment docker` at the command level, with a
//! stand-in `docker` client on PATH that logs every argv and acts out the
//! engine on this machine (an image list, `/testbed` copied from a fixture
//! checkout, `exec` run in the bind-mounted workspace). A real end-to-end
//! run needs a Docker engine and the instances' images (docs/swebench.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod swebench_fixture;

use std::path::Path;

use serde_json::json;
use swebench_fixture as fixture;

/// The stand-in: one log line per call (arguments separated by 0x1f).
const STAND_IN: &str = r#"#!/bin/bash
here="$(cd "$(dirname "$0")" && pwd)"
(IFS=$'\x1f'; printf '%s\n' "$*") >> "$here/argv.log"
printf '%s key=%s host=%s\n' "$1" "${KEEL_TEST_CANARY_API_KEY-absent}" "${DOCKER_HOST-absent}" >> "$here/env.log"
case "$1" in
  image)
    image="${@: -1}"
    if grep -qxF -- "$image" "$here/images"; then echo sha256:0; exit 0; fi
    echo "Error: No such image: $image" >&2; exit 1 ;;
  create) echo copy-1 ;;
  cp) cp -a "$here/testbed/." "$3" ;;
  rm) exit 0 ;;
  run)
    previous=""
    for arg in "$@"; do
      if [ "$previous" = "-v" ]; then echo "${arg%:/testbed}" > "$here/mount"; fi
      previous="$arg"
    done
    echo ctr-1 ;;
  exec) cd "$(cat "$here/mount")" && exec /bin/bash -c "$7" ;;
  pull) echo "never pull" >&2; exit 99 ;;
  *) exit 2 ;;
esac
"#;

fn calls(bin: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(bin.join("argv.log"))
        .unwrap()
        .lines()
        .map(|line| line.split('\u{1f}').map(str::to_owned).collect())
        .collect()
}

#[test]
fn docker_runs_each_instance_in_its_image_without_network_or_pull() {
    let home = tempfile::tempdir().unwrap();
    let mirrors = home.path().join("mirrors");
    let built = fixture::build(
        &mirrors,
        &[
            ("jpvanhala__inflection-1", &fixture::DASHERIZE),
            ("jpvanhala__inflection-2", &fixture::DASHERIZE),
        ],
    );
    let dataset = home.path().join("verified.jsonl");
    fixture::dataset(&dataset, &built);
    let bin = home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let docker = bin.join("docker");
    std::fs::write(&docker, STAND_IN).unwrap();
    let mut permissions = std::fs::metadata(&docker).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&docker, permissions).unwrap();
    // Instance 1's image is present (its /testbed: a checkout at its
    // base_commit); instance 2's is not.
    let image = "swebench/sweb.eval.x86_64.jpvanhala_1776_inflection-1";
    std::fs::write(bin.join("images"), format!("{image}\n")).unwrap();
    fixture::checkout(&mirrors, &built[0].base_commit, &bin.join("testbed"));
    // The image's repository reaches the fix (as images built before
    // Sept 2025 do): the clone's remote branches, a tag, the reflog.
    let fix = built[0].fix_commit.clone();
    fixture::git(&bin.join("testbed"), &["tag", "v-fix", &fix]);
    fixture::git(&bin.join("testbed"), &["checkout", "-q", "--detach", &fix]);
    fixture::git(
        &bin.join("testbed"),
        &["checkout", "-q", "--detach", &built[0].base_commit],
    );
    let command = "sed -i \"s/return word.replace('_', ' ')/return word.replace('_', '-')/\" inflection/__init__.py";
    let script = home.path().join("script.json");
    std::fs::write(
        &script,
        json!({"turns": [
            {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": command}}]},
            {"content": [{"type": "text", "text": "Done."}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let output = home.path().join("out");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = common::spawn_keel(
        &[
            "swebench",
            "run",
            "--dataset",
            dataset.to_str().unwrap(),
            "--environment",
            "docker",
            "--output",
            output.to_str().unwrap(),
            "--script",
            script.to_str().unwrap(),
        ],
        home.path(),
        &[
            ("PATH", &path),
            ("KEEL_TEST_CANARY_API_KEY", "sk-canary"),
            ("DOCKER_HOST", "unix:///run/canary.sock"),
        ],
    );
    let run = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");

    let manifest = |id: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(output.join(id).join("manifest.json")).unwrap())
            .unwrap()
    };
    let fixed = manifest("jpvanhala__inflection-1");
    assert_eq!(fixed["status"], "success", "{fixed:#}");
    assert_eq!(fixed["environment"], "docker");
    let patch =
        std::fs::read_to_string(output.join("jpvanhala__inflection-1/workspace.patch")).unwrap();
    assert!(
        patch.contains("+    return word.replace('_', '-')"),
        "{patch}"
    );
    // The fix is not in the workspace's repository.
    let workspace_dir = output.join("jpvanhala__inflection-1/workspace");
    let reachable = std::process::Command::new("git")
        .args(["cat-file", "-e", &format!("{fix}^{{commit}}")])
        .current_dir(&workspace_dir)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!reachable.success(), "the fix {fix} is in the workspace");
    let log = fixture::git(&workspace_dir, &["log", "--all", "--reflog", "--format=%H"]);
    assert!(!log.contains(&fix), "{log}");
    assert!(log.contains(&built[0].base_commit), "{log}");
    let missing = manifest("jpvanhala__inflection-2");
    assert_eq!(missing["status"], "environment_preparation_failed");
    assert!(
        missing["diagnostic"]
            .as_str()
            .unwrap()
            .contains("keel never pulls"),
        "{missing:#}"
    );

    // The client saw the engine's address but no other variable of keel's
    // environment (an API key among them) — the container-side `exec` is
    // keel-tools' executor, with its own allowlist.
    let env_log = std::fs::read_to_string(bin.join("env.log")).unwrap();
    for line in env_log.lines().filter(|line| !line.starts_with("exec ")) {
        assert!(
            line.ends_with(" key=absent host=unix:///run/canary.sock"),
            "{env_log}"
        );
    }
    assert!(env_log.lines().any(|line| line.starts_with("create ")));
    let calls = calls(&bin);
    let workspace = output
        .canonicalize()
        .unwrap()
        .join("jpvanhala__inflection-1/workspace");
    let expected: Vec<Vec<String>> = [
        vec!["image", "inspect", "--format", "{{.Id}}", "--", image],
        vec![
            "create",
            "--pull",
            "never",
            "--network",
            "none",
            "--",
            image,
            "true",
        ],
        vec![
            "run",
            "-d",
            "--pull",
            "never",
            "--network",
            "none",
            "--security-opt",
            "no-new-privileges",
            "--pids-limit",
            "4096",
            "--name",
            "keel-swebench-jpvanhala__inflection-1",
            "-v",
            &format!("{}:/testbed", workspace.display()),
            "-w",
            "/testbed",
            "--",
            image,
            "sleep",
            "infinity",
        ],
        vec![
            "exec",
            "--workdir",
            "/testbed",
            "ctr-1",
            "/bin/bash",
            "-lc",
            command,
        ],
        vec!["rm", "-f", "ctr-1"],
        vec![
            "image",
            "inspect",
            "--format",
            "{{.Id}}",
            "--",
            "swebench/sweb.eval.x86_64.jpvanhala_1776_inflection-2",
        ],
    ]
    .iter()
    .map(|call| call.iter().map(|arg| (*arg).to_owned()).collect())
    .collect();
    for call in &expected {
        assert!(calls.contains(call), "no call {call:?} in {calls:#?}");
    }
    assert!(
        calls.iter().all(|call| call[0] != "pull"),
        "a pull: {calls:#?}"
    );
    for call in calls
        .iter()
        .filter(|call| call[0] == "create" || call[0] == "run")
    {
        let joined = call.join(" ");
        assert!(
            joined.contains("--network none") && joined.contains("--pull never"),
            "{joined}"
        );
    }
    // The exec came after the container started and before it was removed.
    let position = |wanted: &[String]| calls.iter().position(|call| call == wanted).unwrap();
    assert!(position(&expected[2]) < position(&expected[3]));
    assert!(position(&expected[3]) < position(&expected[4]));
}
