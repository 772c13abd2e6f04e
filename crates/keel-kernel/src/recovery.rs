//! Continues a run that a crash interrupted (`AgentKernel::resume`; docs/recovery.md).
//!
//! The resumed run first records its `run_start` and, in the same group, one
//! `effect_recovered` entry per call the crash left without a result — what
//! the journal's table ([`crate::journal::decide`]) made of it — so the
//! decisions are durable before anything acts on them. Calls that never
//! started or are safe to repeat then go through the ordinary tool pipeline,
//! under the permission mode the host gave this time (and journaled again);
//! the others get the result the decision implies: complete, conflict,
//! recovered from a command's receipt (its exit status and output), or
//! interrupted (with the output a command's receipt captured so far).
//!
//! A command's receipts are found by the id of its `effect_started` entry
//! (never by its call id, which a provider may reuse) and read as hostile
//! input ([`keel_tools::receipt`]): a damaged journal or receipt makes the
//! call `interrupted`, its cause named in the `effect_recovered` entry and
//! in a `warning` event (`journal_damaged`).
//!
//! Before anything is recorded, a process group that an interrupted
//! command of the dead run left running (an unsandboxed command outlives
//! Keel) is killed, found from its `.started` receipt and checked by its
//! leader (alive, with the recorded start time, leading the group) so that
//! a reused pid or another group is never signalled. All results are
//! appended as one group in call order, so the branch again holds a result
//! for every call before the model is asked; then the batch's receipts,
//! moot, are removed.

use std::borrow::Cow;

use keel_protocol::{
    AssistantMessage, EntryPayload, Message, RecoveryAction, RunEventKind, ToolErrorCode,
    ToolResultMessage, UserContent,
};
use keel_session::SessionError;
use keel_tools::receipt::{Examined, Leftover};
use keel_tools::{Receipts, ToolError, ToolOutput};

use crate::journal::{CallRecovery, ReceiptState, Record, plan_records, workspace_state};
use crate::session_writer::SessionWriter;
use crate::tools::{ToolRunner, to_result};

/// What the resumed run found and did before its next turn.
pub(crate) struct Recovered {
    /// The results of the interrupted batch, in call order.
    pub(crate) results: Vec<ToolResultMessage>,
    /// The branch already ends in a final answer: nothing is left to do.
    pub(crate) settled: Option<AssistantMessage>,
}

/// Records the run's start and the recovery decisions, then completes the
/// interrupted batch.
pub(crate) async fn recover(
    runner: &ToolRunner<'_>,
    writer: &SessionWriter,
    run_start: EntryPayload,
) -> Result<Recovered, SessionError> {
    let workspace = runner.parts.workspace.clone();
    let receipts = writer.receipts();
    let receipt_state = |key: &str| match receipts.as_ref().map(|receipts| receipts.examine(key)) {
        Some(Examined::Exited(_)) => ReceiptState::Exited,
        Some(Examined::Started(_)) => ReceiptState::Started,
        Some(Examined::Damaged(damage)) => ReceiptState::Damaged(damage),
        _ => ReceiptState::Absent,
    };
    let (interruption, last) = writer
        .with_branch(|branch| {
            let last = branch
                .iter()
                .rev()
                .find_map(|entry| entry.stored().map(Cow::into_owned));
            // Every branch entry is a message or another payload.
            let records = branch.iter().filter_map(|entry| {
                (entry.message().map(Record::Message)).or_else(|| {
                    entry.payload().map(|payload| match payload {
                        EntryPayload::EffectStarted { effect } => Record::Effect(&entry.id, effect),
                        other => Record::Other(other),
                    })
                })
            });
            (
                plan_records(
                    records,
                    &|path| workspace_state(&workspace, path),
                    &receipt_state,
                ),
                last,
            )
        })
        .await;
    if let Some(receipts) = &receipts {
        kill_leftovers(receipts, &interruption.calls).await;
    }
    let mut group = vec![run_start];
    for recovery in &interruption.calls {
        group.push(EntryPayload::EffectRecovered {
            call_id: recovery.call.id.clone(),
            tool_name: recovery.call.name.clone(),
            action: recovery.action,
            reason: recovery.reason.clone(),
        });
    }
    let emitter = &runner.shared.emitter;
    writer.append(emitter, group).await?;
    for recovery in &interruption.calls {
        if let Some(damage) = &recovery.damage {
            tracing::warn!(call_id = %recovery.call.id, %damage, "the command journal is damaged");
            emitter.emit(RunEventKind::Warning {
                code: "journal_damaged".into(),
                message: format!(
                    "call {} ({}): {damage}; it is reported as interrupted, its outcome unknown \
                     ({})",
                    recovery.call.id,
                    recovery.call.name,
                    damage.code()
                ),
            });
        }
    }
    for recovery in &interruption.calls {
        emitter.emit(RunEventKind::EffectRecovered {
            call_id: recovery.call.id.clone(),
            action: recovery.action.as_str().to_owned(),
        });
        if recovery.action == RecoveryAction::Conflict {
            // The user's files were kept; the user hears why, as the
            // model does from the call's result.
            emitter.emit(RunEventKind::Warning {
                code: "recovery_conflict".into(),
                message: format!(
                    "the interrupted {} call {} was not run again: {}",
                    recovery.call.name, recovery.call.id, recovery.reason
                ),
            });
        }
    }
    let settled = match last {
        Some(Message::Assistant(message)) if message.tool_calls().next().is_none() => Some(message),
        _ => None,
    };
    if interruption.calls.is_empty() {
        return Ok(Recovered {
            results: Vec::new(),
            settled,
        });
    }
    let runnable: Vec<_> = interruption
        .calls
        .iter()
        .filter(|recovery| recovery.action.runs())
        .map(|recovery| recovery.call.clone())
        .collect();
    let mut ran = if runnable.is_empty() {
        Vec::new()
    } else {
        runner.run_batch(&runnable).await?
    }
    .into_iter();
    let results: Vec<ToolResultMessage> = interruption
        .calls
        .iter()
        .filter_map(|recovery| {
            if recovery.action.runs() {
                ran.next()
            } else {
                Some(reported(recovery, receipts.as_ref()))
            }
        })
        .collect();
    let payloads = results
        .iter()
        .map(|result| EntryPayload::Message {
            message: Message::ToolResult(result.clone()),
        })
        .collect();
    writer.append(emitter, payloads).await?;
    if let Some(receipts) = &receipts {
        // The results are durable: the batch's receipts are moot.
        let keys = interruption
            .calls
            .iter()
            .filter(|recovery| recovery.damage.is_none())
            .filter_map(|recovery| recovery.effect_entry_id.clone())
            .chain(runner.take_receipt_keys());
        for key in keys {
            receipts.remove(&key);
        }
    }
    Ok(Recovered {
        results,
        settled: None,
    })
}

