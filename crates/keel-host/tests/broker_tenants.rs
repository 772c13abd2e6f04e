//! Tenants' sessions through the broker's public API (`Broker`,
//! `Connection`), with the scripted provider, real kernels and real
//! session stores in temporary directories: one tenant cannot reach
//! another's sessions, `local` and `default` share the user's store, a
//! named tenant's store is `<session_dir>/tenants/<NAME>/` (0700), and an
//! invalid tenant name is refused before it is used as a path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{
    Fixture, call_err, call_ok, error_kind, expect_error, fixture, long_turn, summary_turn,
    text_turn,
};
use keel_host::broker::{Connection, Tenant};
use serde_json::{Value, json};

/// A broker whose scripted model plays `turns` (each kernel from the
/// first), an empty configuration, and a small context window so that a
/// session of two long turns can be compacted.
fn tenants_fixture(turns: Vec<Value>) -> Fixture {
    fixture(json!({ "turns": turns }), |config| {
        config.host.context_window = Some(8000);
    })
}

/// Calls `method`, which must not reach another tenant's session: `not_found`.
async fn not_found(connection: &Connection, method: &str, params: Value) {
    expect_error(connection, method, params, "not_found").await;
}

fn listed(list: &Value) -> Vec<String> {
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["id"].as_str().unwrap().to_owned())
        .collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_reach_another_tenants_sessions() {
    let fixture = tenants_fixture(vec![long_turn("one"), long_turn("two"), summary_turn()]);
    let mut alice = fixture.connect_as("alice").await;
    let bob = fixture.connect_as("bob").await;

    let first = fixture.run(&mut alice, "hi", None).await;
    let id = first.session_id.clone();
    let session = json!({ "session_id": id });
    let at = |entry_id: &str| json!({ "session_id": id, "entry_id": entry_id });
    let tree = call_ok(&alice, "session/tree", session.clone()).await;
    let entry = tree["nodes"][0]["id"].as_str().unwrap().to_owned();

    // Bob: every session method, and runs on the session, are not_found —
    // by full id and by prefix alike.
    let listed_by_bob = bob.call("session/list", None).await.unwrap();
    assert!(listed(&listed_by_bob).is_empty(), "{listed_by_bob}");
    for wanted in [id.clone(), id[..8].to_owned()] {
        let by_id = json!({ "session_id": wanted });
        let at_entry = json!({ "session_id": wanted, "entry_id": entry });
        let run_on = json!({ "prompt": "peek", "workspace": fixture.ws(), "session_id": wanted });
        let mut fork_run = run_on.clone();
        fork_run["fork_entry_id"] = json!(entry);
        for (method, params) in [
            ("session/get", &by_id),
            ("session/tree", &by_id),
            ("session/fork", &at_entry),
            ("session/set_leaf", &at_entry),
            ("session/compact", &by_id),
            ("session/resume", &by_id),
            ("run/start", &run_on),
            ("run/start", &fork_run),
        ] {
            not_found(&bob, method, params.clone()).await;
        }
    }
    assert!(listed(&bob.call("session/list", None).await.unwrap()).is_empty());

    // Alice: all of them reach it.
    let list = alice.call("session/list", None).await.unwrap();
    assert_eq!(listed(&list), vec![id.clone()]);
    let got = call_ok(&alice, "session/get", session.clone()).await;
    assert_eq!(got["session_id"], json!(id));
    let fork = call_ok(&alice, "session/fork", at(&entry)).await;
    assert_eq!(fork["leaf_id"], json!(entry));
    let leaf = tree["leaf_id"].as_str().unwrap().to_owned();
    for to in [&entry, &leaf] {
        let moved = call_ok(&alice, "session/set_leaf", at(to)).await;
        assert_eq!(moved["leaf_id"], json!(to));
    }
    let again = fixture.run(&mut alice, "again", Some(&id)).await;
    assert_eq!(again.session_id, id);
    let compacted = call_ok(&alice, "session/compact", session.clone()).await;
    assert!(compacted["checkpoint_id"].is_string(), "{compacted}");
    // Found, and nothing to resume in it (the resume itself is tested in
    // broker.rs).
    let error = call_err(&alice, "session/resume", session.clone()).await;
    assert_eq!(
        error.data.as_ref().unwrap()["kernel_code"],
        "nothing_to_resume",
        "{error:?}"
    );

    // On disk: the session and its fork are alice's, not the user's.
    let store = fixture.sessions().join("tenants").join("alice");
    assert!(store.join(format!("{id}.jsonl")).is_file());
    assert!(
        store
            .join(format!("{}.jsonl", fork["session_id"].as_str().unwrap()))
            .is_file()
    );
    assert!(!fixture.sessions().join(format!("{id}.jsonl")).exists());
    let local = fixture.connect_as("local").await;
    assert!(listed(&local.call("session/list", None).await.unwrap()).is_empty());
    not_found(&local, "session/get", session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_and_default_share_the_users_store_and_kernels_are_per_store() {
    let fixture = tenants_fixture(vec![text_turn("hello"), text_turn("hello again")]);
    let mut local = fixture.connect_as("local").await;
    let mut default = fixture.connect_as("default").await;
    let mut alice = fixture.connect_as("alice").await;

    let started = fixture.run(&mut local, "hi", None).await;
    let id = started.session_id;
    // The user's own store: the session directory itself.
    assert!(fixture.sessions().join(format!("{id}.jsonl")).is_file());
    let list = default.call("session/list", None).await.unwrap();
    assert_eq!(listed(&list), vec![id.clone()]);
    call_ok(&default, "session/get", json!({ "session_id": id })).await;
    // `default` continues `local`'s session: one store, one kernel.
    let again = fixture.run(&mut default, "again", Some(&id)).await;
    assert_eq!(again.session_id, id);
    assert_eq!(fixture.broker.metrics().kernels_cached, 1);

    // A named tenant, same configuration and workspace: its own kernel,
    // over its own store, which the user's store does not list.
    let theirs = fixture.run(&mut alice, "hi", None).await;
    assert_eq!(fixture.broker.metrics().kernels_cached, 2);
    let list = local.call("session/list", None).await.unwrap();
    assert_eq!(listed(&list), vec![id.clone()]);
    let list = alice.call("session/list", None).await.unwrap();
    assert_eq!(listed(&list), vec![theirs.session_id.clone()]);

    // The tenant's store is private to the user.
    let tenants = fixture.sessions().join("tenants");
    assert_eq!(mode(&tenants.join("alice")), 0o700);
    assert_eq!(mode(&tenants), 0o700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_tenant_name_is_refused_and_never_used_as_a_path() {
    let fixture = tenants_fixture(vec![text_turn("hello")]);
    let workspace = fixture.ws();
    let long = "a".repeat(65);
    for name in [
        "",
        "..",
        "../escape",
        "a/b",
        "/abs",
        "dot.name",
        "naïve",
        &long,
    ] {
        let connection = fixture.broker.connect(Tenant::new(name));
        for (method, params) in [
            ("initialize", json!({})),
            ("session/list", json!({})),
            (
                "run/start",
                json!({ "prompt": "hi", "workspace": workspace }),
            ),
        ] {
            let error = connection
                .call(method, Some(params))
                .await
                .expect_err(&format!("tenant {name:?}: {method} is refused"));
            assert_eq!(
                error_kind(&error),
                "configuration",
                "{name:?} {method}: {error:?}"
            );
            assert_eq!(
                error.data.as_ref().unwrap()["host_code"],
                "invalid_tenant",
                "{name:?} {method}: {error:?}"
            );
        }
    }
    // Nothing was created for them: the session directory holds no
    // `tenants` directory, and nothing appeared beside it.
    assert!(!fixture.sessions().join("tenants").exists());
    let beside: Vec<_> = std::fs::read_dir(fixture.root.path())
        .unwrap()
        .map(|item| item.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut beside = beside;
    beside.sort();
    assert_eq!(
        beside,
        ["config.toml", "script.json", "sessions", "workspace"],
        "{beside:?}"
    );
    // No run was started for any of them.
    assert_eq!(fixture.broker.metrics().runs_started, 0);
}

#[test]
fn tenant_names_are_checked_before_use() {
    assert!(Tenant::check_name(&"a".repeat(64)).is_ok());
    assert!(Tenant::check_name("team_A-1").is_ok());
    assert!(Tenant::check_name("local").is_ok());
    for bad in [
        "",
        "..",
        "../escape",
        "a/b",
        "a\\b",
        "dot.name",
        "naïve",
        &"a".repeat(65),
    ] {
        assert!(Tenant::check_name(bad).is_err(), "{bad:?}");
    }
}
