//! What ordinary programs do, for the ones whose arguments matter.
//!
//! - Network tools (`curl`, `ssh`, `kubectl`…) always reach the network.
//! - Package managers and `git` reach it for some subcommands; their global
//!   options are skipped with a table of the ones that take a value, and
//!   when an unknown option might have swallowed the next word, the word
//!   after it is considered too.
//! - `rsync` reaches it when an operand is remote (`host:path`, `::`,
//!   `rsync://`).
//! - `find -exec` runs a command; `grep`, `sed` and `awk` take a pattern or
//!   a program that is not a path (so `grep -r /api src` is not outside).
//!
//! Everything else is an ordinary program whose arguments are checked as
//! paths.

use super::expand::Field;
use super::walk::{Cwds, Frame, Run, Stdin, Walker};

/// Programs that always reach the network.
const NETWORK_TOOLS: [&str; 44] = [
    "curl",
    "wget",
    "ssh",
    "scp",
    "sftp",
    "nc",
    "ncat",
    "netcat",
    "socat",
    "telnet",
    "ftp",
    "ping",
    "ping6",
    "dig",
    "nslookup",
    "host",
    "whois",
    "aria2c",
    "http",
    "https",
    "httpie",
    "xh",
    "kubectl",
    "gh",
    "npx",
    "pnpx",
    "bunx",
    "uvx",
    "lftp",
    "tftp",
    "mosh",
    "nmap",
    "traceroute",
    "tracepath",
    "mtr",
    "ssh-keyscan",
    "ssh-copy-id",
    "lynx",
    "w3m",
    "websocat",
    "wscat",
    "grpcurl",
    "helm",
    "aws",
];

/// Network tools whose first operand is a host.
const HOST_FIRST: [&str; 17] = [
    "ssh",
    "mosh",
    "ping",
    "ping6",
    "dig",
    "nslookup",
    "host",
    "whois",
    "telnet",
    "ftp",
    "nc",
    "ncat",
    "netcat",
    "traceroute",
    "tracepath",
    "mtr",
    "ssh-keyscan",
];

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

/// Programs whose first operand (or `-e` value) is a pattern or program, not a path.
#[derive(Debug)]
struct Scripted {
    /// Its names.
    names: &'static [&'static str],
    /// Short options that take a value.
    values: &'static str,
    /// Long options that take a separate value.
    long_values: &'static [&'static str],
    /// Short options whose value is the pattern or program.
    script: &'static str,
    /// Long options whose value is the pattern or program.
    long_script: &'static [&'static str],
    /// Short and long options that read the pattern or program from a file.
    file: &'static [&'static str],
}

/// `grep`, `rg`, `sed` and `awk`.
const SCRIPTED: [Scripted; 4] = [
    Scripted {
        names: &["grep", "egrep", "fgrep", "zgrep"],
        values: "efmABCdD",
        long_values: &[
            "regexp",
            "file",
            "max-count",
            "after-context",
            "before-context",
            "context",
            "include",
            "exclude",
            "exclude-dir",
            "exclude-from",
            "directories",
            "devices",
            "label",
            "binary-files",
        ],
        script: "e",
        long_script: &["regexp"],
        file: &["f", "file"],
    },
    Scripted {
        names: &["rg"],
        values: "efmABCgtTjMrEd",
        long_values: &[
            "regexp",
            "file",
            "max-count",
            "after-context",
            "before-context",
            "context",
            "glob",
            "iglob",
            "type",
            "type-not",
            "type-add",
            "type-clear",
            "threads",
            "max-columns",
            "replace",
            "encoding",
            "max-depth",
            "max-filesize",
            "sort",
            "sortr",
            "colors",
            "context-separator",
            "field-context-separator",
            "field-match-separator",
            "path-separator",
            "pre",
            "pre-glob",
            "ignore-file",
            "engine",
        ],
        script: "e",
        long_script: &["regexp"],
        file: &["f", "file"],
    },
    Scripted {
        names: &["sed", "gsed"],
        values: "efl",
        long_values: &["expression", "file", "line-length"],
        script: "e",
        long_script: &["expression"],
        file: &["f", "file"],
    },
    Scripted {
        names: &["awk", "gawk", "mawk", "nawk"],
        values: "fvFeiEl",
        long_values: &[
            "file",
            "assign",
            "field-separator",
            "source",
            "include",
            "load",
            "exec",
        ],
        script: "e",
        long_script: &["source"],
        file: &["f", "E", "file", "exec"],
    },
];

