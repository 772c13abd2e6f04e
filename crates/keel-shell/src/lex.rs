//! Tokens: operators, redirections, words and here-document bodies.
//!
//! Shell tokenization depends on the grammar (a `((` opens arithmetic only
//! where a command starts, `$(…)` holds a whole command list, here-document
//! bodies start after the *next* newline), so there is no separate lexer
//! pass: the [`Parser`] pulls one token at a time, with one token of
//! lookahead, and the word lexer (`word.rs`) calls back into the grammar for
//! `$(…)` and `<(…)`. Every lexing function either advances the cursor or
//! returns an error, which is what makes the parser terminate on any input.

use std::cell::OnceCell;
use std::collections::HashSet;
use std::rc::Rc;

use super::MAX_DEPTH;
use super::ast::{HereBody, RedirOp, Word};

/// Why a command could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum ParseError {
    /// A `'`, `"` or `$'` without its closing quote.
    #[error("unterminated quote")]
    UnterminatedQuote,
    /// A construct without its end, e.g. `$(` without `)`.
    #[error("unterminated `{0}`")]
    Unterminated(&'static str),
    /// A here-document whose delimiter line never comes.
    #[error("unterminated here-document `{0}`")]
    UnterminatedHereDoc(String),
    /// A token where the grammar does not allow it.
    #[error("unexpected {0}")]
    Unexpected(String),
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("nested more than {MAX_DEPTH} levels deep")]
    TooDeep,
    /// Valid shell the analyzer does not model.
    #[error("unsupported syntax: {0}")]
    Unsupported(&'static str),
}

/// A control operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// `;`
    Semi,
    /// `&`
    Amp,
    /// `&&`
    AndIf,
    /// `||`
    OrIf,
    /// `|` or `|&`
    Pipe,
    /// `;;`, `;&` or `;;&`
    CaseEnd,
    /// `(`
    LParen,
    /// `)`
    RParen,
}

/// A token.
#[derive(Debug)]
pub(super) enum Token {
    /// A word (possibly a reserved word; the grammar decides).
    Word(Word),
    /// A control operator.
    Op(Op),
    /// A redirection operator.
    Redir(RedirToken),
    /// A newline.
    Newline,
    /// The end of the input.
    Eof,
}

impl Token {
    /// A short description for error messages.
    pub(super) fn describe(&self) -> String {
        match self {
            Token::Word(word) => match word.literal() {
                Some((text, _)) => format!("`{}`", text.chars().take(20).collect::<String>()),
                None => "a word".to_owned(),
            },
            Token::Op(op) => format!("`{op:?}`"),
            Token::Redir(..) => "a redirection".to_owned(),
            Token::Newline => "a newline".to_owned(),
            Token::Eof => "end of input".to_owned(),
        }
    }

    /// The text of a one-part unquoted word, for reserved-word checks.
    pub(super) fn plain(&self) -> Option<&str> {
        match self {
            Token::Word(word) => word.plain(),
            _ => None,
        }
    }
}

/// A redirection operator with its fd prefix.
#[derive(Debug)]
pub(super) struct RedirToken {
    /// The operator.
    pub(super) op: RedirOp,
    /// `<<-`: here-document lines lose their leading tabs.
    pub(super) strip_tabs: bool,
    /// The fd prefix as written, if any.
    pub(super) fd: Option<String>,
}

/// A here-document whose body starts after the next newline.
#[derive(Debug)]
pub(super) struct PendingHereDoc {
    /// The delimiter, quotes removed.
    pub(super) delim: String,
    /// `<<-`: leading tabs are stripped.
    pub(super) strip_tabs: bool,
    /// Whether the delimiter was quoted (the body is literal).
    pub(super) quoted: bool,
    /// Where the body goes.
    pub(super) cell: Rc<OnceCell<HereBody>>,
}

/// The parser state: a cursor over the source plus one token of lookahead.
#[derive(Debug)]
pub(super) struct Parser {
    /// The source.
    pub(super) chars: Vec<char>,
    /// The cursor.
    pub(super) pos: usize,
    /// Current nesting depth, bounded by [`MAX_DEPTH`].
    pub(super) depth: usize,
    /// The lookahead token and where it started.
    peeked: Option<(Token, usize)>,
    /// Here-documents waiting for the next newline.
    pub(super) pending: Vec<PendingHereDoc>,
    /// Where `((` turned out not to be arithmetic, so it is not retried.
    pub(super) not_arith: HashSet<usize>,
}

