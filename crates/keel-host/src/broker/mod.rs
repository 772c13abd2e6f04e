//! The broker: every host message applied in one place, for any transport.
//!
//! `keel rpc` (stdio), `keel serve` (WebSocket) and the CLI's
//! `--input-format stream-json` are transports: they read frames, hand
//! each request to [`Connection::call`], and write what it returns and what
//! [`Connection::notification`] yields. Everything else — building kernels
//! from the configuration, holding runs by id, carrying their events to
//! subscribers, answering permission requests, sessions, admission — is
//! here, transport-free.
//!
//! ```text
//! Broker ── kernels (cache by configuration × workspace × store, idle eviction)
//!        ── runs    (by id: AgentRun + ring + subscribers; one pump each)
//!        ── stores  (one JsonlStore per tenant store, opened on first use)
//! Connection (one per client) ── bounded notification buffer ── its subscriptions
//! ```
//!
//! Modules, top-down: [`admission`] decides which start may run now
//! (bounded slots and queue, per-tenant quotas, round-robin between
//! tenants, drain); [`methods`] dispatches a call by name to the run
//! methods there and the session methods in `sessions_api`; `runs` holds runs
//! and their pump (its docs say why the kernel's channel may stay
//! unbounded: the broker always drains it); `ring` is a run's bounded
//! event ring; `peer` a connection's bounded buffer; `kernels` the kernel
//! cache; `stores` the tenants' session stores; `errors` the mapping of
//! every failure to a typed
//! [`RpcError`](keel_protocol::rpc::RpcError).
//!
//! # Invariants
//!
//! - A run lives in the broker, not in a connection: dropping a
//!   [`Connection`] ends its subscriptions only. Runs go on, their
//!   permission requests stay pending, and any connection of the same
//!   [`Tenant`] may answer them (the first answer wins).
//! - Tenants are isolated: a run of another tenant is `not_found`, and so
//!   is a session of another tenant's store, for every session method and
//!   for `run/start` / `session/resume` (never "forbidden": whether it
//!   exists is not told).
//! - A tenant name is `[A-Za-z0-9_-]{1,64}` ([`Tenant::check_name`]); a
//!   connection whose tenant has another name is refused every method
//!   (`configuration`, `data.host_code` `invalid_tenant`), and the name is
//!   never used as a path.
//! - Memory is bounded per run (its ring) and per connection (its buffer
//!   plus one lagged notice per run); nothing grows with a slow client.
//! - The broker never uses the process's current directory: `run/start`
//!   without a workspace is refused.
//! - One live run per session in this broker: a second `run/start` (or
//!   `session/resume`, `session/set_leaf`, `session/compact`) on a session
//!   with a live run is refused with `session_busy`. A session is named by
//!   its store and its id, so the rule holds per store.
//!
//! # Session stores
//!
//! Under the session directory `DIR` (`BrokerConfig::session_dir`, or the
//! directory of the store given to [`Broker::with_store`]):
//!
//! ```text
//! DIR/<id>.jsonl                  tenants `local` and `default`: the user's store
//! DIR/tenants/<NAME>/<id>.jsonl   every other tenant NAME (a named token)
//! ```
//!
//! `local` (stdio `keel rpc`, `keel serve` on loopback without tokens) and
//! `default` (the single token of `--token-file` / `KEEL_SERVER_TOKEN`)
//! act for the user and share the store `keel session list` shows. A named
//! token's directory is created private to the user (0700) on its first
//! use; the user's store does not list it. Kernels are cached per store as
//! well, so a kernel only ever writes to its tenant's store.
//!
//! # Cancel safety
//!
//! [`Connection::call`] may be dropped at any await: a method either took
//! effect or did not, except `run/start`, which (like
//! `AgentKernel::create_run`) may leave a new, empty session behind when
//! dropped before the run is created. [`Connection::notification`] is
//! cancel safe (a channel receive). [`Broker::drain`] and
//! [`Connection::settled`] only wait.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use keel_protocol::rpc::{Notification, RpcError};
use keel_session::JsonlStore;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::{HostError, HostOptions, sessions};

pub mod admission;
mod authority;
pub use authority::Authority;
mod errors;
mod kernels;
pub mod methods;
mod metrics;
mod peer;
mod ring;
mod runs;
mod sessions_api;
mod stores;

