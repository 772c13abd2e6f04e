//! A run's context accounting and its compaction, driven.
//!
//! [`ContextBudget`] is what the turn loop asks, through three calls, about
//! the model context: `make_room` before each request (compacts when the
//! estimate passes the window minus the reserve), `after_overflow` when the
//! provider refused a request as too long (learns a smaller window from it
//! and compacts), and `usage` for each `turn_end`. `compact` is also the
//! manual trigger (`AgentKernel::compact`).
//!
//! A compaction: `compaction_started`; the cut and the evidence
//! (`checkpoint::plan`, `checkpoint::evidence`); one summary request per
//! chunk of the covered span, built by the pipeline and sent to the run's
//! own provider and model (retryable errors retried by the run's policy);
//! the summary checked for its headings; the checkpoint appended at the
//! leaf; `compaction_succeeded`. Any failure writes nothing, emits
//! `compaction_failed` with the reason, and is returned as a typed
//! `compaction_failed` error, which ends the run — compaction never loops.

use futures::StreamExt;
use keel_protocol::{
    AssistantMessage, CheckpointMetrics, CompactionTrigger, ContextUsage, Entry, EntryPayload,
    ErrorSource, ProviderError, ProviderErrorKind, RunError, RunErrorCode, RunEventKind, Usage,
};
use keel_provider::ModelRequest;
use tokio_util::sync::CancellationToken;

use crate::accumulator::{Accumulator, Finished};
use crate::checkpoint::{self, Budget, CompactionSettings};
use crate::context;
use crate::emitter::Emitter;
use crate::ids::new_id;
use crate::parts::KernelParts;
use crate::pipeline::Frame;
use crate::session_writer::SessionWriter;
use crate::tokens::{Estimate, Ledger, Method};

/// The window assumed for budgets when none is known (a manual compaction
/// of a session whose model the catalog does not know).
const ASSUMED_WINDOW: u64 = 128_000;

/// Why a compaction (or the request it made room for) did not complete.
pub(crate) enum Interrupted {
    /// The run was cancelled.
    Cancelled,
    /// A typed failure; the run ends with it.
    Failed(RunError),
}

/// What a successful compaction wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Compacted {
    /// The checkpoint entry.
    pub(crate) entry_id: String,
    /// Estimated tokens before.
    pub(crate) tokens_before: u64,
    /// Estimated tokens after.
    pub(crate) tokens_after: u64,
    /// Entries covered.
    pub(crate) covered_entries: usize,
}

/// What a compaction works with: the run's parts, its frame, its session
/// writer, its events and its cancellation.
pub(crate) struct Seams<'a> {
    pub(crate) parts: &'a KernelParts,
    pub(crate) frame: &'a Frame,
    pub(crate) writer: &'a SessionWriter,
    pub(crate) emitter: &'a Emitter,
    pub(crate) cancel: &'a CancellationToken,
}

/// A run's token accounting and compaction triggers.
pub(crate) struct ContextBudget {
    ledger: Ledger,
    settings: CompactionSettings,
    model: String,
    /// The catalog's window.
    known_window: Option<u64>,
    /// A smaller window learned from an overflow.
    learned_window: Option<u64>,
    max_output: Option<u32>,
    reported_input: Option<u64>,
}

impl ContextBudget {
    /// The accounting of a run of `parts` whose requests carry `frame`.
    pub(crate) fn new(parts: &KernelParts, frame: &Frame) -> Self {
        Self {
            ledger: Ledger::new(&frame.system_prompt, &frame.tools),
            settings: parts.compaction,
            model: frame.model.clone(),
            known_window: parts.context_window,
            learned_window: None,
            max_output: match (parts.max_output_tokens, parts.output_limit) {
                (Some(asked), Some(limit)) => Some(asked.min(limit)),
                (asked, limit) => asked.or(limit),
            },
            reported_input: None,
        }
    }

    /// The window budgets are computed from: the smaller of the known and
    /// the learned one.
    fn window(&self) -> Option<u64> {
        match (self.known_window, self.learned_window) {
            (Some(known), Some(learned)) => Some(known.min(learned)),
            (known, learned) => known.or(learned),
        }
    }

