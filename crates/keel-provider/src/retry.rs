//! How a failed provider request is retried: which failures, how often,
//! after what delay, and within what total time.
//!
//! Why here: the adapters classify failures and attach their hints
//! (`retry_after_ms`, `max_retries`); the rules that read those hints sit
//! next to them, so every host retries the same way. The host owns the
//! loop — it sends the request again, persists, emits `provider_retry` with
//! each failure as its reason — and asks this module what to do:
//!
//! ```text
//! let mut attempts = policy.start();
//! loop {
//!     let stream = attempts.bound(provider.stream(request, cancel));
//!     … consume it; on `done`, stop …
//!     match attempts.after_failure(&error) {
//!         Some(retry) => { report retry and error; sleep retry.delay }
//!         None => fail with error,
//!     }
//! }
//! ```
//!
//! Delays are jittered: each backoff is drawn from `[backoff × (1 −
//! jitter), backoff]` (AWS's "equal jitter" at the default 50 %), so many
//! clients failing together do not retry together. Jitter only shortens a
//! backoff — never below a server's `retry_after`, never above `max_delay` —
//! so the budget arithmetic holds for the unjittered delays. The random
//! draws come from a small generator seeded per request; tests seed it
//! ([`RetryPolicy::start_seeded`]) and set `jitter_percent: 0` for exact delays.
//!
//! Invariants: a failure is retried only when its kind is retryable, the
//! policy's attempts are not spent, its own `max_retries` is not spent, and
//! the next attempt would start within the budget. An attempt still running
//! when the budget ends is ended by [`Attempts::bound`] with a `timeout`
//! error, so a server that accepts and never answers fails the run within
//! the budget (plus the time the host takes to notice), whatever the
//! adapter's own timeouts are.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use futures::StreamExt;
use keel_protocol::{ProviderError, ProviderErrorKind, ProviderEvent};
use tokio::time::Instant;

use crate::ProviderStream;

/// How retryable provider errors are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (1 disables retries).
    pub max_attempts: u32,
    /// Delay after the first failure; doubles after each further failure.
    pub base_delay: Duration,
    /// Upper bound on any delay, including a server's retry-after.
    pub max_delay: Duration,
    /// The most time all attempts of one request may take together,
    /// delays included.
    pub budget: Duration,
    /// How much of each backoff is random, in percent (0: none, 100: "full
    /// jitter"); values above 100 count as 100.
    pub jitter_percent: u8,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(60),
            budget: Duration::from_secs(180),
            jitter_percent: 50,
        }
    }
}

