//! The official SWE-bench dataset, read from a local `.json` (an array of
//! instances) or `.jsonl` (one instance per line) file, and the selection
//! of instances (`--instance`, `--slice`, `--filter`).
//!
//! The schema is the official one: `instance_id`, `repo`, `base_commit`,
//! `problem_statement`, `hints_text`, `version`, `FAIL_TO_PASS`,
//! `PASS_TO_PASS`, `environment_setup_commit`, `patch`, `test_patch`, and
//! the newer `image`, `eval_script`, `log_parser`. The test lists come as
//! JSON arrays or, as in the published dataset, as strings holding one.
//! Other fields are accepted and ignored.

use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::SwebenchError;

/// One SWE-bench instance.
///
/// The gold `patch` and `test_patch` are kept for the harness hand-off
/// only: nothing built from an instance for the model reads them
/// ([`crate::prompt::prompt`] takes the problem statement and hints).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Instance {
    /// `owner__repo-NUMBER`; also the name of the instance's directory.
    pub instance_id: String,
    /// `owner/name` on GitHub.
    pub repo: String,
    /// The commit the workspace is checked out at.
    pub base_commit: String,
    /// The issue text: the task.
    #[serde(default)]
    pub problem_statement: String,
    /// Comments on the issue made before the fix.
    #[serde(default, deserialize_with = "text")]
    pub hints_text: String,
    /// The repository's version (selects the harness's environment).
    #[serde(default, deserialize_with = "optional_text")]
    pub version: Option<String>,
    /// Tests the gold patch makes pass.
    #[serde(rename = "FAIL_TO_PASS", default, deserialize_with = "tests")]
    pub fail_to_pass: Vec<String>,
    /// Tests that pass before and after.
    #[serde(rename = "PASS_TO_PASS", default, deserialize_with = "tests")]
    pub pass_to_pass: Vec<String>,
    /// The commit the harness builds the environment from.
    #[serde(default, deserialize_with = "optional_text")]
    pub environment_setup_commit: Option<String>,
    /// The gold patch (never shown to the model).
    #[serde(default)]
    pub patch: String,
    /// The patch adding the tests (never shown to the model).
    #[serde(default)]
    pub test_patch: String,
    /// The instance's container image, when the dataset names one.
    #[serde(default, deserialize_with = "optional_text")]
    pub image: Option<String>,
    /// The evaluation script, when the dataset carries one.
    #[serde(default, deserialize_with = "optional_text")]
    pub eval_script: Option<String>,
    /// The log parser's name, when the dataset carries one.
    #[serde(default, deserialize_with = "optional_text")]
    pub log_parser: Option<String>,
}

impl Instance {
    /// The repository's `owner__name`: its directory under `--repo-mirrors`.
    pub fn mirror_name(&self) -> String {
        self.repo.replace('/', "__")
    }
}

/// A string field that may be `null`.
fn text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(optional_text(deserializer)?.unwrap_or_default())
}

/// A string (or number, as some versions are) that may be absent or `null`.
fn optional_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(None),
        Value::String(text) => Ok(Some(text)),
        Value::Number(number) => Ok(Some(number.to_string())),
        other => Err(serde::de::Error::custom(format!(
            "expected a string, found {other}"
        ))),
    }
}

/// A test list: a JSON array of strings, or a string holding one.
fn tests<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(Vec::new()),
        Value::String(text) if text.trim().is_empty() => Ok(Vec::new()),
        Value::String(text) => serde_json::from_str(&text).map_err(|error| {
            serde::de::Error::custom(format!(
                "a test list string that is not a JSON array: {error}"
            ))
        }),
        array @ Value::Array(_) => serde_json::from_value(array).map_err(serde::de::Error::custom),
        other => Err(serde::de::Error::custom(format!(
            "expected a list of tests, found {other}"
        ))),
    }
}

