//! `keel demo permissions` in every mode and case, driven as a process:
//! what each call's permission came to, who decided, and that the recorded
//! decisions hold hashes, not arguments.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use serde_json::Value;

/// The JSON lines `keel demo permissions --mode MODE --case CASE` printed.
fn demo(mode: &str, case: &str) -> (i32, Vec<Value>) {
    let output = common::keel_command()
        .args([
            "demo",
            "permissions",
            "--output-format",
            "stream-json",
            "--mode",
            mode,
            "--case",
            case,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect();
    (output.status.code().unwrap(), lines)
}

fn of_type<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|line| line["type"] == kind).collect()
}

/// Each call's outcome: `ok`, the error code, with `(host)` when the host decided.
fn outcomes(lines: &[Value]) -> Vec<String> {
    of_type(lines, "tool_execution_end")
        .into_iter()
        .map(|end| {
            let result = &end["result"];
            match result["error"]["code"].as_str() {
                None => "ok".to_owned(),
                Some(code) => code.to_owned(),
            }
        })
        .collect()
}

fn decisions(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|line| line["type"] == "permission_decision")
        .collect()
}

#[test]
fn standard_shows_every_row_in_every_mode() {
    let expected: [(&str, [&str; 5]); 4] = [
        (
            "plan",
            [
                "ok",
                "permission_denied",
                "ok",
                "permission_denied",
                "permission_denied",
            ],
        ),
        (
            "ask",
            ["ok", "ok", "ok", "permission_denied", "permission_denied"],
        ),
        (
            "auto",
            ["ok", "ok", "ok", "permission_denied", "permission_denied"],
        ),
        ("full", ["ok", "ok", "ok", "process_failed", "ok"]),
    ];
    for (mode, calls) in expected {
        let (code, lines) = demo(mode, "standard");
        assert_eq!(code, 0, "{mode}");
        assert_eq!(outcomes(&lines), calls, "{mode}");
        let warned = !of_type(&lines, "warning").is_empty();
        assert_eq!(warned, mode == "full", "{mode}: only full warns");
        let recorded = decisions(&lines);
        assert_eq!(
            recorded.len(),
            5,
            "{mode}: every call's decision is recorded"
        );
        for decision in recorded {
            assert_eq!(decision["mode"], mode);
            assert_eq!(decision["arguments_sha256"].as_str().unwrap().len(), 64);
            assert!(decision.get("arguments").is_none());
            assert!(
                !decision.to_string().contains("1. fix add"),
                "no arguments stored"
            );
        }
    }
    // In ask mode the host approved the write and the command, and denied the rest.
    let (_, lines) = demo("ask", "standard");
    let sources: Vec<_> = decisions(&lines)
        .iter()
        .map(|d| d["source"].clone())
        .collect();
    assert_eq!(sources, ["policy", "host", "host", "host", "host"]);
}

#[test]
fn cancel_denies_the_pending_request() {
    let (code, lines) = demo("auto", "cancel");
    assert_eq!(code, 1);
    let resolved = of_type(&lines, "permission_resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["resolution"], "denied");
    assert_eq!(resolved[0]["source"], "kernel");
    assert_eq!(outcomes(&lines), ["cancelled"]);
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "result" && l["state"] == "cancelled")
    );
    assert_eq!(decisions(&lines)[0]["source"], "kernel");
}

#[test]
fn a_disconnected_host_approves_nothing() {
    let (code, lines) = demo("auto", "host-disconnect");
    assert_eq!(code, 0, "the run goes on without the call");
    assert!(lines.iter().any(|l| l["type"] == "host_disconnected"));
    let recorded = decisions(&lines);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["resolution"], "denied");
    assert_eq!(recorded[0]["source"], "kernel");
}

#[test]
fn a_resumed_run_does_not_inherit_full() {
    let (code, lines) = demo("full", "resume");
    assert_eq!(code, 0);
    let modes: Vec<_> = of_type(&lines, "run_started")
        .iter()
        .map(|s| s["mode"].clone())
        .collect();
    assert_eq!(modes, ["full", "auto"]);
    assert_eq!(
        of_type(&lines, "warning").len(),
        1,
        "only the full run warns"
    );
    let reasons: Vec<_> = decisions(&lines)
        .iter()
        .map(|d| d["reason"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(reasons.len(), 2);
    assert!(reasons[0].contains("unsandboxed"), "{reasons:?}");
    assert!(reasons[1].contains("workspace_write"), "{reasons:?}");
}
