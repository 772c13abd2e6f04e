//! What `git` does: which subcommands reach the network, which run another
//! command, and which write the repository.
//!
//! A repository's `.git` is not part of the writable workspace: its hooks,
//! config and index are what the user's own next `git` obeys, so commands
//! see it read-only and a command that writes it must be approved (scope
//! `metadata`). Rather than fail `git commit` with "Read-only file system",
//! the analysis says so up front. The rule:
//!
//! - **Reading subcommands** ([`READS`]: `status`, `diff`, `log`, `show`,
//!   `grep`, `ls-files`, `rev-parse`, …) and the reading forms of mixed ones
//!   (`branch` and `tag` listing, `stash list`, `config --get`, `remote -v`,
//!   `worktree list`, …) leave the repository alone.
//! - **Every other subcommand writes it**, unknown ones included (an alias,
//!   a plugin): `commit`, `add`, `checkout`, `switch`, `reset`, `merge`,
//!   `rebase`, `stash`, `fetch`, `pull`, `push` (remote-tracking refs),
//!   `config` writes, `tag`/`branch` changes, …
//! - **`init`** writes an existing repository only: the target directory's
//!   `.git` exists already (a re-initialisation copies hook templates).
//!   `clone` makes a new one.
//!
//! The repository written is found the way git finds it — `--git-dir`, or
//! the nearest `.git` from the working directory (after `-C`) upward — as
//! it exists when the command is analyzed. One inside the workspace is
//! metadata; one above it is outside the workspace; none at all means the
//! command can only write a repository it makes itself, which is its own.
//! A working directory that is not known makes the write metadata (unsure
//! is never safe). `git config --global`/`--system` writes the user's or
//! the system's configuration: outside.

use std::path::{Path, PathBuf};

use super::expand::Field;
use super::frame::{Cwds, Dir, Frame};
use super::resolve::abbreviate;
use super::tools::network_subcommand;
use super::walk::Walker;
use crate::paths::{is_metadata, normalize};

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

/// Subcommands that only read the repository.
const READS: [&str; 51] = [
    "status",
    "diff",
    "log",
    "show",
    "shortlog",
    "blame",
    "annotate",
    "grep",
    "ls-files",
    "ls-tree",
    "cat-file",
    "rev-parse",
    "rev-list",
    "describe",
    "name-rev",
    "merge-base",
    "show-ref",
    "show-branch",
    "for-each-ref",
    "whatchanged",
    "diff-tree",
    "diff-files",
    "diff-index",
    "range-diff",
    "cherry",
    "count-objects",
    "verify-commit",
    "verify-tag",
    "check-ignore",
    "check-attr",
    "check-mailmap",
    "check-ref-format",
    "var",
    "version",
    "help",
    "archive",
    "format-patch",
    "ls-remote",
    "clone",
    "get-tar-commit-id",
    "patch-id",
    "mailinfo",
    "mailsplit",
    "stripspace",
    "interpret-trailers",
    "column",
    "show-index",
    "verify-pack",
    "request-pull",
    "send-email",
    "clean",
];

/// What a subcommand does to the repository.
#[derive(Debug, PartialEq, Eq)]
enum Effect {
    /// Reads it only.
    Reads,
    /// Writes it.
    Writes,
    /// `init`: writes the target directory's `.git` if it exists — the
    /// working directory, the operand at this index, or (`Err`) a directory
    /// that cannot be known statically.
    Init(Result<Option<usize>, ()>),
    /// Writes the user's or the system's configuration.
    UserConfig,
    /// Writes the configuration file given by the operand at this index.
    ConfigFile(usize),
}

/// A subcommand's operands: options, positional words, and whether a word
/// could not be known statically.
#[derive(Debug, Default)]
struct Words<'a> {
    options: Vec<&'a str>,
    positional: Vec<&'a str>,
    unknown: bool,
}

