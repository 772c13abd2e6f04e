//! Admission control: which run may start now, which waits, which is refused.
//!
//! A host that serves many clients gives each Agent Run a slot
//! before the run starts: [`Admission::admit`] hands out a [`Permit`] at once
//! when one of `max_active` slots is free, queues the caller in a bounded
//! queue otherwise, and refuses at once (with an estimate of when to retry)
//! when the queue is full, when the caller's tenant is over one of its
//! [`Quota`]s, or when the admission is draining. Dropping the permit frees
//! the slot and hands it to the next waiter. Nothing here knows about
//! transports, kernels or runs; a tenant is only a name (the token's name,
//! `"local"` for stdio).
//!
//! ```
//! use keel_host::broker::admission::{Admission, Limits, Quota, Refusal};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let admission = Admission::new(
//!     Limits::new(1, 0).with_quota("ci", Quota::unlimited().with_max_active(1)),
//! );
//! let permit = admission.admit("ci").await.expect("a slot is free");
//! // The only slot is taken and nobody may wait: refused at once.
//! let refusal = admission.admit("local").await.expect_err("no slot, no queue");
//! assert!(matches!(refusal, Refusal::Overloaded { retry_after_ms } if retry_after_ms > 0));
//! drop(permit); // The slot is free again.
//! assert_eq!(admission.snapshot().active, 0);
//! # }
//! ```
//!
//! # Scheduling
//!
//! Waiters of one tenant are served first come, first served; between
//! tenants that have waiters the freed slots go round-robin, so a tenant
//! with a hundred queued starts cannot starve one with a single start: the
//! latter is served within as many releases as there are tenants waiting.
//!
//! # Invariants (all kept under one lock)
//!
//! - `active <= max_active` and `queued <= max_queue`.
//! - Nobody waits while a slot is free: `queued > 0` implies
//!   `active == max_active`; so a new caller never overtakes a waiter.
//! - Per tenant, quotas count queued waiters as if they had started:
//!   `active + queued <= quota.max_active` and
//!   `starts in the last minute + queued <= quota.starts_per_minute`. A queued
//!   waiter therefore never waits for its own tenant's quota, only for a
//!   slot, and granting in round-robin order never skips anyone.
//! - Every structure is bounded: the queue by `max_queue`, the running set
//!   by `max_active`, a tenant's window of start times by its
//!   `starts_per_minute` (or by [`UNQUOTED_STARTS_TRACKED`] without one), and
//!   the tenant table by the tenants that have something active, queued, in
//!   their start window or refused in the last minute: others are forgotten.
//!
//! # Lock discipline
//!
//! One `std::sync::Mutex` guards the state. It is never held across an
//! `.await`; under it the code only counts and sends on `oneshot` channels,
//! which never block. A [`Permit`] is never dropped under the lock (a permit
//! that could not be delivered is disarmed and its slot returned in place).
//!
//! # Cancel safety
//!
//! [`Admission::admit`] is cancel safe. Dropping its future while it waits
//! removes the waiter from the queue (its place is free at once for a new
//! caller) and wakes nobody, because no slot was freed. If the waiter had
//! been granted a slot at the same moment, the granted [`Permit`] is dropped
//! with the future and its slot goes to the next waiter: no slot leaks and no
//! wake-up is lost.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use keel_protocol::rpc::{ErrorKind, RpcError};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The window over which `starts_per_minute` counts starts.
const WINDOW: Duration = Duration::from_secs(60);

/// The guess for a run's length before any run has finished and while the
/// active ones are younger than it.
const FIRST_GUESS: Duration = Duration::from_secs(1);

/// How often idle tenants are looked for and forgotten.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How many start times a tenant without a `starts_per_minute` quota keeps
/// for [`TenantStats::starts_last_minute`], which saturates there.
pub const UNQUOTED_STARTS_TRACKED: usize = 4096;

/// The name of the per-tenant active-runs quota in
/// [`Refusal::QuotaExceeded`].
pub const QUOTA_MAX_ACTIVE: &str = "max_active";

