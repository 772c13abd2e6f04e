//! Helpers shared by the broker tests: a broker over temporary directories
//! with the scripted provider (a real kernel, a real session store),
//! initialized connections, calls that must succeed or fail, and a run's
//! events read with a bounded wait (a clear failure, never a hang).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use keel_host::broker::{Broker, BrokerConfig, Connection, Tenant};
use keel_protocol::rpc::methods::{RunEventNotification, RunStartResponse};
use keel_protocol::rpc::{Notification, RpcError};
use keel_protocol::{RunEventKind, RunResult, RunState};
use serde_json::{Value, json};

/// A broker over a temporary `root`: `workspace`, a session dir beside it
/// (`sessions`), an empty user configuration and the scripted provider's
/// script.
pub struct Fixture {
    pub root: tempfile::TempDir,
    pub workspace: PathBuf,
    pub broker: Broker,
}

/// A [`Fixture`] whose scripted provider plays `script`, with `tweak`
/// applied to the configuration last.
pub fn fixture(script: Value, tweak: impl FnOnce(&mut BrokerConfig)) -> Fixture {
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
        root,
        workspace,
        broker,
    }
}

impl Fixture {
    /// The session directory.
    pub fn sessions(&self) -> PathBuf {
        self.root.path().join("sessions")
    }

    /// The workspace, as `run/start` takes it.
    pub fn ws(&self) -> String {
        self.workspace.display().to_string()
    }

    /// An initialized connection of the `local` tenant.
    pub async fn connect(&self) -> Connection {
        initialized(self.broker.connect(Tenant::local())).await
    }

    /// An initialized connection of the tenant `name`.
    pub async fn connect_as(&self, name: &str) -> Connection {
        initialized(self.broker.connect(Tenant::new(name))).await
    }

    /// Starts a run of `params` in the workspace.
    pub async fn start(&self, connection: &Connection, params: Value) -> RunStartResponse {
        let mut params = params;
        params["workspace"] = json!(self.ws());
        serde_json::from_value(call_ok(connection, "run/start", params).await).unwrap()
    }

    /// Starts a run of `prompt` (on `session`, if given) and checks that it
    /// settles.
    pub async fn run(
        &self,
        connection: &mut Connection,
        prompt: &str,
        session: Option<&str>,
    ) -> RunStartResponse {
        let mut params = json!({ "prompt": prompt });
        if let Some(session) = session {
            params["session_id"] = json!(session);
        }
        let started = self.start(connection, params).await;
        until_settled(connection).await;
        started
    }
}

async fn initialized(connection: Connection) -> Connection {
    connection.call("initialize", None).await.unwrap();
    connection
}

/// A model turn answering `text`.
pub fn text_turn(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }] })
}

/// A long model turn: `word` 1,500 times.
pub fn long_turn(word: &str) -> Value {
    text_turn(&format!("{word} ").repeat(1500))
}

/// A model turn calling `write` with `path` and `content`.
pub fn write_turn(path: &str, content: &str) -> Value {
    json!({ "content": [{ "type": "tool_call", "name": "write",
        "arguments": { "path": path, "content": content } }] })
}

/// A model turn answering a compaction summary with every required heading.
pub fn summary_turn() -> Value {
    let summary: String = [
        "Goal",
        "Constraints and preferences",
        "Done and verified",
        "In progress",
        "Blocked",
        "Key decisions",
        "Exact files, symbols, commands and errors",
        "Next steps",
    ]
    .iter()
    .map(|heading| format!("## {heading}\n- greeted\n"))
    .collect();
    text_turn(&summary)
}

/// `method` with `params`, which must succeed: its result.
pub async fn call_ok(connection: &Connection, method: &str, params: Value) -> Value {
    match connection.call(method, Some(params)).await {
        Ok(result) => result,
        Err(error) => panic!("{method} failed: {error:?}"),
    }
}

/// `method` with `params`, which must fail: its error.
pub async fn call_err(connection: &Connection, method: &str, params: Value) -> RpcError {
    match connection.call(method, Some(params)).await {
        Ok(result) => panic!("{method} must fail, returned {result}"),
        Err(error) => error,
    }
}

/// `method` with `params`, which must fail with the error `kind`: the error.
pub async fn expect_error(
    connection: &Connection,
    method: &str,
    params: Value,
    kind: &str,
) -> RpcError {
    let error = call_err(connection, method, params).await;
    assert_eq!(error_kind(&error), kind, "{method}: {error:?}");
    error
}

/// The error's kind name (`""` for none).
pub fn error_kind(error: &RpcError) -> &str {
    error.kind_name().unwrap_or("")
}

/// `run/result` of `run_id`.
pub async fn run_result(connection: &Connection, run_id: &str) -> Value {
    call_ok(connection, "run/result", json!({ "run_id": run_id })).await
}

/// The next notification, waiting at most 20 s (a clear failure, not a hang).
pub async fn next(connection: &mut Connection) -> Notification {
    tokio::time::timeout(Duration::from_secs(20), connection.notification())
        .await
        .expect("a notification within 20 s")
        .expect("the connection is open")
}

/// The next run event; a subscription that lagged (the test read slower
/// than the run streamed) is resumed from its last `seq`, as a client does.
pub async fn next_event(connection: &mut Connection) -> RunEventNotification {
    loop {
        let note = next(connection).await;
        if note.method == "run/events_lagged" {
            let params = json!({ "run_id": note.params["run_id"],
                "after_seq": note.params["last_seq"] });
            call_ok(connection, "run/subscribe", params).await;
            continue;
        }
        assert_eq!(note.method, "run/event", "{note:?}");
        return serde_json::from_value(note.params).unwrap();
    }
}

/// Events until the terminal one (included).
pub async fn until_terminal(connection: &mut Connection) -> Vec<RunEventNotification> {
    until(connection, RunEventKind::is_terminal).await
}

/// Events until one `wanted` accepts (included), in order; the run must
/// not end first unless `wanted` accepts its terminal event.
pub async fn until(
    connection: &mut Connection,
    wanted: impl Fn(&RunEventKind) -> bool,
) -> Vec<RunEventNotification> {
    let mut seen = Vec::new();
    loop {
        let event = next_event(connection).await;
        let found = wanted(&event.event.kind);
        assert!(
            found || !event.event.kind.is_terminal(),
            "the run ended first: {:?}",
            event.event.kind
        );
        seen.push(event);
        if found {
            return seen;
        }
    }
}

/// The terminal event of the connection's run.
pub async fn settle(connection: &mut Connection) -> RunEventNotification {
    until_terminal(connection).await.pop().unwrap()
}

/// Events until the terminal one (included), which must be a settled
/// run's: the events and the run's result.
pub async fn until_settled(connection: &mut Connection) -> (Vec<RunEventNotification>, RunResult) {
    let events = until_terminal(connection).await;
    let result = result_of(&events);
    assert_eq!(result.state, RunState::Settled, "{result:?}");
    (events, result)
}

/// The result the last of `events` (the terminal one) carries.
pub fn result_of(events: &[RunEventNotification]) -> RunResult {
    events
        .last()
        .and_then(|event| event.result.clone())
        .expect("the terminal event carries the result")
}

/// How many of `events` are terminal.
pub fn terminals(events: &[RunEventNotification]) -> usize {
    events
        .iter()
        .filter(|event| event.event.kind.is_terminal())
        .count()
}
