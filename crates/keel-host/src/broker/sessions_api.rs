//! The session methods (`session/*`, `models/list`): reads of the
//! caller's tenant's store (see `stores`: another tenant's session is
//! `not_found`), and the writes that need the session to themselves
//! (resume, set_leaf, compact), which claim it like a run does.
//!
//! Listing is cursor-paginated: a cursor is the id of the last item of
//! the previous page, so a page boundary stays put when new sessions
//! appear at the top (a cursor whose item vanished is `invalid_params`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use keel_kernel::RunSpec;
use keel_protocol::Entry;
use keel_protocol::rpc::RpcError;
use keel_protocol::rpc::methods::{
    ModelSummary, ModelsListParams, ModelsListResponse, ProviderModels, RunStartResponse,
    SessionCompactParams, SessionCompactResponse, SessionForkParams, SessionForkResponse,
    SessionGetParams, SessionGetResponse, SessionListParams, SessionListResponse,
    SessionResumeParams, SessionSetLeafParams, SessionSetLeafResponse, SessionSummary,
    SessionTreeParams, SessionTreeResponse, SessionView, TreeNode,
};
use keel_session::SessionStore;

use super::kernels::Asked;
use super::methods::{admit, claim_session, hold, kernel_for, limits, store_of, workspace};
use super::peer::Peer;
use super::runs::Holds;
use super::stores::TenantStore;
use super::{Inner, errors, lock};
use crate::{Settings, Sources, sessions};

/// `session/resume`: continues the session's interrupted run, as `keel
/// resume` does (`AgentKernel::resume_with`).
pub(crate) async fn resume(
    inner: &Arc<Inner>,
    peer: &Arc<Peer>,
    params: SessionResumeParams,
) -> Result<RunStartResponse, RpcError> {
    if inner.draining.load(Ordering::Acquire) {
        inner.counters.refused(&peer.tenant);
        return Err(errors::draining());
    }
    let store = store_of(inner, peer)?;
    let id = resolve(&store, &params.session_id).await?;
    let permit = admit(inner, peer).await?;
    let claim = claim_session(&store, &id)?;
    let (root, moved_from) = session_workspace(&store, &id, params.workspace.as_deref()).await?;
    let asked = Asked {
        provider: params.provider,
        model: params.model,
        mode: params.mode,
        tools: params.tools,
    };
    let (lease, mode) = kernel_for(inner, peer, &store, &root, &asked)?;
    let mut spec = RunSpec::new("")
        .session(id)
        .mode(mode)
        .max_turns(params.max_turns)
        .max_cost_usd(params.max_cost_usd);
    if let Some(from) = moved_from {
        spec = spec.moved_from_workspace(from);
    }
    let run = lease
        .kernel()
        .resume_with(limits(inner, spec))
        .await
        .map_err(|error| errors::kernel(&error))?;
    let holds: Holds = Box::new((permit, lease, claim));
    let record = hold(inner, peer, run, holds, params.subscribe.unwrap_or(true))?;
    Ok(RunStartResponse {
        run_id: record.run_id.clone(),
        session_id: record.session_id.clone(),
    })
}

/// `session/list`.
pub(crate) async fn list(
    inner: &Inner,
    peer: &Peer,
    params: SessionListParams,
) -> Result<SessionListResponse, RpcError> {
    let store = store_of(inner, peer)?;
    let workspace = match &params.workspace {
        Some(given) => Some(workspace(given)?),
        None => None,
    };
    let (all, _) = sessions::sessions_of(store.store.as_ref(), workspace.as_deref())
        .await
        .map_err(|error| errors::host(&error))?;
    let limit = page_size(params.limit, 50, 500);
    let start = after_cursor(
        all.iter().map(|info| info.id.as_str()),
        params.cursor.as_deref(),
    )?;
    let busy = lock(&store.busy).clone();
    let page: Vec<SessionSummary> = all
        .iter()
        .skip(start)
        .take(limit)
        .map(|info| SessionSummary {
            id: info.id.clone(),
            title: info.title.clone(),
            entries: info.entries as u64,
            created: info.created,
            last_activity: info.last_activity,
            parent_session: info.parent_session.clone(),
            workspace: info.workspace.clone(),
            problem: info.problem.clone(),
            busy: busy.contains(&info.id),
        })
        .collect();
    let next_cursor = (start + page.len() < all.len())
        .then(|| page.last().map(|last| last.id.clone()))
        .flatten();
    Ok(SessionListResponse {
        sessions: page,
        next_cursor,
    })
}