/// Kills the process groups that interrupted commands of the dead run left
/// running, and waits until they are gone.
async fn kill_leftovers(receipts: &Receipts, calls: &[CallRecovery]) {
    for recovery in calls {
        if recovery.action != RecoveryAction::Interrupted {
            continue;
        }
        let Some(key) = recovery.effect_entry_id.clone() else {
            continue;
        };
        let receipts = receipts.clone();
        let found = tokio::task::spawn_blocking(move || receipts.kill_leftover(&key)).await;
        match found {
            Ok(Leftover::Killed) => {
                tracing::info!(call_id = %recovery.call.id, "killed a command left running by the interrupted run");
            }
            Ok(Leftover::StillAlive) => {
                tracing::warn!(call_id = %recovery.call.id, "a command left running by the interrupted run did not die");
            }
            Ok(Leftover::NotLeader) => {
                tracing::warn!(call_id = %recovery.call.id, "a start receipt names a process group its process does not lead: nothing was signalled");
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "looking for a leftover command failed"),
        }
    }
}

/// The result a call that is not run again reports to the model.
fn reported(recovery: &CallRecovery, receipts: Option<&Receipts>) -> ToolResultMessage {
    let text = format!("Recovered after a crash: {}.", recovery.reason);
    let key = recovery.effect_entry_id.as_deref();
    let receipts = receipts.zip(key);
    let outcome = match recovery.action {
        RecoveryAction::AlreadyApplied => Ok({
            let mut tool_output = ToolOutput::default();
            tool_output.content = vec![UserContent::Text { text }];
            tool_output.details = None;
            tool_output
        }),
        RecoveryAction::Conflict => Err(ToolError::new(ToolErrorCode::EffectConflict, text)),
        RecoveryAction::RecoveredFromReceipt => {
            match receipts.map(|(receipts, key)| receipts.recovered_result(key)) {
                Some(Ok(Some(outcome))) => outcome,
                // The receipt was read when deciding; damaged or gone now:
                // nothing is known.
                Some(Err(damage)) => Err(ToolError::new(
                    ToolErrorCode::Interrupted,
                    format!(
                        "Recovered after a crash: the command journal is damaged ({damage}), \
                         so whether the command finished, and what it did, is unknown; it was \
                         not run again."
                    ),
                )),
                _ => Err(ToolError::new(ToolErrorCode::Interrupted, text)),
            }
        }
        _ => {
            let error = ToolError::new(ToolErrorCode::Interrupted, text.clone());
            // A damaged journal is not read for output.
            let tail = match (&recovery.damage, receipts) {
                (None, Some((receipts, key))) => receipts.output_tail(key).ok().flatten(),
                _ => None,
            };
            Err(match tail {
                Some(tail) if !tail.is_empty() => error.with_output(ToolOutput::text(format!(
                    "{text}\n\nOutput captured before the crash:\n{tail}"
                ))),
                _ => error,
            })
        }
    };
    to_result(&recovery.call, outcome)
}
