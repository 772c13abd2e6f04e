//! `keel serve`: the host protocol over WebSocket, with `GET /health` and
//! `GET /metrics`.
//!
//! Routes:
//! - `GET /` upgraded to a WebSocket: one JSON-RPC message per text
//!   message, both ways.
//! - `GET /health`: `ok`, to anyone (no detail).
//! - `GET /metrics`: the broker's counters as Prometheus text.
//!
//! Who may connect, checked in this order before any work (no broker
//! connection is made for a refused request):
//! 1. a `token` (or `access_token`) in the URL's query is refused with 400:
//!    a token in a URL ends up in logs and histories; it goes in the
//!    `Authorization: Bearer` header only;
//! 2. a request with an `Origin` header (a browser) whose origin is not on
//!    the allowlist (`--allow-origin`) gets 403; loopback origins are not
//!    special. Requests without `Origin` (programs) pass;
//! 3. with tokens configured, a request without a valid bearer token gets
//!    401; with none configured (allowed on loopback only, see
//!    [`ServeConfig::check`]) a request whose `Host` is not a loopback
//!    name (`localhost`, `127.0.0.1`, `[::1]`, with any port) gets 403, so
//!    a web page cannot reach it through DNS rebinding, and every other
//!    client is tenant `local`.
//!
//! Limits: a request head larger than [`ServeConfig::max_header_bytes`]
//! (or with more than [`MAX_HEADERS`] headers) gets 431 from the HTTP
//! layer; a head not read within [`HEADER_TIMEOUT`] closes the
//! connection; a WebSocket message over [`ServeConfig::max_message_bytes`]
//! is answered with `message_too_large` and the connection closed (1009).
//! No route reads a request body. At most
//! [`ServeConfig::max_connections`] HTTP connections are served at once
//! (past it, accepting waits) and as many WebSocket clients (past it, an
//! upgrade gets 503), of which one tenant may hold at most
//! [`ServeConfig::max_connections_per_tenant`] (past it, its upgrade gets
//! 429), so one tenant cannot lock the others out.
//!
//! A WebSocket that closes ends its subscriptions only: its runs go on,
//! and any connection of the same tenant may subscribe again and answer
//! their permission requests.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use keel_host::broker::{Broker, Tenant};
use keel_protocol::rpc::{ErrorKind, Response as RpcResponse, RpcError};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::auth::{LOCAL_TENANT, bearer};
use crate::dispatch::{self, Dispatch, WRITER_QUEUE};
use crate::{ServeConfig, ServerError};

/// The most headers a request may have.
pub const MAX_HEADERS: usize = 64;

/// How long a client has to send a request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// A bound server, not yet serving.
pub struct Server {
    listener: TcpListener,
    address: SocketAddr,
    config: Arc<ServeConfig>,
}

/// Checks `config` (a non-loopback address needs a token) and binds.
pub async fn bind(config: ServeConfig) -> Result<Server, ServerError> {
    config.check()?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServerError::Bind {
            address: config.listen,
            source,
        })?;
    let address = listener.local_addr().map_err(|source| ServerError::Bind {
        address: config.listen,
        source,
    })?;
    Ok(Server {
        listener,
        address,
        config: Arc::new(config),
    })
}

