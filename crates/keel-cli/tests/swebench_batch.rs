//! `keel swebench run` batches: budgets enforced (turns, tokens, time),
//! a batch of 20 instances with `-w 4` SIGKILLed midway and restarted,
//! Ctrl-C and its resumption, `--redo`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod swebench_fixture;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use swebench_fixture as fixture;

struct Batch {
    home: tempfile::TempDir,
    mirrors: PathBuf,
    dataset: PathBuf,
    output: PathBuf,
    built: Vec<fixture::Built>,
}

/// `count` dasherize instances.
fn batch(count: usize) -> Batch {
    let home = tempfile::tempdir().unwrap();
    let mirrors = home.path().join("mirrors");
    let ids: Vec<String> = (1..=count)
        .map(|n| format!("jpvanhala__inflection-{n}"))
        .collect();
    let wanted: Vec<(&str, &fixture::Bug)> = ids
        .iter()
        .map(|id| (id.as_str(), &fixture::DASHERIZE))
        .collect();
    let built = fixture::build(&mirrors, &wanted);
    let dataset = home.path().join("verified.jsonl");
    fixture::dataset(&dataset, &built);
    let output = home.path().join("out");
    Batch {
        home,
        mirrors,
        dataset,
        output,
        built,
    }
}

impl Batch {
    fn script(&self, script: Value) -> PathBuf {
        let path = self.home.path().join("script.json");
        std::fs::write(&path, script.to_string()).unwrap();
        path
    }

