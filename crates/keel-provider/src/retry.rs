//! How a failed provider request is retried: which failures, how often,
//! after what delay, and how long a server may make Keel wait.
//!
//! Why here: the adapters classify failures and attach their hints
//! (`retry_after_ms`, `max_retries`); the rules that read those hints sit
//! next to them, so every host retries the same way. The host owns the
//! loop — it sends the request again, persists, emits `provider_retry` with
//! each failure as its reason and each wait as its delay — and asks this
//! module what to do:
//!
//! ```text
//! let mut attempts = policy.start();
//! loop {
//!     let stream = attempts.bound(provider.stream(request, cancel));
//!     … consume it; on `done`, stop …
//!     match attempts.after_failure(&error) {
//!         Some(retry) => { report retry and error; sleep retry.delay }
//!         None => fail with attempts.give_up(error),
//!     }
//! }
//! ```
//!
//! What bounds time: an attempt is bounded by the provider's progress
//! timeouts (for HTTP providers: connecting, the first model output, and
//! each gap between outputs — `http::HttpTimeouts`), never by its length,
//! so a long answer that keeps streaming is never cut. The retry budget
//! bounds only the waits *between* attempts, and `max_wait` each single
//! wait a server asks for.
//!
//! Delays are jittered: each backoff is drawn from `[backoff × (1 −
//! jitter), backoff]` (AWS's "equal jitter" at the default 50 %), so many
//! clients failing together do not retry together. Jitter only shortens a
//! backoff — never below a server's `retry_after`, never above `max_delay`.
//! The random draws come from a small generator seeded per request; tests
//! seed it ([`RetryPolicy::start_seeded`]) and set `jitter_percent: 0` for
//! exact delays.
//!
//! Invariants: a failure is retried only when its kind is retryable, the
//! policy's attempts are not spent, its own `max_retries` is not spent, the
//! wait the server asks for (`Retry-After`) is at most `max_wait`, and the
//! waits so far plus this one stay within the budget. A server's wait is
//! honoured in full, never shortened: a wait longer than `max_wait` is not
//! waited at all, and the failure becomes final as `rate_limited`, naming
//! the wait asked for ([`Attempts::give_up`]).

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use futures::StreamExt;
use keel_protocol::{ProviderError, ProviderErrorKind, ProviderEvent};
use tokio::time::Instant;

use crate::ProviderStream;

/// How retryable provider errors are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in total, the first included (1 disables retries);
    /// `max_retries` in `config.toml` is this minus one.
    pub max_attempts: u32,
    /// Delay after the first failure; doubles after each further failure.
    pub base_delay: Duration,
    /// Upper bound on a backoff the policy chooses itself (a server's
    /// `retry_after` is bounded by `max_wait` instead).
    pub max_delay: Duration,
    /// The longest wait a server may ask for with `Retry-After`
    /// (`max_retry_wait_sec` in `config.toml`); a longer one is not waited
    /// and the failure is final.
    pub max_wait: Duration,
    /// The most time the waits between the attempts of one request may
    /// take together. The attempts themselves do not count: they are
    /// bounded by the provider's progress timeouts.
    pub budget: Duration,
    /// How much of each backoff is random, in percent (0: none, 100: "full
    /// jitter"); values above 100 count as 100.
    pub jitter_percent: u8,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: crate::config::DEFAULT_MAX_RETRIES + 1,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(60),
            max_wait: crate::config::DEFAULT_MAX_RETRY_WAIT,
            budget: Duration::from_secs(900),
            jitter_percent: 50,
        }
    }
}

impl RetryPolicy {
    /// The longest delay after failed attempt `attempt` (1-based): the
    /// unjittered backoff (capped at `max_delay`), or a server-requested
    /// `retry_after` when it is longer.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        self.jittered_delay(attempt, retry_after, 0.0)
    }

    /// The delay after failed attempt `attempt` for a random draw `unit` in
    /// `[0, 1)` (clamped): the backoff shortened by `unit × jitter`, then
    /// raised to `retry_after` as in [`RetryPolicy::delay`].
    pub fn jittered_delay(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        unit: f64,
    ) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        let backoff = self.base_delay.saturating_mul(factor).min(self.max_delay);
        let share = f64::from(self.jitter_percent.min(100)) / 100.0 * unit.clamp(0.0, 1.0);
        let jittered = backoff.saturating_sub(backoff.mul_f64(share));
        jittered.max(retry_after.unwrap_or_default())
    }

    /// The attempts `error` allows in total: the policy's, or fewer when
    /// the error limits its own retries.
    pub fn attempts_for(&self, error: &ProviderError) -> u32 {
        let own = error
            .max_retries
            .map_or(u32::MAX, |retries| retries.saturating_add(1));
        self.max_attempts.max(1).min(own)
    }

    /// Starts the attempts of one request; the jitter's generator is
    /// seeded at random.
    pub fn start(&self) -> Attempts {
        self.start_seeded(RandomState::new().hash_one(Instant::now()))
    }

    /// [`RetryPolicy::start`] with the jitter's generator seeded by `seed`:
    /// the same seed gives the same delays.
    pub fn start_seeded(&self, seed: u64) -> Attempts {
        Attempts {
            policy: *self,
            waited: Duration::ZERO,
            attempt: 1,
            random: SplitMix64(seed),
            refused: None,
        }
    }
}

