//! Runs one batch of tool calls through the fixed pipeline.
//!
//! For each call: `tool_execution_start` → look up and validate → classify the
//! Operation Intent → policy → host approval when the policy asks → record the
//! decision → execute with streamed progress → `tool_execution_end`. Failures
//! at any step become error ToolResults; only a session store failure aborts
//! the batch, because then nothing more can be recorded truthfully.

use std::sync::atomic::{AtomicU64, Ordering};

use keel_protocol::{
    BatchMode, DecisionSource, EntryPayload, OperationIntent, PermissionDecision, PermissionMode,
    PermissionResolution, RunEventKind, ToolCall, ToolErrorCode, ToolResultError,
    ToolResultMessage, ToolStatus,
};
use keel_session::SessionError;
use keel_tools::scheduler;
use keel_tools::{PreparedCall, ProgressSink, ToolContext, ToolError, ToolOutput};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::kernel::KernelParts;
use crate::permission::{binding, sha256_hex};
use crate::policy::PolicyDecision;
use crate::run::RunShared;
use crate::session_writer::SessionWriter;

pub(crate) struct ToolRunner<'a> {
    pub(crate) parts: &'a KernelParts,
    pub(crate) shared: &'a RunShared,
    pub(crate) writer: &'a SessionWriter,
    pub(crate) mode: PermissionMode,
    pub(crate) requests: &'a AtomicU64,
}

