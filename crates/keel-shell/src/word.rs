//! Words: quoting, escapes and the expansions inside them.
//!
//! A word is lexed into [`Part`]s that keep what expansion needs: literal
//! text with a `quoted` flag (quoted text is not globbed and does not start a
//! tilde), parameter expansions, and the code that runs while the word
//! expands (`$(…)`, backticks, `<(…)`, `$((…))`, and code hidden in
//! `${x:-$(…)}`). `$(…)` is parsed in place by the grammar, as bash does, so
//! a `case` inside it needs no special handling; backtick bodies are
//! unescaped first and parsed as their own source.

use super::ast::{List, Param, ParamForm, Part, Word};
use super::lex::{Op, ParseError, Parser, Token};

/// Accumulates parts, merging adjacent literal text of the same quoting.
#[derive(Debug, Default)]
pub(super) struct Parts {
    parts: Vec<Part>,
}

impl Parts {
    /// Appends one character.
    fn push_char(&mut self, c: char, quoted: bool) {
        if let Some(Part::Lit { text, quoted: q }) = self.parts.last_mut()
            && *q == quoted
        {
            text.push(c);
            return;
        }
        self.parts.push(Part::Lit {
            text: c.to_string(),
            quoted,
        });
    }

    /// Appends quoted text, keeping an empty quoted string as an empty part.
    fn push_quoted(&mut self, text: &str) {
        match self.parts.last_mut() {
            Some(Part::Lit { text: last, quoted }) if *quoted => last.push_str(text),
            _ => self.parts.push(Part::Lit {
                text: text.to_owned(),
                quoted: true,
            }),
        }
    }

    /// Appends a non-literal part.
    fn push(&mut self, part: Part) {
        self.parts.push(part);
    }

    /// The parts collected.
    pub(super) fn finish(self) -> Vec<Part> {
        self.parts
    }
}

/// Whether `c` can start a shell variable name.
pub(super) fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

/// Whether `c` can continue a shell variable name.
pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses `source` (a backtick body or a nested script) as a whole list.
pub(super) fn parse_source(source: &str, depth: usize) -> Result<List, ParseError> {
    let mut parser = Parser::new(source, depth);
    let list = parser.nested(Parser::parse_list)?;
    match parser.next_token()? {
        Token::Eof => Ok(list),
        other => Err(ParseError::Unexpected(other.describe())),
    }
}

impl Parser {
    /// Reads a word in unquoted context; in `regex` mode (after `=~` in
    /// `[[ ]]`) only blanks end it.
    pub(super) fn read_word(&mut self, regex: bool) -> Result<Word, ParseError> {
        let mut out = Parts::default();
        while let Some(c) = self.cur() {
            match c {
                ' ' | '\t' | '\n' => break,
                ';' | '&' | '|' | '(' | ')' if !regex => break,
                '<' | '>' if !regex && self.at(1) == Some('(') => {
                    self.pos += 2;
                    out.push(Part::ProcessSub(self.read_nested_list("<(")?));
                }
                '<' | '>' if !regex => break,
                '\\' => self.read_escape(&mut out),
                '\'' => self.read_single_quoted(&mut out)?,
                '"' => {
                    self.pos += 1;
                    out.push_quoted("");
                    self.read_quoted_text(&mut out, Some('"'))?;
                }
                '`' => self.read_backtick(&mut out, false)?,
                '$' => self.read_dollar(&mut out, false)?,
                _ => {
                    out.push_char(c, false);
                    self.pos += 1;
                }
            }
        }
        Ok(Word {
            parts: out.finish(),
        })
    }

    /// Reads a here-document body with an unquoted delimiter: the whole input.
    pub(super) fn read_heredoc_parts(&mut self) -> Result<Vec<Part>, ParseError> {
        let mut out = Parts::default();
        self.read_quoted_text(&mut out, None)?;
        Ok(out.finish())
    }

