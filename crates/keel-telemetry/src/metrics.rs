//! Metrics derived from the kernel's spans as they close, so the kernel
//! measures nothing twice and depends on no metrics API:
//!
//! | instrument | kind, unit | from | attributes |
//! |---|---|---|---|
//! | `gen_ai.client.operation.duration` | histogram, s | `chat`, `execute_tool`, `invoke_agent` | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.tool.name`, `error.type` (those the span has) |
//! | `gen_ai.client.token.usage` | histogram, `{token}` | `chat` | `gen_ai.token.type` (`input`, `output`), `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.model` |
//! | `keel.client.time_to_first_chunk` | histogram, s | `chat` | `gen_ai.provider.name`, `gen_ai.request.model` |
//! | `keel.tool.duration` | histogram, s | `execute_tool` | `gen_ai.tool.name`, `keel.tool.status`, `error.type` |
//! | `keel.runs` | counter | `invoke_agent` | `keel.run.outcome`, `error.type` |
//! | `keel.permission.decisions` | counter | `keel.permission` | `keel.permission.resolution`, `keel.permission.source`, `keel.permission.mode` |
//! | `keel.compactions` | counter | `keel.compaction` | `keel.compaction.trigger`, `error.type` |
//!
//! Only low-cardinality fields become metric attributes: never ids, paths
//! or content.

use std::collections::BTreeMap;
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The span fields a metric may carry as attributes, or reads as a value.
const KEPT: [&str; 16] = [
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.tool.name",
    "error.type",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "keel.time_to_first_chunk_ms",
    "keel.tool.status",
    "keel.run.outcome",
    "keel.permission.resolution",
    "keel.permission.source",
    "keel.permission.mode",
    "keel.compaction.trigger",
    "keel.run.resume",
];

/// The instruments, fed by [`Metrics`] as spans close.
pub(crate) struct Metrics {
    duration: Histogram<f64>,
    tokens: Histogram<u64>,
    first_chunk: Histogram<f64>,
    tool_duration: Histogram<f64>,
    runs: Counter<u64>,
    permissions: Counter<u64>,
    compactions: Counter<u64>,
}

impl Metrics {
    pub(crate) fn new(provider: &SdkMeterProvider) -> Self {
        let meter = provider.meter("keel");
        // The GenAI conventions' bucket boundaries.
        let seconds = vec![
            0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
        ];
        let tokens = vec![
            1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
            4194304.0, 16777216.0, 67108864.0,
        ];
        Self {
            duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description("GenAI operation duration")
                .with_boundaries(seconds.clone())
                .build(),
            tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Tokens used per model request")
                .with_boundaries(tokens)
                .build(),
            first_chunk: meter
                .f64_histogram("keel.client.time_to_first_chunk")
                .with_unit("s")
                .with_description("Time from a model request to its first streamed chunk")
                .with_boundaries(seconds.clone())
                .build(),
            tool_duration: meter
                .f64_histogram("keel.tool.duration")
                .with_unit("s")
                .with_description("Tool call duration, by tool")
                .with_boundaries(seconds)
                .build(),
            runs: meter
                .u64_counter("keel.runs")
                .with_description("Runs by terminal state")
                .build(),
            permissions: meter
                .u64_counter("keel.permission.decisions")
                .with_description("Permission decisions by resolution and source")
                .build(),
            compactions: meter
                .u64_counter("keel.compactions")
                .with_description("Compactions by trigger")
                .build(),
        }
    }

