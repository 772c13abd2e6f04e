//! Keel's telemetry: where the kernel's trace spans and the metrics derived
//! from them are exported, and (behind the `export` feature) the exporter.
//!
//! The kernel only opens `tracing` spans in the OpenTelemetry GenAI
//! vocabulary (`keel_kernel`'s `trace` module says which). This crate turns
//! them into OTLP: [`ExportConfig`] is the plain configuration a host
//! resolves (keel-host reads the user's `[telemetry]` table and the standard
//! `OTEL_EXPORTER_OTLP_*` variables; nothing here reads the environment), and
//! with `export` on, [`Telemetry`] starts the SDK's batch span processor and
//! periodic metric reader and gives the `tracing` layer that feeds them.
//!
//! Invariants:
//! - Nothing is exported unless a host built a [`Telemetry`] from a config.
//! - Export never blocks a run: spans and measurements are queued (bounded;
//!   past the bound they are dropped) and sent from the SDK's own threads;
//!   an exporter's failure is logged once (and its recovery once), never per
//!   batch or span, and never fails anything.
//! - [`Telemetry::shutdown`] returns within the export timeout, whatever the
//!   collector does.
//! - Header values (tokens) are never logged, echoed or put in an error.

// Every `pub` item is part of the public API.
#![warn(unreachable_pub)]

mod config;
#[cfg(feature = "export")]
mod export;
#[cfg(feature = "export")]
mod metrics;

pub use config::{ConfigError, ExportConfig, Protocol, parse_headers};
#[cfg(feature = "export")]
pub use export::{Telemetry, TelemetryError};
