//! Every method, dispatched by name: the run methods here, the session
//! methods in `sessions_api`.
//!
//! Each method parses its `<Name>Params` (unknown fields refused), applies
//! itself through the kernel's public seam (`AgentKernel`, `AgentRun`) or
//! the store, and returns its `<Name>Response` as JSON; every failure is a
//! typed [`RpcError`]. A connection must call `initialize` first, and a
//! connection whose tenant name is invalid is refused every method
//! (`configuration`, `data.host_code` `invalid_tenant`). Session ids are
//! resolved in the tenant's own store (see `stores`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use keel_kernel::RunSpec;
use keel_protocol::rpc::methods::{
    Capabilities, InitializeParams, InitializeResponse, METHODS, NOTIFICATIONS,
    PermissionResolveParams, PermissionResolveResponse, RunCancelParams, RunCancelResponse,
    RunFollowUpParams, RunQueueClearParams, RunQueueClearResponse, RunQueueParams,
    RunQueueResponse, RunQueuedResponse, RunResultParams, RunResultResponse, RunStartParams,
    RunStartResponse, RunSteerParams, RunSubscribeParams,
};
use keel_protocol::rpc::{ErrorKind, PROTOCOL_VERSION, RpcError};
use keel_protocol::{PermissionAnswer, PermissionMode, PermissionScope, QueueKind};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::kernels::{Asked, Kernels, Lease};
use super::peer::Peer;
use super::runs::{Holds, RingBounds, RunRecord};
use super::stores::TenantStore;
use super::{Inner, Tenant, errors, lock, sessions_api};
use crate::sessions::{self, Resume};

/// Applies `method` for the connection `peer`.
pub(crate) async fn call(
    inner: &Arc<Inner>,
    peer: &Arc<Peer>,
    method: &str,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    Tenant::check_name(&peer.tenant).map_err(|error| errors::host(&error))?;
    if method == "initialize" {
        return reply(initialize(peer, parse(params)?)?);
    }
    if !peer.initialized.load(Ordering::Acquire) {
        return Err(RpcError::new(
            ErrorKind::NotInitialized,
            "call `initialize` first",
        ));
    }
    match method {
        "run/start" => reply(run_start(inner, peer, parse(params)?).await?),
        "run/steer" => {
            let params: RunSteerParams = parse(params)?;
            let record = run_of(inner, peer, &params.run_id)?;
            record
                .run
                .steer(params.text)
                .map_err(|error| errors::control(&error, &record.run_id))?;
            reply(RunQueuedResponse::new(params.run_id, QueueKind::Steer))
        }
        "run/follow_up" => {
            let params: RunFollowUpParams = parse(params)?;
            let record = run_of(inner, peer, &params.run_id)?;
            record
                .run
                .follow_up(params.text)
                .map_err(|error| errors::control(&error, &record.run_id))?;
            reply(RunQueuedResponse::new(params.run_id, QueueKind::FollowUp))
        }
        "run/cancel" => {
            let params: RunCancelParams = parse(params)?;
            let record = run_of(inner, peer, &params.run_id)?;
            let was_active = !record.is_finished();
            record.run.cancel();
            reply({
                let mut run_cancel_response = RunCancelResponse::default();
                run_cancel_response.was_active = was_active;
                run_cancel_response
            })
        }
        "run/result" => {
            let params: RunResultParams = parse(params)?;
            let record = run_of(inner, peer, &params.run_id)?;
            reply(RunResultResponse::new(record.finished().await))
        }
        "run/subscribe" => {
            let params: RunSubscribeParams = parse(params)?;
            let record = run_of(inner, peer, &params.run_id)?;
            reply(record.subscribe(peer, params.after_seq)?)
        }
        "run/queue" => {
            let params: RunQueueParams = parse(params)?;
            let record = run_of(inner, peer, &params.run_id)?;
            reply({
                let mut run_queue_response = RunQueueResponse::default();
                run_queue_response.queued = record.run.queued();
                run_queue_response
            })
        }
        "run/queue/clear" => {
            let params: RunQueueClearParams = parse(params)?;
            let record = run_of(inner, peer, &params.run_id)?;
            reply({
                let mut run_queue_clear_response = RunQueueClearResponse::default();
                run_queue_clear_response.cleared = record.run.clear_queue(params.queue);
                run_queue_clear_response
            })
        }
        "permission/resolve" => {
            let params: PermissionResolveParams = parse(params)?;
            let record = run_of(inner, peer, &params.run_id)?;
            let answer = PermissionAnswer::new(params.decision.into(), params.scope);
            record
                .run
                .resolve_permission(&params.request_id, answer)
                .map_err(|error| errors::control(&error, &record.run_id))?;
            reply({
                let mut permission_resolve_response = PermissionResolveResponse::default();
                permission_resolve_response.request_id = params.request_id;
                permission_resolve_response
            })
        }
        "session/resume" => reply(sessions_api::resume(inner, peer, parse(params)?).await?),
        "session/list" => reply(sessions_api::list(inner, peer, parse(params)?).await?),
        "session/get" => reply(sessions_api::get(inner, peer, parse(params)?).await?),
        "session/tree" => reply(sessions_api::tree(inner, peer, parse(params)?).await?),
        "session/fork" => reply(sessions_api::fork(inner, peer, parse(params)?).await?),
        "session/set_leaf" => reply(sessions_api::set_leaf(inner, peer, parse(params)?).await?),
        "session/compact" => reply(sessions_api::compact(inner, peer, parse(params)?).await?),
        "models/list" => reply(sessions_api::models(inner, parse(params)?)?),
        known if METHODS.contains(&known) => Err(RpcError::new(
            ErrorKind::MethodNotFound,
            format!("`{known}` is not implemented by this server yet"),
        )
        .with("method", known)),
        unknown => Err(
            RpcError::new(ErrorKind::MethodNotFound, format!("no method `{unknown}`"))
                .with("method", unknown),
        ),
    }
}

