//! Each tenant's session store, and the sessions its runs hold.
//!
//! The layout, under the broker's session directory `DIR` (`--session-dir`,
//! else `$XDG_DATA_HOME/keel/sessions`, or the store given to
//! `Broker::with_store`):
//!
//! ```text
//! DIR/<id>.jsonl              tenants `local` and `default`: the user's own store
//! DIR/tenants/<NAME>/<id>.jsonl   every other tenant NAME (a named token)
//! ```
//!
//! `local` (stdio, loopback without tokens) and `default` (the single
//! token of `--token-file` / `KEEL_SERVER_TOKEN`) act for the user, so
//! they share the store `keel session list` shows. A named token gets its
//! own directory, created private to the user (0700) on its first use;
//! the user's store never lists it (it holds no `*.jsonl` file).
//!
//! # Invariants
//!
//! - A tenant name is checked ([`Tenant::check_name`]) before it is used
//!   as a path: `[A-Za-z0-9_-]{1,64}`, so never `..`, `/` or empty.
//! - One [`TenantStore`] (one `JsonlStore`, one busy set) per directory
//!   for the broker's life: the one-writer rule holds per store. The map
//!   grows only with the tenants the transports admit (configured token
//!   names), never with client input.
//! - Every session method and run resolves session ids in its tenant's
//!   store only, so another tenant's session is `not_found` like one that
//!   never existed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use keel_session::JsonlStore;

use super::{Tenant, lock};
use crate::HostError;

/// One store and the sessions live runs of this broker hold in it.
pub(crate) struct TenantStore {
    pub(crate) store: Arc<JsonlStore>,
    /// Session ids with a live run (or a set_leaf / compact) in this store.
    pub(crate) busy: Arc<Mutex<HashSet<String>>>,
}

impl TenantStore {
    fn new(store: Arc<JsonlStore>) -> Arc<Self> {
        Arc::new(Self {
            store,
            busy: Arc::default(),
        })
    }
}

/// The user's store and the named tenants' stores, opened on first use.
pub(crate) struct Stores {
    user: Arc<TenantStore>,
    named: Mutex<HashMap<String, Arc<TenantStore>>>,
}

impl Stores {
    /// Stores rooted at `user`, the user's own store.
    pub(crate) fn new(user: Arc<JsonlStore>) -> Self {
        Self {
            user: TenantStore::new(user),
            named: Mutex::new(HashMap::new()),
        }
    }

    /// The user's own store (`local`, `default`).
    pub(crate) fn user(&self) -> &Arc<TenantStore> {
        &self.user
    }

    /// The store of `tenant`: checked first, created (0700) on first use.
    pub(crate) fn of(&self, tenant: &str) -> Result<Arc<TenantStore>, HostError> {
        Tenant::check_name(tenant)?;
        if tenant == Tenant::LOCAL || tenant == Tenant::DEFAULT {
            return Ok(Arc::clone(&self.user));
        }
        if let Some(found) = lock(&self.named).get(tenant) {
            return Ok(Arc::clone(found));
        }
        // Opened outside the lock (it creates directories); two first uses
        // at once both create the same directory and keep the first store,
        // which no session was opened through yet.
        let dir = self.user.store.dir().join("tenants").join(tenant);
        let store = Arc::new(JsonlStore::new(&dir)?);
        tracing::debug!(tenant, dir = %dir.display(), "opened a tenant's session store");
        let mut named = lock(&self.named);
        Ok(Arc::clone(
            named
                .entry(tenant.to_owned())
                .or_insert_with(|| TenantStore::new(store)),
        ))
    }
}
