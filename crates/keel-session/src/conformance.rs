//! The conformance suite every [`SessionStore`] must pass.
//!
//! One set of checks, written once against the trait, run by each store's
//! tests (`conformance::run_all(&factory)`). A new store is done when this
//! passes; a behaviour a store relies on belongs here, not in one store's
//! own tests. Each check gets a fresh store from the factory and panics with
//! a message naming the broken guarantee.
//!
//! Built only with the `test-util` feature: it is test code (it panics), and
//! a crate whose tests use it enables the feature in its dev-dependency.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use keel_protocol::{Entry, EntryPayload, Message, UserMessage};

use crate::{NewSession, SessionError, SessionStore};

/// Makes a fresh, empty store for one check.
pub type Factory<'a> = &'a dyn Fn() -> Arc<dyn SessionStore>;

/// Runs every check against stores made by `factory`.
pub async fn run_all(factory: Factory<'_>) {
    appends_move_the_leaf_and_build_the_branch(factory()).await;
    invalid_appends_change_nothing(factory()).await;
    branch_switches_move_the_leaf(factory()).await;
    forks_copy_the_path_and_name_their_parent(factory()).await;
    unknown_sessions_are_refused(factory()).await;
    listing_shows_every_session_newest_first(factory()).await;
    titles_are_one_trimmed_line(factory()).await;
    context_branch_starts_at_the_latest_checkpoint(factory()).await;
    concurrent_appends_all_land(factory()).await;
    abbreviated_ids_resolve_to_one_session(factory()).await;
    opening_an_intact_session_reports_no_repair(factory()).await;
    a_second_writer_is_refused(factory()).await;
    reads_never_open_for_writing(factory()).await;
}

/// A user-message entry `id` under `parent`.
pub fn entry(id: &str, parent: Option<&str>) -> Entry {
    Entry::new(
        id,
        parent.map(Into::into),
        1,
        EntryPayload::Message {
            message: Message::User(UserMessage::text(format!("message {id}"))),
        },
    )
}

fn ids(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(|entry| entry.id.as_str()).collect()
}

async fn appends_move_the_leaf_and_build_the_branch(store: Arc<dyn SessionStore>) {
    let s = store.create(NewSession::default()).await.unwrap();
    assert_eq!(
        store.leaf(&s).await.unwrap(),
        None,
        "a new session has no leaf"
    );
    assert!(
        store.active_branch(&s).await.unwrap().is_empty(),
        "a new session has no branch"
    );
    store
        .append(&s, vec![entry("a", None), entry("b", Some("a"))])
        .await
        .unwrap();
    store.append(&s, vec![entry("c", Some("b"))]).await.unwrap();
    assert_eq!(
        store.leaf(&s).await.unwrap().as_deref(),
        Some("c"),
        "the leaf is the last appended entry"
    );
    assert_eq!(
        ids(&store.active_branch(&s).await.unwrap()),
        ["a", "b", "c"]
    );
    assert_eq!(
        store.active_branch(&s).await.unwrap()[1],
        entry("b", Some("a")),
        "entries come back unchanged"
    );
    let explicit = store
        .create(NewSession {
            id: Some("named-1".into()),
            ..NewSession::default()
        })
        .await
        .unwrap();
    assert_eq!(explicit, "named-1");
    let again = store
        .create(NewSession {
            id: Some("named-1".into()),
            ..NewSession::default()
        })
        .await;
    assert!(
        matches!(again, Err(SessionError::SessionExists(_))),
        "ids are unique: {again:?}"
    );
}

async fn invalid_appends_change_nothing(store: Arc<dyn SessionStore>) {
    let s = store.create(NewSession::default()).await.unwrap();
    store.append(&s, vec![entry("a", None)]).await.unwrap();
    let missing = store
        .append(&s, vec![entry("b", Some("a")), entry("c", Some("nope"))])
        .await;
    assert!(
        matches!(missing, Err(SessionError::MissingParent { .. })),
        "missing parent: {missing:?}"
    );
    let duplicate = store.append(&s, vec![entry("a", Some("a"))]).await;
    assert!(
        matches!(duplicate, Err(SessionError::DuplicateEntry(_))),
        "duplicate: {duplicate:?}"
    );
    let root = store.append(&s, vec![entry("r", None)]).await;
    assert!(
        matches!(root, Err(SessionError::SecondRoot(_))),
        "second root: {root:?}"
    );
    let empty = store.append(&s, vec![]).await;
    assert!(
        matches!(empty, Err(SessionError::EmptyAppend)),
        "empty: {empty:?}"
    );
    assert_eq!(
        ids(&store.entries(&s).await.unwrap()),
        ["a"],
        "a refused group leaves nothing behind"
    );
    assert_eq!(store.leaf(&s).await.unwrap().as_deref(), Some("a"));
    store.append(&s, vec![entry("b", Some("a"))]).await.unwrap();
    assert_eq!(
        ids(&store.entries(&s).await.unwrap()),
        ["a", "b"],
        "the store still works after a refusal"
    );
}

