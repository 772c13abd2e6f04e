//! `-c key=value` overrides: a dotted TOML key and a TOML value, merged
//! into the user's configuration before it is read.
//!
//! The value is parsed as TOML (`-c tools='["read","bash"]'`,
//! `-c providers.local.models.m.context_window=32768`); text that is not a
//! TOML value on one line is taken as a string (`-c model=sonnet`,
//! `-c providers.local.base_url=http://127.0.0.1:8080/v1`), so the common
//! case needs no quoting. A value never spans lines, so one override sets
//! one key (whose value may be an inline table).

use crate::HostError;

/// Parses every override into one table (later ones win).
pub(crate) fn parse_all(overrides: &[String]) -> Result<toml::Table, HostError> {
    let mut all = toml::Table::new();
    for text in overrides {
        merge(&mut all, parse(text)?);
    }
    Ok(all)
}

/// One `KEY=VALUE` as a table holding that one key.
fn parse(text: &str) -> Result<toml::Table, HostError> {
    let refused = |why: String| HostError::Override {
        text: text.to_owned(),
        why,
    };
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| refused("expected KEY=VALUE".into()))?;
    let (key, value) = (key.trim(), value.trim());
    if key.is_empty() {
        return Err(refused("the key is empty".into()));
    }
    if key.contains(['\n', '\r', '=']) {
        return Err(refused("the key is not a TOML key".into()));
    }
    let as_toml = (!value.contains(['\n', '\r']))
        .then(|| toml::from_str::<toml::Table>(&format!("{key} = {value}")).ok())
        .flatten();
    let table = match as_toml {
        Some(table) => table,
        None => {
            // Not a TOML value: the text as a string (JSON's string escapes
            // are valid in a TOML basic string).
            let quoted =
                serde_json::to_string(value).map_err(|error| refused(error.to_string()))?;
            toml::from_str(&format!("{key} = {quoted}")).map_err(|error| {
                refused(format!("`{key}` is not a TOML key: {}", error.message()))
            })?
        }
    };
    Ok(table)
}

/// Merges `over` into `base`: tables key by key, anything else replaced.
pub(crate) fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(ours)), toml::Value::Table(theirs)) => merge(ours, theirs),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn values_are_toml_or_else_strings_and_keys_may_be_dotted() {
        let table = parse_all(&[
            "model=sonnet".into(),
            "mode = \"plan\"".into(),
            "tools=[\"read\", \"bash\"]".into(),
            "providers.local.base_url=http://127.0.0.1:8080/v1".into(),
            "providers.local.models.\"qwen2.5\".context_window=32768".into(),
            "providers.local.api=openai-chat".into(),
        ])
        .unwrap();
        assert_eq!(table["model"].as_str(), Some("sonnet"));
        assert_eq!(table["mode"].as_str(), Some("plan"));
        assert_eq!(table["tools"].as_array().unwrap().len(), 2);
        let local = table["providers"]["local"].as_table().unwrap();
        assert_eq!(local["base_url"].as_str(), Some("http://127.0.0.1:8080/v1"));
        assert_eq!(local["api"].as_str(), Some("openai-chat"));
        assert_eq!(
            local["models"]["qwen2.5"]["context_window"].as_integer(),
            Some(32768)
        );
    }

    #[test]
    fn malformed_overrides_are_refused() {
        for text in ["model", "=x", "a b = 1", "a.=1", "[x]=1"] {
            let error = parse(text).unwrap_err();
            assert_eq!(error.code(), "config_override", "{text}");
        }
        // A value with a newline is a string, not a second key.
        let table = parse("model = a\nmode = \"full\"").unwrap();
        assert_eq!(table["model"].as_str(), Some("a\nmode = \"full\""));
    }

    #[test]
    fn merging_keeps_sibling_keys() {
        let mut base: toml::Table =
            toml::from_str("[providers.local]\napi = \"openai-chat\"\nbase_url = \"http://a\"")
                .unwrap();
        merge(
            &mut base,
            parse("providers.local.base_url=http://b").unwrap(),
        );
        let local = base["providers"]["local"].as_table().unwrap();
        assert_eq!(local["api"].as_str(), Some("openai-chat"));
        assert_eq!(local["base_url"].as_str(), Some("http://b"));
    }
}
