//! The broker's admission control through its public seam: limits, the
//! bounded queue, quotas, round-robin between tenants, drain and cancel
//! safety. Time is tokio's paused clock where estimates are checked.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use keel_host::broker::admission::{
    Admission, Limits, Permit, QUOTA_MAX_ACTIVE, QUOTA_STARTS_PER_MINUTE, Quota, Refusal,
};

type Admit = Pin<Box<dyn Future<Output = Result<Permit, Refusal>> + Send>>;

/// An `admit` future that has not been polled yet.
fn admit(admission: &Admission, tenant: &str) -> Admit {
    let admission = admission.clone();
    let tenant = tenant.to_owned();
    Box::pin(async move { admission.admit(&tenant).await })
}

/// Polls once, without a runtime's help: `Some` when it is done.
fn poll_once(future: &mut Admit) -> Option<Result<Permit, Refusal>> {
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(outcome) => Some(outcome),
        Poll::Pending => None,
    }
}

/// A permit at once, or the test fails.
fn granted(admission: &Admission, tenant: &str) -> Permit {
    match poll_once(&mut admit(admission, tenant)) {
        Some(Ok(permit)) => permit,
        other => panic!("expected a permit for {tenant} at once, got {other:?}"),
    }
}

/// The refusal `admit` gives at once, or the test fails.
fn refused(admission: &Admission, tenant: &str) -> Refusal {
    match poll_once(&mut admit(admission, tenant)) {
        Some(Err(refusal)) => refusal,
        Some(Ok(_)) => panic!("expected {tenant} to be refused, got a permit"),
        None => panic!("expected {tenant} to be refused at once, but it waits"),
    }
}