/// Reads the dataset at `path`: `.jsonl` one instance per line (blank lines
/// skipped), anything else a JSON array (or a single object). Ids are
/// checked ([`check_id`]) and must be unique.
pub fn load(path: &Path) -> Result<Vec<Instance>, SwebenchError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| SwebenchError::Dataset {
        path: shown.clone(),
        message: error.to_string(),
    })?;
    let jsonl = path
        .extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| extension.eq_ignore_ascii_case("jsonl"));
    let instances = if jsonl {
        let mut instances = Vec::new();
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let instance: Instance =
                serde_json::from_str(line).map_err(|error| SwebenchError::Dataset {
                    path: shown.clone(),
                    message: format!("line {}: {error}", number + 1),
                })?;
            instances.push(instance);
        }
        instances
    } else {
        let value: Value = serde_json::from_str(&text).map_err(|error| SwebenchError::Dataset {
            path: shown.clone(),
            message: error.to_string(),
        })?;
        let items = match value {
            Value::Array(items) => items,
            object @ Value::Object(_) => vec![object],
            _ => {
                return Err(SwebenchError::Dataset {
                    path: shown,
                    message: "expected an array of instances".to_owned(),
                });
            }
        };
        let mut instances = Vec::with_capacity(items.len());
        for (index, item) in items.into_iter().enumerate() {
            let instance: Instance =
                serde_json::from_value(item).map_err(|error| SwebenchError::Dataset {
                    path: shown.clone(),
                    message: format!("instance {index}: {error}"),
                })?;
            instances.push(instance);
        }
        instances
    };
    // Ids equal but for case would share a container name and, on a
    // case-insensitive file system, a directory.
    let mut seen = std::collections::HashMap::new();
    for instance in &instances {
        check_id(&instance.instance_id)?;
        check_repo(&instance.repo).map_err(|message| SwebenchError::Dataset {
            path: shown.clone(),
            message: format!("instance `{}`: {message}", instance.instance_id),
        })?;
        let id = instance.instance_id.as_str();
        if let Some(earlier) = seen.insert(id.to_ascii_lowercase(), id) {
            let message = if earlier == id {
                format!("instance `{id}` appears twice")
            } else {
                format!("instances `{earlier}` and `{id}` differ only in case")
            };
            return Err(SwebenchError::Dataset {
                path: shown,
                message,
            });
        }
    }
    Ok(instances)
}

/// Names in the output directory that are not instances' directories.
pub const RESERVED: [&str; 3] = [
    crate::manifest::PREDICTIONS,
    crate::manifest::SESSIONS,
    "config.json",
];

/// Whether `id` can name an instance's directory: 1 to 200 of
/// `A-Z a-z 0-9 . _ -`, not starting with a dot, and none of the output
/// directory's own names ([`RESERVED`], in any case).
pub fn check_id(id: &str) -> Result<(), SwebenchError> {
    let valid = (1..=200).contains(&id.len())
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
        && !RESERVED
            .iter()
            .any(|reserved| reserved.eq_ignore_ascii_case(id));
    if valid {
        Ok(())
    } else {
        Err(SwebenchError::InvalidId(id.chars().take(200).collect()))
    }
}

/// Whether `repo` is `owner/name`, each part as [`check_id`] allows and
/// neither `.` nor `..` (it names a directory under `--repo-mirrors`).
pub fn check_repo(repo: &str) -> Result<(), String> {
    let part = |part: &str| {
        (1..=200).contains(&part.len())
            && part != "."
            && part != ".."
            && part
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
    };
    match repo.split_once('/') {
        Some((owner, name)) if part(owner) && part(name) => Ok(()),
        _ => Err(format!(
            "repo `{}` is not owner/name",
            repo.chars().take(200).collect::<String>()
        )),
    }
}

/// Which instances of the dataset to run. Empty: all of them. The slice
/// applies to the dataset's order first, then the filter, then `ids`
/// (each must exist).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Selection {
    /// `--instance ID` (repeatable): only these.
    pub ids: Vec<String>,
    /// `--slice A:B`: positions `A` (inclusive) to `B` (exclusive) of the
    /// dataset; either end may be left out.
    pub slice: Option<(Option<usize>, Option<usize>)>,
    /// `--filter REGEX`: ids matching it (anywhere; anchor it to match whole).
    pub filter: Option<String>,
}

impl Selection {
    /// Parses `A:B`, `A:`, `:B`.
    pub fn parse_slice(text: &str) -> Result<(Option<usize>, Option<usize>), SwebenchError> {
        let invalid = || SwebenchError::Selection(format!("`{text}` is not a slice A:B"));
        let (start, end) = text.split_once(':').ok_or_else(invalid)?;
        let bound = |part: &str| -> Result<Option<usize>, SwebenchError> {
            if part.trim().is_empty() {
                return Ok(None);
            }
            part.trim().parse().map(Some).map_err(|_| invalid())
        };
        Ok((bound(start)?, bound(end)?))
    }

