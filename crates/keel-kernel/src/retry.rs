//! Backoff for retryable provider errors.

use std::time::Duration;

/// How retryable provider errors are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (1 disables retries).
    pub max_attempts: u32,
    /// Delay after the first failure; doubles after each further failure.
    pub base_delay: Duration,
    /// Upper bound on any delay, including a server's retry-after.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The delay after failed attempt `attempt` (1-based), honouring a
    /// server-requested `retry_after` when it is longer.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        let backoff = self.base_delay.saturating_mul(factor);
        backoff
            .max(retry_after.unwrap_or_default())
            .min(self.max_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_honours_retry_after_within_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.delay(1, None), Duration::from_secs(2));
        assert_eq!(policy.delay(3, None), Duration::from_secs(8));
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(policy.delay(30, None), Duration::from_secs(60));
    }
}
