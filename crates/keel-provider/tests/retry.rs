//! Retries and progress timeouts against local servers, driven the way a
//! host drives them with `retry::Attempts`: a server that accepts and never
//! answers fails at the first-byte timeout of each attempt, a connection
//! that cannot be made is tried twice, ordinary server errors are retried
//! with each failure as the reason, a server's `Retry-After` is waited in
//! full (seconds or an HTTP-date) up to the longest wait allowed, and a
//! response is never cut for its length — only for making no progress.
//!
//! The long cases run in tokio's virtual time (`start_paused`): the server
//! is on the same runtime and its chunk delays, the adapter's timeouts and
//! the retry waits are all tokio timers, so a 240 s stream takes 240 s of
//! virtual time and milliseconds of wall time. Asserted durations are
//! virtual, hence exact up to the clock's tick, never a wall-clock race.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use keel_protocol::{Message, ProviderError, ProviderErrorKind, ProviderEvent, UserMessage};
use keel_provider::http::HttpTimeouts;
use keel_provider::openai_chat::{ChatOptions, OpenAiChat};
use keel_provider::retry::{Retry, RetryPolicy};
use keel_provider::testing::{Reply, TestServer, assemble};
use keel_provider::{Endpoint, ModelRequest, Provider};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What a host saw: the final outcome, and each retry with its reason.
struct Outcome {
    result: Result<Vec<ProviderEvent>, ProviderError>,
    retries: Vec<(Retry, ProviderError)>,
    attempts: u32,
}

fn request() -> ModelRequest {
    {
        let mut model_request = ModelRequest::new(
            "m",
            String::new(),
            vec![Message::User(UserMessage::text("hi")).into()],
        );
        model_request.tools = vec![];
        model_request.max_output_tokens = None;
        model_request
    }
}

fn provider(url: &str, timeouts: HttpTimeouts) -> OpenAiChat {
    let endpoint = Endpoint::new("local", url, None).with_timeouts(timeouts);
    OpenAiChat::new(endpoint, ChatOptions::default())
}

/// Fast delays, many attempts: the error or the attempts decide.
fn policy(max_attempts: u32) -> RetryPolicy {
    let mut policy = RetryPolicy::default();
    policy.max_attempts = max_attempts;
    policy.base_delay = Duration::from_millis(50);
    policy.max_delay = Duration::from_millis(200);
    // Exact delays: these tests are about the rules, not the jitter.
    policy.jitter_percent = 0;
    policy
}

/// The host's loop: send, and on a failure ask the policy what to do.
async fn run(provider: &dyn Provider, policy: RetryPolicy) -> Outcome {
    let mut attempts = policy.start();
    let mut retries = Vec::new();
    loop {
        let stream = attempts.bound(provider.stream(request(), CancellationToken::new()));
        let events: Vec<ProviderEvent> = stream.collect().await;
        let error = match events.last() {
            Some(ProviderEvent::Done { .. }) => {
                let attempts = attempts.attempt();
                return Outcome {
                    result: Ok(events),
                    retries,
                    attempts,
                };
            }
            Some(ProviderEvent::Error { error }) => error.clone(),
            other => panic!("a stream ends in done or error, not {other:?}"),
        };
        match attempts.after_failure(&error) {
            Some(retry) => {
                retries.push((retry, error));
                tokio::time::sleep(retry.delay).await;
            }
            None => {
                let attempts_made = attempts.attempt();
                return Outcome {
                    result: Err(attempts.give_up(error)),
                    retries,
                    attempts: attempts_made,
                };
            }
        }
    }
}

/// One Chat Completions chunk as an SSE event.
fn chunk(delta: &str, finish: Option<&str>) -> Vec<u8> {
    let delta = serde_json::json!({"role": "assistant", "content": delta});
    let body = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {body}\n\n").into_bytes()
}

