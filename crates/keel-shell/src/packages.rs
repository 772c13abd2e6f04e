//! Package managers and other tools that reach the network for some
//! subcommands only (`pip install`, `cargo fetch`, `docker pull`…).
//!
//! The subcommand is the first operand after the global options; options
//! known to take a separate value are skipped with their value. When an
//! option the table does not know precedes the first operand, that operand
//! may be the option's value, so the operand after it is considered too
//! (`npm -w pkg install`). An option that keeps the tool offline
//! (`pip --no-index`, `cargo --offline`) overrides the subcommand.

use super::expand::Field;
use super::frame::Frame;
use super::tools::network_subcommand;
use super::walk::Walker;

/// A program that reaches the network for some subcommands.
#[derive(Debug)]
struct Subcommands {
    /// Its names.
    names: &'static [&'static str],
    /// Options before the subcommand that take a separate value.
    values: &'static [&'static str],
    /// Subcommands that reach the network.
    network: &'static [&'static str],
    /// Subcommands whose own subcommand decides (`go mod download`).
    nested: &'static [(&'static str, &'static [&'static str])],
    /// Options that keep it offline.
    offline: &'static [&'static str],
    /// Whether it reaches the network with no subcommand (`yarn`).
    bare: bool,
}

/// Package managers, container and language tools.
const SUBCOMMANDS: [Subcommands; 13] = [
    Subcommands {
        names: &["pip", "pip3"],
        values: &[
            "--proxy",
            "--retries",
            "--timeout",
            "--exists-action",
            "--trusted-host",
            "--cert",
            "--client-cert",
            "--cache-dir",
            "--log",
            "--log-file",
            "--python",
            "--use-feature",
            "--use-deprecated",
            "--keyring-provider",
            "--root-user-action",
        ],
        network: &["install", "download", "wheel", "index", "search"],
        nested: &[],
        offline: &["--no-index"],
        bare: false,
    },
    Subcommands {
        names: &["pipx"],
        values: &[],
        network: &[
            "install",
            "install-all",
            "run",
            "upgrade",
            "upgrade-all",
            "reinstall",
            "reinstall-all",
            "inject",
        ],
        nested: &[],
        offline: &[],
        bare: false,
    },
    Subcommands {
        names: &["uv"],
        values: &[
            "--directory",
            "--project",
            "--cache-dir",
            "--config-file",
            "--python",
            "-p",
            "--color",
            "--index-url",
            "--default-index",
            "--index",
            "--extra-index-url",
        ],
        network: &["add", "remove", "sync", "lock", "run", "export"],
        nested: &[
            ("pip", &["install", "sync", "compile", "download"]),
            ("tool", &["install", "run", "upgrade"]),
            ("python", &["install"]),
            ("self", &["update"]),
        ],
        offline: &["--offline"],
        bare: false,
    },
    Subcommands {
        names: &["poetry"],
        values: &["--directory", "-C", "--project", "-P"],
        network: &[
            "install", "add", "remove", "update", "lock", "sync", "publish", "search", "self",
        ],
        nested: &[],
        offline: &[],
        bare: false,
    },
    Subcommands {
        names: &["conda", "mamba", "micromamba"],
        values: &[],
        network: &["install", "create", "update", "upgrade", "search"],
        nested: &[("env", &["create", "update"])],
        offline: &["--offline"],
        bare: false,
    },
    Subcommands {
        names: &["npm", "pnpm", "bun"],
        values: &[
            "--prefix",
            "-C",
            "--dir",
            "--cwd",
            "--filter",
            "-F",
            "--workspace",
        ],
        network: NODE_NETWORK,
        nested: &[],
        offline: &["--offline"],
        bare: false,
    },
    Subcommands {
        names: &["yarn"],
        values: &["--cwd"],
        network: NODE_NETWORK,
        nested: &[],
        offline: &["--offline"],
        bare: true,
    },
    Subcommands {
        names: &["cargo"],
        values: &["-Z", "--config", "-C", "--color", "--explain"],
        network: &[
            "install",
            "fetch",
            "publish",
            "update",
            "search",
            "login",
            "logout",
            "add",
            "owner",
            "yank",
            "info",
            "vendor",
            "generate-lockfile",
        ],
        nested: &[],
        offline: &["--offline", "--frozen"],
        bare: false,
    },
    Subcommands {
        names: &["rustup"],
        values: &[],
        network: &["install", "update", "default", "init"],
        nested: &[
            ("toolchain", &["install", "add", "update"]),
            ("component", &["add"]),
            ("target", &["add"]),
            ("self", &["update"]),
        ],
        offline: &[],
        bare: false,
    },
    Subcommands {
        names: &["go"],
        values: &["-C"],
        network: &["get", "install"],
        nested: &[("mod", &["download", "tidy"])],
        offline: &[],
        bare: false,
    },
    Subcommands {
        names: &["gem", "bundle", "bundler"],
        values: &[],
        network: &[
            "install", "update", "fetch", "push", "search", "add", "outdated", "lock",
        ],
        nested: &[],
        offline: &["--local"],
        bare: false,
    },
    Subcommands {
        names: &[
            "apt", "apt-get", "aptitude", "dnf", "yum", "apk", "brew", "zypper", "port", "snap",
            "flatpak", "pkg",
        ],
        values: &[],
        network: &[
            "install",
            "update",
            "upgrade",
            "dist-upgrade",
            "full-upgrade",
            "reinstall",
            "download",
            "source",
            "add",
            "fetch",
            "refresh",
            "tap",
            "makecache",
        ],
        nested: &[],
        offline: &[],
        bare: false,
    },
    Subcommands {
        names: &["docker", "podman", "nerdctl", "docker-compose"],
        values: &[
            "-H",
            "--host",
            "--context",
            "-c",
            "--config",
            "-l",
            "--log-level",
            "-f",
            "--file",
            "-p",
            "--project-name",
        ],
        network: &[
            "pull", "push", "login", "run", "build", "create", "search", "up",
        ],
        nested: &[
            ("compose", &["up", "pull", "build", "push", "run", "create"]),
            ("buildx", &["build", "bake"]),
            ("image", &["pull", "push", "build"]),
            ("container", &["run", "create"]),
            ("manifest", &["push", "inspect"]),
        ],
        offline: &[],
        bare: false,
    },
];

