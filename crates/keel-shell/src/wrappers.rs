//! Commands that run another command: wrappers (`env`, `nice`, `timeout`,
//! `xargs`, `watch`…), shells (`bash -c`, `sh script`) and `python -m`.
//!
//! A wrapper is looked through: its own options are skipped using a table
//! of which options take a value, and the rest is run as a command of its
//! own, in a child process (its `cd` does not leak). When an option or the
//! command itself cannot be known statically, the command is unknown,
//! since the unknown word may be the command. A shell's `-c` string is
//! parsed and walked with the same rules; a shell reading commands from a
//! pipe is unknown.

use std::rc::Rc;

use super::check::assignment_arg;
use super::expand::{Args, Field};
use super::frame::{Cwds, Frame, Outcome, Run, Stdin, bind_args};
use super::walk::Walker;

/// A wrapper that runs the command after its options.
#[derive(Debug)]
struct Wrapper {
    /// Its name.
    name: &'static str,
    /// Short options that take a value.
    values: &'static str,
    /// Long options that take a separate value.
    long_values: &'static [&'static str],
    /// Operands before the command (`timeout DURATION`).
    operands: usize,
    /// Short options after which no command runs (`taskset -p`).
    no_command: &'static str,
}

/// The wrappers that run their command in a child process.
const WRAPPERS: [Wrapper; 11] = [
    wrapper("nice", "n", &["adjustment"], 0, ""),
    wrapper("nohup", "", &[], 0, ""),
    wrapper("timeout", "sk", &["signal", "kill-after"], 1, ""),
    wrapper("stdbuf", "ioe", &["input", "output", "error"], 0, ""),
    wrapper("setsid", "", &[], 0, ""),
    wrapper(
        "ionice",
        "cnpPu",
        &["class", "classdata", "pid", "pgid", "uid"],
        0,
        "pPu",
    ),
    wrapper(
        "chrt",
        "TPD",
        &["sched-runtime", "sched-period", "sched-deadline"],
        1,
        "pm",
    ),
    wrapper("taskset", "", &[], 1, "p"),
    wrapper("time", "fo", &["format", "output"], 0, ""),
    wrapper("busybox", "", &[], 0, ""),
    wrapper("unbuffer", "", &[], 0, ""),
];

/// A [`Wrapper`] entry.
const fn wrapper(
    name: &'static str,
    values: &'static str,
    long_values: &'static [&'static str],
    operands: usize,
    no_command: &'static str,
) -> Wrapper {
    Wrapper {
        name,
        values,
        long_values,
        operands,
        no_command,
    }
}

/// Shells whose `-c` string is parsed as a command.
const SHELLS: [&str; 11] = [
    "bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "rbash", "lksh",
];

/// Where a wrapper's options end.
struct Options {
    /// The index of the first field after the options.
    end: usize,
    /// The short option letters seen.
    letters: String,
}

/// Splits leading options; `None` when one cannot be known statically.
fn split_options(args: &[Field], values: &str, long_values: &[&str]) -> Option<Options> {
    let mut index = 0;
    let mut letters = String::new();
    while let Some(arg) = args.get(index) {
        let text = arg.known()?;
        if text == "--" {
            index += 1;
            break;
        }
        if text.len() < 2 || !text.starts_with('-') {
            break;
        }
        index += 1;
        if let Some(long) = text.strip_prefix("--") {
            if long_values.contains(&long) {
                index += 1;
            }
            continue;
        }
        for (at, c) in text.char_indices().skip(1) {
            letters.push(c);
            if values.contains(c) {
                if at + c.len_utf8() == text.len() {
                    index += 1;
                }
                break;
            }
        }
    }
    Some(Options {
        end: index.min(args.len()),
        letters,
    })
}

