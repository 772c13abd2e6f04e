//! JSON Schemas of the public wire types, generated from the Rust types.
//!
//! `keel schema` prints them and `schema/` holds the checked-in copies; a test
//! fails when the two differ, so a change to the wire format is a visible diff.

use schemars::{JsonSchema, Schema, schema_for};

use crate::rpc::{self, methods as m};
use crate::{Entry, HostControl, HostLine, Message, ProviderEvent, RunEvent, RunResult, ToolSpec};

/// Every public schema, as `(file stem, schema)` pairs in a stable order:
/// the library's types, then the host protocol's envelope and each
/// method's parameters and result (`rpc_<method>_params` / `_response`).
pub fn all() -> Vec<(&'static str, Schema)> {
    vec![
        ("run_event", schema::<RunEvent>()),
        ("run_result", schema::<RunResult>()),
        ("message", schema::<Message>()),
        ("provider_event", schema::<ProviderEvent>()),
        ("entry", schema::<Entry>()),
        ("tool_spec", schema::<ToolSpec>()),
        ("host_control", schema::<HostControl>()),
        ("host_line", schema::<HostLine>()),
        ("rpc_request", schema::<rpc::Request>()),
        ("rpc_response", schema::<rpc::Response>()),
        ("rpc_notification", schema::<rpc::Notification>()),
        ("rpc_initialize_params", schema::<m::InitializeParams>()),
        ("rpc_initialize_response", schema::<m::InitializeResponse>()),
        ("rpc_run_start_params", schema::<m::RunStartParams>()),
        ("rpc_run_start_response", schema::<m::RunStartResponse>()),
        ("rpc_run_steer_params", schema::<m::RunSteerParams>()),
        ("rpc_run_steer_response", schema::<m::RunSteerResponse>()),
        ("rpc_run_follow_up_params", schema::<m::RunFollowUpParams>()),
        (
            "rpc_run_follow_up_response",
            schema::<m::RunFollowUpResponse>(),
        ),
        ("rpc_run_cancel_params", schema::<m::RunCancelParams>()),
        ("rpc_run_cancel_response", schema::<m::RunCancelResponse>()),
        ("rpc_run_result_params", schema::<m::RunResultParams>()),
        ("rpc_run_result_response", schema::<m::RunResultResponse>()),
        (
            "rpc_run_subscribe_params",
            schema::<m::RunSubscribeParams>(),
        ),
        (
            "rpc_run_subscribe_response",
            schema::<m::RunSubscribeResponse>(),
        ),
        ("rpc_run_queue_params", schema::<m::RunQueueParams>()),
        ("rpc_run_queue_response", schema::<m::RunQueueResponse>()),
        (
            "rpc_run_queue_clear_params",
            schema::<m::RunQueueClearParams>(),
        ),
        (
            "rpc_run_queue_clear_response",
            schema::<m::RunQueueClearResponse>(),
        ),
        (
            "rpc_permission_resolve_params",
            schema::<m::PermissionResolveParams>(),
        ),
        (
            "rpc_permission_resolve_response",
            schema::<m::PermissionResolveResponse>(),
        ),
        ("rpc_session_list_params", schema::<m::SessionListParams>()),
        (
            "rpc_session_list_response",
            schema::<m::SessionListResponse>(),
        ),
        ("rpc_session_get_params", schema::<m::SessionGetParams>()),
        (
            "rpc_session_get_response",
            schema::<m::SessionGetResponse>(),
        ),
        ("rpc_session_tree_params", schema::<m::SessionTreeParams>()),
        (
            "rpc_session_tree_response",
            schema::<m::SessionTreeResponse>(),
        ),
        ("rpc_session_fork_params", schema::<m::SessionForkParams>()),
        (
            "rpc_session_fork_response",
            schema::<m::SessionForkResponse>(),
        ),
        (
            "rpc_session_set_leaf_params",
            schema::<m::SessionSetLeafParams>(),
        ),
        (
            "rpc_session_set_leaf_response",
            schema::<m::SessionSetLeafResponse>(),
        ),
        (
            "rpc_session_compact_params",
            schema::<m::SessionCompactParams>(),
        ),
        (
            "rpc_session_compact_response",
            schema::<m::SessionCompactResponse>(),
        ),
        (
            "rpc_session_resume_params",
            schema::<m::SessionResumeParams>(),
        ),
        (
            "rpc_session_resume_response",
            schema::<m::SessionResumeResponse>(),
        ),
        ("rpc_models_list_params", schema::<m::ModelsListParams>()),
        (
            "rpc_models_list_response",
            schema::<m::ModelsListResponse>(),
        ),
        (
            "rpc_run_event_notification",
            schema::<m::RunEventNotification>(),
        ),
        (
            "rpc_events_lagged_notification",
            schema::<m::EventsLaggedNotification>(),
        ),
    ]
}

fn schema<T: JsonSchema>() -> Schema {
    schema_for!(T)
}
