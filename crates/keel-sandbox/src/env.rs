//! The environment of child processes, built from an allowlist out of the
//! host's environment snapshot ([`HostEnv`]).
//!
//! This library never reads the process environment: the host captures it
//! once ([`HostEnv::new`], keel-host from `std::env::vars_os`; the type is
//! the Tool API's, `keel_tool_api::env`, re-exported here) and hands it
//! over in [`SandboxConfig::host_env`](crate::SandboxConfig::host_env). An
//! empty snapshot (the default, for a kernel built without keel-host) means
//! commands see only Keel's fixed defaults: [`DEFAULT_PATH`] and, in the
//! sandbox, `TMPDIR=/tmp` — nothing of the process that runs the library.
//!
//! Commands the model runs must not inherit the host's credentials, and a
//! secret's name need not look secret (`DATABASE_URL` holding a password,
//! `GITHUB_PAT`). So a child starts from an empty environment and receives
//! only [`ALLOWED`] variables (the locale ones by their exact names, never
//! by a prefix: `LC_API_TOKEN` is not a locale) and the names the host
//! listed; every other variable of the kernel's environment is dropped. Approved network
//! or outside access does not widen the list. Variables whose name or value
//! is not valid UTF-8 are dropped too, and so are the variables that make a
//! shell run code the command text does not show
//! ([`SHELL_STARTUP_VARIABLES`], exported `BASH_FUNC_*` functions), even when
//! listed, since the shell analysis could not see them.

pub use keel_tool_api::env::{DEFAULT_PATH, HostEnv};

/// Variables every child may receive: these names exactly.
pub const ALLOWED: &[&str] = &[
    "PATH",
    "HOME",
    "TERM",
    "USER",
    "SHELL",
    "TMPDIR",
    "PWD",
    // The locale (POSIX and glibc's categories), by exact name.
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_COLLATE",
    "LC_MESSAGES",
    "LC_NUMERIC",
    "LC_TIME",
    "LC_MONETARY",
    "LC_PAPER",
    "LC_NAME",
    "LC_ADDRESS",
    "LC_TELEPHONE",
    "LC_MEASUREMENT",
    "LC_IDENTIFICATION",
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

/// Whether a child may receive the variable `name`, given the host's `listed` names.
pub fn is_allowed(name: &str, listed: &[String]) -> bool {
    let allowed = ALLOWED.contains(&name) || listed.iter().any(|listed| listed == name);
    allowed && !changes_the_shell(name)
}

/// Keeps the allowed variables of `vars`.
pub fn filter(
    vars: impl IntoIterator<Item = (String, String)>,
    listed: &[String],
) -> Vec<(String, String)> {
    vars.into_iter()
        .filter(|(name, _)| is_allowed(name, listed))
        .collect()
}

/// The environment a child starts from: the allowed part of the host's
/// snapshot `host`, and `PATH` set to [`DEFAULT_PATH`] when the snapshot
/// has none (or none that is valid UTF-8).
pub fn child_env(host: &HostEnv, listed: &[String]) -> Vec<(String, String)> {
    let vars = host
        .vars()
        .filter_map(|(name, value)| Some((name.to_str()?.to_owned(), value.to_str()?.to_owned())));
    let mut env = filter(vars, listed);
    if !env.iter().any(|(name, _)| name == "PATH") {
        env.push(("PATH".to_owned(), DEFAULT_PATH.to_owned()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        (name.to_owned(), "value".to_owned())
    }

    #[test]
    fn only_the_allowlist_and_listed_names_pass() {
        let vars = [
            "PATH",
            "HOME",
            "LC_ALL",
            "LC_API_TOKEN",
            "LC_",
            "LANGUAGE",
            "DATABASE_URL",
            "GITHUB_PAT",
            "OPENAI_API_KEY",
            "CARGO_HOME",
            "BASH_ENV",
            "BASH_FUNC_x%%",
        ]
        .map(pair);
        let kept = filter(vars, &["CARGO_HOME".to_owned(), "BASH_ENV".to_owned()]);
        let names: Vec<&str> = kept.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["PATH", "HOME", "LC_ALL", "LANGUAGE", "CARGO_HOME"]);
    }

    #[test]
    fn the_snapshot_is_filtered() {
        let host = HostEnv::new([
            ("PATH", "/opt/bin"),
            ("HOME", "/home/u"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("CARGO_HOME", "/c"),
        ]);
        assert_eq!(
            child_env(&host, &["CARGO_HOME".to_owned()]),
            [
                ("PATH".to_owned(), "/opt/bin".to_owned()),
                ("HOME".to_owned(), "/home/u".to_owned()),
                ("CARGO_HOME".to_owned(), "/c".to_owned()),
            ]
        );
        assert!(!format!("{host:?}").contains("sk-secret"));
    }

    #[test]
    fn an_empty_snapshot_gives_only_the_fixed_defaults() {
        // Whatever this test process's environment holds.
        assert_eq!(
            child_env(&HostEnv::empty(), &["HOME".to_owned()]),
            [("PATH".to_owned(), DEFAULT_PATH.to_owned())]
        );
        assert_eq!(HostEnv::empty().search_path(), DEFAULT_PATH);
    }
}
