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
//! the checkpoint appended at the leaf; `compaction_succeeded`.
//!
//! The summary's checks:
//! - an answer without Keel's eight headings gets one corrective request
//!   per compaction, carrying the validation error; a non-empty answer that
//!   still lacks them is kept as free text (the headings guide, they do not
//!   gate);
//! - an empty summary, one that mostly repeats Keel's summary instructions
//!   (`checkpoint::check_not_echo`), and one that does not make the
//!   context smaller (the o200k estimate after is not below the one
//!   before) are rejected.
//!
//! Any failure writes nothing, emits `compaction_failed` with the reason,
//! and returns a typed `compaction_failed` error. What that error does
//! depends on the trigger: a failed *threshold* compaction does not end a
//! run whose context still fits its window — the run goes on and the next
//! threshold compaction waits (see [`Backoff`]); one whose context no
//! longer fits, an overflow's and a manual one are returned to the caller
//! (the run ends with it). Compaction never loops.

use futures::StreamExt;
use keel_protocol::{
    AssistantMessage, CheckpointMetrics, CompactionTrigger, ContextUsage, EntryPayload,
    ErrorSource, HookPoint, ProviderError, ProviderErrorKind, RunError, RunErrorCode, RunEventKind,
    Usage,
};
use keel_provider::ModelRequest;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::accumulator::{Accumulator, Finished};
use crate::checkpoint::{self, Budget, CompactionSettings};
use crate::context::{self, BranchEntry};
use crate::emitter::Emitter;
use crate::hooks::HookScope;
use crate::ids::new_id;
use crate::parts::KernelParts;
use crate::pipeline::Frame;
use crate::session_writer::SessionWriter;
use crate::tokens::{Estimate, Ledger, Method};
use crate::trace::wire_name;

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
    /// Requests `make_room` was asked about (one per turn).
    requests: u64,
    /// When the last threshold compaction failed: when to try again.
    backoff: Option<Backoff>,
}

/// Failed threshold compactions in a row, and when the next may start.
///
/// After the n-th failure in a row, the next threshold compaction waits
/// for 2ⁿ more requests (2, 4, 8, …, at most [`MAX_BACKOFF_REQUESTS`]), or
/// until the context has grown by half the room the window had left at the
/// failure, whichever comes first. A context that no longer fits the window
/// is compacted at once, whatever the backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backoff {
    failures: u32,
    /// The request count from which the next attempt may start.
    not_before: u64,
    /// The estimate from which it may start sooner.
    unless_above: u64,
}

/// The longest wait, in requests, between threshold compaction attempts.
const MAX_BACKOFF_REQUESTS: u64 = 64;

impl Backoff {
    /// The backoff after a failure at `requests` with the context at
    /// `tokens` of `window`, following `previous`.
    fn after(previous: Option<Backoff>, requests: u64, tokens: u64, window: u64) -> Self {
        let failures = previous
            .map_or(0, |backoff| backoff.failures)
            .saturating_add(1);
        let wait = 1u64
            .checked_shl(failures)
            .unwrap_or(MAX_BACKOFF_REQUESTS)
            .min(MAX_BACKOFF_REQUESTS);
        Self {
            failures,
            not_before: requests.saturating_add(wait),
            unless_above: tokens + window.saturating_sub(tokens) / 2,
        }
    }