/// `count` words, one a second, then the end of the answer.
fn steady(count: usize) -> Vec<(Duration, Vec<u8>)> {
    let mut chunks: Vec<(Duration, Vec<u8>)> = (0..count)
        .map(|_| (Duration::from_secs(1), chunk("word ", None)))
        .collect();
    chunks.push((Duration::ZERO, chunk("", Some("stop"))));
    chunks.push((Duration::ZERO, b"data: [DONE]\n\n".to_vec()));
    chunks
}

/// Keeps tokio's paused clock moving in small steps while a test runs.
///
/// Why: with time paused, an idle runtime jumps its clock straight to the
/// next timer in the same step in which it polls the sockets. Bytes the
/// server wrote are read on that poll, but if the next timer were the
/// client's own timeout, both would be due in one step and the timeout
/// could win. With a tick every 100 ms no jump is longer than that, so
/// bytes in flight are read long (in virtual time) before any timeout here
/// (10 s and more) can fire.
fn tick_the_clock() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        let mut ticks = tokio::time::interval(Duration::from_millis(100));
        loop {
            ticks.tick().await;
        }
    })
}

/// Progress timeouts of the virtual-time tests: 10 s between outputs.
fn progress_timeouts() -> HttpTimeouts {
    {
        let mut http_timeouts = HttpTimeouts::default();
        http_timeouts.first_byte = Duration::from_secs(30);
        http_timeouts.idle = Duration::from_secs(10);
        http_timeouts
    }
}

/// Acceptance (issue 22): a response that streams steadily for 240 s —
/// longer than the old 180 s retry budget that cut whole attempts —
/// succeeds in one attempt with the default retry policy.
#[tokio::test(start_paused = true)]
async fn a_240_s_steadily_streaming_response_succeeds() {
    let _clock = tick_the_clock();
    let server = TestServer::start(vec![Reply::Sse {
        chunks: steady(240),
    }])
    .await
    .unwrap();
    let started = Instant::now();
    let outcome = run(
        &provider(&server.url(), progress_timeouts()),
        RetryPolicy::default(),
    )
    .await;
    let events = outcome.result.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(240),
        "it really streamed 240 s"
    );
    assert_eq!((outcome.attempts, outcome.retries.len()), (1, 0));
    let message = assemble(&events);
    assert_eq!(message.text(), "word ".repeat(240));
    assert_eq!(server.connections(), 1);
}

/// Acceptance (issue 22): a stream that stops producing output fails at
/// the idle timeout, not when a budget or the server gives up.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_fails_at_the_idle_timeout() {
    let _clock = tick_the_clock();
    let mut chunks = steady(10);
    // The eleventh word would come after ten minutes.
    chunks.insert(10, (Duration::from_secs(600), chunk("late ", None)));
    let server = TestServer::start(vec![Reply::Sse { chunks }])
        .await
        .unwrap();
    let started = Instant::now();
    let outcome = run(&provider(&server.url(), progress_timeouts()), policy(1)).await;
    let error = outcome.result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout);
    assert_eq!(
        error.message,
        "the stream made no progress for 10 s (idle_timeout_sec; keep-alive comments do not count)"
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(20) && elapsed < Duration::from_secs(60),
        "ten words, then ten idle seconds: {elapsed:?} of virtual time"
    );
}

