//! The shell state the walk carries from command to command.
//!
//! [`Cwds`] is a small set of directories because after `cd d; x` the shell
//! may or may not be in `d` (the `cd` may fail); a path is inside only if it
//! is inside from each of them. [`Reassigned`] records which variables the
//! command may change, found by a scan of its text, so that `$PWD`,
//! `$TMPDIR` and the default `IFS` are trusted only when nothing can have
//! changed them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use super::ast::Function;
use super::expand::{Args, Field};
use super::word::is_name_char;

/// Most working directories tracked at once; more become unknown.
const MAX_CWDS: usize = 8;

/// A directory the shell may be in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Dir {
    /// A known directory.
    At {
        /// `$PWD`: the path `cd` went through, symlinks kept.
        logical: PathBuf,
        /// Where the kernel resolves relative paths from.
        physical: PathBuf,
    },
    /// Somewhere under a home directory.
    Home,
    /// Not known.
    Unknown,
}

/// The directories the shell may be in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Cwds(Vec<Dir>);

impl Cwds {
    /// Exactly one directory.
    pub(super) fn one(dir: Dir) -> Cwds {
        Cwds(vec![dir])
    }

    /// An unknown directory.
    pub(super) fn unknown() -> Cwds {
        Cwds::one(Dir::Unknown)
    }

    /// The directories of either.
    pub(super) fn union(&self, other: &Cwds) -> Cwds {
        let mut dirs = self.0.clone();
        for dir in &other.0 {
            if !dirs.contains(dir) {
                dirs.push(dir.clone());
            }
        }
        if dirs.len() > MAX_CWDS {
            return Cwds::unknown();
        }
        Cwds(dirs)
    }

    /// These directories plus an unknown one.
    pub(super) fn with_unknown(&self) -> Cwds {
        self.union(&Cwds::unknown())
    }

    /// The directories.
    pub(super) fn dirs(&self) -> &[Dir] {
        &self.0
    }

    /// `$PWD` when there is exactly one known directory.
    pub(super) fn pwd(&self) -> Option<&str> {
        match self.0.as_slice() {
            [Dir::At { logical, .. }] => logical.to_str(),
            _ => None,
        }
    }
}

/// The shell state a command runs in.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    /// Where the shell may be.
    pub(super) cwds: Cwds,
    /// The positional parameters.
    pub(super) args: Args,
    /// The functions defined so far.
    pub(super) functions: Rc<HashMap<String, Rc<Function>>>,
    /// Whether standard input may carry data (a pipe, a redirection).
    pub(super) stdin_open: bool,
}

/// Where the shell may be after a command, by how the command ended.
#[derive(Debug, Clone)]
pub(super) struct Outcome {
    /// After success.
    pub(super) ok: Cwds,
    /// After failure.
    pub(super) failed: Cwds,
}

impl Outcome {
    /// The same directories either way.
    pub(super) fn same(cwds: Cwds) -> Outcome {
        Outcome {
            ok: cwds.clone(),
            failed: cwds,
        }
    }
}

/// What a command's standard input holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stdin {
    /// Nothing (the tool gives commands no input).
    Closed,
    /// A file named by a redirection.
    File,
    /// Text known statically (a quoted here-document, a here-string).
    Text(String),
    /// Something the analysis cannot see (a pipe).
    Unknown,
}

/// How a command is being run.
#[derive(Debug, Clone)]
pub(super) struct Run {
    /// Its standard input.
    pub(super) stdin: Stdin,
    /// Whether functions are bypassed (`command`, `builtin`).
    pub(super) skip_functions: bool,
}

/// Variables the command may set, so their expansions are not trusted.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Reassigned {
    /// `PWD`.
    pub(super) pwd: bool,
    /// `TMPDIR`.
    pub(super) tmpdir: bool,
    /// `IFS`.
    pub(super) ifs: bool,
    /// `CDPATH`.
    pub(super) cdpath: bool,
    /// Whether the command mentions `cd`, `pushd` or `popd` at all.
    pub(super) changes_dir: bool,
}

impl Reassigned {
    /// Which variables the source mentions other than in `$NAME`/`${NAME`.
    pub(super) fn scan(source: &str) -> Reassigned {
        Reassigned {
            pwd: mentioned(source, "PWD"),
            tmpdir: mentioned(source, "TMPDIR"),
            ifs: mentioned(source, "IFS"),
            cdpath: mentioned(source, "CDPATH"),
            changes_dir: ["cd", "pushd", "popd"]
                .iter()
                .any(|name| mentioned(source, name)),
        }
    }
}

/// Whether `name` appears in `source` other than right after `$` or `${`.
fn mentioned(source: &str, name: &str) -> bool {
    source.match_indices(name).any(|(at, _)| {
        let before = source.get(..at).unwrap_or_default();
        let after = source.get(at + name.len()..).unwrap_or_default();
        let bounded = !before.chars().next_back().is_some_and(is_name_char)
            && !after.chars().next().is_some_and(is_name_char);
        bounded && !before.ends_with('$') && !before.ends_with("${")
    })
}

/// Positional parameters bound from fields: known if every field is.
pub(super) fn bind_args(zero: &str, fields: &[Field]) -> Args {
    let rest: Option<Vec<String>> = fields
        .iter()
        .map(|field| field.literal().map(str::to_owned))
        .collect();
    match rest {
        Some(rest) => Args::Known {
            zero: zero.to_owned(),
            rest,
        },
        None => Args::Unknown,
    }
}