    fn budget(&self) -> Option<Budget> {
        self.window()
            .map(|window| self.settings.budget(window, self.max_output))
    }

    /// The estimate of the next request.
    pub(crate) async fn estimate(&mut self, writer: &SessionWriter) -> Estimate {
        let precise_from = self.budget().map(|budget| budget.threshold / 2);
        self.estimate_with(writer, precise_from).await
    }

    /// The estimate of the next request, with o200k counts from an upper
    /// bound of `precise_from` tokens on (`Some(0)`: always).
    async fn estimate_with(
        &mut self,
        writer: &SessionWriter,
        precise_from: Option<u64>,
    ) -> Estimate {
        let (ledger, model) = (&mut self.ledger, self.model.as_str());
        writer
            .with_branch(|branch| {
                let (checkpoint, entries) = context::visible(branch);
                let summary = checkpoint.and_then(|entry| {
                    context::summary_of(entry).map(|summary| (entry.id.as_str(), summary))
                });
                ledger.estimate(model, summary, entries, precise_from)
            })
            .await
    }

    /// Learns from a response to the request `estimate` estimated.
    pub(crate) fn observe(&mut self, estimate: &Estimate, usage: &Usage) {
        self.ledger.calibrate(&self.model, estimate, usage);
        let reported = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
        self.reported_input = (reported > 0).then_some(reported);
    }

    /// How full the context is, for `turn_end`.
    pub(crate) async fn usage(&mut self, writer: &SessionWriter) -> ContextUsage {
        let estimate = self.estimate(writer).await;
        ContextUsage {
            estimated_tokens: estimate.tokens,
            window: self.window(),
            reported_input_tokens: self.reported_input,
        }
    }

    /// Compacts when the next request would pass the window minus the
    /// reserve (and automatic compaction is on and the window known).
    pub(crate) async fn make_room(&mut self, seams: &Seams<'_>) -> Result<(), Interrupted> {
        let Some(budget) = self.budget().filter(|_| self.settings.enabled) else {
            return Ok(());
        };
        let estimate = self.estimate(seams.writer).await;
        if estimate.tokens <= budget.threshold {
            return Ok(());
        }
        self.compact(seams, CompactionTrigger::Threshold, None)
            .await
            .map(|_| ())
    }

    /// The provider refused the request `failed` estimated as too long,
    /// saying `message`: the window is what the message states, else at
    /// most nine tenths of the estimate, from now on; when the message
    /// states the request's size, the estimates are calibrated by it. Then
    /// the context is compacted to fit.
    pub(crate) async fn after_overflow(
        &mut self,
        seams: &Seams<'_>,
        failed: &Estimate,
        message: &str,
    ) -> Result<Compacted, Interrupted> {
        let stated = keel_provider::errors::overflow_sizes(message);
        if let Some(requested) = stated.requested {
            self.ledger.calibrate_to(&self.model, failed, requested);
            let precise = self.estimate_with(seams.writer, Some(0)).await;
            self.ledger.calibrate_to(&self.model, &precise, requested);
        }
        let learned = stated
            .limit
            .unwrap_or_else(|| failed.tokens * 9 / 10)
            .max(1);
        self.learned_window = Some(self.learned_window.map_or(learned, |old| old.min(learned)));
        self.compact(seams, CompactionTrigger::Overflow, None).await
    }

    /// Writes a checkpoint now, reporting it with compaction events.
    pub(crate) async fn compact(
        &mut self,
        seams: &Seams<'_>,
        trigger: CompactionTrigger,
        instructions: Option<&str>,
    ) -> Result<Compacted, Interrupted> {
        let before = self.estimate(seams.writer).await;
        seams.emitter.emit(RunEventKind::CompactionStarted {
            reason: trigger,
            tokens_before: before.tokens,
            window: self.window(),
        });
        let outcome = self
            .write_checkpoint(seams, trigger, instructions, &before)
            .await;
        match &outcome {
            Ok(done) => seams.emitter.emit(RunEventKind::CompactionSucceeded {
                reason: trigger,
                entry_id: done.entry_id.clone(),
                tokens_before: done.tokens_before,
                tokens_after: done.tokens_after,
                covered_entries: done.covered_entries,
            }),
            Err(Interrupted::Failed(error)) => seams.emitter.emit(RunEventKind::CompactionFailed {
                reason: trigger,
                error: error.clone(),
            }),
            Err(Interrupted::Cancelled) => seams.emitter.emit(RunEventKind::CompactionFailed {
                reason: trigger,
                error: failure("the run was cancelled while the summary was being written"),
            }),
        }
        outcome
    }

