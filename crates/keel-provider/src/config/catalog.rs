//! The built-in catalog: the providers people use, their models with
//! context windows, output limits and list prices, and short model aliases.
//!
//! Prices are list prices at the time of writing (USD per million tokens);
//! `config.toml` overrides any field. Every alias names a model of the same
//! provider's catalog (a unit test checks it), so an alias never resolves to
//! a model whose window and prices are unknown.

use std::collections::BTreeMap;

use super::{Api, Config, ModelInfo, ProviderConfig};

fn model(
    context: u64,
    output: u32,
    input: f64,
    out: f64,
    read: f64,
    write: Option<f64>,
) -> ModelInfo {
    ModelInfo {
        context_window: Some(context),
        max_output: Some(output),
        input_price: Some(input),
        output_price: Some(out),
        cache_read_price: Some(read),
        cache_write_price: write,
    }
}

fn provider(
    api: Api,
    url: &str,
    env: Option<&str>,
    default: Option<&str>,
    models: Vec<(&str, ModelInfo)>,
    aliases: &[(&str, &str)],
) -> ProviderConfig {
    ProviderConfig {
        api: Some(api),
        base_url: Some(url.to_owned()),
        api_key_env: env.map(str::to_owned),
        default_model: default.map(str::to_owned),
        reasoning_content: None,
        models: models
            .into_iter()
            .map(|(id, info)| (id.to_owned(), info))
            .collect(),
        aliases: aliases
            .iter()
            .map(|(alias, id)| ((*alias).to_owned(), (*id).to_owned()))
            .collect(),
        ..ProviderConfig::default()
    }
}

/// The built-in catalog.
pub(super) fn builtin() -> Config {
    let mut providers = BTreeMap::new();
    let mut deepseek = provider(
        Api::OpenaiChat,
        "https://api.deepseek.com",
        Some("DEEPSEEK_API_KEY"),
        Some("deepseek-chat"),
        vec![
            (
                "deepseek-chat",
                model(131_072, 8_192, 0.27, 1.10, 0.07, None),
            ),
            (
                "deepseek-reasoner",
                model(131_072, 65_536, 0.55, 2.19, 0.14, None),
            ),
        ],
        &[("chat", "deepseek-chat"), ("reasoner", "deepseek-reasoner")],
    );
    deepseek.reasoning_content = Some(true);
    providers.insert("deepseek".to_owned(), deepseek);
    providers.insert(
        "anthropic".to_owned(),
        provider(
            Api::Anthropic,
            "https://api.anthropic.com",
            Some("ANTHROPIC_API_KEY"),
            Some("claude-sonnet-4-5"),
            vec![
                (
                    "claude-sonnet-4-5",
                    model(200_000, 64_000, 3.0, 15.0, 0.30, Some(3.75)),
                ),
                (
                    "claude-opus-4-1",
                    model(200_000, 32_000, 15.0, 75.0, 1.50, Some(18.75)),
                ),
                (
                    "claude-haiku-4-5",
                    model(200_000, 64_000, 1.0, 5.0, 0.10, Some(1.25)),
                ),
            ],
            &[
                ("sonnet", "claude-sonnet-4-5"),
                ("opus", "claude-opus-4-1"),
                ("haiku", "claude-haiku-4-5"),
            ],
        ),
    );
    providers.insert(
        "openai".to_owned(),
        provider(
            Api::OpenaiResponses,
            "https://api.openai.com/v1",
            Some("OPENAI_API_KEY"),
            Some("gpt-5"),
            vec![
                ("gpt-5", model(400_000, 128_000, 1.25, 10.0, 0.125, None)),
                (
                    "gpt-5-mini",
                    model(400_000, 128_000, 0.25, 2.0, 0.025, None),
                ),
            ],
            &[("gpt5", "gpt-5"), ("mini", "gpt-5-mini")],
        ),
    );
    providers.insert(
        "openrouter".to_owned(),
        provider(
            Api::OpenaiChat,
            "https://openrouter.ai/api/v1",
            Some("OPENROUTER_API_KEY"),
            None,
            vec![],
            &[],
        ),
    );
    providers.insert(
        "openai-compatible".to_owned(),
        ProviderConfig {
            api: Some(Api::OpenaiChat),
            ..ProviderConfig::default()
        },
    );
    Config { providers }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alias_names_a_model_of_its_provider() {
        let catalog = builtin();
        let mut count = 0;
        for (name, provider) in &catalog.providers {
            for (alias, id) in &provider.aliases {
                assert!(
                    provider.models.contains_key(id),
                    "{name}: alias `{alias}` names `{id}`, which is not in the catalog"
                );
                assert!(
                    !provider.models.contains_key(alias),
                    "{name}: alias `{alias}` hides a model id"
                );
                count += 1;
            }
        }
        assert!(count >= 7, "the usual aliases are there ({count})");
    }
}
