//! `keel session compact` and the context usage `keel session show`
//! prints, as processes on a session directory of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use serde_json::Value;

const FIRST: &str = r#"{"turns":[{"content":[{"type":"text","text":"first answer"}]}]}"#;

/// After the compaction: the summary, the kept answer, the new prompt.
const AFTER: &str = r#"{"turns":[{"expect":{"messages":3,"last_user_contains":"again"},
  "content":[{"type":"text","text":"second answer"}]}]}"#;

const SUMMARY: &str = "## Goal\n- answer\n## Constraints and preferences\n- none\n## Done and verified\n- two answers\n## In progress\n- none\n## Blocked\n- none\n## Key decisions\n- none\n## Exact files, symbols, commands and errors\n- none\n## Next steps\n- answer again";

/// Keel's summary instructions, echoed back (the opening of its fixed
/// summary prompt, its headings and its rules).
const ECHO: &str = "You write checkpoint summaries of a coding agent's conversation. The agent will continue the task from your summary alone: the conversation you summarise is removed from its context. Do not continue the conversation, do not answer questions asked in it, and do not call tools. Write only the summary, in Markdown, under exactly these eight headings, in this order, each as a `## ` line:\n\n## Goal\n## Constraints and preferences\n## Done and verified\n## In progress\n## Blocked\n## Key decisions\n## Exact files, symbols, commands and errors\n## Next steps\n\nUnder each heading write short bullet points (or `- none`). Be exact: keep file paths, function and type names, commands, error messages and numbers verbatim, because the agent will act on them.";

/// Runs `keel ARGS` asking for JSON: a run's events as JSON Lines, a
/// session's document, the compaction's line.
fn keel(dir: &std::path::Path, args: &[&str]) -> (i32, String) {
    let format = if args[0] == "run" {
        "stream-json"
    } else {
        "json"
    };
    let output = common::keel_command()
        .args(common::with_format(args, format))
        .arg("--session-dir")
        .arg(dir.join("sessions"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_DATA_HOME", dir.join("data"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
    )
}

fn line(stdout: &str, key: &str) -> Value {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|value| value["type"] == key)
        .inspect(|value| {
            // Every line keel prints is a typed `HostLine` (or an event).
            serde_json::from_value::<keel_protocol::HostLine>(value.clone())
                .unwrap_or_else(|error| panic!("{value} is not a HostLine: {error}"));
        })
        .unwrap_or_else(|| panic!("no {key} line in {stdout}"))
}

