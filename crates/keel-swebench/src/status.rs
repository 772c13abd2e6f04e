//! What an output directory holds (`keel swebench status`), and the
//! official harness's command for its predictions (`keel swebench eval`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::SwebenchError;
use crate::manifest::{self, PREDICTIONS, Stage};

/// A summary of an output directory.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct OutputStatus {
    /// Instances with a manifest.
    pub instances: usize,
    /// Of them, complete.
    pub complete: usize,
    /// Instances by status (`success`, `no_patch`, `running`, …).
    pub by_status: BTreeMap<String, usize>,
    /// Instances by stage.
    pub by_stage: BTreeMap<String, usize>,
    /// Lines in the predictions file.
    pub predictions: usize,
    /// Tokens used, over every instance.
    pub tokens: u64,
    /// Cost in USD, where known.
    pub cost_usd: f64,
    /// The instances that are not complete (to resume).
    pub unfinished: Vec<String>,
}

/// Summarises `output`.
pub fn status(output: &Path) -> Result<OutputStatus, SwebenchError> {
    let mut summary = OutputStatus::default();
    for (_, manifest) in manifest::complete_instances(output)? {
        summary.instances += 1;
        if manifest.stage == Stage::Complete {
            summary.complete += 1;
        } else {
            summary.unfinished.push(manifest.instance_id.clone());
        }
        *summary
            .by_status
            .entry(manifest.status.as_str().to_owned())
            .or_default() += 1;
        *summary
            .by_stage
            .entry(manifest.stage.as_str().to_owned())
            .or_default() += 1;
        summary.tokens += manifest.totals.tokens();
        summary.cost_usd += manifest.totals.cost_usd.unwrap_or(0.0);
    }
    summary.predictions = std::fs::read_to_string(output.join(PREDICTIONS))
        .map(|text| text.lines().filter(|line| !line.trim().is_empty()).count())
        .unwrap_or(0);
    Ok(summary)
}

/// The official harness's command for `output`'s predictions, as argv:
/// `python -m swebench.harness.run_evaluation --dataset_name D
/// --predictions_path OUTPUT/predictions.jsonl --max_workers N --run_id R`.
/// `dataset` defaults to the dataset file the batch was run from
/// (`OUTPUT/config.json`), which the harness also reads as a local file.
pub fn harness_command(
    output: &Path,
    dataset: Option<&str>,
    run_id: Option<&str>,
    max_workers: usize,
    python: &str,
) -> Result<Vec<String>, SwebenchError> {
    let predictions: PathBuf = output.join(PREDICTIONS);
    if !predictions.is_file() {
        return Err(SwebenchError::Usage(format!(
            "no predictions file at {}: run `keel swebench run` first",
            predictions.display()
        )));
    }
    let dataset = match dataset {
        Some(dataset) => dataset.to_owned(),
        None => {
            let config = output.join("config.json");
            let text = std::fs::read_to_string(&config).map_err(|error| SwebenchError::Io {
                path: config.display().to_string(),
                source: error,
            })?;
            let value: serde_json::Value =
                serde_json::from_str(&text).map_err(|error| SwebenchError::Io {
                    path: config.display().to_string(),
                    source: error.into(),
                })?;
            value["dataset"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| SwebenchError::Usage("config.json names no dataset".to_owned()))?
        }
    };
    let run_id = match run_id {
        Some(run_id) => run_id.to_owned(),
        None => output
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "keel".to_owned()),
    };
    Ok(vec![
        python.to_owned(),
        "-m".to_owned(),
        "swebench.harness.run_evaluation".to_owned(),
        "--dataset_name".to_owned(),
        dataset,
        "--predictions_path".to_owned(),
        predictions.display().to_string(),
        "--max_workers".to_owned(),
        max_workers.max(1).to_string(),
        "--run_id".to_owned(),
        run_id,
    ])
}
