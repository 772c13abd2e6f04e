//! The permission rules the user writes (`[permissions] allow|ask|deny` in
//! `config.toml`), applied after the mode's matrix decided a call.
//!
//! A rule is `TOOL` (every call of that tool; `*` globs in the name, as in
//! `mcp__github__*`) or `TOOL(PATTERN)`:
//!
//! - `bash(PATTERN)`: PATTERN is split into words with shell-like quoting
//!   and matched word by word against the expanded words (argv) of each
//!   simple command the shell analysis parsed out of the call's command —
//!   never against the command's text. A final unquoted `*` word matches
//!   any remaining words (none too); an unquoted `*` inside a word matches
//!   any characters within that word.
//! - `TOOL(PATH)` for every other tool (`read`, `write`, `edit`, `ls`,
//!   `grep`, `find`): PATH with `~` for the home directory and relative
//!   paths under the workspace root, `*` matching within one path
//!   component and a `**` component matching any number of them. It is
//!   matched against the call's `path` argument as the kernel resolves it
//!   (every symlink followed: the canonical path), the workspace root when
//!   the call has none. For an allow rule, only PATH's anchor (the home
//!   directory; the workspace root) is resolved and the rest taken as
//!   written, so a symlink a command plants under it never moves what the
//!   rule covers; a deny or ask rule also covers what PATH resolves to now.
//!
//! Invariants:
//! - Deny rules win over everything, `full` included. Ask rules turn what
//!   the mode allows into a question. Allow rules answer a question the
//!   mode would ask, at the level an approval would get
//!   (`PermissionPolicy::approved_level`); a mode's deny stays.
//! - An allow rule decides a command only when it surely matches: every
//!   simple command of it matches some allow rule, the analysis saw all of
//!   it (parsed, within its caps, every command name known) and knows it
//!   stays in the workspace (a command's argv does not show its
//!   redirections, so an allow rule never lets one reach outside or an
//!   unknown place), and no word is unknown statically (`$VAR`, `$(…)`) or
//!   a file-name glob the shell would expand (such a word matches only a
//!   final `*`).
//! - A deny or ask rule applies when it may match: a word the analysis
//!   could not resolve (or a file-name glob) is taken to match whatever the
//!   rule has from there on, as long as the words before it match; a
//!   command the analysis could not parse or cut at its caps may match
//!   every `bash(…)` deny and ask rule. A path that cannot be resolved is
//!   matched as written (normalized), for deny and ask only.

use std::cell::OnceCell;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use keel_protocol::{IntentKind, IntentScope, PermissionRuleLists};
use keel_tools::Workspace;
use keel_tools::shell::{self, ShellAnalysis};
use serde_json::Value;

/// Most rules in one list (`allow`, `ask` or `deny`).
pub const MAX_RULES: usize = 256;
/// The longest rule, in bytes.
pub const MAX_RULE_BYTES: usize = 1024;
/// The longest command word a rule is matched against; a longer word is
/// taken as unknown (allow: no match; deny and ask: may match).
const MAX_WORD_CHARS: usize = 4096;

/// The list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuleList {
    /// `allow`.
    Allow,
    /// `ask`.
    Ask,
    /// `deny`.
    Deny,
}

impl RuleList {
    /// The list's key in `[permissions]`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleList::Allow => "allow",
            RuleList::Ask => "ask",
            RuleList::Deny => "deny",
        }
    }
}