    /// Reads `$((…))` or `((…))` content after the opening parens, through `))`.
    pub(super) fn read_arith_body(&mut self) -> Result<Vec<Part>, ParseError> {
        let mut out = Parts::default();
        let mut depth = 0usize;
        loop {
            let Some(c) = self.cur() else {
                return Err(ParseError::Unterminated("(("));
            };
            match c {
                ')' if depth == 0 => {
                    if self.at(1) != Some(')') {
                        return Err(ParseError::Unexpected("`)`".to_owned()));
                    }
                    self.pos += 2;
                    return Ok(out.finish());
                }
                '(' | ')' => {
                    depth = if c == '(' { depth + 1 } else { depth - 1 };
                    out.push_char(c, false);
                    self.pos += 1;
                }
                '$' => self.read_dollar(&mut out, true)?,
                '`' => self.read_backtick(&mut out, false)?,
                '"' => {
                    self.pos += 1;
                    self.read_quoted_text(&mut out, Some('"'))?;
                }
                '\\' => self.read_escape(&mut out),
                _ => {
                    out.push_char(c, false);
                    self.pos += 1;
                }
            }
        }
    }

    /// Reads a command list after `$(` or `<(` through its `)`.
    fn read_nested_list(&mut self, what: &'static str) -> Result<List, ParseError> {
        self.nested(|parser| {
            let list = parser.parse_list()?;
            match parser.next_token()? {
                Token::Op(Op::RParen) => Ok(list),
                _ => Err(ParseError::Unterminated(what)),
            }
        })
    }

    /// Reads a backslash escape in unquoted context.
    fn read_escape(&mut self, out: &mut Parts) {
        match self.at(1) {
            Some('\n') => self.pos += 2,
            Some(c) => {
                out.push_char(c, true);
                self.pos += 2;
            }
            None => {
                out.push_char('\\', true);
                self.pos += 1;
            }
        }
    }

    /// Reads `'…'`.
    fn read_single_quoted(&mut self, out: &mut Parts) -> Result<(), ParseError> {
        self.pos += 1;
        let mut text = String::new();
        loop {
            match self.cur() {
                None => return Err(ParseError::UnterminatedQuote),
                Some('\'') => break,
                Some(c) => text.push(c),
            }
            self.pos += 1;
        }
        self.pos += 1;
        out.push_quoted(&text);
        Ok(())
    }

    /// Reads double-quoted text up to `end` (a here-document body has none).
    fn read_quoted_text(&mut self, out: &mut Parts, end: Option<char>) -> Result<(), ParseError> {
        loop {
            let Some(c) = self.cur() else {
                return match end {
                    Some(_) => Err(ParseError::UnterminatedQuote),
                    None => Ok(()),
                };
            };
            match c {
                _ if Some(c) == end => {
                    self.pos += 1;
                    return Ok(());
                }
                '\\' => match self.at(1) {
                    Some('\n') => self.pos += 2,
                    Some(n) if matches!(n, '$' | '`' | '\\') || (n == '"' && end.is_some()) => {
                        out.push_char(n, true);
                        self.pos += 2;
                    }
                    _ => {
                        out.push_char('\\', true);
                        self.pos += 1;
                    }
                },
                '$' => self.read_dollar(out, true)?,
                '`' => self.read_backtick(out, end.is_some())?,
                _ => {
                    out.push_char(c, true);
                    self.pos += 1;
                }
            }
        }
    }

    /// Reads an expansion or a literal `$`.
    fn read_dollar(&mut self, out: &mut Parts, in_double: bool) -> Result<(), ParseError> {
        match self.at(1) {
            Some('(') if self.at(2) == Some('(') => self.read_dollar_arith(out),
            Some('(') => {
                self.pos += 2;
                out.push(Part::CommandSub(self.read_nested_list("$(")?));
                Ok(())
            }
            Some('{') => self.read_braced_param(out, in_double),
            Some('\'') if !in_double => self.read_ansi_c(out),
            Some('"') if !in_double => {
                self.pos += 2;
                out.push_quoted("");
                self.read_quoted_text(out, Some('"'))
            }
            Some('[') => Err(ParseError::Unsupported("`$[…]` arithmetic")),
            Some(c) if is_name_start(c) => {
                self.pos += 1;
                let name = self.read_name();
                out.push(param(name, ParamForm::Plain, Vec::new(), in_double));
                Ok(())
            }
            Some(c) if c.is_ascii_digit() || "?#$!-@*".contains(c) => {
                self.pos += 2;
                out.push(param(
                    c.to_string(),
                    ParamForm::Plain,
                    Vec::new(),
                    in_double,
                ));
                Ok(())
            }
            _ => {
                out.push_char('$', in_double);
                self.pos += 1;
                Ok(())
            }
        }
    }

