//! The broker through its public API (`Broker`, `Connection`), with the
//! scripted provider, a real kernel and a real session store in temporary
//! directories: nothing of the kernel is mocked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{
    Fixture, call_err, call_ok, error_kind, expect_error, fixture, long_turn, next, result_of,
    run_result, settle, summary_turn, terminals, text_turn, until, until_settled, until_terminal,
    write_turn,
};
use keel_host::broker::{Connection, Tenant};
use keel_protocol::rpc::methods::{RunEventNotification, RunStartResponse};
use keel_protocol::{RunEventKind, RunState};
use serde_json::{Value, json};

/// The request id of the next `permission_requested` event.
async fn permission_request(connection: &mut Connection) -> String {
    let events = until(connection, |kind| {
        matches!(kind, RunEventKind::PermissionRequested { .. })
    })
    .await;
    match &events.last().unwrap().event.kind {
        RunEventKind::PermissionRequested { request_id, .. } => request_id.clone(),
        _ => unreachable!(),
    }
}

async fn resolve(
    connection: &Connection,
    run_id: &str,
    request_id: &str,
    decision: &str,
    scope: &str,
) {
    let params = json!({ "run_id": run_id, "request_id": request_id,
        "decision": decision, "scope": scope });
    call_ok(connection, "permission/resolve", params).await;
}

/// Nothing more arrives (the run sent its terminal notification last).
async fn quiet(connection: &mut Connection) {
    if let Ok(extra) =
        tokio::time::timeout(Duration::from_millis(300), connection.notification()).await
    {
        panic!("nothing after the terminal notification, got {extra:?}");
    }
}

fn ask_write() -> Value {
    json!({ "mode": "ask", "tools": ["read", "write"] })
}

fn with_prompt(mut params: Value, prompt: &str) -> Value {
    params["prompt"] = json!(prompt);
    params
}

/// Starts an `ask` run ("write a") and waits until it is parked on its
/// first permission request: the run and the request's id.
async fn start_parked(
    fixture: &Fixture,
    connection: &mut Connection,
) -> (RunStartResponse, String) {
    let started = fixture
        .start(connection, with_prompt(ask_write(), "write a"))
        .await;
    let request = permission_request(connection).await;
    (started, request)
}

/// `{ "run_id": …, "text": … }`, the params of `run/steer` and `run/follow_up`.
fn message(started: &RunStartResponse, text: &str) -> Value {
    json!({ "run_id": started.run_id, "text": text })
}