    async fn write_checkpoint(
        &mut self,
        seams: &Seams<'_>,
        trigger: CompactionTrigger,
        instructions: Option<&str>,
        before: &Estimate,
    ) -> Result<Compacted, Interrupted> {
        let window = self.window();
        let budget = self
            .settings
            .budget(window.unwrap_or(ASSUMED_WINDOW), self.max_output);
        let ratio = self.ledger.ratio(&self.model, Method::O200k);
        let scaled = |tokens: u64| (tokens as f64 * ratio).ceil() as u64;
        let ledger = &mut self.ledger;
        let plan = seams
            .writer
            .with_branch(|branch| {
                checkpoint::plan(branch, budget.keep_recent, |entry| {
                    scaled(ledger.entry_tokens(entry))
                })
            })
            .await
            .ok_or_else(|| {
                Interrupted::Failed(failure(
                    "nothing to compact: the context holds no message to summarise",
                ))
            })?;
        let evidence = checkpoint::evidence(&plan.covered);
        let previous_tokens = plan.previous.as_ref().map_or(0, |(_, summary)| {
            scaled(crate::tokens::count_tokens(summary))
        });
        let evidence_tokens = scaled(crate::tokens::count_tokens(&checkpoint::summary_input(
            None,
            &[],
            &evidence,
            instructions,
        )));
        let chunk_budget = budget
            .summary_input
            .saturating_sub(previous_tokens.max(budget.summary_output) + evidence_tokens)
            .max(budget.summary_input / 4);
        let chunks = checkpoint::chunks(
            checkpoint::transcript(&plan.covered),
            chunk_budget,
            |item| scaled(crate::tokens::count_tokens(item)),
        );
        let mut summary = plan.previous.as_ref().map(|(_, summary)| summary.clone());
        let mut usage = Usage::default();
        let output = u32::try_from(budget.summary_output).unwrap_or(u32::MAX);
        for chunk in &chunks {
            let input =
                checkpoint::summary_input(summary.as_deref(), chunk, &evidence, instructions);
            let message = summarise(seams, seams.frame.summary_request(input, output)).await?;
            add_usage(&mut usage, &message.usage);
            summary = Some(message.text());
        }
        let summary = checkpoint::check_summary(summary.as_deref().unwrap_or_default()).map_err(
            |reason| Interrupted::Failed(failure(format!("the summary is unusable: {reason}"))),
        )?;
        let id = new_id();
        let first_kept = plan.first_kept.clone().unwrap_or_else(|| id.clone());
        let after = self
            .estimate_after(seams.writer, &id, &summary, plan.first_kept.as_deref())
            .await;
        let metrics = CheckpointMetrics {
            trigger,
            tokens_before: before.tokens,
            tokens_after: after,
            window,
            provider: seams.frame.provider.clone(),
            model: seams.frame.model.clone(),
            covered_entries: plan.covered.len(),
            kept_entries: plan.kept,
            summary_requests: u32::try_from(chunks.len()).unwrap_or(u32::MAX),
            summary_usage: usage,
        };
        let payload = EntryPayload::Checkpoint {
            summary,
            first_kept_entry_id: first_kept,
            covered_entry_ids: plan.covered.iter().map(|entry| entry.id.clone()).collect(),
            previous_checkpoint_id: plan.previous.map(|(id, _)| id),
            evidence: Some(Box::new(evidence)),
            metrics: Some(Box::new(metrics)),
        };
        seams
            .writer
            .append_identified(seams.emitter, vec![(id.clone(), payload)])
            .await
            .map_err(|error| {
                Interrupted::Failed(RunError::new(
                    ErrorSource::Kernel,
                    RunErrorCode::SessionStore,
                    error.to_string(),
                ))
            })?;
        self.ledger.forget_entries();
        Ok(Compacted {
            entry_id: id,
            tokens_before: before.tokens,
            tokens_after: after,
            covered_entries: plan.covered.len(),
        })
    }

