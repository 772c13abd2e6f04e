//! The recovery decision table of docs/recovery.md (`keel_kernel::journal`), as a
//! property: for every tool class and every on-disk state of its target,
//! the decision is the one specified — an effect whose outcome cannot be
//! known is never run again, and a file tool is run again only on a target
//! that still holds what it held before the call (a user's change is never
//! overwritten).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keel_kernel::journal::{OnDisk, ReceiptState, decide, plan};
use keel_protocol::{
    AssistantMessage, ContentBlock, EffectStarted, Entry, EntryPayload, FileEvidence, Idempotency,
    Message, PathKind, RecoveryAction, ToolCall, ToolResultMessage, ToolStatus,
};
use keel_tools::receipt::{ReceiptDamage, ReceiptFile};
use proptest::prelude::*;
use serde_json::json;

fn class() -> impl Strategy<Value = Option<Idempotency>> {
    prop_oneof![
        Just(None),
        Just(Some(Idempotency::ReadOnly)),
        Just(Some(Idempotency::WriteFile)),
        Just(Some(Idempotency::EditFile)),
        Just(Some(Idempotency::Command)),
        Just(Some(Idempotency::Undeclared)),
    ]
}

fn receipt() -> impl Strategy<Value = ReceiptState> {
    prop_oneof![
        Just(ReceiptState::Absent),
        Just(ReceiptState::Started),
        Just(ReceiptState::Exited),
        Just(ReceiptState::Damaged(ReceiptDamage::Torn {
            file: ReceiptFile::Exit
        })),
        Just(ReceiptState::Damaged(ReceiptDamage::OutputLost {
            printed: 3,
            kept: 0
        })),
    ]
}

/// A content hash out of a small alphabet, so that equal hashes are common.
fn hash() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("h1".to_owned())),
        Just(Some("h2".to_owned())),
        Just(Some("h3".to_owned())),
    ]
}

/// What the journal recorded before the call: a kind (`None`: a record
/// written before kinds were kept) and a hash.
fn before() -> impl Strategy<Value = (Option<PathKind>, Option<String>)> {
    prop_oneof![
        Just((Some(PathKind::Absent), None)),
        hash()
            .prop_filter("a file has a hash", Option::is_some)
            .prop_map(|hash| (Some(PathKind::File), hash)),
        Just((Some(PathKind::Directory), None)),
        Just((Some(PathKind::Symlink), None)),
        hash().prop_map(|hash| (None, hash)),
    ]
}

/// What the target holds now.
fn now() -> impl Strategy<Value = OnDisk> {
    prop_oneof![
        Just(OnDisk::Absent),
        Just(OnDisk::file("h1")),
        Just(OnDisk::file("h2")),
        Just(OnDisk::file("h3")),
        Just(OnDisk::Other(PathKind::Directory)),
        Just(OnDisk::Other(PathKind::Symlink)),
    ]
}

/// Whether `now` is what the record says was there before the call.
fn is_before(kind: Option<PathKind>, hash: &Option<String>, now: &OnDisk) -> bool {
    match (kind, hash) {
        (None | Some(PathKind::File), Some(hash)) => *now == OnDisk::file(hash.as_str()),
        (None | Some(PathKind::Absent), None) => *now == OnDisk::Absent,
        _ => false,
    }
}

/// The table, written out case by case.
fn specified(
    class: Option<Idempotency>,
    evidence: Option<(Option<PathKind>, &Option<String>, &Option<String>)>,
    now: &OnDisk,
    receipt: ReceiptState,
) -> RecoveryAction {
    match class {
        None => RecoveryAction::NotStarted,
        Some(Idempotency::ReadOnly) => RecoveryAction::Rerun,
        // Every file tool, write and edit alike.
        Some(Idempotency::WriteFile | Idempotency::EditFile) => match evidence {
            None => RecoveryAction::Conflict,
            Some((_, _, Some(after))) if *now == OnDisk::file(after.as_str()) => {
                RecoveryAction::AlreadyApplied
            }
            Some((kind, before, _)) if is_before(kind, before, now) => RecoveryAction::Rerun,
            Some(_) => RecoveryAction::Conflict,
        },
        Some(Idempotency::Command) if receipt == ReceiptState::Exited => {
            RecoveryAction::RecoveredFromReceipt
        }
        Some(_) => RecoveryAction::Interrupted,
    }
}

