//! Retries against local servers, driven the way a host drives them with
//! `retry::Attempts`: a server that accepts and never answers fails within
//! the retry budget, a connection that cannot be made is tried twice, and
//! ordinary server errors are retried with each failure as the reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use keel_protocol::{Message, ProviderError, ProviderErrorKind, ProviderEvent, UserMessage};
use keel_provider::http::HttpTimeouts;
use keel_provider::openai_chat::{ChatOptions, OpenAiChat};
use keel_provider::retry::{Retry, RetryPolicy};
use keel_provider::testing::{Reply, TestServer};
use keel_provider::{Endpoint, ModelRequest, Provider};
use tokio_util::sync::CancellationToken;

/// What a host saw: the final outcome, and each retry with its reason.
struct Outcome {
    result: Result<Vec<ProviderEvent>, ProviderError>,
    retries: Vec<(Retry, ProviderError)>,
    attempts: u32,
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "m".into(),
        system_prompt: String::new(),
        messages: vec![Message::User(UserMessage::text("hi"))],
        tools: vec![],
        max_output_tokens: None,
    }
}

fn provider(url: &str, timeouts: HttpTimeouts) -> OpenAiChat {
    let endpoint = Endpoint::new("local", url, None).with_timeouts(timeouts);
    OpenAiChat::new(endpoint, ChatOptions::default())
}

/// Fast delays, many attempts: the budget or the error decides.
fn policy(budget: Duration) -> RetryPolicy {
    RetryPolicy {
        max_attempts: 10,
        base_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(200),
        budget,
        // Exact delays: these tests are about the budget, not the jitter.
        jitter_percent: 0,
    }
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
                let attempts = attempts.attempt();
                return Outcome {
                    result: Err(error),
                    retries,
                    attempts,
                };
            }
        }
    }
}

#[tokio::test]
async fn a_server_that_never_answers_fails_within_the_budget() {
    // With the default 60 s first-byte timeout, the budget ends the attempt.
    let server = TestServer::start(vec![Reply::Silent; 4]).await.unwrap();
    let started = Instant::now();
    let outcome = run(
        &provider(&server.url(), HttpTimeouts::default()),
        policy(Duration::from_secs(1)),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    let error = outcome.result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout);
    assert_eq!(
        error.message,
        "no complete response within the retry budget of 1 s"
    );
    assert_eq!((outcome.attempts, outcome.retries.len()), (1, 0));

    // With a short first-byte timeout, attempts time out until no retry
    // fits in the budget; each retry carries its reason.
    let server = TestServer::start(vec![Reply::Silent; 10]).await.unwrap();
    let timeouts = HttpTimeouts {
        first_byte: Duration::from_millis(400),
        idle: Duration::from_secs(5),
    };
    let started = Instant::now();
    let outcome = run(
        &provider(&server.url(), timeouts),
        policy(Duration::from_millis(1500)),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    let error = outcome.result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout);
    assert!(outcome.attempts >= 2, "{}", outcome.attempts);
    assert_eq!(outcome.retries.len() as u32, outcome.attempts - 1);
    for (number, (retry, reason)) in outcome.retries.iter().enumerate() {
        assert_eq!(retry.attempt, number as u32 + 1);
        assert_eq!(retry.max_attempts, 10);
        assert_eq!(reason.kind, ProviderErrorKind::Timeout);
        assert!(
            reason.message == "no response within 0.4 s" || reason.message.contains("retry budget"),
            "{reason:?}"
        );
    }
    assert_eq!(server.connections() as u32, outcome.attempts);
}

#[tokio::test]
async fn a_refused_connection_is_tried_twice() {
    let port = {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let outcome = run(
        &provider(&url, HttpTimeouts::default()),
        policy(Duration::from_secs(30)),
    )
    .await;
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
    let outcome = run(
        &provider(&url, HttpTimeouts::default()),
        policy(Duration::from_secs(30)),
    )
    .await;
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
        policy(Duration::from_secs(30)),
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