impl fmt::Display for RuleList {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A rule that could not be read: which list, its index there, the rule
/// and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{list}[{index}] {rule:?}: {reason}")]
#[non_exhaustive]
pub struct RuleError {
    /// The list the rule is in.
    pub list: RuleList,
    /// Its index in that list, from 0.
    pub index: usize,
    /// The rule as written.
    pub rule: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The user's permission rules, parsed.
#[derive(Debug, Clone, Default)]
pub struct UserRules {
    lists: PermissionRuleLists,
    allow: Vec<Rule>,
    ask: Vec<Rule>,
    deny: Vec<Rule>,
}

impl UserRules {
    /// Parses every rule of `lists`; the first that cannot be read is the error.
    pub fn new(lists: PermissionRuleLists) -> Result<Self, RuleError> {
        let parse = |list: RuleList, rules: &[String]| {
            if let Some(text) = rules.get(MAX_RULES) {
                return Err(RuleError {
                    list,
                    index: MAX_RULES,
                    rule: text.chars().take(80).collect(),
                    reason: format!("a list holds at most {MAX_RULES} rules"),
                });
            }
            rules
                .iter()
                .enumerate()
                .map(|(index, text)| {
                    if text.len() > MAX_RULE_BYTES {
                        return Err(RuleError {
                            list,
                            index,
                            rule: text.chars().take(80).collect(),
                            reason: format!("a rule is at most {MAX_RULE_BYTES} bytes long"),
                        });
                    }
                    Rule::parse(list, index, text).map_err(|reason| RuleError {
                        list,
                        index,
                        rule: text.clone(),
                        reason,
                    })
                })
                .collect::<Result<Vec<Rule>, RuleError>>()
        };
        Ok(Self {
            allow: parse(RuleList::Allow, &lists.allow)?,
            ask: parse(RuleList::Ask, &lists.ask)?,
            deny: parse(RuleList::Deny, &lists.deny)?,
            lists,
        })
    }

    /// The rules as written.
    pub fn lists(&self) -> &PermissionRuleLists {
        &self.lists
    }

    /// Whether there is no rule.
    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// What the rules make of a call the mode's matrix decided as
    /// `matrix`: a deny rule refuses it, an ask rule makes an allow a
    /// question, an allow rule makes a question an allow; `None` leaves
    /// the matrix's decision. Each effect carries its reason, naming the
    /// rule.
    pub(crate) fn effect(&self, matrix: Matrix, call: &CallFacts<'_>) -> Option<RuleEffect> {
        if self.is_empty() {
            return None;
        }
        if let Some(rule) = self.deny.iter().find(|rule| rule.may_match(call)) {
            return Some(RuleEffect::Deny(format!("denied by rule {}", rule.label())));
        }
        match matrix {
            Matrix::Allow => self
                .ask
                .iter()
                .find(|rule| rule.may_match(call))
                .map(|rule| {
                    RuleEffect::Ask(format!(
                        "`{}` is asked about by rule {}",
                        call.tool,
                        rule.label()
                    ))
                }),
            Matrix::Ask if self.ask.iter().any(|rule| rule.may_match(call)) => None,
            Matrix::Ask => self
                .allowed_by(call)
                .map(|labels| RuleEffect::Allow(format!("allowed by rule {}", labels.join(", ")))),
            Matrix::Deny => None,
        }
    }

    /// The allow rules that surely cover the call, when they do.
    fn allowed_by(&self, call: &CallFacts<'_>) -> Option<Vec<String>> {
        let tool_rules: Vec<&Rule> = self
            .allow
            .iter()
            .filter(|rule| rule.tool_matches(call.tool))
            .collect();
        if let Some(whole) = tool_rules.iter().find(|rule| rule.pattern.is_none()) {
            return Some(vec![whole.label()]);
        }
        let (commands, paths): (Vec<&Rule>, Vec<&Rule>) = tool_rules
            .into_iter()
            .partition(|rule| matches!(rule.pattern, Some(Pattern::Words { .. })));
        if let Some(rule) = paths.iter().find(|rule| rule.surely_matches_path(call)) {
            return Some(vec![rule.label()]);
        }
        if commands.is_empty() {
            return None;
        }
        let analysis = call.analysis()?;
        // A command's words do not show the variables it sets for a program
        // (`GIT_CONFIG_*`, `PATH`, `LD_PRELOAD`) nor its redirections: a
        // command setting one never matches an allow rule, and one with a
        // redirection only while it stays plain shell in the workspace, so
        // that the network or a `.git` write it is allowed comes from words
        // the rule names (`git push`, `git commit`), never from `>
        // /dev/tcp/…` or `>> .git/config`.
        let command = call.arguments.get("command").and_then(Value::as_str);
        let assigns = command.is_none_or(assigns_a_variable);
        let redirects = command.is_none_or(|command| command.contains(['<', '>']));
        let whole = !assigns
            && !cut(analysis)
            && match (analysis.kind, analysis.scope) {
                (IntentKind::Unknown, _) => false,
                (_, IntentScope::Workspace) if !redirects => true,
                (_, IntentScope::Metadata) if !redirects => true,
                (IntentKind::Shell, IntentScope::Workspace) => true,
                _ => false,
            };
        if !whole {
            return None;
        }
        let mut labels: Vec<String> = Vec::new();
        for words in &analysis.commands {
            let rule = commands.iter().find(|rule| match &rule.pattern {
                Some(Pattern::Words {
                    words: pattern,
                    rest,
                }) => surely_matches_words(pattern, *rest, words),
                _ => false,
            })?;
            let label = rule.label();
            if !labels.contains(&label) {
                labels.push(label);
            }
        }
        Some(labels)
    }
}

/// The mode's matrix decision a rule may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Matrix {
    Allow,
    Ask,
    Deny,
}

/// What the rules did to a call, with the reason naming the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RuleEffect {
    /// A deny rule refused it.
    Deny(String),
    /// An ask rule made an allowed call a question.
    Ask(String),
    /// Allow rules answered a question the mode would ask.
    Allow(String),
}

