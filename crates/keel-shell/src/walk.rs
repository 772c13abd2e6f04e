//! The walk over the syntax tree, tracking the working directory.
//!
//! Every command is visited once in source order, with a [`Frame`]: the set
//! of directories the shell may be in at that point, the positional
//! parameters, and the functions defined so far. The set is what makes `cd`
//! safe to follow: `cd d && x` runs `x` only if `cd` succeeded, but after
//! `cd d; x` or `cd d || x` the shell may still be where it was, so both
//! directories are kept and a relative path must be inside from each of them.
//! Subshells, pipelines, command substitutions and child processes get a
//! copy of the frame, so their `cd` does not leak (the last element of a
//! pipeline may run in the shell itself under `lastpipe`, so its directories
//! are added, not substituted). Loops whose body changes directory are
//! walked a second time from an unknown directory.
//!
//! Functions are walked where they are defined (positional parameters
//! unknown) and again at each call with the arguments and directories of
//! the call, memoized, since the body runs in the caller's directory.
//!
//! The walk is bounded: [`MAX_DEPTH`] levels of nesting and [`MAX_STEPS`]
//! commands and paths; past either the command is unknown.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use super::ast::{
    AndOr, Assign, AssignValue, Command, Compound, CondWord, Connector, Function, HereBody, List,
    ParamForm, Part, Pipeline, RedirOp, Redirect, Simple, Word,
};
use super::expand::{Args, ExpandEnv, Field, expand_value, expand_word};
use super::frame::{Cwds, Dir, Frame, Outcome, Reassigned, Run, Stdin, bind_args};
use super::report::Findings;
use super::resolve::Roots;
use super::word::parse_source;
use super::{MAX_DEPTH, ShellAnalysis};

/// Most commands and paths one analysis visits.
const MAX_STEPS: usize = 100_000;
/// A function call's memo key.
type CallKey = (String, Cwds, Args);

/// The analysis in progress.
#[derive(Debug)]
pub(super) struct Walker<'r> {
    /// What counts as inside.
    pub(super) roots: &'r Roots,
    /// The findings so far.
    pub(super) out: Findings,
    /// Variables the command may reassign.
    pub(super) vars: Reassigned,
    /// Current nesting depth.
    depth: usize,
    /// Commands and paths visited.
    steps: usize,
    /// Whether the command evaluates arithmetic (`$((…))`, `let`, subscripts…).
    pub(super) arithmetic: bool,
    /// Whether literal text in the command contains `$(` or a backtick.
    code_in_text: bool,
    /// Whether the paths being checked are written (a `>` target, the
    /// destination of `cp`): one inside `.git` or `.keel` is then metadata.
    pub(super) writing: bool,
    /// Function calls walked, with where they leave the shell (`None`: in progress).
    calls: HashMap<CallKey, Option<Outcome>>,
}