/// The name of the per-tenant starts-per-minute quota in
/// [`Refusal::QuotaExceeded`].
pub const QUOTA_STARTS_PER_MINUTE: &str = "starts_per_minute";

/// What one tenant may use; `None` means no limit of that kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Quota {
    /// The most runs the tenant may have active and queued together;
    /// `Some(0)` refuses every start.
    pub max_active: Option<usize>,
    /// The most runs the tenant may start (and have queued) within any
    /// minute; `Some(0)` refuses every start.
    pub starts_per_minute: Option<u32>,
}

impl Quota {
    /// No limit beyond the admission's own.
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// This quota with at most `n` runs active and queued.
    pub fn with_max_active(mut self, n: usize) -> Self {
        self.max_active = Some(n);
        self
    }

    /// This quota with at most `n` starts a minute.
    pub fn with_starts_per_minute(mut self, n: u32) -> Self {
        self.starts_per_minute = Some(n);
        self
    }
}

/// The bounds an [`Admission`] enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// The most runs active at once (at least 1: 0 is read as 1).
    pub max_active: usize,
    /// The most callers waiting for a slot; past it starts are refused.
    pub max_queue: usize,
    /// The quota of every tenant not named in `quotas`.
    pub default_quota: Quota,
    /// Quotas by tenant name.
    pub quotas: HashMap<String, Quota>,
}

impl Default for Limits {
    /// 1,000 active runs, 1,000 waiting, no per-tenant quota.
    fn default() -> Self {
        Self::new(1000, 1000)
    }
}

impl Limits {
    /// At most `max_active` runs active and `max_queue` waiting, with no
    /// per-tenant quota.
    pub fn new(max_active: usize, max_queue: usize) -> Self {
        Self {
            max_active,
            max_queue,
            default_quota: Quota::default(),
            quotas: HashMap::new(),
        }
    }

    /// These limits with `quota` for every tenant not named otherwise.
    pub fn with_default_quota(mut self, quota: Quota) -> Self {
        self.default_quota = quota;
        self
    }

    /// These limits with `quota` for `tenant`.
    pub fn with_quota(mut self, tenant: impl Into<String>, quota: Quota) -> Self {
        self.quotas.insert(tenant.into(), quota);
        self
    }

    /// The quota that applies to `tenant`.
    pub fn quota_of(&self, tenant: &str) -> &Quota {
        self.quotas.get(tenant).unwrap_or(&self.default_quota)
    }
}

/// Why a start was refused. Refusals are immediate: nothing is buffered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// Every slot and every queue place is taken.
    #[error("overloaded: every run slot and queue place is taken; retry in {retry_after_ms} ms")]
    Overloaded {
        /// When a queue place is expected to be free: the time until the
        /// next run is expected to end, from recent run durations.
        retry_after_ms: u64,
    },
    /// The tenant is over one of its quotas.
    #[error("quota `{quota}` exceeded; retry in {retry_after_ms} ms")]
    QuotaExceeded {
        /// When the quota is expected to allow a start: for
        /// [`QUOTA_STARTS_PER_MINUTE`], when enough of the tenant's recent
        /// starts leave the minute's window; for [`QUOTA_MAX_ACTIVE`], when
        /// the tenant's next run is expected to end.
        retry_after_ms: u64,
        /// Which quota: [`QUOTA_MAX_ACTIVE`] or [`QUOTA_STARTS_PER_MINUTE`].
        quota: &'static str,
    },
    /// The admission is draining: no new runs.
    #[error("draining: no new runs are admitted")]
    Draining,
}

impl Refusal {
    /// A stable name for the refusal (`overloaded`, `quota_exceeded`,
    /// `draining`).
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Overloaded { .. } => "overloaded",
            Refusal::QuotaExceeded { .. } => "quota_exceeded",
            Refusal::Draining => "draining",
        }
    }

    /// When to try again, if trying again can help.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            Refusal::Overloaded { retry_after_ms }
            | Refusal::QuotaExceeded { retry_after_ms, .. } => Some(*retry_after_ms),
            Refusal::Draining => None,
        }
    }
}