impl Parser {
    /// A parser over `source` starting at nesting depth `depth`.
    pub(super) fn new(source: &str, depth: usize) -> Parser {
        Parser {
            chars: source.chars().collect(),
            pos: 0,
            depth,
            peeked: None,
            pending: Vec::new(),
            not_arith: HashSet::new(),
        }
    }

    /// The character under the cursor.
    pub(super) fn cur(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    /// The character `offset` places after the cursor.
    pub(super) fn at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos.saturating_add(offset)).copied()
    }

    /// Runs `f` one nesting level deeper, failing past [`MAX_DEPTH`].
    pub(super) fn nested<T>(
        &mut self,
        f: impl FnOnce(&mut Parser) -> Result<T, ParseError>,
    ) -> Result<T, ParseError> {
        if self.depth >= MAX_DEPTH {
            return Err(ParseError::TooDeep);
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    /// Consumes and returns the next token.
    pub(super) fn next_token(&mut self) -> Result<Token, ParseError> {
        match self.peeked.take() {
            Some((token, _)) => Ok(token),
            None => Ok(self.lex_token()?.0),
        }
    }

    /// The next token, without consuming it.
    pub(super) fn peek(&mut self) -> Result<&Token, ParseError> {
        let peeked = match self.peeked.take() {
            Some(peeked) => peeked,
            None => self.lex_token()?,
        };
        Ok(&self.peeked.insert(peeked).0)
    }

    /// Where the lookahead token started, if there is one.
    pub(super) fn peeked_start(&self) -> Option<usize> {
        self.peeked.as_ref().map(|(_, start)| *start)
    }

    /// Tries arithmetic (`$((` or `((`) whose content starts at `start`;
    /// on failure rewinds there, and remembers not to try again.
    pub(super) fn try_arith(&mut self, start: usize) -> Option<Vec<super::ast::Part>> {
        if self.not_arith.contains(&start) {
            return None;
        }
        let pending = self.pending.len();
        self.rewind(start);
        match self.nested(Parser::read_arith_body) {
            Ok(parts) => Some(parts),
            Err(_) => {
                self.not_arith.insert(start);
                self.pending.truncate(pending);
                None
            }
        }
    }

    /// Drops the lookahead and moves the cursor to `pos`.
    pub(super) fn rewind(&mut self, pos: usize) {
        self.peeked = None;
        self.pos = pos;
    }

    /// Skips blanks, line continuations and comments.
    pub(super) fn skip_blanks(&mut self) {
        while let Some(c) = self.cur() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\\' if self.at(1) == Some('\n') => self.pos += 2,
                '#' => {
                    while self.cur().is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    /// Lexes one token.
    fn lex_token(&mut self) -> Result<(Token, usize), ParseError> {
        self.skip_blanks();
        let start = self.pos;
        let Some(c) = self.cur() else {
            if let Some(doc) = self.pending.first() {
                return Err(ParseError::UnterminatedHereDoc(doc.delim.clone()));
            }
            return Ok((Token::Eof, start));
        };
        let token = match c {
            '\n' => {
                self.pos += 1;
                self.read_heredoc_bodies()?;
                Token::Newline
            }
            '<' | '>' if self.at(1) == Some('(') => Token::Word(self.read_word(false)?),
            '<' | '>' => Token::Redir(self.lex_redirect(None)),
            '&' if self.at(1) == Some('>') => {
                self.pos += 1;
                let mut token = self.lex_redirect(None);
                token.op = RedirOp::Out;
                Token::Redir(token)
            }
            ';' | '&' | '|' | '(' | ')' => Token::Op(self.lex_operator(c)),
            _ => match self.fd_prefix_len() {
                Some(len) => {
                    let fd = self
                        .chars
                        .get(start..start + len)
                        .map(|fd| fd.iter().collect());
                    self.pos += len;
                    Token::Redir(self.lex_redirect(fd))
                }
                None => Token::Word(self.read_word(false)?),
            },
        };
        Ok((token, start))
    }

    /// Lexes a control operator starting with `c`.
    fn lex_operator(&mut self, c: char) -> Op {
        let next = self.at(1);
        let (op, len) = match (c, next) {
            (';', Some(';')) if self.at(2) == Some('&') => (Op::CaseEnd, 3),
            (';', Some(';' | '&')) => (Op::CaseEnd, 2),
            (';', _) => (Op::Semi, 1),
            ('&', Some('&')) => (Op::AndIf, 2),
            ('&', _) => (Op::Amp, 1),
            ('|', Some('|')) => (Op::OrIf, 2),
            ('|', Some('&')) => (Op::Pipe, 2),
            ('|', _) => (Op::Pipe, 1),
            ('(', _) => (Op::LParen, 1),
            _ => (Op::RParen, 1),
        };
        self.pos += len;
        op
    }

    /// Lexes a redirection operator at `<` or `>`.
    fn lex_redirect(&mut self, fd: Option<String>) -> RedirToken {
        let rest: String = (0..3).filter_map(|i| self.at(i)).collect();
        let (op, len) = if rest.starts_with("<<<") {
            (RedirOp::HereString, 3)
        } else if rest.starts_with("<<-") {
            (RedirOp::HereDoc, 3)
        } else if rest.starts_with("<<") {
            (RedirOp::HereDoc, 2)
        } else if rest.starts_with("<&") {
            (RedirOp::DupIn, 2)
        } else if rest.starts_with(">&") {
            (RedirOp::DupOut, 2)
        } else if rest.starts_with("<>") {
            (RedirOp::ReadWrite, 2)
        } else if rest.starts_with(">>") || rest.starts_with(">|") {
            (RedirOp::Out, 2)
        } else if rest.starts_with('<') {
            (RedirOp::In, 1)
        } else {
            (RedirOp::Out, 1)
        };
        self.pos += len;
        RedirToken {
            op,
            strip_tabs: rest.starts_with("<<-"),
            fd,
        }
    }

    /// The length of an fd prefix (`2` in `2>`, `{fd}` in `{fd}<`), if any.
    fn fd_prefix_len(&self) -> Option<usize> {
        let mut len = 0;
        if self.cur() == Some('{') {
            len = 1;
            while self
                .at(len)
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                len += 1;
            }
            if len == 1 || self.at(len) != Some('}') {
                return None;
            }
            len += 1;
        } else {
            while self.at(len).is_some_and(|c| c.is_ascii_digit()) {
                len += 1;
            }
        }
        let redirect = matches!(self.at(len), Some('<' | '>')) && self.at(len + 1) != Some('(');
        (len > 0 && redirect).then_some(len)
    }

    /// Reads the bodies of the pending here-documents, after a newline.
    fn read_heredoc_bodies(&mut self) -> Result<(), ParseError> {
        for doc in std::mem::take(&mut self.pending) {
            let text = self.read_heredoc_lines(&doc)?;
            let body = if doc.quoted {
                HereBody::Literal(text)
            } else {
                let mut inner = Parser::new(&text, self.depth);
                HereBody::Expanded(inner.nested(Parser::read_heredoc_parts)?)
            };
            // The cell is fresh: nothing else fills it.
            let _ = doc.cell.set(body);
        }
        Ok(())
    }

    /// Reads lines up to the delimiter line and returns the body.
    fn read_heredoc_lines(&mut self, doc: &PendingHereDoc) -> Result<String, ParseError> {
        let delim: Vec<char> = doc.delim.chars().collect();
        let mut body = String::new();
        while self.pos < self.chars.len() {
            let start = self.pos;
            let end = self
                .chars
                .get(start..)
                .unwrap_or_default()
                .iter()
                .position(|&c| c == '\n')
                .map_or(self.chars.len(), |offset| start + offset);
            self.pos = (end + 1).min(self.chars.len());
            let mut line = self.chars.get(start..end).unwrap_or_default();
            if doc.strip_tabs {
                while let Some(rest) = line.strip_prefix(&['\t']) {
                    line = rest;
                }
            }
            if line == delim.as_slice() {
                return Ok(body);
            }
            body.extend(line);
            body.push('\n');
        }
        Err(ParseError::UnterminatedHereDoc(doc.delim.clone()))
    }
}