/// `session/get`.
pub(crate) async fn get(
    inner: &Inner,
    peer: &Peer,
    params: SessionGetParams,
) -> Result<SessionGetResponse, RpcError> {
    let tenant = store_of(inner, peer)?;
    let id = resolve(&tenant, &params.session_id).await?;
    let store = tenant.store.as_ref();
    let entries = match params.view {
        SessionView::Active => store.active_branch(&id).await,
        SessionView::All => store.entries(&id).await,
    }
    .map_err(|error| errors::session(&error))?;
    let leaf_id = store
        .leaf(&id)
        .await
        .map_err(|error| errors::session(&error))?;
    let limit = page_size(params.limit, 200, 1000);
    let start = after_cursor(
        entries.iter().map(|entry| entry.id.as_str()),
        params.cursor.as_deref(),
    )?;
    let total = entries.len();
    let page: Vec<Entry> = entries.into_iter().skip(start).take(limit).collect();
    let next_cursor = (start + page.len() < total)
        .then(|| page.last().map(|last| last.id.clone()))
        .flatten();
    Ok(SessionGetResponse {
        session_id: id,
        leaf_id,
        entries: page,
        next_cursor,
    })
}

/// `session/tree`.
pub(crate) async fn tree(
    inner: &Inner,
    peer: &Peer,
    params: SessionTreeParams,
) -> Result<SessionTreeResponse, RpcError> {
    let tenant = store_of(inner, peer)?;
    let id = resolve(&tenant, &params.session_id).await?;
    let store = tenant.store.as_ref();
    let entries = store
        .entries(&id)
        .await
        .map_err(|error| errors::session(&error))?;
    let active: std::collections::HashSet<String> = store
        .active_branch(&id)
        .await
        .map_err(|error| errors::session(&error))?
        .into_iter()
        .map(|entry| entry.id)
        .collect();
    let leaf_id = store
        .leaf(&id)
        .await
        .map_err(|error| errors::session(&error))?;
    let nodes = entries
        .iter()
        .map(|entry| TreeNode {
            id: entry.id.clone(),
            parent_id: entry.parent_id.clone(),
            kind: entry.kind().to_owned(),
            timestamp: entry.timestamp,
            active: active.contains(&entry.id),
        })
        .collect();
    Ok(SessionTreeResponse {
        session_id: id,
        leaf_id,
        nodes,
    })
}

/// `session/fork`.
pub(crate) async fn fork(
    inner: &Inner,
    peer: &Peer,
    params: SessionForkParams,
) -> Result<SessionForkResponse, RpcError> {
    let store = store_of(inner, peer)?;
    let id = resolve(&store, &params.session_id).await?;
    let entry = entry_of(&store, &id, &params.entry_id).await?;
    let fork = store
        .store
        .fork(&id, &entry)
        .await
        .map_err(|error| errors::session(&error))?;
    Ok(SessionForkResponse {
        session_id: fork,
        leaf_id: entry,
    })
}

/// `session/set_leaf`: refused while a run writes to the session.
pub(crate) async fn set_leaf(
    inner: &Inner,
    peer: &Peer,
    params: SessionSetLeafParams,
) -> Result<SessionSetLeafResponse, RpcError> {
    let store = store_of(inner, peer)?;
    let id = resolve(&store, &params.session_id).await?;
    let _claim = claim_session(&store, &id)?;
    let entry = entry_of(&store, &id, &params.entry_id).await?;
    store
        .store
        .open_for_writing(&id)
        .await
        .map_err(|error| errors::session(&error))?;
    store
        .store
        .set_leaf(&id, &entry)
        .await
        .map_err(|error| errors::session(&error))?;
    Ok(SessionSetLeafResponse {
        session_id: id,
        leaf_id: entry,
    })
}