fn initialize(peer: &Peer, params: InitializeParams) -> Result<InitializeResponse, RpcError> {
    if let Some(version) = params.protocol_version
        && version != PROTOCOL_VERSION
    {
        return Err(errors::invalid(format!(
            "this server speaks protocol version {PROTOCOL_VERSION}, not {version}"
        ))
        .with("protocol_version", PROTOCOL_VERSION));
    }
    peer.initialized.store(true, Ordering::Release);
    Ok({
        let mut initialize_response = InitializeResponse::default();
        initialize_response.protocol_version = PROTOCOL_VERSION;
        initialize_response.server_name = "keel".to_owned();
        initialize_response.server_version = env!("CARGO_PKG_VERSION").to_owned();
        initialize_response.capabilities = {
            let mut capabilities = Capabilities::default();
            capabilities.methods = METHODS.iter().map(|method| (*method).to_owned()).collect();
            capabilities.notifications = NOTIFICATIONS
                .iter()
                .map(|name| (*name).to_owned())
                .collect();
            capabilities.modes = vec![
                PermissionMode::Plan,
                PermissionMode::Ask,
                PermissionMode::Auto,
                PermissionMode::Full,
            ];
            capabilities.permission_scopes = vec![PermissionScope::Once, PermissionScope::Always];
            capabilities
        };
        initialize_response
    })
}

