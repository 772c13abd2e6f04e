//! Continues a run that a crash interrupted (SPEC §8, `AgentKernel::resume`).
//!
//! The resumed run first records its `run_start` and, in the same group, one
//! `effect_recovered` entry per call the crash left without a result — what
//! the journal's table ([`crate::journal::decide`]) made of it — so the
//! decisions are durable before anything acts on them. Calls that never
//! started or are safe to repeat then go through the ordinary tool pipeline,
//! under the permission mode the host gave this time (and journaled again);
//! the others get the result the decision implies: complete, conflict or
//! interrupted. All results are appended as one group in call order, so the
//! branch again holds a result for every call before the model is asked.

use std::borrow::Cow;

use keel_protocol::{
    AssistantMessage, EntryPayload, Message, RecoveryAction, RunEventKind, ToolErrorCode,
    ToolResultMessage, UserContent,
};
use keel_session::SessionError;
use keel_tools::{ToolError, ToolOutput};

use crate::journal::{CallRecovery, Record, plan_records, workspace_sha256};
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
    let (interruption, last) = writer
        .with_branch(|branch| {
            let last = branch
                .iter()
                .rev()
                .find_map(|entry| entry.stored().map(Cow::into_owned));
            // Every branch entry is a message or another payload.
            let records = branch.iter().filter_map(|entry| {
                (entry.message().map(Record::Message))
                    .or_else(|| entry.payload().map(Record::Other))
            });
            (
                plan_records(records, &|path| workspace_sha256(&workspace, path)),
                last,
            )
        })
        .await;
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
        emitter.emit(RunEventKind::EffectRecovered {
            call_id: recovery.call.id.clone(),
            action: recovery.action.as_str().to_owned(),
        });
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
                Some(reported(recovery))
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
    Ok(Recovered {
        results,
        settled: None,
    })
}

/// The result a call that is not run again reports to the model.
fn reported(recovery: &CallRecovery) -> ToolResultMessage {
    let text = format!("Recovered after a crash: {}.", recovery.reason);
    let outcome = match recovery.action {
        RecoveryAction::AlreadyApplied => Ok(ToolOutput {
            content: vec![UserContent::Text { text }],
            details: None,
        }),
        RecoveryAction::Conflict => Err(ToolError::new(ToolErrorCode::EffectConflict, text)),
        _ => Err(ToolError::new(ToolErrorCode::Interrupted, text)),
    };
    to_result(&recovery.call, outcome)
}
