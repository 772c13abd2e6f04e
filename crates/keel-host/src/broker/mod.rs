//! The broker: one transport-free place where host messages become run
//! calls, shared by every host that serves the JSON-RPC protocol (`keel rpc`
//! over stdio, `keel serve` over WebSocket) — SPEC §9 and §11.
//!
//! - [`admission`]: how many runs may be active or waiting, per tenant
//!   quotas, round-robin between tenants, and drain.

pub mod admission;