async fn branch_switches_move_the_leaf(store: Arc<dyn SessionStore>) {
    let s = store.create(NewSession::default()).await.unwrap();
    store
        .append(&s, vec![entry("a", None), entry("b", Some("a"))])
        .await
        .unwrap();
    store.set_leaf(&s, "a").await.unwrap();
    store.append(&s, vec![entry("c", Some("a"))]).await.unwrap();
    assert_eq!(
        ids(&store.active_branch(&s).await.unwrap()),
        ["a", "c"],
        "the new branch grows from the leaf"
    );
    store.set_leaf(&s, "b").await.unwrap();
    assert_eq!(ids(&store.active_branch(&s).await.unwrap()), ["a", "b"]);
    let unknown = store.set_leaf(&s, "zz").await;
    assert!(
        matches!(unknown, Err(SessionError::EntryNotFound { .. })),
        "unknown leaf: {unknown:?}"
    );
    assert_eq!(
        store.leaf(&s).await.unwrap().as_deref(),
        Some("b"),
        "a refused switch leaves the leaf"
    );
    assert_eq!(
        ids(&store.entries(&s).await.unwrap()),
        ["a", "b", "c"],
        "switching never removes entries"
    );
}

async fn forks_copy_the_path_and_name_their_parent(store: Arc<dyn SessionStore>) {
    let s = store.create(NewSession::default()).await.unwrap();
    store
        .append(
            &s,
            vec![
                entry("a", None),
                entry("b", Some("a")),
                entry("c", Some("b")),
            ],
        )
        .await
        .unwrap();
    let fork = store.fork(&s, "b").await.unwrap();
    assert_ne!(fork, s);
    assert_eq!(
        ids(&store.active_branch(&fork).await.unwrap()),
        ["a", "b"],
        "the fork holds root→entry"
    );
    assert_eq!(
        ids(&store.active_branch(&s).await.unwrap()),
        ["a", "b", "c"],
        "the source is unchanged"
    );
    let listed = store.list().await.unwrap();
    let info = listed
        .iter()
        .find(|info| info.id == fork)
        .expect("the fork is listed");
    assert_eq!(
        info.parent_session.as_deref(),
        Some(s.as_str()),
        "the fork names its parent"
    );
    let bad = store.fork(&s, "zz").await;
    assert!(
        matches!(bad, Err(SessionError::EntryNotFound { .. })),
        "fork of unknown entry: {bad:?}"
    );
}

async fn unknown_sessions_are_refused(store: Arc<dyn SessionStore>) {
    let leaf = store.leaf("no-such-session").await;
    assert!(
        matches!(leaf, Err(SessionError::SessionNotFound(_))),
        "unknown session: {leaf:?}"
    );
    let append = store
        .append("no-such-session", vec![entry("a", None)])
        .await;
    assert!(
        matches!(append, Err(SessionError::SessionNotFound(_))),
        "append to unknown: {append:?}"
    );
}