impl From<Refusal> for RpcError {
    /// The protocol's error for a refused start: `overloaded`,
    /// `quota_exceeded` (with `data.quota`) or `draining`, with
    /// `data.retry_after_ms` where retrying can help.
    fn from(refusal: Refusal) -> Self {
        let kind = match refusal {
            Refusal::Overloaded { .. } => ErrorKind::Overloaded,
            Refusal::QuotaExceeded { .. } => ErrorKind::QuotaExceeded,
            Refusal::Draining => ErrorKind::Draining,
        };
        let mut error = RpcError::new(kind, refusal.to_string());
        if let Some(ms) = refusal.retry_after_ms() {
            error = error.with("retry_after_ms", ms);
        }
        if let Refusal::QuotaExceeded { quota, .. } = refusal {
            error = error.with("quota", quota);
        }
        error
    }
}

/// Refusals counted by reason since the admission was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefusedCounts {
    /// [`Refusal::Overloaded`].
    pub overloaded: u64,
    /// [`Refusal::QuotaExceeded`] for [`QUOTA_MAX_ACTIVE`].
    pub quota_max_active: u64,
    /// [`Refusal::QuotaExceeded`] for [`QUOTA_STARTS_PER_MINUTE`].
    pub quota_starts_per_minute: u64,
    /// [`Refusal::Draining`], new callers and queued waiters alike.
    pub draining: u64,
}

impl RefusedCounts {
    /// All refusals.
    pub fn total(&self) -> u64 {
        self.overloaded + self.quota_max_active + self.quota_starts_per_minute + self.draining
    }

    fn count(&mut self, refusal: &Refusal) {
        match refusal {
            Refusal::Overloaded { .. } => self.overloaded += 1,
            Refusal::QuotaExceeded { quota, .. } if *quota == QUOTA_MAX_ACTIVE => {
                self.quota_max_active += 1
            }
            Refusal::QuotaExceeded { .. } => self.quota_starts_per_minute += 1,
            Refusal::Draining => self.draining += 1,
        }
    }
}

/// One tenant's use, as seen by [`Admission::snapshot`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TenantStats {
    /// Runs holding a permit.
    pub active: usize,
    /// Callers waiting for a slot.
    pub queued: usize,
    /// Permits granted in the last minute (saturates at the tenant's
    /// `starts_per_minute`, or at [`UNQUOTED_STARTS_TRACKED`]).
    pub starts_last_minute: usize,
    /// Refusals since the tenant was last forgotten (a tenant is forgotten
    /// when it had nothing active, queued, started or refused for a minute).
    pub refused: u64,
}

/// A point-in-time view of an [`Admission`], for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdmissionStats {
    /// Permits held.
    pub active: usize,
    /// Callers waiting.
    pub queued: usize,
    /// The bound on `active`.
    pub max_active: usize,
    /// The bound on `queued`.
    pub max_queue: usize,
    /// Whether [`Admission::drain`] was called.
    pub draining: bool,
    /// Refusals since the start, by reason.
    pub refused: RefusedCounts,
    /// The tenants currently remembered, by name.
    pub tenants: BTreeMap<String, TenantStats>,
}