/// Every page of `method` with `params`, following `next_cursor` from the
/// first page.
async fn pages(connection: &Connection, method: &str, params: Value) -> Vec<Value> {
    let mut pages = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let mut params = params.clone();
        params["cursor"] = cursor;
        let page = call_ok(connection, method, params).await;
        cursor = page.get("next_cursor").cloned().unwrap_or(Value::Null);
        pages.push(page);
        if cursor.is_null() {
            return pages;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streams_its_events_and_ends_with_one_terminal_notification() {
    let fixture = fixture(json!({ "turns": [text_turn("hello there")] }), |_| {});
    let mut connection = fixture.connect().await;
    let started = fixture.start(&connection, json!({ "prompt": "hi" })).await;
    let (events, result) = until_settled(&mut connection).await;
    let seqs: Vec<u64> = events.iter().map(|event| event.event.seq).collect();
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "gapless from 0"
    );
    assert!(matches!(
        events[0].event.kind,
        RunEventKind::RunStarted { .. }
    ));
    assert_eq!(terminals(&events), 1);
    assert_eq!(result.run_id, started.run_id);
    let waited = run_result(&connection, &started.run_id).await;
    assert_eq!(waited["result"]["state"], "settled");
    assert_eq!(waited["result"]["session_id"], json!(started.session_id));
    quiet(&mut connection).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_before_initialize_and_unknown_methods_are_typed_errors() {
    let fixture = fixture(json!({ "turns": [] }), |_| {});
    let connection = fixture.broker.connect(Tenant::local());
    let error = connection.call("session/list", None).await.unwrap_err();
    assert_eq!(error.kind_name(), Some("not_initialized"));
    connection.call("initialize", None).await.unwrap();
    let error = connection.call("run/explode", None).await.unwrap_err();
    assert_eq!(error.kind_name(), Some("method_not_found"));
    let empty = json!({ "prompt": "hi", "workspace": "" });
    expect_error(&connection, "run/start", empty, "invalid_params").await;
    // No workspace: refused.
    let none = json!({ "prompt": "hi" });
    expect_error(&connection, "run/start", none, "invalid_params").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steering_message_reaches_the_next_model_request() {
    let script = json!({ "turns": [
        write_turn("a.txt", "one"),
        { "expect": { "last_user_contains": "use tabs" },
          "content": [{ "type": "text", "text": "done" }] },
    ]});
    let fixture = fixture(script, |_| {});
    let mut connection = fixture.connect().await;
    let (started, request) = start_parked(&fixture, &mut connection).await;
    let steered = call_ok(&connection, "run/steer", message(&started, "use tabs")).await;
    assert_eq!(steered["queue"], "steer");
    resolve(&connection, &started.run_id, &request, "approve", "once").await;
    let (events, _) = until_settled(&mut connection).await;
    assert_eq!(terminals(&events), 1);
    assert!(events.iter().any(|event| matches!(
        &event.event.kind,
        RunEventKind::MessageInjected {
            queue: keel_protocol::QueueKind::Steer,
            ..
        }
    )));
    quiet(&mut connection).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_continues_the_run_after_it_would_settle() {
    let script = json!({ "turns": [
        write_turn("a.txt", "one"),
        { "expect": { "tool_results": 1 }, "content": [{ "type": "text", "text": "written" }] },
        { "expect": { "last_user_contains": "now say bye" },
          "content": [{ "type": "text", "text": "bye" }] },
    ]});
    let fixture = fixture(script, |_| {});
    let mut connection = fixture.connect().await;
    let (started, request) = start_parked(&fixture, &mut connection).await;
    call_ok(
        &connection,
        "run/follow_up",
        message(&started, "now say bye"),
    )
    .await;
    resolve(&connection, &started.run_id, &request, "approve", "once").await;
    let (events, result) = until_settled(&mut connection).await;
    let text = serde_json::to_string(&result.message).unwrap();
    assert!(
        text.contains("bye"),
        "the follow-up's answer is the last message: {text}"
    );
    assert_eq!(terminals(&events), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_a_parked_run_cancelled_with_one_terminal_notification() {
    let fixture = fixture(json!({ "turns": [write_turn("a.txt", "one")] }), |_| {});
    let mut connection = fixture.connect().await;
    let (started, _) = start_parked(&fixture, &mut connection).await;
    let run = json!({ "run_id": started.run_id });
    let cancelled = call_ok(&connection, "run/cancel", run.clone()).await;
    assert_eq!(cancelled["was_active"], true);
    let events = until_terminal(&mut connection).await;
    assert_eq!(terminals(&events), 1);
    assert!(matches!(
        events.last().unwrap().event.kind,
        RunEventKind::RunCancelled { .. }
    ));
    let waited = run_result(&connection, &started.run_id).await;
    assert_eq!(waited["result"]["state"], "cancelled");
    assert!(!fixture.workspace.join("a.txt").exists());
    // Control calls on an ended run are typed.
    let late = message(&started, "late");
    expect_error(&connection, "run/steer", late, "run_not_active").await;
    let again = call_ok(&connection, "run/cancel", run).await;
    assert_eq!(again["was_active"], false);
    quiet(&mut connection).await;
}

/// Two writes of the same file: answered `always`, the second is not asked;
/// answered `once`, it is asked again (and denied here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_and_always_answers() {
    let script = json!({ "turns": [
        write_turn("a.txt", "one"),
        write_turn("a.txt", "two"),
        text_turn("done"),
    ]});
    for scope in ["always", "once"] {
        let fixture = fixture(script.clone(), |_| {});
        let mut connection = fixture.connect().await;
        let (started, first) = start_parked(&fixture, &mut connection).await;
        resolve(&connection, &started.run_id, &first, "approve", scope).await;
        let mut asked = 1;
        let events = loop {
            let events = until(&mut connection, |kind| {
                kind.is_terminal() || matches!(kind, RunEventKind::PermissionRequested { .. })
            })
            .await;
            match &events.last().unwrap().event.kind {
                RunEventKind::PermissionRequested { request_id, .. } => {
                    asked += 1;
                    resolve(&connection, &started.run_id, request_id, "deny", "once").await;
                }
                _ => break events,
            }
        };
        assert_eq!(result_of(&events).state, RunState::Settled);
        let content = std::fs::read_to_string(fixture.workspace.join("a.txt")).unwrap();
        if scope == "always" {
            assert_eq!(asked, 1, "an always answer decides the second write");
            assert_eq!(content, "two");
        } else {
            assert_eq!(asked, 2, "a once answer holds for one call");
            assert_eq!(content, "one", "the second write was denied");
        }
    }
}

/// A session whose last run was interrupted (its tool call has no result)
/// is continued by `session/resume`: the call runs, the run settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_continues_an_interrupted_session() {
    use keel_protocol::{
        AssistantMessage, ContentBlock, Entry, EntryPayload, Message, StopReason, ToolCall,
        UserMessage,
    };
    use keel_session::{JsonlStore, NewSession, SessionStore};
    let fixture = fixture(json!({ "turns": [text_turn("resumed")] }), |_| {});
    let store = JsonlStore::new(fixture.sessions()).unwrap();
    let session = store
        .create({
            let mut new_session = NewSession::default();
            new_session.workspace = Some(
                std::fs::canonicalize(&fixture.workspace)
                    .unwrap()
                    .display()
                    .to_string(),
            );
            new_session
        })
        .await
        .unwrap();
    let call = {
        let mut assistant_message = AssistantMessage::default();
        assistant_message.content = vec![ContentBlock::ToolCall(ToolCall::new(
            "call_1",
            "write",
            json!({ "path": "r.txt", "content": "recovered" }),
        ))];
        assistant_message.stop_reason = StopReason::ToolUse;
        assistant_message
    };
    let entry = |id: &str, parent: Option<&str>, message: Message| {
        Entry::new(
            id,
            parent.map(str::to_owned),
            0,
            EntryPayload::Message { message },
        )
    };
    store
        .append(
            &session,
            vec![
                entry("e1", None, Message::User(UserMessage::text("write r"))),
                entry("e2", Some("e1"), Message::Assistant(call)),
            ],
        )
        .await
        .unwrap();
    drop(store);
    let mut connection = fixture.connect().await;
    // A new run on it is refused: it must be resumed first.
    let again = json!({ "prompt": "again", "workspace": fixture.ws(), "session_id": session });
    let error = expect_error(&connection, "run/start", again, "refused").await;
    assert_eq!(
        error.data.as_ref().unwrap()["kernel_code"],
        "session_interrupted"
    );
    let resume = json!({ "session_id": session, "mode": "auto", "tools": ["read", "write"] });
    let resumed = call_ok(&connection, "session/resume", resume).await;
    assert_eq!(resumed["session_id"], json!(session));
    until_settled(&mut connection).await;
    assert_eq!(
        std::fs::read_to_string(fixture.workspace.join("r.txt")).unwrap(),
        "recovered"
    );
    // Nothing is interrupted any more.
    let error = call_err(
        &connection,
        "session/resume",
        json!({ "session_id": session }),
    )
    .await;
    assert_eq!(
        error.data.as_ref().unwrap()["kernel_code"],
        "nothing_to_resume"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_a_live_run_is_busy() {
    let fixture = fixture(
        json!({ "turns": [write_turn("a.txt", "one"), text_turn("ok")] }),
        |_| {},
    );
    let mut connection = fixture.connect().await;
    let (started, request) = start_parked(&fixture, &mut connection).await;
    let session = json!({ "session_id": started.session_id });
    let mut second = with_prompt(ask_write(), "me too");
    second["session_id"] = json!(started.session_id);
    second["workspace"] = json!(fixture.ws());
    expect_error(&connection, "run/start", second.clone(), "session_busy").await;
    let listed = connection.call("session/list", None).await.unwrap();
    assert_eq!(listed["sessions"][0]["busy"], true);
    let tree = call_ok(&connection, "session/tree", session.clone()).await;
    let mut set_leaf = session;
    set_leaf["entry_id"] = json!(tree["nodes"][0]["id"].as_str().unwrap());
    expect_error(&connection, "session/set_leaf", set_leaf, "session_busy").await;
    resolve(&connection, &started.run_id, &request, "approve", "once").await;
    until_terminal(&mut connection).await;
    // Once the run ended (its terminal notification seen), the session
    // takes a new run at once.
    let again = call_ok(&connection, "run/start", second).await;
    assert_eq!(again["session_id"], json!(started.session_id));
}

/// A long streamed answer: one `message_update` per character.
fn streamed_script(chars: usize) -> Value {
    json!({ "chunk_chars": 1, "turns": [text_turn(&"x".repeat(chars))] })
}

/// Every event after `after` exactly once, in order, up to the terminal
/// one: what `run/subscribe` promises at the join of replay and live tail.
fn assert_exactly_once(events: &[RunEventNotification], after: Option<u64>) {
    let seqs: Vec<u64> = events.iter().map(|event| event.event.seq).collect();
    let first = after.map_or(0, |after| after + 1);
    let expected: Vec<u64> = (first..first + seqs.len() as u64).collect();
    if let Some(at) = (0..seqs.len()).find(|&at| seqs[at] != expected[at]) {
        let around = &seqs[at.saturating_sub(3)..(at + 3).min(seqs.len())];
        panic!(
            "not every event after {after:?} exactly once: at position {at} got seq {} \
             (around: {around:?}), expected {}",
            seqs[at], expected[at]
        );
    }
    assert!(events.last().unwrap().event.kind.is_terminal());
    assert_eq!(terminals(events), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_joining_a_live_run_get_every_later_event_exactly_once() {
    let fixture = fixture(streamed_script(4000), |config| {
        config.ring_events = 100_000;
        config.ring_bytes = 64 << 20;
        config.notification_buffer = 100_000;
    });
    let mut connection = fixture.connect().await;
    let started = fixture
        .start(&connection, json!({ "prompt": "talk" }))
        .await;
    let mut joiners = Vec::new();
    for index in 0..24u64 {
        let mut late = fixture.connect().await;
        // Joins while the run streams: half from the start, half from a
        // `seq` the joiner claims to have.
        let after = (index % 2 == 1).then_some(index * 3);
        let params = json!({ "run_id": started.run_id, "after_seq": after });
        joiners.push(tokio::spawn(async move {
            call_ok(&late, "run/subscribe", params).await;
            (until_terminal(&mut late).await, after)
        }));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let own = until_terminal(&mut connection).await;
    assert!(
        own.len() > 4000,
        "the run streamed its characters: {}",
        own.len()
    );
    assert_exactly_once(&own, None);
    for joiner in joiners {
        let (events, after) = joiner.await.unwrap();
        assert_exactly_once(&events, after);
        assert_eq!(
            events.last().unwrap().event.seq,
            own.last().unwrap().event.seq
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seq_older_than_the_ring_is_events_lagged() {
    let fixture = fixture(streamed_script(50), |config| config.ring_events = 4);
    let mut connection = fixture.connect().await;
    let started = fixture
        .start(&connection, json!({ "prompt": "talk" }))
        .await;
    let own = until_terminal(&mut connection).await;
    let last = own.last().unwrap().event.seq;
    let oldest = last - 3;
    let mut late = fixture.connect().await;
    for after in [json!(0), json!(oldest - 2), Value::Null] {
        let params = json!({ "run_id": started.run_id, "after_seq": after });
        let error = expect_error(&late, "run/subscribe", params, "events_lagged").await;
        let data = error.data.as_ref().unwrap();
        assert_eq!(data["oldest_seq"], json!(oldest));
        assert_eq!(data["session_id"], json!(started.session_id));
    }
    // The session is the authority: what the ring lost, session/get has.
    let session = json!({ "session_id": started.session_id });
    let session = call_ok(&late, "session/get", session).await;
    assert!(!session["entries"].as_array().unwrap().is_empty());
    let params = json!({ "run_id": started.run_id, "after_seq": oldest - 1 });
    let subscribed = call_ok(&late, "run/subscribe", params).await;
    assert_eq!(subscribed["finished"], true);
    assert_eq!(subscribed["oldest_seq"], json!(oldest));
    let replayed = until_terminal(&mut late).await;
    assert_exactly_once(&replayed, Some(oldest - 1));
    quiet(&mut late).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_request_outlives_its_connection_and_the_first_answer_wins() {
    let fixture = fixture(
        json!({ "turns": [write_turn("a.txt", "one"), text_turn("ok")] }),
        |_| {},
    );
    let mut first = fixture.connect().await;
    let (started, request) = start_parked(&fixture, &mut first).await;
    drop(first);
    let run = json!({ "run_id": started.run_id });
    let answer = |decision: &str| json!({ "run_id": started.run_id, "request_id": request, "decision": decision });

    // Another tenant sees nothing of the run.
    let stranger = fixture.connect_as("someone-else").await;
    expect_error(&stranger, "run/subscribe", run.clone(), "not_found").await;
    expect_error(
        &stranger,
        "permission/resolve",
        answer("approve"),
        "not_found",
    )
    .await;

    // A new connection of the same tenant finds the request still pending.
    let mut second = fixture.connect().await;
    call_ok(&second, "run/subscribe", run.clone()).await;
    assert_eq!(permission_request(&mut second).await, request);
    let waiter = second.caller();
    let result = tokio::spawn(async move { waiter.call("run/result", Some(run)).await.unwrap() });
    resolve(&second, &started.run_id, &request, "approve", "once").await;
    // The first answer won.
    expect_error(&second, "permission/resolve", answer("deny"), "not_found").await;
    until_settled(&mut second).await;
    assert_eq!(result.await.unwrap()["result"]["state"], "settled");
    assert_eq!(
        std::fs::read_to_string(fixture.workspace.join("a.txt")).unwrap(),
        "one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_loses_its_subscription_not_the_servers_memory() {
    const BUFFER: usize = 4;
    let fixture = fixture(streamed_script(300), |config| {
        config.notification_buffer = BUFFER
    });
    let mut connection = fixture.connect().await;
    let started = fixture
        .start(&connection, json!({ "prompt": "talk" }))
        .await;
    // The client reads nothing until the run has ended.
    run_result(&connection, &started.run_id).await;
    assert!(fixture.broker.metrics().lagged_subscribers >= 1);
    // It then gets at most its buffer, a lagged notice, and catches up by
    // subscribing again from the last seq it has: every event exactly once.
    let mut events: Vec<RunEventNotification> = Vec::new();
    let mut rounds = 0;
    loop {
        let mut this_round = 0;
        let notice = loop {
            let note = next(&mut connection).await;
            if note.method == "run/events_lagged" {
                break Some(note.params);
            }
            let event: RunEventNotification = serde_json::from_value(note.params).unwrap();
            this_round += 1;
            let terminal = event.event.kind.is_terminal();
            events.push(event);
            if terminal {
                break None;
            }
        };
        assert!(
            this_round <= BUFFER,
            "a round delivered {this_round} > {BUFFER}"
        );
        let Some(notice) = notice else { break };
        rounds += 1;
        assert_eq!(notice["run_id"], json!(started.run_id));
        assert_eq!(
            notice["last_seq"],
            json!(events.last().map(|event| event.event.seq))
        );
        let params = json!({ "run_id": started.run_id, "after_seq": notice["last_seq"] });
        call_ok(&connection, "run/subscribe", params).await;
    }
    assert!(rounds > 10, "it lagged and caught up repeatedly: {rounds}");
    assert_exactly_once(&events, None);
    quiet(&mut connection).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_methods_list_get_tree_fork_set_leaf_and_compact() {
    // Long answers, so that a summary shrinks the context.
    let script = json!({ "turns": [
        long_turn("one"), long_turn("two"), long_turn("three"), long_turn("four"), summary_turn(),
    ]});
    // A small window: the kept tail (a quarter of it) leaves older turns
    // to summarise, and the runs stay below its compaction threshold.
    let fixture = fixture(script, |config| config.host.context_window = Some(8000));
    let mut connection = fixture.connect().await;
    // Three sessions; the first gets a second run.
    let first = fixture
        .start(&connection, json!({ "prompt": "hi 1" }))
        .await;
    settle(&mut connection).await;
    let again = json!({ "prompt": "hi again", "session_id": first.session_id });
    fixture.start(&connection, again).await;
    settle(&mut connection).await;
    for prompt in ["hi 2", "hi 3"] {
        fixture
            .start(&connection, json!({ "prompt": prompt }))
            .await;
        settle(&mut connection).await;
    }
    let first_id = json!({ "session_id": first.session_id });
    let at = |entry_id: &str| json!({ "session_id": first.session_id, "entry_id": entry_id });

    // session/list, two per page.
    let listed = pages(
        &connection,
        "session/list",
        json!({ "limit": 2, "workspace": fixture.ws() }),
    )
    .await;
    let mut ids = Vec::new();
    for page in &listed {
        for session in page["sessions"].as_array().unwrap() {
            ids.push(session["id"].as_str().unwrap().to_owned());
            assert_eq!(session["busy"], false);
        }
    }
    assert_eq!((ids.len(), listed.len()), (3, 2), "{ids:?}");
    assert!(ids.contains(&first.session_id));
    let unknown = json!({ "cursor": "no-such-session" });
    expect_error(&connection, "session/list", unknown, "invalid_params").await;

    // session/get, paginated, the same as in one page.
    let mut one_page = first_id.clone();
    one_page["limit"] = json!(1000);
    let whole = call_ok(&connection, "session/get", one_page).await;
    let whole: Vec<Value> = whole["entries"].as_array().unwrap().clone();
    assert!(whole.len() >= 4, "two runs' messages: {}", whole.len());
    let mut by_two = first_id.clone();
    by_two["limit"] = json!(2);
    let paged: Vec<Value> = pages(&connection, "session/get", by_two)
        .await
        .iter()
        .flat_map(|page| page["entries"].as_array().unwrap().clone())
        .collect();
    assert_eq!(paged, whole);

    // session/tree: every entry, the active branch marked.
    let tree = call_ok(&connection, "session/tree", first_id.clone()).await;
    let nodes = tree["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), whole.len());
    assert!(nodes.iter().all(|node| node["active"] == true));
    let root = nodes[0]["id"].as_str().unwrap().to_owned();
    let user = whole
        .iter()
        .find(|entry| entry["kind"] == "message")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // session/fork at the first message: a new session holding the path to it.
    let fork = call_ok(&connection, "session/fork", at(&user)).await;
    assert_eq!(fork["leaf_id"], json!(user));
    let forked = json!({ "session_id": fork["session_id"] });
    let forked = call_ok(&connection, "session/get", forked).await;
    assert_eq!(
        forked["entries"].as_array().unwrap().last().unwrap()["id"],
        json!(user)
    );

    // session/set_leaf back to the root, then to the leaf it had.
    let leaf = tree["leaf_id"].as_str().unwrap().to_owned();
    let moved = call_ok(&connection, "session/set_leaf", at(&root)).await;
    assert_eq!(moved["leaf_id"], json!(root));
    let active = call_ok(&connection, "session/get", first_id.clone()).await;
    assert_eq!(active["entries"].as_array().unwrap().len(), 1);
    call_ok(&connection, "session/set_leaf", at(&leaf)).await;
    expect_error(&connection, "session/set_leaf", at("nope"), "not_found").await;

    // session/compact: a checkpoint at the leaf, with the run's model.
    let compacted = call_ok(&connection, "session/compact", first_id.clone()).await;
    let checkpoint = compacted["checkpoint_id"].as_str().unwrap();
    let after = call_ok(&connection, "session/get", first_id).await;
    assert_eq!(after["leaf_id"], json!(checkpoint));
    assert_eq!(
        after["entries"].as_array().unwrap().last().unwrap()["kind"],
        "checkpoint"
    );

    let unknown = json!({ "session_id": "no-such-session" });
    expect_error(&connection, "session/get", unknown, "not_found").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_list_reads_the_catalog_without_keys() {
    let fixture = fixture(json!({ "turns": [] }), |_| {});
    let connection = fixture.connect().await;
    let models = connection.call("models/list", None).await.unwrap();
    let providers = models["providers"].as_array().unwrap();
    assert!(!providers.is_empty());
    let name = providers[0]["name"].as_str().unwrap().to_owned();
    let one = call_ok(&connection, "models/list", json!({ "provider": name })).await;
    assert_eq!(one["providers"].as_array().unwrap().len(), 1);
    let unknown = json!({ "provider": "no-such-provider" });
    expect_error(&connection, "models/list", unknown, "not_found").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_refuses_past_the_limits_and_drain_cancels_what_is_left() {
    let fixture = fixture(json!({ "turns": [write_turn("a.txt", "one")] }), |config| {
        config.max_runs = 1;
        config.max_queue = 0;
    });
    let mut connection = fixture.connect().await;
    let (started, _) = start_parked(&fixture, &mut connection).await;
    let mut second = with_prompt(ask_write(), "another");
    second["workspace"] = json!(fixture.ws());
    let error = expect_error(&connection, "run/start", second.clone(), "overloaded").await;
    assert!(
        error.data.as_ref().unwrap()["retry_after_ms"]
            .as_u64()
            .unwrap()
            > 0
    );
    let metrics = fixture.broker.metrics();
    assert_eq!((metrics.runs_active, metrics.runs_refused), (1, 1));
    assert_eq!(metrics.tenants["local"].runs_refused, 1);

    // Drain: the parked run does not finish within the grace, so it is
    // cancelled; its session stays; no new run starts.
    tokio::time::timeout(
        Duration::from_secs(20),
        fixture.broker.drain(Duration::from_millis(50)),
    )
    .await
    .expect("drain returns once every run has settled");
    let events = until_terminal(&mut connection).await;
    assert!(matches!(
        events.last().unwrap().event.kind,
        RunEventKind::RunCancelled { .. }
    ));
    expect_error(&connection, "run/start", second, "draining").await;
    let session = json!({ "session_id": started.session_id });
    let session = call_ok(&connection, "session/get", session).await;
    assert!(!session["entries"].as_array().unwrap().is_empty());
    assert_eq!(fixture.broker.metrics().runs_active, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_connection_cancels_the_runs_it_started_and_settled_waits_for_them() {
    let fixture = fixture(json!({ "turns": [write_turn("a.txt", "one")] }), |_| {});
    let mut connection = fixture.connect().await;
    let (started, _) = start_parked(&fixture, &mut connection).await;
    connection.cancel_started();
    tokio::time::timeout(Duration::from_secs(20), connection.settled())
        .await
        .expect("settled within 20 s");
    let result = run_result(&connection, &started.run_id).await;
    assert_eq!(result["result"]["state"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_listed_and_cleared() {
    let script = json!({ "turns": [
        write_turn("a.txt", "one"),
        { "expect": { "last_user_contains": "keep me" },
          "content": [{ "type": "text", "text": "done" }] },
    ]});
    let fixture = fixture(script, |_| {});
    let mut connection = fixture.connect().await;
    let (started, request) = start_parked(&fixture, &mut connection).await;
    let run = json!({ "run_id": started.run_id });
    for (method, text) in [
        ("run/steer", "keep me"),
        ("run/follow_up", "drop me"),
        ("run/follow_up", "me too"),
    ] {
        call_ok(&connection, method, message(&started, text)).await;
    }
    let queued = call_ok(&connection, "run/queue", run.clone()).await;
    assert_eq!(
        queued["queued"],
        json!([
            { "kind": "steer", "text": "keep me" },
            { "kind": "follow_up", "text": "drop me" },
            { "kind": "follow_up", "text": "me too" },
        ])
    );
    let clear = json!({ "run_id": started.run_id, "queue": "follow_up" });
    let cleared = call_ok(&connection, "run/queue/clear", clear).await;
    assert_eq!(
        cleared["cleared"],
        json!([{ "kind": "follow_up", "text": "drop me" }, { "kind": "follow_up", "text": "me too" }])
    );
    let queued = call_ok(&connection, "run/queue", run.clone()).await;
    assert_eq!(
        queued["queued"],
        json!([{ "kind": "steer", "text": "keep me" }])
    );
    resolve(&connection, &started.run_id, &request, "approve", "once").await;
    let (events, result) = until_settled(&mut connection).await;
    assert!(
        events
            .iter()
            .any(|event| matches!(event.event.kind, RunEventKind::QueueCleared { .. }))
    );
    assert!(
        serde_json::to_string(&result.message)
            .unwrap()
            .contains("done")
    );
    let queued = call_ok(&connection, "run/queue", run).await;
    assert_eq!(queued["queued"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_of_the_protocol_is_implemented() {
    let fixture = fixture(json!({ "turns": [] }), |_| {});
    let connection = fixture.connect().await;
    for method in keel_protocol::rpc::methods::METHODS {
        if let Err(error) = connection.call(method, Some(json!({}))).await {
            assert_ne!(
                error_kind(&error),
                "method_not_found",
                "{method}: {error:?}"
            );
        }
    }
}

/// Kernels are cached per (configuration, workspace) and an idle one is
/// dropped once older than `idle_kernel_ttl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_kernels_are_evicted() {
    for (ttl, cached) in [(Duration::from_secs(3600), 2), (Duration::ZERO, 1)] {
        let fixture = fixture(
            json!({ "by_history": true, "turns": [text_turn("hi")] }),
            |config| {
                config.idle_kernel_ttl = ttl;
            },
        );
        let mut connection = fixture.connect().await;
        fixture.start(&connection, json!({ "prompt": "one" })).await;
        settle(&mut connection).await;
        // The same configuration and workspace: the same kernel.
        fixture.start(&connection, json!({ "prompt": "two" })).await;
        settle(&mut connection).await;
        assert_eq!(fixture.broker.metrics().kernels_cached, 1);
        let other = fixture.root.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let three = json!({ "prompt": "three", "workspace": other.display().to_string() });
        call_ok(&connection, "run/start", three).await;
        settle(&mut connection).await;
        assert_eq!(
            fixture.broker.metrics().kernels_cached,
            cached,
            "ttl {ttl:?}"
        );
    }
}

/// A model that stops streaming: the broker's stall timeout fails the run
/// with `run_stalled`, and the client gets its one terminal notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_run_fails_with_run_stalled() {
    let script = json!({ "turns": [{ "delay_ms": 600_000,
        "content": [{ "type": "text", "text": "never" }] }] });
    let fixture = fixture(script, |config| {
        config.stall_timeout = Some(Duration::from_millis(300));
    });
    let mut connection = fixture.connect().await;
    fixture
        .start(&connection, json!({ "prompt": "hang" }))
        .await;
    let events = until_terminal(&mut connection).await;
    assert_eq!(terminals(&events), 1);
    let result = result_of(&events);
    assert_eq!(result.state, RunState::Failed);
    assert_eq!(result.error.unwrap().code.as_str(), "run_stalled");
    quiet(&mut connection).await;
}

/// A finished run stays readable for `ring_grace`, then is forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_is_kept_for_the_grace_period_then_not_found() {
    let fixture = fixture(json!({ "turns": [text_turn("hi")] }), |config| {
        config.ring_grace = Duration::from_millis(200);
    });
    let mut connection = fixture.connect().await;
    let started = fixture.start(&connection, json!({ "prompt": "hi" })).await;
    settle(&mut connection).await;
    let run = json!({ "run_id": started.run_id });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match connection.call("run/result", Some(run.clone())).await {
            Ok(result) => assert_eq!(result["result"]["state"], "settled"),
            Err(error) => {
                assert_eq!(error_kind(&error), "not_found");
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run is still held 20 s after a 200 ms grace"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    expect_error(&connection, "run/subscribe", run, "not_found").await;
}
