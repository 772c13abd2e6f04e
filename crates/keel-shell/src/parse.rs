//! The grammar: bash command lists, pipelines and compound commands.
//!
//! A recursive-descent parser over the tokens of `lex.rs`. It accepts the
//! bash syntax a coding agent writes (lists, pipelines, subshells, groups,
//! `if`/`for`/`while`/`until`/`select`/`case`, `[[ ]]`, `(( ))`,
//! functions, assignments including arrays, redirections and
//! here-documents) and fails on anything else: a failure makes the command
//! unknown, which is always safe. It may accept a few things bash rejects;
//! that is harmless because bash then runs nothing of them. Every nested
//! construct goes through [`Parser::nested`], which bounds recursion.

use std::cell::OnceCell;
use std::rc::Rc;

use super::ast::{
    AndOr, Assign, AssignValue, CaseArm, Command, Compound, CondWord, Connector, Function, List,
    Part, Pipeline, RedirOp, Redirect, Simple, Word,
};
use super::lex::{Op, ParseError, Parser, PendingHereDoc, RedirToken, Token};
use super::word::{is_name_char, is_name_start, parse_source};

/// Words that start a compound command (or a function definition).
const COMPOUND_STARTS: [&str; 10] = [
    "{", "if", "while", "until", "for", "select", "case", "[[", "function", "coproc",
];

/// Parses a whole command line.
pub(super) fn parse_script(source: &str) -> Result<List, ParseError> {
    parse_source(source, 0)
}

impl Parser {
    /// Parses a list up to something that cannot start a command.
    pub(super) fn parse_list(&mut self) -> Result<List, ParseError> {
        let mut items = Vec::new();
        loop {
            self.skip_newlines()?;
            if self.at_list_end()? {
                return Ok(List { items });
            }
            let mut item = self.parse_and_or()?;
            match self.peek()? {
                Token::Op(Op::Semi) => {
                    self.next_token()?;
                }
                Token::Op(Op::Amp) => {
                    self.next_token()?;
                    item.background = true;
                }
                Token::Newline => {}
                _ => {
                    items.push(item);
                    return Ok(List { items });
                }
            }
            items.push(item);
        }
    }

    /// Whether the next token ends a list.
    fn at_list_end(&mut self) -> Result<bool, ParseError> {
        Ok(match self.peek()? {
            Token::Eof | Token::Op(Op::RParen | Op::CaseEnd) => true,
            token => matches!(
                token.plain(),
                Some("then" | "else" | "elif" | "fi" | "do" | "done" | "esac" | "}")
            ),
        })
    }

    /// Skips newline tokens.
    fn skip_newlines(&mut self) -> Result<(), ParseError> {
        while matches!(self.peek()?, Token::Newline) {
            self.next_token()?;
        }
        Ok(())
    }

    /// Parses pipelines joined by `&&` and `||`.
    fn parse_and_or(&mut self) -> Result<AndOr, ParseError> {
        let first = self.parse_pipeline()?;
        let mut rest = Vec::new();
        loop {
            let connector = match self.peek()? {
                Token::Op(Op::AndIf) => Connector::And,
                Token::Op(Op::OrIf) => Connector::Or,
                _ => break,
            };
            self.next_token()?;
            self.skip_newlines()?;
            rest.push((connector, self.parse_pipeline()?));
        }
        Ok(AndOr {
            first,
            rest,
            background: false,
        })
    }

    /// Parses `[time [-p]] [!] command | command …`.
    fn parse_pipeline(&mut self) -> Result<Pipeline, ParseError> {
        let mut negated = false;
        loop {
            match self.peek()?.plain() {
                Some("!") => negated = !negated,
                Some("time") => {
                    self.next_token()?;
                    if self.peek()?.plain() == Some("-p") {
                        self.next_token()?;
                    }
                    continue;
                }
                _ => break,
            }
            self.next_token()?;
        }
        let mut commands = vec![self.parse_command()?];
        while matches!(self.peek()?, Token::Op(Op::Pipe)) {
            self.next_token()?;
            self.skip_newlines()?;
            commands.push(self.parse_command()?);
        }
        Ok(Pipeline { negated, commands })
    }

    /// Parses one command, one nesting level deeper.
    fn parse_command(&mut self) -> Result<Command, ParseError> {
        self.nested(Parser::parse_command_here)
    }