/// Slots for runs, shared by every connection of a host (cheap to clone).
#[derive(Clone)]
pub struct Admission {
    inner: Arc<Inner>,
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl Admission {
    /// An admission enforcing `limits` (a `max_active` of 0 is read as 1).
    pub fn new(mut limits: Limits) -> Self {
        limits.max_active = limits.max_active.max(1);
        Self {
            inner: Arc::new(Inner {
                limits,
                state: Mutex::new(State::new(Instant::now())),
            }),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// A slot for one run of `tenant`: at once if one is free, else waits in
    /// the bounded queue (FIFO within a tenant, round-robin between tenants,
    /// so a busy tenant cannot starve another); refused at once (never
    /// buffered without bound) when the queue is full, the tenant is over a
    /// quota, or the admission is draining. A waiter still queued when
    /// [`Admission::drain`] is called gets [`Refusal::Draining`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future while it waits gives up its queue
    /// place and wakes nobody; a permit granted at the moment of the drop is
    /// released to the next waiter. See the module docs.
    pub async fn admit(&self, tenant: &str) -> Result<Permit, Refusal> {
        let (id, reply) = match self.inner.enter(tenant)? {
            Entered::Granted(permit) => return Ok(permit),
            Entered::Queued { id, reply } => (id, reply),
        };
        let mut place = QueuePlace {
            inner: &self.inner,
            tenant,
            id,
            queued: true,
        };
        let outcome = reply.await;
        // Whoever answered took the waiter out of the queue.
        place.queued = false;
        // A waiter leaves the queue only answered (granted or drained) or
        // through its own `QueuePlace`, so its sender is never dropped
        // unanswered while this future lives; were it ever, no permit exists
        // and the caller is told to stop, as by a drain.
        outcome.unwrap_or(Err(Refusal::Draining))
    }

    /// No new permits from now on; queued waiters are refused with
    /// [`Refusal::Draining`]. Permits already held stay valid until dropped.
    pub fn drain(&self) {
        self.inner.drain(Instant::now());
    }

    /// Whether [`Admission::drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.inner.lock().draining
    }

    /// Counters for metrics: active, queued, refused by reason, and per
    /// tenant active, queued, starts in the last minute and refused.
    pub fn snapshot(&self) -> AdmissionStats {
        self.inner.snapshot(Instant::now())
    }
}

/// One run's slot; dropping it frees the slot and hands it to the next
/// waiter in round-robin order.
#[must_use = "dropping a permit frees its slot at once"]
pub struct Permit {
    /// `None` only once released (or disarmed, see `Inner::grant_waiting`).
    inner: Option<Arc<Inner>>,
    tenant: String,
    id: u64,
    started: Instant,
}

impl Permit {
    /// The tenant the slot was granted to.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("tenant", &self.tenant)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            inner.release(&self.tenant, self.id, self.started);
        }
    }
}

/// Leaves the queue when an `admit` future is dropped while waiting.
struct QueuePlace<'a> {
    inner: &'a Arc<Inner>,
    tenant: &'a str,
    id: u64,
    queued: bool,
}

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        if self.queued {
            self.inner.leave_queue(self.tenant, self.id, Instant::now());
        }
    }
}

/// What `enter` did with a caller that was not refused.
enum Entered {
    Granted(Permit),
    Queued {
        id: u64,
        reply: oneshot::Receiver<Result<Permit, Refusal>>,
    },
}

struct Inner {
    limits: Limits,
    state: Mutex<State>,
}

/// A run holding a slot, ordered by start so the oldest comes first.
type Running = BTreeSet<(Instant, u64)>;

struct State {
    /// Every permit held, by start.
    running: Running,
    /// Waiters in all tenants' queues.
    queued: usize,
    draining: bool,
    tenants: HashMap<String, TenantState>,
    /// The tenants with waiters, each once, in the order they are served.
    turns: VecDeque<String>,
    /// A moving average of recent run durations, once one has ended.
    typical_run: Option<Duration>,
    refused: RefusedCounts,
    next_id: u64,
    last_sweep: Instant,
}

#[derive(Default)]
struct TenantState {
    running: Running,
    waiting: VecDeque<Waiter>,
    /// Start times of recent permits, oldest first, bounded (see module docs).
    starts: VecDeque<Instant>,
    refused: u64,
    last_refused: Option<Instant>,
}

struct Waiter {
    id: u64,
    reply: oneshot::Sender<Result<Permit, Refusal>>,
}

impl TenantState {
    fn prune_starts(&mut self, now: Instant) {
        while self
            .starts
            .front()
            .is_some_and(|&at| now.saturating_duration_since(at) >= WINDOW)
        {
            self.starts.pop_front();
        }
    }

    /// Nothing left worth remembering (call after `prune_starts`).
    fn is_idle(&self, now: Instant) -> bool {
        self.running.is_empty()
            && self.waiting.is_empty()
            && self.starts.is_empty()
            && self
                .last_refused
                .is_none_or(|at| now.saturating_duration_since(at) >= WINDOW)
    }
}