impl Server {
    /// The address it listens on (with the port chosen, for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Serves until `shutdown` resolves, then drains the broker (no new
    /// runs; running ones get the drain timeout, then are cancelled) while
    /// still serving, and returns once every run has settled.
    pub async fn run(self, broker: Broker, shutdown: impl Future<Output = ()>) {
        let state = AppState {
            broker: broker.clone(),
            config: Arc::clone(&self.config),
            clients: Arc::new(tokio::sync::Semaphore::new(
                self.config.max_connections.max(1),
            )),
            per_tenant: Arc::default(),
        };
        let app = Router::new()
            .route("/", get(websocket))
            .route("/health", get(health))
            .route("/metrics", get(metrics))
            .with_state(state);
        let max_header_bytes = self.config.max_header_bytes;
        let listener = self.listener;
        let open = Arc::new(tokio::sync::Semaphore::new(
            self.config.max_connections.max(1),
        ));
        let accept = tokio::spawn(async move {
            loop {
                // At the limit, accepting waits: new clients queue in the
                // kernel's backlog instead of in this process's memory.
                let Ok(slot) = Arc::clone(&open).acquire_owned().await else {
                    return;
                };
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let app = app.clone();
                        tokio::spawn(async move {
                            connection(stream, app, max_header_bytes).await;
                            drop(slot);
                        });
                    }
                    Err(error) => {
                        tracing::warn!(%error, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        shutdown.await;
        tracing::info!(
            grace_secs = self.config.drain_timeout.as_secs(),
            "shutting down: draining runs"
        );
        broker.drain(self.config.drain_timeout).await;
        accept.abort();
        tracing::info!("drained");
    }
}

/// Serves one TCP connection with HTTP/1.1 (and its upgrade).
async fn connection(stream: TcpStream, app: Router, max_header_bytes: usize) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_buf_size(max_header_bytes.max(8192))
        .max_headers(MAX_HEADERS)
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let served = builder
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
        .with_upgrades()
        .await;
    if let Err(error) = served {
        tracing::debug!(%error, "connection ended with an error");
    }
}

#[derive(Clone)]
struct AppState {
    broker: Broker,
    config: Arc<ServeConfig>,
    /// One permit per open WebSocket client (an upgraded connection leaves
    /// the accept loop's count).
    clients: Arc<tokio::sync::Semaphore>,
    /// Open WebSocket clients by tenant.
    per_tenant: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

/// One open WebSocket client of a tenant, counted until dropped.
struct TenantSlot {
    tenant: String,
    counts: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

impl TenantSlot {
    /// A slot for `tenant`, unless it has `max` clients open already.
    fn take(state: &AppState, tenant: &str) -> Option<TenantSlot> {
        let mut counts = lock(&state.per_tenant);
        let open = counts.entry(tenant.to_owned()).or_insert(0);
        if *open >= state.config.max_connections_per_tenant.max(1) {
            return None;
        }
        *open += 1;
        Some(TenantSlot {
            tenant: tenant.to_owned(),
            counts: Arc::clone(&state.per_tenant),
        })
    }
}

impl Drop for TenantSlot {
    fn drop(&mut self) {
        let mut counts = lock(&self.counts);
        if let Some(open) = counts.get_mut(&self.tenant) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                counts.remove(&self.tenant);
            }
        }
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked
/// (nothing here panics while holding one).
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn health() -> &'static str {
    "ok"
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap, uri: Uri) -> Response {
    let tenant = match admit(&state.config, &headers, &uri) {
        Ok(tenant) => tenant,
        Err(refused) => return refused.into_response(),
    };
    let mut metrics = state.broker.metrics();
    // A named token sees its own tenant's counts, not the others' names.
    if tenant.name != Tenant::LOCAL && tenant.name != Tenant::DEFAULT {
        metrics.tenants.retain(|name, _| *name == tenant.name);
    }
    let text = crate::metrics::render(&metrics);
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}

async fn websocket(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let tenant = match admit(&state.config, &headers, &uri) {
        Ok(tenant) => tenant,
        Err(refused) => return refused.into_response(),
    };
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let Some(slot) = TenantSlot::take(&state, &tenant.name) else {
        tracing::warn!(tenant = %tenant.name, "refused a client: too many connections for its tenant");
        return (
            StatusCode::TOO_MANY_REQUESTS,
            "too many connections for this token",
        )
            .into_response();
    };
    let Ok(permit) = Arc::clone(&state.clients).try_acquire_owned() else {
        tracing::warn!("refused a client: too many connections");
        return (StatusCode::SERVICE_UNAVAILABLE, "too many connections").into_response();
    };
    tracing::info!(tenant = %tenant.name, "client connected");
    let limit = state.config.max_message_bytes;
    upgrade
        .max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| async move {
            client(socket, state, tenant).await;
            drop(permit);
            drop(slot);
        })
}

/// Why a request was refused before any work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// A token in the URL (400).
    TokenInUrl,
    /// A browser origin not on the allowlist (403).
    Origin,
    /// No valid bearer token (401).
    Unauthorized,
    /// A `Host` that is not a loopback name on a server without a token
    /// (403): DNS rebinding.
    Host,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            Self::TokenInUrl => (
                StatusCode::BAD_REQUEST,
                "token_in_url",
                "a token is never accepted in the URL: send it in the Authorization: Bearer header",
            ),
            Self::Origin => (
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                "this Origin is not allowed (keel serve --allow-origin ORIGIN)",
            ),
            Self::Host => (
                StatusCode::FORBIDDEN,
                "host_not_allowed",
                "a server without a token answers only requests addressed to a loopback name \
                 (localhost, 127.0.0.1, [::1])",
            ),
            Self::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid token is required in the Authorization: Bearer header",
            ),
        };
        let body = serde_json::json!({ "code": code, "message": message }).to_string();
        let mut response =
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        if self == Self::Unauthorized {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// Who the request acts for, or the refusal (see the module docs). Logs
/// the refusal's kind only: never a header or the URL.
fn admit(config: &ServeConfig, headers: &HeaderMap, uri: &Uri) -> Result<Tenant, Refusal> {
    if token_in_query(uri) {
        tracing::warn!("refused a request with a token in its URL");
        return Err(Refusal::TokenInUrl);
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let allowed = origin.to_str().is_ok_and(|origin| {
            config
                .allow_origins
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(origin))
        });
        if !allowed {
            tracing::warn!("refused a request from an origin not on the allowlist");
            return Err(Refusal::Origin);
        }
    }
    if config.tokens.is_empty() {
        // Without a token, the address is the only credential: a page on
        // another site whose name was re-pointed at 127.0.0.1 (DNS
        // rebinding) reaches this server as a same-origin request, without
        // an `Origin` header on a GET, but its `Host` still names the
        // other site.
        if !headers.get(header::HOST).is_none_or(loopback_host) {
            tracing::warn!("refused a request whose Host is not a loopback name");
            return Err(Refusal::Host);
        }
        return Ok(Tenant::new(LOCAL_TENANT));
    }
    let name = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| bearer(value.as_bytes()))
        .and_then(|token| config.tokens.check(token));
    match name {
        Some(name) => Ok(Tenant::new(name)),
        None => {
            tracing::warn!("refused a request without a valid bearer token");
            Err(Refusal::Unauthorized)
        }
    }
}