async fn listing_shows_every_session_newest_first(store: Arc<dyn SessionStore>) {
    let old = store.create(NewSession::default()).await.unwrap();
    store.append(&old, vec![entry("a", None)]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let new = store.create(NewSession::default()).await.unwrap();
    let mut newer = entry("x", None);
    newer.timestamp = keel_now() + 1000;
    store.append(&new, vec![newer]).await.unwrap();
    let listed = store.list().await.unwrap();
    let order: Vec<&str> = listed.iter().map(|info| info.id.as_str()).collect();
    assert_eq!(order, [new.as_str(), old.as_str()], "newest activity first");
    assert_eq!(listed[1].entries, 1);
    assert_eq!(
        listed[1].title.as_deref(),
        Some("message a"),
        "the title is the first user text"
    );
}

/// A title is the first user text with words in it, on one line, trimmed,
/// cut at [`crate::TITLE_CHARS`] characters with an ellipsis.
async fn titles_are_one_trimmed_line(store: Arc<dyn SessionStore>) {
    let user = |id: &str, parent: Option<&str>, text: &str| {
        Entry::new(
            id,
            parent.map(Into::into),
            1,
            EntryPayload::Message {
                message: Message::User(UserMessage::text(text)),
            },
        )
    };
    let messy = store.create(NewSession::default()).await.unwrap();
    let entries = vec![
        user("a", None, " \n\t "),
        user("b", Some("a"), "\n\n  Fix   the bug\r\nin\tfoo.rs  \n"),
    ];
    store.append(&messy, entries).await.unwrap();
    let long = store.create(NewSession::default()).await.unwrap();
    let text = format!("{} tail", "word ".repeat(40));
    store
        .append(&long, vec![user("c", None, &text)])
        .await
        .unwrap();
    let listed = store.list().await.unwrap();
    let title = |id: &str| {
        listed
            .iter()
            .find(|info| info.id == id)
            .and_then(|info| info.title.clone())
    };
    assert_eq!(title(&messy).as_deref(), Some("Fix the bug in foo.rs"));
    let cut = title(&long).unwrap();
    assert_eq!(cut.chars().count(), crate::TITLE_CHARS, "{cut:?}");
    assert!(
        cut.starts_with("word word") && cut.ends_with("word…"),
        "{cut:?}"
    );
}

async fn context_branch_starts_at_the_latest_checkpoint(store: Arc<dyn SessionStore>) {
    let s = store.create(NewSession::default()).await.unwrap();
    let checkpoint = Entry::new(
        "k",
        Some("c".into()),
        1,
        EntryPayload::checkpoint("a and b happened", "c"),
    );
    store
        .append(
            &s,
            vec![
                entry("a", None),
                entry("b", Some("a")),
                entry("c", Some("b")),
                checkpoint,
                entry("d", Some("k")),
            ],
        )
        .await
        .unwrap();
    let context = store.context_branch(&s).await.unwrap();
    let context_ids = ids(&context);
    assert!(
        context_ids.ends_with(&["c", "k", "d"]),
        "the context keeps first-kept..leaf: {context_ids:?}"
    );
    assert!(
        !context_ids.contains(&"a"),
        "covered entries may be left out: {context_ids:?}"
    );
}

async fn concurrent_appends_all_land(store: Arc<dyn SessionStore>) {
    let s = store.create(NewSession::default()).await.unwrap();
    store.append(&s, vec![entry("root", None)]).await.unwrap();
    let appends = (0..16).map(|n| {
        let store = Arc::clone(&store);
        let s = s.clone();
        async move {
            store
                .append(&s, vec![entry(&format!("e{n}"), Some("root"))])
                .await
        }
    });
    for outcome in futures::future::join_all(appends).await {
        outcome.unwrap();
    }
    assert_eq!(
        store.entries(&s).await.unwrap().len(),
        17,
        "every concurrent append landed"
    );
}

async fn abbreviated_ids_resolve_to_one_session(store: Arc<dyn SessionStore>) {
    for id in ["s-abc-111", "s-abc-222", "s-def-111", "s-abc-11"] {
        let new = NewSession {
            id: Some(id.into()),
            ..NewSession::default()
        };
        store.create(new).await.unwrap();
    }
    let resolve = |wanted: &'static str| {
        let store = Arc::clone(&store);
        async move { store.resolve_id(wanted).await }
    };
    assert_eq!(
        resolve("s-abc-11").await.unwrap(),
        "s-abc-11",
        "an exact id wins over the longer ids it begins"
    );
    assert_eq!(resolve("s-abc-2").await.unwrap(), "s-abc-222", "a prefix");
    assert_eq!(resolve("222").await.unwrap(), "s-abc-222", "a suffix");
    let ambiguous = resolve("s-abc").await;
    assert!(
        matches!(
            ambiguous,
            Err(SessionError::AmbiguousSession { count: 3, .. })
        ),
        "a prefix of three: {ambiguous:?}"
    );
    let ambiguous = resolve("111").await;
    assert!(
        matches!(
            ambiguous,
            Err(SessionError::AmbiguousSession { count: 2, .. })
        ),
        "a suffix of two: {ambiguous:?}"
    );
    let missing = resolve("zzz").await;
    assert!(
        matches!(missing, Err(SessionError::SessionNotFound(_))),
        "no match: {missing:?}"
    );
    let empty = resolve("").await;
    assert!(
        matches!(empty, Err(SessionError::InvalidId(_))),
        "an empty id names nothing: {empty:?}"
    );
}