pub use metrics::{BrokerMetrics, TenantUsage};

use admission::{Admission, Limits, Quota};
use kernels::Kernels;
use metrics::Counters;
use peer::Peer;
use runs::RunMap;
use stores::Stores;

/// How a broker builds kernels and bounds what it holds.
///
/// `Default` gives loopback-service limits; set fields after
/// `BrokerConfig::default()`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BrokerConfig {
    /// The user's `config.toml` (`None`: the default path, if present).
    pub config_file: Option<PathBuf>,
    /// The profile to apply (`[profiles.NAME]`).
    pub profile: Option<String>,
    /// `-c KEY=VALUE` overrides.
    pub overrides: Vec<String>,
    /// The provider when a run names none (else the configuration's).
    pub provider: Option<String>,
    /// The model when a run names none.
    pub model: Option<String>,
    /// Overrides the provider's base URL.
    pub base_url: Option<String>,
    /// The scripted provider's script (with provider `scripted`).
    pub script: Option<PathBuf>,
    /// More directories sandboxed commands may read.
    pub sandbox_read: Vec<PathBuf>,
    /// The options with no configuration key (system prompt, sandbox mode, …).
    pub host: HostOptions,
    /// The session directory (`None`: `$XDG_DATA_HOME/keel/sessions`): the
    /// user's store (tenants `local` and `default`); a named tenant's
    /// store is its `tenants/<NAME>/` (see the module docs).
    pub session_dir: Option<PathBuf>,
    /// Most runs active at once.
    pub max_runs: usize,
    /// Most starts waiting for a slot; past it a start is refused.
    pub max_queue: usize,
    /// The quotas of a tenant not named in `quotas`.
    pub default_quota: Quota,
    /// Per-tenant quotas (active runs, starts per minute), by tenant name.
    pub quotas: HashMap<String, Quota>,
    /// Per-tenant ceilings (mode, widening approvals, workspaces), by
    /// tenant name; a named tenant not listed gets
    /// [`Authority::named_default`], and `local` and `default` always act
    /// with the user's own authority ([`Authority::user`]).
    pub authorities: HashMap<String, Authority>,
    /// Most events a run's ring holds.
    pub ring_events: usize,
    /// Most bytes (serialized) a run's ring holds.
    pub ring_bytes: usize,
    /// How long a finished run's ring (and `run/result`) stays readable.
    pub ring_grace: Duration,
    /// Most finished runs held within `ring_grace`; past it the one that
    /// finished first is forgotten (each holds up to `ring_bytes`). Never
    /// fewer than `max_runs`.
    pub max_finished_runs: usize,
    /// How long an unused kernel stays cached.
    pub idle_kernel_ttl: Duration,
    /// Most unused kernels kept cached (the least recently used go first):
    /// clients choose workspaces and models, each a kernel of its own.
    pub max_idle_kernels: usize,
    /// A run that makes no progress this long fails with `run_stalled`
    /// (`None`: never; waiting on a permission request does not count).
    pub stall_timeout: Option<Duration>,
    /// Notifications a connection's buffer holds before its subscriptions
    /// lag.
    pub notification_buffer: usize,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            config_file: None,
            profile: None,
            overrides: Vec::new(),
            provider: None,
            model: None,
            base_url: None,
            script: None,
            sandbox_read: Vec::new(),
            host: HostOptions::default(),
            session_dir: None,
            max_runs: 256,
            max_queue: 1024,
            default_quota: Quota::default(),
            quotas: HashMap::new(),
            authorities: HashMap::new(),
            ring_events: 2048,
            ring_bytes: 256 * 1024,
            ring_grace: Duration::from_secs(300),
            max_finished_runs: 1024,
            idle_kernel_ttl: Duration::from_secs(600),
            max_idle_kernels: 64,
            stall_timeout: Some(Duration::from_secs(600)),
            notification_buffer: 1024,
        }
    }
}

/// Who a connection acts for: a token's name (never the token), or
/// `local` for stdio. Runs, permission requests and sessions (its store:
/// see the module docs) belong to a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Tenant {
    /// The tenant's name.
    pub name: String,
}

impl Tenant {
    /// The tenant of local connections (stdio `keel rpc`, `keel serve` on
    /// loopback without tokens): the user's own session store.
    pub const LOCAL: &'static str = "local";
    /// The tenant of the single token of `--token-file` /
    /// `KEEL_SERVER_TOKEN`: the user's own session store too.
    pub const DEFAULT: &'static str = "default";