/// Acceptance (issue 22): keep-alive comments are not progress: a stream
/// that sends one every second and nothing else fails at the idle timeout
/// (after its first output) or the first-byte timeout (before it).
#[tokio::test(start_paused = true)]
async fn keep_alive_only_streams_fail_at_the_idle_timeout() {
    let _clock = tick_the_clock();
    let keep_alives = || (0..600).map(|_| (Duration::from_secs(1), b": keep-alive\n\n".to_vec()));
    let mut after_output = vec![(Duration::ZERO, chunk("first ", None))];
    after_output.extend(keep_alives());
    let server = TestServer::start(vec![
        Reply::Sse {
            chunks: after_output,
        },
        Reply::Sse {
            chunks: keep_alives().collect(),
        },
    ])
    .await
    .unwrap();
    let provider = provider(&server.url(), progress_timeouts());
    let started = Instant::now();
    let outcome = run(&provider, policy(1)).await;
    let error = outcome.result.unwrap_err();
    assert_eq!(
        (error.kind, error.message.as_str()),
        (
            ProviderErrorKind::Timeout,
            "the stream made no progress for 10 s (idle_timeout_sec; keep-alive comments do not count)"
        )
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let outcome = run(&provider, policy(1)).await;
    let error = outcome.result.unwrap_err();
    assert_eq!(
        (error.kind, error.message.as_str()),
        (
            ProviderErrorKind::Timeout,
            "no model output within 30 s of the request (first_byte_timeout_sec; keep-alive \
             comments do not count)"
        )
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// Acceptance (issue 22): a `Retry-After` given as an HTTP-date, and one of
/// 120 s (above the backoff's 60 s cap), are each waited in full.
#[tokio::test(start_paused = true)]
async fn retry_after_as_an_http_date_and_as_120_s_is_honoured() {
    let _clock = tick_the_clock();
    let date = keel_provider::errors::format_http_date(
        std::time::SystemTime::now() + Duration::from_secs(20),
    );
    let limited = |value: &str| Reply::Status {
        status: 429,
        headers: vec![("retry-after".into(), value.into())],
        body: r#"{"error":{"message":"slow down"}}"#.into(),
    };
    let server = TestServer::start(vec![
        limited(&date),
        limited("120"),
        Reply::Sse { chunks: steady(1) },
    ])
    .await
    .unwrap();
    let started = Instant::now();
    let outcome = run(&provider(&server.url(), progress_timeouts()), {
        let mut retry_policy = RetryPolicy::default();
        retry_policy.jitter_percent = 0;
        retry_policy
    })
    .await;
    assert!(outcome.result.is_ok());
    let delays: Vec<Duration> = outcome
        .retries
        .iter()
        .map(|(retry, _)| retry.delay)
        .collect();
    // The date has whole seconds, and some wall time passes before it is
    // read: the wait is the rest of the 20 s, not a backoff of 2 s.
    assert!(
        delays[0] > Duration::from_secs(15) && delays[0] <= Duration::from_secs(20),
        "{delays:?}"
    );
    assert_eq!(delays[1], Duration::from_secs(120));
    assert!(started.elapsed() >= delays[0] + delays[1]);
    assert_eq!(server.connections(), 3);
}

/// A wait longer than the longest allowed (`max_retry_wait_sec`, 300 s by
/// default) is not waited: the failure is final, `rate_limited`, and names
/// the wait asked for.
#[tokio::test(start_paused = true)]
async fn a_wait_past_the_longest_allowed_fails_naming_it() {
    let server = TestServer::start(vec![Reply::Status {
        status: 503,
        headers: vec![("retry-after".into(), "600".into())],
        body: r#"{"error":{"message":"Overloaded"}}"#.into(),
    }])
    .await
    .unwrap();
    let outcome = run(
        &provider(&server.url(), progress_timeouts()),
        RetryPolicy::default(),
    )
    .await;
    let error = outcome.result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::RateLimited);
    assert_eq!(
        error.message,
        "HTTP 503: Overloaded (the provider asked to wait 600 s before retrying, longer than \
         the longest wait allowed, 300 s: raise max_retry_wait_sec to wait that long)"
    );
    assert_eq!((outcome.attempts, server.connections()), (1, 1));
}

#[tokio::test]
async fn a_server_that_never_answers_fails_at_the_first_byte_timeout() {
    let server = TestServer::start(vec![Reply::Silent; 3]).await.unwrap();
    let timeouts = {
        let mut http_timeouts = HttpTimeouts::default();
        http_timeouts.first_byte = Duration::from_millis(300);
        http_timeouts
    };
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        run(&provider(&server.url(), timeouts), policy(3)),
    )
    .await
    .expect("no hang");
    let error = outcome.result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout);
    assert_eq!(error.message, "no response within 0.3 s");
    assert_eq!((outcome.attempts, outcome.retries.len()), (3, 2));
    for (number, (retry, reason)) in outcome.retries.iter().enumerate() {
        assert_eq!(retry.attempt, number as u32 + 1);
        assert_eq!(retry.max_attempts, 3);
        assert_eq!(reason.message, "no response within 0.3 s");
    }
    assert_eq!(server.connections(), 3);
}

