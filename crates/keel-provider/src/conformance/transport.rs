//! The checks on failures before a stream starts: an unusable base URL, a
//! server that never answers, a success that is not an event stream, and a
//! connection that cannot be made (refused, DNS, TLS).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_protocol::{ProviderError, ProviderErrorKind, ProviderEvent};

use super::{API_KEY, NO_HANG, WireAdapter, check_requests, provider_for};
use crate::base_url::BaseUrlError;
use crate::http::HttpTimeouts;
use crate::testing::{Reply, TestServer, collect};
use crate::{Endpoint, Provider};

/// The one event of a stream that fails before it starts.
async fn only_error(adapter: &dyn WireAdapter, provider: &dyn Provider) -> ProviderError {
    let name = adapter.name();
    let events = collect(provider, adapter.request(), NO_HANG).await;
    match events.as_slice() {
        [ProviderEvent::Error { error }] => {
            assert!(
                !error.message.contains(API_KEY),
                "{name}: the key never shows"
            );
            error.clone()
        }
        other => panic!("{name}: expected exactly one error, got {other:?}"),
    }
}

pub(super) async fn an_unusable_base_url_fails_at_once(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    assert_eq!(
        Endpoint::try_new(name, "not a url", None).map(|_| ()),
        Err(BaseUrlError::NotAUrl {
            reason: "it contains whitespace or a control character"
        }),
        "{name}"
    );
    // Unchecked endpoints fail on the first request, without retries.
    for url in ["not a url", "ftp://127.0.0.1:9"] {
        let provider = provider_for(adapter, url, HttpTimeouts::default());
        let error = only_error(adapter, provider.as_ref()).await;
        assert_eq!(
            error.kind,
            ProviderErrorKind::InvalidRequest,
            "{name} {url}: {error:?}"
        );
        assert!(!error.is_retryable(), "{name} {url}");
    }
}

pub(super) async fn a_server_that_never_answers_times_out(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    assert_eq!(
        HttpTimeouts::default().first_byte,
        Duration::from_secs(300),
        "{name}: the default first-byte timeout"
    );
    let server = TestServer::start(vec![Reply::Silent]).await.unwrap();
    let timeouts = HttpTimeouts {
        first_byte: Duration::from_millis(300),
        idle: Duration::from_secs(5),
        ..HttpTimeouts::default()
    };
    let provider = provider_for(adapter, &server.url(), timeouts);
    let started = Instant::now();
    let error = only_error(adapter, provider.as_ref()).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{name}: the first-byte timeout ends the wait"
    );
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{name}: {error:?}");
    assert_eq!(error.message, "no response within 0.3 s", "{name}");
    assert_eq!(
        error.max_retries, None,
        "{name}: retried as the policy allows"
    );
    check_requests(adapter, &server, 1);
}

pub(super) async fn a_success_that_is_not_an_event_stream_is_a_protocol_error(
    adapter: &dyn WireAdapter,
) {
    let name = adapter.name();
    let page = format!(
        "<!DOCTYPE html>\n<html><head><title>Sign in to the network</title></head>\n<body>{}</body>BEYOND-THE-PREVIEW</html>",
        "<p>Accept the terms to continue.</p>".repeat(8)
    );
    let json = r#"{"error":{"message":"streaming is disabled for this key"}}"#;
    let cases = [
        ("text/html; charset=utf-8", page.as_str()),
        ("application/json", json),
    ];
    for (content_type, body) in cases {
        let server = TestServer::start(vec![Reply::Body {
            status: 200,
            content_type: content_type.into(),
            body: body.as_bytes().to_vec(),
        }])
        .await
        .unwrap();
        let provider = provider_for(adapter, &server.url(), HttpTimeouts::default());
        let error = only_error(adapter, provider.as_ref()).await;
        assert_eq!(error.kind, ProviderErrorKind::Protocol, "{name}: {error:?}");
        assert!(!error.is_retryable(), "{name}");
        let expected = format!("the provider answered 200 with content type `{content_type}`");
        assert!(error.message.starts_with(&expected), "{name}: {error:?}");
        check_requests(adapter, &server, 1);
    }
    let server = TestServer::start(vec![Reply::Body {
        status: 200,
        content_type: "text/html; charset=utf-8".into(),
        body: page.into_bytes(),
    }])
    .await
    .unwrap();
    let provider = provider_for(adapter, &server.url(), HttpTimeouts::default());
    let error = only_error(adapter, provider.as_ref()).await;
    assert!(
        error
            .message
            .contains(": <!DOCTYPE html>\\n<html><head><title>Sign in"),
        "{name}: the first bytes, control characters escaped: {error:?}"
    );
    assert!(
        error.message.ends_with('…') && !error.message.contains("BEYOND-THE-PREVIEW"),
        "{name}: only the first 200 bytes: {error:?}"
    );
}

pub(super) async fn a_refused_connection_is_retried_at_most_once(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    let port = {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        listener.local_addr().unwrap().port()
    };
    let provider = provider_for(
        adapter,
        &format!("http://127.0.0.1:{port}"),
        HttpTimeouts::default(),
    );
    let error = only_error(adapter, provider.as_ref()).await;
    assert_connect_failure(name, &error, "connection refused");
}

pub(super) async fn a_tls_failure_is_retried_at_most_once(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    // Plain HTTP where the client expects a TLS handshake.
    let reply = Reply::Raw(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n".to_vec());
    let server = TestServer::start(vec![reply]).await.unwrap();
    let url = server.url().replacen("http://", "https://", 1);
    let provider = provider_for(adapter, &url, HttpTimeouts::default());
    let error = only_error(adapter, provider.as_ref()).await;
    assert_connect_failure(name, &error, "TLS failed");
    assert_eq!(server.connections(), 1, "{name}: one connection");
}

pub(super) async fn a_dns_failure_is_retried_at_most_once(adapter: &dyn WireAdapter) {
    let name = adapter.name();
    let client = reqwest::Client::builder()
        .dns_resolver(Arc::new(NoSuchHost))
        .build()
        .unwrap();
    let endpoint =
        Endpoint::new(name, "http://provider.invalid/v1", Some(API_KEY.into())).with_client(client);
    let provider = adapter.provider(endpoint);
    let error = only_error(adapter, provider.as_ref()).await;
    assert_connect_failure(name, &error, "DNS lookup failed");
    assert!(error.message.contains("no such host"), "{name}: {error:?}");
}

fn assert_connect_failure(name: &str, error: &ProviderError, cause: &str) {
    assert_eq!(
        error.kind,
        ProviderErrorKind::StreamDropped,
        "{name}: {error:?}"
    );
    assert!(error.is_retryable(), "{name}");
    assert_eq!(error.max_retries, Some(1), "{name}: retried at most once");
    let expected = format!("cannot connect to the provider ({cause}): ");
    assert!(error.message.starts_with(&expected), "{name}: {error:?}");
}

/// A resolver that knows no host, so a DNS failure needs no network.
struct NoSuchHost;

impl reqwest::dns::Resolve for NoSuchHost {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let message = format!("no such host: {}", name.as_str());
        Box::pin(
            async move { Err(std::io::Error::new(std::io::ErrorKind::NotFound, message).into()) },
        )
    }
}
