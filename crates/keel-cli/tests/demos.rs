//! Every demo case, driven as a process: the event sequence (snapshot) and
//! the terminal state and exit code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{demo, normalize};

fn check(name: &str, case: &str, expected_state: &str) {
    let output = demo(name, case);
    let expected_code = if expected_state == "settled" { 0 } else { 1 };
    assert_eq!(output.code, expected_code, "exit code of {name} {case}");
    assert_eq!(
        output.result["state"], expected_state,
        "result of {name} {case}"
    );
    let snapshot = normalize(&output.events);
    insta::assert_snapshot!(format!("{name}-{case}"), snapshot);
}

#[test]
fn streamed_run_success() {
    check("streamed-run", "success", "settled");
}

#[test]
fn streamed_run_provider_error() {
    check("streamed-run", "provider-error", "failed");
}

#[test]
fn tool_loop_success() {
    check("tool-loop", "success", "settled");
}

#[test]
fn tool_loop_mixed_batch() {
    check("tool-loop", "mixed-batch", "settled");
}

#[test]
fn tool_loop_failure() {
    check("tool-loop", "failure", "failed");
}

#[test]
fn run_control_steering() {
    check("run-control", "steering", "settled");
}

#[test]
fn run_control_follow_up() {
    check("run-control", "follow-up", "settled");
}

#[test]
fn run_control_cancel() {
    check("run-control", "cancel", "cancelled");
}

#[test]
fn run_control_retry_success() {
    check("run-control", "retry-success", "settled");
}

#[test]
fn run_control_retry_failure() {
    check("run-control", "retry-failure", "failed");
}

#[test]
fn context_compaction_success() {
    check("context-compaction", "success", "settled");
}

#[test]
fn context_compaction_overflow() {
    check("context-compaction", "overflow", "settled");
}

#[test]
fn context_compaction_summary_error() {
    let output = demo("context-compaction", "summary-error");
    assert_eq!(output.result["error"]["code"], "compaction_failed");
    check("context-compaction", "summary-error", "failed");
}

#[test]
fn crash_recovery_killed_mid_batch() {
    check("crash-recovery", "killed-mid-batch", "settled");
}

#[test]
fn extensions_success() {
    check("extensions", "success", "settled");
}

#[test]
fn extensions_ordering() {
    check("extensions", "ordering", "settled");
}

#[test]
fn extensions_invalid_outcome() {
    check("extensions", "invalid-outcome", "settled");
}

#[test]
fn an_unknown_case_is_a_startup_error() {
    let output = demo("tool-loop", "nope");
    assert_eq!(output.code, 2);
    assert_eq!(output.startup_error.unwrap()["code"], "unknown_case");
}