#[tokio::test]
async fn a_refused_connection_is_tried_twice() {
    let port = {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let outcome = run(&provider(&url, HttpTimeouts::default()), policy(10)).await;
    let error = outcome.result.unwrap_err();
    assert!(error.message.contains("connection refused"), "{error:?}");
    assert_eq!(outcome.attempts, 2);
    let (retry, reason) = &outcome.retries[0];
    assert_eq!((retry.attempt, retry.max_attempts), (1, 2));
    assert!(reason.message.contains("connection refused"), "{reason:?}");
}

#[tokio::test]
async fn a_tls_failure_is_tried_twice() {
    let garbage = Reply::Raw(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec());
    let server = TestServer::start(vec![garbage; 4]).await.unwrap();
    let url = server.url().replacen("http://", "https://", 1);
    let outcome = run(&provider(&url, HttpTimeouts::default()), policy(10)).await;
    let error = outcome.result.unwrap_err();
    assert!(error.message.contains("TLS failed"), "{error:?}");
    assert_eq!((outcome.attempts, server.connections()), (2, 2));
}

#[tokio::test]
async fn server_errors_are_retried_with_their_reason_until_an_answer() {
    let answer = "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let server = TestServer::start(vec![
        Reply::error(500, r#"{"error":{"message":"Internal error"}}"#),
        Reply::error(529, r#"{"error":{"message":"Overloaded"}}"#),
        Reply::sse(answer),
    ])
    .await
    .unwrap();
    let outcome = run(
        &provider(&server.url(), HttpTimeouts::default()),
        policy(10),
    )
    .await;
    assert!(outcome.result.is_ok());
    assert_eq!(outcome.attempts, 3);
    let reasons: Vec<&str> = outcome
        .retries
        .iter()
        .map(|(_, reason)| reason.message.as_str())
        .collect();
    assert_eq!(
        reasons,
        ["HTTP 500: Internal error", "HTTP 529: Overloaded"]
    );
}

/// A server whose accept queue is full never completes a connection: the
/// connect timeout (`connect_timeout_sec`) ends the attempt, in virtual
/// time, and like any connect failure it is tried twice, not four times.
#[tokio::test(start_paused = true)]
async fn a_connection_that_never_opens_fails_at_the_connect_timeout() {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let address = listener.local_addr().unwrap();
    // Fill the accept queue (nothing accepts): the kernel then drops SYNs,
    // and a connection attempt neither completes nor fails.
    let mut held = Vec::new();
    while let Ok(stream) =
        std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200))
    {
        held.push(stream);
        assert!(held.len() < 10_000, "the accept queue never filled");
    }
    let timeouts = {
        let mut http_timeouts = HttpTimeouts::default();
        http_timeouts.connect = Duration::from_secs(5);
        http_timeouts
    };
    let started = Instant::now();
    let outcome = run(&provider(&format!("http://{address}"), timeouts), policy(4)).await;
    let error = outcome.result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout);
    assert!(
        error.message.starts_with(
            "cannot connect to the provider (no connection within 5 s: connect_timeout_sec): "
        ),
        "{error:?}"
    );
    assert_eq!((outcome.attempts, error.max_retries), (2, Some(1)));
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    drop(held);
}