impl<'r> Walker<'r> {
    /// A walker for `source` in a workspace with these roots.
    pub(super) fn new(roots: &'r Roots, source: &str) -> Walker<'r> {
        Walker {
            roots,
            out: Findings::default(),
            vars: Reassigned::scan(source),
            depth: 0,
            steps: 0,
            arithmetic: false,
            code_in_text: false,
            writing: false,
            calls: HashMap::new(),
        }
    }

    /// The frame a command line starts in: the root, no arguments.
    pub(super) fn top_frame(&self) -> Frame {
        let root = self.roots.root.clone();
        Frame {
            cwds: Cwds::one(Dir::At {
                logical: root.clone(),
                physical: root,
            }),
            args: Args::Known {
                zero: "bash".to_owned(),
                rest: Vec::new(),
            },
            functions: Rc::default(),
            stdin_open: false,
        }
    }

    /// The merged findings.
    ///
    /// Bash evaluates a variable's value as an expression in arithmetic,
    /// and runs command substitutions in array subscripts there
    /// (`x='a[$(cmd)]'; echo $((x))`), so arithmetic together with text
    /// that holds code is unknown.
    pub(super) fn finish(mut self) -> ShellAnalysis {
        if self.arithmetic && self.code_in_text {
            self.out
                .unknown_kind("arithmetic may run a command stored as text in a variable");
        }
        self.out.finish()
    }

    /// Notes literal text that holds code, for [`Walker::finish`].
    fn note_text(&mut self, text: &str) {
        self.code_in_text |= text.contains("$(") || text.contains('`');
    }

    /// Counts one step; `false` once the budget is spent.
    pub(super) fn step(&mut self) -> bool {
        self.steps += 1;
        if self.steps == MAX_STEPS {
            self.out
                .unknown_kind("the command is too complex to analyze");
        }
        self.steps < MAX_STEPS
    }

    /// Runs `f` one nesting level deeper; `None` past [`MAX_DEPTH`].
    pub(super) fn deeper<T>(&mut self, f: impl FnOnce(&mut Walker<'r>) -> T) -> Option<T> {
        if self.depth >= MAX_DEPTH {
            self.out.unknown_kind(format!(
                "the command nests more than {MAX_DEPTH} levels deep"
            ));
            return None;
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        Some(result)
    }

    /// Parses `source` (a `bash -c` string, an `eval`…) and walks it in `frame`.
    pub(super) fn walk_source(&mut self, source: &str, frame: &mut Frame, what: &str) {
        match parse_source(source, self.depth) {
            Ok(list) => {
                self.deeper(|walker| walker.walk_list(&list, frame));
            }
            Err(error) => self
                .out
                .unknown_kind(format!("cannot parse the string {what} runs: {error}")),
        }
    }

    /// Walks a list; the outcome is that of its last command.
    pub(super) fn walk_list(&mut self, list: &List, frame: &mut Frame) -> Outcome {
        let mut last = Outcome::same(frame.cwds.clone());
        for item in &list.items {
            last = if item.background {
                self.walk_and_or(item, &mut frame.clone());
                Outcome::same(frame.cwds.clone())
            } else {
                self.walk_and_or(item, frame)
            };
        }
        last
    }

    /// Walks an and-or list: `&&` continues from success, `||` from failure.
    fn walk_and_or(&mut self, and_or: &AndOr, frame: &mut Frame) -> Outcome {
        let Outcome { mut ok, mut failed } = self.walk_pipeline(&and_or.first, frame);
        for (connector, pipeline) in &and_or.rest {
            frame.cwds = match connector {
                Connector::And => ok.clone(),
                Connector::Or => failed.clone(),
            };
            let next = self.walk_pipeline(pipeline, frame);
            (ok, failed) = match connector {
                Connector::And => (next.ok, failed.union(&next.failed)),
                Connector::Or => (ok.union(&next.ok), next.failed),
            };
        }
        frame.cwds = ok.union(&failed);
        Outcome { ok, failed }
    }

    /// Walks a pipeline; only a lone command changes the shell's directory.
    fn walk_pipeline(&mut self, pipeline: &Pipeline, frame: &mut Frame) -> Outcome {
        let outcome = match pipeline.commands.as_slice() {
            [single] => self.walk_command(single, frame),
            commands => {
                let before = frame.cwds.clone();
                let mut last = before.clone();
                for (index, command) in commands.iter().enumerate() {
                    let mut inner = frame.clone();
                    inner.stdin_open |= index > 0;
                    let outcome = self.walk_command(command, &mut inner);
                    last = outcome.ok.union(&outcome.failed);
                }
                Outcome::same(before.union(&last))
            }
        };
        match pipeline.negated {
            true => Outcome {
                ok: outcome.failed,
                failed: outcome.ok,
            },
            false => outcome,
        }
    }

    /// Walks one command.
    pub(super) fn walk_command(&mut self, command: &Command, frame: &mut Frame) -> Outcome {
        if !self.step() {
            return Outcome::same(frame.cwds.clone());
        }
        let outcome = self.deeper(|walker| match command {
            Command::Simple(simple) => walker.walk_simple(simple, frame),
            Command::Compound(compound, redirects) => {
                for redirect in redirects {
                    walker.walk_redirect(redirect, frame);
                }
                let mut inner = frame.clone();
                inner.stdin_open |= redirects.iter().any(redirects_stdin);
                let outcome = walker.walk_compound(compound, &mut inner);
                frame.args = inner.args;
                frame.functions = inner.functions;
                outcome
            }
            Command::Function(function) => walker.define_function(function, frame),
        });
        outcome.unwrap_or_else(|| Outcome::same(frame.cwds.clone()))
    }

    /// Walks a compound command.
    fn walk_compound(&mut self, compound: &Compound, frame: &mut Frame) -> Outcome {
        match compound {
            Compound::Subshell(list) => {
                self.walk_list(list, &mut frame.clone());
                Outcome::same(frame.cwds.clone())
            }
            Compound::Group(list) => self.walk_list(list, frame),
            Compound::Arith(parts) => {
                self.arithmetic = true;
                self.walk_parts(parts, frame);
                Outcome::same(frame.cwds.clone())
            }
            Compound::Cond(words) => {
                const ARITHMETIC: [&str; 6] = ["-eq", "-ne", "-lt", "-le", "-gt", "-ge"];
                for word in words {
                    if let CondWord::Operand(word) = word {
                        self.arithmetic |= word.plain().is_some_and(|w| ARITHMETIC.contains(&w));
                    }
                    match word {
                        CondWord::Operand(word) => self.walk_argument(word, frame),
                        CondWord::Pattern(word) => self.walk_word(word, frame),
                    }
                }
                Outcome::same(frame.cwds.clone())
            }
            Compound::If { arms, otherwise } => {
                let lists: Vec<&List> = arms
                    .iter()
                    .flat_map(|(cond, body)| [cond, body])
                    .chain(otherwise)
                    .collect();
                self.walk_branches(&lists, frame)
            }
            Compound::Loop { cond, body } => self.walk_loop(&[cond, body], frame),
            Compound::For { words, body } => {
                for word in words.iter().flatten() {
                    self.walk_argument(word, frame);
                }
                self.walk_loop(&[body], frame)
            }
            Compound::ForArith { header, body } => {
                self.arithmetic = true;
                self.walk_parts(header, frame);
                self.walk_loop(&[body], frame)
            }
            Compound::Case { subject, arms } => {
                self.walk_word(subject, frame);
                for pattern in arms.iter().flat_map(|arm| &arm.patterns) {
                    self.walk_word(pattern, frame);
                }
                let bodies: Vec<&List> = arms.iter().map(|arm| &arm.body).collect();
                self.walk_branches(&bodies, frame)
            }
        }
    }

    /// Walks lists that may each run or not, in order: each starts from
    /// any directory an earlier one may have left.
    fn walk_branches(&mut self, lists: &[&List], frame: &mut Frame) -> Outcome {
        let mut reached = frame.cwds.clone();
        for list in lists {
            frame.cwds = reached.clone();
            self.walk_list(list, frame);
            reached = reached.union(&frame.cwds);
        }
        frame.cwds = reached.clone();
        Outcome::same(reached)
    }

    /// Walks a loop; if its body changes directory, again from an unknown one.
    fn walk_loop(&mut self, lists: &[&List], frame: &mut Frame) -> Outcome {
        let before = frame.cwds.clone();
        let outcome = self.walk_branches(lists, frame);
        if outcome.ok == before {
            return outcome;
        }
        frame.cwds = outcome.ok.with_unknown();
        self.walk_branches(lists, frame)
    }

    /// Records a function and walks its body with unknown arguments.
    fn define_function(&mut self, function: &Rc<Function>, frame: &mut Frame) -> Outcome {
        Rc::make_mut(&mut frame.functions).insert(function.name.clone(), Rc::clone(function));
        let mut body = Frame {
            args: Args::Unknown,
            ..frame.clone()
        };
        self.walk_command(&function.body, &mut body);
        Outcome::same(frame.cwds.clone())
    }

    /// Walks a call of a function defined in the command.
    pub(super) fn call_function(
        &mut self,
        function: &Function,
        args: &[Field],
        frame: &mut Frame,
    ) -> Outcome {
        let bound = bind_args(&function.name, args);
        let key = (function.name.clone(), frame.cwds.clone(), bound.clone());
        match self.calls.get(&key) {
            Some(Some(outcome)) => return outcome.clone(),
            Some(None) => return Outcome::same(frame.cwds.with_unknown()),
            None => {}
        }
        self.calls.insert(key.clone(), None);
        let mut body = Frame {
            args: bound,
            ..frame.clone()
        };
        let outcome = self.walk_command(&function.body, &mut body);
        self.calls.insert(key, Some(outcome.clone()));
        outcome
    }

    /// Walks a simple command.
    fn walk_simple(&mut self, simple: &Simple, frame: &mut Frame) -> Outcome {
        for word in &simple.words {
            self.walk_word(word, frame);
        }
        for assign in &simple.assigns {
            match &assign.value {
                AssignValue::Scalar(word) => self.walk_word(word, frame),
                AssignValue::Array(words) => {
                    words.iter().for_each(|word| self.walk_word(word, frame))
                }
            }
        }
        for redirect in &simple.redirects {
            self.walk_redirect(redirect, frame);
        }
        for assign in &simple.assigns {
            self.check_assignment(assign, frame);
        }
        let fields: Vec<Field> = simple
            .words
            .iter()
            .flat_map(|word| self.expand(word, frame))
            .collect();
        let run = Run {
            stdin: stdin_of(&simple.redirects, frame),
            skip_functions: false,
        };
        self.run(&fields, frame, run)
    }

    /// Walks the code inside a word and checks it as an argument.
    fn walk_argument(&mut self, word: &Word, frame: &mut Frame) {
        self.walk_word(word, frame);
        let fields = self.expand(word, frame);
        self.check_fields(&fields, frame);
    }

    /// Walks the code that runs while a word expands.
    pub(super) fn walk_word(&mut self, word: &Word, frame: &Frame) {
        let text: String = word
            .parts
            .iter()
            .filter_map(|part| match part {
                Part::Lit { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        self.note_text(&text);
        self.walk_parts(&word.parts, frame);
    }

    /// Walks command and process substitutions, in subshells.
    fn walk_parts(&mut self, parts: &[Part], frame: &Frame) {
        for part in parts {
            match part {
                Part::CommandSub(list) | Part::ProcessSub(list) => {
                    let mut inner = frame.clone();
                    self.deeper(|walker| walker.walk_list(list, &mut inner));
                }
                Part::Arith(parts) => {
                    self.arithmetic = true;
                    self.walk_parts(parts, frame);
                }
                Part::Param(param) => {
                    // Subscripts and offsets are arithmetic.
                    self.arithmetic |= param.form == ParamForm::Other;
                    self.walk_parts(&param.nested, frame);
                }
                Part::Lit { .. } => {}
            }
        }
    }

    /// Walks a redirection's code and checks its target.
    fn walk_redirect(&mut self, redirect: &Redirect, frame: &Frame) {
        self.walk_word(&redirect.target, frame);
        match redirect.heredoc.as_ref().and_then(|cell| cell.get()) {
            Some(HereBody::Expanded(parts)) => self.walk_parts(parts, frame),
            Some(HereBody::Literal(text)) => self.note_text(text),
            None => {}
        }
        self.check_redirect(redirect, frame);
    }

    /// Checks an assignment's value.
    fn check_assignment(&mut self, assign: &Assign, frame: &Frame) {
        let name = assign.name.split('[').next().unwrap_or_default();
        match &assign.value {
            AssignValue::Scalar(word) => {
                let field = expand_value(word, &self.expand_env(frame));
                self.check_value(name, &field, frame);
            }
            AssignValue::Array(words) => {
                let fields: Vec<Field> = words
                    .iter()
                    .flat_map(|word| self.expand(word, frame))
                    .collect();
                for field in &fields {
                    self.check_value(name, field, frame);
                }
            }
        }
    }

    /// Expands a word in `frame`.
    pub(super) fn expand(&self, word: &Word, frame: &Frame) -> Vec<Field> {
        expand_word(word, &self.expand_env(frame))
    }

    /// What expansion may rely on in `frame`.
    fn expand_env<'a>(&'a self, frame: &'a Frame) -> ExpandEnv<'a> {
        ExpandEnv {
            pwd: frame.cwds.pwd().filter(|_| !self.vars.pwd),
            tmpdir: self
                .roots
                .tmpdir()
                .and_then(Path::to_str)
                .filter(|_| !self.vars.tmpdir),
            args: &frame.args,
            ifs_changed: self.vars.ifs,
        }
    }
}

/// Whether a redirection feeds standard input.
fn redirects_stdin(redirect: &Redirect) -> bool {
    let stdin_fd = redirect.fd.as_deref().is_none_or(|fd| fd == "0");
    let input = matches!(
        redirect.op,
        RedirOp::In | RedirOp::ReadWrite | RedirOp::DupIn | RedirOp::HereDoc | RedirOp::HereString
    );
    stdin_fd && input
}

/// What a simple command reads on standard input.
fn stdin_of(redirects: &[Redirect], frame: &Frame) -> Stdin {
    let mut stdin = match frame.stdin_open {
        true => Stdin::Unknown,
        false => Stdin::Closed,
    };
    for redirect in redirects
        .iter()
        .filter(|redirect| redirects_stdin(redirect))
    {
        stdin = match redirect.op {
            RedirOp::In | RedirOp::ReadWrite => Stdin::File,
            RedirOp::HereDoc => match redirect.heredoc.as_ref().and_then(|cell| cell.get()) {
                Some(HereBody::Literal(text)) => Stdin::Text(text.clone()),
                Some(HereBody::Expanded(parts)) => {
                    literal_text(parts).map_or(Stdin::Unknown, Stdin::Text)
                }
                None => Stdin::Unknown,
            },
            RedirOp::HereString => match redirect.target.literal() {
                Some((text, _)) => Stdin::Text(text),
                None => Stdin::Unknown,
            },
            _ => Stdin::Unknown,
        };
    }
    stdin
}

/// The text of parts that are all literal.
fn literal_text(parts: &[Part]) -> Option<String> {
    parts
        .iter()
        .map(|part| match part {
            Part::Lit { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}