    /// Parses one command at the current level.
    fn parse_command_here(&mut self) -> Result<Command, ParseError> {
        let start = match self.peek()? {
            Token::Op(Op::LParen) => Some("("),
            token => token
                .plain()
                .and_then(|word| COMPOUND_STARTS.into_iter().find(|k| *k == word)),
        };
        let compound = match start {
            None => return self.parse_simple(),
            Some("function") => return self.parse_function_keyword(),
            Some("coproc") => return Err(ParseError::Unsupported("`coproc`")),
            Some("(") => self.parse_paren()?,
            Some("{") => {
                self.next_token()?;
                let list = self.parse_list()?;
                self.expect_keyword("}")?;
                Compound::Group(list)
            }
            Some("if") => self.parse_if()?,
            Some("while" | "until") => {
                self.next_token()?;
                let cond = self.parse_list()?;
                let body = self.parse_do_group()?;
                Compound::Loop { cond, body }
            }
            Some("case") => self.parse_case()?,
            Some("[[") => self.parse_cond()?,
            Some(_) => self.parse_for()?,
        };
        let mut redirects = Vec::new();
        while matches!(self.peek()?, Token::Redir(..)) {
            redirects.push(self.parse_redirect()?);
        }
        Ok(Command::Compound(compound, redirects))
    }

    /// Consumes the reserved word `keyword` or fails.
    fn expect_keyword(&mut self, keyword: &'static str) -> Result<(), ParseError> {
        let token = self.next_token()?;
        if token.plain() == Some(keyword) {
            Ok(())
        } else {
            Err(ParseError::Unexpected(format!(
                "{} where `{keyword}` was expected",
                token.describe()
            )))
        }
    }

    /// Consumes the operator `op` or fails.
    fn expect_op(&mut self, op: Op, what: &'static str) -> Result<(), ParseError> {
        match self.next_token()? {
            Token::Op(found) if found == op => Ok(()),
            Token::Eof => Err(ParseError::Unterminated(what)),
            token => Err(ParseError::Unexpected(token.describe())),
        }
    }

    /// Parses `( list )` or `(( expression ))`.
    fn parse_paren(&mut self) -> Result<Compound, ParseError> {
        let start = self.peeked_start().unwrap_or(self.pos);
        if self.chars.get(start + 1) == Some(&'(') {
            if let Some(parts) = self.try_arith(start + 2) {
                return Ok(Compound::Arith(parts));
            }
            // Not arithmetic: `( (…) … )`.
            self.rewind(start);
        }
        self.next_token()?;
        let list = self.parse_list()?;
        self.expect_op(Op::RParen, "(")?;
        Ok(Compound::Subshell(list))
    }

    /// Parses `if … fi`.
    fn parse_if(&mut self) -> Result<Compound, ParseError> {
        self.next_token()?;
        let mut arms = Vec::new();
        loop {
            let cond = self.parse_list()?;
            self.expect_keyword("then")?;
            let body = self.parse_list()?;
            arms.push((cond, body));
            let token = self.next_token()?;
            match token.plain() {
                Some("elif") => continue,
                Some("else") => {
                    let otherwise = Some(self.parse_list()?);
                    self.expect_keyword("fi")?;
                    return Ok(Compound::If { arms, otherwise });
                }
                Some("fi") => {
                    return Ok(Compound::If {
                        arms,
                        otherwise: None,
                    });
                }
                _ => return Err(ParseError::Unexpected(token.describe())),
            }
        }
    }

    /// Parses `do list done`.
    fn parse_do_group(&mut self) -> Result<List, ParseError> {
        self.expect_keyword("do")?;
        let body = self.parse_list()?;
        self.expect_keyword("done")?;
        Ok(body)
    }

    /// Parses `for`/`select`, including `for (( … ))`.
    fn parse_for(&mut self) -> Result<Compound, ParseError> {
        self.next_token()?;
        if matches!(self.peek()?, Token::Op(Op::LParen)) {
            let start = self.peeked_start().unwrap_or(self.pos);
            if self.chars.get(start + 1) != Some(&'(') {
                return Err(ParseError::Unexpected("`(` after `for`".to_owned()));
            }
            self.rewind(start + 2);
            let header = self.read_arith_body()?;
            self.skip_separator()?;
            let body = self.parse_do_group()?;
            return Ok(Compound::ForArith { header, body });
        }
        match self.next_token()? {
            Token::Word(word) if word.plain().is_some_and(is_name) => {}
            token => return Err(ParseError::Unexpected(token.describe())),
        }
        self.skip_newlines()?;
        let mut words = None;
        if self.peek()?.plain() == Some("in") {
            self.next_token()?;
            let mut list = Vec::new();
            while matches!(self.peek()?, Token::Word(_)) {
                if let Token::Word(word) = self.next_token()? {
                    list.push(word);
                }
            }
            words = Some(list);
        }
        self.skip_separator()?;
        let body = self.parse_do_group()?;
        Ok(Compound::For { words, body })
    }

    /// Skips one optional `;` and any newlines.
    fn skip_separator(&mut self) -> Result<(), ParseError> {
        if matches!(self.peek()?, Token::Op(Op::Semi)) {
            self.next_token()?;
        }
        self.skip_newlines()
    }

