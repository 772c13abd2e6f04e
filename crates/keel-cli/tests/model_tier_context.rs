//! The model tier with a small context: a `llama-server` of its own,
//! started by this test with `-c 2048` (the binary and model that
//! `scripts/setup-model-tier.sh` built), answers an oversized request with
//! its own context error (`exceed_context_size_error`); Keel compacts — the
//! summary written by SmolLM2 through the same server — retries, and the
//! run ends settled, or failed with a typed error: never a hang or a panic.
//!
//! SmolLM2 does not write Keel's eight headings. That alone no longer ends
//! the run (issue 22): its answer gets one corrective request, and a
//! non-empty answer still without them is kept as free text. The run may
//! still fail typed — `compaction_failed` when the summary is empty, mostly
//! repeats Keel's instructions, or does not shrink the context;
//! `context_overflow` when the request is still too long after compacting;
//! `turn_limit` when the model keeps calling tools — but never because a
//! heading is missing. (Updated by reasoning: written where no llama-server
//! was available.)
//!
//! Runs when the tier is set up (`KEEL_MODEL_TIER_URL` set, as `.ci/run`
//! does); the server, model and template come from `KEEL_LLAMA_SERVER`,
//! `KEEL_MODEL_GGUF`, `KEEL_CHAT_TEMPLATE`, else from the tier's cache
//! (`$KEEL_MODEL_TIER_CACHE`, default `~/.cache/keel/model-tier`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The server's context: far less than the prompt below.
const CONTEXT: u32 = 2_048;

/// The tier's files, or `None` (with a note) when the tier is not set up.
fn tier(test: &str) -> Option<(PathBuf, PathBuf, PathBuf)> {
    if std::env::var("KEEL_MODEL_TIER_URL").map_or(true, |url| url.trim().is_empty()) {
        eprintln!("note: {test} skipped: KEEL_MODEL_TIER_URL is unset (see tests/model_tier.rs)");
        return None;
    }
    let cache = std::env::var_os("KEEL_MODEL_TIER_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/keel/model-tier"))
        })
        .unwrap();
    let pick = |variable: &str, default: PathBuf| {
        std::env::var_os(variable)
            .map(PathBuf::from)
            .unwrap_or(default)
    };
    let files = (
        pick("KEEL_LLAMA_SERVER", cache.join("bin/llama-server")),
        pick(
            "KEEL_MODEL_GGUF",
            cache.join("SmolLM2-135M-Instruct.Q4_1.gguf"),
        ),
        pick(
            "KEEL_CHAT_TEMPLATE",
            cache.join("Qwen-Qwen2.5-7B-Instruct.jinja"),
        ),
    );
    for path in [&files.0, &files.1, &files.2] {
        assert!(
            path.is_file(),
            "the model tier is set up but {} is missing",
            path.display()
        );
    }
    Some(files)
}

/// A llama-server on a free loopback port, killed on drop.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start((server, model, template): (PathBuf, PathBuf, PathBuf)) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(server)
        .arg("-m")
        .arg(model)
        .arg("--chat-template-file")
        .arg(template)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "-t",
            "2",
            "--offline",
            "--temp",
            "0",
            "--seed",
            "1",
            "-np",
            "1",
        ])
        .args(["-c", &CONTEXT.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let started = Instant::now();
    while !healthy(port) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "llama-server did not become healthy within 60 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    server
}

fn healthy(port: u16) -> bool {
    use std::io::Write;
    let Ok(mut socket) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(2)));
    let request = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if socket.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = socket.read_to_string(&mut response);
    response.starts_with("HTTP/1.1 200")
}

