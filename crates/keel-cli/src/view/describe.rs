//! Plain words for what the view shows: a call as its tool and the command
//! or path it acts on (never its arguments as JSON), token counts, costs
//! and durations.

use std::time::Duration;

use serde_json::Value;

/// A call in words: `bash cargo test`, `read src/main.rs`, `grep TODO in
/// src`; other tools show their string arguments as `key=value`.
pub fn call_title(tool_name: &str, arguments: &Value) -> String {
    let text = |key: &str| arguments.get(key).and_then(Value::as_str);
    let target = match (text("command"), text("path"), text("pattern")) {
        (Some(command), _, _) => first_line(command),
        (None, Some(path), None) => path.to_owned(),
        (None, path, Some(pattern)) => match path {
            Some(path) => format!("{pattern} in {path}"),
            None => pattern.to_owned(),
        },
        (None, None, None) => key_values(arguments),
    };
    if target.is_empty() {
        tool_name.to_owned()
    } else {
        format!("{tool_name} {target}")
    }
}

/// The first line of `text`, marked when more follow.
pub fn first_line(text: &str) -> String {
    let mut lines = text.trim().lines();
    let first = lines.next().unwrap_or_default().to_owned();
    if lines.next().is_some() {
        format!("{first} …")
    } else {
        first
    }
}

/// `key=value` for each scalar argument, in the order given.
fn key_values(arguments: &Value) -> String {
    let Some(object) = arguments.as_object() else {
        return String::new();
    };
    object
        .iter()
        .filter_map(|(key, value)| match value {
            Value::String(text) => Some(format!("{key}={}", first_line(text))),
            Value::Number(number) => Some(format!("{key}={number}")),
            Value::Bool(flag) => Some(format!("{key}={flag}")),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// At most `max` characters of `text`, cut with `…`.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max.saturating_sub(1)) {
        Some((cut, _)) if text.chars().count() > max => format!("{}…", &text[..cut]),
        _ => text.to_owned(),
    }
}

/// `850`, `12.3k`, `4.5M`.
pub fn tokens(count: u64) -> String {
    match count {
        0..1_000 => count.to_string(),
        1_000..1_000_000 => format!("{:.1}k", count as f64 / 1_000.0),
        _ => format!("{:.1}M", count as f64 / 1_000_000.0),
    }
}

/// `512 B`, `1.2 KiB`, `3.4 MiB`.
pub fn bytes(count: u64) -> String {
    match count {
        0..1_024 => format!("{count} B"),
        1_024..1_048_576 => format!("{:.1} KiB", count as f64 / 1_024.0),
        _ => format!("{:.1} MiB", count as f64 / 1_048_576.0),
    }
}

/// `$0.0123`, or `$1.23` from a dollar up.
pub fn cost(usd: f64) -> String {
    if usd >= 1.0 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.4}")
    }
}

/// `0.4s`, `12s`, `3m05s`.
pub fn duration(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    if seconds < 10.0 {
        format!("{seconds:.1}s")
    } else if seconds < 60.0 {
        format!("{}s", elapsed.as_secs())
    } else {
        format!("{}m{:02}s", elapsed.as_secs() / 60, elapsed.as_secs() % 60)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn calls_show_their_command_or_path_not_json() {
        assert_eq!(
            call_title(
                "bash",
                &json!({"command": "cargo test\necho done", "timeout": 5})
            ),
            "bash cargo test …"
        );
        assert_eq!(
            call_title("edit", &json!({"path": "src/A.rs", "edits": []})),
            "edit src/A.rs"
        );
        assert_eq!(
            call_title("grep", &json!({"pattern": "TODO", "path": "src"})),
            "grep TODO in src"
        );
        assert_eq!(
            call_title("probe", &json!({"kind": "Read", "n": 2, "deep": {"x": 1}})),
            "probe kind=Read n=2"
        );
        assert_eq!(call_title("ls", &json!({})), "ls");
    }

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(tokens(999), "999");
        assert_eq!(tokens(12_345), "12.3k");
        assert_eq!(cost(0.012345), "$0.0123");
        assert_eq!(cost(2.5), "$2.50");
        assert_eq!(duration(Duration::from_millis(3_040)), "3.0s");
        assert_eq!(duration(Duration::from_secs(185)), "3m05s");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
    }
}
