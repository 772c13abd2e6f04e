//! Providers and models, from built-in defaults and `config.toml`.
//!
//! The built-in catalog names the providers people use (deepseek, anthropic,
//! openai, openrouter) and a generic `openai-compatible` for local servers
//! (vLLM, llama.cpp, Ollama), with each model's context window, output limit
//! and prices. A user file (`$XDG_CONFIG_HOME/keel/config.toml`, or the one
//! `--config` names) adds providers and models or overrides fields. Keys are
//! never in the file: each provider names the environment variable that
//! holds its key, and a missing key is an error that names the variable.
//!
//! This module interprets only the `[providers.*]` tables of the file
//! ([`Config::from_table`]); it never opens the file. keel-host's `settings`
//! reads it (as a file Keel did not create: a regular file, size-capped,
//! never blocking) and checks its other top-level keys (`provider`,
//! `model`, `mode`, `profiles`, …).
//!
//! A provider may name short aliases for its models (`sonnet`, `chat`, …);
//! a model id of the catalog always wins over an alias of the same name.
//!
//! ```toml
//! [providers.local]
//! api = "openai-chat"
//! base_url = "http://127.0.0.1:8080/v1"
//! default_model = "qwen2.5-coder"
//!
//! [providers.local.aliases]
//! coder = "qwen2.5-coder"
//!
//! [providers.deepseek.models.deepseek-chat]
//! context_window = 131072
//! input_price = 0.27       # USD per million input tokens
//! ```
//!
//! Each provider also says how long Keel waits for it ([`Waits`]); every
//! key is optional, in seconds, and bounds a wait for *progress*, never the
//! length of an answer that keeps streaming:
//!
//! ```toml
//! [providers.local]
//! connect_timeout_sec = 30       # opening the connection (TLS included)
//! first_byte_timeout_sec = 300   # sending the request → first model output
//! idle_timeout_sec = 120         # between two outputs; keep-alives do not count
//! max_retries = 3                # retries of a retryable failure (0: none)
//! max_retry_wait_sec = 300       # longest Retry-After waited; longer fails
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::base_url::{self, BaseUrlError};

mod catalog;

/// Which wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Api {
    /// OpenAI-compatible Chat Completions.
    OpenaiChat,
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Responses.
    OpenaiResponses,
}

impl Api {
    /// The name config.toml gives it (`api = "openai-chat"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenaiChat => "openai-chat",
            Self::Anthropic => "anthropic",
            Self::OpenaiResponses => "openai-responses",
        }
    }
}

/// One configured provider.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ProviderConfig {
    /// The wire format.
    pub api: Option<Api>,
    /// The API base URL.
    pub base_url: Option<String>,
    /// The environment variable that holds the key (none for local servers).
    pub api_key_env: Option<String>,
    /// The model used when none is asked for.
    pub default_model: Option<String>,
    /// DeepSeek-style `reasoning_content` (Chat Completions only).
    pub reasoning_content: Option<bool>,
    /// Known models.
    #[serde(default)]
    pub models: BTreeMap<String, ModelInfo>,
    /// Short names for models: alias → model id.
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
    /// Seconds to open a connection (default 30).
    pub connect_timeout_sec: Option<u64>,
    /// Seconds from sending a request to the model's first output (default
    /// 300): a slow model reading a long prompt needs more.
    pub first_byte_timeout_sec: Option<u64>,
    /// Seconds between two outputs of a streaming answer (default 120);
    /// keep-alive comments do not count as output.
    pub idle_timeout_sec: Option<u64>,
    /// Retries of a retryable failure (default 3; 0 disables retries).
    pub max_retries: Option<u32>,
    /// The longest wait a server may ask for with `Retry-After`, in seconds
    /// (default 300); a longer one is not waited and the request fails
    /// `rate_limited`, naming the wait asked for.
    pub max_retry_wait_sec: Option<u64>,
}

/// The default [`Waits::connect`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default [`Waits::first_byte`].
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(300);
/// The default [`Waits::idle`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The default [`Waits::max_retries`].
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// The default [`Waits::max_retry_wait`].
pub const DEFAULT_MAX_RETRY_WAIT: Duration = Duration::from_secs(300);

/// The largest number of seconds a timeout or wait setting accepts (a day).
const MAX_SECONDS: u64 = 86_400;
/// The most retries a provider setting accepts.
const MAX_RETRIES: u32 = 100;