/// What the rules look at in one call; the analysis and the resolved path
/// are computed when a rule first needs them.
pub(crate) struct CallFacts<'a> {
    tool: &'a str,
    arguments: &'a Value,
    workspace: &'a Workspace,
    home: Option<PathBuf>,
    analysis: OnceCell<Option<ShellAnalysis>>,
    path: OnceCell<Option<Resolved>>,
}

/// A call's `path` as the kernel resolves it, or as written when it cannot.
enum Resolved {
    Canonical(PathBuf),
    Written(PathBuf),
}

impl<'a> CallFacts<'a> {
    /// The call of `tool` with `arguments`, in `workspace`, `home` being
    /// what `~` in a rule stands for.
    pub(crate) fn new(
        tool: &'a str,
        arguments: &'a Value,
        workspace: &'a Workspace,
        home: Option<PathBuf>,
    ) -> Self {
        Self {
            tool,
            arguments,
            workspace,
            home: home.filter(|home| home.is_absolute()),
            analysis: OnceCell::new(),
            path: OnceCell::new(),
        }
    }

    /// The shell analysis of the call's `command`, when it has one.
    fn analysis(&self) -> Option<&ShellAnalysis> {
        self.analysis
            .get_or_init(|| {
                let command = self.arguments.get("command")?.as_str()?;
                Some(shell::analyze(command, self.workspace.root(), None))
            })
            .as_ref()
    }

    /// The call's `path` (the workspace root when it has none).
    fn path(&self) -> Option<&Resolved> {
        self.path
            .get_or_init(|| {
                let written = match self.arguments.get("path") {
                    None | Some(Value::Null) => ".",
                    Some(Value::String(path)) => path.as_str(),
                    Some(_) => return None,
                };
                Some(match self.workspace.allowing_outside().resolve(written) {
                    Ok(canonical) => Resolved::Canonical(canonical),
                    Err(_) => Resolved::Written(shell::paths::normalize(
                        &self.workspace.root().join(written),
                    )),
                })
            })
            .as_ref()
    }
}

/// Whether the analysis was cut at its caps or did not parse the command.
fn cut(analysis: &ShellAnalysis) -> bool {
    analysis.commands.is_empty()
        || analysis.commands.len() >= shell::MAX_COMMANDS
        || analysis.targets.len() >= shell::MAX_TARGETS
        || analysis
            .commands
            .iter()
            .any(|words| words.len() >= shell::MAX_WORDS)
}

/// One rule, parsed.
#[derive(Debug, Clone)]
struct Rule {
    list: RuleList,
    index: usize,
    text: String,
    tool: Vec<Piece>,
    pattern: Option<Pattern>,
}

#[derive(Debug, Clone)]
enum Pattern {
    /// `bash(…)`: the words, and whether a final `*` matches the rest.
    Words { words: Vec<Vec<Piece>>, rest: bool },
    /// Any other tool's `(…)`: a path as written.
    Path(String),
}

