//! The official `swebench` package (PyPI, pinned) loads the predictions
//! file `keel swebench run` writes, with its own loader
//! (`swebench.harness.utils.get_predictions_from_file`) and its own check
//! against the dataset (`run_evaluation.get_dataset_from_preds`).
//!
//! The package lives in a venv: `KEEL_SWEBENCH_VENV` (CI makes one in a
//! temporary directory), else one under Cargo's test temp directory; when
//! `swebench` does not import there, the test makes the venv and installs
//! the pinned version (network, about a minute). It skips only when
//! `python3` is missing, and never with `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod swebench_fixture;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use swebench_fixture as fixture;

/// The pinned version of the official package.
const SWEBENCH: &str = "swebench==5.0.2";

const CHECK: &str = r#"
import json, sys
import swebench
from swebench.harness.utils import get_predictions_from_file
from swebench.harness.run_evaluation import get_dataset_from_preds

predictions_path, dataset_path = sys.argv[1], sys.argv[2]
predictions = get_predictions_from_file(predictions_path, dataset_path, "test")
for prediction in predictions:
    assert set(prediction) == {"instance_id", "model_name_or_path", "model_patch"}, prediction
    assert isinstance(prediction["model_patch"], str), prediction
by_id = {prediction["instance_id"]: prediction for prediction in predictions}
assert len(by_id) == len(predictions), "an instance appears twice"
dataset = get_dataset_from_preds(dataset_path, "test", [], by_id, "keel-check", False, False)
print(json.dumps({
    "swebench": swebench.__version__,
    "predictions": len(predictions),
    "instances": sorted(instance["instance_id"] for instance in dataset),
    "patched": sorted(p["instance_id"] for p in predictions if p["model_patch"]),
}))
"#;

/// The venv's python with `swebench` importable, made if needed; `None`
/// when there is no python3 (never under CI).
fn swebench_python() -> Option<PathBuf> {
    fixture::python3()?;
    let venv = std::env::var_os("KEEL_SWEBENCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("swebench-venv"));
    let python = venv.join("bin/python");
    let imports = |python: &Path| {
        Command::new(python)
            .args(["-c", "import swebench.harness.run_evaluation"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if !imports(&python) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success(), "python3 -m venv {}", venv.display());
        let installed = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                SWEBENCH,
            ])
            .status()
            .unwrap();
        assert!(installed.success(), "pip install {SWEBENCH}");
        assert!(imports(&python), "{SWEBENCH} does not import");
    }
    Some(python)
}

#[test]
fn the_official_swebench_loader_accepts_the_predictions_file() {
    let Some(python) = swebench_python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let mirrors = home.path().join("mirrors");
    let built = fixture::build(
        &mirrors,
        &[
            ("jpvanhala__inflection-1", &fixture::DASHERIZE),
            ("jpvanhala__inflection-2", &fixture::ORDINAL),
        ],
    );
    // The harness reads a local dataset by its `.json` suffix.
    let dataset = home.path().join("verified.json");
    let all: Vec<Value> = built.iter().map(|built| built.instance.clone()).collect();
    std::fs::write(&dataset, Value::Array(all).to_string()).unwrap();
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
    let child = common::spawn_keel(
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
            "--script",
            script.to_str().unwrap(),
            "-w",
            "2",
        ],
        home.path(),
        &[],
    );
    let run = child.wait_with_output().unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let checked = Command::new(&python)
        .args(["-c", CHECK])
        .arg(output.join("predictions.jsonl"))
        .arg(&dataset)
        .current_dir(home.path())
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "the official loader refused the predictions:\n{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let stdout = String::from_utf8(checked.stdout).unwrap();
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(report["predictions"], 2, "{report}");
    // The harness evaluates the instances with a patch; an empty one is
    // unresolved without a container.
    assert_eq!(report["instances"], json!(["jpvanhala__inflection-1"]));
    assert_eq!(report["patched"], json!(["jpvanhala__inflection-1"]));
    eprintln!(
        "swebench loader: {} predictions loaded by swebench {}",
        report["predictions"],
        report["swebench"].as_str().unwrap()
    );

    // `keel swebench eval` prints the harness command for this file.
    let eval = common::spawn_keel(
        &["swebench", "eval", output.to_str().unwrap()],
        home.path(),
        &[],
    )
    .wait_with_output()
    .unwrap();
    let command = String::from_utf8(eval.stdout).unwrap();
    assert_eq!(eval.status.code(), Some(0));
    assert!(
        command.starts_with("python3 -m swebench.harness.run_evaluation --dataset_name "),
        "{command}"
    );
    assert!(command.contains(&format!(
        "--predictions_path {}",
        output
            .canonicalize()
            .unwrap()
            .join("predictions.jsonl")
            .display()
    )));
}