    /// The tenant `name`. The broker checks the name ([`Tenant::check_name`])
    /// when it sees it: a connection with an invalid one is refused every
    /// method.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }

    /// The tenant of a local (stdio) connection.
    pub fn local() -> Self {
        Self::new(Self::LOCAL)
    }

    /// Whether `name` may name a tenant: 1 to 64 of `A-Z a-z 0-9 _ -`
    /// (so never `..`, `/` or empty: a named tenant's name is a directory
    /// under the session directory). A transport may check its token
    /// names with it at startup.
    pub fn check_name(name: &str) -> Result<(), HostError> {
        let valid = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
        if valid {
            return Ok(());
        }
        let shown: String = name.chars().take(64).collect();
        Err(HostError::InvalidTenant { name: shown })
    }
}

/// The broker: cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: BrokerConfig,
    pub(crate) stores: Stores,
    pub(crate) kernels: Kernels,
    pub(crate) admission: Admission,
    pub(crate) runs: RunMap,
    pub(crate) counters: Arc<Counters>,
    pub(crate) draining: AtomicBool,
    next_peer: AtomicU64,
}

impl Broker {
    /// A broker over the session store `config` names.
    pub fn new(config: BrokerConfig) -> Result<Broker, HostError> {
        let store = Arc::new(sessions::open_store(config.session_dir.as_deref())?);
        Ok(Self::with_store(config, store))
    }

    /// A broker over `store` (its `session_dir` is not used): for a host
    /// that already holds the store open, since one process keeps each
    /// session open for writing through one store. `store` is the user's
    /// store (tenants `local` and `default`); named tenants' stores go
    /// under its directory, in `tenants/<NAME>/`.
    pub fn with_store(config: BrokerConfig, store: Arc<JsonlStore>) -> Broker {
        let kernels = Kernels::new(config.idle_kernel_ttl, config.max_idle_kernels);
        let mut limits = Limits::new(config.max_runs, config.max_queue)
            .with_default_quota(config.default_quota.clone());
        for (tenant, quota) in &config.quotas {
            limits = limits.with_quota(tenant.clone(), quota.clone());
        }
        Broker {
            inner: Arc::new(Inner {
                config,
                stores: Stores::new(store),
                kernels,
                admission: Admission::new(limits),
                runs: Arc::default(),
                counters: Arc::default(),
                draining: AtomicBool::new(false),
                next_peer: AtomicU64::new(1),
            }),
        }
    }

    /// A client connection. Dropping it ends its subscriptions; runs go on,
    /// permission requests stay pending for any client of the same tenant.
    pub fn connect(&self, tenant: Tenant) -> Connection {
        let (sender, receiver) = mpsc::channel(self.inner.config.notification_buffer.max(1));
        let id = self.inner.next_peer.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = Tenant::check_name(&tenant.name) {
            tracing::warn!(%error, "a connection's tenant is refused");
        }
        let peer = Arc::new(Peer::new(id, tenant.name, sender));
        Connection {
            caller: Caller {
                inner: Arc::clone(&self.inner),
                peer,
            },
            receiver,
        }
    }

    /// No new runs; waits up to `grace` for active runs, then cancels the
    /// rest (sessions intact). Returns when every run has settled.
    pub async fn drain(&self, grace: Duration) {
        self.inner.draining.store(true, Ordering::Release);
        self.inner.admission.drain();
        let deadline = tokio::time::Instant::now() + grace;
        // Again until none is live: a start that passed admission just
        // before the drain may add a run while the first ones are awaited.
        loop {
            let live: Vec<_> = lock(&self.inner.runs)
                .values()
                .filter(|record| !record.is_finished())
                .cloned()
                .collect();
            if live.is_empty() {
                return;
            }
            let all = futures::future::join_all(live.iter().map(|record| record.finished()));
            if tokio::time::timeout_at(deadline, all).await.is_err() {
                for record in &live {
                    record.run.cancel();
                }
                futures::future::join_all(live.iter().map(|record| record.finished())).await;
            }
        }
    }