    /// Reads `$((…))`, falling back to `$( (…) )` when it is not arithmetic.
    fn read_dollar_arith(&mut self, out: &mut Parts) -> Result<(), ParseError> {
        let start = self.pos;
        match self.try_arith(start + 3) {
            Some(parts) => out.push(Part::Arith(parts)),
            None => {
                self.rewind(start + 2);
                out.push(Part::CommandSub(self.read_nested_list("$(")?));
            }
        }
        Ok(())
    }

    /// Reads an identifier at the cursor.
    fn read_name(&mut self) -> String {
        let mut name = String::new();
        while let Some(c) = self.cur().filter(|&c| is_name_char(c)) {
            name.push(c);
            self.pos += 1;
        }
        name
    }

    /// Reads `${…}`, one nesting level deeper.
    fn read_braced_param(&mut self, out: &mut Parts, in_double: bool) -> Result<(), ParseError> {
        self.nested(|parser| parser.read_braced_param_here(out, in_double))
    }

    /// Reads `${…}` at the current level.
    fn read_braced_param_here(
        &mut self,
        out: &mut Parts,
        in_double: bool,
    ) -> Result<(), ParseError> {
        self.pos += 2;
        let mut form = ParamForm::Plain;
        if matches!(self.cur(), Some('#' | '!')) && !matches!(self.at(1), Some('}') | None) {
            form = if self.cur() == Some('#') {
                ParamForm::Length
            } else {
                ParamForm::Other
            };
            self.pos += 1;
        }
        let name = match self.cur() {
            Some(c) if is_name_start(c) => self.read_name(),
            Some(c) if c.is_ascii_digit() => {
                let mut digits = String::new();
                while let Some(d) = self.cur().filter(char::is_ascii_digit) {
                    digits.push(d);
                    self.pos += 1;
                }
                digits
            }
            Some(c) if "?#$!-@*".contains(c) => {
                self.pos += 1;
                c.to_string()
            }
            None => return Err(ParseError::Unterminated("${")),
            Some(_) => return Err(ParseError::Unsupported("bad substitution")),
        };
        let mut nested = Parts::default();
        match self.cur() {
            Some('}') => self.pos += 1,
            Some(c) => {
                form = match (form, c, self.at(1)) {
                    (ParamForm::Plain, '-', _) | (ParamForm::Plain, ':', Some('-')) => {
                        ParamForm::Default
                    }
                    _ => ParamForm::Other,
                };
                self.read_param_rest(&mut nested, in_double)?;
            }
            None => return Err(ParseError::Unterminated("${")),
        }
        out.push(param(name, form, nested.finish(), in_double));
        Ok(())
    }

    /// Reads what follows the name in `${name…}` through the closing `}`.
    fn read_param_rest(&mut self, out: &mut Parts, in_double: bool) -> Result<(), ParseError> {
        let mut depth = 0usize;
        loop {
            let Some(c) = self.cur() else {
                return Err(ParseError::Unterminated("${"));
            };
            match c {
                '}' if depth == 0 => {
                    self.pos += 1;
                    return Ok(());
                }
                '{' | '}' => {
                    depth = if c == '{' { depth + 1 } else { depth - 1 };
                    out.push_char(c, in_double);
                    self.pos += 1;
                }
                '\\' => self.read_escape(out),
                '\'' if !in_double => self.read_single_quoted(out)?,
                '"' => {
                    self.pos += 1;
                    self.read_quoted_text(out, Some('"'))?;
                }
                '$' => self.read_dollar(out, in_double)?,
                '`' => self.read_backtick(out, in_double)?,
                _ => {
                    out.push_char(c, in_double);
                    self.pos += 1;
                }
            }
        }
    }

