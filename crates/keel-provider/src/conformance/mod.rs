//! The conformance suite every HTTP adapter must pass (features `test-util`
//! and `http`).
//!
//! One set of checks, written once against [`WireAdapter`] and run by each
//! adapter's tests (`conformance::run_all(&MyAdapter).await`): how a stream
//! ends (its terminal event while the connection stays open, a cut, an idle
//! server, a cancel), how an error inside the stream and each HTTP status
//! are classified, how a request fails before any stream (an unusable base
//! URL, a server that never answers, a success that is not an event stream,
//! a refused connection, a DNS or TLS failure), and that the key never shows
//! in an error. A behaviour
//! every adapter owes the kernel belongs here, not in one adapter's tests;
//! what only one API does (its request body, its event types) stays in that
//! adapter's test file.
//!
//! Each check starts its own [`TestServer`] on 127.0.0.1 and panics with a
//! message naming the adapter and the broken guarantee. Time limits in the
//! checks are generous upper bounds that only prove "no hang"; every
//! timeout the adapter applies is made short through its [`Endpoint`]'s
//! [`HttpTimeouts`], never waited out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cases;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use crate::http::HttpTimeouts;
use crate::testing::{RecordedRequest, TestServer};
use crate::{Endpoint, ModelRequest, Provider};

/// The key every endpoint of the suite carries; it may reach the auth
/// header and nothing else.
pub const API_KEY: &str = "sk-keel-conformance-key";

/// How long a check waits for a stream that should end at once.
pub(crate) const NO_HANG: Duration = Duration::from_secs(10);

/// One HTTP adapter as the suite sees it: how to build it against a test
/// server, what its requests look like, and how its API frames a stream.
pub trait WireAdapter: Send + Sync {
    /// The adapter's name, for failure messages (e.g. `openai_chat`).
    fn name(&self) -> &str;

    /// The adapter reaching `endpoint`, with its default options.
    fn provider(&self, endpoint: Endpoint) -> Arc<dyn Provider>;

    /// The request every check sends.
    fn request(&self) -> ModelRequest;

    /// Checks one request the server recorded for [`WireAdapter::request`]:
    /// method, path, the auth header carrying `key`, and the body.
    fn check_request(&self, recorded: &RecordedRequest, key: &str);

    /// The start of a response whose first text is `text`: everything up to
    /// and including that one text delta, nothing that ends the response.
    /// Its events are `start` (naming the request's model and
    /// [`WireAdapter::response_id`]), `text_start` at block 0 and one
    /// `text_delta` of `text`.
    fn stream_head(&self, text: &str) -> String;

    /// The response id [`WireAdapter::stream_head`] carries (`None` when the
    /// wire format has none), which `start` must report.
    fn response_id(&self) -> Option<String>;

    /// A whole response that answers `text` and stops normally (stop reason
    /// `stop`). It begins with `stream_head(text)`.
    fn text_stream(&self, text: &str) -> String;

    /// An error event inside a stream: the provider's error type (such as
    /// `overloaded_error`) and message, framed as this API frames it.
    fn stream_error(&self, error_type: &str, message: &str) -> String;

    /// The body of an error response: the provider's error type and
    /// message in this API's error shape.
    fn error_body(&self, error_type: &str, message: &str) -> String;

    /// The message with which this provider refuses a context that is too
    /// long (sent with status 400).
    fn overflow_message(&self) -> &str;
}

/// Runs every check against `adapter`.
pub async fn run_all(adapter: &dyn WireAdapter) {
    cases::the_terminal_event_ends_the_stream_while_the_connection_stays_open(adapter).await;
    cases::a_stream_cut_midway_is_dropped(adapter).await;
    cases::an_error_inside_the_stream_is_classified(adapter).await;
    cases::error_statuses_map_onto_the_taxonomy(adapter).await;
    cases::an_idle_stream_times_out(adapter).await;
    cases::keep_alive_comments_are_not_progress(adapter).await;
    cases::cancelling_mid_stream_ends_promptly(adapter).await;
    cases::a_long_history_is_sent_whole_with_its_length(adapter).await;
    transport::an_unusable_base_url_fails_at_once(adapter).await;
    transport::a_server_that_never_answers_times_out(adapter).await;
    transport::a_success_that_is_not_an_event_stream_is_a_protocol_error(adapter).await;
    transport::a_refused_connection_is_retried_at_most_once(adapter).await;
    transport::a_tls_failure_is_retried_at_most_once(adapter).await;
    transport::a_dns_failure_is_retried_at_most_once(adapter).await;
}

/// The adapter reaching `server` with the suite's key and `timeouts`.
pub(crate) fn provider_for(
    adapter: &dyn WireAdapter,
    url: &str,
    timeouts: HttpTimeouts,
) -> Arc<dyn Provider> {
    let endpoint = Endpoint::new(adapter.name(), url, Some(API_KEY.into())).with_timeouts(timeouts);
    adapter.provider(endpoint)
}

/// Checks every request `server` recorded; there must be `count`. Each is
/// framed as [`check_framing`] says and passes the adapter's own check.
pub(crate) fn check_requests(adapter: &dyn WireAdapter, server: &TestServer, count: usize) {
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        count,
        "{}: number of requests sent",
        adapter.name()
    );
    for request in &requests {
        check_framing(adapter, request);
        adapter.check_request(request, API_KEY);
    }
}

/// A request body is JSON sent with its exact length (the test server reads
/// that many bytes), not chunked.
pub(crate) fn check_framing(adapter: &dyn WireAdapter, request: &RecordedRequest) {
    let name = adapter.name();
    let length = request.body.len().to_string();
    assert_eq!(
        request.header("content-length"),
        Some(length.as_str()),
        "{name}: the body's exact length is announced"
    );
    assert_eq!(
        request.header("transfer-encoding"),
        None,
        "{name}: the body is not chunked"
    );
    assert_eq!(
        request.header("content-type"),
        Some("application/json"),
        "{name}: the body is JSON"
    );
}