/// An `admit` future that is queued, or the test fails.
fn queued(admission: &Admission, tenant: &str) -> Admit {
    let mut future = admit(admission, tenant);
    if let Some(outcome) = poll_once(&mut future) {
        panic!("expected {tenant} to wait, got {outcome:?}");
    }
    future
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_under_concurrency_with_cancellations() {
    let admission = Admission::new(
        Limits::new(4, 1000).with_quota("capped", Quota::unlimited().with_max_active(2)),
    );
    let now_active = Arc::new(AtomicUsize::new(0));
    let capped_active = Arc::new(AtomicUsize::new(0));
    let most_active = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..300usize {
        let admission = admission.clone();
        let now_active = Arc::clone(&now_active);
        let capped_active = Arc::clone(&capped_active);
        let most_active = Arc::clone(&most_active);
        let finished = Arc::clone(&finished);
        tasks.push(tokio::spawn(async move {
            let tenant = ["a", "b", "capped"][i % 3];
            let admitted = if i % 5 == 0 {
                // Some callers give up while waiting (or just as they are
                // granted): their place or slot must not leak.
                let patience = Duration::from_micros(u64::try_from(i).unwrap_or(0) * 7);
                match tokio::time::timeout(patience, admission.admit(tenant)).await {
                    Ok(outcome) => outcome,
                    Err(_) => return,
                }
            } else {
                admission.admit(tenant).await
            };
            let permit = match admitted {
                Ok(permit) => permit,
                // The capped tenant's extra starts are refused, not queued.
                Err(Refusal::QuotaExceeded { quota, .. }) if tenant == "capped" => {
                    assert_eq!(quota, QUOTA_MAX_ACTIVE);
                    return;
                }
                Err(refusal) => panic!("{tenant} refused: {refusal}"),
            };
            let active = now_active.fetch_add(1, Ordering::SeqCst) + 1;
            most_active.fetch_max(active, Ordering::SeqCst);
            if tenant == "capped" {
                let capped = capped_active.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(capped <= 2, "capped tenant has {capped} active");
            }
            let stats = admission.snapshot();
            assert!(stats.active <= 4, "{stats:?}");
            assert!(stats.queued <= 1000, "{stats:?}");
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            if tenant == "capped" {
                capped_active.fetch_sub(1, Ordering::SeqCst);
            }
            now_active.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
            finished.fetch_add(1, Ordering::SeqCst);
        }));
    }
    // A bounded wait: a lost wake-up leaves callers waiting forever.
    let all = async {
        for task in tasks {
            task.await.expect("a task panicked");
        }
    };
    if tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .is_err()
    {
        let stats = admission.snapshot();
        panic!("callers still wait after 60 s (a wake-up was lost?): {stats:?}");
    }
    let most = most_active.load(Ordering::SeqCst);
    assert!((1..=4).contains(&most), "{most} runs were active at once");
    // Every uncapped caller that did not give up ran.
    assert!(finished.load(Ordering::SeqCst) >= 160);
    let stats = admission.snapshot();
    assert_eq!((stats.active, stats.queued), (0, 0), "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_at_once_with_an_estimate_from_run_durations() {
    let admission = Admission::new(Limits::new(1, 1));
    // One run of 10 s teaches the admission how long runs take.
    let first = granted(&admission, "a");
    tokio::time::advance(Duration::from_secs(10)).await;
    drop(first);

    let _running = granted(&admission, "a");
    let _waiting = queued(&admission, "b");
    tokio::time::advance(Duration::from_secs(4)).await;
    // The running one is expected to end 10 s after its start, 6 s from now.
    assert_eq!(
        refused(&admission, "c"),
        Refusal::Overloaded {
            retry_after_ms: 6000
        }
    );
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(
        refused(&admission, "c"),
        Refusal::Overloaded {
            retry_after_ms: 1000
        }
    );
    let stats = admission.snapshot();
    assert_eq!((stats.active, stats.queued), (1, 1));
    assert_eq!(stats.refused.overloaded, 2);
    assert_eq!(stats.tenants["c"].refused, 2);
}

#[tokio::test(start_paused = true)]
async fn overloaded_before_any_run_ended_still_estimates_above_zero() {
    let admission = Admission::new(Limits::new(2, 0));
    let _one = granted(&admission, "a");
    let _two = granted(&admission, "a");
    let refusal = refused(&admission, "b");
    assert!(
        matches!(refusal, Refusal::Overloaded { retry_after_ms } if retry_after_ms > 0),
        "{refusal:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tenant_over_its_active_quota_is_refused_and_others_are_not() {
    let admission =
        Admission::new(Limits::new(10, 10).with_quota("a", Quota::unlimited().with_max_active(2)));
    let learn = granted(&admission, "b");
    tokio::time::advance(Duration::from_secs(8)).await;
    drop(learn); // Runs take 8 s.

    let first = granted(&admission, "a");
    tokio::time::advance(Duration::from_secs(3)).await;
    let _second = granted(&admission, "a");
    assert_eq!(
        refused(&admission, "a"),
        Refusal::QuotaExceeded {
            retry_after_ms: 5000,
            quota: QUOTA_MAX_ACTIVE
        }
    );
    let _other = granted(&admission, "b");
    drop(first);
    let _third = granted(&admission, "a");
    let stats = admission.snapshot();
    assert_eq!(stats.refused.quota_max_active, 1);
    assert_eq!(stats.tenants["a"].active, 2);
    assert_eq!(stats.tenants["a"].refused, 1);
}

#[tokio::test(start_paused = true)]
async fn queued_starts_count_against_the_active_quota() {
    let admission =
        Admission::new(Limits::new(1, 10).with_quota("a", Quota::unlimited().with_max_active(2)));
    let _running = granted(&admission, "b");
    let _one = queued(&admission, "a");
    let _two = queued(&admission, "a");
    let refusal = refused(&admission, "a");
    assert!(
        matches!(refusal, Refusal::QuotaExceeded { quota: QUOTA_MAX_ACTIVE, retry_after_ms } if retry_after_ms > 0),
        "{refusal:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn starts_per_minute_refuses_until_the_oldest_start_leaves_the_window() {
    let admission = Admission::new(
        Limits::new(10, 10).with_default_quota(Quota::unlimited().with_starts_per_minute(2)),
    );
    drop(granted(&admission, "a"));
    tokio::time::advance(Duration::from_secs(20)).await;
    drop(granted(&admission, "a"));
    tokio::time::advance(Duration::from_secs(10)).await;
    // The first start leaves the window 60 s after it, 30 s from now.
    assert_eq!(
        refused(&admission, "a"),
        Refusal::QuotaExceeded {
            retry_after_ms: 30_000,
            quota: QUOTA_STARTS_PER_MINUTE
        }
    );
    // Another tenant has its own window.
    drop(granted(&admission, "b"));
    assert_eq!(admission.snapshot().tenants["a"].starts_last_minute, 2);
    tokio::time::advance(Duration::from_secs(30)).await;
    drop(granted(&admission, "a"));
    let stats = admission.snapshot();
    assert_eq!(stats.refused.quota_starts_per_minute, 1);
    assert_eq!(stats.tenants["a"].starts_last_minute, 2);
}

#[tokio::test(start_paused = true)]
async fn round_robin_serves_a_lone_waiter_within_two_releases() {
    let admission = Admission::new(Limits::new(1, 200));
    let mut holder = Some(granted(&admission, "a"));
    let mut waiting: Vec<(&str, Admit)> =
        (0..100).map(|_| ("a", queued(&admission, "a"))).collect();
    waiting.push(("b", queued(&admission, "b")));
    for release in 1..=2 {
        drop(holder.take());
        let mut served = None;
        let mut still = Vec::new();
        for (tenant, mut future) in waiting {
            match poll_once(&mut future) {
                Some(Ok(permit)) => {
                    assert!(served.is_none(), "two waiters served by one release");
                    served = Some((tenant, permit));
                }
                Some(Err(refusal)) => panic!("{tenant} refused: {refusal}"),
                None => still.push((tenant, future)),
            }
        }
        waiting = still;
        let (tenant, permit) = served.expect("a release served nobody");
        if tenant == "b" {
            assert_eq!(admission.snapshot().queued, 99);
            return;
        }
        assert!(release < 2, "b still waits after two releases");
        holder = Some(permit);
    }
    panic!("b still waits after two releases");
}

#[tokio::test(start_paused = true)]
async fn one_tenants_waiters_are_served_in_arrival_order() {
    let admission = Admission::new(Limits::new(1, 10));
    let mut holder = granted(&admission, "a");
    let mut waiting: Vec<(usize, Admit)> = (0..4).map(|i| (i, queued(&admission, "a"))).collect();
    for expected in 0..4 {
        drop(holder);
        let mut served = Vec::new();
        let mut still = Vec::new();
        for (i, mut future) in waiting {
            match poll_once(&mut future) {
                Some(outcome) => served.push((i, outcome.expect("refused"))),
                None => still.push((i, future)),
            }
        }
        waiting = still;
        assert_eq!(served.len(), 1, "one release served {}", served.len());
        let (i, permit) = served.remove(0);
        assert_eq!(i, expected, "waiter {i} served before waiter {expected}");
        holder = permit;
    }
}

#[tokio::test(start_paused = true)]
async fn drain_refuses_queued_and_new_callers_and_keeps_held_permits() {
    let admission = Admission::new(Limits::new(1, 10));
    let held = granted(&admission, "a");
    let mut first = queued(&admission, "a");
    let mut second = queued(&admission, "b");
    admission.drain();
    assert!(admission.is_draining());
    assert_eq!(
        poll_once(&mut first).map(|o| o.err()),
        Some(Some(Refusal::Draining))
    );
    assert_eq!(
        poll_once(&mut second).map(|o| o.err()),
        Some(Some(Refusal::Draining))
    );
    assert_eq!(refused(&admission, "c"), Refusal::Draining);
    let stats = admission.snapshot();
    assert_eq!((stats.active, stats.queued, stats.draining), (1, 0, true));
    assert_eq!(stats.refused.draining, 3);
    drop(held);
    assert_eq!(refused(&admission, "a"), Refusal::Draining);
    assert_eq!(admission.snapshot().active, 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_queued_caller_frees_its_place_and_wakes_nobody() {
    let admission = Admission::new(Limits::new(1, 2));
    let held = granted(&admission, "a");
    let gone = queued(&admission, "a");
    let mut other = queued(&admission, "b");
    assert!(matches!(
        refused(&admission, "c"),
        Refusal::Overloaded { .. }
    ));
    drop(gone);
    let stats = admission.snapshot();
    assert_eq!((stats.active, stats.queued), (1, 1));
    assert_eq!(stats.tenants["a"].queued, 0);
    // Nobody was woken: no slot was freed.
    assert!(poll_once(&mut other).is_none());
    // The place is free again.
    let mut late = queued(&admission, "c");
    drop(held);
    // b waited first and its tenant's turn comes first.
    let permit = poll_once(&mut other)
        .expect("b was not served by the release")
        .expect("b was refused");
    assert!(poll_once(&mut late).is_none());
    drop(permit);
    assert!(matches!(poll_once(&mut late), Some(Ok(_))));
}

#[tokio::test(start_paused = true)]
async fn a_permit_granted_to_a_dropped_caller_goes_to_the_next() {
    let admission = Admission::new(Limits::new(1, 2));
    let held = granted(&admission, "a");
    let granted_but_gone = queued(&admission, "b");
    let mut next = queued(&admission, "c");
    // The release grants the slot to b, whose future is then dropped
    // before it could see the permit.
    drop(held);
    assert_eq!(admission.snapshot().tenants["b"].active, 1);
    drop(granted_but_gone);
    let permit = poll_once(&mut next)
        .expect("the slot leaked with the dropped caller")
        .expect("c was refused");
    assert_eq!(permit.tenant(), "c");
    let stats = admission.snapshot();
    assert_eq!((stats.active, stats.queued), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn idle_tenants_are_forgotten() {
    let admission = Admission::new(
        Limits::new(2, 2).with_quota("a", Quota::unlimited().with_starts_per_minute(5)),
    );
    drop(granted(&admission, "a"));
    drop(granted(&admission, "b"));
    assert_eq!(admission.snapshot().tenants.len(), 2);
    tokio::time::advance(Duration::from_secs(61)).await;
    assert!(admission.snapshot().tenants.is_empty());
}

/// splitmix64: a seeded generator, so a failing sequence can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n).unwrap_or(1)).unwrap_or(0)
    }
}

/// What admitting `tenant` must do now, from the counters alone: the
/// oracle of the random sequences.
fn expected_outcome(admission: &Admission, tenant: &str) -> &'static str {
    let stats = admission.snapshot();
    let quota = admission.limits().quota_of(tenant);
    let mine = stats.tenants.get(tenant).copied().unwrap_or_default();
    if stats.draining {
        "draining"
    } else if quota
        .max_active
        .is_some_and(|max| mine.active + mine.queued >= max)
    {
        QUOTA_MAX_ACTIVE
    } else if quota
        .starts_per_minute
        .is_some_and(|rate| mine.starts_last_minute + mine.queued >= rate as usize)
    {
        QUOTA_STARTS_PER_MINUTE
    } else if stats.active < stats.max_active {
        "granted"
    } else if stats.queued < stats.max_queue {
        "queued"
    } else {
        "overloaded"
    }
}

#[tokio::test(start_paused = true)]
async fn random_sequences_keep_the_bounds_and_leak_no_slot() {
    const TENANTS: [&str; 3] = ["a", "b", "c"];
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    for seed in 0..300u64 {
        let mut rng = Rng(seed);
        let max_active = 1 + rng.below(4);
        let max_queue = rng.below(6);
        let quota_a = Quota::unlimited().with_max_active(1 + rng.below(3));
        let quota_b =
            Quota::unlimited().with_starts_per_minute(1 + u32::try_from(rng.below(6)).unwrap_or(0));
        let admission = Admission::new(
            Limits::new(max_active, max_queue)
                .with_quota("a", quota_a.clone())
                .with_quota("b", quota_b),
        );
        let mut held: Vec<Permit> = Vec::new();
        let mut waiting: Vec<(&str, Admit)> = Vec::new();
        let mut drained = false;
        for step in 0..200 {
            let context = format!("seed {seed} step {step}");
            match rng.below(10) {
                0..=3 => {
                    let tenant = TENANTS[rng.below(3)];
                    let expected = expected_outcome(&admission, tenant);
                    let mut future = admit(&admission, tenant);
                    let outcome = match poll_once(&mut future) {
                        Some(Ok(permit)) => {
                            held.push(permit);
                            "granted"
                        }
                        Some(Err(refusal)) => {
                            if let Some(ms) = refusal.retry_after_ms() {
                                assert!(ms > 0, "{context}: {refusal:?}");
                            }
                            match refusal {
                                Refusal::QuotaExceeded { quota, .. } => quota,
                                other => other.code(),
                            }
                        }
                        None => {
                            waiting.push((tenant, future));
                            "queued"
                        }
                    };
                    assert_eq!(outcome, expected, "{context}: {tenant}");
                    *seen.entry(outcome).or_default() += 1;
                }
                4..=5 if !held.is_empty() => {
                    let at = rng.below(held.len());
                    drop(held.swap_remove(at));
                }
                6 if !waiting.is_empty() => {
                    let at = rng.below(waiting.len());
                    drop(waiting.swap_remove(at));
                }
                7 => tokio::time::advance(Duration::from_secs(rng.below(30) as u64)).await,
                8 if !drained && rng.below(20) == 0 => {
                    admission.drain();
                    drained = true;
                }
                _ => {}
            }
            // Collect what the queue was granted or refused.
            let mut still = Vec::new();
            for (tenant, mut future) in waiting {
                match poll_once(&mut future) {
                    Some(Ok(permit)) => held.push(permit),
                    Some(Err(refusal)) => assert!(
                        drained && refusal == Refusal::Draining,
                        "{context}: a queued {tenant} got {refusal:?}"
                    ),
                    None => still.push((tenant, future)),
                }
            }
            waiting = still;

            let stats = admission.snapshot();
            assert!(stats.active <= max_active, "{context}: {stats:?}");
            assert!(stats.queued <= max_queue, "{context}: {stats:?}");
            assert_eq!(stats.active, held.len(), "{context}: a slot leaked");
            assert_eq!(stats.queued, waiting.len(), "{context}: a place leaked");
            if stats.queued > 0 {
                assert_eq!(
                    stats.active, max_active,
                    "{context}: a slot idles while {} wait",
                    stats.queued
                );
            }
            let a_use = stats.tenants.get("a").map_or(0, |t| t.active + t.queued);
            assert!(
                Some(a_use) <= quota_a.max_active,
                "{context}: a over its quota"
            );
            for tenant in TENANTS {
                let mine = held.iter().filter(|p| p.tenant() == tenant).count();
                let shown = stats.tenants.get(tenant).map_or(0, |t| t.active);
                assert_eq!(mine, shown, "{context}: {tenant}'s active count");
            }
        }
        drop(waiting);
        drop(held);
        let stats = admission.snapshot();
        assert_eq!((stats.active, stats.queued), (0, 0), "seed {seed}: leaked");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(
            admission.snapshot().tenants.is_empty(),
            "seed {seed}: tenants kept"
        );
    }
    // The sequences reach every outcome, or they prove little.
    for outcome in [
        "granted",
        "queued",
        "overloaded",
        "draining",
        QUOTA_MAX_ACTIVE,
        QUOTA_STARTS_PER_MINUTE,
    ] {
        assert!(
            seen.get(outcome).is_some_and(|&n| n > 0),
            "no sequence was {outcome}: {seen:?}"
        );
    }
}

#[test]
fn refusals_become_the_protocols_errors() {
    use keel_protocol::rpc::RpcError;
    let error = RpcError::from(Refusal::QuotaExceeded {
        retry_after_ms: 1500,
        quota: QUOTA_STARTS_PER_MINUTE,
    });
    assert_eq!(
        serde_json::to_value(&error).expect("serializes"),
        serde_json::json!({
            "code": -32007,
            "message": "quota `starts_per_minute` exceeded; retry in 1500 ms",
            "data": {"code": "quota_exceeded", "retry_after_ms": 1500, "quota": "starts_per_minute"},
        })
    );
    let error = RpcError::from(Refusal::Overloaded { retry_after_ms: 20 });
    assert_eq!(error.kind_name(), Some("overloaded"));
    assert_eq!(
        error.data.as_ref().and_then(|d| d.get("retry_after_ms")),
        Some(&serde_json::json!(20))
    );
    let error = RpcError::from(Refusal::Draining);
    assert_eq!(error.kind_name(), Some(Refusal::Draining.code()));
    assert_eq!(error.data, Some(serde_json::json!({"code": "draining"})));
}
