//! Ids and the clock: the only place the kernel reads either.
//!
//! Every entry id, run id and timestamp the kernel produces comes from here,
//! so a test (or a future replay) has one seam to reason about.

use keel_protocol::TimestampMs;

/// A time-ordered unique id (UUID v7).
pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> TimestampMs {
    keel_protocol::now_ms()
}
