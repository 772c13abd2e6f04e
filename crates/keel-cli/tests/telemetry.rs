//! Telemetry export as a user configures it: `keel run` as a process
//! exporting its spans and metrics over OTLP/HTTP to a real receiver
//! (tests/telemetry/receiver.rs), by the standard variables or the user's
//! `[telemetry]` table, in protobuf and JSON.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "telemetry/receiver.rs"]
mod receiver;

use std::collections::BTreeMap;
use std::time::Duration;

use common::home::{Home, assert_success, final_result};
use receiver::{Receiver, all_values, attribute};
use serde_json::{Value, json};

const PROMPT_MARKER: &str = "PROMPT-MARKER-7f3a";
const FILE_MARKER: &str = "FILE-MARKER-91bc";

/// 3 model requests and 3 tool calls: `ls` and `find`, then `read`, then
/// the answer.
fn three_by_three(home: &Home) -> std::path::PathBuf {
    std::fs::write(home.workspace().join("a.txt"), FILE_MARKER).unwrap();
    let usage = json!({"input_tokens": 100, "output_tokens": 10, "cache_read_tokens": 40});
    home.script(
        "script",
        json!({"turns": [
            {"response_id": "resp-1", "usage": usage, "content": [
                {"type": "tool_call", "name": "ls", "arguments": {}},
                {"type": "tool_call", "name": "find", "arguments": {"pattern": "*.txt"}}]},
            {"response_id": "resp-2", "usage": usage, "content": [
                {"type": "tool_call", "name": "read", "arguments": {"path": "a.txt"}}]},
            {"response_id": "resp-3", "usage": usage, "content": [
                {"type": "text", "text": "done"}]}
        ]}),
    )
}

fn run(home: &Home, env: &[(&str, &str)], extra: &[&str]) -> (std::process::Output, Value) {
    let script = three_by_three(home);
    let mut args = vec!["run", "--tools", "ls,find,read"];
    args.extend_from_slice(extra);
    args.push(PROMPT_MARKER);
    let output = home.run_script(&args, &script, env);
    assert_success(&output);
    let result = final_result(&output);
    (output, result)
}

/// The 3×3 run with `env`, spawned with stream-json output on piped stdio.
fn spawn_run(home: &Home, env: &[(&str, &str)]) -> std::process::Child {
    let script = three_by_three(home);
    home.command(&[
        "run",
        "--tools",
        "ls,find,read",
        "--output-format",
        "stream-json",
        "--script",
    ])
    .arg(&script)
    .arg(PROMPT_MARKER)
    .envs(env.iter().copied())
    .spawn()
    .unwrap()
}

