//! The broker's counters, for `/metrics`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::lock;

/// A snapshot of the broker's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokerMetrics {
    /// Runs running now.
    pub runs_active: u64,
    /// Starts waiting for admission now.
    pub runs_queued: u64,
    /// Runs started since the broker began.
    pub runs_started: u64,
    /// Starts refused (admission, quota, draining) since the broker began.
    pub runs_refused: u64,
    /// `run/event` notifications put in connection buffers.
    pub events_sent: u64,
    /// Subscriptions ended because their connection did not keep up.
    pub lagged_subscribers: u64,
    /// Kernels cached now.
    pub kernels_cached: u64,
    /// Per tenant (the token's name), by name.
    pub tenants: BTreeMap<String, TenantUsage>,
}

/// One tenant's usage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TenantUsage {
    /// Its runs running now.
    pub runs_active: u64,
    /// Its runs started since the broker began.
    pub runs_started: u64,
    /// Its starts refused since the broker began.
    pub runs_refused: u64,
}

/// The live counters.
#[derive(Default)]
pub(crate) struct Counters {
    runs_active: AtomicU64,
    runs_started: AtomicU64,
    runs_refused: AtomicU64,
    events_sent: AtomicU64,
    lagged: AtomicU64,
    tenants: Mutex<BTreeMap<String, TenantUsage>>,
}

impl Counters {
    pub(crate) fn run_started(&self, tenant: &str) {
        self.runs_active.fetch_add(1, Ordering::Relaxed);
        self.runs_started.fetch_add(1, Ordering::Relaxed);
        let mut tenants = lock(&self.tenants);
        let usage = tenants.entry(tenant.to_owned()).or_default();
        usage.runs_active += 1;
        usage.runs_started += 1;
    }

    pub(crate) fn run_ended(&self, tenant: &str) {
        self.runs_active.fetch_sub(1, Ordering::Relaxed);
        if let Some(usage) = lock(&self.tenants).get_mut(tenant) {
            usage.runs_active = usage.runs_active.saturating_sub(1);
        }
    }

    pub(crate) fn refused(&self, tenant: &str) {
        self.runs_refused.fetch_add(1, Ordering::Relaxed);
        lock(&self.tenants)
            .entry(tenant.to_owned())
            .or_default()
            .runs_refused += 1;
    }

    pub(crate) fn delivered(&self, sent: u64, lagged: u64) {
        self.events_sent.fetch_add(sent, Ordering::Relaxed);
        self.lagged.fetch_add(lagged, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, kernels_cached: usize, queued: usize) -> BrokerMetrics {
        BrokerMetrics {
            runs_active: self.runs_active.load(Ordering::Relaxed),
            runs_queued: queued as u64,
            runs_started: self.runs_started.load(Ordering::Relaxed),
            runs_refused: self.runs_refused.load(Ordering::Relaxed),
            events_sent: self.events_sent.load(Ordering::Relaxed),
            lagged_subscribers: self.lagged.load(Ordering::Relaxed),
            kernels_cached: kernels_cached as u64,
            tenants: lock(&self.tenants).clone(),
        }
    }
}
