//! `keel swebench run` as a process, in environment `local`, with the
//! scripted provider, on fixture instances in the official schema built
//! from the vendored `inflection` 0.5.1 source (tests/swebench_fixture).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod swebench_fixture;

use std::path::Path;

use serde_json::{Value, json};
use swebench_fixture as fixture;

/// Runs `keel ARGS` to its end with HOME and XDG under `home`.
fn keel(args: &[&str], home: &Path) -> (i32, String, String) {
    let child = common::spawn_keel(args, home, &[]);
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn manifest(output: &Path, id: &str) -> Value {
    serde_json::from_slice(&std::fs::read(output.join(id).join("manifest.json")).unwrap()).unwrap()
}

fn sha256(path: &Path) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(std::fs::read(path).unwrap());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn one_instance_fixed_one_not_predictions_official_and_a_rerun_redoes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let mirrors = home.path().join("mirrors");
    let built = fixture::build(
        &mirrors,
        &[
            ("jpvanhala__inflection-1", &fixture::DASHERIZE),
            ("jpvanhala__inflection-2", &fixture::ORDINAL),
        ],
    );
    let dataset = home.path().join("verified.jsonl");
    fixture::dataset(&dataset, &built);
    // One script for both: its edit fixes the dasherize bug, and fails
    // (nothing to replace) where that bug is not.
    let script = home.path().join("script.json");
    std::fs::write(
        &script,
        json!({"by_history": true, "turns": [
            {"content": [fixture::fixing_edit()]},
            {"content": [{"type": "text", "text": "Done."}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let output = home.path().join("out");
    let args = [
        "swebench",
        "run",
        "--dataset",
        dataset.to_str().unwrap(),
        "--environment",
        "local",
        "--repo-mirrors",
        mirrors.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--script",
        script.to_str().unwrap(),
        "--max-turns",
        "10",
    ];
    let (code, stdout, stderr) = keel(&args, home.path());
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("2 of 2 complete"), "{stdout}");

    let predictions = lines(&output.join("predictions.jsonl"));
    assert_eq!(predictions.len(), 2);
    for (line, built) in predictions.iter().zip(&built) {
        assert_eq!(line["instance_id"], built.instance["instance_id"]);
        assert_eq!(line["model_name_or_path"], "keel");
        assert_eq!(line.as_object().unwrap().len(), 3, "{line}");
    }

    // Instance 1: fixed.
    let fixed = manifest(&output, "jpvanhala__inflection-1");
    assert_eq!(fixed["stage"], "complete", "{fixed:#}");
    assert_eq!(fixed["status"], "success", "{fixed:#}");
    assert_eq!(fixed["keel_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(fixed["provider"], "scripted");
    assert_eq!(fixed["budget"]["max_turns"], 10);
    assert_eq!(fixed["totals"]["runs"], 1);
    assert_eq!(fixed["runs"][0]["kind"], "start");
    assert_eq!(fixed["runs"][0]["state"], "settled");
    let session = Path::new(fixed["session"]["path"].as_str().unwrap());
    assert!(session.starts_with(output.join("sessions").canonicalize().unwrap()));
    assert!(session.is_file());
    // Every artifact's checksum is the file's.
    let artifacts = fixed["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 3, "{artifacts:?}");
    let root = output.canonicalize().unwrap();
    for artifact in artifacts {
        let path = root.join(artifact["path"].as_str().unwrap());
        assert_eq!(artifact["sha256"], sha256(&path), "{}", path.display());
    }
    let events = lines(&output.join("jpvanhala__inflection-1/events.jsonl"));
    assert_eq!(events[0]["type"], "run_started");
    assert_eq!(events.last().unwrap()["type"], "run_settled");
    let patch =
        std::fs::read_to_string(output.join("jpvanhala__inflection-1/workspace.patch")).unwrap();
    assert_eq!(predictions[0]["model_patch"], patch);
    assert!(
        patch.contains("-    return word.replace('_', ' ')"),
        "{patch}"
    );
    assert!(
        patch.contains("+    return word.replace('_', '-')"),
        "{patch}"
    );
    // The checkout holds base_commit's history only: not the fix after it.
    let workspace = output.join("jpvanhala__inflection-1/workspace");
    let future = std::process::Command::new("git")
        .args(["cat-file", "-e", &built[0].fix_commit])
        .current_dir(&workspace)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .unwrap();
    assert!(!future.success(), "the fix commit is in the checkout");

    // Instance 2: the edit found nothing to fix.
    let unfixed = manifest(&output, "jpvanhala__inflection-2");
    assert_eq!(unfixed["status"], "no_patch", "{unfixed:#}");
    assert_eq!(unfixed["stage"], "complete");
    assert_eq!(predictions[1]["model_patch"], "");

    // The patch applies at base_commit with `git apply`, makes FAIL_TO_PASS
    // pass and keeps PASS_TO_PASS passing; without it FAIL_TO_PASS fails.
    if let Some(python) = fixture::python3() {
        let check = home.path().join("check");
        std::fs::create_dir_all(&check).unwrap();
        let f2p = fixture::ids(&built[0].instance["FAIL_TO_PASS"]);
        let p2p = fixture::ids(&built[0].instance["PASS_TO_PASS"]);
        let test_patch = built[0].instance["test_patch"].as_str().unwrap();
        let bare = check.join("without");
        fixture::checkout(&mirrors, &built[0].base_commit, &bare);
        fixture::apply(&bare, test_patch);
        assert!(
            !fixture::tests_pass(&python, &bare, &f2p),
            "FAIL_TO_PASS passes unfixed"
        );
        let patched = check.join("with");
        fixture::checkout(&mirrors, &built[0].base_commit, &patched);
        fixture::apply(&patched, &patch);
        fixture::apply(&patched, test_patch);
        assert!(fixture::tests_pass(&python, &patched, &f2p), "FAIL_TO_PASS");
        assert!(fixture::tests_pass(&python, &patched, &p2p), "PASS_TO_PASS");
    }

    // `keel swebench status` sums the directory up.
    let (code, stdout, stderr) = keel(
        &[
            "swebench",
            "status",
            output.to_str().unwrap(),
            "--output-format",
            "json",
        ],
        home.path(),
    );
    assert_eq!(code, 0, "{stderr}");
    let status: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(status["instances"], 2, "{status}");
    assert_eq!(status["complete"], 2);
    assert_eq!(status["predictions"], 2);
    assert_eq!(status["by_status"], json!({"success": 1, "no_patch": 1}));
    assert_eq!(status["unfinished"], json!([]));
    // `keel swebench eval` prints the official harness command.
    let (code, stdout, stderr) = keel(
        &[
            "swebench",
            "eval",
            output.to_str().unwrap(),
            "--run-id",
            "r1",
        ],
        home.path(),
    );
    assert_eq!(code, 0, "{stderr}");
    let root = output.canonicalize().unwrap();
    assert_eq!(
        stdout.trim(),
        format!(
            "python3 -m swebench.harness.run_evaluation --dataset_name {} --predictions_path {} --max_workers 4 --run_id r1",
            dataset.canonicalize().unwrap().display(),
            root.join("predictions.jsonl").display()
        )
    );

    // The same command again: everything is complete, nothing is redone.
    let before: Vec<Vec<u8>> = ["jpvanhala__inflection-1", "jpvanhala__inflection-2"]
        .iter()
        .map(|id| std::fs::read(output.join(id).join("manifest.json")).unwrap())
        .collect();
    let (code, stdout, stderr) = keel(&args, home.path());
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("2 skipped"), "{stdout}");
    assert!(stderr.contains("complete before, skipped"), "{stderr}");
    let after: Vec<Vec<u8>> = ["jpvanhala__inflection-1", "jpvanhala__inflection-2"]
        .iter()
        .map(|id| std::fs::read(output.join(id).join("manifest.json")).unwrap())
        .collect();
    assert_eq!(before, after);
    assert_eq!(lines(&output.join("predictions.jsonl")), predictions);
}

#[test]
fn a_missing_mirror_is_environment_preparation_failed_and_still_predicted() {
    let home = tempfile::tempdir().unwrap();
    let mirrors = home.path().join("mirrors");
    let built = fixture::build(
        &mirrors,
        &[("jpvanhala__inflection-1", &fixture::DASHERIZE)],
    );
    let mut instance = built[0].instance.clone();
    instance["repo"] = json!("nobody/nothing");
    instance["instance_id"] = json!("nobody__nothing-1");
    let dataset = home.path().join("d.json");
    std::fs::write(&dataset, json!([instance]).to_string()).unwrap();
    let script = home.path().join("script.json");
    std::fs::write(
        &script,
        json!({"turns": [{"content": [{"type": "text", "text": "Done."}]}]}).to_string(),
    )
    .unwrap();
    let output = home.path().join("out");
    let (code, stdout, stderr) = keel(
        &[
            "swebench",
            "run",
            "--dataset",
            dataset.to_str().unwrap(),
            "--environment",
            "local",
            "--repo-mirrors",
            mirrors.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--script",
            script.to_str().unwrap(),
        ],
        home.path(),
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let failed = manifest(&output, "nobody__nothing-1");
    assert_eq!(failed["status"], "environment_preparation_failed");
    assert_eq!(failed["stage"], "complete");
    assert!(
        failed["diagnostic"]
            .as_str()
            .unwrap()
            .contains("no repository")
    );
    assert!(failed.get("session").is_none(), "no run was started");
    let predictions = lines(&output.join("predictions.jsonl"));
    assert_eq!(predictions.len(), 1);
    assert_eq!(predictions[0]["model_patch"], "");
}

#[test]
fn relative_repo_mirrors_and_repo_paths_work_as_the_docs_show() {
    let home = tempfile::tempdir().unwrap();
    let built = fixture::build(
        &home.path().join("mirrors"),
        &[("jpvanhala__inflection-1", &fixture::DASHERIZE)],
    );
    fixture::dataset(&home.path().join("d.jsonl"), &built);
    std::fs::write(
        home.path().join("script.json"),
        json!({"turns": [{"content": [{"type": "text", "text": "Done."}]}]}).to_string(),
    )
    .unwrap();
    // keel runs in `home`: every path below is relative to it.
    for (flag, source, output) in [
        ("--repo-mirrors", "mirrors", "out"),
        ("--repo", "mirrors/jpvanhala__inflection", "out2"),
    ] {
        let (code, stdout, stderr) = keel(
            &[
                "swebench",
                "run",
                "--dataset",
                "d.jsonl",
                "--environment",
                "local",
                flag,
                source,
                "-o",
                output,
                "--script",
                "script.json",
            ],
            home.path(),
        );
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        let done = manifest(&home.path().join(output), "jpvanhala__inflection-1");
        assert_eq!(done["status"], "no_patch", "{flag}: {done:#}");
    }
}

#[test]
fn a_nested_repository_the_agent_planted_ends_the_instance_instead_of_hanging_it() {
    let home = tempfile::tempdir().unwrap();
    let mirrors = home.path().join("mirrors");
    let built = fixture::build(
        &mirrors,
        &[("jpvanhala__inflection-1", &fixture::DASHERIZE)],
    );
    let dataset = home.path().join("d.jsonl");
    fixture::dataset(&dataset, &built);
    // The agent fixes the bug, then plants a nested repository whose
    // configuration includes a FIFO: git reading it waits for a writer.
    // In `full` mode: a confined `auto` call's planted repository holding
    // code is quarantined before the evaluator sees it (git_quarantine.rs),
    // and this test is about the evaluator's own guard.
    let plant = "set -e\ngit init -q sub\necho s > sub/s\n\
        git -C sub -c user.name=a -c user.email=a@b add -A\n\
        git -C sub -c user.name=a -c user.email=a@b commit -qm s\n\
        mkfifo fifo\nprintf '[include]\\n\\tpath = ../../fifo\\n' >> sub/.git/config\n";
    let script = home.path().join("script.json");
    std::fs::write(
        &script,
        json!({"turns": [
            {"content": [fixture::fixing_edit()]},
            {"content": [{"type": "tool_call", "name": "write",
                "arguments": {"path": "plant.sh", "content": plant}}]},
            {"content": [{"type": "tool_call", "name": "bash",
                "arguments": {"command": "bash plant.sh && echo planted"}}]},
            {"content": [{"type": "text", "text": "Done."}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let output = home.path().join("out");
    let mut child = common::spawn_keel(
        &[
            "swebench",
            "run",
            "--dataset",
            dataset.to_str().unwrap(),
            "--environment",
            "local",
            "--repo-mirrors",
            mirrors.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--script",
            script.to_str().unwrap(),
            "--mode",
            "full",
        ],
        home.path(),
        &[],
    );
    // Bounded: a hang is killed here and fails the test.
    let ended = common::wait_until(std::time::Duration::from_secs(300), || {
        child.try_wait().unwrap().is_some()
    });
    if !ended {
        let _ = child.kill();
    }
    let run = child.wait_with_output().unwrap();
    assert!(ended, "keel swebench run hung on the planted repository");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    let events =
        std::fs::read_to_string(output.join("jpvanhala__inflection-1/events.jsonl")).unwrap();
    assert!(events.contains("planted"), "the plant ran: {events}");
    let done = manifest(&output, "jpvanhala__inflection-1");
    assert_eq!(done["status"], "success", "{done:#}");
    let diagnostic = done["diagnostic"].as_str().unwrap();
    assert!(
        diagnostic.contains("left out of the patch") && diagnostic.contains("sub"),
        "{diagnostic}"
    );
    let patch =
        std::fs::read_to_string(output.join("jpvanhala__inflection-1/workspace.patch")).unwrap();
    assert!(
        patch.contains("+    return word.replace('_', '-')"),
        "{patch}"
    );
    assert!(!patch.contains("+++ b/sub/"), "{patch}");
    assert!(patch.contains("+++ b/plant.sh"), "{patch}");
}

/// One SSE `data:` line for a Chat Completions chunk.
fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({"id": "c1", "object": "chat.completion.chunk", "model": "local-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {body}\n\n")
}

fn read_call(id: &str, path: &str) -> keel_provider::testing::Reply {
    let arguments = json!({"path": path}).to_string();
    let mut sse = chunk(
        json!({"role": "assistant", "content": null,
        "tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": "read", "arguments": arguments}}]}),
        None,
    );
    sse += &chunk(json!({}), Some("tool_calls"));
    sse += "data: [DONE]\n\n";
    keel_provider::testing::Reply::sse(&sse)
}

fn answer(text: &str) -> keel_provider::testing::Reply {
    let mut sse = chunk(json!({"role": "assistant", "content": text}), None);
    sse += &chunk(json!({}), Some("stop"));
    sse += "data: [DONE]\n\n";
    keel_provider::testing::Reply::sse(&sse)
}

#[test]
fn the_gold_patch_and_test_patch_never_reach_the_model() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(keel_provider::testing::TestServer::start(vec![
            read_call("call_a", "inflection/__init__.py"),
            answer("Nothing to change."),
            read_call("call_b", "test_fixture.py"),
            answer("Nothing to change."),
        ]))
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let mirrors = home.path().join("mirrors");
    let mut built = fixture::build(
        &mirrors,
        &[
            ("jpvanhala__inflection-1", &fixture::DASHERIZE),
            ("jpvanhala__inflection-2", &fixture::ORDINAL),
        ],
    );
    for (n, built) in built.iter_mut().enumerate() {
        let instance = &mut built.instance;
        let patch = instance["patch"].as_str().unwrap().to_owned();
        let test_patch = instance["test_patch"].as_str().unwrap().to_owned();
        instance["patch"] = json!(format!("{patch}+# GOLD-PATCH-MARKER-{n}\n"));
        instance["test_patch"] = json!(format!("{test_patch}+# TEST-PATCH-MARKER-{n}\n"));
        instance["hints_text"] = json!(format!("HINTS-MARKER-{n}"));
    }
    let dataset = home.path().join("verified.json");
    let all: Vec<Value> = built.iter().map(|built| built.instance.clone()).collect();
    std::fs::write(&dataset, Value::Array(all).to_string()).unwrap();
    let config = home.path().join("config.toml");
    std::fs::write(
        &config,
        "[providers.local]\napi = \"openai-chat\"\n\n[providers.local.models.local-model]\n",
    )
    .unwrap();
    let output = home.path().join("out");
    let url = server.url();
    let (code, stdout, stderr) = keel(
        &[
            "swebench",
            "run",
            "--dataset",
            dataset.to_str().unwrap(),
            "--environment",
            "local",
            "--repo-mirrors",
            mirrors.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--provider",
            "local",
            "--base-url",
            &url,
            "--model",
            "local-model",
        ],
        home.path(),
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "two turns per instance");
    for (index, request) in requests.iter().enumerate() {
        let body = request.body.clone();
        for marker in ["GOLD-PATCH-MARKER", "TEST-PATCH-MARKER"] {
            assert!(!body.contains(marker), "request {index} carries {marker}");
        }
        // The check can fail: what the model may see does reach it.
        let n = index / 2;
        assert!(
            body.contains(&format!("HINTS-MARKER-{n}")),
            "request {index}"
        );
        let problem = built[n].instance["problem_statement"].as_str().unwrap();
        let problem = serde_json::to_string(problem).unwrap();
        assert!(body.contains(problem.trim_matches('"')), "request {index}");
    }
    let predictions = lines(&output.join("predictions.jsonl"));
    assert_eq!(predictions.len(), 2);
    assert_eq!(predictions[0]["model_name_or_path"], "keel-local-model");
    for id in ["jpvanhala__inflection-1", "jpvanhala__inflection-2"] {
        assert_eq!(manifest(&output, id)["status"], "no_patch");
    }
}

#[test]
fn wrong_flags_and_datasets_are_plain_startup_errors() {
    let home = tempfile::tempdir().unwrap();
    let mirrors = home.path().join("mirrors");
    let built = fixture::build(
        &mirrors,
        &[("jpvanhala__inflection-1", &fixture::DASHERIZE)],
    );
    let dataset = home.path().join("d.jsonl");
    fixture::dataset(&dataset, &built);
    let output = home.path().join("out");
    let run = |more: &[&str]| {
        let mut args = vec![
            "swebench",
            "run",
            "--dataset",
            dataset.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ];
        args.extend_from_slice(more);
        keel(&args, home.path())
    };
    let (code, stdout, stderr) = run(&["--environment", "local"]);
    assert_eq!(code, 2, "{stdout}");
    assert!(
        stderr.contains("needs --repo-mirrors DIR or --repo PATH"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["--environment", "docker", "--repo-mirrors", "x"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("apply to --environment local"), "{stderr}");
    let (code, _, stderr) = run(&[
        "--environment",
        "local",
        "--repo",
        "x",
        "--instance",
        "nope",
    ]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("no instance `nope` in the dataset"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["--environment", "local", "--repo", "x", "--slice", "3"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("is not a slice A:B"), "{stderr}");
    std::fs::write(
        &dataset,
        "{\"instance_id\": \"../x\", \"repo\": \"a/b\", \"base_commit\": \"c\"}\n",
    )
    .unwrap();
    let (code, _, stderr) = run(&["--environment", "local", "--repo", "x"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("not usable as a directory name"),
        "{stderr}"
    );
    assert!(!output.join("predictions.jsonl").exists());
}