    fn args(&self, script: &Path, more: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "swebench",
            "run",
            "--dataset",
            self.dataset.to_str().unwrap(),
            "--environment",
            "local",
            "--repo-mirrors",
            self.mirrors.to_str().unwrap(),
            "--output",
            self.output.to_str().unwrap(),
            "--script",
            script.to_str().unwrap(),
        ]
        .iter()
        .map(|arg| (*arg).to_owned())
        .collect();
        args.extend(more.iter().map(|arg| (*arg).to_owned()));
        args
    }

    fn spawn(&self, args: &[String]) -> std::process::Child {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::spawn_keel(&args, self.home.path(), &[])
    }

    fn run(&self, args: &[String]) -> (i32, String, String) {
        let output = self.spawn(args).wait_with_output().unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    fn manifest(&self, id: &str) -> Option<Value> {
        let bytes = std::fs::read(self.output.join(id).join("manifest.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn ids(&self) -> Vec<String> {
        self.built
            .iter()
            .map(|built| built.instance["instance_id"].as_str().unwrap().to_owned())
            .collect()
    }

    fn predictions(&self) -> Vec<Value> {
        std::fs::read_to_string(self.output.join("predictions.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

fn turn(content: Value) -> Value {
    json!({ "content": content })
}

fn text(text: &str) -> Value {
    json!([{"type": "text", "text": text}])
}

#[test]
fn budgets_end_runs_as_budget_exhausted_or_timed_out_with_their_patch_so_far() {
    let batch = batch(1);
    let id = &batch.ids()[0];
    // --max-turns: the kernel stops the run after the first turn's edit.
    let script = batch.script(json!({"turns": [
        turn(json!([fixture::fixing_edit()])),
        turn(json!([{"type": "tool_call", "name": "ls", "arguments": {}}])),
        turn(text("Done."))
    ]}));
    let (code, stdout, stderr) = batch.run(&batch.args(&script, &["--max-turns", "1"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let manifest = batch.manifest(id).unwrap();
    assert_eq!(manifest["status"], "budget_exhausted", "{manifest:#}");
    assert_eq!(manifest["runs"][0]["error"], "turn_limit");
    let patch = batch.predictions()[0]["model_patch"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        patch.contains("+    return word.replace('_', '-')"),
        "{patch}"
    );

    // --max-cost-usd: the kernel stops the run once its cost passes it.
    let script = batch.script(json!({"turns": [
        {"content": [fixture::fixing_edit()], "usage": {"input_tokens": 10, "cost_usd": 0.5}},
        turn(text("Done."))
    ]}));
    let (code, stdout, stderr) =
        batch.run(&batch.args(&script, &["--max-cost-usd", "0.1", "--redo"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let manifest = batch.manifest(id).unwrap();
    assert_eq!(manifest["status"], "budget_exhausted", "{manifest:#}");
    assert_eq!(manifest["runs"][0]["error"], "budget_exceeded");
    assert_eq!(manifest["totals"]["cost_usd"], 0.5);
    assert!(stdout.contains("cost $0.5000"), "{stdout}");

    // --max-tokens: the evaluator cancels the run once the usage passes it.
    let script = batch.script(json!({"turns": [
        {"content": [fixture::fixing_edit()], "usage": {"input_tokens": 800, "output_tokens": 300}},
        {"content": [{"type": "tool_call", "name": "ls", "arguments": {}}], "delay_ms": 60000},
        turn(text("Done."))
    ]}));
    let (code, stdout, stderr) =
        batch.run(&batch.args(&script, &["--max-tokens", "1000", "--redo"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let manifest = batch.manifest(id).unwrap();
    assert_eq!(manifest["status"], "budget_exhausted", "{manifest:#}");
    assert_eq!(manifest["runs"][0]["state"], "cancelled");
    assert_eq!(manifest["totals"]["input_tokens"], 800);
    assert_eq!(manifest["totals"]["output_tokens"], 300);
    assert_eq!(manifest["budget"]["max_tokens"], 1000);

    // --timeout-sec: a model that never answers is cancelled.
    let script = batch.script(json!({"turns": [
        {"content": text("Thinking for a very long time."), "delay_ms": 600000}
    ]}));
    let (code, stdout, stderr) = batch.run(&batch.args(&script, &["--timeout-sec", "1", "--redo"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let manifest = batch.manifest(id).unwrap();
    assert_eq!(manifest["status"], "timed_out", "{manifest:#}");
    assert_eq!(manifest["stage"], "complete");
    assert_eq!(batch.predictions()[0]["model_patch"], "");
}

/// The batch script: an edit, a slow turn, a new file, then done (extra
/// closing turns for a run that continues a session).
fn slow_script(batch: &Batch) -> PathBuf {
    batch.script(json!({"by_history": true, "chunk_chars": 4, "turns": [
        turn(json!([fixture::fixing_edit()])),
        {"delay_ms": 40, "content": [
            {"type": "text", "text": "Now a note about the change, written slowly."},
            {"type": "tool_call", "name": "write", "arguments": {"path": "CHANGES.txt", "content": "dasherize uses dashes again\n"}}
        ]},
        turn(text("Done.")),
        turn(text("Done.")),
        turn(text("Done.")),
        turn(text("Done."))
    ]}))
}

fn stage_of(batch: &Batch, id: &str) -> Option<String> {
    Some(batch.manifest(id)?["stage"].as_str()?.to_owned())
}

/// Whether the instance's events show its first edit done.
fn edited(batch: &Batch, id: &str) -> bool {
    std::fs::read_to_string(batch.output.join(id).join("events.jsonl"))
        .is_ok_and(|events| events.contains("\"tool_execution_end\""))
}

#[test]
fn a_batch_killed_midway_resumes_with_every_instance_exactly_once_and_nothing_redone() {
    let batch = batch(20);
    let script = slow_script(&batch);
    let args = batch.args(&script, &["-w", "4"]);
    let ids = batch.ids();
    let mut child = batch.spawn(&args);
    // Midway: some instances complete, some between their first edit and
    // their end.
    let midway = common::wait_until(Duration::from_secs(120), || {
        let complete = ids
            .iter()
            .filter(|id| stage_of(&batch, id).as_deref() == Some("complete"))
            .count();
        let mid = ids
            .iter()
            .filter(|id| stage_of(&batch, id).as_deref() == Some("agent") && edited(&batch, id))
            .count();
        complete >= 4 && mid >= 2
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(midway, "the batch never reached the middle");

    // What the kill left: complete instances (with their bytes), and
    // interrupted ones with a session.
    let mut finished: HashMap<String, (Vec<u8>, Vec<u8>)> = HashMap::new();
    let mut interrupted: HashMap<String, String> = HashMap::new();
    let mut written: HashSet<String> = HashSet::new();
    for id in &ids {
        let Some(manifest) = batch.manifest(id) else {
            continue;
        };
        match manifest["stage"].as_str().unwrap() {
            "complete" => {
                let session = manifest["session"]["path"].as_str().unwrap();
                finished.insert(
                    id.clone(),
                    (
                        std::fs::read(batch.output.join(id).join("manifest.json")).unwrap(),
                        std::fs::read(session).unwrap(),
                    ),
                );
            }
            "agent" if edited(&batch, id) => {
                let events =
                    std::fs::read_to_string(batch.output.join(id).join("events.jsonl")).unwrap();
                if events.matches("\"tool_execution_end\"").count() >= 2 {
                    written.insert(id.clone());
                }
                // The session is recorded before the run's first event.
                let session = manifest["session"]["id"].as_str().unwrap();
                interrupted.insert(id.clone(), session.to_owned());
            }
            _ => {}
        }
    }
    assert!(finished.len() >= 4 && interrupted.len() >= 2);
    assert!(
        finished.len() + interrupted.len() < 20,
        "some instances had not started"
    );

    let (code, stdout, stderr) = batch.run(&args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("20 of 20 complete"), "{stdout}");
    assert!(
        stdout.contains(&format!("{} skipped", finished.len())),
        "{stdout}"
    );

    // Every instance exactly once.
    let predictions = batch.predictions();
    assert_eq!(predictions.len(), 20);
    let listed: HashSet<&str> = predictions
        .iter()
        .map(|line| line["instance_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ids.iter().map(String::as_str).collect());
    for line in &predictions {
        let id = line["instance_id"].as_str().unwrap();
        let patch = line["model_patch"].as_str().unwrap();
        // The first run's edit is in every patch. The later write too,
        // unless the kill cut that very call short: recovery reports a call
        // of unknown outcome to the model as interrupted and never runs it
        // again (docs/recovery.md), and the script does not retry it.
        let cut_short = interrupted.contains_key(id) && !written.contains(id);
        if cut_short && !patch.contains("CHANGES.txt") {
            eprintln!("{id}: its write was cut short by the kill and reported interrupted");
        }
        assert!(
            patch.contains("+    return word.replace('_', '-')")
                && (cut_short || patch.contains("CHANGES.txt")),
            "{}: {patch}\n{:#}",
            line["instance_id"],
            batch
                .manifest(line["instance_id"].as_str().unwrap())
                .unwrap()
        );
    }
    // No finished instance was redone: its manifest and session are the
    // bytes they were.
    for (id, (manifest, session)) in &finished {
        assert_eq!(
            &std::fs::read(batch.output.join(id).join("manifest.json")).unwrap(),
            manifest,
            "{id} was redone"
        );
        let path = batch.manifest(id).unwrap()["session"]["path"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            &std::fs::read(path).unwrap(),
            session,
            "{id}'s session grew"
        );
    }
    // Interrupted ones went on in their own sessions, and their patch has
    // the first run's edit (the assertion above) and the later ones.
    for (id, session) in &interrupted {
        let manifest = batch.manifest(id).unwrap();
        assert_eq!(manifest["status"], "success", "{manifest:#}");
        assert_eq!(manifest["session"]["id"], session.as_str(), "{id}");
        let runs = manifest["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{id}: {runs:?}");
        assert!(
            matches!(runs[1]["kind"].as_str(), Some("resume" | "continue")),
            "{runs:?}"
        );
        assert!(manifest["totals"]["runs"].as_u64().unwrap() >= 2);
    }
    let kinds: Vec<String> = interrupted
        .keys()
        .map(|id| batch.manifest(id).unwrap()["runs"][1]["kind"].to_string())
        .collect();
    eprintln!(
        "killed with {} complete and {} interrupted; resumed as {kinds:?}",
        finished.len(),
        interrupted.len()
    );
    // Every instance is complete and succeeded.
    for id in &ids {
        assert_eq!(batch.manifest(id).unwrap()["status"], "success", "{id}");
    }
}

#[test]
fn ctrl_c_stops_cleanly_and_the_next_run_continues_the_session() {
    let batch = batch(2);
    let script = slow_script(&batch);
    let args = batch.args(&script, &["-w", "2"]);
    let ids = batch.ids();
    let child = batch.spawn(&args);
    let started = common::wait_until(Duration::from_secs(60), || {
        ids.iter().all(|id| edited(&batch, id))
    });
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(started, "the runs never started");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("run the same command again to resume"),
        "{stderr}"
    );
    let mut sessions = HashMap::new();
    for id in &ids {
        let manifest = batch.manifest(id).unwrap();
        // Stopped in the slow turn (or, at worst, complete already).
        if manifest["stage"] == "agent" {
            assert_eq!(manifest["status"], "cancelled", "{manifest:#}");
            assert_eq!(manifest["runs"][0]["state"], "cancelled");
            sessions.insert(id.clone(), manifest["session"]["id"].clone());
        }
    }
    assert!(!sessions.is_empty(), "no run was stopped");
    // The predictions hold the complete instances only.
    assert_eq!(batch.predictions().len(), 2 - sessions.len());

    let (code, stdout, stderr) = batch.run(&args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(batch.predictions().len(), 2);
    for (id, session) in &sessions {
        let manifest = batch.manifest(id).unwrap();
        assert_eq!(manifest["status"], "success", "{manifest:#}");
        assert_eq!(&manifest["session"]["id"], session);
        assert_eq!(manifest["runs"][1]["kind"], "continue", "{manifest:#}");
        let patch = std::fs::read_to_string(batch.output.join(id).join("workspace.patch")).unwrap();
        assert!(
            patch.contains("+    return word.replace('_', '-')"),
            "{patch}"
        );
    }
}

#[test]
fn redo_starts_complete_instances_afresh() {
    let batch = batch(1);
    let id = &batch.ids()[0];
    let script = batch.script(json!({"turns": [
        turn(json!([fixture::fixing_edit()])),
        turn(text("Done."))
    ]}));
    let args = batch.args(&script, &[]);
    let (code, _, stderr) = batch.run(&args);
    assert_eq!(code, 0, "{stderr}");
    let first = batch.manifest(id).unwrap();
    let mut again = args.clone();
    again.push("--redo".to_owned());
    let (code, stdout, stderr) = batch.run(&again);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("0 skipped"), "{stdout}");
    let second = batch.manifest(id).unwrap();
    assert_eq!(second["status"], "success");
    assert_eq!(second["runs"].as_array().unwrap().len(), 1);
    assert_ne!(second["session"]["id"], first["session"]["id"]);
    assert_eq!(batch.predictions().len(), 1);
}

#[test]
fn progress_is_a_bar_on_a_terminal_and_plain_lines_when_piped() {
    let batch = batch(1);
    let id = &batch.ids()[0];
    let script = batch.script(json!({"turns": [
        turn(json!([fixture::fixing_edit()])),
        turn(text("Done."))
    ]}));
    // Piped: one line per step.
    let (code, _, stderr) = batch.run(&batch.args(&script, &[]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "keel swebench: {id}: started [done 0/1, running 1"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "keel swebench: {id}: success [done 1/1, running 0, failed 0"
        )),
        "{stderr}"
    );
    // On a terminal (util-linux `script`): the bar, no plain lines.
    assert!(
        std::process::Command::new("script")
            .arg("--version")
            .output()
            .is_ok(),
        "util-linux `script` is needed to give keel a terminal"
    );
    let mut args = batch.args(&script, &["--redo"]);
    args.insert(
        0,
        assert_cmd::cargo::cargo_bin!("keel").display().to_string(),
    );
    let line = args
        .iter()
        .map(|arg| format!("'{}'", arg.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let output = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .current_dir(batch.home.path())
        .env("HOME", batch.home.path())
        .env("XDG_DATA_HOME", batch.home.path().join("data"))
        .env("XDG_CONFIG_HOME", batch.home.path().join("config"))
        .env("TERM", "xterm-256color")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("1/1 running 0, failed 0, tokens 0, $0.00"),
        "{shown}"
    );
    assert!(shown.contains(&format!("{id}: success")), "{shown}");
    assert!(!shown.contains("keel swebench: "), "{shown}");
}