async fn opening_an_intact_session_reports_no_repair(store: Arc<dyn SessionStore>) {
    let s = store.create(NewSession::default()).await.unwrap();
    store.append(&s, vec![entry("a", None)]).await.unwrap();
    assert_eq!(
        store.open_for_writing(&s).await.unwrap(),
        None,
        "nothing to repair"
    );
    assert_eq!(
        store.leaf(&s).await.unwrap().as_deref(),
        Some("a"),
        "opening changes nothing"
    );
    let unknown = store.open_for_writing("no-such-session").await;
    assert!(
        matches!(unknown, Err(SessionError::SessionNotFound(_))),
        "open of unknown: {unknown:?}"
    );
}

async fn a_second_writer_is_refused(store: Arc<dyn SessionStore>) {
    let s = store.create(NewSession::default()).await.unwrap();
    store.append(&s, vec![entry("a", None)]).await.unwrap();
    let lease = store.open_writer(&s).await.unwrap();
    assert_eq!(lease.session_id(), s);
    assert_eq!(store.open_sessions(), 1, "the lease holds the session open");
    let second = store.open_writer(&s).await;
    assert!(
        matches!(&second, Err(SessionError::SessionBusy(id)) if *id == s),
        "a second writer while the lease lives: {second:?}"
    );
    assert_eq!(second.unwrap_err().code(), "session_busy");
    let checked = store.open_for_writing(&s).await;
    assert!(
        matches!(checked, Err(SessionError::SessionBusy(_))),
        "opening for writing is refused too: {checked:?}"
    );
    store.append(&s, vec![entry("b", Some("a"))]).await.unwrap();
    assert_eq!(
        ids(&store.active_branch(&s).await.unwrap()),
        ["a", "b"],
        "the lease holder's appends land"
    );
    let other = store.create(NewSession::default()).await.unwrap();
    let other_lease = store.open_writer(&other).await.unwrap();
    assert_eq!(store.open_sessions(), 2, "leases are per session");
    drop(other_lease);
    drop(lease);
    assert_eq!(
        store.open_sessions(),
        0,
        "dropping the leases closed the sessions"
    );
    let again = store.open_writer(&s).await.unwrap();
    assert_eq!(again.repair(), None);
    drop(again);
    let unknown = store.open_writer("no-such-session").await;
    assert!(
        matches!(unknown, Err(SessionError::SessionNotFound(_))),
        "a lease on an unknown session: {unknown:?}"
    );
    assert_eq!(store.open_sessions(), 0, "a refused lease holds nothing");
}

async fn reads_never_open_for_writing(store: Arc<dyn SessionStore>) {
    let s = store.create(NewSession::default()).await.unwrap();
    let checkpoint = Entry::new(
        "k",
        Some("a".into()),
        1,
        EntryPayload::checkpoint("a happened", "a"),
    );
    store
        .append(
            &s,
            vec![entry("a", None), checkpoint, entry("b", Some("k"))],
        )
        .await
        .unwrap();
    assert_eq!(
        store.open_sessions(),
        0,
        "a write without a lease leaves nothing open"
    );
    let read = |store: Arc<dyn SessionStore>, s: String| async move {
        let leaf = store.leaf(&s).await.unwrap();
        let branch = store.active_branch(&s).await.unwrap();
        let context = store.context_branch(&s).await.unwrap();
        let entries = store.entries(&s).await.unwrap();
        let listed = store.list().await.unwrap();
        let resolved = store.resolve_id(&s).await.unwrap();
        assert_eq!(leaf.as_deref(), Some("b"));
        assert_eq!(ids(&branch), ["a", "k", "b"]);
        assert_eq!(ids(&context).first(), Some(&"a"));
        assert_eq!(entries.len(), 3);
        assert!(listed.iter().any(|info| info.id == s));
        assert_eq!(resolved, s);
    };
    read(Arc::clone(&store), s.clone()).await;
    assert_eq!(
        store.open_sessions(),
        0,
        "reading a session does not open it for writing"
    );
    let lease = store.open_writer(&s).await.unwrap();
    read(Arc::clone(&store), s.clone()).await;
    assert_eq!(
        store.open_sessions(),
        1,
        "reading a session open for writing leaves it as it was"
    );
    let busy = store.open_writer(&s).await;
    assert!(
        matches!(busy, Err(SessionError::SessionBusy(_))),
        "reads did not take over the lease: {busy:?}"
    );
    drop(lease);
    assert_eq!(store.open_sessions(), 0);
}

fn keel_now() -> u64 {
    keel_protocol::now_ms()
}
