//! The exporter: the SDK's batch span processor and periodic metric reader
//! over OTLP/HTTP, and the `tracing` layer that feeds them.
//!
//! Build it before (or outside) any tokio runtime: the HTTP client is the
//! blocking one, and the SDK batches on threads of its own, so a run's task
//! never waits on the network. [`Telemetry::shutdown`] flushes from a thread
//! of its own and gives up at the export timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::config::{ExportConfig, Protocol};
use crate::metrics::Metrics;

/// The exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The OTLP exporter refused its configuration.
    #[error("telemetry: cannot export to {endpoint}: {reason}")]
    Build {
        /// The collector's base URL.
        endpoint: String,
        /// Why (the SDK's words; header values are never part of them).
        reason: String,
    },
}

/// A running export of the kernel's spans and the metrics derived from them.
/// Dropping it without [`Telemetry::shutdown`] loses what is still queued.
#[derive(Debug)]
pub struct Telemetry {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
    timeout: Duration,
}

impl Telemetry {
    /// Starts the exporter for `config`; `version` names Keel's version in
    /// the resource (`service.name` is `keel`).
    pub fn start(config: &ExportConfig, version: &str) -> Result<Self, TelemetryError> {
        let fail = |error: &dyn std::fmt::Display| TelemetryError::Build {
            endpoint: config.endpoint.clone(),
            reason: error.to_string(),
        };
        let protocol = match config.protocol {
            Protocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
            Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
        };
        let headers: HashMap<String, String> = config.headers.iter().cloned().collect();
        let resource = Resource::builder_empty()
            .with_service_name("keel")
            .with_attribute(KeyValue::new("service.version", version.to_owned()))
            .build();
        let client = http_client(config.timeout).map_err(|error| fail(&error))?;
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client.clone())
            .with_endpoint(config.traces_url())
            .with_protocol(protocol)
            .with_timeout(config.timeout)
            .with_headers(headers.clone())
            .build()
            .map_err(|error| fail(&error))?;
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(config.metrics_url())
            .with_protocol(protocol)
            .with_timeout(config.timeout)
            .with_headers(headers)
            .with_temporality(Temporality::Cumulative)
            .build()
            .map_err(|error| fail(&error))?;
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(4096)
            .with_max_export_batch_size(512)
            .with_scheduled_delay(config.interval)
            .build();
        let processor = BatchSpanProcessor::builder(Logged::new(spans, &config.traces_url()))
            .with_batch_config(batch)
            .build();
        let tracer = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.clone())
            .build();
        let reader = PeriodicReader::builder(Logged::new(metrics, &config.metrics_url()))
            .with_interval(config.interval)
            .build();
        let meter = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource)
            .build();
        Ok(Self {
            tracer,
            meter,
            timeout: config.timeout,
        })
    }

    /// The layer that exports Keel's spans (targets `keel_*`, spans only:
    /// events, which may quote paths or messages, stay in the log) and
    /// records the metrics derived from them. Add it to the subscriber.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
    {
        let spans = tracing_opentelemetry::layer()
            .with_tracer(self.tracer.tracer("keel"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_level(false)
            .with_target(false);
        let metrics = Metrics::new(&self.meter);
        spans
            .and_then(metrics)
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.is_span() && meta.target().starts_with("keel_")
            }))
    }

    /// Exports what is queued and stops; returns within the export timeout
    /// (plus a moment), whatever the collector does. What could not be sent
    /// by then is dropped.
    pub fn shutdown(self) {
        let Self {
            tracer,
            meter,
            timeout,
        } = self;
        let (done, finished) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("keel-telemetry-shutdown".into())
            .spawn(move || {
                // Spans first: the metrics are the smaller loss.
                if let Err(error) = tracer.shutdown_with_timeout(timeout) {
                    tracing::debug!(target: "keel_telemetry", %error, "trace export shutdown");
                }
                if let Err(error) = meter.shutdown_with_timeout(timeout) {
                    tracing::debug!(target: "keel_telemetry", %error, "metric export shutdown");
                }
                let _ = done.send(());
            });
        if spawned.is_ok() {
            // Both shutdowns share the one deadline.
            let _ = finished.recv_timeout(timeout + Duration::from_millis(250));
        }
    }
}

/// The HTTP client both exporters share: reqwest's blocking client with the
/// export timeout and no redirects. A redirect would carry the configured
/// headers to whatever host it names (reqwest strips only `authorization`,
/// not vendor keys such as `x-api-key`), over plain HTTP too. Built on a
/// thread of its own: the blocking client cannot be built inside a tokio
/// runtime.
fn http_client(timeout: Duration) -> Result<reqwest::blocking::Client, String> {
    std::thread::Builder::new()
        .name("keel-telemetry-client".into())
        .spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|error| error.to_string())
        })
        .map_err(|error| format!("cannot start a thread for the HTTP client: {error}"))?
        .join()
        .map_err(|_| "building the HTTP client failed".to_owned())?
}

/// The attribute the GenAI conventions type as a string array, which a
/// `tracing` field cannot carry: the kernel records it as one string.
const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";

/// Gives a span's attributes the types the conventions ask for: the finish
/// reasons, recorded as one string, are exported as an array of it.
fn conventions(span: &mut SpanData) {
    for attribute in &mut span.attributes {
        if attribute.key.as_str() == FINISH_REASONS
            && let opentelemetry::Value::String(reason) = &attribute.value
        {
            attribute.value =
                opentelemetry::Value::Array(opentelemetry::Array::String(vec![reason.clone()]));
        }
    }
}

/// An exporter whose failures are logged once, not per batch: the first
/// failure after a success (or at the start), and the first success after
/// a failure.
#[derive(Debug)]
struct Logged<E> {
    inner: E,
    url: String,
    failing: AtomicBool,
}

impl<E> Logged<E> {
    fn new(inner: E, url: &str) -> Self {
        Self {
            inner,
            url: url.to_owned(),
            failing: AtomicBool::new(false),
        }
    }

    fn note(&self, result: &OTelSdkResult) {
        match result {
            Err(error) if !self.failing.swap(true, Ordering::Relaxed) => tracing::warn!(
                target: "keel_telemetry",
                url = %self.url,
                %error,
                "telemetry export failed; further failures are not logged until one succeeds"
            ),
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!(target: "keel_telemetry", url = %self.url, "telemetry export recovered");
            }
            _ => {}
        }
    }
}

impl<E: SpanExporter> SpanExporter for Logged<E> {
    async fn export(&self, mut batch: Vec<SpanData>) -> OTelSdkResult {
        batch.iter_mut().for_each(conventions);
        let result = self.inner.export(batch).await;
        self.note(&result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for Logged<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        self.note(&result);
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