/// How long Keel waits for one provider: its progress timeouts and how it
/// retries. Each bounds a wait for progress; none bounds the length of an
/// answer that keeps streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waits {
    /// To open a connection, TLS included (`connect_timeout_sec`).
    pub connect: Duration,
    /// From sending a request to the first model output
    /// (`first_byte_timeout_sec`).
    pub first_byte: Duration,
    /// Between two model outputs (`idle_timeout_sec`).
    pub idle: Duration,
    /// Retries of a retryable failure (`max_retries`).
    pub max_retries: u32,
    /// The longest `Retry-After` waited (`max_retry_wait_sec`).
    pub max_retry_wait: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            connect: DEFAULT_CONNECT_TIMEOUT,
            first_byte: DEFAULT_FIRST_BYTE_TIMEOUT,
            idle: DEFAULT_IDLE_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            max_retry_wait: DEFAULT_MAX_RETRY_WAIT,
        }
    }
}

impl Waits {
    /// The retry policy these settings give: the default policy with this
    /// many retries and this longest wait.
    pub fn retry_policy(&self) -> crate::retry::RetryPolicy {
        crate::retry::RetryPolicy {
            max_attempts: self.max_retries.saturating_add(1),
            max_wait: self.max_retry_wait,
            ..crate::retry::RetryPolicy::default()
        }
    }
}

impl ProviderConfig {
    /// The waits this provider's settings give (the defaults where unset),
    /// or the first setting out of range: timeouts are 1 to 86400 s, the
    /// longest retry wait 0 to 86400 s, retries 0 to 100.
    pub fn waits(&self, provider: &str) -> Result<Waits, ConfigError> {
        let invalid = |field: &'static str, problem: String| ConfigError::InvalidSetting {
            provider: provider.to_owned(),
            field,
            problem,
        };
        let seconds =
            |field: &'static str, value: Option<u64>, least: u64, default: Duration| match value {
                None => Ok(default),
                Some(value) if (least..=MAX_SECONDS).contains(&value) => {
                    Ok(Duration::from_secs(value))
                }
                Some(value) => Err(invalid(
                    field,
                    format!("{value} is not a number of seconds from {least} to {MAX_SECONDS}"),
                )),
            };
        let max_retries = match self.max_retries {
            None => DEFAULT_MAX_RETRIES,
            Some(value) if value <= MAX_RETRIES => value,
            Some(value) => {
                return Err(invalid(
                    "max_retries",
                    format!("{value} is more than {MAX_RETRIES}"),
                ));
            }
        };
        Ok(Waits {
            connect: seconds(
                "connect_timeout_sec",
                self.connect_timeout_sec,
                1,
                DEFAULT_CONNECT_TIMEOUT,
            )?,
            first_byte: seconds(
                "first_byte_timeout_sec",
                self.first_byte_timeout_sec,
                1,
                DEFAULT_FIRST_BYTE_TIMEOUT,
            )?,
            idle: seconds(
                "idle_timeout_sec",
                self.idle_timeout_sec,
                1,
                DEFAULT_IDLE_TIMEOUT,
            )?,
            max_retries,
            max_retry_wait: seconds(
                "max_retry_wait_sec",
                self.max_retry_wait_sec,
                0,
                DEFAULT_MAX_RETRY_WAIT,
            )?,
        })
    }
}

impl ProviderConfig {
    /// The model id `asked` names: itself when the catalog knows it or no
    /// alias has its name, else the model the alias names.
    pub fn model_id<'a>(&'a self, asked: &'a str) -> &'a str {
        if self.models.contains_key(asked) {
            return asked;
        }
        self.aliases.get(asked).map_or(asked, String::as_str)
    }
}

/// What Keel knows about one model. Prices are USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ModelInfo {
    /// Tokens the model accepts in one request.
    pub context_window: Option<u64>,
    /// Tokens it may write in one response.
    pub max_output: Option<u32>,
    /// Price of uncached input.
    pub input_price: Option<f64>,
    /// Price of output (reasoning included).
    pub output_price: Option<f64>,
    /// Price of input read from the cache.
    pub cache_read_price: Option<f64>,
    /// Price of input written to the cache.
    pub cache_write_price: Option<f64>,
}