impl State {
    fn new(now: Instant) -> Self {
        Self {
            running: Running::new(),
            queued: 0,
            draining: false,
            tenants: HashMap::new(),
            turns: VecDeque::new(),
            typical_run: None,
            refused: RefusedCounts::default(),
            next_id: 0,
            last_sweep: now,
        }
    }

    /// The expected length of a run: the moving average of finished runs,
    /// or, before any has finished, twice the age of the oldest active run
    /// (a run that has lasted `t` is as likely to last `t` more), at least
    /// [`FIRST_GUESS`].
    fn typical_run(&self, now: Instant) -> Duration {
        self.typical_run.unwrap_or_else(|| {
            let oldest = self
                .running
                .first()
                .map_or(Duration::ZERO, |&(at, _)| now.saturating_duration_since(at));
            FIRST_GUESS.max(oldest.saturating_mul(2))
        })
    }

    fn observe_run(&mut self, took: Duration) {
        self.typical_run = Some(match self.typical_run {
            None => took,
            // An exponential moving average weighting the newest run 1/8.
            Some(typical) => typical.saturating_mul(7).saturating_add(took) / 8,
        });
    }

    fn refuse(&mut self, tenant: &str, refusal: Refusal, now: Instant) -> Refusal {
        self.refused.count(&refusal);
        let entry = self.tenants.entry(tenant.to_owned()).or_default();
        entry.refused += 1;
        entry.last_refused = Some(now);
        refusal
    }

    /// Forgets `tenant` if it has nothing left worth remembering.
    fn forget_if_idle(&mut self, tenant: &str, now: Instant) {
        if let Some(entry) = self.tenants.get_mut(tenant) {
            entry.prune_starts(now);
            if entry.is_idle(now) {
                self.tenants.remove(tenant);
            }
        }
    }

    /// Forgets every idle tenant, at most once per [`SWEEP_EVERY`] unless
    /// `force`d.
    fn sweep(&mut self, now: Instant, force: bool) {
        if !force && now.saturating_duration_since(self.last_sweep) < SWEEP_EVERY {
            return;
        }
        self.last_sweep = now;
        self.tenants.retain(|_, entry| {
            entry.prune_starts(now);
            !entry.is_idle(now)
        });
    }
}