/// Node package manager subcommands that reach the registry.
const NODE_NETWORK: &[&str] = &[
    "install",
    "i",
    "ci",
    "add",
    "publish",
    "update",
    "up",
    "upgrade",
    "dlx",
    "exec",
    "x",
    "create",
    "audit",
    "outdated",
    "view",
    "info",
    "show",
    "search",
    "login",
    "adduser",
    "whoami",
    "unpublish",
    "deprecate",
    "dist-tag",
    "owner",
    "ping",
    "install-test",
    "it",
];

impl Walker<'_> {
    /// Handles `name` if it is a package manager; `false` otherwise.
    pub(super) fn package_tool(&mut self, name: &str, args: &[Field], frame: &Frame) -> bool {
        match SUBCOMMANDS.iter().find(|spec| spec.names.contains(&name)) {
            Some(spec) => {
                self.subcommand_tool(name, spec, args, frame);
                true
            }
            None => false,
        }
    }
    /// A program that reaches the network for some subcommands.
    fn subcommand_tool(&mut self, name: &str, spec: &Subcommands, args: &[Field], frame: &Frame) {
        match subcommand_candidates(spec, args) {
            None => self.out.unknown_kind(format!(
                "cannot tell what `{name}` does: an argument cannot be resolved statically"
            )),
            Some(candidates) => {
                let offline = args
                    .iter()
                    .filter_map(Field::known)
                    .any(|text| spec.offline.contains(&text));
                let remote_daemon = args
                    .iter()
                    .filter_map(Field::known)
                    .any(|text| matches!(text, "-H" | "--host") || text.starts_with("--host="));
                let found = candidates.iter().find_map(|&index| {
                    let sub = args.get(index)?.known()?;
                    let operands = args.get(index + 1..).unwrap_or_default();
                    network_subcommand(spec.network, spec.nested, sub, operands)
                });
                let bare = spec.bare && candidates.is_empty();
                if remote_daemon && spec.names.contains(&"docker") {
                    self.out
                        .network(format!("`{name} --host` talks to a remote daemon"));
                } else if !offline && (found.is_some() || bare) {
                    let what = found.map_or_else(|| name.to_owned(), |sub| format!("{name} {sub}"));
                    self.out.network(format!("`{what}` reaches the network"));
                }
            }
        }
        self.check_fields(args, frame);
    }
}
/// The indexes that may hold the subcommand; `None` when an earlier word is unknown.
fn subcommand_candidates(spec: &Subcommands, args: &[Field]) -> Option<Vec<usize>> {
    let mut found = Vec::new();
    let mut ambiguous = false;
    let mut index = 0;
    while let Some(arg) = args.get(index) {
        let text = arg.known()?;
        if text == "--" {
            break;
        }
        if text.starts_with('+') {
            index += 1;
            continue;
        }
        if text.len() > 1 && text.starts_with('-') {
            let separate = spec.values.contains(&text);
            ambiguous = !separate && !text.contains('=');
            index += if separate { 2 } else { 1 };
            continue;
        }
        found.push(index);
        if !ambiguous || found.len() == 2 {
            break;
        }
        ambiguous = false;
        index += 1;
    }
    Some(found)
}