/// SplitMix64: a tiny, well-mixed generator; plenty for spreading delays
/// (nothing here needs unpredictability).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    /// The next draw, uniform in `[0, 1)`.
    fn next_unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // The top 53 bits, as a fraction of 2^53: exact in an f64.
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Why a retryable failure was not retried, for [`Attempts::give_up`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The server asked for a longer wait than `max_wait`.
    WaitTooLong(Duration),
    /// The wait would have taken the waits past the budget.
    OverBudget(Duration),
}

/// The attempts of one request, as they happen.
#[derive(Debug, Clone)]
pub struct Attempts {
    policy: RetryPolicy,
    /// The waits so far, together.
    waited: Duration,
    attempt: u32,
    random: SplitMix64,
    refused: Option<Refusal>,
}

/// A retry the policy allows after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retry {
    /// The attempt that failed (1-based).
    pub attempt: u32,
    /// The attempts this failure allows in total.
    pub max_attempts: u32,
    /// How long to wait before the next attempt.
    pub delay: Duration,
}

impl Attempts {
    /// The attempt in flight (1-based).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The waits between attempts so far, together.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// `stream` as one attempt: its events up to and including the first
    /// `done` or `error` (anything after is dropped, which abandons the
    /// request), and a `stream_dropped` error when it ends without either.
    ///
    /// Time is not bounded here: the provider's own progress timeouts end
    /// an attempt that stops making progress (see the module docs), and one
    /// that keeps making progress may take as long as the answer takes.
    pub fn bound(&self, stream: ProviderStream) -> ProviderStream {
        futures::stream::unfold(Some(stream), |state| async move {
            let mut stream = state?;
            match stream.next().await {
                Some(event) => {
                    let terminal = matches!(
                        event,
                        ProviderEvent::Done { .. } | ProviderEvent::Error { .. }
                    );
                    Some((event, (!terminal).then_some(stream)))
                }
                None => Some((
                    ProviderEvent::Error {
                        error: ProviderError::new(
                            ProviderErrorKind::StreamDropped,
                            "the provider stream ended before `done`",
                        ),
                    },
                    None,
                )),
            }
        })
        .boxed()
    }

    /// What to do after the attempt in flight failed with `error`: the
    /// retry, or `None` to give up (then report [`Attempts::give_up`]).
    pub fn after_failure(&mut self, error: &ProviderError) -> Option<Retry> {
        self.refused = None;
        if !error.is_retryable() {
            return None;
        }
        let max_attempts = self.policy.attempts_for(error);
        if self.attempt >= max_attempts {
            return None;
        }
        let retry_after = error.retry_after_ms.map(Duration::from_millis);
        if let Some(asked) = retry_after.filter(|asked| *asked > self.policy.max_wait) {
            self.refused = Some(Refusal::WaitTooLong(asked));
            return None;
        }
        let delay = self
            .policy
            .jittered_delay(self.attempt, retry_after, self.random.next_unit());
        let waited = self.waited.saturating_add(delay);
        if waited > self.policy.budget {
            self.refused = Some(Refusal::OverBudget(delay));
            return None;
        }
        let retry = Retry {
            attempt: self.attempt,
            max_attempts,
            delay,
        };
        self.waited = waited;
        self.attempt += 1;
        Some(retry)
    }

