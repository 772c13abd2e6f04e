//! Named failpoints: places in a run where the crash test kills the process.
//!
//! Issue 17's crash test must kill `keel` at exact points of a run (after
//! an assistant message is acknowledged, after an effect record, while a
//! command runs, after the results, between the records of one group), not
//! only after random delays. Each such place calls [`hit`] with its name.
//!
//! Invariants: without the `enabled` feature, [`hit`] is an empty inline
//! function and the environment is never read, so a normal or release build
//! cannot be killed by a point. With it, the point named by
//! `KEEL_FAILPOINT=NAME` or `KEEL_FAILPOINT=NAME:N` kills the process with
//! SIGKILL (no destructor, no flush: what a power cut or `kill -9` does) the
//! Nth time it is reached (the first when `N` is absent); every other point,
//! and every point when the variable is unset, does nothing.

// Every `pub` item is part of the public API (tests/public_api.rs in
// keel-cli checks what that API promises).
#![warn(unreachable_pub)]

/// After an assistant message is acknowledged, before its tools run.
pub const AFTER_MESSAGE_END: &str = "after_message_end";
/// After a batch's `effect_started` records are acknowledged, before any
/// call of the batch executes.
pub const AFTER_EFFECT_STARTED: &str = "after_effect_started";
/// While a bash command runs: its process was spawned, its end not seen.
pub const IN_BASH: &str = "in_bash";
/// After a batch's results are acknowledged, before the next turn.
pub const AFTER_RESULT: &str = "after_result";
/// Inside the session writer, after the first record of a multi-record
/// group reached the file and before the rest of the group did.
pub const BETWEEN_GROUP_RECORDS: &str = "between_group_records";

/// In a workspace snapshot's object store, after an object was renamed to
/// its name and before the rest were (each rename hits it): armed by name
/// only (tests/snapshot_crash.rs), not among the run points of [`POINTS`].
pub const IN_SNAPSHOT_NAMING: &str = "in_snapshot_naming";

/// The points of a run's turn loop and session writer, for a test that
/// picks one at random.
pub const POINTS: &[&str] = &[
    AFTER_MESSAGE_END,
    AFTER_EFFECT_STARTED,
    IN_BASH,
    AFTER_RESULT,
    BETWEEN_GROUP_RECORDS,
];

/// The environment variable that arms a point: `NAME` or `NAME:N`.
pub const ENV: &str = "KEEL_FAILPOINT";

/// Whether this build can be killed by a point (the `enabled` feature).
pub const ENABLED: bool = cfg!(feature = "enabled");

/// Kills the process here when the environment arms the point `name` and
/// this is its Nth hit; otherwise returns at once.
#[inline]
pub fn hit(name: &str) {
    #[cfg(feature = "enabled")]
    armed::hit(name);
    #[cfg(not(feature = "enabled"))]
    let _ = name;
}

/// Whether `hit(name)` could kill the process (the point is armed), so a
/// caller can prepare the state the point needs, e.g. write part of a group.
#[inline]
pub fn is_armed(name: &str) -> bool {
    #[cfg(feature = "enabled")]
    return armed::is_armed(name);
    #[cfg(not(feature = "enabled"))]
    {
        let _ = name;
        false
    }
}

#[cfg(feature = "enabled")]
mod armed {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The armed point and the hit that kills, read once.
    fn armed() -> Option<&'static (String, u64)> {
        static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
        ARMED
            .get_or_init(|| parse(&std::env::var(super::ENV).ok()?))
            .as_ref()
    }

    /// `NAME` or `NAME:N` (N ≥ 1); anything else arms nothing.
    pub(super) fn parse(value: &str) -> Option<(String, u64)> {
        let (name, count) = match value.split_once(':') {
            Some((name, count)) => (name, count.parse().ok().filter(|&n| n >= 1)?),
            None => (value, 1),
        };
        (!name.is_empty()).then(|| (name.to_owned(), count))
    }

    pub(super) fn is_armed(name: &str) -> bool {
        armed().is_some_and(|(armed, _)| armed == name)
    }

    pub(super) fn hit(name: &str) {
        static HITS: AtomicU64 = AtomicU64::new(0);
        let Some((armed, at)) = armed() else { return };
        if armed != name || HITS.fetch_add(1, Ordering::SeqCst) + 1 != *at {
            return;
        }
        // SIGKILL cannot be caught: the process ends here, as under `kill -9`.
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        // raise only returns on failure; abort ends the process without
        // unwinding either.
        std::process::abort();
    }

    #[cfg(test)]
    mod tests {
        use super::parse;

        #[test]
        fn a_name_arms_its_first_hit_and_a_count_its_nth() {
            assert_eq!(parse("in_bash"), Some(("in_bash".into(), 1)));
            assert_eq!(parse("after_result:3"), Some(("after_result".into(), 3)));
            assert_eq!(parse("after_result:0"), None);
            assert_eq!(parse("after_result:x"), None);
            assert_eq!(parse(""), None);
        }
    }
}
