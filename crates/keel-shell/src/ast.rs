//! The syntax tree of a shell command, reduced to what classification needs.
//!
//! The tree keeps every place where code runs (command and process
//! substitutions, here-document bodies, arithmetic) and every word a command
//! receives, with the quoting that decides how it expands. It drops what
//! cannot change the classification: which operator joined two commands is
//! kept only where it decides the working directory (`&&`, `||`), and
//! spans are not kept at all.

use std::cell::OnceCell;
use std::rc::Rc;

/// A command list: and-or lists separated by `;`, `&` or newlines.
#[derive(Debug, Default)]
pub(super) struct List {
    /// The and-or lists, in order.
    pub(super) items: Vec<AndOr>,
}

/// Pipelines joined by `&&` and `||`.
#[derive(Debug)]
pub(super) struct AndOr {
    /// The first pipeline.
    pub(super) first: Pipeline,
    /// The following pipelines with the operator before each.
    pub(super) rest: Vec<(Connector, Pipeline)>,
    /// Whether the list was started in the background with `&`.
    pub(super) background: bool,
}

/// The operator between two pipelines of an and-or list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Connector {
    /// `&&`: the right side runs if the left succeeded.
    And,
    /// `||`: the right side runs if the left failed.
    Or,
}

/// Commands joined by `|` or `|&`, optionally negated with `!`.
#[derive(Debug)]
pub(super) struct Pipeline {
    /// Whether the pipeline is negated with `!`.
    pub(super) negated: bool,
    /// The commands, left to right.
    pub(super) commands: Vec<Command>,
}

/// One command of a pipeline.
#[derive(Debug)]
pub(super) enum Command {
    /// A simple command: assignments, words and redirections.
    Simple(Simple),
    /// A compound command with the redirections that follow it.
    Compound(Compound, Vec<Redirect>),
    /// A function definition.
    Function(Rc<Function>),
}

/// A function definition: `name() body` or `function name body`.
#[derive(Debug)]
pub(super) struct Function {
    /// The function's name.
    pub(super) name: String,
    /// The body, a compound command.
    pub(super) body: Command,
}

/// A simple command.
#[derive(Debug, Default)]
pub(super) struct Simple {
    /// The `NAME=value` words before the command name.
    pub(super) assigns: Vec<Assign>,
    /// The command name and its arguments.
    pub(super) words: Vec<Word>,
    /// The redirections, wherever they appeared.
    pub(super) redirects: Vec<Redirect>,
}

/// A variable assignment.
#[derive(Debug)]
pub(super) struct Assign {
    /// The variable name (with any array subscript).
    pub(super) name: String,
    /// The value.
    pub(super) value: AssignValue,
}

/// The value of an assignment.
#[derive(Debug)]
pub(super) enum AssignValue {
    /// `NAME=word`.
    Scalar(Word),
    /// `NAME=(word…)`.
    Array(Vec<Word>),
}

/// A compound command.
#[derive(Debug)]
pub(super) enum Compound {
    /// `( list )`.
    Subshell(List),
    /// `{ list; }`.
    Group(List),
    /// `(( expression ))`.
    Arith(Vec<Part>),
    /// `[[ expression ]]`.
    Cond(Vec<CondWord>),
    /// `if list; then list; [elif…] [else list;] fi`.
    If {
        /// The condition and body of the `if` and each `elif`.
        arms: Vec<(List, List)>,
        /// The `else` body.
        otherwise: Option<List>,
    },
    /// `while`/`until list; do list; done`.
    Loop {
        /// The condition.
        cond: List,
        /// The body.
        body: List,
    },
    /// `for`/`select name [in words]; do list; done`.
    For {
        /// The words after `in`, or `None` for the positional parameters.
        words: Option<Vec<Word>>,
        /// The body.
        body: List,
    },
    /// `for (( init; cond; step )); do list; done`.
    ForArith {
        /// The header's expressions.
        header: Vec<Part>,
        /// The body.
        body: List,
    },
    /// `case word in pattern) list;; … esac`.
    Case {
        /// The word matched against the patterns.
        subject: Word,
        /// The arms.
        arms: Vec<CaseArm>,
    },
}