/// `run/start`: resolve the settings for the workspace, lease the kernel,
/// claim the session, start the run, hold it.
async fn run_start(
    inner: &Arc<Inner>,
    peer: &Arc<Peer>,
    params: RunStartParams,
) -> Result<RunStartResponse, RpcError> {
    if inner.draining.load(Ordering::Acquire) {
        inner.counters.refused(&peer.tenant);
        return Err(errors::draining());
    }
    if params.fork_entry_id.is_some() && params.session_id.is_none() {
        return Err(errors::invalid("`fork_entry_id` needs `session_id`"));
    }
    let workspace = workspace(&params.workspace)?;
    let asked = Asked {
        provider: params.provider.clone(),
        model: params.model.clone(),
        mode: params.mode,
        tools: params.tools.clone(),
    };
    let store = store_of(inner, peer)?;
    let permit = admit(inner, peer).await?;
    let (lease, mode) = kernel_for(inner, peer, &store, &workspace, &asked)?;
    // The session: resolved (in the tenant's store only) and claimed
    // before it is opened for writing, so two starts on one session cannot
    // both pass.
    let mut claim = None;
    let mut session_id = None;
    if let Some(wanted) = &params.session_id {
        let id = sessions::resolve_session(store.store.as_ref(), wanted)
            .await
            .map_err(|error| errors::host(&error))?;
        if params.fork_entry_id.is_none() {
            claim = Some(claim_session(&store, &id)?);
        }
        let continued = sessions::continued_session(
            &store.store,
            Resume {
                session: Some(&id),
                fork: params.fork_entry_id.as_deref(),
                latest: false,
                workspace: Some(&workspace),
                workspace_given: true,
            },
        )
        .await
        .map_err(|error| errors::host(&error))?;
        session_id = continued.session_id;
    }
    let spec = limits(
        inner,
        RunSpec::new(params.prompt)
            .session_opt(session_id)
            .mode(mode)
            .max_turns(params.max_turns)
            .max_cost_usd(params.max_cost_usd),
    );
    let run = lease
        .kernel()
        .create_run(spec)
        .await
        .map_err(|error| errors::kernel(&error))?;
    let claim = match claim {
        Some(claim) => claim,
        // A new session (or a fork): nobody else can know its id yet.
        None => claim_session(&store, run.session_id())?,
    };
    let holds: Holds = Box::new((permit, lease, claim));
    let record = hold(inner, peer, run, holds, params.subscribe.unwrap_or(true))?;
    Ok({
        let mut run_start_response = RunStartResponse::default();
        run_start_response.run_id = record.run_id.clone();
        run_start_response.session_id = record.session_id.clone();
        run_start_response
    })
}

/// A slot for one run of `peer`'s tenant (waits in the bounded queue);
/// refusals are counted and answered at once.
pub(crate) async fn admit(
    inner: &Inner,
    peer: &Peer,
) -> Result<super::admission::Permit, RpcError> {
    inner
        .admission
        .admit(&peer.tenant)
        .await
        .map_err(|refusal| {
            inner.counters.refused(&peer.tenant);
            RpcError::from(refusal)
        })
}

/// The run spec with the broker's own limits: the kernel's stall watchdog
/// (`BrokerConfig::stall_timeout`), so a run whose model or tool hangs
/// still ends, failed with `run_stalled`, with one terminal notification.
pub(crate) fn limits(inner: &Inner, spec: RunSpec) -> RunSpec {
    spec.stall_timeout(inner.config.stall_timeout)
}

/// The session store of `peer`'s tenant (opened on its first use).
pub(crate) fn store_of(inner: &Inner, peer: &Peer) -> Result<Arc<TenantStore>, RpcError> {
    inner
        .stores
        .of(&peer.tenant)
        .map_err(|error| errors::host(&error))
}

/// The kernel over `store` for a run in `workspace` with `asked`, and the
/// run's mode.
/// Refused with `not_allowed` past the tenant's ceiling (`authority`).
pub(crate) fn kernel_for(
    inner: &Inner,
    peer: &Peer,
    store: &TenantStore,
    workspace: &std::path::Path,
    asked: &Asked,
) -> Result<(Lease, PermissionMode), RpcError> {
    let setup =
        Kernels::setup(&inner.config, workspace, asked).map_err(|error| errors::host(&error))?;
    let canonical = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    super::authority::of(&inner.config, &peer.tenant).check_run(
        &peer.tenant,
        setup.mode,
        &canonical,
    )?;
    let lease = inner
        .kernels
        .lease(&setup.config, workspace, &store.store)
        .map_err(|error| errors::host(&error))?;
    Ok((lease, setup.mode))
}