/// Whether `name` is a Python interpreter (`python`, `python3`, `python3.12`).
fn is_python(name: &str) -> bool {
    name.strip_prefix("python")
        .is_some_and(|version| version.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

impl Walker<'_> {
    /// Runs a command that is not a shell builtin.
    pub(super) fn external(
        &mut self,
        name: &str,
        args: &[Field],
        frame: &mut Frame,
        run: Run,
    ) -> Outcome {
        let unchanged = Outcome::same(frame.cwds.clone());
        let run = Run {
            skip_functions: true,
            ..run
        };
        if let Some(spec) = WRAPPERS.iter().find(|spec| spec.name == name) {
            self.wrapper(spec, args, frame, run);
        } else if name == "env" {
            self.env(args, frame, run);
        } else if name == "xargs" {
            self.xargs(args, frame);
        } else if name == "watch" {
            self.watch(args, frame);
        } else if SHELLS.contains(&name) {
            self.shell(name, args, frame, &run);
        } else if is_python(name) {
            self.python(args, frame);
        } else {
            self.tool(name, args, frame);
        }
        unchanged
    }

    /// Records that a wrapper's command cannot be known.
    fn unknown_command(&mut self, name: &str, args: &[Field], frame: &Frame) {
        self.out.unknown_kind(format!(
            "cannot tell which command `{name}` runs: an argument cannot be resolved statically"
        ));
        self.check_fields(args, frame);
    }

    /// A generic wrapper.
    fn wrapper(&mut self, spec: &Wrapper, args: &[Field], frame: &Frame, run: Run) {
        let Some(options) = split_options(args, spec.values, spec.long_values) else {
            return self.unknown_command(spec.name, args, frame);
        };
        let start = (options.end + spec.operands).min(args.len());
        let (own, command) = args.split_at(start);
        self.check_fields(own, frame);
        if options.letters.contains(|c| spec.no_command.contains(c)) {
            self.check_fields(command, frame);
        } else {
            self.run(command, &mut frame.clone(), run);
        }
    }

    /// `env [options] [NAME=value…] command`.
    fn env(&mut self, args: &[Field], frame: &Frame, run: Run) {
        let mut child = frame.clone();
        let Some(mut index) = self.env_options(args, &mut child) else {
            return self.unknown_command("env", args, frame);
        };
        while let Some((name, value)) = args.get(index).and_then(assignment_arg) {
            self.check_value(name, &value, frame);
            index += 1;
        }
        self.run(args.get(index..).unwrap_or_default(), &mut child, run);
    }

    /// Handles `env`'s options: the index after them, `None` if one is not static.
    fn env_options(&mut self, args: &[Field], child: &mut Frame) -> Option<usize> {
        let mut index = 0;
        while let Some(arg) = args.get(index) {
            let text = arg.known()?;
            if text == "--" {
                return Some(index + 1);
            }
            if text.len() < 2 || !text.starts_with('-') {
                return Some(index);
            }
            index += 1;
            let Some((option, attached)) = env_option(text) else {
                continue;
            };
            let value = match attached {
                Some(value) => Some(Field::plain(value)),
                None => {
                    index += 1;
                    args.get(index - 1).cloned()
                }
            };
            match option {
                "S" | "split-string" => self
                    .out
                    .unknown_kind("`env -S` splits a string into a command, which is not analyzed"),
                "C" | "chdir" => self.env_chdir(value.as_ref(), child),
                _ => {}
            }
        }
        Some(index)
    }

    /// `env -C dir`: the command runs in `dir`.
    fn env_chdir(&mut self, dir: Option<&Field>, child: &mut Frame) {
        let Some(dir) = dir else {
            return;
        };
        self.check_arg(dir, child, true);
        child.cwds = match dir.literal() {
            Some(text) => self.change_dir(&child.cwds, text, false),
            None => Cwds::unknown(),
        };
    }

    /// `xargs [options] [command]`: the command's arguments come from input.
    fn xargs(&mut self, args: &[Field], frame: &Frame) {
        const LONG: [&str; 9] = [
            "arg-file",
            "delimiter",
            "eof",
            "replace",
            "max-lines",
            "max-args",
            "max-procs",
            "max-chars",
            "process-slot-var",
        ];
        let Some(options) = split_options(args, "aEdILnPs", &LONG) else {
            return self.unknown_command("xargs", args, frame);
        };
        let (own, command) = args.split_at(options.end);
        self.check_fields(own, frame);
        self.out.unknown_scope(
            "`xargs` passes arguments read from its input, which cannot be known statically",
        );
        let command = match command.is_empty() {
            true => vec![Field::plain("echo")],
            false => command.to_vec(),
        };
        let run = Run {
            stdin: Stdin::Unknown,
            skip_functions: true,
        };
        self.run(&command, &mut frame.clone(), run);
    }

    /// `watch [options] command…`: run through `sh -c` unless `-x`.
    fn watch(&mut self, args: &[Field], frame: &Frame) {
        let Some(options) = split_options(args, "nq", &["interval", "equexit"]) else {
            return self.unknown_command("watch", args, frame);
        };
        let (own, command) = args.split_at(options.end);
        self.check_fields(own, frame);
        let exec =
            options.letters.contains('x') || own.iter().any(|arg| arg.known() == Some("--exec"));
        let run = Run {
            stdin: Stdin::Closed,
            skip_functions: true,
        };
        if exec {
            self.run(command, &mut frame.clone(), run);
            return;
        }
        let words: Option<Vec<&str>> = command.iter().map(Field::literal).collect();
        match words {
            Some(words) => self.walk_source(&words.join(" "), &mut frame.clone(), "`watch`"),
            None => self.unknown_command("watch", command, frame),
        }
    }

    /// A shell: `-c string`, a script file, or commands on standard input.
    fn shell(&mut self, name: &str, args: &[Field], frame: &Frame, run: &Run) {
        let mut index = 0;
        let (mut command_mode, mut stdin_mode) = (false, false);
        while let Some(arg) = args.get(index) {
            let Some(text) = arg.known() else {
                return self.unknown_command(name, args, frame);
            };
            if text == "--" || text == "-" {
                index += 1;
                break;
            }
            if let Some(long) = text.strip_prefix("--") {
                if matches!(long, "rcfile" | "init-file") {
                    index += 1;
                    if let Some(file) = args.get(index) {
                        self.check_arg(file, frame, true);
                    }
                }
                index += 1;
                continue;
            }
            if text.len() < 2 || !text.starts_with(['-', '+']) {
                break;
            }
            let letters = text.get(1..).unwrap_or_default();
            command_mode |= letters.contains('c');
            stdin_mode |= letters.contains('s');
            index += if letters.ends_with(['o', 'O']) { 2 } else { 1 };
        }
        let operands = args.get(index..).unwrap_or_default();
        let mut child = Frame {
            functions: Rc::default(),
            stdin_open: run.stdin != Stdin::Closed,
            ..frame.clone()
        };
        let what = format!("`{name}`");
        if command_mode {
            self.shell_string(name, operands, &mut child);
        } else if let Some(script) = operands.first().filter(|_| !stdin_mode) {
            self.check_fields(operands, frame);
            self.script_file(&what, script, run, &mut child);
        } else {
            self.check_fields(operands, frame);
            self.script_on_stdin(&what, run, &mut child);
        }
    }

    /// A script read from a file: its code is not analyzed, unless the
    /// "file" is a pipe or standard input, which hide or carry the code.
    pub(super) fn script_file(&mut self, what: &str, file: &Field, run: &Run, frame: &mut Frame) {
        match file.literal() {
            Some("/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0") => {
                self.script_on_stdin(what, run, frame);
            }
            Some(path) if path.starts_with("/dev/") || path.starts_with("/proc/") => {
                self.out.unknown_kind(format!(
                    "{what} reads code from `{path}`, which cannot be seen"
                ));
            }
            _ => {}
        }
    }

    /// Code read from standard input: walked when it is known text.
    fn script_on_stdin(&mut self, what: &str, run: &Run, frame: &mut Frame) {
        match &run.stdin {
            Stdin::Closed | Stdin::File => {}
            Stdin::Text(text) => self.walk_source(text, frame, what),
            Stdin::Unknown => self.out.unknown_kind(format!(
                "{what} reads commands from its standard input, which cannot be seen"
            )),
        }
    }

    /// `sh -c string [name [args…]]`.
    fn shell_string(&mut self, name: &str, operands: &[Field], child: &mut Frame) {
        let Some((script, rest)) = operands.split_first() else {
            return;
        };
        let Some(source) = script.literal() else {
            self.out.unknown_kind(format!(
                "`{name} -c` runs a string that cannot be resolved statically"
            ));
            return;
        };
        self.check_fields(rest, child);
        child.args = match rest.split_first() {
            None => bind_args(name, &[]),
            Some((zero, args)) => match zero.literal() {
                Some(zero) => bind_args(zero, args),
                None => Args::Unknown,
            },
        };
        self.walk_source(source, child, &format!("`{name} -c`"));
    }

    /// `python … -m pip …` is pip; anything else is an ordinary program.
    fn python(&mut self, args: &[Field], frame: &Frame) {
        let mut index = 0;
        while let Some(text) = args.get(index).and_then(Field::known) {
            let module = match text {
                "-m" => args.get(index + 1).and_then(Field::known),
                _ => text.strip_prefix("-m").filter(|m| !m.is_empty()),
            };
            if let Some(module) = module {
                let skip = if text == "-m" { 2 } else { 1 };
                let rest = args.get(index + skip..).unwrap_or_default();
                match module {
                    "pip" => return self.tool("pip", rest, frame),
                    "http.server" => self
                        .out
                        .network("`python -m http.server` serves on the network"),
                    _ => {}
                }
                break;
            }
            if text == "-c" || text == "-" || !text.starts_with('-') {
                break;
            }
            index += if matches!(text, "-X" | "-W") { 2 } else { 1 };
        }
        self.check_fields(args, frame);
    }
}

/// An `env` option that takes a value, with the value when it is attached.
fn env_option(text: &str) -> Option<(&str, Option<&str>)> {
    let (option, attached) = match text.strip_prefix("--") {
        Some(long) => match long.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (long, None),
        },
        None => {
            let at = text.find(['u', 'C', 'S', 'a'])?;
            let rest = text.get(at + 1..).filter(|rest| !rest.is_empty());
            (text.get(at..=at)?, rest)
        }
    };
    let takes_value = matches!(
        option,
        "u" | "C" | "S" | "a" | "unset" | "chdir" | "split-string" | "argv0"
    );
    takes_value.then_some((option, attached))
}
