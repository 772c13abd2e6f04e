//! Running one expanded command: builtins that change the shell's state
//! (`cd`, `set`, `eval`, `source`, `trap`, `export`…) and the dispatch to
//! everything else.
//!
//! The command name must be static: `$X args` could run anything, so it is
//! unknown. A function defined earlier in the command takes precedence over
//! every other meaning of its name, as in bash. Names that run code with
//! other privileges or trace other processes are unknown; wrappers,
//! shells and network tools are in `wrappers.rs` and `tools.rs`.

use std::path::Path;

use super::check::assignment_arg;
use super::expand::{Args, Field};
use super::frame::{Cwds, Dir, Frame, Outcome, Run};
use super::resolve::{abbreviate, real_path};
use super::walk::Walker;
use crate::paths::normalize;

/// Commands that run another command as another user or in another root.
const PRIVILEGED: [&str; 13] = [
    "sudo",
    "su",
    "doas",
    "pkexec",
    "run0",
    "runuser",
    "chroot",
    "nsenter",
    "unshare",
    "setpriv",
    "capsh",
    "systemd-run",
    "machinectl",
];

/// Commands that trace or take control of other processes.
const TRACERS: [&str; 3] = ["strace", "ltrace", "gdb"];

impl Walker<'_> {
    /// Runs an expanded simple command.
    pub(super) fn run(&mut self, fields: &[Field], frame: &mut Frame, run: Run) -> Outcome {
        let unchanged = Outcome::same(frame.cwds.clone());
        let Some((head, args)) = fields.split_first() else {
            return unchanged;
        };
        if !self.step() {
            return unchanged;
        }
        self.out.command(fields.iter().map(Field::word).collect());
        let Some(name) = head.known() else {
            let why = match head.opaque {
                true => "it is a positional parameter".to_owned(),
                false => head.describe(),
            };
            self.out
                .unknown_kind(format!("cannot tell which command runs: {why}"));
            return unchanged;
        };
        if head.glob.is_some() {
            self.out.unknown_kind(format!(
                "the command name `{}` is a glob pattern",
                abbreviate(name)
            ));
            return unchanged;
        }
        if name.contains('/') && !name.starts_with('/') && !head.home {
            self.check_path(super::check::PathWord::new(name), frame);
        }
        let base = name.rsplit('/').next().unwrap_or(name);
        if !run.skip_functions
            && !name.contains('/')
            && let Some(function) = frame.functions.get(name).cloned()
        {
            self.check_fields(args, frame);
            return self.call_function(&function, args, frame);
        }
        self.dispatch(base, args, frame, run)
    }

    /// Dispatches on the command's base name.
    fn dispatch(&mut self, name: &str, args: &[Field], frame: &mut Frame, run: Run) -> Outcome {
        match name {
            "cd" | "pushd" => return self.cd(name, args, frame),
            "popd" => {
                return Outcome {
                    ok: Cwds::unknown(),
                    failed: frame.cwds.clone(),
                };
            }
            "eval" => return self.eval(args, frame),
            "command" | "builtin" | "exec" => return self.builtin_wrapper(name, args, frame, run),
            "source" | "." => self.source(name, args, frame, &run),
            "set" => self.set(args, frame),
            "let" => self.arithmetic = true,
            "shift" => self.shift(args, frame),
            "trap" => self.trap(args, frame),
            "export" | "declare" | "typeset" | "local" | "readonly" => self.declare(args, frame),
            "enable" if !args.is_empty() => self
                .out
                .unknown_kind("`enable` changes which builtins the shell has"),
            "shopt" if args.iter().any(|arg| arg.known() == Some("expand_aliases")) => {
                self.out.unknown_kind(
                    "`shopt -s expand_aliases` makes aliases run, which are not analyzed",
                );
            }
            _ if PRIVILEGED.contains(&name) => self.out.privileged(format!(
                "`{name}` runs a command with other privileges or in another root"
            )),
            _ if TRACERS.contains(&name) => self
                .out
                .privileged(format!("`{name}` traces or controls another process")),
            _ => return self.external(name, args, frame, run),
        }
        Outcome::same(frame.cwds.clone())
    }

    /// `cd` and `pushd`: follow literal directories.
    fn cd(&mut self, name: &str, args: &[Field], frame: &mut Frame) -> Outcome {
        let before = frame.cwds.clone();
        let (rest, physical) = cd_options(args);
        self.check_fields(rest, frame);
        let after = match rest.first() {
            None if name == "pushd" => Cwds::unknown(),
            None => {
                self.out
                    .outside("`cd` without a directory goes to the home directory");
                Cwds::one(Dir::Home)
            }
            Some(target) if target.home => Cwds::one(Dir::Home),
            Some(target) => match target.literal() {
                Some("-") => {
                    self.out
                        .unknown_scope("`cd -` returns to a directory that is not tracked");
                    Cwds::unknown()
                }
                Some(text) if name == "pushd" && text.starts_with(['+', '-']) => {
                    self.out
                        .unknown_scope("`pushd` rotates to a directory that is not tracked");
                    Cwds::unknown()
                }
                Some(text) if self.cdpath_applies(text) => {
                    self.out.unknown_scope(format!(
                        "`CDPATH` may change where `cd {}` goes",
                        abbreviate(text)
                    ));
                    Cwds::unknown()
                }
                Some(text) => self.change_dir(&before, text, physical),
                None => Cwds::unknown(),
            },
        };
        Outcome {
            ok: after,
            failed: before,
        }
    }

    /// Whether `CDPATH`, set in the command, may redirect `cd text`.
    fn cdpath_applies(&self, text: &str) -> bool {
        self.vars.cdpath && !text.starts_with(['/', '.'])
    }

    /// Where `cd text` leaves the shell from each directory in `from`.
    pub(super) fn change_dir(&self, from: &Cwds, text: &str, physical: bool) -> Cwds {
        let root = Path::new("/");
        let mut after: Option<Cwds> = None;
        for dir in from.dirs() {
            let next = match dir {
                _ if text.starts_with('/') => enter(root, root, text, physical),
                Dir::At {
                    logical,
                    physical: real,
                } => enter(logical, real, text, physical),
                Dir::Home | Dir::Unknown => dir.clone(),
            };
            let next = Cwds::one(next);
            after = Some(after.map_or_else(|| next.clone(), |cwds| cwds.union(&next)));
        }
        after.unwrap_or_else(Cwds::unknown)
    }

    /// `eval`: walks the joined arguments as a command in this shell.
    fn eval(&mut self, args: &[Field], frame: &mut Frame) -> Outcome {
        let words: Option<Vec<&str>> = args.iter().map(Field::literal).collect();
        match words {
            Some(words) => self.walk_source(&words.join(" "), frame, "`eval`"),
            None => self
                .out
                .unknown_kind("`eval` runs a string that cannot be resolved statically"),
        }
        Outcome::same(frame.cwds.clone())
    }

    /// `source`/`.`: the file must be static; it is a path like any argument.
    fn source(&mut self, name: &str, args: &[Field], frame: &mut Frame, run: &Run) {
        let Some(file) = args.first() else {
            return;
        };
        if file.literal().is_none() && !file.home {
            self.out.unknown_kind(format!(
                "`{name}` reads a file that cannot be resolved statically"
            ));
            return;
        }
        self.check_fields(args, frame);
        self.script_file(&format!("`{name}`"), file, run, frame);
    }

    /// `set`: options, or new positional parameters.
    fn set(&mut self, args: &[Field], frame: &mut Frame) {
        self.check_fields(args, frame);
        let mut index = 0;
        while let Some(arg) = args.get(index) {
            let Some(text) = arg.known() else {
                frame.args = Args::Unknown;
                return;
            };
            if text == "--" || text == "-" {
                index += 1;
                break;
            }
            if !text.starts_with(['-', '+']) {
                break;
            }
            index += if text.ends_with('o') && text.len() > 1 {
                2
            } else {
                1
            };
        }
        let Some(rest) = args.get(index..) else {
            return;
        };
        let sets = index > 0
            && args
                .get(index - 1)
                .and_then(Field::known)
                .is_some_and(|t| t == "--" || t == "-");
        if sets || !rest.is_empty() {
            let zero = match &frame.args {
                Args::Known { zero, .. } => zero.clone(),
                Args::Unknown => "bash".to_owned(),
            };
            frame.args = super::frame::bind_args(&zero, rest);
        }
    }

    /// `shift [n]`.
    fn shift(&mut self, args: &[Field], frame: &mut Frame) {
        let count = match args.first() {
            None => Some(1),
            Some(arg) => arg.literal().and_then(|n| n.parse::<usize>().ok()),
        };
        frame.args = match (&frame.args, count) {
            (Args::Known { zero, rest }, Some(count)) => Args::Known {
                zero: zero.clone(),
                rest: rest
                    .get(count..)
                    .map(<[String]>::to_vec)
                    .unwrap_or_default(),
            },
            _ => Args::Unknown,
        };
    }

    /// `trap action signals…`: the action runs later, from any directory
    /// the command may have changed to.
    fn trap(&mut self, args: &[Field], frame: &Frame) {
        let operands: Vec<&Field> = args
            .iter()
            .skip_while(|arg| arg.known().is_some_and(|t| t.starts_with('-') && t != "-"))
            .collect();
        let [action, _, ..] = operands.as_slice() else {
            return;
        };
        match action.literal() {
            Some("" | "-") => {}
            Some(command) => {
                let mut later = frame.clone();
                if self.vars.changes_dir {
                    later.cwds = frame.cwds.with_unknown();
                }
                self.walk_source(command, &mut later, "`trap`");
            }
            None => self
                .out
                .unknown_kind("`trap` sets an action that cannot be resolved statically"),
        }
    }

    /// `export`/`declare`/`local`/…: `NAME=value` arguments are assignments.
    fn declare(&mut self, args: &[Field], frame: &Frame) {
        for arg in args {
            if let Some(option) = arg.known().filter(|t| t.starts_with(['-', '+'])) {
                // `declare -i`: assignments are evaluated as arithmetic.
                self.arithmetic |= option.contains('i');
            } else if let Some((name, value)) = assignment_arg(arg) {
                self.check_value(name, &value, frame);
            } else if arg.unknown.is_some() && !arg.text.contains('=') {
                self.out.unknown_kind(format!(
                    "a declaration sets a variable whose name is not static: {}",
                    arg.describe()
                ));
            }
        }
    }

    /// `command`, `builtin` and `exec`: the command after their options.
    fn builtin_wrapper(
        &mut self,
        name: &str,
        args: &[Field],
        frame: &mut Frame,
        run: Run,
    ) -> Outcome {
        let mut index = 0;
        let mut describes = false;
        while let Some(text) = args.get(index).and_then(Field::known) {
            if text == "--" {
                index += 1;
                break;
            }
            if !text.starts_with('-') || text.len() < 2 || name == "builtin" {
                break;
            }
            describes |= name == "command" && text.contains(['v', 'V']);
            index += if name == "exec" && text.ends_with('a') {
                2
            } else {
                1
            };
        }
        let rest = args.get(index..).unwrap_or_default();
        if describes {
            return Outcome::same(frame.cwds.clone());
        }
        let run = Run {
            skip_functions: name != "exec",
            ..run
        };
        self.run(rest, frame, run)
    }
}

/// The directory `cd text` enters from `logical` (`$PWD`) and `real`.
///
/// Like bash's default `cd -L`, `..` applies to `$PWD` lexically; `cd -P`
/// resolves from the real directory. Either way the kernel then resolves
/// the result physically.
fn enter(logical: &Path, real: &Path, text: &str, physical: bool) -> Dir {
    let base = if physical { real } else { logical };
    let logical = normalize(&base.join(text));
    let real = real_path(&logical);
    Dir::At {
        logical: if physical { real.clone() } else { logical },
        physical: real,
    }
}

/// Splits `cd`'s options off: the operands, and whether `-P` was given.
fn cd_options(args: &[Field]) -> (&[Field], bool) {
    let mut physical = false;
    let mut rest = args;
    while let Some((first, tail)) = rest.split_first() {
        match first.known() {
            Some("--") => return (tail, physical),
            Some(option) if option.len() > 1 && option.starts_with('-') => {
                physical |= option.contains('P');
                rest = tail;
            }
            _ => break,
        }
    }
    (rest, physical)
}
