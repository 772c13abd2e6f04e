//! The host protocol's methods and notifications, by name.
//!
//! Each method's parameters are `<Name>Params` and its result
//! `<Name>Response` (defined beside the broker that applies them).

/// Every method a client may call, in the order the docs list them.
pub const METHODS: &[&str] = &[
    "initialize",
    "run/start",
    "run/steer",
    "run/follow_up",
    "run/cancel",
    "run/result",
    "run/subscribe",
    "run/queue",
    "run/queue/clear",
    "permission/resolve",
    "session/list",
    "session/get",
    "session/tree",
    "session/fork",
    "session/set_leaf",
    "session/compact",
    "session/resume",
    "models/list",
];

/// The notification that carries one run event: `{"run_id", "event"}`.
pub const RUN_EVENT: &str = "run/event";