/// Holds a started run in the broker, subscribing `peer` when asked.
pub(crate) fn hold(
    inner: &Arc<Inner>,
    peer: &Arc<Peer>,
    run: keel_kernel::AgentRun,
    holds: Holds,
    subscribe: bool,
) -> Result<Arc<RunRecord>, RpcError> {
    let config = &inner.config;
    let bounds = RingBounds {
        events: config.ring_events,
        bytes: config.ring_bytes,
        grace: config.ring_grace,
        // Never fewer than can run at once.
        keep: config.max_finished_runs.max(config.max_runs),
    };
    let record = RunRecord::start(
        run,
        super::runs::Owner {
            tenant: peer.tenant.clone(),
            authority: super::authority::of(config, &peer.tenant),
        },
        subscribe.then_some(peer),
        holds,
        bounds,
        &inner.runs,
        &inner.counters,
    )?;
    let mut started = lock(&peer.started);
    started.retain(|record| !record.is_finished());
    started.push(Arc::clone(&record));
    Ok(record)
}

/// A session claimed by a live run of this broker; released on drop.
pub(crate) struct SessionClaim {
    id: String,
    busy: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl Drop for SessionClaim {
    fn drop(&mut self) {
        lock(&self.busy).remove(&self.id);
    }
}

/// Claims `session_id` of `store` for one run; `session_busy` if a run
/// has it.
pub(crate) fn claim_session(
    store: &TenantStore,
    session_id: &str,
) -> Result<SessionClaim, RpcError> {
    if !lock(&store.busy).insert(session_id.to_owned()) {
        return Err(errors::busy(session_id));
    }
    Ok(SessionClaim {
        id: session_id.to_owned(),
        busy: Arc::clone(&store.busy),
    })
}

/// The run `run_id` of `peer`'s tenant.
pub(crate) fn run_of(inner: &Inner, peer: &Peer, run_id: &str) -> Result<Arc<RunRecord>, RpcError> {
    lock(&inner.runs)
        .get(run_id)
        .filter(|record| record.tenant == peer.tenant)
        .cloned()
        .ok_or_else(|| errors::no_run(run_id))
}

/// A workspace parameter: an absolute path to a directory, canonical.
pub(crate) fn workspace(given: &str) -> Result<PathBuf, RpcError> {
    let path = PathBuf::from(given);
    if given.is_empty() || !path.is_absolute() {
        return Err(RpcError::new(
            ErrorKind::InvalidParams,
            "`workspace` must be an absolute path on the server",
        ));
    }
    let root = std::fs::canonicalize(&path).map_err(|error| {
        RpcError::new(
            ErrorKind::Configuration,
            format!("workspace {}: {error}", path.display()),
        )
        .with("host_code", "workspace")
    })?;
    if !root.is_dir() {
        return Err(RpcError::new(
            ErrorKind::Configuration,
            format!("workspace {} is not a directory", path.display()),
        )
        .with("host_code", "workspace"));
    }
    Ok(root)
}

/// Parses a method's parameters; absent parameters are `{}`.
pub(crate) fn parse<T: DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    let params = params.unwrap_or_else(|| Value::Object(serde_json::Map::new()));
    serde_json::from_value(params).map_err(|error| errors::invalid(error.to_string()))
}

/// A method's result as JSON.
pub(crate) fn reply<T: Serialize>(result: T) -> Result<Value, RpcError> {
    serde_json::to_value(result).map_err(|error| {
        RpcError::new(
            ErrorKind::Internal,
            format!("the result could not be serialized: {error}"),
        )
    })
}