proptest! {
    #[test]
    fn each_class_and_disk_state_gets_the_specified_decision(
        class in class(),
        with_evidence in any::<bool>(),
        before in before(),
        after in hash(),
        now in now(),
        receipt in receipt(),
    ) {
        let (before_kind, before) = before;
        let evidence = with_evidence.then(|| { let mut file_evidence = FileEvidence::new("f.txt"); file_evidence.before_sha256 = before.clone(); file_evidence.after_sha256 = after.clone(); file_evidence.before_kind = before_kind; file_evidence });
        let effect = class.map(|idempotency| { let mut effect_started = EffectStarted::new("c1", "t", "x", idempotency); effect_started.evidence = evidence.clone().into_iter().collect(); effect_started });
        let current = |path: &str| {
            assert_eq!(path, "f.txt");
            now.clone()
        };
        let (action, reason) = decide(effect.as_ref(), &current, receipt.clone());
        let expected = specified(
            class,
            with_evidence.then_some((before_kind, &before, &after)),
            &now,
            receipt.clone(),
        );
        prop_assert_eq!(action, expected);
        prop_assert!(!reason.is_empty());
        if matches!(class, Some(Idempotency::Command | Idempotency::Undeclared)) {
            prop_assert!(!action.runs(), "an unknown outcome is never run again");
        }
        if let (Some(Idempotency::Command), ReceiptState::Damaged(damage)) = (class, &receipt) {
            prop_assert!(reason.contains(&damage.to_string()), "the cause is named: {}", reason);
        }
        if action == RecoveryAction::RecoveredFromReceipt {
            prop_assert_eq!(class, Some(Idempotency::Command));
            prop_assert_eq!(receipt, ReceiptState::Exited, "only a complete exit receipt recovers");
        }
        if action == RecoveryAction::Rerun
            && matches!(class, Some(Idempotency::WriteFile | Idempotency::EditFile))
        {
            prop_assert!(
                is_before(before_kind, &before, &now),
                "a file tool runs again only on what its target held before"
            );
        }
        if action == RecoveryAction::Conflict {
            prop_assert!(reason.contains("f.txt") || evidence.is_none(), "{}", reason);
        }
    }

    #[test]
    fn only_calls_without_results_are_decided_in_call_order(
        answered in proptest::collection::vec(any::<bool>(), 1..6),
        run_ended in any::<bool>(),
        exited in proptest::collection::vec(any::<bool>(), 6),
    ) {
        let calls: Vec<ToolCall> = (0..answered.len())
            .map(|index| ToolCall::new(format!("c{index}"), "bash", json!({})))
            .collect();
        let mut payloads = vec![
            EntryPayload::RunStart {
                run_id: "r".into(),
                mode: Default::default(),
                workspace_moved: None,
            },
            EntryPayload::Message {
                message: Message::Assistant({ let mut assistant_message = AssistantMessage::default(); assistant_message.content = calls.iter().cloned().map(ContentBlock::ToolCall).collect(); assistant_message }),
            },
        ];
        for (call, answered) in calls.iter().zip(&answered) {
            payloads.push(EntryPayload::EffectStarted {
                effect: { let mut effect_started = EffectStarted::new(call.id.clone(), "bash", "x", Idempotency::Command); effect_started.evidence = Vec::new(); effect_started },
            });
            if *answered {
                payloads.push(EntryPayload::Message {
                    message: Message::ToolResult({ let mut tool_result_message = ToolResultMessage::new(call.id.clone(), "bash", ToolStatus::Success, Vec::new()); tool_result_message.error = None; tool_result_message.details = None; tool_result_message }),
                });
            }
        }
        if run_ended {
            payloads.push(EntryPayload::RunEnd {
                run_id: "r".into(),
                state: keel_protocol::RunEndState::Settled,
            });
        }
        let branch: Vec<Entry> = payloads
            .into_iter()
            .enumerate()
            .map(|(index, payload)| Entry::new(format!("e{index}"), index.checked_sub(1).map(|parent| format!("e{parent}")), 0, payload))
            .collect();
        // Each call's receipt is looked up by its `effect_started` entry's id.
        let call_of = |key: &str| -> usize {
            let effect = branch.iter().find(|entry| entry.id == key).map(|entry| &entry.payload);
            let Some(EntryPayload::EffectStarted { effect }) = effect else {
                panic!("a receipt is looked up by an effect entry's id, not {key}");
            };
            effect.call_id.trim_start_matches('c').parse().unwrap()
        };
        let receipt = |key: &str| {
            if exited[call_of(key)] { ReceiptState::Exited } else { ReceiptState::Started }
        };
        let interruption = plan(&branch, &|_| OnDisk::Absent, &receipt);
        let expected: Vec<String> = calls
            .iter()
            .zip(&answered)
            .filter(|(_, answered)| !**answered)
            .map(|(call, _)| call.id.clone())
            .collect();
        let decided: Vec<String> = interruption.calls.iter().map(|c| c.call.id.clone()).collect();
        prop_assert_eq!(decided, expected.clone());
        for decided in &interruption.calls {
            let key = decided.effect_entry_id.as_deref().unwrap();
            prop_assert_eq!(call_of(key), decided.call.id.trim_start_matches('c').parse::<usize>().unwrap());
            let expected = if receipt(key) == ReceiptState::Exited {
                RecoveryAction::RecoveredFromReceipt
            } else {
                RecoveryAction::Interrupted
            };
            prop_assert_eq!(decided.action, expected);
        }
        prop_assert_eq!(interruption.run_open, !run_ended);
        prop_assert_eq!(interruption.is_interrupted(), !run_ended || !expected.is_empty());
    }
}

