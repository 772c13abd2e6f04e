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
    Ok({
        let mut run_start_response = RunStartResponse::default();
        run_start_response.run_id = record.run_id.clone();
        run_start_response.session_id = record.session_id.clone();
        run_start_response
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
        .map(|info| {
            let mut session_summary = SessionSummary::default();
            session_summary.id = info.id.clone();
            session_summary.title = info.title.clone();
            session_summary.entries = info.entries as u64;
            session_summary.created = info.created;
            session_summary.last_activity = info.last_activity;
            session_summary.parent_session = info.parent_session.clone();
            session_summary.workspace = info.workspace.clone();
            session_summary.problem = info.problem.clone();
            session_summary.busy = busy.contains(&info.id);
            session_summary
        })
        .collect();
    let next_cursor = (start + page.len() < all.len())
        .then(|| page.last().map(|last| last.id.clone()))
        .flatten();
    Ok({
        let mut session_list_response = SessionListResponse::default();
        session_list_response.sessions = page;
        session_list_response.next_cursor = next_cursor;
        session_list_response
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
        _ => {
            return Err(RpcError::new(
                keel_protocol::rpc::ErrorKind::InvalidParams,
                "this server does not know that session view",
            ));
        }
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
    Ok({
        let mut session_get_response = SessionGetResponse::default();
        session_get_response.session_id = id;
        session_get_response.leaf_id = leaf_id;
        session_get_response.entries = page;
        session_get_response.next_cursor = next_cursor;
        session_get_response
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
        .map(|entry| {
            let mut tree_node = TreeNode::default();
            tree_node.id = entry.id.clone();
            tree_node.parent_id = entry.parent_id.clone();
            tree_node.kind = entry.kind().to_owned();
            tree_node.timestamp = entry.timestamp;
            tree_node.active = active.contains(&entry.id);
            tree_node
        })
        .collect();
    Ok({
        let mut session_tree_response = SessionTreeResponse::default();
        session_tree_response.session_id = id;
        session_tree_response.leaf_id = leaf_id;
        session_tree_response.nodes = nodes;
        session_tree_response
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
    let fork = keel_kernel::fork_session(&*store.store, &id, &entry)
        .await
        .map_err(|error| errors::session(&error))?;
    Ok({
        let mut session_fork_response = SessionForkResponse::default();
        session_fork_response.session_id = fork.session_id.clone();
        session_fork_response.leaf_id = fork.leaf_id;
        session_fork_response.closed_calls = fork.closed_calls;
        session_fork_response
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
    Ok({
        let mut session_set_leaf_response = SessionSetLeafResponse::default();
        session_set_leaf_response.session_id = id;
        session_set_leaf_response.leaf_id = entry;
        session_set_leaf_response
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
    Ok({
        let mut session_compact_response = SessionCompactResponse::default();
        session_compact_response.checkpoint_id = report.checkpoint_id;
        session_compact_response.tokens_before = report.tokens_before;
        session_compact_response.tokens_after = report.tokens_after;
        session_compact_response.covered_entries = report.covered_entries as u64;
        session_compact_response
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
        .map(|(name, provider)| {
            let mut provider_models = ProviderModels::default();
            provider_models.name = name.clone();
            provider_models.default_model = provider.default_model.clone();
            provider_models.key_available = provider.api_key_env.as_ref().is_none_or(|variable| {
                std::env::var_os(variable).is_some_and(|value| !value.is_empty())
            });
            provider_models.models = provider
                .models
                .iter()
                .map(|(id, info)| {
                    let mut model_summary = ModelSummary::default();
                    model_summary.id = id.clone();
                    model_summary.context_window = info.context_window;
                    model_summary.max_output = info.max_output;
                    model_summary.input_price = info.input_price;
                    model_summary.output_price = info.output_price;
                    model_summary
                })
                .collect();
            provider_models.aliases = provider.aliases.clone();
            provider_models
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
    Ok({
        let mut models_list_response = ModelsListResponse::default();
        models_list_response.providers = providers;
        models_list_response
    })
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