    /// The estimate of the context a checkpoint `id` with `summary` would
    /// leave: the summary, then the branch from `first_kept` (nothing when `None`).
    async fn estimate_after(
        &mut self,
        writer: &SessionWriter,
        id: &str,
        summary: &str,
        first_kept: Option<&str>,
    ) -> u64 {
        let precise_from = Some(0);
        let (ledger, model) = (&mut self.ledger, self.model.as_str());
        writer
            .with_branch(|branch| {
                let start = first_kept
                    .and_then(|kept| branch.iter().position(|entry| entry.id == kept))
                    .unwrap_or(branch.len());
                let kept: &[Entry] = branch.get(start..).unwrap_or_default();
                ledger
                    .estimate(model, Some((id, summary)), kept, precise_from)
                    .tokens
            })
            .await
    }
}

/// A `compaction_failed` error with `reason`.
fn failure(reason: impl Into<String>) -> RunError {
    RunError::new(
        ErrorSource::Kernel,
        RunErrorCode::CompactionFailed,
        format!("compaction failed: {}", reason.into()),
    )
}

fn add_usage(total: &mut Usage, more: &Usage) {
    total.input_tokens += more.input_tokens;
    total.output_tokens += more.output_tokens;
    total.cache_read_tokens += more.cache_read_tokens;
    total.cache_write_tokens += more.cache_write_tokens;
}

/// Sends one summary request, retrying retryable errors by the run's
/// policy; its events are not the conversation's and are not emitted.
async fn summarise(
    seams: &Seams<'_>,
    request: ModelRequest,
) -> Result<AssistantMessage, Interrupted> {
    let mut attempts = seams.parts.retry.start();
    loop {
        let stream = seams
            .parts
            .provider
            .stream(request.clone(), seams.cancel.child_token());
        let mut stream = attempts.bound(stream);
        let mut accumulator = Accumulator::for_provider(&seams.frame.provider);
        let mut outcome = Err(ProviderError::new(
            ProviderErrorKind::StreamDropped,
            "the provider stream ended before `done`",
        ));
        while let Some(event) = stream.next().await {
            match accumulator.apply(&event) {
                Ok(Some(Finished::Message(message))) => {
                    outcome = Ok(message);
                    break;
                }
                Ok(Some(Finished::Error(error))) | Err(error) => {
                    outcome = Err(error);
                    break;
                }
                Ok(None) => {}
            }
        }
        let error = match outcome {
            Ok(message) if message.tool_calls().next().is_some() => {
                return Err(Interrupted::Failed(failure(
                    "the model called a tool instead of writing the summary",
                )));
            }
            Ok(message) => return Ok(message),
            Err(error) => error,
        };
        if seams.cancel.is_cancelled() || error.kind == ProviderErrorKind::Cancelled {
            return Err(Interrupted::Cancelled);
        }
        let Some(retry) = attempts.after_failure(&error) else {
            let what = if error.kind == ProviderErrorKind::ContextOverflow {
                "the summary request itself is larger than the model's context window"
            } else {
                "the summary request failed"
            };
            return Err(Interrupted::Failed(failure(format!(
                "{what}: {}: {}",
                error.kind.code(),
                error.message
            ))));
        };
        seams.emitter.emit(RunEventKind::ProviderRetry {
            attempt: retry.attempt,
            max_attempts: retry.max_attempts,
            delay_ms: u64::try_from(retry.delay.as_millis()).unwrap_or(u64::MAX),
            error,
        });
        tokio::select! {
            () = seams.cancel.cancelled() => return Err(Interrupted::Cancelled),
            () = tokio::time::sleep(retry.delay) => {}
        }
    }
}