impl RetryPolicy {
    /// The longest delay after failed attempt `attempt` (1-based): the
    /// unjittered backoff, or a server-requested `retry_after` when it is
    /// longer, capped at `max_delay`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        self.jittered_delay(attempt, retry_after, 0.0)
    }

    /// The delay after failed attempt `attempt` for a random draw `unit` in
    /// `[0, 1)` (clamped): the backoff shortened by `unit × jitter`, then
    /// raised to `retry_after` and capped at `max_delay` as in
    /// [`RetryPolicy::delay`].
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
        jittered
            .max(retry_after.unwrap_or_default())
            .min(self.max_delay)
    }

    /// The attempts `error` allows in total: the policy's, or fewer when
    /// the error limits its own retries.
    pub fn attempts_for(&self, error: &ProviderError) -> u32 {
        let own = error
            .max_retries
            .map_or(u32::MAX, |retries| retries.saturating_add(1));
        self.max_attempts.max(1).min(own)
    }

    /// Starts the attempts of one request; the budget runs from now and
    /// the jitter's generator is seeded at random.
    pub fn start(&self) -> Attempts {
        self.start_seeded(RandomState::new().hash_one(Instant::now()))
    }

    /// [`RetryPolicy::start`] with the jitter's generator seeded by `seed`:
    /// the same seed gives the same delays.
    pub fn start_seeded(&self, seed: u64) -> Attempts {
        Attempts {
            policy: *self,
            deadline: Instant::now() + self.budget,
            attempt: 1,
            random: SplitMix64(seed),
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

/// The attempts of one request, as they happen.
#[derive(Debug, Clone)]
pub struct Attempts {
    policy: RetryPolicy,
    deadline: Instant,
    attempt: u32,
    random: SplitMix64,
}

/// A retry the policy allows after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

    /// When the budget ends.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The budget left.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The error for an attempt the budget ended.
    pub fn out_of_budget(&self) -> ProviderError {
        ProviderError::new(
            ProviderErrorKind::Timeout,
            format!(
                "no complete response within the retry budget of {} s",
                self.policy.budget.as_secs_f64()
            ),
        )
    }

    /// `stream`, ended with [`Attempts::out_of_budget`] if it is still
    /// running when the budget ends (the rest of it is dropped, which
    /// abandons the request).
    pub fn bound(&self, stream: ProviderStream) -> ProviderStream {
        let deadline = self.deadline;
        let expired = self.out_of_budget();
        futures::stream::unfold(Some((stream, expired)), move |state| async move {
            let (mut stream, expired) = state?;
            tokio::select! {
                event = stream.next() => {
                    let event = event?;
                    Some((event, Some((stream, expired))))
                }
                () = tokio::time::sleep_until(deadline) => {
                    Some((ProviderEvent::Error { error: expired }, None))
                }
            }
        })
        .boxed()
    }

    /// What to do after the attempt in flight failed with `error`: the
    /// retry, or `None` to give up (the error is final).
    pub fn after_failure(&mut self, error: &ProviderError) -> Option<Retry> {
        if !error.is_retryable() {
            return None;
        }
        let max_attempts = self.policy.attempts_for(error);
        if self.attempt >= max_attempts {
            return None;
        }
        let retry_after = error.retry_after_ms.map(Duration::from_millis);
        let delay = self
            .policy
            .jittered_delay(self.attempt, retry_after, self.random.next_unit());
        if delay >= self.remaining() {
            return None;
        }
        let retry = Retry {
            attempt: self.attempt,
            max_attempts,
            delay,
        };
        self.attempt += 1;
        Some(retry)
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
    fn doubles_and_honours_retry_after_within_the_cap() {
        let policy = exact();
        assert_eq!(policy.delay(1, None), Duration::from_secs(2));
        assert_eq!(policy.delay(3, None), Duration::from_secs(8));
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(policy.delay(30, None), Duration::from_secs(60));
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

    #[tokio::test(start_paused = true)]
    async fn no_retry_starts_after_the_budget() {
        let policy = RetryPolicy {
            budget: Duration::from_secs(10),
            ..exact()
        };
        let timeout = error(ProviderErrorKind::Timeout);
        let mut attempts = policy.start();
        assert!(attempts.after_failure(&timeout).is_some());
        tokio::time::advance(Duration::from_secs(7)).await;
        // A 4 s delay would start the third attempt past the budget.
        assert_eq!(attempts.after_failure(&timeout), None);
        let mut late = policy.start();
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(late.remaining(), Duration::ZERO);
        assert_eq!(late.after_failure(&timeout), None);
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

    #[tokio::test(start_paused = true)]
    async fn a_stream_still_running_at_the_deadline_ends_with_a_timeout() {
        let policy = RetryPolicy {
            budget: Duration::from_secs(5),
            ..RetryPolicy::default()
        };
        let attempts = policy.start();
        let silent: ProviderStream = futures::stream::pending().boxed();
        let events: Vec<ProviderEvent> = attempts.bound(silent).collect().await;
        assert_eq!(
            events,
            [ProviderEvent::Error {
                error: attempts.out_of_budget()
            }]
        );
        assert_eq!(Instant::now(), attempts.deadline());
        let done = ProviderEvent::Done {
            stop_reason: keel_protocol::StopReason::Stop,
        };
        let finished: ProviderStream = futures::stream::iter([done.clone()]).boxed();
        let events: Vec<ProviderEvent> = policy.start().bound(finished).collect().await;
        assert_eq!(events, [done], "a stream that ends in time passes through");
    }
}
