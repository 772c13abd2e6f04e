//! The `docker` environment: the instance's SWE-bench image, one container
//! per instance with no network, driven through the Docker client with
//! strict argvs (never a shell). Needs a Docker engine and the images:
//! nothing is ever pulled — a missing image is the instance's
//! `environment_preparation_failed`.
//!
//! 1. `docker image inspect IMAGE`: the image must be present.
//! 2. The image's `/testbed` is copied out (`docker create`, `docker cp`,
//!    `docker rm`) into the instance's workspace on this machine, which must
//!    then be a clean checkout at `base_commit`.
//! 3. For the agent: `docker run -d --pull never --network none
//!    --security-opt no-new-privileges --pids-limit 4096 -v
//!    WORKSPACE:/testbed -w /testbed IMAGE sleep infinity`. File tools act
//!    on the workspace through Keel's rooted workspace layer; `bash` runs
//!    as `docker exec --workdir /testbed CONTAINER /bin/bash -lc COMMAND`
//!    (keel-tools' container executor). The container is removed when the
//!    agent stage ends.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use keel_tools::builtin::CONTAINER_CLIENT_ENV;

use crate::dataset::Instance;

/// Most processes at once in an instance's container (a fork bomb stops
/// there).
pub const PIDS_LIMIT: &str = "4096";

/// Where the repository is inside an instance's image.
pub const TESTBED: &str = "/testbed";

/// The image of `instance`: its `image` field, else the official name
/// `swebench/sweb.eval.x86_64.<id with __ replaced by _1776_>`, lower-cased.
pub fn image_name(instance: &Instance) -> String {
    match &instance.image {
        Some(image) if !image.trim().is_empty() => image.trim().to_owned(),
        _ => format!(
            "swebench/sweb.eval.x86_64.{}",
            instance.instance_id.replace("__", "_1776_")
        )
        .to_lowercase(),
    }
}

/// The container's name for `instance_id` (lower-case, `[a-z0-9_.-]`).
pub fn container_name(instance_id: &str) -> String {
    let cleaned: String = instance_id
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("keel-swebench-{cleaned}")
}

/// The Docker client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Docker {
    /// The client program (`docker`), by path or on `PATH`.
    pub client: PathBuf,
}

impl Docker {
    /// The client `client`.
    pub fn new(client: impl Into<PathBuf>) -> Self {
        Self {
            client: client.into(),
        }
    }

    /// Runs `client ARGS` with an environment of `PATH`, `HOME`,
    /// `XDG_RUNTIME_DIR` and the `DOCKER_*` variables that reach the engine
    /// only; its trimmed stdout, or why it failed.
    fn run(&self, args: &[&str]) -> Result<String, String> {
        let mut command = Command::new(&self.client);
        // Only what a client needs to reach its engine: never the API keys
        // and whatever else the evaluator's environment holds.
        command.env_clear();
        for name in ["PATH", "HOME", "XDG_RUNTIME_DIR"]
            .iter()
            .chain(CONTAINER_CLIENT_ENV)
        {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        let output = command
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("{} could not start: {error}", self.client.display()))?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(format!(
            "`docker {}` failed: {}",
            args.first().copied().unwrap_or_default(),
            stderr.trim().chars().take(1000).collect::<String>()
        ))
    }

    /// Whether `image` is present in the engine (never pulled).
    pub fn image_present(&self, image: &str) -> bool {
        self.run(&["image", "inspect", "--format", "{{.Id}}", "--", image])
            .is_ok()
    }

    /// Copies the image's `/testbed` into `workspace` (made here).
    pub fn copy_testbed(&self, image: &str, workspace: &Path) -> Result<(), String> {
        std::fs::create_dir_all(workspace)
            .map_err(|error| format!("{}: {error}", workspace.display()))?;
        let id = self.run(&[
            "create",
            "--pull",
            "never",
            "--network",
            "none",
            "--",
            image,
            "true",
        ])?;
        let source = format!("{id}:{TESTBED}/.");
        let target = workspace.display().to_string();
        let copied = self.run(&["cp", &source, &target]);
        let _ = self.run(&["rm", "-f", &id]);
        copied.map(drop)
    }

    /// Starts the instance's container with `workspace` mounted at
    /// `/testbed` and no network; its id.
    pub fn start(&self, image: &str, name: &str, workspace: &Path) -> Result<String, String> {
        // A container a killed batch left behind.
        let _ = self.run(&["rm", "-f", name]);
        let mount = format!("{}:{TESTBED}", workspace.display());
        self.run(&[
            "run",
            "-d",
            "--pull",
            "never",
            "--network",
            "none",
            "--security-opt",
            "no-new-privileges",
            "--pids-limit",
            PIDS_LIMIT,
            "--name",
            name,
            "-v",
            &mount,
            "-w",
            TESTBED,
            "--",
            image,
            "sleep",
            "infinity",
        ])
    }

    /// Removes the container (and whatever still runs in it).
    pub fn remove(&self, container: &str) {
        let _ = self.run(&["rm", "-f", container]);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn instance(value: serde_json::Value) -> Instance {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn images_are_named_as_the_harness_names_them() {
        let plain = instance(serde_json::json!({
            "instance_id": "Django__django-11099", "repo": "django/django", "base_commit": "c"}));
        assert_eq!(
            image_name(&plain),
            "swebench/sweb.eval.x86_64.django_1776_django-11099"
        );
        let given = instance(serde_json::json!({
            "instance_id": "a__b-1", "repo": "a/b", "base_commit": "c", "image": "registry/x:tag"}));
        assert_eq!(image_name(&given), "registry/x:tag");
        assert_eq!(
            container_name("Django__django-11099"),
            "keel-swebench-django__django-11099"
        );
    }
}
