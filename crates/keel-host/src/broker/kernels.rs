//! The broker's kernels: built from the configuration exactly as `keel run`
//! builds its own, cached by (resolved configuration, workspace, session
//! store), evicted when idle.
//!
//! Each `run/start` resolves its settings afresh — `Settings::load` with
//! the broker's sources and the run's workspace (so the workspace's
//! project layer applies, and may only narrow), then `Settings::resolve`
//! with the run's choices — because the mode, which belongs to the run,
//! comes out of that resolution. The kernel, which is the expensive part,
//! is looked up by what the resolution chose (provider, model, base URL,
//! script, tools, readable paths, workspace) and by the tenant's session
//! store (a kernel writes to the store it was built over, so two tenants
//! with separate stores never share one), and built only on a miss.
//!
//! Invariants: a kernel writes only to the store of its key; a
//! kernel with a run on it ([`Lease`] alive) is never evicted; an idle one
//! goes after `idle_kernel_ttl` (checked on every lookup), and a miss
//! first evicts the least recently used idle ones down to
//! `max_idle_kernels - 1`, so the cache never holds more than the kernels
//! of runs live since the last miss plus `max_idle_kernels`, however many
//! workspaces or models clients name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use keel_kernel::AgentKernel;
use keel_protocol::PermissionMode;
use keel_session::JsonlStore;

use crate::{Choices, HostConfig, HostError, ProviderChoice, RunSetup, Settings, Sources};

use super::BrokerConfig;

/// What a run asks of its kernel, besides the broker's configuration.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asked {
    pub(crate) provider: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) mode: Option<PermissionMode>,
    pub(crate) tools: Option<Vec<String>>,
}

/// The cache.
pub(crate) struct Kernels {
    ttl: Duration,
    max_idle: usize,
    cache: Arc<Mutex<HashMap<Key, Cached>>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    workspace: PathBuf,
    /// The session store's directory (one store per directory in a broker).
    store: PathBuf,
    provider: String,
    model: Option<String>,
    base_url: Option<String>,
    script: Option<PathBuf>,
    tools: Option<Vec<String>>,
    readable: Vec<PathBuf>,
}

struct Cached {
    kernel: AgentKernel,
    leases: usize,
    last_used: Instant,
}

/// A kernel in use by one run; dropping it marks the kernel idle from now.
pub(crate) struct Lease {
    kernel: AgentKernel,
    key: Key,
    cache: Arc<Mutex<HashMap<Key, Cached>>>,
}

impl Lease {
    pub(crate) fn kernel(&self) -> &AgentKernel {
        &self.kernel
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(cached) = lock(&self.cache).get_mut(&self.key) {
            cached.leases = cached.leases.saturating_sub(1);
            cached.last_used = Instant::now();
        }
    }
}

impl Kernels {
    pub(crate) fn new(ttl: Duration, max_idle: usize) -> Self {
        Self {
            ttl,
            max_idle,
            cache: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// How many kernels are cached.
    pub(crate) fn len(&self) -> usize {
        lock(&self.cache).len()
    }

    /// The settings for a run in `workspace` (canonical) with `asked`:
    /// the same layers and the same resolution as `keel run`.
    pub(crate) fn setup(
        config: &BrokerConfig,
        workspace: &Path,
        asked: &Asked,
    ) -> Result<RunSetup, HostError> {
        let settings = Settings::load(&Sources {
            config_file: config.config_file.clone(),
            profile: config.profile.clone(),
            overrides: config.overrides.clone(),
            workspace: Some(workspace.to_path_buf()),
        })?;
        let setup = settings.resolve(Choices {
            provider: asked.provider.clone().or_else(|| config.provider.clone()),
            model: asked.model.clone().or_else(|| config.model.clone()),
            base_url: config.base_url.clone(),
            script: config.script.clone(),
            mode: asked.mode,
            tools: asked.tools.clone(),
            sandbox_read: config.sandbox_read.clone(),
            workspace: Some(workspace.to_path_buf()),
        })?;
        Ok(RunSetup {
            config: config.host.apply(setup.config),
            ..setup
        })
    }

    /// The kernel for `config` (resolved for `workspace`) over `store`,
    /// built on a miss.
    pub(crate) fn lease(
        &self,
        config: &HostConfig,
        workspace: &Path,
        store: &Arc<JsonlStore>,
    ) -> Result<Lease, HostError> {
        let key = key_of(config, workspace, store.dir());
        let now = Instant::now();
        {
            let mut cache = lock(&self.cache);
            let ttl = self.ttl;
            cache.retain(|_, cached| {
                cached.leases > 0 || now.duration_since(cached.last_used) < ttl
            });
            if let Some(cached) = cache.get_mut(&key) {
                cached.leases += 1;
                cached.last_used = now;
                return Ok(Lease {
                    kernel: cached.kernel.clone(),
                    key,
                    cache: Arc::clone(&self.cache),
                });
            }
        }
        // Built outside the lock: assembly reads files. Two runs missing
        // at once build twice and keep the first; both are correct.
        let store: Arc<dyn keel_session::SessionStore> = store.clone();
        let built = config.kernel(store)?;
        let mut cache = lock(&self.cache);
        if !cache.contains_key(&key) {
            evict_idle(&mut cache, self.max_idle);
        }
        let cached = cache.entry(key.clone()).or_insert(Cached {
            kernel: built,
            leases: 0,
            last_used: now,
        });
        cached.leases += 1;
        Ok(Lease {
            kernel: cached.kernel.clone(),
            key,
            cache: Arc::clone(&self.cache),
        })
    }
}

/// Drops the least recently used idle kernels until fewer than `max_idle`
/// are idle (room for the one about to be added, which is leased at once).
fn evict_idle(cache: &mut HashMap<Key, Cached>, max_idle: usize) {
    loop {
        let idle = cache.values().filter(|cached| cached.leases == 0).count();
        if idle < max_idle.max(1) {
            return;
        }
        let oldest = cache
            .iter()
            .filter(|(_, cached)| cached.leases == 0)
            .min_by_key(|(_, cached)| cached.last_used)
            .map(|(key, _)| key.clone());
        match oldest {
            Some(key) => {
                cache.remove(&key);
            }
            None => return,
        }
    }
}

fn key_of(config: &HostConfig, workspace: &Path, store: &Path) -> Key {
    let (provider, model, base_url, script) = match &config.provider {
        ProviderChoice::Script { model, .. } => {
            ("scripted (inline)".to_owned(), model.clone(), None, None)
        }
        ProviderChoice::ScriptFile { path, model } => {
            ("scripted".to_owned(), model.clone(), None, path.clone())
        }
        ProviderChoice::Configured {
            name,
            model,
            base_url,
            ..
        } => (name.clone(), model.clone(), base_url.clone(), None),
        ProviderChoice::Replay { name, model, .. } => {
            (format!("{name} (replayed)"), model.clone(), None, None)
        }
    };
    Key {
        workspace: workspace.to_path_buf(),
        store: store.to_path_buf(),
        provider,
        model,
        base_url,
        script,
        tools: config.tools.clone(),
        readable: config.sandbox.readable.clone(),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; a poisoned one still
    // holds consistent data.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