#[test]
fn an_oversized_request_compacts_with_smollm2_and_ends_settled_or_typed() {
    let Some(files) = tier("an_oversized_request_compacts_with_smollm2_and_ends_settled_or_typed")
    else {
        return;
    };
    let server = start(files);
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("project");
    std::fs::create_dir(&workspace).unwrap();
    // About 4,000 tokens: twice what the server holds.
    let log: String = (1..=260)
        .map(|n| {
            format!(
                "Line {n}: the lighthouse keeper counted {} gulls.\n",
                n * 7 % 50
            )
        })
        .collect();
    let prompt = format!("Here is the keeper's log:\n{log}\nHow many lines does the log have?");
    let started = Instant::now();
    let mut child = common::keel_command()
        .args([
            "run",
            "--output-format",
            "stream-json",
            "--provider",
            "openai-compatible",
            "--base-url",
        ])
        .arg(format!("{}/v1", server.url))
        .args(["--model", "smollm2", "--mode", "full", "--tools", "read"])
        .args([
            "--max-turns",
            "4",
            "--system-prompt",
            "You are a helpful assistant.",
        ])
        .arg("--workspace")
        .arg(&workspace)
        .arg("--session-dir")
        .arg(dir.path().join("sessions"))
        .arg(prompt)
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut text = String::new();
        out.read_to_string(&mut text).unwrap();
        text
    });
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        err.read_to_string(&mut text).unwrap();
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(300) {
            child.kill().unwrap();
            panic!("keel run hung: not finished within 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    eprintln!("keel run took {:.1} s", started.elapsed().as_secs_f64());
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let of =
        |kind: &str| -> Vec<&Value> { lines.iter().filter(|line| line["type"] == kind).collect() };
    let result = lines
        .iter()
        .find(|line| line["type"] == "result")
        .unwrap_or_else(|| panic!("no result line\nstdout: {stdout}\nstderr: {stderr}"));
    let context = format!(
        "exit: {status}\nresult: {result}\ncompaction events: {:?}\nstderr: {stderr}",
        lines
            .iter()
            .filter(|line| line["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("compaction")))
            .collect::<Vec<_>>()
    );
    assert!(!stderr.contains("panicked"), "{context}");

    // The server refused the first request with its own context error,
    // which Keel took as an overflow and compacted for.
    let started_events = of("compaction_started");
    assert!(!started_events.is_empty(), "no compaction\n{context}");
    assert_eq!(started_events[0]["reason"], "overflow", "{context}");

    // Keel's headings guide the summary; they never fail a compaction.
    for failed in of("compaction_failed") {
        let message = failed["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.contains("lacks the heading"), "{context}");
    }
    let checkpoints = of("session_entry")
        .into_iter()
        .filter(|line| line["kind"] == "checkpoint")
        .count();
    // Each compaction wrote a checkpoint or reported why it did not.
    assert_eq!(
        of("compaction_succeeded").len() + of("compaction_failed").len(),
        started_events.len(),
        "{context}"
    );
    assert_eq!(checkpoints, of("compaction_succeeded").len(), "{context}");

    match result["state"].as_str() {
        Some("settled") => {
            assert_eq!(status.code(), Some(0), "{context}");
            // The summary was written (Keel's headings or SmolLM2's free
            // text), and the retried request answered.
            assert!(checkpoints >= 1, "{context}");
            eprintln!("settled after compacting: {}", result["message"]);
        }
        Some("failed") => {
            assert_eq!(status.code(), Some(1), "{context}");
            let code = result["error"]["code"].as_str().unwrap_or_default();
            match code {
                // The overflow's compaction failed: its event says why,
                // and the run's error is that failure.
                "compaction_failed" => {
                    let last = of("compaction_failed")
                        .pop()
                        .expect("a compaction_failed event");
                    assert!(
                        result["error"]["message"]
                            .as_str()
                            .unwrap_or_default()
                            .starts_with(last["error"]["message"].as_str().unwrap_or_default()),
                        "{context}"
                    );
                }
                // Compacted, yet the retried request was still refused.
                "context_overflow" => assert!(checkpoints >= 1, "{context}"),
                // Compacted, then the model kept calling tools.
                "turn_limit" => assert!(checkpoints >= 1, "{context}"),
                other => panic!("unexpected error {other:?}\n{context}"),
            }
            eprintln!("failed typed: {}", result["error"]["message"]);
        }
        other => panic!("unexpected end {other:?}\n{context}"),
    }
}