impl ToolRunner<'_> {
    /// Runs the batch and returns the results in call order.
    pub(crate) async fn run_batch(
        &self,
        calls: &[ToolCall],
    ) -> Result<Vec<ToolResultMessage>, SessionError> {
        let mode = self.parts.tools.batch_mode(calls);
        let outcome = scheduler::run_batch(calls.len(), mode, |index| async move {
            match calls.get(index) {
                Some(call) => self.run_one(call, mode).await,
                None => Err(SessionError::Io("tool batch index out of range".into())),
            }
        })
        .await;
        outcome.results.into_iter().collect()
    }

    async fn run_one(
        &self,
        call: &ToolCall,
        batch_mode: BatchMode,
    ) -> Result<ToolResultMessage, SessionError> {
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = format!("execute_tool {}", call.name),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.id,
        );
        async {
            self.shared.emitter.emit(RunEventKind::ToolExecutionStart {
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
                arguments: call.arguments.clone(),
                batch_mode,
            });
            let result = self.prepare_and_execute(call).await?;
            self.shared.emitter.emit(RunEventKind::ToolExecutionEnd {
                result: result.clone(),
            });
            Ok(result)
        }
        .instrument(span)
        .await
    }

    async fn prepare_and_execute(
        &self,
        call: &ToolCall,
    ) -> Result<ToolResultMessage, SessionError> {
        if self.shared.cancel.is_cancelled() {
            let error = ToolError::new(ToolErrorCode::Cancelled, "Not run: the run was cancelled");
            return Ok(to_result(call, Err(error)));
        }
        let prepared = match self.parts.tools.prepare(call) {
            Ok(prepared) => prepared,
            Err(error) => return Ok(to_result(call, Err(error))),
        };
        let intent = prepared
            .tool
            .intent(&prepared.arguments, &self.parts.workspace);
        if let Some(denial) = self.authorize(call, &prepared.arguments, intent).await? {
            return Ok(to_result(call, Err(denial)));
        }
        Ok(to_result(call, self.execute(call, prepared).await))
    }

    /// Decides whether the call may run; `Some(error)` when it may not.
    async fn authorize(
        &self,
        call: &ToolCall,
        arguments: &Value,
        intent: OperationIntent,
    ) -> Result<Option<ToolError>, SessionError> {
        let (resolution, source, reason) =
            match self.parts.policy.evaluate(self.mode, &call.name, &intent) {
                PolicyDecision::Allow => (
                    PermissionResolution::Approved,
                    DecisionSource::Policy,
                    format!("allowed in {} mode", self.mode.as_str()),
                ),
                PolicyDecision::Deny(reason) => {
                    (PermissionResolution::Denied, DecisionSource::Policy, reason)
                }
                PolicyDecision::Ask(reason) => {
                    let (resolution, source) =
                        self.ask_host(call, arguments, &intent, &reason).await;
                    (resolution, source, reason)
                }
            };
        let decision = PermissionDecision {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            mode: self.mode,
            resolution,
            source,
            arguments_sha256: sha256_hex(arguments),
            intent,
            reason: reason.clone(),
        };
        self.writer
            .append(
                &self.shared.emitter,
                vec![EntryPayload::PermissionDecision { decision }],
            )
            .await?;
        Ok(match (resolution, source) {
            (PermissionResolution::Approved, _) => None,
            (PermissionResolution::Denied, DecisionSource::Policy) => {
                Some(denied(format!("Permission denied: {reason}")))
            }
            (PermissionResolution::Denied, DecisionSource::Host) => {
                Some(denied("Permission denied by the host".into()))
            }
            (PermissionResolution::Denied, DecisionSource::Kernel) => Some(ToolError::new(
                ToolErrorCode::Cancelled,
                "Not run: the run was cancelled while waiting for permission",
            )),
        })
    }

    async fn ask_host(
        &self,
        call: &ToolCall,
        arguments: &Value,
        intent: &OperationIntent,
        reason: &str,
    ) -> (PermissionResolution, DecisionSource) {
        let number = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let bound = binding(&call.id, &call.name, arguments, intent);
        let request_id = format!("perm-{number}-{}", bound.get(..16).unwrap_or(&bound));
        let answer = self.shared.register_permission(request_id.clone());
        self.shared.emitter.emit(RunEventKind::PermissionRequested {
            request_id: request_id.clone(),
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            arguments: arguments.clone(),
            intent: intent.clone(),
            reason: reason.to_owned(),
        });
        let (resolution, source) = tokio::select! {
            answer = answer => match answer {
                Ok(resolution) => (resolution, DecisionSource::Host),
                Err(_) => (PermissionResolution::Denied, DecisionSource::Kernel),
            },
            () = self.shared.cancel.cancelled() => (PermissionResolution::Denied, DecisionSource::Kernel),
        };
        self.shared.forget_permission(&request_id);
        self.shared.emitter.emit(RunEventKind::PermissionResolved {
            request_id,
            resolution,
            source,
        });
        (resolution, source)
    }

    /// Executes the tool, forwarding its progress before its end event.
    async fn execute(
        &self,
        call: &ToolCall,
        prepared: PreparedCall,
    ) -> Result<ToolOutput, ToolError> {
        let (sender, mut progress) = mpsc::unbounded_channel();
        let context = ToolContext {
            call_id: call.id.clone(),
            workspace: self.parts.workspace.clone(),
            cancel: self.shared.cancel.child_token(),
            progress: ProgressSink::new(call.id.clone(), sender),
        };
        let execution = prepared.tool.execute(prepared.arguments, context);
        tokio::pin!(execution);
        let outcome = loop {
            tokio::select! {
                biased;
                Some((call_id, progress)) = progress.recv() => {
                    self.shared.emitter.emit(RunEventKind::ToolExecutionUpdate { call_id, progress });
                }
                outcome = &mut execution => break outcome,
            }
        };
        while let Ok((call_id, progress)) = progress.try_recv() {
            self.shared
                .emitter
                .emit(RunEventKind::ToolExecutionUpdate { call_id, progress });
        }
        outcome
    }
}

fn denied(message: String) -> ToolError {
    ToolError::new(ToolErrorCode::PermissionDenied, message)
}

/// Turns a tool outcome into the authoritative ToolResult.
pub(crate) fn to_result(
    call: &ToolCall,
    outcome: Result<ToolOutput, ToolError>,
) -> ToolResultMessage {
    match outcome {
        Ok(output) => ToolResultMessage {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            status: ToolStatus::Success,
            content: output.content,
            error: None,
            details: output.details,
        },
        Err(error) => {
            let status = if error.code == ToolErrorCode::Cancelled {
                ToolStatus::Cancelled
            } else {
                ToolStatus::Error
            };
            let mut content = error.content;
            if content.is_empty() {
                content.push(keel_protocol::UserContent::Text {
                    text: error.message.clone(),
                });
            }
            ToolResultMessage {
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
                status,
                content,
                error: Some(ToolResultError {
                    code: error.code,
                    message: error.message,
                }),
                details: error.details,
            }
        }
    }
}