#[test]
fn a_run_exports_one_agent_span_with_its_chat_and_tool_spans_and_metrics() {
    let receiver = Receiver::start();
    let home = Home::new();
    let endpoint = receiver.endpoint();
    let (_, result) = run(&home, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)], &[]);
    let session = result["session_id"].as_str().unwrap();

    let spans = receiver.spans();
    let named = |prefix: &str| -> Vec<_> {
        spans
            .iter()
            .filter(|span| span.name.starts_with(prefix))
            .collect()
    };
    let agents = named("invoke_agent");
    assert_eq!(agents.len(), 1, "{:?}", names(&spans));
    let agent = agents[0];
    assert_eq!(agent.name, "invoke_agent keel");
    for (key, expected) in [
        ("gen_ai.operation.name", Some("invoke_agent")),
        ("gen_ai.agent.name", Some("keel")),
        ("gen_ai.conversation.id", Some(session)),
        ("gen_ai.provider.name", Some("scripted")),
        ("keel.run.outcome", Some("settled")),
        ("gen_ai.request.model", None),
        ("keel.run.id", None),
    ] {
        let value = attribute(agent, key).unwrap_or_else(|| panic!("invoke_agent lacks {key}"));
        if let Some(expected) = expected {
            assert_eq!(value, expected, "{key}");
        }
    }
    let run_id = attribute(agent, "keel.run.id").unwrap();

    let chats = named("chat ");
    assert_eq!(chats.len(), 3, "{:?}", names(&spans));
    let mut response_ids = Vec::new();
    let mut finish_reasons = Vec::new();
    for chat in &chats {
        assert_eq!(
            chat.parent_span_id, agent.span_id,
            "chat's parent is the run"
        );
        assert_eq!(chat.trace_id, agent.trace_id);
        let model = attribute(chat, "gen_ai.request.model").unwrap();
        assert_eq!(chat.name, format!("chat {model}"));
        assert_eq!(attribute(chat, "gen_ai.operation.name").unwrap(), "chat");
        assert_eq!(attribute(chat, "gen_ai.provider.name").unwrap(), "scripted");
        assert_eq!(attribute(chat, "gen_ai.usage.input_tokens").unwrap(), "100");
        assert_eq!(attribute(chat, "gen_ai.usage.output_tokens").unwrap(), "10");
        assert_eq!(
            attribute(chat, "gen_ai.usage.cache_read.input_tokens").unwrap(),
            "40"
        );
        assert_eq!(attribute(chat, "gen_ai.conversation.id").unwrap(), session);
        assert_eq!(attribute(chat, "keel.run.id").unwrap(), run_id);
        // The conventions type the finish reasons as a string array.
        let reasons = receiver::string_array(chat, "gen_ai.response.finish_reasons")
            .expect("finish reasons are a string array");
        finish_reasons.extend(reasons);
        for key in ["gen_ai.response.model", "keel.time_to_first_chunk_ms"] {
            assert!(attribute(chat, key).is_some(), "chat lacks {key}");
        }
        response_ids.push(attribute(chat, "gen_ai.response.id").unwrap());
    }
    response_ids.sort();
    assert_eq!(response_ids, ["resp-1", "resp-2", "resp-3"]);
    finish_reasons.sort();
    assert_eq!(finish_reasons, ["stop", "tool_use", "tool_use"]);

    let tools = named("execute_tool ");
    assert_eq!(tools.len(), 3, "{:?}", names(&spans));
    let mut tool_names = Vec::new();
    for tool in &tools {
        assert_eq!(
            tool.parent_span_id, agent.span_id,
            "a call's parent is the run"
        );
        let name = attribute(tool, "gen_ai.tool.name").unwrap();
        assert_eq!(tool.name, format!("execute_tool {name}"));
        assert_eq!(
            attribute(tool, "gen_ai.operation.name").unwrap(),
            "execute_tool"
        );
        assert_eq!(attribute(tool, "gen_ai.tool.type").unwrap(), "function");
        assert!(attribute(tool, "gen_ai.tool.call.id").is_some());
        tool_names.push(name);
    }
    tool_names.sort();
    assert_eq!(tool_names, ["find", "ls", "read"]);

    // The trace leads to the session record: the response ids and call ids
    // are the stored messages'.
    let file = home.sessions().join(format!("{session}.jsonl"));
    let stored = std::fs::read_to_string(file).unwrap();
    for id in ["resp-1", "resp-2", "resp-3"] {
        assert!(
            stored.contains(&format!("\"response_id\":\"{id}\"")),
            "{id}"
        );
    }
    for tool in &tools {
        let call = attribute(tool, "gen_ai.tool.call.id").unwrap();
        assert!(
            stored.contains(&format!("\"call_id\":\"{call}\"")),
            "{call}"
        );
    }

    // Permission decisions are spans of their own, under the run.
    assert_eq!(named("permission").len(), 3, "{:?}", names(&spans));

    // No content unless asked.
    let values = all_values(&spans);
    for marker in [PROMPT_MARKER, FILE_MARKER] {
        assert!(
            !values.contains(marker),
            "{marker} exported without capture"
        );
    }

    let metrics = receiver.metric_names();
    for expected in [
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "keel.client.time_to_first_chunk",
        "keel.tool.duration",
        "keel.runs",
        "keel.permission.decisions",
    ] {
        assert!(
            metrics.iter().any(|name| name == expected),
            "{expected} not in {metrics:?}"
        );
    }
    // The values are the run's: 3 requests of 100 input and 10 output
    // tokens, one settled run, 3 calls by tool, 3 decisions by the policy.
    let tokens = receiver.points("gen_ai.client.token.usage");
    let by_type = |kind: &str| -> (f64, u64) {
        tokens
            .iter()
            .filter(|p| p.attributes.get("gen_ai.token.type").map(String::as_str) == Some(kind))
            .fold((0.0, 0), |(sum, count), p| (sum + p.value, count + p.count))
    };
    assert_eq!(by_type("input"), (300.0, 3));
    assert_eq!(by_type("output"), (30.0, 3));
    let runs = receiver.points("keel.runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].value, 1.0);
    assert_eq!(runs[0].attributes["keel.run.outcome"], "settled");
    let tools = receiver.points("keel.tool.duration");
    let calls: BTreeMap<String, u64> = tools
        .iter()
        .map(|p| (p.attributes["gen_ai.tool.name"].clone(), p.count))
        .collect();
    assert_eq!(
        calls,
        BTreeMap::from([("find".into(), 1), ("ls".into(), 1), ("read".into(), 1)])
    );
    let decisions = receiver.points("keel.permission.decisions");
    assert_eq!(decisions.iter().map(|p| p.value).sum::<f64>(), 3.0);
    assert!(
        decisions
            .iter()
            .all(|p| p.attributes["keel.permission.source"] == "policy")
    );
    // No metric carries an id.
    for name in &metrics {
        for point in receiver.points(name) {
            for key in point.attributes.keys() {
                assert!(!key.ends_with(".id"), "{name} carries {key}");
            }
        }
    }
}