/// A piece of a glob: a character or `*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    Char(char),
    Star,
}

impl Rule {
    fn parse(list: RuleList, index: usize, text: &str) -> Result<Rule, String> {
        let trimmed = text.trim();
        let (tool, pattern) = match trimmed.split_once('(') {
            None => (trimmed, None),
            Some((tool, rest)) => {
                let inner = rest
                    .strip_suffix(')')
                    .ok_or("a rule with `(` ends with `)`")?;
                (tool, Some(inner))
            }
        };
        if tool.is_empty() {
            return Err("it names no tool (`TOOL` or `TOOL(PATTERN)`)".into());
        }
        if let Some(bad) = tool
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*')))
        {
            return Err(format!(
                "{bad:?} cannot be in a tool name (letters, digits, `_`, `-`, `.`, `*`)"
            ));
        }
        let pattern = match pattern {
            None => None,
            Some(inner) if inner.trim().is_empty() => {
                return Err("the pattern in `(…)` is empty".into());
            }
            Some(_)
                if tool != "bash"
                    && glob(&tool.chars().map(glob_piece).collect::<Vec<_>>(), "bash") =>
            {
                return Err(
                    "a command pattern is written `bash(…)`, with the tool named exactly".into(),
                );
            }
            Some(inner) if tool == "bash" => {
                let mut words = split_words(inner)?;
                let rest = words.last() == Some(&vec![Piece::Star]);
                if rest {
                    words.pop();
                }
                Some(Pattern::Words { words, rest })
            }
            Some(inner) => {
                let inner = inner.trim();
                if inner.contains('\0') {
                    return Err("a path cannot hold a NUL character".into());
                }
                if inner.starts_with('~') && !(inner == "~" || inner.starts_with("~/")) {
                    return Err("only `~` and `~/…` name a home directory".into());
                }
                Some(Pattern::Path(inner.to_owned()))
            }
        };
        Ok(Rule {
            list,
            index,
            text: text.to_owned(),
            tool: tool.chars().map(glob_piece).collect(),
            pattern,
        })
    }

    /// `deny[0] "bash(rm *)"`.
    fn label(&self) -> String {
        format!("{}[{}] {:?}", self.list, self.index, self.text)
    }

    fn tool_matches(&self, tool: &str) -> bool {
        glob(&self.tool, tool)
    }

    /// Whether the rule may match the call (for deny and ask).
    fn may_match(&self, call: &CallFacts<'_>) -> bool {
        if !self.tool_matches(call.tool) {
            return false;
        }
        match &self.pattern {
            None => true,
            Some(Pattern::Words { words, rest }) => match call.analysis() {
                None => false,
                Some(analysis) if cut(analysis) => true,
                Some(analysis) => analysis
                    .commands
                    .iter()
                    .any(|argv| may_match_words(words, *rest, argv)),
            },
            Some(Pattern::Path(pattern)) => match call.path() {
                None => false,
                Some(Resolved::Canonical(path) | Resolved::Written(path)) => {
                    path_matches(pattern, path, call, Anchor::Lexical)
                        || path_matches(pattern, path, call, Anchor::Physical)
                }
            },
        }
    }

    /// Whether a path rule matches the call's canonical path (for allow).
    fn surely_matches_path(&self, call: &CallFacts<'_>) -> bool {
        match (&self.pattern, call.path()) {
            (Some(Pattern::Path(pattern)), Some(Resolved::Canonical(path))) => {
                path_matches(pattern, path, call, Anchor::Lexical)
            }
            _ => false,
        }
    }
}

fn glob_piece(c: char) -> Piece {
    match c {
        '*' => Piece::Star,
        c => Piece::Char(c),
    }
}

