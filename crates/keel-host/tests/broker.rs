//! The broker through its public API (`Broker`, `Connection`), with the
//! scripted provider, a real kernel and a real session store in temporary
//! directories: nothing of the kernel is mocked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use keel_host::broker::{Broker, BrokerConfig, Connection, Tenant};
use keel_protocol::rpc::Notification;
use keel_protocol::rpc::methods::{RunEventNotification, RunStartResponse};
use keel_protocol::{RunEventKind, RunState};
use serde_json::{Value, json};

/// A broker over temporary directories: `workspace`, a session dir beside
/// it, an empty user configuration and `script` for the scripted provider.
struct Fixture {
    _root: tempfile::TempDir,
    workspace: PathBuf,
    broker: Broker,
}

fn fixture(script: Value, tweak: impl FnOnce(&mut BrokerConfig)) -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let workspace = root.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    let script_file = root.path().join("script.json");
    std::fs::write(&script_file, serde_json::to_vec(&script).unwrap()).unwrap();
    let config_file = root.path().join("config.toml");
    std::fs::write(&config_file, "").unwrap();
    let mut config = BrokerConfig::default();
    config.config_file = Some(config_file);
    config.provider = Some("scripted".into());
    config.script = Some(script_file);
    config.session_dir = Some(root.path().join("sessions"));
    tweak(&mut config);
    let broker = Broker::new(config).unwrap();
    Fixture {
        _root: root,
        workspace,
        broker,
    }
}

impl Fixture {
    async fn connect(&self) -> Connection {
        let connection = self.broker.connect(Tenant::local());
        connection.call("initialize", None).await.unwrap();
        connection
    }

    fn ws(&self) -> String {
        self.workspace.display().to_string()
    }

    async fn start(&self, connection: &Connection, params: Value) -> RunStartResponse {
        let mut params = params;
        params["workspace"] = json!(self.ws());
        let started = connection.call("run/start", Some(params)).await.unwrap();
        serde_json::from_value(started).unwrap()
    }
}

fn text_turn(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }] })
}

fn write_turn(path: &str, content: &str) -> Value {
    json!({ "content": [{ "type": "tool_call", "name": "write",
        "arguments": { "path": path, "content": content } }] })
}

/// The next notification, waiting at most 20 s (a clear failure, not a hang).
async fn next(connection: &mut Connection) -> Notification {
    tokio::time::timeout(Duration::from_secs(20), connection.notification())
        .await
        .expect("a notification within 20 s")
        .expect("the connection is open")
}

async fn next_event(connection: &mut Connection) -> RunEventNotification {
    let note = next(connection).await;
    assert_eq!(note.method, "run/event", "{note:?}");
    serde_json::from_value(note.params).unwrap()
}

/// Events until the terminal one (included).
async fn until_terminal(connection: &mut Connection) -> Vec<RunEventNotification> {
    let mut seen = Vec::new();
    loop {
        let event = next_event(connection).await;
        let terminal = event.event.kind.is_terminal();
        seen.push(event);
        if terminal {
            return seen;
        }
    }
}

fn kind_of(value: &Value) -> Option<&str> {
    value.get("data")?.get("code")?.as_str()
}

#[allow(dead_code)]
fn exists(path: &Path) -> bool {
    path.exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streams_its_events_and_ends_with_one_terminal_notification() {
    let fixture = fixture(json!({ "turns": [text_turn("hello there")] }), |_| {});
    let mut connection = fixture.connect().await;
    let started = fixture.start(&connection, json!({ "prompt": "hi" })).await;
    let events = until_terminal(&mut connection).await;
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
    let terminal: Vec<_> = events
        .iter()
        .filter(|event| event.event.kind.is_terminal())
        .collect();
    assert_eq!(terminal.len(), 1);
    let result = terminal[0]
        .result
        .as_ref()
        .expect("the terminal event carries the result");
    assert_eq!(result.state, RunState::Settled);
    assert_eq!(result.run_id, started.run_id);
    let waited = connection
        .call("run/result", Some(json!({ "run_id": started.run_id })))
        .await
        .unwrap();
    assert_eq!(waited["result"]["state"], "settled");
    assert_eq!(waited["result"]["session_id"], json!(started.session_id));
    // Nothing after the terminal event.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), connection.notification())
            .await
            .is_err()
    );
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
    let error = connection
        .call(
            "run/start",
            Some(json!({ "prompt": "hi", "workspace": "" })),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind_name(), Some("invalid_params"));
    let error = connection
        .call("run/start", Some(json!({ "prompt": "hi" })))
        .await
        .unwrap_err();
    assert_eq!(
        error.kind_name(),
        Some("invalid_params"),
        "no workspace: refused"
    );
    let _ = (kind_of, write_turn);
}
