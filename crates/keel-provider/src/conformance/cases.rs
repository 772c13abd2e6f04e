//! The checks on how a stream ends and how failures are classified, once
//! the request reached the server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use keel_protocol::{
    AssistantMessage, ContentBlock, Message, ProviderErrorKind, ProviderEvent, StopReason,
    UserMessage,
};
use tokio_util::sync::CancellationToken;

use super::{NO_HANG, WireAdapter, check_framing, check_requests, provider_for};
use crate::http::HttpTimeouts;
use crate::testing::{Reply, TestServer, assemble, collect, last_error};

/// Long enough that a check which waits for it has hung.
const NEVER: Duration = Duration::from_secs(30);

/// The events of `stream_head(text)`.
fn head_events(adapter: &dyn WireAdapter, text: &str) -> Vec<ProviderEvent> {
    vec![
        ProviderEvent::Start {
            model: Some(adapter.request().model),
            response_id: adapter.response_id(),
        },
        ProviderEvent::TextStart { index: 0 },
        ProviderEvent::TextDelta {
            index: 0,
            delta: text.into(),
        },
    ]
}

/// The events before the final error are exactly the head's.
fn assert_head_then_error(adapter: &dyn WireAdapter, events: &[ProviderEvent], text: &str) {
    let name = adapter.name();
    assert_eq!(
        events.len(),
        4,
        "{name}: the head's events and one error: {events:?}"
    );
    assert_eq!(
        events[..3],
        head_events(adapter, text),
        "{name}: the head's events"
    );
}

pub(super) async fn the_terminal_event_ends_the_stream_while_the_connection_stays_open(
    adapter: &dyn WireAdapter,
) {
    let name = adapter.name();
    let chunks = vec![
        (Duration::ZERO, adapter.text_stream("Hello").into_bytes()),
        (NEVER, adapter.stream_head("never seen").into_bytes()),
    ];
    let server = TestServer::start(vec![Reply::Sse { chunks }])
        .await
        .unwrap();
    let provider = provider_for(adapter, &server.url(), HttpTimeouts::default());
    let events = collect(provider.as_ref(), adapter.request(), Duration::from_secs(2)).await;
    assert_eq!(
        events.last(),
        Some(&ProviderEvent::Done {
            stop_reason: StopReason::Stop
        }),
        "{name}: the terminal event ends the stream at once"
    );
    assert_eq!(events[..3], head_events(adapter, "Hello"), "{name}");
    let message = assemble(&events);
    assert_eq!(
        message.text(),
        "Hello",
        "{name}: nothing after the end is read"
    );
    check_requests(adapter, &server, 1);
}

pub(super) async fn a_stream_cut_midway_is_dropped(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    let head = adapter.stream_head("The answer is");
    let whole = adapter.text_stream("The answer is");
    assert!(
        whole.starts_with(&head),
        "{name}: text_stream begins with stream_head"
    );
    let next_event = whole[head.len()..]
        .find("\n\n")
        .map(|at| head.len() + at)
        .unwrap_or_else(|| panic!("{name}: the whole stream has an event after the head"));
    let midway = head.len() + (next_event - head.len()) / 2;
    // Cut inside the next event, and exactly between two events.
    for cut in [midway, head.len()] {
        let server = TestServer::start(vec![Reply::sse(&whole[..cut])])
            .await
            .unwrap();
        let provider = provider_for(adapter, &server.url(), HttpTimeouts::default());
        let events = collect(provider.as_ref(), adapter.request(), NO_HANG).await;
        assert_head_then_error(adapter, &events, "The answer is");
        assert_eq!(
            last_error(&events).kind,
            ProviderErrorKind::StreamDropped,
            "{name}: cut at byte {cut}"
        );
        check_requests(adapter, &server, 1);
    }
}

pub(super) async fn an_error_inside_the_stream_is_classified(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    let stream = adapter.stream_head("par")
        + &adapter.stream_error("overloaded_error", "The server is overloaded");
    let server = TestServer::start(vec![Reply::sse(&stream)]).await.unwrap();
    let provider = provider_for(adapter, &server.url(), HttpTimeouts::default());
    let events = collect(provider.as_ref(), adapter.request(), NO_HANG).await;
    assert_head_then_error(adapter, &events, "par");
    let error = last_error(&events);
    assert_eq!(
        error.kind,
        ProviderErrorKind::Overloaded,
        "{name}: {error:?}"
    );
    assert!(
        error.message.contains("The server is overloaded"),
        "{name}: {error:?}"
    );
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, ProviderEvent::Done { .. })),
        "{name}: no done after an error"
    );
    check_requests(adapter, &server, 1);
}