/// `session/compact`: refused while a run writes to the session.
pub(crate) async fn compact(
    inner: &Inner,
    peer: &Peer,
    params: SessionCompactParams,
) -> Result<SessionCompactResponse, RpcError> {
    let store = store_of(inner, peer)?;
    let id = resolve(&store, &params.session_id).await?;
    let _claim = claim_session(&store, &id)?;
    let (root, _) = session_workspace(&store, &id, params.workspace.as_deref()).await?;
    let asked = Asked {
        provider: params.provider,
        model: params.model,
        ..Asked::default()
    };
    let (lease, _) = kernel_for(inner, peer, &store, &root, &asked)?;
    let report = lease
        .kernel()
        .compact(&id, params.instructions.as_deref())
        .await
        .map_err(|error| errors::kernel(&error))?;
    Ok(SessionCompactResponse {
        checkpoint_id: report.checkpoint_id,
        tokens_before: report.tokens_before,
        tokens_after: report.tokens_after,
        covered_entries: report.covered_entries as u64,
    })
}

/// `models/list`: the catalog of the broker's configuration (without a
/// workspace's project layer), and whether each provider's key is set —
/// never the key.
pub(crate) fn models(
    inner: &Inner,
    params: ModelsListParams,
) -> Result<ModelsListResponse, RpcError> {
    let config = &inner.config;
    let settings = Settings::load(&Sources {
        config_file: config.config_file.clone(),
        profile: config.profile.clone(),
        overrides: config.overrides.clone(),
        workspace: None,
    })
    .map_err(|error| errors::host(&error))?;
    let providers = settings
        .catalog
        .providers
        .iter()
        .filter(|(name, _)| {
            params
                .provider
                .as_ref()
                .is_none_or(|wanted| wanted == *name)
        })
        .map(|(name, provider)| ProviderModels {
            name: name.clone(),
            default_model: provider.default_model.clone(),
            key_available: provider.api_key_env.as_ref().is_none_or(|variable| {
                std::env::var_os(variable).is_some_and(|value| !value.is_empty())
            }),
            models: provider
                .models
                .iter()
                .map(|(id, info)| ModelSummary {
                    id: id.clone(),
                    context_window: info.context_window,
                    max_output: info.max_output,
                    input_price: info.input_price,
                    output_price: info.output_price,
                })
                .collect(),
            aliases: provider.aliases.clone(),
        })
        .collect::<Vec<_>>();
    if let Some(wanted) = &params.provider
        && providers.is_empty()
    {
        return Err(RpcError::new(
            keel_protocol::rpc::ErrorKind::NotFound,
            format!("no provider `{wanted}` in the configuration"),
        ));
    }
    Ok(ModelsListResponse { providers })
}

/// The full id of the session `wanted` names in `store`.
async fn resolve(store: &TenantStore, wanted: &str) -> Result<String, RpcError> {
    sessions::resolve_session(store.store.as_ref(), wanted)
        .await
        .map_err(|error| errors::host(&error))
}

/// The full id of the entry `wanted` names in session `id`.
async fn entry_of(store: &TenantStore, id: &str, wanted: &str) -> Result<String, RpcError> {
    let entries = store
        .store
        .entries(id)
        .await
        .map_err(|error| errors::session(&error))?;
    sessions::resolve_entry(entries.iter().map(|entry| entry.id.as_str()), wanted)
        .map_err(|error| errors::host(&error))
}

/// The workspace for an operation on session `id`: the one given, or the
/// one the session records; and, when given and different, the session's
/// (for the run to record the move).
async fn session_workspace(
    store: &TenantStore,
    id: &str,
    given: Option<&str>,
) -> Result<(PathBuf, Option<String>), RpcError> {
    if let Some(given) = given {
        let root = workspace(given)?;
        let moved = sessions::resume_workspace(&store.store, id, &root)
            .await
            .map_err(|error| errors::host(&error))?;
        return Ok((root, moved));
    }
    let recorded = sessions::recorded_workspace(&store.store, id)
        .await
        .map_err(|error| errors::host(&error))?
        .ok_or_else(|| {
            errors::invalid(format!(
                "session `{id}` records no workspace: pass `workspace`"
            ))
        })?;
    Ok((workspace(&recorded)?, None))
}

/// The position after the item `cursor` names (0 without a cursor).
fn after_cursor<'a>(
    mut ids: impl Iterator<Item = &'a str>,
    cursor: Option<&str>,
) -> Result<usize, RpcError> {
    let Some(cursor) = cursor else {
        return Ok(0);
    };
    ids.position(|id| id == cursor)
        .map(|position| position + 1)
        .ok_or_else(|| errors::invalid(format!("unknown cursor `{cursor}`")))
}

fn page_size(asked: Option<u32>, default: usize, max: usize) -> usize {
    asked.map_or(default, |asked| (asked as usize).clamp(1, max))
}
