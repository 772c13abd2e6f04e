//! Keel's host protocol: JSON-RPC 2.0 messages, the same over `keel rpc`
//! (one object per line on stdio) and `keel serve` (WebSocket).
//!
//! This module holds the envelope — requests, responses, notifications and
//! errors — and every error's stable code. The methods' parameter and
//! result types live in [`methods`]; the broker in keel-host applies them
//! and the transports only frame them.
//!
//! Invariants:
//! - Every error a client can receive has a stable numeric `code` and a
//!   stable snake_case name in `data.code` ([`ErrorKind`]); the message is
//!   for people and may change.
//! - Nothing here does I/O: a transport reads a frame, [`Incoming::parse`]s
//!   it, and writes what the broker answers.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod methods;

/// The protocol version `initialize` reports; raised on any incompatible
/// change to a method, a notification or an error code.
pub const PROTOCOL_VERSION: u32 = 1;

/// The only JSON-RPC version Keel speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum JsonRpcVersion {
    /// `"2.0"`.
    #[default]
    #[serde(rename = "2.0")]
    V2,
}

/// A request id: a number or a string, echoed in the response.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RequestId {
    /// A number.
    Number(i64),
    /// A string.
    String(String),
}

/// A call from a client: with an `id` it expects a response, without one it
/// is a notification and is answered by nothing (not even an error).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Request {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The request's id (absent for a notification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<RequestId>,
    /// The method, `<resource>/<verb>` (e.g. `run/start`).
    pub method: String,
    /// The method's parameters (an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

/// The answer to a request with an id: exactly one of `result` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Response {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The request's id; `null` when it could not be read.
    pub id: Option<RequestId>,
    /// The outcome.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// A response's `result` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The method's result.
    Result(Value),
    /// Why the method failed.
    Error(RpcError),
}

impl Response {
    /// A successful response.
    pub fn ok(id: Option<RequestId>, result: Value) -> Self {
        Self {
            jsonrpc: JsonRpcVersion::V2,
            id,
            outcome: Outcome::Result(result),
        }
    }

    /// A failed response.
    pub fn error(id: Option<RequestId>, error: RpcError) -> Self {
        Self {
            jsonrpc: JsonRpcVersion::V2,
            id,
            outcome: Outcome::Error(error),
        }
    }
}

/// A message from the server that answers nothing (e.g. `run/event`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Notification {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The notification's method.
    pub method: String,
    /// Its parameters.
    pub params: Value,
}

impl Notification {
    /// A notification of `method` with `params`.
    pub fn new(method: impl Into<String>, params: Value) -> Self {
        Self {
            jsonrpc: JsonRpcVersion::V2,
            method: method.into(),
            params,
        }
    }
}

/// A JSON-RPC error object. `data` always carries `code` (the
/// [`ErrorKind`]'s name) and may carry more (`retry_after_ms`,
/// `oldest_seq`, …) as the kind documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct RpcError {
    /// The numeric JSON-RPC code ([`ErrorKind::number`]).
    pub code: i32,
    /// What went wrong, for people. Never quotes a secret or a file's contents.
    pub message: String,
    /// `{"code": "<kind>", …}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error of `kind` with a message and no further data.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            code: kind.number(),
            message: message.into(),
            data: Some(serde_json::json!({ "code": kind.name() })),
        }
    }

    /// Adds a field to `data` (beside `code`).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        if let Some(Value::Object(data)) = &mut self.data {
            data.insert(key.to_owned(), value.into());
        }
        self
    }

    /// The stable name in `data.code`, if any.
    pub fn kind_name(&self) -> Option<&str> {
        self.data.as_ref()?.get("code")?.as_str()
    }
}

/// Every error a client can receive, with its stable number and name.
///
/// The standard JSON-RPC codes keep their numbers; Keel's own are in
/// -32000..=-32099 and never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The frame is not JSON (-32700).
    ParseError,
    /// The JSON is not a request (-32600).
    InvalidRequest,
    /// No such method (-32601).
    MethodNotFound,
    /// The parameters do not fit the method (-32602).
    InvalidParams,
    /// Keel failed in a way the client cannot fix (-32603).
    Internal,
    /// A request before `initialize` (-32001).
    NotInitialized,
    /// The frame is larger than the transport allows (-32002).
    MessageTooLarge,
    /// No such run, session, entry or permission request (-32003).
    NotFound,
    /// The session has a live run in this process (-32004).
    SessionBusy,
    /// The run is not active (already settled, failed or cancelled) (-32005).
    RunNotActive,
    /// Admission refused the start: `data.retry_after_ms` says when to try
    /// again (-32006).
    Overloaded,
    /// The caller's token is over one of its quotas; `data.retry_after_ms`
    /// (-32007).
    QuotaExceeded,
    /// The server is draining and starts no runs (-32008).
    Draining,
    /// The asked `seq` is older than the run's event ring holds:
    /// `data.oldest_seq`, and `data.session_id` to rebuild from with
    /// `session/get` (-32009).
    EventsLagged,
    /// The kernel refused the run or the session operation; `data.kernel_code`
    /// names the kernel's own code (-32010).
    Refused,
    /// The host configuration is wrong (provider, model, tools, workspace)
    /// (-32011).
    Configuration,
    /// The caller's tenant may not do this (a mode above its ceiling, a
    /// workspace outside its roots) (-32012).
    NotAllowed,
}

