//! A real OTLP/HTTP receiver for the telemetry tests: an axum server on
//! loopback that decodes what it is sent with the OTLP types themselves
//! (`opentelemetry-proto`: protobuf bodies with prost, JSON bodies with the
//! OTLP JSON mapping) and keeps it. In `hang` mode it accepts every request
//! and never answers, like a collector that has stopped; in redirect mode it
//! sends every request elsewhere.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

/// What the receiver was sent.
#[derive(Default)]
pub struct Received {
    pub traces: Vec<ExportTraceServiceRequest>,
    pub metrics: Vec<ExportMetricsServiceRequest>,
    /// Each request's content type and `authorization` header.
    pub requests: Vec<(String, Option<String>)>,
}

struct Shared {
    received: Mutex<Received>,
    hang: bool,
    /// Where every request is redirected (307), if anywhere.
    redirect: Option<String>,
}

/// A running receiver; dropped, it stops.
pub struct Receiver {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    /// A receiver that answers every export with success.
    pub fn start() -> Self {
        Self::with(false, None)
    }

    /// A receiver that takes every request and never answers.
    pub fn hanging() -> Self {
        Self::with(true, None)
    }

    /// A receiver that notes every request and answers it with a 307 to
    /// the same path under `base`, as a hostile or misconfigured collector
    /// could.
    pub fn redirecting(base: &str) -> Self {
        Self::with(false, Some(base.to_owned()))
    }

    fn with(hang: bool, redirect: Option<String>) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared {
            received: Mutex::new(Received::default()),
            hang,
            redirect,
        });
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(shared.clone());
        runtime.spawn(async move { axum::serve(listener, app).await });
        Self {
            addr,
            shared,
            _runtime: runtime,
        }
    }

    /// The base URL to configure as the endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Runs `check` over what was received so far.
    pub fn with_received<T>(&self, check: impl FnOnce(&Received) -> T) -> T {
        check(&self.shared.received.lock().unwrap())
    }

    /// Every span received, in arrival order.
    pub fn spans(&self) -> Vec<Span> {
        self.with_received(|received| {
            received
                .traces
                .iter()
                .flat_map(|request| &request.resource_spans)
                .flat_map(|resource| &resource.scope_spans)
                .flat_map(|scope| scope.spans.clone())
                .collect()
        })
    }

    /// The names of every metric received.
    pub fn metric_names(&self) -> Vec<String> {
        self.with_received(|received| {
            received
                .metrics
                .iter()
                .flat_map(|request| &request.resource_metrics)
                .flat_map(|resource| &resource.scope_metrics)
                .flat_map(|scope| scope.metrics.iter().map(|metric| metric.name.clone()))
                .collect()
        })
    }
}

/// A span attribute's value as text (numbers and booleans formatted).
pub fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(text)
}

/// A span attribute that is an array of strings, or `None` if it is absent
/// or of another type.
pub fn string_array(span: &Span, key: &str) -> Option<Vec<String>> {
    let value = span.attributes.iter().find(|kv| kv.key == key)?;
    match value.value.as_ref()?.value.as_ref()? {
        any_value::Value::ArrayValue(array) => array
            .values
            .iter()
            .map(|item| match item.value.as_ref()? {
                any_value::Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn text(value: &AnyValue) -> Option<String> {
    match value.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// Every attribute value of every span, as text: what a prompt leak would
/// show up in.
pub fn all_values(spans: &[Span]) -> String {
    spans
        .iter()
        .flat_map(|span| {
            span.attributes
                .iter()
                .filter_map(|kv| kv.value.as_ref().and_then(text))
                .chain(std::iter::once(span.name.clone()))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_json(headers: &HeaderMap) -> bool {
    content_type(headers).starts_with("application/json")
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

fn note(shared: &Shared, headers: &HeaderMap) {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    shared
        .received
        .lock()
        .unwrap()
        .requests
        .push((content_type(headers), authorization));
}

fn answer(json: bool) -> axum::response::Response {
    if json {
        ([(header::CONTENT_TYPE, "application/json")], "{}").into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            Vec::<u8>::new(),
        )
            .into_response()
    }
}

/// In `hang` mode never returns; in redirect mode the 307 to give;
/// otherwise `None`, and the request is decoded.
async fn hold(shared: &Shared, path: &str) -> Option<axum::response::Response> {
    if shared.hang {
        std::future::pending::<()>().await;
    }
    let base = shared.redirect.as_ref()?;
    Some(
        (
            StatusCode::TEMPORARY_REDIRECT,
            [(header::LOCATION, format!("{base}{path}"))],
        )
            .into_response(),
    )
}

async fn traces(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    note(&shared, &headers);
    if let Some(response) = hold(&shared, "/v1/traces").await {
        return response;
    }
    let json = is_json(&headers);
    let decoded = if json {
        serde_json::from_slice::<ExportTraceServiceRequest>(&body).map_err(|e| e.to_string())
    } else {
        ExportTraceServiceRequest::decode(body).map_err(|e| e.to_string())
    };
    match decoded {
        Ok(request) => {
            shared.received.lock().unwrap().traces.push(request);
            answer(json)
        }
        Err(error) => (StatusCode::BAD_REQUEST, error).into_response(),
    }
}

async fn metrics(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    note(&shared, &headers);
    if let Some(response) = hold(&shared, "/v1/metrics").await {
        return response;
    }
    let json = is_json(&headers);
    let decoded = if json {
        serde_json::from_slice::<ExportMetricsServiceRequest>(&body).map_err(|e| e.to_string())
    } else {
        ExportMetricsServiceRequest::decode(body).map_err(|e| e.to_string())
    };
    match decoded {
        Ok(request) => {
            shared.received.lock().unwrap().metrics.push(request);
            answer(json)
        }
        Err(error) => (StatusCode::BAD_REQUEST, error).into_response(),
    }
}

/// One data point of a metric: its attributes as text, its value (a sum's
/// value, a histogram's sum) and its count (1 for a sum).
pub struct Point {
    pub attributes: std::collections::BTreeMap<String, String>,
    pub value: f64,
    pub count: u64,
}

impl Receiver {
    /// The data points of metric `name` in the latest export that has it
    /// (the metrics are cumulative: the latest holds the totals).
    pub fn points(&self, name: &str) -> Vec<Point> {
        use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
        let attributes = |kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]| {
            kvs.iter()
                .filter_map(|kv| Some((kv.key.clone(), text(kv.value.as_ref()?)?)))
                .collect()
        };
        self.with_received(|received| {
            let metric = received
                .metrics
                .iter()
                .rev()
                .flat_map(|request| &request.resource_metrics)
                .flat_map(|resource| &resource.scope_metrics)
                .flat_map(|scope| &scope.metrics)
                .find(|metric| metric.name == name)?;
            Some(match metric.data.as_ref()? {
                metric::Data::Histogram(histogram) => histogram
                    .data_points
                    .iter()
                    .map(|point| Point {
                        attributes: attributes(&point.attributes),
                        value: point.sum.unwrap_or_default(),
                        count: point.count,
                    })
                    .collect(),
                metric::Data::Sum(sum) => sum
                    .data_points
                    .iter()
                    .map(|point| Point {
                        attributes: attributes(&point.attributes),
                        value: match point.value {
                            Some(number_data_point::Value::AsInt(i)) => i as f64,
                            Some(number_data_point::Value::AsDouble(d)) => d,
                            None => 0.0,
                        },
                        count: 1,
                    })
                    .collect(),
                _ => Vec::new(),
            })
        })
        .unwrap_or_default()
    }
}