impl Words<'_> {
    /// Whether `long` (or `long=…`) is given, or a short-option cluster
    /// holds one of `short`.
    fn has(&self, long: &[&str], short: &str) -> bool {
        self.options.iter().any(|option| {
            let name = option.split('=').next().unwrap_or_default();
            long.contains(&name)
                || option
                    .strip_prefix('-')
                    .filter(|rest| !rest.starts_with('-'))
                    .is_some_and(|cluster| cluster.chars().any(|c| short.contains(c)))
        })
    }

    /// The first positional word is one of `names`.
    fn first_is(&self, names: &[&str]) -> bool {
        self.positional
            .first()
            .is_some_and(|first| names.contains(first))
    }
}

/// Splits operands; `valued` options take the next word as their value.
fn split<'a>(operands: &'a [Field], valued: &[&str]) -> Words<'a> {
    let mut words = Words::default();
    let mut only_positional = false;
    let mut iter = operands.iter();
    while let Some(field) = iter.next() {
        let Some(text) = field.known() else {
            words.unknown = true;
            continue;
        };
        if only_positional || text == "-" || !text.starts_with('-') {
            words.positional.push(text);
        } else if text == "--" {
            only_positional = true;
        } else {
            words.options.push(text);
            if valued.contains(&text) && iter.next().is_some_and(|value| value.known().is_none()) {
                words.unknown = true;
            }
        }
    }
    words
}

/// Options of `branch` and `tag` that take a value and only filter a listing.
const LIST_VALUED: [&str; 7] = [
    "--contains",
    "--no-contains",
    "--merged",
    "--no-merged",
    "--points-at",
    "--sort",
    "--format",
];

/// What `git <sub> <operands>` does to the repository.
fn effect(sub: &str, operands: &[Field]) -> Effect {
    let writes_if = |writes: bool| match writes {
        true => Effect::Writes,
        false => Effect::Reads,
    };
    match sub {
        _ if READS.contains(&sub) => Effect::Reads,
        "init" => Effect::Init(init_target(operands)),
        "branch" => {
            let words = split(operands, &LIST_VALUED);
            let changes = [
                "--delete",
                "--move",
                "--copy",
                "--set-upstream-to",
                "--unset-upstream",
                "--edit-description",
                "--force",
                "--track",
                "--no-track",
                "--create-reflog",
            ];
            let listing = words.has(&["--list"], "l");
            writes_if(
                words.unknown
                    || words.has(&changes, "dDmMcCuft")
                    || (!words.positional.is_empty() && !listing),
            )
        }
        "tag" => {
            let words = split(operands, &LIST_VALUED);
            let changes = [
                "--annotate",
                "--sign",
                "--local-user",
                "--force",
                "--delete",
                "--message",
                "--file",
                "--edit",
                "--create-reflog",
            ];
            let reading = words.has(&["--list", "--verify"], "lv");
            writes_if(
                words.unknown
                    || words.has(&changes, "asudfmFe")
                    || (!words.positional.is_empty() && !reading),
            )
        }
        "config" => config_effect(operands),
        _ => {
            let words = split(operands, &["--ref"]);
            let reads = match sub {
                "stash" => words.first_is(&["list", "show"]),
                "remote" => words.positional.is_empty() || words.first_is(&["show", "get-url"]),
                "worktree" => words.first_is(&["list"]),
                "sparse-checkout" => words.first_is(&["list"]),
                "notes" => words.positional.is_empty() || words.first_is(&["list", "show"]),
                "reflog" => words.positional.is_empty() || words.first_is(&["show", "exists"]),
                "submodule" => {
                    words.positional.is_empty() || words.first_is(&["status", "summary"])
                }
                "bundle" => words.first_is(&["verify", "list-heads", "create"]),
                "rerere" => words.first_is(&["status", "diff", "remaining"]),
                "symbolic-ref" => words.positional.len() == 1 && !words.has(&["--delete"], "d"),
                "hash-object" => !words.has(&[], "w"),
                "apply" => !words.has(&["--index", "--cached", "--3way", "--intent-to-add"], "3N"),
                _ => false,
            };
            writes_if(words.unknown || !reads)
        }
    }
}