#[test]
fn content_is_captured_only_when_the_user_opts_in() {
    let receiver = Receiver::start();
    let home = Home::new();
    let endpoint = receiver.endpoint();
    run(
        &home,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
        &["-c", "telemetry.capture_content=true"],
    );
    let spans = receiver.spans();
    let chat_inputs: Vec<String> = spans
        .iter()
        .filter_map(|span| attribute(span, "gen_ai.input.messages"))
        .collect();
    assert_eq!(chat_inputs.len(), 3);
    assert!(
        chat_inputs
            .iter()
            .all(|input| input.contains(PROMPT_MARKER))
    );
    let results: String = spans
        .iter()
        .filter_map(|span| attribute(span, "gen_ai.tool.call.result"))
        .collect();
    assert!(results.contains(FILE_MARKER), "{results}");
    assert!(spans.iter().any(|span| {
        attribute(span, "gen_ai.tool.call.arguments").is_some_and(|args| args.contains("a.txt"))
    }));
}

#[test]
fn the_user_table_exports_json_with_headers_from_the_environment() {
    let receiver = Receiver::start();
    let home = Home::new();
    let config = home.path().join("config/keel");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        format!(
            "[telemetry]\nendpoint = \"{}\"\nprotocol = \"http/json\"\nheaders_env = \"MY_OTLP_HEADERS\"\n",
            receiver.endpoint()
        ),
    )
    .unwrap();
    let (output, _) = run(
        &home,
        &[("MY_OTLP_HEADERS", "authorization=Bearer%20tok-123")],
        &[],
    );
    let spans = receiver.spans();
    assert_eq!(
        spans.iter().filter(|s| s.name.starts_with("chat ")).count(),
        3,
        "{:?}",
        names(&spans)
    );
    receiver.with_received(|received| {
        assert!(!received.requests.is_empty());
        for (content_type, authorization) in &received.requests {
            assert!(
                content_type.starts_with("application/json"),
                "{content_type}"
            );
            assert_eq!(authorization.as_deref(), Some("Bearer tok-123"));
        }
        assert!(!received.metrics.is_empty(), "metrics arrive as JSON too");
    });
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("tok-123"), "{stderr}");
}