/// Splits a `bash(…)` pattern into words: blanks separate, `'…'` is
/// literal, `"…"` is literal but for `\"` and `\\`, `\` outside quotes
/// escapes the next character. A quoted or escaped `*` is a `*`, not a glob.
fn split_words(text: &str) -> Result<Vec<Vec<Piece>>, String> {
    let mut words = Vec::new();
    let mut word: Option<Vec<Piece>> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let current = word.get_or_insert_with(Vec::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => current.push(Piece::Char(c)),
                        None => return Err("a `'` is not closed".into()),
                    }
                }
            }
            '"' => {
                let current = word.get_or_insert_with(Vec::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => current.push(Piece::Char(c)),
                            Some(c) => {
                                current.push(Piece::Char('\\'));
                                current.push(Piece::Char(c));
                            }
                            None => return Err("a `\"` is not closed".into()),
                        },
                        Some(c) => current.push(Piece::Char(c)),
                        None => return Err("a `\"` is not closed".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => word.get_or_insert_with(Vec::new).push(Piece::Char(c)),
                None => return Err("it ends with a lone `\\`".into()),
            },
            c => word.get_or_insert_with(Vec::new).push(glob_piece(c)),
        }
    }
    words.extend(word);
    if words.is_empty() {
        return Err("the command pattern has no word".into());
    }
    Ok(words)
}

/// Whether `text` matches the glob `pattern` (`*`: any characters).
fn glob(pattern: &[Piece], text: &str) -> bool {
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(Piece::Star) => {
                back = Some((p, t));
                p += 1;
            }
            Some(Piece::Char(c)) if text.get(t) == Some(c) => {
                p += 1;
                t += 1;
            }
            _ => match back {
                Some((star, from)) => {
                    p = star + 1;
                    t = from + 1;
                    back = Some((star, from + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..]
        .iter()
        .all(|piece| *piece == Piece::Star)
}

/// Whether an analysis word is known statically (no `\0` marker).
fn known(word: &str) -> bool {
    !word.contains('\0')
}

/// Whether the shell would expand the word to file names (the analysis
/// words show no quoting, so a quoted `*` counts too: the safe side).
fn file_glob(word: &str) -> bool {
    word.contains(['*', '?'])
        || word
            .find('[')
            .is_some_and(|open| word.get(open + 1..).is_some_and(|rest| rest.contains(']')))
}

/// Whether `argv` surely matches the pattern: every word known, none a
/// file-name glob unless the final `*` takes it.
fn surely_matches_words(pattern: &[Vec<Piece>], rest: bool, argv: &[String]) -> bool {
    for (index, word) in argv.iter().enumerate() {
        let Some(piece) = pattern.get(index) else {
            return rest
                && argv[index..]
                    .iter()
                    .all(|word| known(word) && !runs_a_program(word));
        };
        if !known(word)
            || file_glob(word)
            || (piece.contains(&Piece::Star) && runs_a_program(word))
            || !glob(piece, word)
        {
            return false;
        }
    }
    argv.len() == pattern.len()
}

/// Options that make a program run another command of their value
/// (`git fetch --upload-pack=…`, `tar --checkpoint-action=exec=…`): a `*`
/// of an allow rule does not take them; the rule must name them.
const PROGRAM_OPTIONS: [&str; 12] = [
    "--upload-pack",
    "--receive-pack",
    "--exec",
    "--checkpoint-action",
    "--to-command",
    "--use-compress-program",
    "--compress-program",
    "--rsh",
    "--rsync-path",
    "--config",
    "--run",
    "--command",
];

/// Whether `word` is (or starts with) a [`PROGRAM_OPTIONS`] option, or is
/// too long to match in bounded time.
fn runs_a_program(word: &str) -> bool {
    word.chars().count() > MAX_WORD_CHARS
        || PROGRAM_OPTIONS.iter().any(|option| {
            word.strip_prefix(option)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
        })
}

/// Whether a command's text has a word that sets a variable (`NAME=…`),
/// read as the shell splits words at blanks — on the safe side: a quoted
/// `a=b` counts too.
fn assigns_a_variable(command: &str) -> bool {
    command
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')'))
        .any(|word| {
            let name = word.split_once('=').map_or("", |(name, _)| name);
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        })
}

/// Whether `argv` may match the pattern: the words up to the first one
/// not known statically (or a file-name glob) match.
fn may_match_words(pattern: &[Vec<Piece>], rest: bool, argv: &[String]) -> bool {
    // A program named by its path (`/bin/rm`) is the program: matched by
    // its name too.
    if let Some((first, others)) = argv.split_first()
        && let Some((_, name)) = first.rsplit_once('/')
        && !name.is_empty()
    {
        let mut by_name = vec![name.to_owned()];
        by_name.extend(others.iter().cloned());
        if may_match_words_as_given(pattern, rest, &by_name) {
            return true;
        }
    }
    may_match_words_as_given(pattern, rest, argv)
}

fn may_match_words_as_given(pattern: &[Vec<Piece>], rest: bool, argv: &[String]) -> bool {
    for (index, word) in argv.iter().enumerate() {
        if !known(word) || file_glob(word) || word.chars().count() > MAX_WORD_CHARS {
            return true;
        }
        match pattern.get(index) {
            None => return rest,
            Some(piece) if !glob(piece, word) => return false,
            Some(_) => {}
        }
    }
    argv.len() == pattern.len()
}

/// One component of a path pattern.
enum Part {
    /// `**`: any number of components.
    Any,
    /// A component, `*` matching within it.
    One(Vec<Piece>),
}

/// How a path rule's literal part is placed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Anchor {
    /// Its anchor (the home directory, or the workspace root, which is
    /// canonical) resolved, the rest taken as written: what an allow rule
    /// means. A symlink a command planted under the anchor never moves
    /// what the rule covers (a `notes` made a link to `~/.ssh` does not
    /// make `write(notes/*)` cover `~/.ssh`).
    Lexical,
    /// Resolved as it is now, every symlink followed: what a deny or ask
    /// rule also covers (`~/.ssh` being a link to elsewhere).
    Physical,
}