    /// The selected instances, in the dataset's order.
    pub fn apply(&self, all: Vec<Instance>) -> Result<Vec<Instance>, SwebenchError> {
        for id in &self.ids {
            if !all.iter().any(|instance| &instance.instance_id == id) {
                return Err(SwebenchError::Selection(format!(
                    "no instance `{id}` in the dataset"
                )));
            }
        }
        let filter = match &self.filter {
            Some(pattern) => Some(regex::Regex::new(pattern).map_err(|error| {
                SwebenchError::Selection(format!("--filter `{pattern}`: {error}"))
            })?),
            None => None,
        };
        let (start, end) = self.slice.unwrap_or((None, None));
        let start = start.unwrap_or(0);
        let end = end.unwrap_or(usize::MAX);
        Ok(all
            .into_iter()
            .enumerate()
            .filter(|(index, _)| (start..end).contains(index))
            .map(|(_, instance)| instance)
            .filter(|instance| {
                filter
                    .as_ref()
                    .is_none_or(|filter| filter.is_match(&instance.instance_id))
            })
            .filter(|instance| self.ids.is_empty() || self.ids.contains(&instance.instance_id))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const ONE: &str = r#"{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "0123", "problem_statement": "p", "hints_text": null, "version": "1.0", "FAIL_TO_PASS": "[\"t1\"]", "PASS_TO_PASS": ["t2", "t3"], "environment_setup_commit": "0123", "patch": "P", "test_patch": "T", "created_at": "2023-01-01"}"#;

    #[test]
    fn both_formats_and_both_test_list_forms_load() {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = write(dir.path(), "d.jsonl", &format!("{ONE}\n\n"));
        let json = write(dir.path(), "d.json", &format!("[{ONE}]"));
        for path in [jsonl, json] {
            let all = load(&path).unwrap();
            assert_eq!(all.len(), 1);
            assert_eq!(all[0].fail_to_pass, vec!["t1"]);
            assert_eq!(all[0].pass_to_pass, vec!["t2", "t3"]);
            assert_eq!(all[0].hints_text, "");
            assert_eq!(all[0].mirror_name(), "a__b");
        }
    }

    #[test]
    fn bad_ids_and_duplicates_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let twice = write(dir.path(), "d.jsonl", &format!("{ONE}\n{ONE}\n"));
        assert!(load(&twice).unwrap_err().to_string().contains("twice"));
        for bad in [
            "",
            "..",
            "../x",
            "a/b",
            ".hidden",
            "predictions.jsonl",
            "Predictions.JSONL",
            "sessions",
            "SESSIONS",
            "config.json",
        ] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
        assert!(check_id("django__django-11099").is_ok());
        assert!(check_id("sessions-1").is_ok());
        let cased = ONE.replace("a__b-1", "A__b-1");
        let both = write(dir.path(), "c.jsonl", &format!("{ONE}\n{cased}\n"));
        let error = load(&both).unwrap_err().to_string();
        assert!(error.contains("differ only in case"), "{error}");
    }

    #[test]
    fn repos_are_owner_and_name() {
        for bad in [
            "..", "../x", "a/..", "./b", "a", "a/b/c", "a/", "/b", "a/b c", "",
        ] {
            assert!(check_repo(bad).is_err(), "{bad}");
        }
        assert!(check_repo("django/django").is_ok());
        assert!(check_repo("psf/requests.py-fork_2").is_ok());
        let dir = tempfile::tempdir().unwrap();
        let escaping = ONE.replace(r#""repo": "a/b""#, r#""repo": "..""#);
        let file = write(dir.path(), "e.jsonl", &format!("{escaping}\n"));
        let error = load(&file).unwrap_err().to_string();
        assert!(error.contains("not owner/name"), "{error}");
    }

    #[test]
    fn selection_by_slice_filter_and_id() {
        let all: Vec<Instance> = (0..6)
            .map(|n| {
                serde_json::from_value(serde_json::json!({
                    "instance_id": format!("o__r-{n}"), "repo": "o/r", "base_commit": "c"}))
                .unwrap()
            })
            .collect();
        let ids = |selection: &Selection| -> Vec<String> {
            selection
                .apply(all.clone())
                .unwrap()
                .into_iter()
                .map(|instance| instance.instance_id)
                .collect()
        };
        let mut selection = Selection {
            slice: Some(Selection::parse_slice("1:4").unwrap()),
            ..Selection::default()
        };
        assert_eq!(ids(&selection), ["o__r-1", "o__r-2", "o__r-3"]);
        selection.filter = Some("[23]$".to_owned());
        assert_eq!(ids(&selection), ["o__r-2", "o__r-3"]);
        selection.ids = vec!["o__r-3".to_owned()];
        assert_eq!(ids(&selection), ["o__r-3"]);
        selection.ids = vec!["o__r-9".to_owned()];
        assert!(selection.apply(all.clone()).is_err());
        assert!(Selection::parse_slice("x").is_err());
        assert_eq!(Selection::parse_slice(":2").unwrap(), (None, Some(2)));
    }
}