impl ModelInfo {
    /// The cost of `usage` in USD, when the input and output prices are known.
    pub fn cost(&self, usage: &keel_protocol::Usage) -> Option<f64> {
        let per =
            |tokens: u64, price: Option<f64>| tokens as f64 * price.unwrap_or(0.0) / 1_000_000.0;
        let (input, output) = (self.input_price?, self.output_price?);
        Some(
            per(usage.input_tokens, Some(input))
                + per(usage.output_tokens, Some(output))
                + per(
                    usage.cache_read_tokens,
                    self.cache_read_price.or(Some(input)),
                )
                + per(
                    usage.cache_write_tokens,
                    self.cache_write_price.or(Some(input)),
                ),
        )
    }

    fn merged_over(self, base: ModelInfo) -> ModelInfo {
        ModelInfo {
            context_window: self.context_window.or(base.context_window),
            max_output: self.max_output.or(base.max_output),
            input_price: self.input_price.or(base.input_price),
            output_price: self.output_price.or(base.output_price),
            cache_read_price: self.cache_read_price.or(base.cache_read_price),
            cache_write_price: self.cache_write_price.or(base.cache_write_price),
        }
    }
}

/// All configured providers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// Providers by name.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
}

/// Why configuration failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        message: String,
    },
    /// The file is not valid configuration.
    #[error("invalid configuration in {path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// No provider has this name.
    #[error("unknown provider `{name}`; configured: {known}")]
    UnknownProvider {
        /// The name asked for.
        name: String,
        /// The configured names.
        known: String,
    },
    /// The provider lacks a field it needs.
    #[error("provider `{provider}` needs `{field}` in the configuration")]
    Incomplete {
        /// The provider.
        provider: String,
        /// The missing field.
        field: &'static str,
    },
    /// The base URL cannot be used (checked before anything is sent).
    #[error("provider `{provider}` has an unusable base URL `{url}`: {problem}")]
    InvalidBaseUrl {
        /// The provider.
        provider: String,
        /// The base URL as configured or given (cut to 200 characters).
        url: String,
        /// What is wrong with it.
        #[source]
        problem: BaseUrlError,
    },
    /// A provider setting is out of its range.
    #[error("provider `{provider}` has an invalid `{field}`: {problem}")]
    InvalidSetting {
        /// The provider.
        provider: String,
        /// The setting's key.
        field: &'static str,
        /// What is wrong with its value.
        problem: String,
    },
    /// The provider's key variable is unset.
    #[error("provider `{provider}` needs an API key: set the environment variable {variable}")]
    MissingKey {
        /// The provider.
        provider: String,
        /// The variable to set.
        variable: String,
    },
}

impl ConfigError {
    /// A stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Read { .. } => "config_unreadable",
            Self::Invalid { .. } | Self::InvalidSetting { .. } => "config_invalid",
            Self::UnknownProvider { .. } => "unknown_provider",
            Self::Incomplete { .. } => "provider_incomplete",
            Self::InvalidBaseUrl { .. } => "invalid_base_url",
            Self::MissingKey { .. } => "missing_api_key",
        }
    }
}

/// The provider chosen for a run, resolved from the configuration.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct Resolved {
    /// The provider's name.
    pub name: String,
    /// Its wire format.
    pub api: Api,
    /// Its base URL.
    pub base_url: String,
    /// Its key, read from the environment (`Debug` prints it redacted).
    pub api_key: Option<String>,
    /// The model id.
    pub model: String,
    /// What is known about the model.
    pub info: ModelInfo,
    /// DeepSeek-style reasoning deltas.
    pub reasoning_content: bool,
    /// Whether the catalog knows the model (if not, its context window and
    /// prices are unknown: no cost is computed).
    pub in_catalog: bool,
    /// How long to wait for the provider, and how to retry it.
    pub waits: Waits,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("name", &self.name)
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("info", &self.info)
            .field("in_catalog", &self.in_catalog)
            .field("waits", &self.waits)
            .finish()
    }
}

impl Config {
    /// The built-in catalog (see the `catalog` module). Prices are list
    /// prices at the time of writing; override them in `config.toml`.
    pub fn builtin() -> Self {
        catalog::builtin()
    }