    /// Whether a threshold compaction should wait at `requests` with the
    /// context at `tokens`.
    fn waits(&self, requests: u64, tokens: u64) -> bool {
        requests < self.not_before && tokens < self.unless_above
    }
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
            requests: 0,
            backoff: None,
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
        ContextUsage::new(estimate.tokens, self.window(), self.reported_input)
    }

    /// Compacts when the next request would pass the window minus the
    /// reserve (and automatic compaction is on and the window known).
    ///
    /// A failed compaction (reported by `compaction_failed`) is not the
    /// run's end while the context still fits the window: the next
    /// attempt waits (see [`Backoff`]). Once the context no longer fits,
    /// compaction is tried whatever the backoff, and its failure is
    /// returned: the request could not be sent.
    pub(crate) async fn make_room(&mut self, seams: &Seams<'_>) -> Result<(), Interrupted> {
        self.requests += 1;
        let Some((budget, window)) = self
            .window()
            .map(|window| (self.settings.budget(window, self.max_output), window))
            .filter(|_| self.settings.enabled)
        else {
            return Ok(());
        };
        let estimate = self.estimate(seams.writer).await;
        if estimate.tokens <= budget.threshold {
            return Ok(());
        }
        let fits = estimate.tokens <= window;
        if fits
            && self
                .backoff
                .is_some_and(|backoff| backoff.waits(self.requests, estimate.tokens))
        {
            tracing::debug!(
                tokens = estimate.tokens,
                "threshold compaction waits after a failure"
            );
            return Ok(());
        }
        let error = match self
            .compact(seams, CompactionTrigger::Threshold, None)
            .await
        {
            Ok(_) => return Ok(()),
            Err(Interrupted::Failed(error)) if error.code == RunErrorCode::CompactionFailed => {
                error
            }
            Err(other) => return Err(other),
        };
        if !fits {
            return Err(Interrupted::Failed(RunError::new(
                ErrorSource::Kernel,
                RunErrorCode::CompactionFailed,
                format!(
                    "{}; the context (~{} tokens) does not fit the model's window of {window} \
                     tokens, so the run cannot go on",
                    error.message, estimate.tokens
                ),
            )));
        }
        let backoff = Backoff::after(self.backoff, self.requests, estimate.tokens, window);
        tracing::warn!(
            error = %error.message,
            failures = backoff.failures,
            next_request = backoff.not_before,
            "a threshold compaction failed; the context still fits, so the run goes on"
        );
        self.backoff = Some(backoff);
        Ok(())
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
        let span = tracing::info_span!(
            "keel.compaction",
            otel.name = "compaction",
            keel.compaction.trigger = wire_name(&trigger).as_str(),
            keel.compaction.tokens_before = before.tokens,
            keel.compaction.tokens_after = tracing::field::Empty,
            keel.entry.id = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let supplemented = hook_compaction(seams, trigger, before.tokens, instructions).await;
        let instructions = supplemented.as_deref().or(instructions);
        let outcome = self
            .write_checkpoint(seams, trigger, instructions)
            .instrument(span.clone())
            .await;
        match &outcome {
            Ok(done) => {
                span.record("keel.compaction.tokens_after", done.tokens_after);
                span.record("keel.entry.id", done.entry_id.as_str());
            }
            Err(Interrupted::Failed(error)) => {
                span.record("error.type", error.code.as_str());
                span.record("otel.status_code", "ERROR");
            }
            Err(Interrupted::Cancelled) => {
                span.record("error.type", "cancelled");
            }
        }
        if outcome.is_ok() {
            self.backoff = None;
        }
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
        let mut requests = 0u32;
        let mut corrected = false;
        for chunk in &chunks {
            let input =
                checkpoint::summary_input(summary.as_deref(), chunk, &evidence, instructions);
            let message =
                summarise(seams, seams.frame.summary_request(input.clone(), output)).await?;
            add_usage(&mut usage, &message.usage);
            requests += 1;
            let mut text = message.text();
            if let Err(reason) = checkpoint::check_headings(&text)
                && !corrected
            {
                // One corrective request per compaction, with what was wrong.
                corrected = true;
                tracing::info!(%reason, "the summary lacks Keel's headings; asking once more");
                let retry = format!("{input}{}", checkpoint::correction(&reason));
                requests += 1;
                match summarise(seams, seams.frame.summary_request(retry, output)).await {
                    Ok(message) => {
                        add_usage(&mut usage, &message.usage);
                        let again = message.text();
                        if !again.trim().is_empty() {
                            text = again;
                        }
                    }
                    // The first answer stands when there is one.
                    Err(Interrupted::Failed(error)) if !text.trim().is_empty() => {
                        tracing::warn!(error = %error.message, "the corrective summary request failed");
                    }
                    Err(interrupted) => return Err(interrupted),
                }
            }
            summary = Some(text);
        }
        let summary = summary.unwrap_or_default().trim().to_owned();
        let unusable = |reason: String| {
            Interrupted::Failed(failure(format!("the summary is unusable: {reason}")))
        };
        if summary.is_empty() {
            return Err(unusable("the summary is empty".into()));
        }
        checkpoint::check_not_echo(&summary).map_err(unusable)?;
        if let Err(reason) = checkpoint::check_headings(&summary) {
            tracing::info!(%reason, "the summary is kept as free text");
        }
        let id = new_id();
        let first_kept = plan.first_kept.clone().unwrap_or_else(|| id.clone());
        // Before and after counted alike (o200k, the same calibration): a
        // summary that does not make the context smaller is refused.
        let tokens_before = self.estimate_with(seams.writer, Some(0)).await.tokens;
        let after = self
            .estimate_after(seams.writer, &id, &summary, plan.first_kept.as_deref())
            .await;
        if after >= tokens_before {
            let summary_tokens = scaled(crate::tokens::count_tokens(&summary));
            let ledger = &mut self.ledger;
            let replaced = previous_tokens
                + plan
                    .covered
                    .iter()
                    .map(|entry| scaled(ledger.entry_tokens(entry)))
                    .sum::<u64>();
            return Err(Interrupted::Failed(failure(format!(
                "the summary does not shrink the context (~{tokens_before} tokens before, \
                 ~{after} after): it has ~{summary_tokens} tokens in place of the ~{replaced} \
                 it would replace"
            ))));
        }
        let metrics = {
            let mut checkpoint_metrics = CheckpointMetrics::new(
                trigger,
                seams.frame.provider.clone(),
                seams.frame.model.clone(),
            );
            checkpoint_metrics.tokens_before = tokens_before;
            checkpoint_metrics.tokens_after = after;
            checkpoint_metrics.window = window;
            checkpoint_metrics.covered_entries = plan.covered.len();
            checkpoint_metrics.kept_entries = plan.kept;
            checkpoint_metrics.summary_requests = requests;
            checkpoint_metrics.summary_usage = usage;
            checkpoint_metrics
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
            tokens_before,
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
                let kept: &[BranchEntry] = branch.get(start..).unwrap_or_default();
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
            // Says why a retryable failure was not retried (a wait past
            // the longest allowed), as the turn loop does.
            let error = attempts.give_up(error);
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

/// The `compaction` hooks before a summary is written: supplements are
/// added to the summary's instructions (the combined text, or `None` when
/// no handler supplemented). Entries handlers gave are appended first.
async fn hook_compaction(
    seams: &Seams<'_>,
    trigger: CompactionTrigger,
    tokens_before: u64,
    instructions: Option<&str>,
) -> Option<String> {
    if !seams.parts.hooks.handles(HookPoint::Compaction) {
        return None;
    }
    let entries = std::sync::Mutex::default();
    let hooks = HookScope {
        hooks: &seams.parts.hooks,
        emitter: seams.emitter,
        cancel: seams.cancel,
        run_id: seams.emitter.run_id(),
        session_id: seams.emitter.session_id(),
        entries: &entries,
    };
    let payload = serde_json::json!({
        "trigger": trigger,
        "tokens_before": tokens_before,
        "instructions": instructions,
    });
    let dispatched = hooks
        .dispatch(HookPoint::Compaction, None, payload, None)
        .await;
    let held = hooks.take_entries();
    if !held.is_empty()
        && let Err(error) = seams.writer.append(seams.emitter, held).await
    {
        // The compaction goes on; what it writes next reports a store
        // that stays broken.
        tracing::warn!(%error, "the compaction hooks' entries could not be recorded");
    }
    if dispatched.supplements.is_empty() {
        return None;
    }
    let mut combined = instructions.map(str::to_owned).unwrap_or_default();
    for (extension, text) in dispatched.supplements {
        if !combined.is_empty() {
            combined.push_str("\n\n");
        }
        combined.push_str(&format!("[from extension {extension}]\n{text}"));
    }
    Some(combined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_cap_and_yields_to_growth() {
        // A first failure at request 10, 6,000 of 8,000 tokens: wait two
        // requests, or until the context passes 7,000 tokens.
        let first = Backoff::after(None, 10, 6_000, 8_000);
        assert_eq!(
            (first.failures, first.not_before, first.unless_above),
            (1, 12, 7_000)
        );
        assert!(first.waits(11, 6_500));
        assert!(!first.waits(12, 6_500));
        assert!(!first.waits(11, 7_000));
        // The next failure doubles the wait and halves the room again.
        let second = Backoff::after(Some(first), 12, 7_000, 8_000);
        assert_eq!(
            (second.failures, second.not_before, second.unless_above),
            (2, 16, 7_500)
        );
        let mut backoff = second;
        for _ in 0..100 {
            backoff = Backoff::after(Some(backoff), 0, 0, 8_000);
        }
        assert_eq!(backoff.not_before, MAX_BACKOFF_REQUESTS);
        // A context past the window never waits on growth.
        let over = Backoff::after(None, 0, 9_000, 8_000);
        assert!(!over.waits(0, 9_000));
    }
}