#[test]
fn a_session_is_compacted_by_its_own_provider_and_shows_its_context() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("first.json"), FIRST).unwrap();
    std::fs::write(root.join("after.json"), AFTER).unwrap();
    let summary = serde_json::json!({"turns": [{
        "expect": {"tools": [], "last_user_contains": "Additional focus: keep the answers"},
        "content": [{"type": "text", "text": SUMMARY}],
    }]});
    std::fs::write(root.join("summary.json"), summary.to_string()).unwrap();
    // A summary that echoes Keel's instructions (as SmolLM2 did), and one
    // longer than what it replaces: both refused.
    let answer =
        |text: &str| serde_json::json!({"turns": [{"content": [{"type": "text", "text": text}]}]});
    std::fs::write(root.join("echo.json"), answer(ECHO).to_string()).unwrap();
    let bloated = format!(
        "{SUMMARY}\n{}",
        "- a detail that is not in the session\n".repeat(200)
    );
    std::fs::write(root.join("grow.json"), answer(&bloated).to_string()).unwrap();
    // The workspace beside the session directory: Keel refuses sessions
    // that a sandboxed command could write.
    std::fs::create_dir(root.join("ws")).unwrap();
    let workspace = root.join("ws").display().to_string();
    let run = |script: &str, prompt: &str, session: Option<&str>| {
        let script = root.join(script).display().to_string();
        let mut args = vec!["run", "--script", &script, "--workspace", &workspace];
        if let Some(session) = session {
            args.extend(["--session", session]);
        }
        args.push(prompt);
        keel(root, &args)
    };

    // The prompt is what the summary replaces: longer than the summary.
    let first = format!(
        "first: {}",
        "keep this long note about the answers in mind; ".repeat(40)
    );
    let (code, out) = run("first.json", &first, None);
    assert_eq!(code, 0, "{out}");
    let id = line(&out, "session")["id"].as_str().unwrap().to_owned();
    let (code, out) = keel(root, &["session", "show", &id]);
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(shown["context"]["checkpoints"], 0, "{shown}");
    assert!(
        shown["context"]["estimated_tokens"].as_u64().unwrap() > 0,
        "{shown}"
    );
    assert_eq!(shown["context"]["window"], Value::Null);

    // A refused summary writes nothing and exits 1, saying why.
    for (script, reason) in [
        ("echo.json", "repeats Keel's summary instructions"),
        ("grow.json", "does not shrink the context"),
    ] {
        let script = root.join(script).display().to_string();
        let (code, out) = keel(root, &["session", "compact", &id, "--script", &script]);
        assert_eq!(code, 1, "{out}");
        let failed = line(&out, "compaction_failed");
        assert_eq!(failed["error"]["code"], "compaction_failed", "{failed}");
        let message = failed["error"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{failed}");
        let (_, out) = keel(root, &["session", "show", &id]);
        assert!(!out.contains("\"kind\":\"checkpoint\""), "{out}");
    }

    // The manual compaction: the session's provider (scripted) with its
    // script, the host's focus in the summary request.
    let summary = root.join("summary.json").display().to_string();
    let (code, out) = keel(
        root,
        &[
            "session",
            "compact",
            &id[..8],
            "--script",
            &summary,
            "--instructions",
            "keep the answers",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let compaction = line(&out, "compaction");
    assert_eq!(compaction["session_id"], id.as_str());
    assert!(
        compaction["covered_entries"].as_u64().unwrap() >= 1,
        "{compaction}"
    );
    let (_, out) = keel(root, &["session", "show", &id]);
    let shown: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(shown["context"]["checkpoints"], 1, "{shown}");
    let kinds: Vec<&str> = shown["branch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.last(), Some(&"checkpoint"), "{kinds:?}");
    assert_eq!(
        shown["branch"].as_array().unwrap().last().unwrap()["id"],
        compaction["checkpoint_id"]
    );

    // A run continuing the session sees the summary, not what it covers
    // (the script's `expect` checks the request).
    let (code, out) = run("after.json", "again", Some(&id));
    assert_eq!(code, 0, "{out}");
}

/// A summary request the provider asks to wait longer for than
/// `max_retry_wait_sec` is not waited: the compaction fails at once, and its
/// message names the wait asked for and the limit (as a run's request does).
#[test]
fn a_summary_request_told_to_wait_too_long_fails_naming_the_wait() {
    use keel_provider::testing::{Reply, TestServer};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let chunk = |delta: Value, finish: Option<&str>| {
        let body = serde_json::json!({"id": "c1", "object": "chat.completion.chunk",
            "model": "local-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {body}\n\n")
    };
    let answer = chunk(
        serde_json::json!({"role": "assistant", "content": "first answer"}),
        None,
    ) + &chunk(serde_json::json!({}), Some("stop"))
        + "data: [DONE]\n\n";
    let server = runtime
        .block_on(TestServer::start(vec![
            Reply::sse(&answer),
            Reply::Status {
                status: 429,
                headers: vec![("retry-after".into(), "2000".into())],
                body: r#"{"error":{"message":"slow down"}}"#.into(),
            },
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("config/keel")).unwrap();
    std::fs::write(
        root.join("config/keel/config.toml"),
        format!(
            "provider = \"local\"\n[providers.local]\napi = \"openai-chat\"\nbase_url = \"{}\"\n\
             default_model = \"local-model\"\n",
            server.url()
        ),
    )
    .unwrap();
    std::fs::create_dir(root.join("ws")).unwrap();
    let workspace = root.join("ws").display().to_string();
    let prompt = format!("first: {}", "a long note to summarise; ".repeat(40));
    let (code, out) = keel(root, &["run", "--workspace", &workspace, &prompt]);
    assert_eq!(code, 0, "{out}");
    let id = line(&out, "session")["id"].as_str().unwrap().to_owned();
    let (code, out) = keel(root, &["session", "compact", &id]);
    assert_eq!(code, 1, "{out}");
    let failed = line(&out, "compaction_failed");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("asked to wait 2000 s") && message.contains("max_retry_wait_sec"),
        "{failed}"
    );
    assert_eq!(server.connections(), 2, "the wait was not retried");
}