    /// The providers of a parsed configuration file (`[providers.*]`; the
    /// other keys are ignored here), without the catalog. `path` names the
    /// file in errors.
    pub fn from_table(table: &toml::Table, path: &str) -> Result<Self, ConfigError> {
        let Some(providers) = table.get("providers") else {
            return Ok(Self::default());
        };
        let providers = providers
            .clone()
            .try_into()
            .map_err(|error: toml::de::Error| ConfigError::Invalid {
                path: path.to_owned(),
                message: format!("in [providers]: {}", error.message()),
            })?;
        Ok(Self { providers })
    }

    /// Merges `user` over this configuration, field by field.
    pub fn merge(&mut self, user: Config) {
        for (name, theirs) in user.providers {
            let ours = self.providers.entry(name).or_default();
            ours.api = theirs.api.or(ours.api);
            ours.base_url = theirs.base_url.or(ours.base_url.take());
            ours.api_key_env = theirs.api_key_env.or(ours.api_key_env.take());
            ours.default_model = theirs.default_model.or(ours.default_model.take());
            ours.reasoning_content = theirs.reasoning_content.or(ours.reasoning_content);
            ours.aliases.extend(theirs.aliases);
            ours.connect_timeout_sec = theirs.connect_timeout_sec.or(ours.connect_timeout_sec);
            ours.first_byte_timeout_sec = theirs
                .first_byte_timeout_sec
                .or(ours.first_byte_timeout_sec);
            ours.idle_timeout_sec = theirs.idle_timeout_sec.or(ours.idle_timeout_sec);
            ours.max_retries = theirs.max_retries.or(ours.max_retries);
            ours.max_retry_wait_sec = theirs.max_retry_wait_sec.or(ours.max_retry_wait_sec);
            for (id, info) in theirs.models {
                let base = ours.models.get(&id).copied().unwrap_or_default();
                ours.models.insert(id, info.merged_over(base));
            }
        }
    }