impl ErrorKind {
    /// The numeric JSON-RPC code.
    pub fn number(self) -> i32 {
        match self {
            Self::ParseError => -32700,
            Self::InvalidRequest => -32600,
            Self::MethodNotFound => -32601,
            Self::InvalidParams => -32602,
            Self::Internal => -32603,
            Self::NotInitialized => -32001,
            Self::MessageTooLarge => -32002,
            Self::NotFound => -32003,
            Self::SessionBusy => -32004,
            Self::RunNotActive => -32005,
            Self::Overloaded => -32006,
            Self::QuotaExceeded => -32007,
            Self::Draining => -32008,
            Self::EventsLagged => -32009,
            Self::Refused => -32010,
            Self::Configuration => -32011,
            Self::NotAllowed => -32012,
        }
    }

    /// The stable snake_case name in `data.code`.
    pub fn name(self) -> &'static str {
        match self {
            Self::ParseError => "parse_error",
            Self::InvalidRequest => "invalid_request",
            Self::MethodNotFound => "method_not_found",
            Self::InvalidParams => "invalid_params",
            Self::Internal => "internal",
            Self::NotInitialized => "not_initialized",
            Self::MessageTooLarge => "message_too_large",
            Self::NotFound => "not_found",
            Self::SessionBusy => "session_busy",
            Self::RunNotActive => "run_not_active",
            Self::Overloaded => "overloaded",
            Self::QuotaExceeded => "quota_exceeded",
            Self::Draining => "draining",
            Self::EventsLagged => "events_lagged",
            Self::Refused => "refused",
            Self::Configuration => "configuration",
            Self::NotAllowed => "not_allowed",
        }
    }

    /// Every kind, for tests and documentation.
    pub const ALL: [ErrorKind; 17] = [
        Self::ParseError,
        Self::InvalidRequest,
        Self::MethodNotFound,
        Self::InvalidParams,
        Self::Internal,
        Self::NotInitialized,
        Self::MessageTooLarge,
        Self::NotFound,
        Self::SessionBusy,
        Self::RunNotActive,
        Self::Overloaded,
        Self::QuotaExceeded,
        Self::Draining,
        Self::EventsLagged,
        Self::Refused,
        Self::Configuration,
        Self::NotAllowed,
    ];
}

/// One frame a client sent, read as far as it could be.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A well-formed request (or client notification when `id` is `None`).
    Request(Request),
    /// Not a request: answer this response (its id is `null` unless one
    /// could be read).
    Invalid(Response),
}

impl Incoming {
    /// Reads one frame.
    pub fn parse(frame: &[u8]) -> Self {
        let value: Value = match serde_json::from_slice(frame) {
            Ok(value) => value,
            Err(error) => {
                return Self::Invalid(Response::error(
                    None,
                    RpcError::new(
                        ErrorKind::ParseError,
                        format!(
                            "not JSON (line {}, column {})",
                            error.line(),
                            error.column()
                        ),
                    ),
                ));
            }
        };
        let id = value
            .get("id")
            .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
        match serde_json::from_value::<Request>(value) {
            Ok(request) => Self::Request(request),
            Err(error) => Self::Invalid(Response::error(
                id,
                RpcError::new(
                    ErrorKind::InvalidRequest,
                    format!("not a JSON-RPC 2.0 request: {error}"),
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_names_are_unique() {
        let mut numbers: Vec<i32> = ErrorKind::ALL.iter().map(|kind| kind.number()).collect();
        let mut names: Vec<&str> = ErrorKind::ALL.iter().map(|kind| kind.name()).collect();
        numbers.sort_unstable();
        numbers.dedup();
        names.sort_unstable();
        names.dedup();
        assert_eq!(numbers.len(), ErrorKind::ALL.len());
        assert_eq!(names.len(), ErrorKind::ALL.len());
    }

    #[test]
    fn parse_reads_requests_and_answers_the_rest() {
        let request =
            Incoming::parse(br#"{"jsonrpc":"2.0","id":7,"method":"run/start","params":{}}"#);
        let Incoming::Request(request) = request else {
            panic!("a request: {request:?}");
        };
        assert_eq!(request.id, Some(RequestId::Number(7)));
        let Incoming::Invalid(response) = Incoming::parse(b"{nope") else {
            panic!("not JSON is invalid");
        };
        assert_eq!(response.id, None);
        let Incoming::Invalid(response) =
            Incoming::parse(br#"{"jsonrpc":"1.0","id":"a","method":"x"}"#)
        else {
            panic!("a wrong version is invalid");
        };
        assert_eq!(response.id, Some(RequestId::String("a".into())));
        let Outcome::Error(error) = response.outcome else {
            panic!("an error");
        };
        assert_eq!(error.kind_name(), Some("invalid_request"));
    }

    #[test]
    fn responses_carry_result_or_error() {
        let ok = serde_json::to_value(Response::ok(Some(RequestId::Number(1)), Value::Bool(true)))
            .unwrap();
        assert_eq!(
            ok,
            serde_json::json!({"jsonrpc":"2.0","id":1,"result":true})
        );
        let error = RpcError::new(ErrorKind::Overloaded, "busy").with("retry_after_ms", 250);
        let failed = serde_json::to_value(Response::error(None, error)).unwrap();
        assert_eq!(
            failed,
            serde_json::json!({"jsonrpc":"2.0","id":null,"error":{"code":-32006,"message":"busy","data":{"code":"overloaded","retry_after_ms":250}}})
        );
    }
}