/// The directory operand of `git init`, past its options.
fn init_target(operands: &[Field]) -> Result<Option<usize>, ()> {
    let valued = [
        "--template",
        "--separate-git-dir",
        "-b",
        "--initial-branch",
        "--object-format",
        "--ref-format",
    ];
    let mut index = 0;
    while let Some(field) = operands.get(index) {
        match field.known() {
            None => return Err(()),
            Some("--") => return Ok((index + 1 < operands.len()).then_some(index + 1)),
            Some(text) if valued.contains(&text) => index += 2,
            Some(text) if text.starts_with('-') && text.len() > 1 => index += 1,
            Some(_) => return Ok(Some(index)),
        }
    }
    Ok(None)
}

/// What `git config …` does: reading forms, writes to the repository's
/// configuration, the user's, or a named file.
fn config_effect(operands: &[Field]) -> Effect {
    let valued = ["-f", "--file", "--blob", "--type", "--default", "--comment"];
    let words = split(operands, &valued);
    if words.unknown {
        return Effect::Writes;
    }
    let getters = [
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "--list",
        "--get-color",
        "--get-colorbool",
    ];
    let setters = [
        "--add",
        "--unset",
        "--unset-all",
        "--replace-all",
        "--rename-section",
        "--remove-section",
        "--edit",
    ];
    let reads = words.has(&getters, "l")
        || words.first_is(&["get", "list"])
        || (!words.has(&setters, "e")
            && !words.first_is(&["set", "unset", "rename-section", "remove-section", "edit"])
            && words.positional.len() == 1);
    if reads {
        return Effect::Reads;
    }
    if words.has(&["--global", "--system"], "") {
        return Effect::UserConfig;
    }
    let file = operands
        .iter()
        .position(|field| matches!(field.known(), Some("-f" | "--file")));
    match file {
        Some(index) if index + 1 < operands.len() => Effect::ConfigFile(index + 1),
        _ => Effect::Writes,
    }
}

/// The `git` subcommand, when it reaches the network.
fn git_network_subcommand(sub: &str, operands: &[Field]) -> Option<String> {
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
    network_subcommand(&NETWORK, &NESTED, sub, operands)
}

/// The nearest `.git` from `dir` upward, as git finds its repository.
fn find_repository(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .map(|ancestor| ancestor.join(".git"))
        .find(|candidate| std::fs::symlink_metadata(candidate).is_ok())
}