    /// Parses `case word in … esac`.
    fn parse_case(&mut self) -> Result<Compound, ParseError> {
        self.next_token()?;
        let subject = match self.next_token()? {
            Token::Word(word) => word,
            token => return Err(ParseError::Unexpected(token.describe())),
        };
        self.skip_newlines()?;
        self.expect_keyword("in")?;
        let mut arms = Vec::new();
        loop {
            self.skip_newlines()?;
            if self.peek()?.plain() == Some("esac") {
                self.next_token()?;
                return Ok(Compound::Case { subject, arms });
            }
            if matches!(self.peek()?, Token::Op(Op::LParen)) {
                self.next_token()?;
            }
            let patterns = self.parse_case_patterns()?;
            let body = self.parse_list()?;
            arms.push(CaseArm { patterns, body });
            if matches!(self.peek()?, Token::Op(Op::CaseEnd)) {
                self.next_token()?;
            } else if self.peek()?.plain() != Some("esac") {
                let token = self.next_token()?;
                return Err(ParseError::Unexpected(token.describe()));
            }
        }
    }

    /// Parses `pattern | pattern … )`.
    fn parse_case_patterns(&mut self) -> Result<Vec<Word>, ParseError> {
        let mut patterns = Vec::new();
        loop {
            match self.next_token()? {
                Token::Word(word) => patterns.push(word),
                Token::Eof => return Err(ParseError::Unterminated("case")),
                token => return Err(ParseError::Unexpected(token.describe())),
            }
            match self.next_token()? {
                Token::Op(Op::Pipe) => {}
                Token::Op(Op::RParen) => return Ok(patterns),
                Token::Eof => return Err(ParseError::Unterminated("case")),
                token => return Err(ParseError::Unexpected(token.describe())),
            }
        }
    }

    /// Parses `[[ … ]]`; the right side of `==`, `!=`, `=` and `=~` is a pattern.
    fn parse_cond(&mut self) -> Result<Compound, ParseError> {
        self.next_token()?;
        let mut words = Vec::new();
        let mut pattern_next = false;
        let mut regex_next = false;
        loop {
            self.skip_blanks();
            while self.cur() == Some('\n') {
                self.pos += 1;
                self.skip_blanks();
            }
            let Some(c) = self.cur() else {
                return Err(ParseError::Unterminated("[["));
            };
            let ends = matches!(
                self.at(2),
                None | Some(' ' | '\t' | '\n' | ';' | '&' | '|' | ')')
            );
            if c == ']' && self.at(1) == Some(']') && ends {
                self.pos += 2;
                return Ok(Compound::Cond(words));
            }
            if matches!(c, '(' | ')' | '<' | '>') {
                self.pos += 1;
                continue;
            }
            if matches!(c, '&' | '|') && self.at(1) == Some(c) {
                self.pos += 2;
                continue;
            }
            let word = self.read_word(regex_next)?;
            if word.is_empty() {
                return Err(ParseError::Unexpected(format!("`{c}` in `[[ ]]`")));
            }
            let operator = word.plain().map(str::to_owned);
            words.push(if pattern_next || regex_next {
                CondWord::Pattern(word)
            } else {
                CondWord::Operand(word)
            });
            pattern_next = matches!(operator.as_deref(), Some("==" | "!=" | "="));
            regex_next = operator.as_deref() == Some("=~");
        }
    }

    /// Parses `function name [()] body`.
    fn parse_function_keyword(&mut self) -> Result<Command, ParseError> {
        self.next_token()?;
        let name = match self.next_token()? {
            Token::Word(word) => word.literal().map(|(name, _)| name),
            _ => None,
        };
        let name = name.ok_or_else(|| ParseError::Unexpected("function name".to_owned()))?;
        if matches!(self.peek()?, Token::Op(Op::LParen)) {
            self.next_token()?;
            self.expect_op(Op::RParen, "(")?;
        }
        self.function_body(name)
    }

    /// Parses a function body (a compound command) after the name.
    fn function_body(&mut self, name: String) -> Result<Command, ParseError> {
        self.skip_newlines()?;
        let body = self.parse_command()?;
        if !matches!(body, Command::Compound(..)) {
            return Err(ParseError::Unexpected(format!("body of function `{name}`")));
        }
        Ok(Command::Function(Rc::new(Function { name, body })))
    }