    /// Resolves provider `name` with `model` (or its default; either may be
    /// an alias), `base_url`
    /// overriding the configured one, and the key read through `env`. A
    /// base URL that cannot work is refused here ([`ConfigError::InvalidBaseUrl`]),
    /// before any request.
    pub fn resolve(
        &self,
        name: &str,
        model: Option<&str>,
        base_url: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Resolved, ConfigError> {
        let provider = self
            .providers
            .get(name)
            .ok_or_else(|| ConfigError::UnknownProvider {
                name: name.to_owned(),
                known: self
                    .providers
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let incomplete = |field| ConfigError::Incomplete {
            provider: name.to_owned(),
            field,
        };
        let api = provider.api.ok_or_else(|| incomplete("api"))?;
        let base_url = base_url
            .map(str::to_owned)
            .or_else(|| provider.base_url.clone())
            .ok_or_else(|| incomplete("base_url (or --base-url)"))?;
        base_url::check(&base_url).map_err(|problem| ConfigError::InvalidBaseUrl {
            provider: name.to_owned(),
            url: base_url.chars().take(200).collect(),
            problem,
        })?;
        let model = model
            .or(provider.default_model.as_deref())
            .map(|asked| provider.model_id(asked).to_owned())
            .ok_or_else(|| incomplete("default_model (or --model)"))?;
        let waits = provider.waits(name)?;
        let api_key = match &provider.api_key_env {
            None => None,
            Some(variable) => {
                Some(env(variable).filter(|key| !key.is_empty()).ok_or_else(|| {
                    ConfigError::MissingKey {
                        provider: name.to_owned(),
                        variable: variable.clone(),
                    }
                })?)
            }
        };
        Ok(Resolved {
            name: name.to_owned(),
            api,
            base_url,
            api_key,
            info: provider.models.get(&model).copied().unwrap_or_default(),
            in_catalog: provider.models.contains_key(&model),
            model,
            reasoning_content: provider.reasoning_content.unwrap_or(false),
            waits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_files_merge_over_the_catalog_and_keys_come_from_the_environment() {
        let mut config = Config::builtin();
        let user: Config = toml::from_str(
            r#"
            [providers.local]
            api = "openai-chat"
            base_url = "http://127.0.0.1:8080/v1"
            default_model = "qwen"

            [providers.deepseek.models.deepseek-chat]
            input_price = 0.5
            "#,
        )
        .unwrap();
        config.merge(user);
        let chat = &config.providers["deepseek"].models["deepseek-chat"];
        assert_eq!(
            (chat.input_price, chat.output_price),
            (Some(0.5), Some(1.10))
        );
        let local = config.resolve("local", None, None, &|_| None).unwrap();
        assert_eq!((local.model.as_str(), local.api_key), ("qwen", None));
        let missing = config
            .resolve("deepseek", None, None, &|_| None)
            .unwrap_err();
        assert_eq!(
            missing.to_string(),
            "provider `deepseek` needs an API key: set the environment variable DEEPSEEK_API_KEY"
        );
        let found = config
            .resolve("deepseek", Some("deepseek-reasoner"), None, &|_| {
                Some("k".into())
            })
            .unwrap();
        assert!(found.reasoning_content);
        assert_eq!(found.info.context_window, Some(131_072));
        let generic = config
            .resolve("openai-compatible", Some("m"), None, &|_| None)
            .unwrap_err();
        assert_eq!(generic.code(), "provider_incomplete");
        assert!(
            toml::from_str::<Config>("[providers.x]\nbogus = 1").is_err(),
            "unknown fields are refused"
        );
    }

    #[test]
    fn an_unusable_base_url_is_a_startup_error() {
        let config = Config::builtin();
        for url in ["not a url", "ftp://files.example.com", "http://"] {
            let error = config
                .resolve("openai-compatible", Some("m"), Some(url), &|_| None)
                .unwrap_err();
            assert_eq!(error.code(), "invalid_base_url", "{url}");
            assert!(error.to_string().contains(&format!("`{url}`")), "{error}");
        }
        let error = config
            .resolve("openai-compatible", Some("m"), Some("not a url"), &|_| None)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "provider `openai-compatible` has an unusable base URL `not a url`: it is not a URL \
             (it contains whitespace or a control character); expected e.g. `https://api.example.com/v1`"
        );
        let mut bad = Config::default();
        bad.providers.insert(
            "local".into(),
            toml::from_str(
                "api = \"openai-chat\"\nbase_url = \"localhost:8080\"\ndefault_model = \"m\"",
            )
            .unwrap(),
        );
        let error = bad.resolve("local", None, None, &|_| None).unwrap_err();
        assert!(matches!(
            error,
            ConfigError::InvalidBaseUrl {
                problem: BaseUrlError::NotAUrl { .. },
                ..
            }
        ));
        let fine = config.resolve(
            "openai-compatible",
            Some("m"),
            Some("http://127.0.0.1:8080/v1"),
            &|_| None,
        );
        assert!(fine.is_ok(), "{fine:?}");
    }

    #[test]
    fn an_apis_name_is_the_one_config_toml_uses() {
        for api in [Api::OpenaiChat, Api::Anthropic, Api::OpenaiResponses] {
            let serialized = serde_json::to_value(api).unwrap();
            assert_eq!(serialized, api.as_str());
        }
    }

    #[test]
    fn aliases_name_catalog_models_and_user_files_add_their_own() {
        let mut config = Config::builtin();
        let key = |_: &str| Some("k".to_owned());
        let opus = config
            .resolve("anthropic", Some("opus"), None, &key)
            .unwrap();
        assert_eq!(opus.model, "claude-opus-4-1");
        assert!(opus.in_catalog);
        assert_eq!(opus.info.context_window, Some(200_000));
        let reasoner = config
            .resolve("deepseek", Some("reasoner"), None, &key)
            .unwrap();
        assert_eq!(reasoner.model, "deepseek-reasoner");
        let unknown = config
            .resolve("deepseek", Some("deepseek-v9"), None, &key)
            .unwrap();
        assert_eq!(unknown.model, "deepseek-v9");
        assert!(!unknown.in_catalog);
        // A file adds aliases (also as a default model) and the host keys
        // beside `[providers]` are left to the host.
        let table: toml::Table = toml::from_str(
            r#"
            provider = "local"
            model = "coder"
            [providers.local]
            api = "openai-chat"
            base_url = "http://127.0.0.1:8080/v1"
            default_model = "coder"
            [providers.local.aliases]
            coder = "qwen2.5-coder"
            [providers.local.models."qwen2.5-coder"]
            context_window = 32768
            "#,
        )
        .unwrap();
        config.merge(Config::from_table(&table, "config.toml").unwrap());
        let local = config.resolve("local", None, None, &|_| None).unwrap();
        assert_eq!(local.model, "qwen2.5-coder");
        assert!(local.in_catalog);
        // A model id wins over an alias of the same name.
        let mut shadow = Config::builtin();
        let provider = shadow.providers.get_mut("deepseek").unwrap();
        provider
            .aliases
            .insert("deepseek-chat".into(), "deepseek-reasoner".into());
        assert_eq!(provider.model_id("deepseek-chat"), "deepseek-chat");
        let bad: toml::Table = toml::from_str("[providers.x]\nbogus = 1").unwrap();
        let error = Config::from_table(&bad, "c.toml").unwrap_err();
        assert_eq!(error.code(), "config_invalid");
        assert!(error.to_string().contains("bogus"), "{error}");
    }

    #[test]
    fn waits_come_from_the_file_with_documented_defaults_and_ranges() {
        let mut config = Config::builtin();
        let defaults = config
            .resolve("deepseek", None, None, &|_| Some("k".into()))
            .unwrap()
            .waits;
        assert_eq!(defaults, Waits::default());
        assert_eq!(
            (
                defaults.connect,
                defaults.first_byte,
                defaults.idle,
                defaults.max_retries,
                defaults.max_retry_wait
            ),
            (
                Duration::from_secs(30),
                Duration::from_secs(300),
                Duration::from_secs(120),
                3,
                Duration::from_secs(300)
            )
        );
        let table: toml::Table = toml::from_str(
            r#"
            [providers.local]
            api = "openai-chat"
            base_url = "http://127.0.0.1:8080/v1"
            default_model = "slow"
            connect_timeout_sec = 5
            first_byte_timeout_sec = 1800
            idle_timeout_sec = 600
            max_retries = 0
            max_retry_wait_sec = 900
            "#,
        )
        .unwrap();
        config.merge(Config::from_table(&table, "config.toml").unwrap());
        let waits = config
            .resolve("local", None, None, &|_| None)
            .unwrap()
            .waits;
        assert_eq!(waits.connect, Duration::from_secs(5));
        assert_eq!(waits.first_byte, Duration::from_secs(1800));
        assert_eq!(waits.idle, Duration::from_secs(600));
        let policy = waits.retry_policy();
        assert_eq!(policy.max_attempts, 1, "no retries");
        assert_eq!(policy.max_wait, Duration::from_secs(900));
        for (key, value, problem) in [
            (
                "idle_timeout_sec",
                "0",
                "0 is not a number of seconds from 1 to 86400",
            ),
            (
                "first_byte_timeout_sec",
                "86401",
                "86401 is not a number of seconds from 1 to 86400",
            ),
            ("max_retries", "101", "101 is more than 100"),
        ] {
            let table: toml::Table = toml::from_str(&format!(
                "[providers.local]\napi = \"openai-chat\"\nbase_url = \"http://127.0.0.1:1\"\n\
                 default_model = \"m\"\n{key} = {value}"
            ))
            .unwrap();
            let mut bad = Config::default();
            bad.merge(Config::from_table(&table, "config.toml").unwrap());
            let error = bad.resolve("local", None, None, &|_| None).unwrap_err();
            assert_eq!(error.code(), "config_invalid");
            assert_eq!(
                error.to_string(),
                format!("provider `local` has an invalid `{key}`: {problem}")
            );
        }
        let negative: toml::Table =
            toml::from_str("[providers.local]\nidle_timeout_sec = -1").unwrap();
        assert!(Config::from_table(&negative, "c.toml").is_err());
    }

    #[test]
    fn cost_uses_the_price_of_each_bucket() {
        let info = Config::builtin().providers["anthropic"].models["claude-sonnet-4-5"];
        let usage = {
            let mut usage = keel_protocol::Usage::default();
            usage.input_tokens = 1_000_000;
            usage.output_tokens = 100_000;
            usage.cache_read_tokens = 1_000_000;
            usage.cache_write_tokens = 0;
            usage.cost_usd = None;
            usage
        };
        let cost = info.cost(&usage).unwrap();
        assert!((cost - (3.0 + 1.5 + 0.3)).abs() < 1e-9, "{cost}");
        assert_eq!(ModelInfo::default().cost(&usage), None);
    }
}