/// `find` tests whose value is a pattern, not a path.
const FIND_PATTERNS: [&str; 11] = [
    "-name",
    "-iname",
    "-path",
    "-ipath",
    "-wholename",
    "-iwholename",
    "-regex",
    "-iregex",
    "-lname",
    "-ilname",
    "-printf",
];

/// `find` actions that run a command up to `;` or `+`.
const FIND_EXEC: [&str; 4] = ["-exec", "-execdir", "-ok", "-okdir"];

/// Keys of `git -c` whose value git may run as a command.
const GIT_RUNNING_KEYS: [&str; 14] = [
    "alias.",
    "pager",
    "editor",
    "sshcommand",
    "fsmonitor",
    "hookspath",
    "askpass",
    "program",
    "textconv",
    "command",
    "helper",
    "external",
    "driver",
    "filter.",
];

/// The host of a remote operand (`[user@]host:path`, `host::module`).
fn remote_host(text: &str) -> Option<&str> {
    if text.starts_with(['/', '.', '~']) {
        return None;
    }
    let (host, _) = text.split_once(':')?;
    (!host.is_empty() && !host.contains('/')).then_some(host)
}

/// The index of the first operand, skipping options (`values`: short options with a value).
fn first_operand(args: &[Field], values: &str) -> Option<usize> {
    let mut index = 0;
    while let Some(text) = args.get(index).and_then(Field::known) {
        if text == "--" {
            return (index + 1 < args.len()).then_some(index + 1);
        }
        if text.len() < 2 || !text.starts_with('-') {
            return Some(index);
        }
        let takes_value = text
            .chars()
            .nth(1)
            .is_some_and(|c| values.contains(c) && text.len() == 2);
        index += if takes_value { 2 } else { 1 };
    }
    (index < args.len()).then_some(index)
}