#[test]
fn a_collector_that_never_answers_neither_fails_nor_holds_the_run() {
    let receiver = Receiver::hanging();
    let home = Home::new();
    let mut child = spawn_run(
        &home,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
            ("KEEL_LOG", "keel_telemetry=warn"),
        ],
    );
    // A hang guard, not a timing claim: bounded by the export timeout, the
    // exit comes in seconds; without the bound it would never come.
    let exited = common::exited_within(&mut child, Duration::from_secs(60));
    let output = child.wait_with_output().unwrap();
    assert!(
        exited,
        "keel did not exit with a collector that never answers"
    );
    assert_success(&output);
    assert_eq!(final_result(&output)["state"], "settled");
    assert!(
        receiver.with_received(|received| !received.requests.is_empty()),
        "the exporter did try"
    );
    // Failures are logged once per signal, not per span or batch.
    let stderr = String::from_utf8_lossy(&output.stderr);
    let failures = stderr.matches("telemetry export failed").count();
    assert!(failures <= 2, "{failures} failure lines:\n{stderr}");
}

#[test]
fn a_redirecting_collector_gets_no_second_request_and_no_headers_elsewhere() {
    // reqwest strips only `authorization` on a redirect to another host;
    // vendor keys (`x-api-key`, `dd-api-key`, …) would go along, so the
    // exporter follows no redirect at all.
    let elsewhere = Receiver::start();
    let collector = Receiver::redirecting(&elsewhere.endpoint());
    let home = Home::new();
    let (output, result) = run(
        &home,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint()),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cret-key"),
            ("KEEL_LOG", "keel_telemetry=warn"),
        ],
        &[],
    );
    assert_eq!(result["state"], "settled");
    assert!(
        collector.with_received(|received| !received.requests.is_empty()),
        "the exporter did try"
    );
    assert!(
        elsewhere.with_received(|received| received.requests.is_empty()),
        "a redirect was followed"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("s3cret-key"), "{stderr}");
}

#[test]
fn a_tool_name_no_tool_has_is_exported_as_other_and_ids_are_bounded() {
    // The model chooses tool names and call ids: under prompt injection a
    // name can carry file contents, and without content capture it must
    // not reach the collector (nor become a metric series of its own).
    let receiver = Receiver::start();
    let home = Home::new();
    let planted = format!("read-{FILE_MARKER}");
    let long_id = "i".repeat(10_000);
    let script = home.script(
        "script",
        json!({"turns": [
            {"response_id": "r".repeat(10_000), "content": [
                {"type": "tool_call", "id": long_id, "name": planted, "arguments": {}},
                {"type": "tool_call", "name": "ls", "arguments": {}}]},
            {"content": [{"type": "text", "text": "done"}]}
        ]}),
    );
    let output = home.run_script(
        &["run", "--tools", "ls", "x"],
        &script,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint())],
    );
    assert_success(&output);
    let spans = receiver.spans();
    let values = all_values(&spans);
    assert!(!values.contains(FILE_MARKER), "{values}");
    assert!(values.contains("execute_tool _OTHER"), "{values}");
    assert!(values.contains("execute_tool ls"), "{values}");
    for span in &spans {
        for kv in &span.attributes {
            let text = kv
                .value
                .as_ref()
                .map(|v| format!("{v:?}"))
                .unwrap_or_default();
            assert!(text.len() < 1_000, "{} is {} bytes", kv.key, text.len());
        }
    }
    let tools: Vec<_> = receiver
        .points("keel.tool.duration")
        .into_iter()
        .map(|point| point.attributes["gen_ai.tool.name"].clone())
        .collect();
    assert!(
        tools.contains(&"_OTHER".to_owned()) && !tools.iter().any(|t| t.contains(FILE_MARKER)),
        "{tools:?}"
    );
}

