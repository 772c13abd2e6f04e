//! Word expansion, as far as it can be done without running anything.
//!
//! A word becomes zero or more [`Field`]s the way bash would produce them:
//! brace expansion first (`{a,b}`, `{1..3}`), then tilde, parameter and
//! arithmetic expansion, then quote removal; globbing is recorded, not
//! performed (the resolver does that against the file system). Values that
//! cannot be known statically (`$HOME`, `$(…)`) end the static text: the
//! field keeps the prefix before them and the reason. Nothing here touches
//! the file system.
//!
//! Known values: `$?`, `$#`, `$$`, `$!`, `$-`, `${#x}` and `$((…))` are
//! numbers or flags (never `/` or `..`), `<(…)` is `/dev/fd/N`, `$PWD` is the
//! tracked directory when there is exactly one, `$TMPDIR` is the private
//! temp dir, and positional parameters are known when the analysis bound
//! them (`bash -c 'script' name args…`, a call of a function defined in the
//! command, `set -- …`). A positional parameter with an unknown value that
//! forms a whole word is "opaque": a value given elsewhere, not a path.

use super::ast::{ParamForm, Part, Word};

/// Most fields one word may expand to before the analysis gives up on it.
const MAX_FIELDS: usize = 64;

/// Characters that make an unquoted expansion split or glob.
const SPLITTING: &[char] = &[' ', '\t', '\n', '*', '?', '['];

/// Characters escaped in a glob pattern when they are literal.
const GLOB_SPECIAL: &[char] = &['*', '?', '[', ']', '{', '}', '\\', '!'];

/// The positional parameters, when the analysis knows them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Args {
    /// `$0` and `$1…`.
    Known {
        /// `$0`.
        zero: String,
        /// `$1`, `$2`, ….
        rest: Vec<String>,
    },
    /// Set by something the analysis cannot see.
    Unknown,
}

/// What the expansion needs to know about its surroundings.
#[derive(Debug)]
pub(super) struct ExpandEnv<'a> {
    /// `$PWD`, when it has exactly one known value.
    pub(super) pwd: Option<&'a str>,
    /// `$TMPDIR`, when known.
    pub(super) tmpdir: Option<&'a str>,
    /// The positional parameters.
    pub(super) args: &'a Args,
    /// Whether `IFS` may differ from its default.
    pub(super) ifs_changed: bool,
}

/// One field a word expands to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Field {
    /// The static text: the whole value, or the prefix before the unknown part.
    pub(super) text: String,
    /// Why the value is not statically known, when it is not.
    pub(super) unknown: Option<String>,
    /// Where globbing starts: the byte offset in `text` of the first
    /// unquoted `*`, `?` or `[`, and the pattern with literal characters escaped.
    pub(super) glob: Option<(usize, String)>,
    /// Whether the field starts with an unquoted `~` (a home directory).
    pub(super) home: bool,
    /// An unknown positional parameter forming a whole word: not a path.
    pub(super) opaque: bool,
}

impl Field {
    /// A field with statically known text, no globbing and no tilde.
    pub(super) fn plain(text: &str) -> Field {
        Field {
            text: text.to_owned(),
            ..Field::default()
        }
    }

    /// The word as far as it is known: its text, followed by `\u{0}?` when
    /// part of it is not known statically (a NUL cannot occur in a word).
    pub(super) fn word(&self) -> String {
        match self.known() {
            Some(text) => text.to_owned(),
            None => format!("{}\u{0}?", self.text),
        }
    }

    /// The text when the value is fully known.
    pub(super) fn known(&self) -> Option<&str> {
        (self.unknown.is_none() && !self.opaque).then_some(self.text.as_str())
    }

    /// The text when it is fully known and bash passes it on unchanged.
    pub(super) fn literal(&self) -> Option<&str> {
        self.known().filter(|_| self.glob.is_none() && !self.home)
    }

