//! Checks on the words a command receives: paths, URLs, redirection targets
//! and assignment values.
//!
//! Every argument is a potential path: the command may open it. Options are
//! not, but the value glued to one is when it looks like a path
//! (`--out=/x`, `-I../inc`). A word that cannot be known statically makes the
//! scope unknown, unless its static prefix already places it outside
//! (`/etc/$X`). A word that looks like a URL is a network target instead of
//! a path, whatever command receives it.

use std::path::Path;

use super::ast::{RedirOp, Redirect};
use super::expand::Field;
use super::frame::{Dir, Frame};
use super::parse::is_name;
use super::resolve::{Place, abbreviate};
use super::walk::Walker;
use crate::paths::is_metadata;

/// URL schemes that name something on the network.
const NETWORK_SCHEMES: [&str; 26] = [
    "http",
    "https",
    "ftp",
    "ftps",
    "sftp",
    "ssh",
    "git",
    "ws",
    "wss",
    "rsync",
    "scp",
    "telnet",
    "ldap",
    "ldaps",
    "smb",
    "tftp",
    "gopher",
    "irc",
    "mqtt",
    "redis",
    "postgres",
    "postgresql",
    "mysql",
    "mongodb",
    "tcp",
    "udp",
];

/// Variables whose value is a command that programs run.
const COMMAND_VARIABLES: [&str; 20] = [
    "PAGER",
    "GIT_PAGER",
    "MANPAGER",
    "SYSTEMD_PAGER",
    "EDITOR",
    "VISUAL",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "LESSOPEN",
    "LESSCLOSE",
    "PROMPT_COMMAND",
    "BROWSER",
    "RSYNC_RSH",
    "FZF_DEFAULT_COMMAND",
];

/// Variables whose value is a list of files a program loads or sources.
const FILE_VARIABLES: [&str; 5] = [
    "BASH_ENV",
    "ENV",
    "LD_PRELOAD",
    "LD_AUDIT",
    "LD_LIBRARY_PATH",
];

/// A word to place as a path.
#[derive(Debug, Clone, Copy)]
pub(super) struct PathWord<'a> {
    /// The static text.
    pub(super) text: &'a str,
    /// Where globbing starts and the escaped pattern, if it globs.
    pub(super) glob: Option<&'a (usize, String)>,
    /// Whether it starts with an unquoted `~`.
    pub(super) home: bool,
    /// Whether to list it as a target even if it does not look like a path.
    pub(super) always_target: bool,
}

impl<'a> PathWord<'a> {
    /// A plain path word.
    pub(super) fn new(text: &'a str) -> PathWord<'a> {
        PathWord {
            text,
            glob: None,
            home: false,
            always_target: false,
        }
    }
}

/// The URL in a word (or in its value after `=`), if it names the network.
pub(super) fn url_of(text: &str) -> Option<&str> {
    let after_eq = text.split_once('=').map(|(_, value)| value);
    [Some(text), after_eq]
        .into_iter()
        .flatten()
        .find(|candidate| {
            candidate.split_once("://").is_some_and(|(scheme, _)| {
                let valid = !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
                let last = scheme.rsplit('+').next().unwrap_or_default();
                valid
                    && NETWORK_SCHEMES
                        .iter()
                        .any(|known| known.eq_ignore_ascii_case(last))
            })
        })
}

/// Splits an argument `NAME=value` (also `NAME+=`, `NAME[i]=`, as `export`
/// and `env` take them) into the name and the value as a field.
pub(super) fn assignment_arg(arg: &Field) -> Option<(&str, Field)> {
    let (head, value) = arg.text.split_once('=')?;
    let name = head.trim_end_matches('+');
    let name = name.split('[').next().unwrap_or_default();
    if !is_name(name) {
        return None;
    }
    let value = Field {
        text: value.to_owned(),
        home: value.starts_with('~'),
        glob: None,
        ..arg.clone()
    };
    Some((name, value))
}

/// The path glued to an option (`--out=/x`, `-I../inc`), if it looks like one.
fn option_value(text: &str) -> Option<&str> {
    let value = match text.strip_prefix("--") {
        Some(long) => long.split_once('=')?.1,
        None => text.get(text.find(['/', '~', '.'])?..)?,
    };
    value.starts_with(['/', '~', '.']).then_some(value)
}

/// Whether a redirection target names an fd (`2`, `-`, `3-`) rather than a file.
fn is_fd_word(text: &str) -> bool {
    let digits = text.strip_suffix('-').unwrap_or(text);
    text == "-" || (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()))
}