/// One error status and what it must become.
struct StatusCase {
    status: u16,
    retry_after: Option<&'static str>,
    error_type: &'static str,
    message: String,
    kind: ProviderErrorKind,
    retry_after_ms: Option<u64>,
}

pub(super) async fn error_statuses_map_onto_the_taxonomy(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    let case = |status, error_type, message: &str, kind| StatusCase {
        status,
        retry_after: None,
        error_type,
        message: message.to_owned(),
        kind,
        retry_after_ms: None,
    };
    let cases = [
        case(
            401,
            "authentication_error",
            "invalid api key (no such user)",
            ProviderErrorKind::Auth,
        ),
        case(
            400,
            "invalid_request_error",
            adapter.overflow_message(),
            ProviderErrorKind::ContextOverflow,
        ),
        StatusCase {
            retry_after: Some("7"),
            retry_after_ms: Some(7000),
            ..case(
                429,
                "rate_limit_error",
                "Rate limit reached",
                ProviderErrorKind::RateLimited,
            )
        },
        case(
            500,
            "api_error",
            "Internal server error",
            ProviderErrorKind::ServerError,
        ),
        case(
            529,
            "overloaded_error",
            "Overloaded",
            ProviderErrorKind::Overloaded,
        ),
        case(
            503,
            "server_error",
            "Server is busy",
            ProviderErrorKind::Overloaded,
        ),
    ];
    for case in cases {
        let status = case.status;
        let reply = Reply::Status {
            status,
            headers: case
                .retry_after
                .map(|value| ("retry-after".to_owned(), value.to_owned()))
                .into_iter()
                .collect(),
            body: adapter.error_body(case.error_type, &case.message),
        };
        let server = TestServer::start(vec![reply]).await.unwrap();
        let provider = provider_for(adapter, &server.url(), HttpTimeouts::default());
        let events = collect(provider.as_ref(), adapter.request(), NO_HANG).await;
        assert_eq!(
            events.len(),
            1,
            "{name} {status}: one error event: {events:?}"
        );
        let error = last_error(&events);
        assert_eq!(error.kind, case.kind, "{name} {status}: {error:?}");
        assert_eq!(
            error.retry_after_ms, case.retry_after_ms,
            "{name} {status}: {error:?}"
        );
        assert!(
            error.message.starts_with(&format!("HTTP {status}: ")),
            "{name} {status}: {error:?}"
        );
        assert!(
            error.message.contains(&case.message),
            "{name} {status}: the provider's own message: {error:?}"
        );
        assert!(
            !error.message.contains(super::API_KEY),
            "{name} {status}: the key never shows"
        );
        let retryable = !matches!(
            case.kind,
            ProviderErrorKind::Auth | ProviderErrorKind::ContextOverflow
        );
        assert_eq!(error.is_retryable(), retryable, "{name} {status}");
        check_requests(adapter, &server, 1);
    }
}

pub(super) async fn an_idle_stream_times_out(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    let chunks = vec![
        (Duration::ZERO, adapter.stream_head("thinking").into_bytes()),
        (NEVER, adapter.text_stream("thinking").into_bytes()),
    ];
    let server = TestServer::start(vec![Reply::Sse { chunks }])
        .await
        .unwrap();
    let timeouts = HttpTimeouts {
        first_byte: Duration::from_secs(5),
        idle: Duration::from_millis(300),
        ..HttpTimeouts::default()
    };
    let provider = provider_for(adapter, &server.url(), timeouts);
    let started = Instant::now();
    let events = collect(provider.as_ref(), adapter.request(), NO_HANG).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{name}: the idle timeout ends the stream"
    );
    assert_head_then_error(adapter, &events, "thinking");
    let error = last_error(&events);
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{name}: {error:?}");
    check_requests(adapter, &server, 1);
}

