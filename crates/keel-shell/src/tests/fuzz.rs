//! No input makes the analysis panic, and its result is always coherent.

use super::*;

/// A deterministic xorshift generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Fragments of shell syntax that stress the parser.
const PIECES: &[&str] = &[
    "$(",
    ")",
    "`",
    "'",
    "\"",
    "$'",
    "${",
    "}",
    "{",
    "<<",
    "EOF",
    "\n",
    "<<-",
    "<<'E'",
    "|",
    "&&",
    "||",
    ";",
    ";;",
    "case ",
    " in ",
    "esac",
    "if ",
    "then ",
    "fi",
    "for ",
    "do ",
    "done",
    "((",
    "))",
    "[[",
    "]]",
    "\\",
    "$",
    "~",
    "/",
    "..",
    "*",
    "?",
    "[",
    "]",
    ",",
    "cd ",
    "bash -c ",
    "eval ",
    "x",
    " ",
    "=",
    "a=(",
    "<(",
    ">(",
    ">",
    "2>&1",
    "#",
    "function ",
    "() ",
    "$((",
    "curl ",
    "/etc/passwd",
    "\t",
    "!",
    "&",
    "<<<",
    "$@",
    "$1",
    "set -- ",
    "{a,b}",
    "{1..3}",
    "\\x2f",
    "$PWD",
    "$TMPDIR",
    "env ",
    "xargs ",
    "git -C ",
    "find . -exec ",
    "\\;",
    "trap ",
    "f() ",
    "f ",
    "/dev/tcp/",
    "sudo ",
    "pushd ",
    "popd",
    "while ",
    "select ",
    "time ",
    "coproc ",
    "{-9223372036854775808..",
    "..9223372036854775807}",
    "..-1}",
    "$'\\x",
    "$'\\u",
    "$'\\c",
    "\\0",
    "${#",
    "${!",
    "${x[",
    "[[ ",
    " -eq ",
    "=~ ",
    "ln -s /etc ",
    "/proc/self/root",
];

/// Checks the invariants every result keeps.
fn check(ws: &Ws, command: &str) {
    let analysis = ws.analyze(command);
    if analysis.kind == U {
        assert_eq!(analysis.scope, X, "{command:?}");
    }
    let plain = analysis.kind == S && analysis.scope == W;
    assert_eq!(
        analysis.reasons.is_empty(),
        plain,
        "{command:?}: {analysis:?}"
    );
    assert!(analysis.targets.len() <= 32);
}

#[test]
fn random_syntax_never_panics() {
    let ws = Ws::new();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..3_000 {
        let mut command = String::new();
        for _ in 0..rng.below(40) {
            if rng.below(6) == 0 {
                command.push(char::from(rng.below(128) as u8));
            } else {
                command.push_str(PIECES[rng.below(PIECES.len())]);
            }
        }
        check(&ws, &command);
    }
}

#[test]
fn random_bytes_never_panic() {
    let ws = Ws::new();
    let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
    for _ in 0..2_000 {
        let bytes: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
        check(&ws, &String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn mutated_table_commands_never_panic() {
    let ws = Ws::new();
    let mut rng = XorShift(0x0123_4567_89AB_CDEF);
    for _ in 0..3_000 {
        let (command, _, _) = TABLE[rng.below(TABLE.len())];
        let chars: Vec<char> = command.chars().collect();
        let cut = rng.below(chars.len() + 1);
        let mut mutated: String = chars[..cut].iter().collect();
        mutated.push_str(PIECES[rng.below(PIECES.len())]);
        mutated.extend(&chars[rng.below(chars.len() + 1).max(cut)..]);
        check(&ws, &mutated);
    }
}
