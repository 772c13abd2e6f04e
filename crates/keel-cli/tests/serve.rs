//! `keel serve` over its real transport: the `keel` binary as a process, a
//! WebSocket client (tokio-tungstenite), the scripted provider.
//!
//! - every method of `keel_protocol::rpc::methods::METHODS` answered with
//!   its result type, and typed errors;
//! - who is refused before any work: anonymous, wrong token, a token in
//!   the URL, a disallowed Origin, an oversized message or request head
//!   (the session directory stays empty), a public address without a
//!   token (refuses to start);
//! - the token in no log line (KEEL_LOG=trace), event, session file or
//!   command environment;
//! - SIGTERM drains and exits 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Served, files_under};
use futures::{SinkExt, StreamExt};
use keel_protocol::rpc::methods::{self as rpc, METHODS};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

/// How long any one answer may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// A token of the right length.
const TOKEN: &str = "keel-test-token-5f0c9a1e7d3b";

/// A run that asks to run a command (in `ask` mode), then answers.
const SCRIPT: &str = r#"{"by_history": true, "turns": [
  {"content": [{"type": "tool_call", "name": "bash", "arguments": {"command": "env; echo written > note.txt"}}]},
  {"content": [{"type": "text", "text": "All done."}]}
]}"#;

/// A test's directory: HOME, the script, the sessions, workspaces.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new() -> Place {
        Place::with_script(SCRIPT)
    }

    fn with_script(script: &str) -> Place {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("script.json"), script).unwrap();
        std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
        Place { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn file(&self, name: &str) -> String {
        self.path().join(name).display().to_string()
    }

    fn sessions(&self) -> PathBuf {
        self.path().join("sessions")
    }

    /// A new, empty workspace.
    fn workspace(&self, name: &str) -> String {
        let path = self.path().join("workspaces").join(name);
        std::fs::create_dir_all(&path).unwrap();
        path.display().to_string()
    }

    /// `keel serve` with the script, this place's session directory and `args`.
    fn serve(&self, args: &[&str], env: &[(&str, &str)]) -> Served {
        let script = self.file("script.json");
        let sessions = self.sessions().display().to_string();
        let mut all = vec!["--script", &script, "--session-dir", &sessions];
        all.extend_from_slice(args);
        Served::start(&all, self.path(), env)
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A JSON-RPC client over one WebSocket.
struct Client {
    socket: Socket,
    next_id: i64,
    /// Notifications read while waiting for a response, in order.
    notes: std::collections::VecDeque<Value>,
}

/// How a connection attempt ended.
#[derive(Debug)]
enum Refused {
    /// The server answered the upgrade with this HTTP status.
    Status(u16),
    /// Something else went wrong.
    Other(String),
}

impl Client {
    /// Connects to `ws://address{path}` with these extra headers.
    async fn connect(
        address: SocketAddr,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Client, Refused> {
        let mut request = format!("ws://{address}{path}")
            .into_client_request()
            .unwrap();
        for (name, value) in headers {
            request.headers_mut().insert(
                tungstenite::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        match tokio_tungstenite::connect_async(request).await {
            Ok((socket, _)) => Ok(Client {
                socket,
                next_id: 1,
                notes: Default::default(),
            }),
            Err(tungstenite::Error::Http(response)) => {
                Err(Refused::Status(response.status().as_u16()))
            }
            Err(error) => Err(Refused::Other(error.to_string())),
        }
    }

    /// Connects with the test token, and initializes.
    async fn authorized(address: SocketAddr) -> Client {
        let bearer = format!("Bearer {TOKEN}");
        let mut client = Client::connect(address, "/", &[("authorization", &bearer)])
            .await
            .unwrap();
        client
            .call("initialize", json!({"client_name": "test"}))
            .await
            .unwrap();
        client
    }

    async fn send(&mut self, text: String) {
        self.socket.send(Message::text(text)).await.unwrap();
    }

    /// The next JSON message from the server (bounded wait); `None` once it closed.
    async fn read(&mut self) -> Option<Value> {
        loop {
            let message = tokio::time::timeout(PATIENCE, self.socket.next())
                .await
                .expect("the server answered within the patience")?;
            match message {
                Ok(Message::Text(text)) => return Some(serde_json::from_str(&text).unwrap()),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Calls `method` and returns its result or its error object.
    async fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(request.to_string()).await;
        loop {
            let message = self
                .read()
                .await
                .unwrap_or_else(|| panic!("the server closed before answering {method}"));
            if message.get("method").is_some() {
                self.notes.push_back(message);
                continue;
            }
            assert_eq!(message["jsonrpc"], "2.0", "{message}");
            assert_eq!(message["id"], id, "{message}");
            return match (message.get("result"), message.get("error")) {
                (Some(result), None) => Ok(result.clone()),
                (None, Some(error)) => Err(error.clone()),
                _ => panic!("a response with neither or both of result and error: {message}"),
            };
        }
    }

    /// The next notification (bounded wait).
    async fn note(&mut self) -> Value {
        if let Some(note) = self.notes.pop_front() {
            return note;
        }
        let message = self
            .read()
            .await
            .expect("the server closed before notifying");
        assert!(
            message.get("method").is_some(),
            "not a notification: {message}"
        );
        message
    }

    /// The run events of `run_id`'s notifications until one of type `kind`.
    async fn events_until(&mut self, run_id: &str, kind: &str) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let note = self.note().await;
            assert_eq!(note["method"], rpc::RUN_EVENT, "{note}");
            assert_eq!(note["params"]["run_id"], run_id, "{note}");
            let event = note["params"]["event"].clone();
            serde_json::from_value::<keel_protocol::RunEvent>(event.clone())
                .unwrap_or_else(|error| panic!("not a run event: {event}: {error}"));
            let done = event["type"] == kind;
            events.push(event);
            if done {
                return events;
            }
        }
    }
}

/// `error` is a typed JSON-RPC error of `kind`.
fn assert_kind(error: &Value, kind: &str) {
    assert_eq!(error["data"]["code"], kind, "{error}");
    let number = keel_protocol::rpc::ErrorKind::ALL
        .iter()
        .find(|known| known.name() == kind)
        .unwrap()
        .number();
    assert_eq!(error["code"], number, "{error}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{error}"
    );
}

/// `value` parses as `T`, the method's declared result type.
fn shape<T: serde::de::DeserializeOwned>(method: &str, value: &Value) -> T {
    serde_json::from_value(value.clone())
        .unwrap_or_else(|error| panic!("{method} answered {value}, not its result type: {error}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn every_method_answers_over_websocket_with_its_result_type() {
    let place = Place::new();
    let server = place.serve(&["--token-file", &place.file("token")], &[]);
    runtime().block_on(async {
        let mut checked = BTreeSet::new();
        let bearer = format!("Bearer {TOKEN}");
        let mut client = Client::connect(server.address, "/", &[("authorization", &bearer)])
            .await
            .unwrap();

        // Typed errors: before initialize, an unknown method, bad params.
        let error = client.call("session/list", json!({})).await.unwrap_err();
        assert_kind(&error, "not_initialized");
        let result = client.call("initialize", json!({"client_name": "test"})).await.unwrap();
        let init: rpc::InitializeResponse = shape("initialize", &result);
        assert_eq!(init.protocol_version, keel_protocol::rpc::PROTOCOL_VERSION);
        assert_eq!(init.server_name, "keel");
        assert_eq!(init.capabilities.methods, METHODS, "initialize lists every method");
        checked.insert("initialize");
        let error = client.call("run/launch", json!({})).await.unwrap_err();
        assert_kind(&error, "method_not_found");
        let error = client.call("run/start", json!({"prompt": 3})).await.unwrap_err();
        assert_kind(&error, "invalid_params");
        let error = client
            .call("run/result", json!({"run_id": "no-such-run"}))
            .await
            .unwrap_err();
        assert_kind(&error, "not_found");
        // A frame that is not JSON is answered too (id null).
        client.send("{not json".into()).await;
        let parse = client.read().await.unwrap();
        assert_eq!(parse["id"], Value::Null, "{parse}");
        assert_kind(&parse["error"], "parse_error");

        let result = client.call("models/list", json!({})).await.unwrap();
        let models: rpc::ModelsListResponse = shape("models/list", &result);
        assert!(!models.providers.is_empty(), "{result}");
        checked.insert("models/list");

        // A run that asks before its command runs.
        let workspace = place.workspace("one");
        let result = client
            .call(
                "run/start",
                json!({"prompt": "Write the note.", "workspace": workspace, "mode": "ask"}),
            )
            .await
            .unwrap();
        let started: rpc::RunStartResponse = shape("run/start", &result);
        checked.insert("run/start");
        let run_id = started.run_id.clone();
        let events = client.events_until(&run_id, "permission_requested").await;
        let request_id = events.last().unwrap()["request_id"].as_str().unwrap().to_owned();

        let result = client
            .call("run/steer", json!({"run_id": run_id, "text": "Be brief."}))
            .await
            .unwrap();
        let steered: rpc::RunSteerResponse = shape("run/steer", &result);
        assert_eq!(steered.run_id, run_id);
        checked.insert("run/steer");
        let result = client
            .call("run/follow_up", json!({"run_id": run_id, "text": "Then stop."}))
            .await
            .unwrap();
        let _: rpc::RunFollowUpResponse = shape("run/follow_up", &result);
        checked.insert("run/follow_up");
        let result = client.call("run/queue", json!({"run_id": run_id})).await.unwrap();
        let queue: rpc::RunQueueResponse = shape("run/queue", &result);
        let texts: Vec<&str> = queue.queued.iter().map(|queued| queued.text.as_str()).collect();
        assert_eq!(texts, ["Be brief.", "Then stop."], "{result}");
        checked.insert("run/queue");
        let result = client
            .call("run/queue/clear", json!({"run_id": run_id}))
            .await
            .unwrap();
        let cleared: rpc::RunQueueClearResponse = shape("run/queue/clear", &result);
        assert_eq!(cleared.cleared.len(), 2, "{result}");
        checked.insert("run/queue/clear");

        let result = client
            .call(
                "permission/resolve",
                json!({"run_id": run_id, "request_id": request_id, "decision": "approve", "scope": "once"}),
            )
            .await
            .unwrap();
        let resolved: rpc::PermissionResolveResponse = shape("permission/resolve", &result);
        assert_eq!(resolved.request_id, request_id);
        checked.insert("permission/resolve");
        let error = client
            .call(
                "permission/resolve",
                json!({"run_id": run_id, "request_id": request_id, "decision": "approve"}),
            )
            .await
            .unwrap_err();
        assert_kind(&error, "not_found");

        let result = client.call("run/result", json!({"run_id": run_id})).await.unwrap();
        let ended: rpc::RunResultResponse = shape("run/result", &result);
        assert_eq!(ended.result.state, keel_protocol::RunState::Settled, "{result}");
        checked.insert("run/result");
        let tail = client.events_until(&run_id, "run_settled").await;
        let seen = events.len() + tail.len();
        assert_eq!(
            std::fs::read_to_string(Path::new(&workspace).join("note.txt")).unwrap(),
            "written\n"
        );

        // Replay from seq 0: every later event once, ending with the terminal one.
        let result = client
            .call("run/subscribe", json!({"run_id": run_id, "after_seq": 0}))
            .await
            .unwrap();
        let subscribed: rpc::RunSubscribeResponse = shape("run/subscribe", &result);
        assert!(subscribed.finished, "{result}");
        checked.insert("run/subscribe");
        let replay = client.events_until(&run_id, "run_settled").await;
        let seqs: Vec<u64> = replay.iter().map(|event| event["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (1..seen as u64).collect::<Vec<_>>(), "replayed once each, in order");

        let result = client.call("run/cancel", json!({"run_id": run_id})).await.unwrap();
        let cancel: rpc::RunCancelResponse = shape("run/cancel", &result);
        assert!(!cancel.was_active, "{result}");
        checked.insert("run/cancel");

        // Sessions.
        let session_id = started.session_id.clone();
        let result = client.call("session/list", json!({"limit": 10})).await.unwrap();
        let list: rpc::SessionListResponse = shape("session/list", &result);
        assert!(list.sessions.iter().any(|session| session.id == session_id), "{result}");
        checked.insert("session/list");
        let result = client
            .call("session/get", json!({"session_id": session_id}))
            .await
            .unwrap();
        let got: rpc::SessionGetResponse = shape("session/get", &result);
        assert!(got.entries.len() >= 4, "{result}");
        checked.insert("session/get");
        let result = client
            .call("session/tree", json!({"session_id": session_id}))
            .await
            .unwrap();
        let tree: rpc::SessionTreeResponse = shape("session/tree", &result);
        assert_eq!(tree.nodes.len(), got.entries.len(), "{result}");
        checked.insert("session/tree");
        // Compaction asks the session's model for a summary; this script's
        // first turn (the one a fresh request plays) calls a tool instead,
        // which the kernel refuses as a summary: a typed refusal, after a
        // real summary request.
        match client
            .call("session/compact", json!({"session_id": session_id, "workspace": workspace}))
            .await
        {
            Ok(result) => {
                let _: rpc::SessionCompactResponse = shape("session/compact", &result);
            }
            Err(error) => {
                assert_kind(&error, "refused");
                assert_eq!(error["data"]["kernel_code"], "compaction_failed", "{error}");
            }
        }
        checked.insert("session/compact");
        let early = tree.nodes[1].id.clone();
        let result = client
            .call("session/fork", json!({"session_id": session_id, "entry_id": early}))
            .await
            .unwrap();
        let fork: rpc::SessionForkResponse = shape("session/fork", &result);
        assert_ne!(fork.session_id, session_id);
        checked.insert("session/fork");
        let result = client
            .call("session/set_leaf", json!({"session_id": session_id, "entry_id": early}))
            .await
            .unwrap();
        let leaf: rpc::SessionSetLeafResponse = shape("session/set_leaf", &result);
        assert_eq!(leaf.leaf_id, early);
        checked.insert("session/set_leaf");
        let error = client
            .call("session/get", json!({"session_id": "no-such-session"}))
            .await
            .unwrap_err();
        assert_kind(&error, "not_found");

        // The session is not interrupted: nothing to resume.
        match client
            .call("session/resume", json!({"session_id": fork.session_id, "workspace": workspace}))
            .await
        {
            Ok(result) => {
                let resumed: rpc::SessionResumeResponse = shape("session/resume", &result);
                client.call("run/result", json!({"run_id": resumed.run_id})).await.unwrap();
            }
            Err(error) => assert_typed_refusal("session/resume", &error),
        }
        checked.insert("session/resume");

        for method in METHODS {
            assert!(checked.contains(method), "method {method} is not covered by this test");
        }
    });
    drop(server);
}

/// A typed error that is the method's own refusal, not a missing method
/// or an internal failure.
fn assert_typed_refusal(method: &str, error: &Value) {
    let kind = error["data"]["code"].as_str().unwrap_or_default();
    assert!(
        !kind.is_empty() && !["method_not_found", "internal", "invalid_params"].contains(&kind),
        "{method}: {error}"
    );
    assert_kind(error, kind);
}

/// Tries a WebSocket connection; one that is let in starts a run (so a
/// broken check shows as a session), then reports it was let in.
async fn attempt(
    place: &Place,
    address: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Refused {
    match Client::connect(address, path, headers).await {
        Err(refused) => refused,
        Ok(mut client) => {
            let _ = client.call("initialize", json!({})).await;
            let workspace = place.workspace("intruder");
            let _ = client
                .call(
                    "run/start",
                    json!({"prompt": "Let me in.", "workspace": workspace}),
                )
                .await;
            Refused::Other("let in".into())
        }
    }
}

fn assert_status(refused: Refused, status: u16, what: &str) {
    match refused {
        Refused::Status(got) => assert_eq!(got, status, "{what}"),
        Refused::Other(other) => panic!("{what}: expected HTTP {status}, got: {other}"),
    }
}

/// One raw HTTP request; the status line's code.
fn raw_status(address: SocketAddr, request: &[u8]) -> u16 {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    // The server may answer (and close) before it has read everything.
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"))
}

/// An HTTP GET with these headers; the status and body.
fn get(address: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn refused_requests_start_nothing_and_the_token_is_never_written() {
    let place = Place::new();
    // A small message limit, from [server] in the user's config.
    let config = place.path().join("config.toml");
    std::fs::write(&config, "[server]\nmax_message_bytes = 4096\n").unwrap();
    let config = config.display().to_string();
    let mut server = place.serve(
        &[
            "--config",
            &config,
            "--allow-origin",
            "https://allowed.example",
        ],
        &[("KEEL_SERVER_TOKEN", TOKEN), ("KEEL_LOG", "trace")],
    );
    let address = server.address;
    let wrong = "Bearer keel-test-token-0000000000";
    let bearer = format!("Bearer {TOKEN}");
    runtime().block_on(async {
        assert_status(attempt(&place, address, "/", &[]).await, 401, "anonymous");
        assert_status(
            attempt(&place, address, "/", &[("authorization", wrong)]).await,
            401,
            "a wrong token",
        );
        assert_status(
            attempt(
                &place,
                address,
                "/",
                &[("authorization", &format!("Basic {TOKEN}"))],
            )
            .await,
            401,
            "not a bearer token",
        );
        // The right token in the URL is refused, even beside a valid header.
        assert_status(
            attempt(&place, address, &format!("/?token={TOKEN}"), &[]).await,
            400,
            "a token in the URL",
        );
        assert_status(
            attempt(
                &place,
                address,
                &format!("/?x=1&token={TOKEN}"),
                &[("authorization", &bearer)],
            )
            .await,
            400,
            "a token in the URL beside a header",
        );
        assert_status(
            attempt(&place, address, &format!("/?access_token={TOKEN}"), &[]).await,
            400,
            "an access_token in the URL",
        );
        assert_status(
            attempt(&place, address, &format!("/?%74oken={TOKEN}"), &[]).await,
            400,
            "a percent-encoded token key in the URL",
        );
        assert_status(
            attempt(
                &place,
                address,
                "/",
                &[
                    ("authorization", &bearer),
                    ("origin", "https://evil.example"),
                ],
            )
            .await,
            403,
            "a browser origin not on the allowlist",
        );

        // Oversized: a message over the limit is answered with a typed
        // error and the connection closed; nothing of it runs.
        let mut client = Client::authorized(address).await;
        let workspace = place.workspace("big");
        let prompt = "x".repeat(5000);
        client
            .send(
                json!({"jsonrpc": "2.0", "id": 9, "method": "run/start",
                "params": {"prompt": prompt, "workspace": workspace}})
                .to_string(),
            )
            .await;
        let answer = client.read().await.expect("a message_too_large answer");
        assert_eq!(answer["id"], Value::Null, "{answer}");
        assert_kind(&answer["error"], "message_too_large");
        assert!(
            client.read().await.is_none(),
            "the connection is closed after it"
        );
    });
    // An oversized request head: 431 from the HTTP layer, before any route.
    let big = format!(
        "GET / HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {TOKEN}\r\nX-Filler: {}\r\n\r\n",
        "y".repeat(64 * 1024)
    );
    assert_eq!(
        raw_status(address, big.as_bytes()),
        431,
        "oversized headers"
    );
    let many: String = (0..200).map(|n| format!("X-H{n}: v\r\n")).collect();
    let many = format!("GET /health HTTP/1.1\r\nHost: {address}\r\n{many}\r\n");
    assert_eq!(
        raw_status(address, many.as_bytes()),
        431,
        "too many headers"
    );
    let leftovers = files_under(&place.sessions());
    assert!(
        leftovers.is_empty(),
        "a refused request wrote {leftovers:?}"
    );

    // /health needs nothing and says nothing more; /metrics needs the token.
    assert_eq!(get(address, "/health", &[]), (200, "ok".to_owned()));
    assert_eq!(get(address, "/metrics", &[]).0, 401);
    assert_eq!(get(address, "/metrics", &[("Authorization", wrong)]).0, 401);

    // One authorised run, whose command prints its environment.
    let events = runtime().block_on(async {
        let mut client = Client::authorized(address).await;
        let workspace = place.workspace("good");
        let started = client
            .call(
                "run/start",
                json!({"prompt": "Go.", "workspace": workspace, "mode": "auto"}),
            )
            .await
            .unwrap();
        let run_id = started["run_id"].as_str().unwrap().to_owned();
        let events = client.events_until(&run_id, "run_settled").await;
        let env_output = events
            .iter()
            .filter(|event| event["type"] == "tool_execution_end")
            .map(|event| event.to_string())
            .collect::<String>();
        assert!(
            env_output.contains("PATH="),
            "the command printed its environment: {env_output}"
        );
        events
    });
    let (status, metrics) = get(address, "/metrics", &[("Authorization", &bearer)]);
    assert_eq!(status, 200, "{metrics}");
    assert!(metrics.contains("keel_runs_started_total 1"), "{metrics}");
    assert!(
        metrics.contains("keel_tenant_runs_started_total{tenant=\"default\"} 1"),
        "{metrics}"
    );
    assert!(!metrics.contains(TOKEN), "{metrics}");

    assert_eq!(
        server.terminate(PATIENCE),
        Some(0),
        "SIGTERM drains and exits 0"
    );
    let stderr = server.stderr();
    assert!(
        stderr.contains("TRACE") || stderr.contains("DEBUG"),
        "KEEL_LOG=trace logged: {stderr}"
    );
    assert!(
        !stderr.contains(TOKEN),
        "the token is in the log:\n{stderr}"
    );
    for event in &events {
        assert!(
            !event.to_string().contains(TOKEN),
            "the token is in an event: {event}"
        );
    }
    let sessions = files_under(&place.sessions());
    assert!(!sessions.is_empty());
    for file in sessions {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(TOKEN),
            "the token is in {}",
            file.display()
        );
    }
}

#[test]
fn a_public_address_without_a_token_refuses_to_start() {
    let place = Place::new();
    let output = common::keel_command()
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--script",
            &place.file("script.json"),
        ])
        .env("HOME", place.path())
        .env("XDG_CONFIG_HOME", place.path().join("config"))
        .env("XDG_DATA_HOME", place.path().join("data"))
        .env_remove("KEEL_SERVER_TOKEN")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("[token_required]"), "{stderr}");
    assert!(
        output.stdout.is_empty(),
        "nothing was bound: {:?}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn a_loopback_server_without_a_token_serves_local_clients_and_origins_are_checked() {
    let place = Place::new();
    let server = place.serve(&[], &[]);
    runtime().block_on(async {
        let mut client = Client::connect(server.address, "/", &[]).await.unwrap();
        let result = client.call("initialize", json!({})).await.unwrap();
        let _: rpc::InitializeResponse = shape("initialize", &result);
        // A web page's origin is refused even here (loopback origins too).
        assert_status(
            attempt(
                &place,
                server.address,
                "/",
                &[("origin", "http://127.0.0.1:8000")],
            )
            .await,
            403,
            "a browser origin on a loopback server",
        );
    });
    assert!(files_under(&place.sessions()).is_empty());
}

/// DNS rebinding: a page on `rebind.example` whose name now resolves to
/// 127.0.0.1 sends same-origin requests (a GET carries no `Origin`) with
/// `Host: rebind.example:PORT`. A server without a token answers only
/// requests addressed to a loopback name.
#[test]
fn a_server_without_a_token_refuses_a_rebound_host() {
    let place = Place::new();
    let server = place.serve(&[], &[]);
    let address = server.address;
    let port = address.port();
    let request = |host: &str, path: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
    };
    for host in [
        format!("rebind.example:{port}"),
        "rebind.example".to_owned(),
        format!("localhost.rebind.example:{port}"),
        format!("127.0.0.1.rebind.example:{port}"),
        format!("[::ffff:7f00:1]x:{port}"),
    ] {
        assert_eq!(
            raw_status(address, request(&host, "/metrics").as_bytes()),
            403,
            "/metrics with Host {host}"
        );
    }
    for host in [
        address.to_string(),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        "127.0.0.1".to_owned(),
        format!("[::1]:{port}"),
    ] {
        assert_eq!(
            raw_status(address, request(&host, "/metrics").as_bytes()),
            200,
            "/metrics with Host {host}"
        );
    }
    // The WebSocket too: a program without `Origin` but a rebound `Host`.
    runtime().block_on(async {
        assert_status(
            attempt(
                &place,
                address,
                "/",
                &[("host", &format!("rebind.example:{port}"))],
            )
            .await,
            403,
            "a rebound Host",
        );
    });
    assert!(files_under(&place.sessions()).is_empty());
}

/// Each `run/start` may name its own workspace and model, and each
/// distinct pair is a kernel of its own: the cache of idle kernels is
/// bounded (64 by default), not kept for the idle TTL whatever its size.
#[test]
fn the_kernel_cache_stays_bounded_whatever_models_clients_name() {
    let place = Place::with_script(
        r#"{"by_history": true, "turns": [{"content": [{"type": "text", "text": "ok"}]}]}"#,
    );
    let server = place.serve(&["--token-file", &place.file("token")], &[]);
    let address = server.address;
    let workspace = place.workspace("one");
    runtime().block_on(async {
        let mut client = Client::authorized(address).await;
        for n in 0..70 {
            let started = client
                .call(
                    "run/start",
                    json!({"prompt": "Go.", "workspace": workspace, "model": format!("model-{n}"),
                           "subscribe": false}),
                )
                .await
                .unwrap();
            client
                .call("run/result", json!({"run_id": started["run_id"]}))
                .await
                .unwrap();
        }
    });
    let (status, metrics) = get(
        address,
        "/metrics",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
    );
    assert_eq!(status, 200, "{metrics}");
    let cached: u64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("keel_kernels_cached "))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no keel_kernels_cached in {metrics}"));
    assert!(metrics.contains("keel_runs_started_total 70"), "{metrics}");
    assert!(
        cached <= 64,
        "{cached} kernels cached after 70 models: {metrics}"
    );
}

/// A named token's holder does not get the server user's authority: its
/// runs stay at or below `auto` (every command sandboxed), the broker
/// denies its permission requests that would widen a run past the sandbox
/// (reading the default tenant's token file, outside the workspace) as
/// they come, and `workspaces` confines where its runs may work. Before
/// the ceiling (`keel_host::broker::Authority`), a `full` run of tenant
/// `ci` printed the default tenant's token.
#[test]
fn a_named_token_stays_under_its_ceiling() {
    let place = Place::new();
    let script = format!(
        r#"{{"by_history": true, "turns": [
  {{"content": [{{"type": "tool_call", "name": "bash", "arguments": {{"command": "cat {}"}}}}]}},
  {{"content": [{{"type": "text", "text": "done"}}]}}
]}}"#,
        place.file("token")
    );
    std::fs::write(place.path().join("script.json"), script).unwrap();
    let ci_token = "keel-ci-token-7a61f0c2b9e4";
    std::fs::write(place.path().join("ci.token"), ci_token).unwrap();
    let allowed = place.workspace("ci");
    let elsewhere = place.workspace("elsewhere");
    let config = place.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ntoken_file = \"{}\"\n[server.tokens.ci]\ntoken_file = \"{}\"\n\
             workspaces = [\"{allowed}\"]\n",
            place.file("token"),
            place.file("ci.token")
        ),
    )
    .unwrap();
    let server = place.serve(&["--config", &config.display().to_string()], &[]);
    let address = server.address;
    let seen = runtime().block_on(async {
        let bearer = format!("Bearer {ci_token}");
        let mut ci = Client::connect(address, "/", &[("authorization", &bearer)])
            .await
            .unwrap();
        ci.call("initialize", json!({})).await.unwrap();
        let full = ci
            .call(
                "run/start",
                json!({"prompt": "Go.", "workspace": allowed, "mode": "full"}),
            )
            .await
            .unwrap_err();
        assert_kind(&full, "not_allowed");
        let outside = ci
            .call(
                "run/start",
                json!({"prompt": "Go.", "workspace": elsewhere, "mode": "auto"}),
            )
            .await
            .unwrap_err();
        assert_kind(&outside, "not_allowed");
        let started = ci
            .call(
                "run/start",
                json!({"prompt": "Go.", "workspace": allowed, "mode": "auto"}),
            )
            .await
            .unwrap();
        let run_id = started["run_id"].as_str().unwrap().to_owned();
        let mut seen = String::new();
        for event in ci.events_until(&run_id, "run_settled").await {
            let text = event.to_string();
            if text.contains("\"permission_requested\"") {
                // The client approves; the broker denied it already.
                let request_id = event["request_id"]
                    .as_str()
                    .or_else(|| event["event"]["request_id"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                let approved = ci
                    .call(
                        "permission/resolve",
                        json!({"run_id": run_id, "request_id": request_id, "decision": "approve"}),
                    )
                    .await;
                assert!(approved.is_err(), "an approval past the ceiling was taken");
            }
            seen.push_str(&text);
        }
        seen
    });
    assert!(
        seen.contains("permission_resolved") && seen.contains("denied"),
        "the widening request was not denied: {seen}"
    );
    assert!(
        !seen.contains(TOKEN),
        "tenant ci read the default tenant's token through its run"
    );
}

/// A finished run's ring stays readable for the grace period (5 minutes),
/// but a client starting many short runs cannot make the server hold one
/// for each: past 1,024 finished runs the first finished is forgotten.
#[test]
fn finished_runs_held_for_their_grace_are_bounded() {
    let place = Place::with_script(
        r#"{"by_history": true, "turns": [{"content": [{"type": "text", "text": "ok"}]}]}"#,
    );
    let server = place.serve(&["--token-file", &place.file("token")], &[]);
    let workspace = place.workspace("many");
    runtime().block_on(async {
        let mut client = Client::authorized(server.address).await;
        let mut run_ids = Vec::new();
        for _ in 0..1030 {
            let started = client
                .call(
                    "run/start",
                    json!({"prompt": "Go.", "workspace": workspace, "subscribe": false}),
                )
                .await
                .unwrap();
            let run_id = started["run_id"].clone();
            client
                .call("run/result", json!({"run_id": run_id}))
                .await
                .unwrap();
            run_ids.push(run_id);
        }
        let first = client
            .call("run/result", json!({"run_id": run_ids[0]}))
            .await
            .expect_err("the first of 1,030 finished runs is still held");
        assert_kind(&first, "not_found");
        client
            .call("run/result", json!({"run_id": run_ids[1029]}))
            .await
            .expect("the last finished run is held");
    });
}

/// A named token of `[server.tokens.NAME]` is its own tenant with its own
/// quota; the unnamed token is tenant `default`; /metrics counts both.
#[test]
fn named_tokens_are_tenants_with_their_quotas() {
    let place = Place::new();
    let ci_token = "keel-ci-token-7a61f0c2b9e4";
    std::fs::write(place.path().join("ci.token"), ci_token).unwrap();
    let config = place.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ntoken_file = \"{}\"\n[server.tokens.ci]\ntoken_file = \"{}\"\nmax_active_runs = 0\n",
            place.file("token"),
            place.file("ci.token")
        ),
    )
    .unwrap();
    let server = place.serve(&["--config", &config.display().to_string()], &[]);
    let address = server.address;
    runtime().block_on(async {
        let bearer = format!("Bearer {ci_token}");
        let mut ci = Client::connect(address, "/", &[("authorization", &bearer)])
            .await
            .unwrap();
        ci.call("initialize", json!({})).await.unwrap();
        let workspace = place.workspace("ci");
        let error = ci
            .call(
                "run/start",
                json!({"prompt": "Go.", "workspace": workspace}),
            )
            .await
            .unwrap_err();
        assert_kind(&error, "quota_exceeded");
        assert!(error["data"]["retry_after_ms"].is_u64(), "{error}");

        let mut default = Client::authorized(address).await;
        let started = default
            .call(
                "run/start",
                json!({"prompt": "Go.", "workspace": place.workspace("default"), "mode": "auto"}),
            )
            .await
            .unwrap();
        let run_id = started["run_id"].as_str().unwrap().to_owned();
        default
            .call("run/result", json!({"run_id": run_id}))
            .await
            .unwrap();
        // Another tenant's run is not there for ci.
        let error = ci
            .call("run/result", json!({"run_id": run_id}))
            .await
            .unwrap_err();
        assert_kind(&error, "not_found");
    });
    let (status, metrics) = get(
        address,
        "/metrics",
        &[("Authorization", &format!("Bearer {ci_token}"))],
    );
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.contains("keel_tenant_runs_refused_total{tenant=\"ci\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("tenant=\"default\""),
        "a named token sees only its own tenant's counts: {metrics}"
    );
    assert!(
        !metrics.contains(ci_token) && !metrics.contains(TOKEN),
        "{metrics}"
    );
    let (status, everyone) = get(
        address,
        "/metrics",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
    );
    assert_eq!(status, 200, "{everyone}");
    assert!(
        everyone.contains("keel_tenant_runs_started_total{tenant=\"default\"} 1")
            && everyone.contains("keel_tenant_runs_refused_total{tenant=\"ci\"} 1"),
        "the default token sees every tenant: {everyone}"
    );
}