/// Whether a `Host` header names a loopback host: `localhost`, or a
/// loopback IP address (`127.0.0.1`, `[::1]`), with or without a port.
fn loopback_host(value: &header::HeaderValue) -> bool {
    let Ok(host) = value.to_str() else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        match rest.split_once(']') {
            Some((address, port)) if port.is_empty() || port.starts_with(':') => address,
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, _port)) => name,
            None => host,
        }
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

/// Whether a WebSocket error is a message over the size limit.
fn too_large(error: &axum::Error) -> bool {
    use tokio_tungstenite::tungstenite;
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<tungstenite::Error>())
        .is_some_and(|error| matches!(error, tungstenite::Error::Capacity(_)))
}

/// Whether the query names a token parameter.
fn token_in_query(uri: &Uri) -> bool {
    uri.query().is_some_and(|query| {
        query.split(['&', ';']).any(|pair| {
            // Keys are compared decoded: `%74oken` is `token` to whatever
            // reads the URL after Keel.
            let key = percent_decoded(pair.split('=').next().unwrap_or_default());
            key.eq_ignore_ascii_case(b"token") || key.eq_ignore_ascii_case(b"access_token")
        })
    })
}

/// `text` with `%XX` escapes (and `+`) decoded; a malformed escape stays
/// as it is.
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        let escaped = (byte == b'%')
            .then(|| bytes.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(value) => {
                decoded.push(value);
                index += 3;
            }
            None => {
                decoded.push(if byte == b'+' { b' ' } else { byte });
                index += 1;
            }
        }
    }
    decoded
}

/// One WebSocket client: its messages in, answers and notifications out,
/// all writes from this loop.
async fn client(mut socket: WebSocket, state: AppState, tenant: Tenant) {
    let connection = state.broker.connect(tenant);
    let caller = connection.caller();
    let (out, mut lines) = mpsc::channel::<String>(WRITER_QUEUE);
    let pump = dispatch::pump(connection, out.clone());
    let mut dispatch = Dispatch::new(caller, out, state.config.max_in_flight);
    loop {
        tokio::select! {
            line = lines.recv() => {
                let Some(line) = line else { break };
                if socket.send(Message::Text(line.into())).await.is_err() {
                    break;
                }
            }
            message = socket.recv(), if dispatch.has_slot() => {
                let Some(slot) = dispatch.slot().await else { break };
                match message {
                    None | Some(Ok(Message::Close(_))) => break,
                    Some(Ok(Message::Text(text))) => dispatch.frame(text.as_bytes(), slot),
                    Some(Ok(Message::Binary(_))) => {
                        let refused = RpcResponse::error(None, RpcError::new(
                            ErrorKind::InvalidRequest,
                            "binary messages are not read: send each JSON-RPC message as text",
                        ));
                        dispatch.answer(refused, slot);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => {
                        if too_large(&error) {
                            let limit = state.config.max_message_bytes;
                            tracing::warn!(limit, "closing a connection that sent a message over the limit");
                            if let Ok(text) = serde_json::to_string(&dispatch::too_large(limit)) {
                                let _ = socket.send(Message::Text(text.into())).await;
                            }
                            let _ = socket
                                .send(Message::Close(Some(CloseFrame {
                                    code: close_code::SIZE,
                                    reason: "message too large".into(),
                                })))
                                .await;
                        } else {
                            tracing::debug!(%error, "a WebSocket ended with an error");
                        }
                        break;
                    }
                }
            }
        }
    }
    dispatch.close().await;
    pump.abort();
    tracing::info!("client disconnected");
}
