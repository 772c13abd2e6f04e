//! `keel models`: the configured providers and models, and which keys are set.
//!
//! It reads the same configuration as `keel run` (built-in catalog plus
//! `config.toml` or `--config`, with `--profile` and `-c`) and reports, for
//! each provider, its models and aliases and whether its key variable is
//! set — never the key itself: readable lines (`--output-format text`, the
//! default), one JSON document (`json`) or one JSON line per provider
//! (`stream-json`).

use std::process::ExitCode;

use keel_host::Settings;
use serde_json::json;

use crate::args::{DataFormat, ModelsArgs};
use crate::output::say;
use crate::startup::StartupError;

pub fn run(args: ModelsArgs) -> Result<ExitCode, StartupError> {
    let format = args.format.data();
    let settings = Settings::load(&args.settings.sources())?;
    let config = settings.catalog;
    let mut providers = Vec::new();
    for (name, provider) in &config.providers {
        let key = match &provider.api_key_env {
            None => "not needed".to_owned(),
            Some(variable) if std::env::var_os(variable).is_some_and(|v| !v.is_empty()) => {
                format!("{variable} is set")
            }
            Some(variable) => format!("{variable} is not set"),
        };
        if format == DataFormat::Text {
            say(format!(
                "{name}  ({}, {}; key: {key}; default model: {})",
                provider
                    .api
                    .map(|api| api.as_str().to_owned())
                    .unwrap_or_else(|| "api not set".into()),
                provider.base_url.as_deref().unwrap_or("base_url not set"),
                provider.default_model.as_deref().unwrap_or("-"),
            ));
            for (alias, id) in &provider.aliases {
                say(format!("  {alias:<24} → {id}"));
            }
            for (id, info) in &provider.models {
                say(format!(
                    "  {id:<24} context {:>8}  output {:>7}  $/M in {:>6} out {:>6} cache-read {:>6}",
                    show(info.context_window),
                    show(info.max_output),
                    show(info.input_price),
                    show(info.output_price),
                    show(info.cache_read_price),
                ));
            }
        } else {
            providers.push(json!({
                "type": "provider",
                "provider": name,
                "api": provider.api,
                "base_url": provider.base_url,
                "api_key_env": provider.api_key_env,
                "key": key,
                "default_model": provider.default_model,
                "models": provider.models,
                "aliases": provider.aliases,
            }));
        }
    }
    match format {
        DataFormat::Text => {}
        DataFormat::Json => say(json!({ "providers": providers })),
        DataFormat::StreamJson => providers.into_iter().for_each(say),
    }
    Ok(ExitCode::SUCCESS)
}

fn show<T: ToString>(value: Option<T>) -> String {
    value
        .map(|v| v.to_string())
        .unwrap_or_else(|| "-".to_owned())
}