    /// How to name this field in a reason.
    pub(super) fn describe(&self) -> String {
        match &self.unknown {
            Some(reason) => reason.clone(),
            None => format!("`{}`", self.text),
        }
    }
}

/// A character with its quoting, an empty quoted string, or an expansion,
/// after flattening a word.
#[derive(Debug, Clone, Copy)]
enum Atom<'w> {
    Char(char, bool),
    EmptyQuotes,
    Part(&'w Part),
}

/// Expands a command word or argument into fields.
pub(super) fn expand_word(word: &Word, env: &ExpandEnv<'_>) -> Vec<Field> {
    let atoms = flatten(word);
    let mut variants = Vec::new();
    if !brace_expand(atoms, &mut variants) {
        return vec![Field {
            unknown: Some("a brace expansion produces too many words".to_owned()),
            ..Field::default()
        }];
    }
    variants
        .iter()
        .flat_map(|atoms| evaluate(atoms, env))
        .collect()
}

/// Expands an assignment value or another word that is not split: one field.
pub(super) fn expand_value(word: &Word, env: &ExpandEnv<'_>) -> Field {
    let atoms = flatten(word);
    let mut field = evaluate(&atoms, env).into_iter().next().unwrap_or_default();
    field.glob = None;
    field.opaque = false;
    field
}

/// Flattens a word's literal parts into characters.
fn flatten(word: &Word) -> Vec<Atom<'_>> {
    let mut atoms = Vec::new();
    for part in &word.parts {
        match part {
            Part::Lit { text, quoted: true } if text.is_empty() => atoms.push(Atom::EmptyQuotes),
            Part::Lit { text, quoted } => {
                atoms.extend(text.chars().map(|c| Atom::Char(c, *quoted)))
            }
            other => atoms.push(Atom::Part(other)),
        }
    }
    atoms
}

/// Performs brace expansion; `false` when it would produce too many words.
fn brace_expand<'w>(atoms: Vec<Atom<'w>>, out: &mut Vec<Vec<Atom<'w>>>) -> bool {
    let mut work = vec![atoms];
    while let Some(atoms) = work.pop() {
        let Some(brace) = find_brace(&atoms) else {
            out.push(atoms);
            continue;
        };
        let prefix = atoms.get(..brace.open).unwrap_or_default();
        let suffix = atoms.get(brace.close + 1..).unwrap_or_default();
        // Pushed in reverse so that words come out in order.
        for alternative in brace.alternatives.into_iter().rev() {
            let mut combined = prefix.to_vec();
            combined.extend(alternative);
            combined.extend_from_slice(suffix);
            work.push(combined);
        }
        if out.len() + work.len() > MAX_FIELDS {
            return false;
        }
    }
    true
}

/// An expandable brace: its bounds and its alternatives.
struct Brace<'w> {
    open: usize,
    close: usize,
    alternatives: Vec<Vec<Atom<'w>>>,
}

/// The leftmost expandable brace (`{a,b}` or `{1..3}`), in one pass.
fn find_brace<'w>(atoms: &[Atom<'w>]) -> Option<Brace<'w>> {
    // Open braces with the top-level commas seen inside each.
    let mut stack: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut best: Option<Brace<'w>> = None;
    for (index, atom) in atoms.iter().enumerate() {
        match atom {
            Atom::Char('{', false) => stack.push((index, Vec::new())),
            Atom::Char(',', false) => {
                if let Some((_, commas)) = stack.last_mut() {
                    commas.push(index);
                }
            }
            Atom::Char('}', false) => {
                let Some((open, commas)) = stack.pop() else {
                    continue;
                };
                if best.as_ref().is_some_and(|best| best.open < open) {
                    continue;
                }
                if let Some(alternatives) = brace_alternatives(atoms, open, index, &commas) {
                    best = Some(Brace {
                        open,
                        close: index,
                        alternatives,
                    });
                }
            }
            _ => {}
        }
    }
    best
}