/// When the next of `running` is expected to end, given a typical run
/// length: the oldest one's remaining time while it is younger than a
/// typical run; once it is overdue, the mean spacing of ends
/// (`typical / running`). Never below 1 ms.
fn next_end(running: &Running, typical: Duration, now: Instant) -> Duration {
    let estimate = match running.first() {
        None => typical,
        Some(&(oldest, _)) => {
            let remaining = typical.saturating_sub(now.saturating_duration_since(oldest));
            if remaining.is_zero() {
                typical / u32::try_from(running.len()).unwrap_or(u32::MAX)
            } else {
                remaining
            }
        }
    };
    estimate.max(Duration::from_millis(1))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under the lock panics (counting, and sends that cannot
        // block), so a poisoned lock still guards consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Grants, queues or refuses one caller of `tenant`.
    fn enter(self: &Arc<Self>, tenant: &str) -> Result<Entered, Refusal> {
        let now = Instant::now();
        let mut guard = self.lock();
        let st = &mut *guard;
        st.sweep(now, false);
        if st.draining {
            return Err(st.refuse(tenant, Refusal::Draining, now));
        }
        if let Some(refusal) = self.over_quota(st, tenant, now) {
            return Err(st.refuse(tenant, refusal, now));
        }
        if st.running.len() < self.limits.max_active {
            // By the invariants nobody waits while a slot is free.
            return Ok(Entered::Granted(self.start(st, tenant, now)));
        }
        if st.queued >= self.limits.max_queue {
            let typical = st.typical_run(now);
            let retry_after_ms = millis(next_end(&st.running, typical, now));
            return Err(st.refuse(tenant, Refusal::Overloaded { retry_after_ms }, now));
        }
        let id = st.next_id;
        st.next_id += 1;
        let (reply_tx, reply_rx) = oneshot::channel();
        let entry = st.tenants.entry(tenant.to_owned()).or_default();
        if entry.waiting.is_empty() {
            st.turns.push_back(tenant.to_owned());
        }
        entry.waiting.push_back(Waiter {
            id,
            reply: reply_tx,
        });
        st.queued += 1;
        Ok(Entered::Queued {
            id,
            reply: reply_rx,
        })
    }

    /// The refusal `tenant`'s quota calls for now, if any.
    fn over_quota(&self, st: &mut State, tenant: &str, now: Instant) -> Option<Refusal> {
        let quota = self.limits.quota_of(tenant);
        let typical = st.typical_run(now);
        let (running, queued, starts) = match st.tenants.get_mut(tenant) {
            Some(entry) => {
                entry.prune_starts(now);
                (
                    Some(&entry.running),
                    entry.waiting.len(),
                    Some(&entry.starts),
                )
            }
            None => (None, 0, None),
        };
        let active = running.map_or(0, BTreeSet::len);
        let started = starts.map_or(0, VecDeque::len);
        if let Some(max) = quota.max_active
            && active + queued >= max
        {
            let wait = match running {
                Some(running) if !running.is_empty() => next_end(running, typical, now),
                // All of its runs wait for a slot: one must start, then end.
                _ => next_end(&st.running, typical, now).saturating_add(typical),
            };
            return Some(Refusal::QuotaExceeded {
                retry_after_ms: millis(wait),
                quota: QUOTA_MAX_ACTIVE,
            });
        }
        if let Some(rate) = quota.starts_per_minute {
            let rate = usize::try_from(rate).unwrap_or(usize::MAX);
            if started + queued >= rate {
                // Starts that must leave the window before one more fits.
                let leaving = started + queued + 1 - rate;
                let wait = match starts.and_then(|starts| starts.get(leaving - 1)) {
                    Some(&at) => at
                        .checked_add(WINDOW)
                        .map_or(WINDOW, |leaves| leaves.saturating_duration_since(now)),
                    // Queued starts must begin and leave too: a minute at least.
                    None => WINDOW,
                };
                return Some(Refusal::QuotaExceeded {
                    retry_after_ms: millis(wait),
                    quota: QUOTA_STARTS_PER_MINUTE,
                });
            }
        }
        None
    }

    /// Takes a slot for `tenant` (the caller checked that one is free).
    fn start(self: &Arc<Self>, st: &mut State, tenant: &str, now: Instant) -> Permit {
        let id = st.next_id;
        st.next_id += 1;
        st.running.insert((now, id));
        let cap = self
            .limits
            .quota_of(tenant)
            .starts_per_minute
            .map_or(UNQUOTED_STARTS_TRACKED, |rate| {
                usize::try_from(rate).unwrap_or(usize::MAX)
            })
            .max(1);
        let entry = st.tenants.entry(tenant.to_owned()).or_default();
        entry.running.insert((now, id));
        entry.starts.push_back(now);
        while entry.starts.len() > cap {
            entry.starts.pop_front();
        }
        Permit {
            inner: Some(Arc::clone(self)),
            tenant: tenant.to_owned(),
            id,
            started: now,
        }
    }

    /// Frees a slot and hands it on.
    fn release(self: &Arc<Self>, tenant: &str, id: u64, started: Instant) {
        let now = Instant::now();
        let mut guard = self.lock();
        let st = &mut *guard;
        st.running.remove(&(started, id));
        if let Some(entry) = st.tenants.get_mut(tenant) {
            entry.running.remove(&(started, id));
        }
        st.observe_run(now.saturating_duration_since(started));
        self.grant_waiting(st, now);
        st.forget_if_idle(tenant, now);
    }

    /// Fills free slots from the queue, one tenant's turn at a time.
    fn grant_waiting(self: &Arc<Self>, st: &mut State, now: Instant) {
        while st.running.len() < self.limits.max_active {
            let Some(tenant) = st.turns.pop_front() else {
                break;
            };
            let Some(entry) = st.tenants.get_mut(&tenant) else {
                continue; // A tenant with waiters is always remembered.
            };
            let Some(waiter) = entry.waiting.pop_front() else {
                continue; // A tenant has a turn only while it has waiters.
            };
            if !entry.waiting.is_empty() {
                st.turns.push_back(tenant.clone());
            }
            st.queued -= 1;
            let permit = self.start(st, &tenant, now);
            if let Err(Ok(mut permit)) = waiter.reply.send(Ok(permit)) {
                // The waiter's future was dropped and its `QueuePlace` has
                // not yet run: take the slot back here instead of dropping
                // the permit under the lock, and serve the next waiter.
                permit.inner = None;
                st.running.remove(&(permit.started, permit.id));
                if let Some(entry) = st.tenants.get_mut(&tenant) {
                    entry.running.remove(&(permit.started, permit.id));
                    entry.starts.pop_back();
                }
                st.forget_if_idle(&tenant, now);
            }
        }
    }

    /// Removes a waiter whose `admit` future was dropped, if still queued.
    fn leave_queue(&self, tenant: &str, id: u64, now: Instant) {
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(entry) = st.tenants.get_mut(tenant) else {
            return;
        };
        let Some(at) = entry.waiting.iter().position(|waiter| waiter.id == id) else {
            return; // Already granted or refused.
        };
        entry.waiting.remove(at);
        st.queued -= 1;
        if entry.waiting.is_empty() {
            st.turns.retain(|name| name != tenant);
        }
        // No slot was freed, so nobody is woken.
        st.forget_if_idle(tenant, now);
    }

    fn drain(&self, now: Instant) {
        let mut guard = self.lock();
        let st = &mut *guard;
        st.draining = true;
        st.turns.clear();
        st.queued = 0;
        for entry in st.tenants.values_mut() {
            for waiter in entry.waiting.drain(..) {
                st.refused.count(&Refusal::Draining);
                entry.refused += 1;
                entry.last_refused = Some(now);
                // A waiter whose future is gone needs no answer.
                let _ = waiter.reply.send(Err(Refusal::Draining));
            }
        }
    }

    fn snapshot(&self, now: Instant) -> AdmissionStats {
        let mut guard = self.lock();
        let st = &mut *guard;
        st.sweep(now, true);
        AdmissionStats {
            active: st.running.len(),
            queued: st.queued,
            max_active: self.limits.max_active,
            max_queue: self.limits.max_queue,
            draining: st.draining,
            refused: st.refused,
            tenants: st
                .tenants
                .iter()
                .map(|(name, entry)| {
                    let stats = TenantStats {
                        active: entry.running.len(),
                        queued: entry.waiting.len(),
                        starts_last_minute: entry.starts.len(),
                        refused: entry.refused,
                    };
                    (name.clone(), stats)
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race the public seam cannot stage on one thread: a waiter's
    /// future is gone (its receiver dropped) but its `QueuePlace` has not
    /// yet taken it out of the queue when a slot is handed to it. The slot
    /// must go to the next waiter, not leak.
    #[tokio::test(start_paused = true)]
    async fn a_slot_sent_to_a_vanished_waiter_goes_to_the_next() {
        let admission = Admission::new(Limits::new(1, 2));
        let inner = &admission.inner;
        let Ok(Entered::Granted(held)) = inner.enter("a") else {
            panic!("the first caller waits");
        };
        let Ok(Entered::Queued {
            reply: vanished, ..
        }) = inner.enter("b")
        else {
            panic!("the second caller was not queued");
        };
        let Ok(Entered::Queued {
            reply: mut next, ..
        }) = inner.enter("c")
        else {
            panic!("the third caller was not queued");
        };
        drop(vanished);
        drop(held);
        let permit = next
            .try_recv()
            .expect("the slot leaked with the vanished waiter")
            .expect("c was refused");
        assert_eq!(permit.tenant(), "c");
        let stats = admission.snapshot();
        assert_eq!((stats.active, stats.queued), (1, 0), "{stats:?}");
        // b took nothing: no active run, no start in its window.
        assert!(!stats.tenants.contains_key("b"), "{stats:?}");
        drop(permit);
        assert_eq!(admission.snapshot().active, 0);
    }
}
