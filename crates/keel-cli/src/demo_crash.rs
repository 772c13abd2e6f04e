//! `keel demo crash-recovery`: a run killed mid-batch, then resumed.
//!
//! The demo starts a second `keel` process (this same binary) on the
//! fixture, in `--mode ask`, with its session in a temporary directory. The
//! scripted model asks for one batch of three calls: write a note, append a
//! line to a log with bash, fix `add` with an edit. The demo approves the
//! first two requests on the child's stdin, and when the third is asked it
//! kills the child with SIGKILL: the write and the command ran, the edit
//! never started, and no result of the batch was recorded.
//!
//! Then it resumes the session in this process (`AgentKernel::resume`, mode
//! `auto`, the host granting it again) and prints that run's events: the
//! write is found already applied, the command — which had finished — is
//! recovered from its receipt (its exit status and output, never run
//! again), the edit — which has no effect record —
//! runs normally, and the run goes on and settles.
//!
//! Killing at a permission request makes the crash exact: nothing of the
//! child is running when it dies, so the demo is deterministic and leaves
//! no process behind.

use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;

use keel_host::sessions;
use keel_protocol::PermissionMode;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::demo::demo_kernel;
use crate::host;
use crate::output::Output;
use crate::startup::StartupError;

const SCRIPT: &str = include_str!("../demos/crash-recovery.json");
const PROMPT: &str = "The check in check.sh fails. Fix the bug, and log the attempt.";
/// The child is killed when the model's batch asks for this many approvals.
const KILL_AT_REQUEST: usize = 3;

pub async fn run(case: &str, workspace: &Path, output: &Output) -> Result<ExitCode, StartupError> {
    if case != "killed-mid-batch" {
        return Err(StartupError::new(
            "unknown_case",
            format!("unknown case `{case}`"),
        ));
    }
    let failed = |what: &str, error: &dyn std::fmt::Display| {
        StartupError::new("demo", format!("crash-recovery: {what}: {error}"))
    };
    let scratch = tempfile::Builder::new()
        .prefix("keel-demo-crash-")
        .tempdir()
        .map_err(|error| failed("temporary directory", &error))?;
    let script = scratch.path().join("script.json");
    let session_dir = scratch.path().join("sessions");
    std::fs::write(&script, SCRIPT).map_err(|error| failed("script", &error))?;
    kill_mid_batch(&script, workspace, &session_dir).await?;

    let store = Arc::new(sessions::open_store(Some(&session_dir))?);
    let session_id = only_session(&session_dir).map_err(|error| failed("session", &error))?;
    let kernel = demo_kernel(SCRIPT, workspace, store, None)?;
    let run = kernel.resume(&session_id, PermissionMode::Auto).await?;
    let result = host::drive_and_finish(&run, output, async |_, _| {}).await?;
    Ok(host::exit_code(&result))
}

/// Runs the child `keel run` until its batch's third permission request,
/// approving the two before it, then kills it with SIGKILL.
async fn kill_mid_batch(
    script: &Path,
    workspace: &Path,
    session_dir: &Path,
) -> Result<(), StartupError> {
    let failed = |what: &str, error: &dyn std::fmt::Display| {
        StartupError::new("demo", format!("crash-recovery: {what}: {error}"))
    };
    let keel = std::env::current_exe().map_err(|error| failed("own binary", &error))?;
    let mut child = tokio::process::Command::new(keel)
        .args(["run", "--mode", "ask", "--output-format", "stream-json"])
        .arg("--script")
        .arg(script)
        .arg("--workspace")
        .arg(workspace)
        .arg("--session-dir")
        .arg(session_dir)
        .arg(PROMPT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| failed("start keel", &error))?;
    let (Some(mut answers), Some(events)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(failed("pipes", &"the child has no stdin or stdout"));
    };
    let mut lines = BufReader::new(events).lines();
    let mut requests = 0;
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|error| failed("read the child's events", &error))?
    {
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if event["type"] != "permission_requested" {
            continue;
        }
        requests += 1;
        if requests == KILL_AT_REQUEST {
            child
                .start_kill()
                .map_err(|error| failed("kill keel", &error))?;
            child
                .wait()
                .await
                .map_err(|error| failed("reap keel", &error))?;
            return Ok(());
        }
        answers
            .write_all(b"y\n")
            .await
            .map_err(|error| failed("answer", &error))?;
    }
    let _ = child.wait().await;
    Err(failed(
        "the child",
        &format!("ended after {requests} permission requests, before the crash point"),
    ))
}

/// The id of the one session in `dir`.
fn only_session(dir: &Path) -> Result<String, String> {
    let found = std::fs::read_dir(dir)
        .map_err(|error| error.to_string())?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"));
    found
        .and_then(|path| Some(path.file_stem()?.to_str()?.to_owned()))
        .ok_or_else(|| "the killed run left no session".to_owned())
}
