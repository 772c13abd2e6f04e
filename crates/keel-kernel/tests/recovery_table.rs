//! The recovery decision table of SPEC §8 (`keel_kernel::journal`), as a
//! property: for every tool class and every on-disk state of its target,
//! the decision is the one specified — and an effect whose outcome cannot
//! be known is never run again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keel_kernel::journal::{ReceiptState, decide, plan};
use keel_protocol::{
    AssistantMessage, ContentBlock, EffectStarted, Entry, EntryPayload, FileEvidence, Idempotency,
    Message, RecoveryAction, ToolCall, ToolResultMessage, ToolStatus,
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

/// The table, written out case by case.
fn specified(
    class: Option<Idempotency>,
    evidence: Option<(&Option<String>, &Option<String>)>,
    now: &Option<String>,
    receipt: ReceiptState,
) -> RecoveryAction {
    match class {
        None => RecoveryAction::NotStarted,
        Some(Idempotency::ReadOnly) => RecoveryAction::Rerun,
        Some(Idempotency::WriteFile) => match evidence {
            Some((_, after)) if after.is_some() && now == after => RecoveryAction::AlreadyApplied,
            _ => RecoveryAction::Rerun,
        },
        Some(Idempotency::EditFile) => match evidence {
            None => RecoveryAction::Conflict,
            Some((_, after)) if after.is_some() && now == after => RecoveryAction::AlreadyApplied,
            Some((before, _)) if now == before => RecoveryAction::Rerun,
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
        before in hash(),
        after in hash(),
        now in hash(),
        receipt in receipt(),
    ) {
        let evidence = with_evidence.then(|| FileEvidence {
            path: "f.txt".into(),
            before_sha256: before.clone(),
            after_sha256: after.clone(),
        });
        let effect = class.map(|idempotency| EffectStarted {
            call_id: "c1".into(),
            tool_name: "t".into(),
            arguments_sha256: "x".into(),
            idempotency,
            evidence: evidence.clone().into_iter().collect(),
        });
        let current = |path: &str| {
            assert_eq!(path, "f.txt");
            now.clone()
        };
        let (action, reason) = decide(effect.as_ref(), &current, receipt.clone());
        let expected = specified(
            class,
            with_evidence.then_some((&before, &after)),
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
        if action == RecoveryAction::Rerun && class == Some(Idempotency::EditFile) {
            prop_assert_eq!(&now, &before, "an edit is applied again only on its pre-image");
        }
    }

    #[test]
    fn only_calls_without_results_are_decided_in_call_order(
        answered in proptest::collection::vec(any::<bool>(), 1..6),
        run_ended in any::<bool>(),
        exited in proptest::collection::vec(any::<bool>(), 6),
    ) {
        let calls: Vec<ToolCall> = (0..answered.len())
            .map(|index| ToolCall {
                id: format!("c{index}"),
                name: "bash".into(),
                arguments: json!({}),
            })
            .collect();
        let mut payloads = vec![
            EntryPayload::RunStart { run_id: "r".into(), mode: Default::default() },
            EntryPayload::Message {
                message: Message::Assistant(AssistantMessage {
                    content: calls.iter().cloned().map(ContentBlock::ToolCall).collect(),
                    ..AssistantMessage::default()
                }),
            },
        ];
        for (call, answered) in calls.iter().zip(&answered) {
            payloads.push(EntryPayload::EffectStarted {
                effect: EffectStarted {
                    call_id: call.id.clone(),
                    tool_name: "bash".into(),
                    arguments_sha256: "x".into(),
                    idempotency: Idempotency::Command,
                    evidence: Vec::new(),
                },
            });
            if *answered {
                payloads.push(EntryPayload::Message {
                    message: Message::ToolResult(ToolResultMessage {
                        call_id: call.id.clone(),
                        tool_name: "bash".into(),
                        status: ToolStatus::Success,
                        content: Vec::new(),
                        error: None,
                        details: None,
                    }),
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
            .map(|(index, payload)| Entry {
                id: format!("e{index}"),
                parent_id: index.checked_sub(1).map(|parent| format!("e{parent}")),
                timestamp: 0,
                payload,
            })
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
        let interruption = plan(&branch, &|_| None, &receipt);
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