/// A branch: a run, one assistant message with `calls`, their records.
fn interrupted_batch(calls: &[(&str, FileEvidence)]) -> Vec<Entry> {
    let mut payloads = vec![
        EntryPayload::RunStart {
            run_id: "r".into(),
            mode: Default::default(),
            workspace_moved: None,
        },
        EntryPayload::Message {
            message: Message::Assistant({
                let mut assistant_message = AssistantMessage::default();
                assistant_message.content = calls
                    .iter()
                    .map(|(id, _)| ContentBlock::ToolCall(ToolCall::new(*id, "write", json!({}))))
                    .collect();
                assistant_message
            }),
        },
    ];
    for (id, evidence) in calls {
        payloads.push(EntryPayload::EffectStarted {
            effect: {
                let mut effect_started =
                    EffectStarted::new(*id, "write", "x", Idempotency::WriteFile);
                effect_started.evidence = vec![evidence.clone()];
                effect_started
            },
        });
    }
    payloads
        .into_iter()
        .enumerate()
        .map(|(index, payload)| {
            Entry::new(
                format!("e{index}"),
                index.checked_sub(1).map(|parent| format!("e{parent}")),
                0,
                payload,
            )
        })
        .collect()
}

#[test]
fn two_writes_of_one_file_cut_short_are_judged_in_call_order() {
    // The second write's pre-image is the first write's post-image.
    let first = {
        let mut file_evidence = FileEvidence::new("f.txt");
        file_evidence.before_sha256 = None;
        file_evidence.after_sha256 = Some("h1".into());
        file_evidence.before_kind = Some(PathKind::Absent);
        file_evidence
    };
    let second = {
        let mut file_evidence = FileEvidence::new("f.txt");
        file_evidence.before_sha256 = Some("h1".into());
        file_evidence.after_sha256 = Some("h2".into());
        file_evidence.before_kind = Some(PathKind::File);
        file_evidence
    };
    let branch = interrupted_batch(&[("a", first), ("b", second)]);
    let decided = |now: OnDisk| -> Vec<RecoveryAction> {
        plan(&branch, &|_| now.clone(), &|_| ReceiptState::Absent)
            .calls
            .iter()
            .map(|call| call.action)
            .collect()
    };
    // Neither had happened: both run again, the second on the first's result.
    assert_eq!(
        decided(OnDisk::Absent),
        [RecoveryAction::Rerun, RecoveryAction::Rerun]
    );
    assert_eq!(
        decided(OnDisk::file("h1")),
        [RecoveryAction::AlreadyApplied, RecoveryAction::Rerun]
    );
    // Someone else's content: neither is run, the file is kept.
    assert_eq!(
        decided(OnDisk::file("h9")),
        [RecoveryAction::Conflict, RecoveryAction::Conflict]
    );
}

#[test]
fn a_record_written_before_kinds_were_kept_is_still_decided() {
    // An `effect_started` record as Keel wrote it before `before_kind`.
    let effect: EffectStarted = serde_json::from_value(json!({
        "call_id": "c1",
        "tool_name": "write",
        "arguments_sha256": "x",
        "idempotency": "write_file",
        "evidence": [{"path": "f.txt", "before_sha256": null, "after_sha256": "h1"}]
    }))
    .unwrap();
    assert_eq!(effect.evidence[0].before_kind, None);
    let action = |now: OnDisk| decide(Some(&effect), &|_| now.clone(), ReceiptState::Absent).0;
    assert_eq!(action(OnDisk::Absent), RecoveryAction::Rerun);
    assert_eq!(action(OnDisk::file("h1")), RecoveryAction::AlreadyApplied);
    assert_eq!(action(OnDisk::file("h9")), RecoveryAction::Conflict);
    assert_eq!(
        action(OnDisk::Other(PathKind::Directory)),
        RecoveryAction::Conflict
    );
}
