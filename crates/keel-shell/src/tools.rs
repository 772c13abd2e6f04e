//! What ordinary programs do, for the ones whose arguments matter.
//!
//! - Network tools (`curl`, `ssh`, `kubectl`…) always reach the network.
//! - `git` reaches it for some subcommands (package managers likewise, in
//!   `packages.rs`), and writes the repository for most (`git.rs`).
//! - `rsync` reaches it when an operand is remote (`host:path`, `::`,
//!   `rsync://`).
//! - `find -exec` runs a command; `grep`, `sed` and `awk` take a pattern or
//!   a program that is not a path (so `grep -r /api src` is not outside).
//!
//! Everything else is an ordinary program whose arguments are checked as
//! paths.

use super::expand::Field;
use super::frame::{Frame, Run, Stdin};
use super::walk::Walker;

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

/// Programs that write (or remove) the paths they are given: one inside
/// `.git` or `.keel` makes the command write metadata. `cp`, `ln` and
/// `install` write only their destination.
const WRITERS: [&str; 15] = [
    "cp", "mv", "rm", "ln", "touch", "mkdir", "rmdir", "chmod", "chown", "chgrp", "tee",
    "truncate", "install", "shred", "unlink",
];

/// The operands of a [`WRITERS`] program that it writes.
fn written_operands<'a>(name: &str, args: &'a [Field]) -> Vec<&'a Field> {
    if !matches!(name, "cp" | "ln" | "install") {
        return args.iter().collect();
    }
    // `-t DIR` / `--target-directory=DIR` names the destination; otherwise
    // it is the last operand.
    let mut target = None;
    let mut last = None;
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        match arg.known() {
            Some("-t" | "--target-directory") => target = iter.next(),
            Some(text) if text.starts_with("--target-directory=") => target = Some(arg),
            Some(text) if text.starts_with('-') && text.len() > 1 => {}
            _ => last = Some(arg),
        }
    }
    target.or(last).into_iter().collect()
}

/// The host of a remote operand (`[user@]host:path`, `host::module`).
fn remote_host(text: &str) -> Option<&str> {
    if text.starts_with(['/', '.', '~']) {
        return None;
    }
    let (host, _) = text.split_once(':')?;
    (!host.is_empty() && !host.contains('/')).then_some(host)
}

/// The index of the first operand, skipping options (`values`: short options with a value).
pub(super) fn first_operand(args: &[Field], values: &str) -> Option<usize> {
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
        if self.package_tool(name, args, frame) {
            return;
        }
        match name {
            // They print their arguments and open nothing; only words that
            // cannot be known statically still count.
            "echo" | "printf" => {
                let dynamic = args.iter().filter(|arg| arg.known().is_none());
                self.check_fields(dynamic, frame);
            }
            "git" => self.git(args, frame),
            _ if WRITERS.contains(&name) => {
                self.check_fields(args, frame);
                self.check_written(written_operands(name, args), frame);
            }
            "rsync" => self.rsync(args, frame),
            "find" => self.find(args, frame),
            "pacman" | "yay" | "paru" => {
                let syncs = args
                    .iter()
                    .filter_map(Field::known)
                    .any(|t| t == "--sync" || t.starts_with("-S") || t.starts_with("-U"));
                if syncs {
                    self.out.network(format!("`{name} -S` reaches the network"));
                }
                self.check_fields(args, frame);
            }
            _ if NETWORK_TOOLS.contains(&name) => self.network_tool(name, args, frame),
            _ => match SCRIPTED.iter().find(|spec| spec.names.contains(&name)) {
                Some(spec) => self.scripted(spec, args, frame),
                None => self.check_fields(args, frame),
            },
        }
    }

    /// A program that always reaches the network; hosts are targets, not paths.
    fn network_tool(&mut self, name: &str, args: &[Field], frame: &Frame) {
        self.out.network(format!("`{name}` reaches the network"));
        let values = match name {
            "ssh" | "mosh" => "BbcDEeFIiJLlmOopQRSWw",
            "scp" => "cFiJlOoPS",
            "sftp" => "BbcDFiJloPRSs",
            "ping" | "ping6" => "cfiIlmMpQsStTwW",
            "dig" => "bcfkpqtxy",
            "nc" | "ncat" | "netcat" => "eIiOpqsTwWxX",
            "traceroute" | "tracepath" | "mtr" => "fgimNpqsTwzl",
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
                self.out
                    .target(super::redact::host_only(remote.unwrap_or(&arg.text)));
            } else if !(remote_command && host.is_some_and(|host| index > host)) {
                self.check_arg(arg, frame, false);
            }
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
                    self.out.target(super::redact::host_only(host));
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

/// The subcommand (with its own, for nested ones like `go mod download`)
/// when it reaches the network.
pub(super) fn network_subcommand(
    network: &[&str],
    nested: &[(&str, &[&str])],
    sub: &str,
    operands: &[Field],
) -> Option<String> {
    if network.contains(&sub) {
        return Some(sub.to_owned());
    }
    let (_, subs) = nested.iter().find(|(name, _)| *name == sub)?;
    let next = operands.get(first_operand(operands, "")?)?.known()?;
    subs.contains(&next).then(|| format!("{sub} {next}"))
}