/// Whether the absolute `path` matches the path `pattern`: `~` expanded
/// with the call's home (no home: a `~` rule matches nothing), a relative
/// pattern under the workspace root, its literal leading components
/// placed as `anchor` says.
fn path_matches(pattern: &str, path: &Path, call: &CallFacts<'_>, anchor: Anchor) -> bool {
    let absolute = match pattern.strip_prefix('~') {
        Some(rest) => match &call.home {
            Some(home) => {
                let home = std::fs::canonicalize(home).unwrap_or_else(|_| home.clone());
                home.join(rest.trim_start_matches('/'))
            }
            None => return false,
        },
        None => call.workspace.root().join(pattern),
    };
    let normalized = shell::paths::normalize(&absolute);
    let mut literal = PathBuf::from("/");
    let mut parts = Vec::new();
    for component in normalized.components() {
        let Component::Normal(name) = component else {
            continue;
        };
        let name = name.to_string_lossy();
        if parts.is_empty() && !name.contains('*') {
            literal.push(name.as_ref());
        } else if name == "**" {
            parts.push(Part::Any);
        } else {
            parts.push(Part::One(name.chars().map(glob_piece).collect()));
        }
    }
    let literal = match anchor {
        Anchor::Lexical => literal,
        Anchor::Physical => resolve_now(&literal),
    };
    let Ok(rest) = path.strip_prefix(&literal) else {
        return false;
    };
    let names: Vec<String> = rest
        .components()
        .map(|component| component.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts_match(&parts, &names)
}

/// Whether `names` match `parts`, in time bounded by their product (a
/// project's rule cannot make it explode).
fn parts_match(parts: &[Part], names: &[String]) -> bool {
    // `done[j]`: the parts so far match the first `j` names.
    let mut done = vec![false; names.len() + 1];
    done[0] = true;
    for part in parts {
        let mut next = vec![false; names.len() + 1];
        for j in 0..=names.len() {
            next[j] = match part {
                Part::Any => done[j] || (j > 0 && next[j - 1]),
                Part::One(piece) => j > 0 && done[j - 1] && glob(piece, &names[j - 1]),
            };
        }
        done = next;
    }
    done[names.len()]
}

/// An absolute path with its longest existing prefix resolved physically
/// (the rest kept as it is).
fn resolve_now(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |acc, part| acc.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> UserRules {
        let owned = |list: &[&str]| list.iter().map(|rule| (*rule).to_owned()).collect();
        let mut lists = PermissionRuleLists::default();
        lists.allow = owned(allow);
        lists.ask = owned(ask);
        lists.deny = owned(deny);
        UserRules::new(lists).unwrap()
    }

    fn decide(
        rules: &UserRules,
        ws: &Workspace,
        tool: &str,
        arguments: Value,
    ) -> Option<RuleEffect> {
        let call = CallFacts::new(tool, &arguments, ws, None);
        rules.effect(Matrix::Ask, &call)
    }

    #[test]
    fn a_rule_that_cannot_be_read_names_its_list_and_index() {
        let mut lists = PermissionRuleLists::default();
        lists.deny = vec!["bash(rm *)".into(), "bash(echo 'x)".into()];
        let error = UserRules::new(lists).unwrap_err();
        assert_eq!((error.list, error.index), (RuleList::Deny, 1));
        assert_eq!(
            error.to_string(),
            "deny[1] \"bash(echo 'x)\": a `'` is not closed"
        );
        for bad in [
            "",
            "(x)",
            "read(",
            "read()",
            "re ad",
            "read(~bob/x)",
            "ba*(rm *)",
        ] {
            let mut lists = PermissionRuleLists::default();
            lists.allow = vec![bad.into()];
            assert!(UserRules::new(lists).is_err(), "{bad}");
        }
    }

    #[test]
    fn words_match_word_by_word_and_a_final_star_takes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let rules = rules(
            &["bash(git commit *)", "bash(cargo t?st)", "bash(cat n*.txt)"],
            &[],
            &[],
        );
        let allowed = |command: &str| {
            matches!(
                decide(&rules, &ws, "bash", json!({ "command": command })),
                Some(RuleEffect::Allow(_))
            )
        };
        assert!(allowed("git commit"));
        assert!(allowed("git commit -m 'fix it'"));
        assert!(allowed("git commit -m x && git commit --amend"));
        assert!(!allowed("git commit -m x; rm -rf ~"));
        assert!(!allowed("git push"));
        assert!(!allowed("git commit -m $MESSAGE"));
        // A final `*` takes globs; a word the shell expands matches nothing else.
        assert!(allowed("git commit -m *.txt"));
        assert!(allowed("cat notes.txt"));
        assert!(!allowed("cat n*.txt"));
        // `?` in a pattern is a plain character.
        assert!(!allowed("cargo test"));
        assert!(!allowed("$X commit -m x"));
    }

    #[test]
    fn a_deny_rule_takes_what_may_match() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let rules = rules(&["bash"], &[], &["bash(rm -rf *)"]);
        let denied = |command: &str| {
            matches!(
                decide(&rules, &ws, "bash", json!({ "command": command })),
                Some(RuleEffect::Deny(reason)) if reason == "denied by rule deny[0] \"bash(rm -rf *)\""
            )
        };
        assert!(denied("echo hi; rm -rf /"));
        assert!(denied("rm -rf"));
        assert!(denied("rm $FLAGS x"));
        assert!(denied("X=rm; $X -rf y"));
        assert!(!denied("rm -r x"));
        assert!(!denied("echo rm -rf /"));
    }

    #[test]
    fn path_patterns_glob_by_component() {
        let parts = |pattern: &str| -> Vec<Part> {
            pattern
                .split('/')
                .map(|name| match name {
                    "**" => Part::Any,
                    name => Part::One(name.chars().map(glob_piece).collect()),
                })
                .collect()
        };
        let names = |path: &str| -> Vec<String> { path.split('/').map(str::to_owned).collect() };
        assert!(parts_match(&parts("**"), &names("a/b/c")));
        assert!(parts_match(&parts("*.rs"), &names("main.rs")));
        assert!(!parts_match(&parts("*.rs"), &names("src/main.rs")));
        assert!(parts_match(&parts("**/*.rs"), &names("src/main.rs")));
        assert!(parts_match(&parts("**/*.rs"), &names("main.rs")));
        assert!(!parts_match(&parts("src/*"), &names("src/a/b")));
    }
}