impl Walker<'_> {
    /// An ordinary program.
    pub(super) fn tool(&mut self, name: &str, args: &[Field], frame: &Frame) {
        if matches!(name, "echo" | "printf") {
            // They print their arguments and open nothing; only words that
            // cannot be known statically still count.
            let dynamic = args.iter().filter(|arg| arg.known().is_none());
            self.check_fields(dynamic, frame);
        } else if NETWORK_TOOLS.contains(&name) {
            self.network_tool(name, args, frame);
        } else if name == "git" {
            self.git(args, frame);
        } else if name == "rsync" {
            self.rsync(args, frame);
        } else if name == "find" {
            self.find(args, frame);
        } else if matches!(name, "pacman" | "yay" | "paru") {
            let syncs = args
                .iter()
                .filter_map(Field::known)
                .any(|t| t == "--sync" || (t.starts_with("-S") || t.starts_with("-U")));
            if syncs {
                self.out.network(format!("`{name} -S` reaches the network"));
            }
            self.check_fields(args, frame);
        } else if let Some(spec) = SUBCOMMANDS.iter().find(|s| s.names.contains(&name)) {
            self.subcommand_tool(name, spec, args, frame);
        } else if let Some(spec) = SCRIPTED.iter().find(|s| s.names.contains(&name)) {
            self.scripted(spec, args, frame);
        } else {
            self.check_fields(args, frame);
        }
    }

    /// A program that always reaches the network; hosts are targets, not paths.
    fn network_tool(&mut self, name: &str, args: &[Field], frame: &Frame) {
        self.out.network(format!("`{name}` reaches the network"));
        let values = match name {
            "ssh" | "mosh" => "BbcDEeFIiJLlmOopQRSWw",
            "scp" => "cFiJlOoPS",
            "sftp" => "BbcDFiJloPRSs",
            _ => "",
        };
        let host = HOST_FIRST
            .contains(&name)
            .then(|| first_operand(args, values))
            .flatten();
        let remote_command = matches!(name, "ssh" | "mosh");
        for (index, arg) in args.iter().enumerate() {
            let remote = arg.literal().and_then(remote_host);
            if Some(index) == host || (remote.is_some() && matches!(name, "scp" | "sftp")) {
                self.out.target(remote.unwrap_or(&arg.text));
            } else if !(remote_command && host.is_some_and(|host| index > host)) {
                self.check_arg(arg, frame, false);
            }
        }
    }

    /// `git [global options] subcommand …`.
    fn git(&mut self, args: &[Field], frame: &Frame) {
        let mut index = 0;
        let mut inner = frame.clone();
        while let Some(arg) = args.get(index) {
            let Some(text) = arg.known() else {
                self.out.unknown_kind(
                    "cannot tell what `git` does: an argument cannot be resolved statically",
                );
                break;
            };
            match text {
                "-C" => {
                    if let Some(dir) = args.get(index + 1) {
                        inner.cwds = match dir.literal() {
                            Some(dir) => self.change_dir(&inner.cwds, dir, false),
                            None => Cwds::unknown(),
                        };
                    }
                    index += 2;
                }
                "-c" | "--config-env" => {
                    self.git_config(args.get(index + 1));
                    index += 2;
                }
                "--git-dir" | "--work-tree" | "--namespace" | "--super-prefix" => index += 2,
                _ if text.starts_with("--config-env=") => {
                    self.git_config(Some(&Field::plain(
                        text.trim_start_matches("--config-env="),
                    )));
                    index += 1;
                }
                _ if text.starts_with('-') => index += 1,
                _ => break,
            }
        }
        let (global, rest) = args.split_at(index.min(args.len()));
        self.check_fields(global, frame);
        if let Some((sub, operands)) = rest.split_first() {
            match sub.known() {
                Some(sub) if git_reaches_network(sub, operands) => {
                    self.out.network(format!("`git {sub}` reaches the network"));
                }
                Some(_) => {}
                None => self.out.unknown_kind(
                    "cannot tell what `git` does: the subcommand cannot be resolved statically",
                ),
            }
            self.check_fields(operands, &inner);
        }
    }

    /// `git -c key=value`: unknown when git may run the value.
    fn git_config(&mut self, config: Option<&Field>) {
        let Some(config) = config else {
            return;
        };
        let Some(text) = config.known() else {
            self.out
                .unknown_kind("`git -c` sets a value that cannot be resolved statically");
            return;
        };
        let key = text
            .split('=')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        if GIT_RUNNING_KEYS.iter().any(|runs| key.contains(runs)) {
            self.out
                .unknown_kind(format!("`git -c {key}` can make git run another command"));
        }
    }

    /// `rsync`: network when an operand is remote.
    fn rsync(&mut self, args: &[Field], frame: &Frame) {
        let mut local = Vec::new();
        let mut network = false;
        for arg in args {
            let remote = arg
                .known()
                .filter(|text| !text.starts_with('-'))
                .and_then(|text| match text.starts_with("rsync://") {
                    true => Some(text),
                    false => remote_host(text),
                });
            match remote {
                Some(host) => {
                    network = true;
                    self.out.target(host);
                }
                None if arg.known().is_none() && !arg.text.starts_with('-') => {
                    self.out.unknown_kind(
                        "cannot tell whether `rsync` reaches the network: an operand cannot be resolved statically",
                    );
                    local.push(arg);
                }
                None => local.push(arg),
            }
        }
        if network {
            self.out
                .network("`rsync` to a remote host reaches the network");
        }
        self.check_fields(local, frame);
    }

    /// `find`: patterns are not paths; `-exec` runs a command.
    fn find(&mut self, args: &[Field], frame: &Frame) {
        let mut checked = Vec::new();
        let mut index = 0;
        while let Some(arg) = args.get(index) {
            let text = arg.known();
            if text.is_some_and(|t| FIND_EXEC.contains(&t)) {
                let start = index + 1;
                let end = args
                    .get(start..)
                    .unwrap_or_default()
                    .iter()
                    .position(|a| matches!(a.known(), Some(";" | "+")))
                    .map_or(args.len(), |offset| start + offset);
                let command = args.get(start..end).unwrap_or_default();
                let run = Run {
                    stdin: Stdin::Unknown,
                    skip_functions: true,
                };
                self.run(command, &mut frame.clone(), run);
                index = end + 1;
            } else if text.is_some_and(|t| FIND_PATTERNS.contains(&t)) {
                index += 2;
            } else {
                checked.push(arg);
                index += 1;
            }
        }
        self.check_fields(checked, frame);
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
                    reaches_network(spec, sub, args.get(index + 1..).unwrap_or_default())
                        .then_some(sub)
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

    /// `grep`/`sed`/`awk`: the pattern or program is not a path.
    fn scripted(&mut self, spec: &Scripted, args: &[Field], frame: &Frame) {
        let mut exempt = Vec::new();
        let mut has_script = false;
        let mut first_operand = None;
        let mut operands_only = false;
        let mut index = 0;
        while let Some(arg) = args.get(index) {
            let text = arg.known().unwrap_or("");
            if operands_only || text.len() < 2 || !text.starts_with('-') {
                first_operand = first_operand.or(Some(index));
            } else if text == "--" {
                operands_only = true;
            } else if let Some(long) = text.strip_prefix("--") {
                let (key, inline) = match long.split_once('=') {
                    Some((key, _)) => (key, true),
                    None => (long, false),
                };
                let separate = !inline && spec.long_values.contains(&key);
                if spec.long_script.contains(&key) {
                    exempt.push(if separate { index + 1 } else { index });
                }
                has_script |= spec.long_script.contains(&key) || spec.file.contains(&key);
                index += usize::from(separate);
            } else if let Some((at, c)) = text
                .char_indices()
                .skip(1)
                .find(|(_, c)| spec.values.contains(*c))
            {
                let attached = at + c.len_utf8() < text.len();
                if spec.script.contains(c) {
                    exempt.push(if attached { index } else { index + 1 });
                }
                has_script |= spec.script.contains(c)
                    || spec.file.iter().any(|f| f.starts_with(c) && f.len() == 1);
                index += usize::from(!attached);
            }
            index += 1;
        }
        if !has_script && let Some(first) = first_operand {
            exempt.push(first);
        }
        let checked = args
            .iter()
            .enumerate()
            .filter(|(index, arg)| !(exempt.contains(index) && arg.known().is_some()))
            .map(|(_, arg)| arg);
        self.check_fields(checked, frame);
    }
}