/// The alternatives of the brace pair `open..=close`, if it expands.
fn brace_alternatives<'w>(
    atoms: &[Atom<'w>],
    open: usize,
    close: usize,
    commas: &[usize],
) -> Option<Vec<Vec<Atom<'w>>>> {
    if commas.is_empty() {
        let inner = atoms.get(open + 1..close)?;
        // Sequence expressions are short; longer text is not one.
        let items = sequence(inner).filter(|_| inner.len() <= 48)?;
        return Some(
            items
                .into_iter()
                .map(|item| item.chars().map(|c| Atom::Char(c, true)).collect())
                .collect(),
        );
    }
    let mut bounds = vec![open];
    bounds.extend(commas);
    bounds.push(close);
    Some(
        bounds
            .windows(2)
            .map(|pair| match pair {
                [a, b] => atoms.get(a + 1..*b).unwrap_or_default().to_vec(),
                _ => Vec::new(),
            })
            .collect(),
    )
}

/// The items of a `{a..b[..step]}` sequence expression, if `inner` is one.
///
/// A sequence longer than [`MAX_FIELDS`] yields more than that many (empty)
/// items, which makes the expansion give up.
fn sequence(inner: &[Atom<'_>]) -> Option<Vec<String>> {
    let text: String = inner
        .iter()
        .map(|atom| match atom {
            Atom::Char(c, false) => Some(*c),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let mut pieces = text.split("..");
    let (start, end) = (pieces.next()?, pieces.next()?);
    let step: i64 = match pieces.next() {
        Some(step) => step.parse().ok()?,
        None => 1,
    };
    if pieces.next().is_some() {
        return None;
    }
    let step = step.unsigned_abs().max(1);
    numeric_sequence(start, end, step).or_else(|| letter_sequence(start, end, step))
}

/// `{1..10}`, `{-3..3..2}`, `{01..10}`.
fn numeric_sequence(start: &str, end: &str, step: u64) -> Option<Vec<String>> {
    let (a, b) = (start.parse::<i64>().ok()?, end.parse::<i64>().ok()?);
    let count = (a.abs_diff(b) / step).saturating_add(1);
    if count > MAX_FIELDS as u64 {
        return Some(vec![String::new(); MAX_FIELDS + 1]);
    }
    let padded = [start, end]
        .iter()
        .any(|s| s.trim_start_matches('-').starts_with('0') && s.len() > 1);
    let width = if padded {
        start.len().max(end.len())
    } else {
        0
    };
    let step = if a <= b {
        i128::from(step)
    } else {
        -i128::from(step)
    };
    Some(
        (0..i128::from(count))
            .map(|i| format!("{:0width$}", i128::from(a) + i * step))
            .collect(),
    )
}

/// `{a..e}`.
fn letter_sequence(start: &str, end: &str, step: u64) -> Option<Vec<String>> {
    let (mut a, mut b) = (start.chars(), end.chars());
    let (Some(x), None, Some(y), None) = (a.next(), a.next(), b.next(), b.next()) else {
        return None;
    };
    if !x.is_ascii_alphabetic() || !y.is_ascii_alphabetic() {
        return None;
    }
    let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
    let step = usize::try_from(step).ok()?;
    Some((lo..=hi).step_by(step).map(String::from).collect())
}

/// Builds one field, character by character.
#[derive(Debug, Default)]
struct Builder {
    field: Field,
    pattern: String,
    /// An unquoted `[` not yet closed: its offsets in the text and the pattern.
    bracket: Option<(usize, usize)>,
}

impl Builder {
    /// Appends a character, tracking globbing.
    fn push(&mut self, c: char, quoted: bool) {
        if self.field.unknown.is_some() {
            return;
        }
        match c {
            '*' | '?' if !quoted => self.glob_at(self.field.text.len()),
            '[' if !quoted && self.bracket.is_none() => {
                self.bracket = Some((self.field.text.len(), self.pattern.len()));
            }
            ']' if !quoted && self.bracket.is_some() => {
                if let Some((at, _)) = self.bracket.take() {
                    self.glob_at(at);
                }
            }
            _ if GLOB_SPECIAL.contains(&c) => self.pattern.push('\\'),
            _ => {}
        }
        self.pattern.push(c);
        self.field.text.push(c);
    }

    /// Records that globbing starts at `at` (the earliest wins).
    fn glob_at(&mut self, at: usize) {
        match &mut self.field.glob {
            Some((first, _)) => *first = (*first).min(at),
            None => self.field.glob = Some((at, String::new())),
        }
    }

    /// Appends text.
    fn push_str(&mut self, text: &str, quoted: bool) {
        text.chars().for_each(|c| self.push(c, quoted));
    }

    /// Marks the rest of the value unknown.
    fn unknown(&mut self, reason: String) {
        if self.field.unknown.is_none() {
            self.field.unknown = Some(reason);
        }
    }

    /// The field.
    fn finish(mut self) -> Field {
        // A `[` without its `]` is an ordinary character.
        if let Some((_, in_pattern)) = self.bracket.take() {
            self.pattern.insert(in_pattern, '\\');
        }
        if let Some((_, pattern)) = self.field.glob.as_mut() {
            *pattern = self.pattern;
        }
        self.field
    }
}

/// What a parameter expands to.
enum Value {
    /// One known text.
    Text(String),
    /// Several known words (`"$@"`).
    Many(Vec<String>),
    /// A positional parameter with an unknown value.
    Opaque,
    /// Not statically known, with the reason.
    Unknown(String),
}

/// Evaluates one brace-expanded word.
///
/// Like bash, a word that expands to nothing and had no quotes at all
/// (`$1` with no arguments) produces no field.
fn evaluate(atoms: &[Atom<'_>], env: &ExpandEnv<'_>) -> Vec<Field> {
    let unquoted_param = match atoms {
        [Atom::Part(Part::Param(param))] => Some(param),
        [Atom::EmptyQuotes, Atom::Part(Part::Param(param))] => Some(param),
        _ => None,
    };
    if let Some(param) = unquoted_param {
        match param_value(param, env) {
            Value::Opaque => {
                return vec![Field {
                    opaque: true,
                    ..Field::default()
                }];
            }
            Value::Many(words) => {
                return words
                    .iter()
                    .map(|word| single_value(word, param.quoted, env))
                    .collect();
            }
            _ => {}
        }
    }
    let mut builder = Builder::default();
    let rest = tilde(atoms, env, &mut builder);
    let mut quoted = false;
    for atom in rest {
        match atom {
            Atom::Char(c, q) => {
                builder.push(*c, *q);
                quoted |= *q;
            }
            Atom::EmptyQuotes => quoted = true,
            Atom::Part(part) => {
                quoted |= matches!(part, Part::Param(param) if param.quoted);
                expand_part(part, env, &mut builder);
            }
        }
    }
    let field = builder.finish();
    let vanishes = field.text.is_empty() && field.unknown.is_none() && !field.home && !quoted;
    if vanishes { Vec::new() } else { vec![field] }
}

/// A field from one of the words of `$@`.
fn single_value(value: &str, quoted: bool, env: &ExpandEnv<'_>) -> Field {
    let mut builder = Builder::default();
    push_value(&mut builder, value, quoted, "$@", env);
    builder.finish()
}

/// Handles a leading tilde; returns the atoms after the tilde prefix.
fn tilde<'a, 'w>(
    atoms: &'a [Atom<'w>],
    env: &ExpandEnv<'_>,
    builder: &mut Builder,
) -> &'a [Atom<'w>] {
    if !matches!(atoms.first(), Some(Atom::Char('~', false))) {
        return atoms;
    }
    let end = atoms
        .iter()
        .position(|atom| matches!(atom, Atom::Char('/', _) | Atom::Part(_)))
        .unwrap_or(atoms.len());
    let prefix: String = atoms
        .get(..end)
        .unwrap_or_default()
        .iter()
        .filter_map(|atom| match atom {
            Atom::Char(c, _) => Some(*c),
            Atom::EmptyQuotes | Atom::Part(_) => None,
        })
        .collect();
    match prefix.as_str() {
        "~+" => match env.pwd {
            Some(pwd) => builder.push_str(pwd, true),
            None => builder.unknown("`~+` (the working directory) is not known here".to_owned()),
        },
        "~-" => builder
            .unknown("`~-` (the previous directory) cannot be resolved statically".to_owned()),
        _ => {
            builder.field.home = true;
            builder.push_str(&prefix, true);
        }
    }
    atoms.get(end..).unwrap_or_default()
}

/// Expands one non-literal part into the builder.
fn expand_part(part: &Part, env: &ExpandEnv<'_>, builder: &mut Builder) {
    match part {
        Part::Lit { text, quoted } => builder.push_str(text, *quoted),
        Part::Param(param) => match param_value(param, env) {
            Value::Text(text) => push_value(builder, &text, param.quoted, &describe(param), env),
            Value::Many(words) if param.quoted => builder.push_str(&words.join(" "), true),
            Value::Unknown(reason) => builder.unknown(reason),
            Value::Many(_) | Value::Opaque => {
                builder.unknown(format!(
                    "`{}` cannot be resolved statically",
                    describe(param)
                ));
            }
        },
        Part::CommandSub(_) => {
            builder.unknown("a command substitution cannot be resolved statically".to_owned());
        }
        Part::ProcessSub(_) => builder.push_str("/dev/fd/63", true),
        Part::Arith(_) => builder.push_str("0", true),
    }
}

/// Appends a known parameter value; unquoted values that would split or glob are unknown.
fn push_value(builder: &mut Builder, value: &str, quoted: bool, name: &str, env: &ExpandEnv<'_>) {
    if !quoted && (env.ifs_changed || value.contains(SPLITTING)) {
        builder.unknown(format!("the unquoted `{name}` is split into words"));
    } else {
        builder.push_str(value, true);
    }
}

/// The value of a parameter expansion.
fn param_value(param: &super::ast::Param, env: &ExpandEnv<'_>) -> Value {
    let name = param.name.as_str();
    let unknown = || {
        Value::Unknown(format!(
            "`{}` cannot be resolved statically",
            describe(param)
        ))
    };
    match param.form {
        ParamForm::Length => return Value::Text("0".to_owned()),
        ParamForm::Other => return unknown(),
        ParamForm::Default if name != "TMPDIR" => return unknown(),
        ParamForm::Plain | ParamForm::Default => {}
    }
    match name {
        "?" | "#" | "$" | "!" | "-" => Value::Text("0".to_owned()),
        "PWD" => env.pwd.map_or_else(
            || Value::Unknown("`$PWD` is not known here".to_owned()),
            |pwd| Value::Text(pwd.to_owned()),
        ),
        "TMPDIR" => env
            .tmpdir
            .map_or_else(unknown, |dir| Value::Text(dir.to_owned())),
        _ => positional(name, env.args).unwrap_or_else(unknown),
    }
}

/// The value of `$0`…, `$@` or `$*`; `None` for other names.
fn positional(name: &str, args: &Args) -> Option<Value> {
    let index: Option<usize> = name.parse().ok();
    if index.is_none() && !matches!(name, "@" | "*") {
        return None;
    }
    let Args::Known { zero, rest } = args else {
        return Some(Value::Opaque);
    };
    Some(match index {
        Some(0) => Value::Text(zero.clone()),
        Some(n) => Value::Text(rest.get(n - 1).cloned().unwrap_or_default()),
        None => Value::Many(rest.clone()),
    })
}

/// How a parameter expansion appears in reasons.
fn describe(param: &super::ast::Param) -> String {
    match param.form {
        ParamForm::Plain => format!("${}", param.name),
        ParamForm::Length => format!("${{#{}}}", param.name),
        ParamForm::Default | ParamForm::Other => format!("${{{}…}}", param.name),
    }
}
