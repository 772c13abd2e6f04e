//! Keel's default system prompt, kept as text in `system_prompt.md`.
//!
//! The prompt is written for a coding agent: how to use each built-in tool
//! well, read before editing, small verified changes, run the tests, never
//! invent results, be brief. It lives in its own file so that it is read and
//! reviewed as prose, not as a Rust string; `default_prompt` only drops the
//! guidance for built-in tools the kernel does not offer and names the
//! other tools. Hosts replace it (`AgentKernelBuilder::system_prompt`) or
//! extend it (`AgentKernelBuilder::append_system_prompt`). It stays under
//! ~1,500 tokens (a test counts it).

/// The prompt text, with a guidance line for every built-in tool.
const TEXT: &str = include_str!("system_prompt.md");

/// The built-in tools whose guidance lines the prompt holds.
const BUILT_IN: &[&str] = &["read", "edit", "write", "bash", "grep", "find", "ls"];

/// The default system prompt for a kernel offering `tools`.
pub(crate) fn default_prompt(tools: &[String]) -> String {
    let mut out = String::with_capacity(TEXT.len() + 128);
    for line in TEXT.lines() {
        if let Some(name) = guidance_for(line)
            && !tools.iter().any(|tool| tool == name)
        {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    let others: Vec<&str> = tools
        .iter()
        .map(String::as_str)
        .filter(|tool| !BUILT_IN.contains(tool))
        .collect();
    if !others.is_empty() {
        out = out.replacen(
            "\n# Answering",
            &format!(
                "- Also available: {}. Their descriptions say what they do and when to use them.\n\n# Answering",
                others.join(", ")
            ),
            1,
        );
    }
    out.trim_end().to_owned()
}

/// The built-in tool a guidance line (`` - `name`: … ``) is about.
fn guidance_for(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("- `")?;
    let (name, after) = rest.split_once('`')?;
    (after.starts_with(':') && BUILT_IN.contains(&name)).then_some(name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn guidance_appears_only_for_offered_tools() {
        let prompt = default_prompt(&names(&["read", "bash"]));
        assert!(prompt.contains("- `read`:"));
        assert!(prompt.contains("- `bash`:"));
        assert!(!prompt.contains("- `edit`:"));
        assert!(!prompt.contains("- `grep`:"));
        assert!(!prompt.contains("Also available"));
    }

    #[test]
    fn other_tools_are_named() {
        let prompt = default_prompt(&names(&["read", "deploy", "lint"]));
        assert!(prompt.contains("Also available: deploy, lint."), "{prompt}");
        let answering = prompt.find("# Answering").unwrap_or(0);
        assert!(prompt.find("Also available").unwrap_or(usize::MAX) < answering);
    }

    #[test]
    fn the_prompt_with_every_tool_stays_under_1500_tokens() {
        let prompt = default_prompt(&names(BUILT_IN));
        let bpe = tiktoken_rs::o200k_base().unwrap();
        let tokens = bpe.encode_ordinary(&prompt).len();
        assert!(
            tokens < 1_500,
            "the default system prompt is {tokens} tokens"
        );
        assert!(tokens > 500, "the prompt lost its text: {tokens} tokens");
    }
}