    fn closed(&self, name: &str, facts: &Facts) {
        let seconds = facts.started.elapsed().as_secs_f64();
        match name {
            "chat" => {
                let attributes = facts.attributes(&[
                    "gen_ai.operation.name",
                    "gen_ai.provider.name",
                    "gen_ai.request.model",
                    "gen_ai.response.model",
                    "error.type",
                ]);
                self.duration.record(seconds, &attributes);
                let base = facts.attributes(&[
                    "gen_ai.operation.name",
                    "gen_ai.provider.name",
                    "gen_ai.request.model",
                    "gen_ai.response.model",
                ]);
                for (field, kind) in [
                    ("gen_ai.usage.input_tokens", "input"),
                    ("gen_ai.usage.output_tokens", "output"),
                ] {
                    if let Some(count) = facts.number(field) {
                        let mut attributes = base.clone();
                        attributes.push(KeyValue::new("gen_ai.token.type", kind));
                        self.tokens.record(count, &attributes);
                    }
                }
                if let Some(ms) = facts.number("keel.time_to_first_chunk_ms") {
                    let attributes =
                        facts.attributes(&["gen_ai.provider.name", "gen_ai.request.model"]);
                    self.first_chunk.record(ms as f64 / 1000.0, &attributes);
                }
            }
            "execute_tool" => {
                let attributes =
                    facts.attributes(&["gen_ai.operation.name", "gen_ai.tool.name", "error.type"]);
                self.duration.record(seconds, &attributes);
                let attributes =
                    facts.attributes(&["gen_ai.tool.name", "keel.tool.status", "error.type"]);
                self.tool_duration.record(seconds, &attributes);
            }
            "invoke_agent" => {
                let attributes = facts.attributes(&[
                    "gen_ai.operation.name",
                    "gen_ai.provider.name",
                    "gen_ai.request.model",
                    "error.type",
                ]);
                self.duration.record(seconds, &attributes);
                let attributes = facts.attributes(&["keel.run.outcome", "error.type"]);
                self.runs.add(1, &attributes);
            }
            "keel.permission" => {
                let attributes = facts.attributes(&[
                    "keel.permission.resolution",
                    "keel.permission.source",
                    "keel.permission.mode",
                ]);
                self.permissions.add(1, &attributes);
            }
            "keel.compaction" => {
                let attributes = facts.attributes(&["keel.compaction.trigger", "error.type"]);
                self.compactions.add(1, &attributes);
            }
            _ => {}
        }
    }
}

/// Whether spans of this name feed a metric.
fn measured(name: &str) -> bool {
    matches!(
        name,
        "chat" | "execute_tool" | "invoke_agent" | "keel.permission" | "keel.compaction"
    )
}

/// What a measured span said, kept in its extensions until it closes.
struct Facts {
    started: Instant,
    fields: BTreeMap<&'static str, Value>,
}

#[derive(Clone)]
enum Value {
    Text(String),
    Number(u64),
}

impl Facts {
    fn attributes(&self, names: &[&'static str]) -> Vec<KeyValue> {
        names
            .iter()
            .filter_map(|name| {
                Some(match self.fields.get(name)? {
                    Value::Text(text) => KeyValue::new(*name, text.clone()),
                    Value::Number(number) => {
                        KeyValue::new(*name, i64::try_from(*number).unwrap_or(i64::MAX))
                    }
                })
            })
            .collect()
    }

    fn number(&self, name: &str) -> Option<u64> {
        match self.fields.get(name)? {
            Value::Number(number) => Some(*number),
            Value::Text(_) => None,
        }
    }
}

impl Visit for Facts {
    fn record_str(&mut self, field: &Field, value: &str) {
        if KEPT.contains(&field.name()) {
            self.fields
                .insert(field.name(), Value::Text(value.to_owned()));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if KEPT.contains(&field.name()) {
            self.fields.insert(field.name(), Value::Number(value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if let Ok(value) = u64::try_from(value) {
            self.record_u64(field, value);
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.record_str(field, if value { "true" } else { "false" });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if KEPT.contains(&field.name()) {
            self.fields
                .insert(field.name(), Value::Text(format!("{value:?}")));
        }
    }
}

impl<S> Layer<S> for Metrics
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !measured(attrs.metadata().name()) {
            return;
        }
        let mut facts = Facts {
            started: Instant::now(),
            fields: BTreeMap::new(),
        };
        attrs.record(&mut facts);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(facts);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(facts) = span.extensions_mut().get_mut::<Facts>()
        {
            values.record(facts);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(facts) = span.extensions_mut().remove::<Facts>()
        {
            self.closed(span.name(), &facts);
        }
    }
}