/// One tenant cannot lock the others out by holding every WebSocket
/// connection: past its share (1,024 by default, a quarter of the 4,096
/// the server holds) its upgrade gets 429, while another tenant still gets
/// in; a slot comes back when one of its clients leaves.
#[test]
fn one_tenant_cannot_take_every_connection() {
    let place = Place::new();
    let ci_token = "keel-ci-token-7a61f0c2b9e4";
    std::fs::write(place.path().join("ci.token"), ci_token).unwrap();
    let config = place.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ntoken_file = \"{}\"\n[server.tokens.ci]\ntoken_file = \"{}\"\n",
            place.file("token"),
            place.file("ci.token")
        ),
    )
    .unwrap();
    let server = place.serve(&["--config", &config.display().to_string()], &[]);
    let address = server.address;
    runtime().block_on(async {
        let bearer = format!("Bearer {ci_token}");
        let headers = [("authorization", bearer.as_str())];
        let mut held = Vec::new();
        let refused = loop {
            match Client::connect(address, "/", &headers).await {
                Ok(client) => held.push(client),
                Err(refused) => break refused,
            }
            assert!(
                held.len() <= 1024,
                "tenant ci holds {} connections and is still let in",
                held.len()
            );
        };
        assert_status(refused, 429, "tenant ci past its share");
        assert_eq!(held.len(), 1024);
        let mut other = Client::authorized(address).await;
        other.call("models/list", json!({})).await.unwrap();
        let mut gone = held.pop().unwrap();
        gone.socket.close(None).await.unwrap();
        drop(gone);
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            match Client::connect(address, "/", &headers).await {
                Ok(_) => break,
                Err(refused) => assert!(
                    std::time::Instant::now() < deadline,
                    "no slot came back for ci: {refused:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// SIGTERM with a run in flight: no new runs (`draining`), the run gets the
/// drain timeout, then is cancelled with its session intact; exit 0.
#[test]
fn sigterm_drains_then_cancels_and_exits_zero() {
    let place = Place::with_script(
        r#"{"by_history": true, "turns": [{"delay_ms": 60000, "content": [{"type": "text", "text": "Too late."}]}]}"#,
    );
    let mut server = place.serve(&["--drain-timeout", "1"], &[]);
    let runtime = runtime();
    let (session_id, mut client) = runtime.block_on(async {
        let mut client = Client::connect(server.address, "/", &[]).await.unwrap();
        client.call("initialize", json!({})).await.unwrap();
        let started = client
            .call(
                "run/start",
                json!({"prompt": "Wait.", "workspace": place.workspace("slow")}),
            )
            .await
            .unwrap();
        let run_id = started["run_id"].as_str().unwrap().to_owned();
        client.events_until(&run_id, "turn_start").await;
        (started["session_id"].as_str().unwrap().to_owned(), client)
    });
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    runtime.block_on(async {
        // While it drains, a start is refused as `draining`.
        let error = loop {
            match client
                .call(
                    "run/start",
                    json!({"prompt": "More.", "workspace": place.workspace("late")}),
                )
                .await
            {
                Err(error) => break error,
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        assert_kind(&error, "draining");
    });
    assert_eq!(
        server.terminate(PATIENCE),
        Some(0),
        "it drained and exited 0"
    );
    let session = files_under(&place.sessions())
        .into_iter()
        .find(|path| {
            path.display()
                .to_string()
                .ends_with(&format!("{session_id}.jsonl"))
        })
        .expect("the run's session");
    let text = std::fs::read_to_string(session).unwrap();
    assert!(
        text.contains("\"run_end\"") && text.contains("cancelled"),
        "{text}"
    );
}
