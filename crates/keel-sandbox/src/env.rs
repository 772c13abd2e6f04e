//! Scrubbed environments for child processes.
//!
//! Commands the model runs must not inherit the host's credentials. A child
//! starts from an empty environment and receives only the variables of the
//! kernel's own environment whose names look harmless: any name that contains
//! (case-insensitively) one of [`SECRET_MARKERS`] is dropped unless the host
//! named it explicitly in the passthrough list. Variables whose name or value
//! is not valid UTF-8 are dropped too, and so are the variables that make a
//! shell run code the command text does not show ([`SHELL_STARTUP_VARIABLES`],
//! exported `BASH_FUNC_*` functions), which the shell analysis could not see.

/// Substrings that mark a variable name as secret (compared uppercased).
pub const SECRET_MARKERS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "AUTH",
    "CREDENTIAL",
    "COOKIE",
    "SESSION",
];

/// Variables that make a shell run code or resolve paths that the command
/// text does not show, so the shell analysis could not see them.
pub const SHELL_STARTUP_VARIABLES: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "CDPATH",
    "SHELLOPTS",
    "BASHOPTS",
    "GLOBIGNORE",
    "PROMPT_COMMAND",
    "PS4",
];

/// Whether a child must not inherit this variable although it holds no
/// secret: shell start-up files, options and exported functions.
fn changes_the_shell(name: &str) -> bool {
    SHELL_STARTUP_VARIABLES.contains(&name) || name.starts_with("BASH_FUNC_")
}

/// Whether a variable with this name may hold a secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_uppercase();
    SECRET_MARKERS.iter().any(|marker| upper.contains(marker))
}

/// Keeps the variables that are not secret or are named in `passthrough`.
pub fn scrub(
    vars: impl IntoIterator<Item = (String, String)>,
    passthrough: &[String],
) -> Vec<(String, String)> {
    vars.into_iter()
        .filter(|(name, _)| !is_secret_name(name) || passthrough.contains(name))
        .filter(|(name, _)| !changes_the_shell(name))
        .collect()
}

/// The current process environment, scrubbed for a child process.
pub fn scrubbed_env(passthrough: &[String]) -> Vec<(String, String)> {
    let vars = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)));
    scrub(vars, passthrough)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        (name.to_owned(), "value".to_owned())
    }

    #[test]
    fn secret_names_are_recognised() {
        for name in [
            "OPENAI_API_KEY",
            "github_token",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "MYSQL_PASSWD",
            "HTTP_AUTHORIZATION",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "Session_Cookie",
            "XDG_SESSION_ID",
        ] {
            assert!(is_secret_name(name), "{name} should be secret");
        }
        for name in ["PATH", "HOME", "LANG", "TERM", "CARGO_HOME"] {
            assert!(!is_secret_name(name), "{name} should not be secret");
        }
    }

    #[test]
    fn scrub_drops_secrets_unless_passed_through() {
        let vars = vec![
            pair("PATH"),
            pair("KEEL_TEST_API_KEY"),
            pair("GH_TOKEN"),
            pair("HOME"),
        ];
        let kept = scrub(vars, &["GH_TOKEN".to_owned()]);
        let names: Vec<&str> = kept.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["PATH", "GH_TOKEN", "HOME"]);
    }

    #[test]
    fn scrubbed_env_keeps_no_secret() {
        let kept = scrubbed_env(&[]);
        assert!(kept.iter().all(|(name, _)| !is_secret_name(name)));
    }
}