    /// Parses a simple command or a `name() body` function definition.
    fn parse_simple(&mut self) -> Result<Command, ParseError> {
        let mut simple = Simple::default();
        loop {
            match self.peek()? {
                Token::Redir(..) => simple.redirects.push(self.parse_redirect()?),
                Token::Word(_) => {
                    let Token::Word(word) = self.next_token()? else {
                        break;
                    };
                    let word_end = self.pos;
                    if !simple.words.is_empty() {
                        simple.words.push(word);
                        continue;
                    }
                    match self.assignment(word, word_end)? {
                        Ok(assign) => simple.assigns.push(assign),
                        Err(word) => {
                            let bare = simple.assigns.is_empty() && simple.redirects.is_empty();
                            if bare && matches!(self.peek()?, Token::Op(Op::LParen)) {
                                return self.parse_function_parens(word);
                            }
                            simple.words.push(word);
                        }
                    }
                }
                _ => break,
            }
        }
        if simple.words.is_empty() && simple.assigns.is_empty() && simple.redirects.is_empty() {
            let token = self.next_token()?;
            return Err(ParseError::Unexpected(token.describe()));
        }
        Ok(Command::Simple(simple))
    }

    /// Parses `name() body` after the name.
    fn parse_function_parens(&mut self, word: Word) -> Result<Command, ParseError> {
        let name = word
            .literal()
            .map(|(name, _)| name)
            .ok_or_else(|| ParseError::Unexpected("function name".to_owned()))?;
        self.next_token()?;
        self.expect_op(Op::RParen, "(")?;
        self.function_body(name)
    }

    /// Splits `NAME=value` (or `NAME+=`, `NAME[i]=`) off `word`; gives the word back otherwise.
    fn assignment(
        &mut self,
        word: Word,
        word_end: usize,
    ) -> Result<Result<Assign, Word>, ParseError> {
        let Some(Part::Lit {
            text,
            quoted: false,
        }) = word.parts.first()
        else {
            return Ok(Err(word));
        };
        let Some(eq) = assignment_name_len(text) else {
            return Ok(Err(word));
        };
        let name = text
            .get(..eq)
            .unwrap_or_default()
            .trim_end_matches('+')
            .to_owned();
        let rest = text.get(eq + 1..).unwrap_or_default().to_owned();
        let mut parts = word.parts;
        if let Some(Part::Lit { text, .. }) = parts.first_mut() {
            *text = rest;
        }
        parts.retain(|part| !matches!(part, Part::Lit { text, quoted: false } if text.is_empty()));
        let array_follows =
            matches!(self.peek()?, Token::Op(Op::LParen)) && self.peeked_start() == Some(word_end);
        let value = if parts.is_empty() && array_follows {
            AssignValue::Array(self.parse_array()?)
        } else {
            AssignValue::Scalar(Word { parts })
        };
        Ok(Ok(Assign { name, value }))
    }

    /// Parses `( word… )` after an array assignment.
    fn parse_array(&mut self) -> Result<Vec<Word>, ParseError> {
        self.next_token()?;
        let mut words = Vec::new();
        loop {
            match self.next_token()? {
                Token::Word(word) => words.push(word),
                Token::Newline => {}
                Token::Op(Op::RParen) => return Ok(words),
                Token::Eof => return Err(ParseError::Unterminated("(")),
                token => return Err(ParseError::Unexpected(token.describe())),
            }
        }
    }

    /// Parses a redirection; a here-document waits for the next newline.
    fn parse_redirect(&mut self) -> Result<Redirect, ParseError> {
        let Token::Redir(RedirToken { op, strip_tabs, fd }) = self.next_token()? else {
            return Err(ParseError::Unexpected("redirection".to_owned()));
        };
        let target = match self.next_token()? {
            Token::Word(word) if !word.is_empty() => word,
            token => return Err(ParseError::Unexpected(token.describe())),
        };
        let mut heredoc = None;
        if op == RedirOp::HereDoc {
            let (delim, quoted) = target.literal().ok_or(ParseError::Unsupported(
                "here-document delimiter with expansions",
            ))?;
            let cell = Rc::new(OnceCell::new());
            self.pending.push(PendingHereDoc {
                delim,
                strip_tabs,
                quoted,
                cell: Rc::clone(&cell),
            });
            heredoc = Some(cell);
        }
        Ok(Redirect {
            fd,
            op,
            target,
            heredoc,
        })
    }
}

/// Whether `word` is a valid variable name.
pub(super) fn is_name(word: &str) -> bool {
    let mut chars = word.chars();
    chars.next().is_some_and(is_name_start) && chars.all(is_name_char)
}

/// The index of the `=` in an assignment word's leading text, if it is one.
fn assignment_name_len(text: &str) -> Option<usize> {
    let eq = text.find('=')?;
    let head = text.get(..eq)?;
    let head = head.strip_suffix('+').unwrap_or(head);
    let name = match head.find('[') {
        Some(open) if head.ends_with(']') => head.get(..open)?,
        Some(_) => return None,
        None => head,
    };
    is_name(name).then_some(eq)
}