impl Walker<'_> {
    /// Checks arguments; after `--` words starting with `-` are operands.
    pub(super) fn check_fields<'f>(
        &mut self,
        fields: impl IntoIterator<Item = &'f Field>,
        frame: &Frame,
    ) {
        let mut operands_only = false;
        for field in fields {
            if !operands_only && field.known() == Some("--") {
                operands_only = true;
                continue;
            }
            self.check_arg(field, frame, operands_only);
        }
    }

    /// Checks one argument.
    pub(super) fn check_arg(&mut self, field: &Field, frame: &Frame, operand: bool) {
        if field.opaque {
            return;
        }
        if let Some(url) = url_of(&field.text) {
            self.network_address(url);
            return;
        }
        if field.home {
            self.check_path(
                PathWord {
                    home: true,
                    ..PathWord::new(&field.text)
                },
                frame,
            );
            return;
        }
        if field.unknown.is_some() {
            self.check_unknown(field);
            return;
        }
        let text = field.text.as_str();
        if let Some(path) = text.strip_prefix("file://") {
            self.check_path(PathWord::new(path), frame);
        } else if !operand && text.len() > 1 && text.starts_with('-') {
            if let Some(value) = option_value(text) {
                let home = value.starts_with('~');
                self.check_path(
                    PathWord {
                        home,
                        ..PathWord::new(value)
                    },
                    frame,
                );
            }
        } else {
            let glob = field.glob.as_ref();
            self.check_path(
                PathWord {
                    glob,
                    ..PathWord::new(text)
                },
                frame,
            );
        }
    }

    /// Records a network address, redacted before it is shortened (so a
    /// cut cannot leave half of its userinfo behind).
    pub(super) fn network_address(&mut self, url: &str) {
        let url = super::redact::redact_url(url);
        self.out
            .network(format!("`{}` is a network address", abbreviate(&url)));
        self.out.target(url);
    }

    /// Places a path from every directory the shell may be in.
    pub(super) fn check_path(&mut self, word: PathWord<'_>, frame: &Frame) {
        let text = word.text;
        if text.is_empty() || !self.step() {
            return;
        }
        if word.home {
            self.out.outside(format!(
                "`{}` is in a home directory, outside the workspace",
                abbreviate(text)
            ));
            self.out.target(text);
            return;
        }
        let root = [Dir::At {
            logical: self.roots.root.clone(),
            physical: self.roots.root.clone(),
        }];
        let dirs = match text.starts_with('/') {
            true => &root[..],
            false => frame.cwds.dirs(),
        };
        for dir in dirs {
            let place = match dir {
                Dir::At { physical, .. } => match word.glob {
                    Some((at, pattern)) => self.roots.resolve_glob(text, *at, pattern, physical),
                    None => self.roots.resolve(text, physical),
                },
                // Some directory under a home directory (`cd ~/x` is not
                // followed further): `…` says which one is not known, and
                // an "always" answer cannot bind to it.
                Dir::Home => Place::Outside {
                    shown: format!("~/…/{text}"),
                    reason: format!(
                        "`{}` is relative to a home directory, outside the workspace",
                        abbreviate(text)
                    ),
                },
                Dir::Unknown => Place::Unknown {
                    reason: format!(
                        "`{}` is relative to a working directory that is not known",
                        abbreviate(text)
                    ),
                },
            };
            self.record(place, word);
        }
    }

    /// Records where a path lies.
    fn record(&mut self, place: Place, word: PathWord<'_>) {
        match place {
            Place::Inside { shown, exists } => {
                let path_like = word.text.contains('/') || word.text.starts_with('.');
                let synthetic = shown.starts_with("/dev/fd/");
                // Workspace paths are shown relative; the temp dir's absolute.
                if self.writing && !shown.starts_with('/') && is_metadata(Path::new(&shown)) {
                    self.out.metadata(format!(
                        "`{}` is git's or Keel's metadata, read-only for commands",
                        abbreviate(&shown)
                    ));
                }
                if !synthetic && (word.always_target || exists || path_like) {
                    self.out.target(shown);
                }
            }
            Place::Outside { shown, reason } => {
                self.out.outside(reason);
                self.out.target(shown);
            }
            Place::Unknown { reason } => self.out.unknown_scope(reason),
        }
    }

    /// Checks a word whose value is not fully known from its static prefix.
    fn check_unknown(&mut self, field: &Field) {
        let reason = field.unknown.clone().unwrap_or_default();
        let prefix = field.text.as_str();
        if let Some(url) = url_of(prefix) {
            self.network_address(url);
            return;
        }
        if !self.check_outside_prefix(field) {
            self.out.unknown_scope(reason);
        }
    }

    /// Checks a redirection's target.
    pub(super) fn check_redirect(&mut self, redirect: &Redirect, frame: &Frame) {
        match redirect.op {
            RedirOp::HereDoc | RedirOp::HereString => return,
            RedirOp::DupIn | RedirOp::DupOut => {
                if redirect
                    .target
                    .literal()
                    .is_some_and(|(text, _)| is_fd_word(&text))
                {
                    return;
                }
            }
            RedirOp::In | RedirOp::Out | RedirOp::ReadWrite => {}
        }
        let writes = matches!(
            redirect.op,
            RedirOp::Out | RedirOp::ReadWrite | RedirOp::DupOut
        );
        for field in self.expand(&redirect.target, frame) {
            self.writing = writes;
            self.check_target(&field, frame);
            self.writing = false;
        }
    }

    /// Checks arguments that the command writes (see [`Walker::writing`]).
    pub(super) fn check_written<'f>(
        &mut self,
        fields: impl IntoIterator<Item = &'f Field>,
        frame: &Frame,
    ) {
        self.writing = true;
        self.check_fields(fields, frame);
        self.writing = false;
    }

    /// Checks one redirection target field.
    fn check_target(&mut self, field: &Field, frame: &Frame) {
        let text = field.text.as_str();
        if text.starts_with("/dev/tcp/") || text.starts_with("/dev/udp/") {
            self.out.network(format!(
                "a redirection to `{}` reaches the network",
                abbreviate(text)
            ));
            self.out.target(text);
        } else if field.opaque {
            self.out
                .unknown_scope("a redirection target is a positional parameter");
        } else if field.unknown.is_some() && !field.home {
            self.check_unknown(field);
        } else {
            let word = PathWord {
                text,
                glob: field.glob.as_ref(),
                home: field.home,
                always_target: true,
            };
            self.check_path(word, frame);
        }
    }

    /// Checks the value of an assignment (or of `export NAME=value`).
    pub(super) fn check_value(&mut self, name: &str, field: &Field, frame: &Frame) {
        if COMMAND_VARIABLES.contains(&name) {
            match field.literal() {
                Some(command) => {
                    let what = format!("`{name}`");
                    self.walk_source(command, &mut frame.clone(), &what);
                }
                None => self.out.unknown_kind(format!(
                    "`{name}` names a command that cannot be resolved statically"
                )),
            }
        } else if FILE_VARIABLES.contains(&name) {
            match field.known() {
                Some(list) => {
                    for path in list.split([':', ' ']) {
                        let home = path.starts_with('~');
                        self.check_path(
                            PathWord {
                                home,
                                ..PathWord::new(path)
                            },
                            frame,
                        );
                    }
                }
                None => self.out.unknown_scope(format!(
                    "`{name}` names files that cannot be resolved statically"
                )),
            }
        } else if let Some(url) = url_of(&field.text) {
            self.network_address(url);
        } else if field.home {
            self.check_path(
                PathWord {
                    home: true,
                    ..PathWord::new(&field.text)
                },
                frame,
            );
        } else if field.unknown.is_some() {
            self.check_outside_prefix(field);
        } else if field.text.starts_with('/') {
            self.check_path(PathWord::new(&field.text), frame);
        }
    }

    /// Records an unknown word as outside when its static prefix is an
    /// absolute directory outside; whether it did.
    fn check_outside_prefix(&mut self, field: &Field) -> bool {
        let prefix = field.text.as_str();
        let Some(slash) = prefix.rfind('/').filter(|_| prefix.starts_with('/')) else {
            return false;
        };
        let dir = prefix.get(..=slash).unwrap_or("/");
        let Place::Outside { shown, .. } = self.roots.resolve(dir, &self.roots.root) else {
            return false;
        };
        self.out.outside(format!(
            "`{}…` is under `{shown}`, outside the workspace",
            abbreviate(prefix)
        ));
        self.out.target(shown);
        true
    }
}