/// One arm of a `case` command.
#[derive(Debug)]
pub(super) struct CaseArm {
    /// The patterns, which are not paths.
    pub(super) patterns: Vec<Word>,
    /// The body.
    pub(super) body: List,
}

/// A word inside `[[ … ]]`.
#[derive(Debug)]
pub(super) enum CondWord {
    /// An operand, checked like an argument.
    Operand(Word),
    /// The right side of `==`, `!=`, `=` or `=~`: a pattern, not a path.
    Pattern(Word),
}

/// A redirection.
#[derive(Debug)]
pub(super) struct Redirect {
    /// The fd prefix as written (`2`, `{name}`), if any.
    pub(super) fd: Option<String>,
    /// The operator.
    pub(super) op: RedirOp,
    /// The target word; for a here-document, its delimiter.
    pub(super) target: Word,
    /// The here-document body, filled in when the parser reaches it.
    pub(super) heredoc: Option<Rc<OnceCell<HereBody>>>,
}

/// A redirection operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RedirOp {
    /// `<`.
    In,
    /// `>`, `>>`, `>|`, `&>`, `&>>`.
    Out,
    /// `<>`.
    ReadWrite,
    /// `<&`: an fd or `-`.
    DupIn,
    /// `>&`: an fd, `-`, or a file.
    DupOut,
    /// `<<` and `<<-`.
    HereDoc,
    /// `<<<`.
    HereString,
}

/// The body of a here-document.
#[derive(Debug)]
pub(super) enum HereBody {
    /// A quoted delimiter: the body is plain data.
    Literal(String),
    /// An unquoted delimiter: expansions in the body run.
    Expanded(Vec<Part>),
}

/// A shell word.
#[derive(Debug, Default)]
pub(super) struct Word {
    /// The parts, in order.
    pub(super) parts: Vec<Part>,
}

/// A piece of a word.
#[derive(Debug)]
pub(super) enum Part {
    /// Literal text; `quoted` when it was quoted or escaped.
    Lit {
        /// The text, quotes removed.
        text: String,
        /// Whether the text was quoted (so not subject to globbing or tilde).
        quoted: bool,
    },
    /// A parameter expansion.
    Param(Param),
    /// `$( list )` or `` `list` ``.
    CommandSub(List),
    /// `$(( expression ))`.
    Arith(Vec<Part>),
    /// `<( list )` or `>( list )`.
    ProcessSub(List),
}

/// A parameter expansion: `$name`, `${name}`, `${name…}`.
#[derive(Debug)]
pub(super) struct Param {
    /// The parameter's name: an identifier, digits, or a special character.
    pub(super) name: String,
    /// What the braces add to the name.
    pub(super) form: ParamForm,
    /// Words inside the braces (defaults, patterns, subscripts), which may run code.
    pub(super) nested: Vec<Part>,
    /// Whether the expansion was inside double quotes.
    pub(super) quoted: bool,
}

/// The form of a parameter expansion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ParamForm {
    /// `$name` or `${name}`.
    Plain,
    /// `${#name}`: a length.
    Length,
    /// `${name:-word}` or `${name-word}`.
    Default,
    /// Anything else.
    Other,
}

impl Word {
    /// The text of a word made of one unquoted literal (keywords, names).
    pub(super) fn plain(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [
                Part::Lit {
                    text,
                    quoted: false,
                },
            ] => Some(text),
            _ => None,
        }
    }

    /// The quote-removed text of a word without expansions, and whether any of it was quoted.
    pub(super) fn literal(&self) -> Option<(String, bool)> {
        let mut out = String::new();
        let mut any_quoted = false;
        for part in &self.parts {
            let Part::Lit { text, quoted } = part else {
                return None;
            };
            out.push_str(text);
            any_quoted |= *quoted;
        }
        Some((out, any_quoted))
    }

    /// Whether the word has no parts at all.
    pub(super) fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }
}