/// A stream that sends only SSE comments (`: keep-alive`) makes no
/// progress: after its head, it ends at the idle timeout; without a head,
/// at the first-byte timeout. Comments never keep a stalled stream alive.
pub(super) async fn keep_alive_comments_are_not_progress(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    // Comments every 50 ms for far longer than the hang bound.
    let comments = || (0..800).map(|_| (Duration::from_millis(50), b": keep-alive\n\n".to_vec()));
    let timeouts = HttpTimeouts {
        first_byte: Duration::from_millis(400),
        idle: Duration::from_millis(400),
        ..HttpTimeouts::default()
    };
    let mut after_head = vec![(Duration::ZERO, adapter.stream_head("thinking").into_bytes())];
    after_head.extend(comments());
    let only_comments: Vec<_> = comments().collect();
    let server = TestServer::start(vec![
        Reply::Sse { chunks: after_head },
        Reply::Sse {
            chunks: only_comments,
        },
    ])
    .await
    .unwrap();
    let provider = provider_for(adapter, &server.url(), timeouts);
    let events = collect(provider.as_ref(), adapter.request(), NO_HANG).await;
    assert_head_then_error(adapter, &events, "thinking");
    let error = last_error(&events);
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{name}: {error:?}");
    assert_eq!(
        error.message,
        "the stream made no progress for 0.4 s (idle_timeout_sec; keep-alive comments do not count)",
        "{name}"
    );
    let events = collect(provider.as_ref(), adapter.request(), NO_HANG).await;
    assert_eq!(events.len(), 1, "{name}: only the error: {events:?}");
    let error = last_error(&events);
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{name}: {error:?}");
    assert_eq!(
        error.message,
        "no model output within 0.4 s of the request (first_byte_timeout_sec; keep-alive \
         comments do not count)",
        "{name}"
    );
    check_requests(adapter, &server, 2);
}

pub(super) async fn cancelling_mid_stream_ends_promptly(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    let chunks = vec![
        (
            Duration::ZERO,
            adapter.stream_head("a long answer").into_bytes(),
        ),
        (NEVER, adapter.text_stream("a long answer").into_bytes()),
    ];
    let server = TestServer::start(vec![Reply::Sse { chunks }])
        .await
        .unwrap();
    let provider = provider_for(adapter, &server.url(), HttpTimeouts::default());
    let cancel = CancellationToken::new();
    let mut stream = provider.stream(adapter.request(), cancel.clone());
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let next = tokio::time::timeout(NO_HANG, stream.next()).await;
        let event = next
            .unwrap_or_else(|_| panic!("{name}: the head arrives"))
            .unwrap_or_else(|| panic!("{name}: the stream ended early: {seen:?}"));
        seen.push(event);
    }
    assert_eq!(seen, head_events(adapter, "a long answer"), "{name}");
    cancel.cancel();
    // The server never sends the rest: the stream ends only by the cancel.
    let rest: Vec<_> = tokio::time::timeout(NO_HANG, stream.collect())
        .await
        .unwrap_or_else(|_| panic!("{name}: the stream ends once cancelled"));
    assert_eq!(rest.len(), 1, "{name}: one cancelled error: {rest:?}");
    assert_eq!(
        last_error(&rest).kind,
        ProviderErrorKind::Cancelled,
        "{name}"
    );
    check_requests(adapter, &server, 1);
}

/// A long history goes out whole: the body is streamed in chunks as it is
/// serialised, yet announced with its exact `Content-Length` (never
/// chunked, which some servers refuse), and every message is in it.
pub(super) async fn a_long_history_is_sent_whole_with_its_length(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    let server = TestServer::start(vec![Reply::sse(&adapter.text_stream("ok"))])
        .await
        .unwrap();
    let provider = provider_for(adapter, &server.url(), HttpTimeouts::default());
    let mut request = adapter.request();
    let filler = "a long history ".repeat(1_000);
    for n in 0..100 {
        let question = UserMessage::text(format!("question {n}: {filler}"));
        request.messages.push(Arc::new(Message::User(question)));
        let answer = {
            let mut assistant_message = AssistantMessage::default();
            assistant_message.content = vec![ContentBlock::Text {
                text: format!("answer {n}"),
            }];
            assistant_message
        };
        request.messages.push(Arc::new(Message::Assistant(answer)));
    }
    request
        .messages
        .push(Arc::new(Message::User(UserMessage::text("and now?"))));
    let events = collect(provider.as_ref(), request, NO_HANG).await;
    assert!(
        matches!(events.last(), Some(ProviderEvent::Done { .. })),
        "{name}: {events:?}"
    );
    let requests = server.requests();
    let recorded = &requests[0];
    assert!(recorded.body.len() > 1_500_000, "{name}: the whole body");
    assert!(
        recorded.json().is_object(),
        "{name}: the body is one JSON object"
    );
    for n in [0, 57, 99] {
        for text in [format!("question {n}: a long"), format!("answer {n}")] {
            assert!(recorded.body.contains(&text), "{name}: {text:?} is sent");
        }
    }
    check_framing(adapter, recorded);
}