    /// The final error after [`Attempts::after_failure`] refused to retry
    /// `error`: `error` itself, or, when the server asked for a longer wait
    /// than the policy allows, a `rate_limited` error naming the wait asked
    /// for and the limit (and likewise naming the budget a wait would pass).
    pub fn give_up(&self, error: ProviderError) -> ProviderError {
        match self.refused {
            None => error,
            Some(Refusal::WaitTooLong(asked)) => {
                let mut given_up = error;
                given_up.kind = ProviderErrorKind::RateLimited;
                given_up.message = format!(
                    "{} (the provider asked to wait {} before retrying, longer than the \
                     longest wait allowed, {}: raise max_retry_wait_sec to wait that long)",
                    given_up.message,
                    shown(asked),
                    shown(self.policy.max_wait)
                );
                given_up
            }
            Some(Refusal::OverBudget(delay)) => {
                let mut given_up = error;
                given_up.message = format!(
                    "{} (not retried: a wait of {} would take the waits past the retry \
                     budget of {})",
                    given_up.message,
                    shown(delay),
                    shown(self.policy.budget)
                );
                given_up
            }
        }
    }
}

/// A duration as people read it in an error: `120 s`, `0.3 s`.
fn shown(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(kind: ProviderErrorKind) -> ProviderError {
        ProviderError::new(kind, "x")
    }

    /// The default policy without jitter: exact delays.
    fn exact() -> RetryPolicy {
        RetryPolicy {
            jitter_percent: 0,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn doubles_and_honours_retry_after_in_full() {
        let policy = exact();
        assert_eq!(policy.delay(1, None), Duration::from_secs(2));
        assert_eq!(policy.delay(3, None), Duration::from_secs(8));
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(policy.delay(30, None), Duration::from_secs(60));
        // A server's wait is not cut to the backoff's cap.
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(120))),
            Duration::from_secs(120)
        );
    }

    #[test]
    fn a_wait_longer_than_max_wait_is_final_and_named() {
        let policy = exact();
        let asked = |seconds: u64| {
            let mut provider_error = error(ProviderErrorKind::Overloaded);
            provider_error.retry_after_ms = Some(seconds * 1000);
            provider_error
        };
        let mut attempts = policy.start();
        let retry = attempts.after_failure(&asked(120)).unwrap();
        assert_eq!(retry.delay, Duration::from_secs(120));
        assert_eq!(attempts.give_up(asked(120)), asked(120), "nothing refused");
        let retry = attempts.after_failure(&asked(300)).unwrap();
        assert_eq!(retry.delay, Duration::from_secs(300), "the limit itself");
        assert_eq!(attempts.after_failure(&asked(301)), None);
        let final_error = attempts.give_up(asked(301));
        assert_eq!(final_error.kind, ProviderErrorKind::RateLimited);
        assert_eq!(
            final_error.message,
            "x (the provider asked to wait 301 s before retrying, longer than the longest \
             wait allowed, 300 s: raise max_retry_wait_sec to wait that long)"
        );
        assert_eq!(attempts.attempt(), 3);
        assert_eq!(attempts.waited(), Duration::from_secs(420));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_at_the_attempts_the_error_allows() {
        let policy = exact();
        let overloaded = error(ProviderErrorKind::Overloaded);
        let mut attempts = policy.start();
        let delays: Vec<Duration> = std::iter::from_fn(|| attempts.after_failure(&overloaded))
            .map(|retry| retry.delay)
            .collect();
        assert_eq!(delays, [2, 4, 8].map(Duration::from_secs));
        assert_eq!(attempts.attempt(), 4);

        let refused = error(ProviderErrorKind::StreamDropped).with_max_retries(1);
        let mut attempts = policy.start();
        assert_eq!(
            attempts.after_failure(&refused),
            Some(Retry {
                attempt: 1,
                max_attempts: 2,
                delay: Duration::from_secs(2)
            })
        );
        assert_eq!(attempts.after_failure(&refused), None);
        let never = error(ProviderErrorKind::StreamDropped).with_max_retries(0);
        assert_eq!(policy.start().after_failure(&never), None);
        assert_eq!(
            policy
                .start()
                .after_failure(&error(ProviderErrorKind::Auth)),
            None
        );
    }

    #[test]
    fn the_budget_bounds_the_waits_together() {
        let policy = RetryPolicy {
            budget: Duration::from_secs(10),
            ..exact()
        };
        let timeout = error(ProviderErrorKind::Timeout);
        let mut attempts = policy.start();
        assert!(attempts.after_failure(&timeout).is_some());
        assert!(attempts.after_failure(&timeout).is_some());
        assert_eq!(attempts.waited(), Duration::from_secs(6));
        // An 8 s wait would take the waits to 14 s.
        assert_eq!(attempts.after_failure(&timeout), None);
        assert_eq!(
            attempts.give_up(timeout).message,
            "x (not retried: a wait of 8 s would take the waits past the retry budget of 10 s)"
        );
    }

    #[test]
    fn jitter_shortens_the_backoff_within_its_share() {
        let policy = RetryPolicy::default();
        // The draw's two ends: the whole backoff, and half of it (50 %).
        assert_eq!(policy.jittered_delay(2, None, 0.0), Duration::from_secs(4));
        assert_eq!(policy.jittered_delay(2, None, 1.0), Duration::from_secs(2));
        assert_eq!(
            policy.jittered_delay(2, None, 0.25),
            Duration::from_secs(3) + Duration::from_millis(500)
        );
        // Never below a server's retry-after, never above the cap.
        assert_eq!(
            policy.jittered_delay(1, Some(Duration::from_secs(5)), 0.9),
            Duration::from_secs(5)
        );
        assert_eq!(
            policy.jittered_delay(30, None, 0.0),
            Duration::from_secs(60)
        );
        assert_eq!(
            policy.jittered_delay(30, None, 1.0),
            Duration::from_secs(30)
        );
        let full = RetryPolicy {
            jitter_percent: 200,
            ..RetryPolicy::default()
        };
        assert_eq!(
            full.jittered_delay(1, None, 2.0),
            Duration::ZERO,
            "clamped to 100 %"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn seeded_attempts_repeat_their_delays_and_spread_across_seeds() {
        let policy = RetryPolicy {
            max_attempts: 5,
            budget: Duration::from_secs(1000),
            ..RetryPolicy::default()
        };
        let overloaded = error(ProviderErrorKind::Overloaded);
        let delays = |seed: u64| -> Vec<Duration> {
            let mut attempts = policy.start_seeded(seed);
            std::iter::from_fn(|| attempts.after_failure(&overloaded))
                .map(|retry| retry.delay)
                .collect()
        };
        let first = delays(7);
        assert_eq!(first, delays(7), "the same seed, the same delays");
        assert_eq!(first.len(), 4);
        let mut distinct = std::collections::BTreeSet::new();
        for seed in 0..64 {
            for (index, delay) in delays(seed).into_iter().enumerate() {
                let backoff = Duration::from_secs(2 << index);
                assert!(
                    delay <= backoff && delay >= backoff / 2,
                    "seed {seed}, retry {index}: {delay:?} outside [{:?}, {backoff:?}]",
                    backoff / 2
                );
                if index == 0 {
                    distinct.insert(delay);
                }
            }
        }
        assert!(
            distinct.len() > 32,
            "64 seeds spread the first delay ({} distinct)",
            distinct.len()
        );
        // Unseeded starts draw differently (four equal draws: about 1e-36).
        assert_ne!(
            {
                let mut a = policy.start();
                std::iter::from_fn(|| a.after_failure(&overloaded)).collect::<Vec<_>>()
            },
            {
                let mut b = policy.start();
                std::iter::from_fn(|| b.after_failure(&overloaded)).collect::<Vec<_>>()
            }
        );
    }

    /// An attempt is never cut for its length: 240 s of steady output
    /// (virtual time) pass through whole, whatever the budget.
    #[tokio::test(start_paused = true)]
    async fn a_long_attempt_is_not_cut_and_ends_at_its_terminal_event() {
        let policy = RetryPolicy {
            budget: Duration::from_secs(5),
            ..RetryPolicy::default()
        };
        let started = Instant::now();
        let delta = ProviderEvent::TextDelta {
            index: 0,
            delta: "word ".into(),
        };
        let done = ProviderEvent::Done {
            stop_reason: keel_protocol::StopReason::Stop,
        };
        let mut script: Vec<ProviderEvent> = vec![delta.clone(); 240];
        script.push(done.clone());
        script.push(delta.clone());
        let slow: ProviderStream = futures::stream::iter(script)
            .then(|event| async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                event
            })
            .boxed();
        let events: Vec<ProviderEvent> = policy.start().bound(slow).collect().await;
        assert_eq!(events.len(), 241, "nothing after `done`");
        assert_eq!(events.last(), Some(&done));
        assert!(started.elapsed() >= Duration::from_secs(240));
        let cut: ProviderStream = futures::stream::iter([delta]).boxed();
        let events: Vec<ProviderEvent> = policy.start().bound(cut).collect().await;
        assert!(
            matches!(&events[1], ProviderEvent::Error { error } if error.kind == ProviderErrorKind::StreamDropped),
            "{events:?}"
        );
    }
}