    /// Reads `$'…'`, decoding its escapes.
    fn read_ansi_c(&mut self, out: &mut Parts) -> Result<(), ParseError> {
        self.pos += 2;
        let mut bytes = Vec::new();
        let mut ended_by_nul = false;
        loop {
            let Some(c) = self.cur() else {
                return Err(ParseError::UnterminatedQuote);
            };
            self.pos += 1;
            let mut piece = Vec::new();
            match c {
                '\'' => break,
                '\\' => self.read_ansi_escape(&mut piece),
                _ => piece.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
            // Bash ends the string at a NUL byte.
            if let Some(nul) = piece.iter().position(|&b| b == 0) {
                piece.truncate(nul);
                if !ended_by_nul {
                    bytes.extend_from_slice(&piece);
                }
                ended_by_nul = true;
            } else if !ended_by_nul {
                bytes.extend_from_slice(&piece);
            }
        }
        out.push_quoted(&String::from_utf8_lossy(&bytes));
        Ok(())
    }

    /// Decodes one escape in `$'…'`; the cursor is after the backslash.
    fn read_ansi_escape(&mut self, bytes: &mut Vec<u8>) {
        let Some(c) = self.cur() else {
            bytes.push(b'\\');
            return;
        };
        self.pos += 1;
        let byte = match c {
            'a' => 7,
            'b' => 8,
            'e' | 'E' => 27,
            'f' => 12,
            'n' => b'\n',
            'r' => b'\r',
            't' => b'\t',
            'v' => 11,
            '\\' | '\'' | '"' | '?' => c as u8,
            '0'..='7' => {
                let first = c.to_digit(8).unwrap_or(0);
                let rest = self.read_radix(8, 2);
                let value = rest.map_or(first, |(value, count)| first * 8u32.pow(count) + value);
                (value & 0xff) as u8
            }
            'x' => match self.read_radix(16, 2) {
                Some((value, _)) => (value & 0xff) as u8,
                None => {
                    bytes.extend_from_slice(b"\\x");
                    return;
                }
            },
            'u' | 'U' => {
                let max = if c == 'u' { 4 } else { 8 };
                let value = self.read_radix(16, max).map_or(0, |(value, _)| value);
                let decoded = char::from_u32(value).unwrap_or(char::REPLACEMENT_CHARACTER);
                bytes.extend_from_slice(decoded.encode_utf8(&mut [0; 4]).as_bytes());
                return;
            }
            'c' => {
                let control = self.cur().map_or(0, |n| (u32::from(n) & 0x1f) as u8);
                self.pos += usize::from(self.cur().is_some());
                control
            }
            _ => {
                bytes.push(b'\\');
                bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                return;
            }
        };
        bytes.push(byte);
    }

    /// Reads up to `max` digits in `radix`: their value and count, if any.
    fn read_radix(&mut self, radix: u32, max: u32) -> Option<(u32, u32)> {
        let mut value = 0u32;
        let mut count = 0;
        while count < max {
            let Some(digit) = self.cur().and_then(|c| c.to_digit(radix)) else {
                break;
            };
            value = value.saturating_mul(radix).saturating_add(digit);
            count += 1;
            self.pos += 1;
        }
        (count > 0).then_some((value, count))
    }

    /// Reads `` `…` `` and parses its unescaped body.
    fn read_backtick(&mut self, out: &mut Parts, in_double: bool) -> Result<(), ParseError> {
        self.pos += 1;
        let mut text = String::new();
        loop {
            let Some(c) = self.cur() else {
                return Err(ParseError::Unterminated("`"));
            };
            self.pos += 1;
            match c {
                '`' => break,
                '\\' => match self.cur() {
                    Some(n) if matches!(n, '$' | '`' | '\\') || (n == '"' && in_double) => {
                        text.push(n);
                        self.pos += 1;
                    }
                    _ => text.push('\\'),
                },
                _ => text.push(c),
            }
        }
        let depth = self.depth;
        let list = self.nested(|_| parse_source(&text, depth + 1))?;
        out.push(Part::CommandSub(list));
        Ok(())
    }
}

/// A parameter part.
fn param(name: String, form: ParamForm, nested: Vec<Part>, quoted: bool) -> Part {
    Part::Param(Param {
        name,
        form,
        nested,
        quoted,
    })
}