/// Whether `git sub operands…` reaches the network.
fn git_reaches_network(sub: &str, operands: &[Field]) -> bool {
    const NETWORK: [&str; 7] = [
        "clone",
        "fetch",
        "pull",
        "push",
        "ls-remote",
        "send-email",
        "request-pull",
    ];
    const NESTED: [(&str, &[&str]); 4] = [
        ("remote", &["update", "show", "prune", "set-head"]),
        ("submodule", &["update", "add"]),
        ("lfs", &["fetch", "pull", "push", "clone"]),
        ("svn", &["clone", "fetch", "dcommit", "rebase", "init"]),
    ];
    NETWORK.contains(&sub) || nested_match(&NESTED, sub, operands)
}

/// Whether `sub` has nested subcommands and the next operand is a network one.
fn nested_match(nested: &[(&str, &[&str])], sub: &str, operands: &[Field]) -> bool {
    nested.iter().any(|(name, subs)| {
        *name == sub
            && first_operand(operands, "")
                .and_then(|index| operands.get(index)?.known())
                .is_some_and(|next| subs.contains(&next))
    })
}

/// Whether subcommand `sub` of a package manager reaches the network.
fn reaches_network(spec: &Subcommands, sub: &str, operands: &[Field]) -> bool {
    spec.network.contains(&sub) || nested_match(spec.nested, sub, operands)
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