    /// Builds (and caches) the kernel a `run/start` with `params` would
    /// use, so that a host can report a configuration error (no provider,
    /// an unreadable script, an unknown tool, a bad workspace) before it
    /// reads any request. Only `workspace`, `provider`, `model`, `mode` and
    /// `tools` of `params` matter. The kernel is the one over the user's
    /// store (tenants `local` and `default`).
    pub fn prepare(
        &self,
        params: &keel_protocol::rpc::methods::RunStartParams,
    ) -> Result<(), HostError> {
        let workspace =
            crate::sessions::workspace_root(Some(std::path::Path::new(&params.workspace)))?;
        let asked = kernels::Asked {
            provider: params.provider.clone(),
            model: params.model.clone(),
            mode: params.mode,
            tools: params.tools.clone(),
        };
        let setup = Kernels::setup(&self.inner.config, &workspace, &asked)?;
        self.inner
            .kernels
            .lease(&setup.config, &workspace, &self.inner.stores.user().store)
            .map(drop)
    }

    /// Counters for /metrics (runs active/queued/refused, events sent,
    /// lagged subscribers, per-tenant usage).
    pub fn metrics(&self) -> BrokerMetrics {
        let admission = self.inner.admission.snapshot();
        self.inner
            .counters
            .snapshot(self.inner.kernels.len(), admission.queued)
    }
}

/// One client. [`Connection::caller`] gives a cloneable handle for calling
/// methods concurrently (a `run/result` wait must not block the rest)
/// while this value reads notifications.
pub struct Connection {
    caller: Caller,
    receiver: mpsc::Receiver<Arc<Notification>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.caller.peer.close();
    }
}

impl Connection {
    /// Applies one method (`initialize`, `run/start`, …) and returns its result.
    pub async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        self.caller.call(method, params).await
    }

    /// The next notification for this client (`run/event`, …); the buffer
    /// behind it is bounded: a client that does not read loses its
    /// subscriptions (it is told with `run/events_lagged` and can
    /// resubscribe from its last `seq`), never grows the server's memory.
    /// Pending while there is nothing to tell; `None` never comes while
    /// the connection exists.
    pub async fn notification(&mut self) -> Option<Notification> {
        loop {
            match self.receiver.try_recv() {
                Ok(note) => return Some(Arc::unwrap_or_clone(note)),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            // A lagged notice comes after the events that were buffered.
            if let Some(notice) = self.caller.peer.take_lagged() {
                return Some(notice);
            }
            tokio::select! {
                note = self.receiver.recv() => return note.map(Arc::unwrap_or_clone),
                () = self.caller.peer.wake.notified() => {}
            }
        }
    }

    /// Cancels every run this connection started (stdio: stdin closed).
    pub fn cancel_started(&self) {
        self.caller.cancel_started();
    }

    /// Resolves when every run this connection started has settled.
    pub async fn settled(&self) {
        self.caller.settled().await;
    }

    /// A cloneable handle that calls methods as this connection.
    pub fn caller(&self) -> Caller {
        self.caller.clone()
    }
}

/// Calls methods as one connection; clone it into the tasks that serve
/// concurrent requests.
#[derive(Clone)]
pub struct Caller {
    inner: Arc<Inner>,
    peer: Arc<Peer>,
}

impl Caller {
    /// Applies one method and returns its result (see [`Connection::call`]).
    pub async fn call(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        methods::call(&self.inner, &self.peer, method, params).await
    }

    /// Cancels every run this connection started.
    pub fn cancel_started(&self) {
        for record in lock(&self.peer.started).iter() {
            record.run.cancel();
        }
    }

    /// The changes run `run_id` (of this connection's tenant) made to its
    /// workspace: what `keel run` prints after a run. Not a protocol
    /// method; for hosts in this process.
    pub async fn workspace_changes(
        &self,
        run_id: &str,
    ) -> Result<keel_tools::changes::WorkspaceChanges, RpcError> {
        let record = methods::run_of(&self.inner, &self.peer, run_id)?;
        record.run.workspace_changes().await.map_err(|error| {
            RpcError::new(keel_protocol::rpc::ErrorKind::Internal, error.to_string())
        })
    }

    /// Resolves when every run this connection started has settled.
    pub async fn settled(&self) {
        let started: Vec<_> = lock(&self.peer.started).clone();
        futures::future::join_all(started.iter().map(|record| record.finished())).await;
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked
/// (no broker code panics while holding one).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