impl Walker<'_> {
    /// `git [global options] subcommand …`.
    pub(super) fn git(&mut self, args: &[Field], frame: &Frame) {
        let mut inner = frame.clone();
        let (index, git_dir) = self.git_globals(args, &mut inner);
        let (global, rest) = args.split_at(index.min(args.len()));
        self.check_fields(global, frame);
        let Some((sub, operands)) = rest.split_first() else {
            return;
        };
        match sub.known() {
            Some(sub) => {
                if let Some(sub) = git_network_subcommand(sub, operands) {
                    self.out.network(format!("`git {sub}` reaches the network"));
                }
                match effect(sub, operands) {
                    Effect::Reads => {}
                    Effect::Writes => self.repository_written(sub, git_dir, &inner.cwds, None),
                    Effect::Init(Ok(target)) => {
                        let target = target.and_then(|index| operands.get(index));
                        // It makes the directory (a bare repository's files in it).
                        self.check_written(target, &inner);
                        let target = target.map_or(Some("."), Field::literal);
                        self.repository_written(sub, git_dir, &inner.cwds, Some(target));
                    }
                    Effect::Init(Err(())) => {
                        self.repository_written(sub, git_dir, &inner.cwds, Some(None));
                    }
                    Effect::UserConfig => {
                        self.out.outside(
                            "`git config --global`/`--system` writes a git configuration outside the workspace",
                        );
                        self.out.target("~/.gitconfig");
                    }
                    Effect::ConfigFile(index) => {
                        self.check_written(operands.get(index), &inner);
                    }
                }
            }
            None => self.out.unknown_kind(
                "cannot tell what `git` does: the subcommand cannot be resolved statically",
            ),
        }
        self.check_fields(operands, &inner);
    }

    /// Records the write of the repository `git <sub>` uses: `git_dir`, or
    /// the one found from each working directory; for `init`, only the
    /// `.git` of its target directory (`None`: not known statically).
    fn repository_written(
        &mut self,
        sub: &str,
        git_dir: Option<&Field>,
        cwds: &Cwds,
        init: Option<Option<&str>>,
    ) {
        for dir in cwds.dirs() {
            if !self.step() {
                return;
            }
            let found = match (dir, git_dir) {
                (Dir::At { .. }, None) if init == Some(None) => {
                    self.unsure_repository(sub);
                    continue;
                }
                (Dir::At { physical, .. }, None) if let Some(Some(target)) = init => {
                    let path = normalize(&physical.join(target).join(".git"));
                    Some(path).filter(|path| path.symlink_metadata().is_ok())
                }
                (Dir::At { physical, .. }, None) => find_repository(physical),
                (Dir::At { physical, .. }, Some(git_dir)) => match git_dir.literal() {
                    Some(text) => {
                        let text = text.strip_prefix("--git-dir=").unwrap_or(text);
                        Some(normalize(&physical.join(text)))
                    }
                    None => {
                        self.unsure_repository(sub);
                        continue;
                    }
                },
                (Dir::Home, _) => {
                    self.out.outside(format!(
                        "`git {sub}` writes a repository in a home directory, outside the workspace"
                    ));
                    continue;
                }
                (Dir::Unknown, _) => {
                    self.unsure_repository(sub);
                    continue;
                }
            };
            let Some(found) = found else {
                continue;
            };
            match found.strip_prefix(&self.roots.root) {
                Ok(relative) if is_metadata(relative) => {
                    let shown = relative.display().to_string();
                    self.out.metadata(format!(
                        "`git {sub}` writes the repository's metadata (`{}`), read-only for commands",
                        abbreviate(&shown)
                    ));
                    self.out.target(shown);
                }
                // `--git-dir` naming an ordinary workspace directory.
                Ok(_) => {}
                Err(_) => {
                    let shown = found.display().to_string();
                    self.out.outside(format!(
                        "`git {sub}` writes the repository at `{}`, outside the workspace",
                        abbreviate(&shown)
                    ));
                    self.out.target(shown);
                }
            }
        }
    }

    /// A write to a repository that cannot be placed: metadata, never safe.
    fn unsure_repository(&mut self, sub: &str) {
        self.out.metadata(format!(
            "`git {sub}` writes a repository that cannot be placed statically"
        ));
    }

    /// Handles git's global options (`-C` moves `inner`): the index after
    /// them and the `--git-dir` given, if any.
    fn git_globals<'a>(
        &mut self,
        args: &'a [Field],
        inner: &mut Frame,
    ) -> (usize, Option<&'a Field>) {
        let mut index = 0;
        let mut git_dir = None;
        while let Some(text) = args.get(index).and_then(Field::known) {
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
                "--git-dir" => {
                    git_dir = args.get(index + 1);
                    index += 2;
                }
                "--work-tree" | "--namespace" | "--super-prefix" => index += 2,
                _ if text.starts_with("--config-env=") => {
                    let config = Field::plain(text.trim_start_matches("--config-env="));
                    self.git_config(Some(&config));
                    index += 1;
                }
                _ if text.starts_with("--git-dir=") => {
                    git_dir = args.get(index);
                    index += 1;
                }
                _ if text.starts_with('-') => index += 1,
                _ => break,
            }
        }
        (index, git_dir)
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
}
