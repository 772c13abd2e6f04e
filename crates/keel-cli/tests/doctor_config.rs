//! `keel doctor`'s configuration checks as a process: the configuration
//! loads (or why not), the chosen provider and model, its key variable, and
//! with `--network` whether its base URL answers (a local server, a closed
//! port). The exit code is 0 only when the sandbox works and the
//! configuration is usable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use keel_provider::testing::{Reply, TestServer};
use serde_json::Value;

fn doctor(dir: &Path, config: &str, key: Option<&str>, more: &[&str]) -> (Option<i32>, Value) {
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let mut command = common::keel_command();
    command
        .args(["doctor", "--output-format", "json", "--config"])
        .arg(dir.join("config.toml"))
        .args(more)
        .current_dir(dir)
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"))
        .env("XDG_DATA_HOME", dir.join("xdg-data"))
        .env_remove("KEEL_TEST_DOCTOR_KEY")
        .stdin(std::process::Stdio::null());
    if let Some(key) = key {
        command.env("KEEL_TEST_DOCTOR_KEY", key);
    }
    let output = command.output().unwrap();
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&output.stdout)));
    (output.status.code(), report)
}

fn local(url: &str) -> String {
    format!(
        "provider = \"local\"\nmodel = \"m1\"\n\n[providers.local]\napi = \"openai-chat\"\n\
         base_url = \"{url}\"\napi_key_env = \"KEEL_TEST_DOCTOR_KEY\"\n"
    )
}

/// The exit code a usable configuration gets: 0 where the sandbox works.
fn usable_code(report: &Value) -> Option<i32> {
    Some(if report["sandbox_enforced"] == true {
        0
    } else {
        1
    })
}

#[test]
fn doctor_checks_the_configuration_the_key_and_the_providers_server() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(TestServer::start(vec![Reply::error(404, "{}")]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();

    // The key variable unset: named, and not usable.
    let (code, report) = doctor(dir.path(), &local(&server.url()), None, &[]);
    let config = &report["config"];
    assert_eq!(config["provider"], "local", "{config}");
    assert_eq!(config["model"], "m1", "{config}");
    assert_eq!(config["api_key_env"], "KEEL_TEST_DOCTOR_KEY", "{config}");
    assert_eq!(config["api_key_set"], false, "{config}");
    assert_eq!(config["usable"], false, "{config}");
    assert_eq!(code, Some(1));
    assert!(server.requests().is_empty(), "no request without --network");

    // The key set and the server answering (any status): usable.
    let (code, report) = doctor(
        dir.path(),
        &local(&server.url()),
        Some("sk-doctor"),
        &["--network"],
    );
    let config = &report["config"];
    assert_eq!(config["api_key_set"], true, "{config}");
    assert_eq!(config["answered_status"], 404, "{config}");
    assert_eq!(config["usable"], true, "{config}");
    assert_eq!(code, usable_code(&report));
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("authorization"), None, "no key is sent");
    assert!(
        requests[0]
            .header("user-agent")
            .is_some_and(|agent| agent.starts_with("keel/"))
    );

    // Nothing listening: not usable, and why.
    let (code, report) = doctor(
        dir.path(),
        &local("http://127.0.0.1:9/v1"),
        Some("sk-doctor"),
        &["--network"],
    );
    let config = &report["config"];
    assert!(config["network_error"].as_str().is_some(), "{config}");
    assert_eq!(config["usable"], false, "{config}");
    assert_eq!(code, Some(1));

    // A configuration that does not load: its error, with its code.
    let (code, report) = doctor(dir.path(), "provider = \"local\"\nmodle = 1\n", None, &[]);
    let config = &report["config"];
    let error = config["error"].as_str().unwrap();
    assert!(
        error.contains("unknown key `modle`") && error.contains("[config_invalid]"),
        "{config}"
    );
    assert_eq!(code, Some(1));
}