#[test]
fn a_project_cannot_turn_export_on() {
    let receiver = Receiver::start();
    let home = Home::new();
    let project = home.workspace().join(".keel");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("config.toml"),
        format!(
            "[telemetry]\nendpoint = \"{}\"\ncapture_content = true\n",
            receiver.endpoint()
        ),
    )
    .unwrap();
    let (output, _) = run(&home, &[], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(".keel/config.toml: `telemetry` is ignored"),
        "{stderr}"
    );
    assert!(receiver.with_received(|received| received.requests.is_empty()));
}

#[test]
fn a_wrong_telemetry_setting_is_a_startup_error_naming_it() {
    let home = Home::new();
    let script = three_by_three(&home);
    for (name, value) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-secret"),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://user:secret@127.0.0.1:9",
        ),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "secret-pasted-in-the-wrong-place",
        ),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:9/?key=secret",
        ),
    ] {
        let output = home
            .command(&["run", "--tools", "ls", "--script"])
            .arg(&script)
            .arg("hi")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
            .env(name, value)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{name}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(name), "{stderr}");
        assert!(!stderr.contains("secret"), "{stderr}");
    }
    // The timeout also bounds the wait at exit: past a minute is refused.
    let output = home
        .command(&["run", "--tools", "ls", "--script"])
        .arg(&script)
        .arg("hi")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "18446744073709551615")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("60000 ms"), "{stderr}");
}

#[test]
fn a_signal_ends_the_wait_for_a_collector_at_exit() {
    let receiver = Receiver::hanging();
    let home = Home::new();
    let mut child = spawn_run(
        &home,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
        ],
    );
    // The run's final result is printed before the flush at exit begins.
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let settled = lines.any(|line| line.unwrap().contains("\"type\":\"result\""));
    assert!(settled, "no result line");
    // Give the flush a moment to start waiting, then ask keel to stop.
    std::thread::sleep(Duration::from_millis(300));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    // A hang guard, not a timing claim: without the signal ending the wait
    // keel would wait the whole minute.
    let exited = common::exited_within(&mut child, Duration::from_secs(30));
    let _ = child.wait();
    assert!(exited, "SIGTERM did not end the wait for the collector");
}

fn names(spans: &[opentelemetry_proto::tonic::trace::v1::Span]) -> BTreeMap<String, usize> {
    let mut names = BTreeMap::new();
    for span in spans {
        *names.entry(span.name.clone()).or_insert(0) += 1;
    }
    names
}

#[test]
fn compaction_and_recovery_have_spans_of_their_own() {
    let receiver = Receiver::start();
    let home = Home::new();
    let endpoint = receiver.endpoint();
    for demo in ["context-compaction", "crash-recovery"] {
        let output = home
            .command(&["demo", demo, "--output-format", "json"])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .output()
            .unwrap();
        assert_success(&output);
    }
    let spans = receiver.spans();
    let compactions: Vec<_> = spans.iter().filter(|s| s.name == "compaction").collect();
    assert!(!compactions.is_empty(), "{:?}", names(&spans));
    for span in &compactions {
        assert!(attribute(span, "keel.compaction.trigger").is_some());
        assert!(attribute(span, "keel.compaction.tokens_before").is_some());
    }
    assert!(
        compactions
            .iter()
            .any(|span| attribute(span, "keel.entry.id").is_some()),
        "a compaction that succeeded names its checkpoint"
    );
    let recoveries: Vec<_> = spans.iter().filter(|s| s.name == "recovery").collect();
    assert_eq!(recoveries.len(), 1, "{:?}", names(&spans));
    let recovery = recoveries[0];
    let parent = spans
        .iter()
        .find(|span| span.span_id == recovery.parent_span_id)
        .expect("the recovery span's parent was exported");
    assert_eq!(parent.name, "invoke_agent keel");
    assert_eq!(
        attribute(parent, "keel.run.resume").as_deref(),
        Some("true")
    );
}
