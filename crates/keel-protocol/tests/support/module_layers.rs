//! The module-layer check a crate's `tests/layers.rs` runs over its own
//! `src/` (keel-kernel, keel-tools): a top-level module may use only
//! modules of a lower layer, so no two of them can import each other.
//!
//! Included by each of those tests with `#[path]`, so there is one parser
//! and one self-test ([`self_test`], which each including test runs).
//!
//! What counts as a use: every path that starts with `crate::`, `super::`
//! or `self::` in code — `use` declarations with their `{…}` groups at any
//! depth, and paths in expressions and types — with `super` and `self`
//! resolved against the module the path is written in (the file's module,
//! and inline `mod name { … }` blocks within it). Comments, strings and
//! character literals are skipped; `$crate` (a macro's own crate) is not a
//! use. Only `.rs` files are modules: `system_prompt.md` beside
//! `system_prompt.rs` is not one. A name the crate root re-exports from a
//! module (`pub use execution::ShellExecution;` in `lib.rs`) counts as a use
//! of that module (root globs and aliases are not followed). A use of a
//! module within the using file's own top-level module, or of a name that
//! is no module of the crate, is no edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module a source file is, as path segments below the crate root:
/// `tools.rs` is `[tools]`, `builtin/bash/mod.rs` is `[builtin, bash]`,
/// `lib.rs` is `[]`; `None` for a file that is no Rust module.
pub fn module_of(relative: &Path) -> Option<Vec<String>> {
    if relative.extension()? != "rs" {
        return None;
    }
    let mut segments: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|part| part.as_os_str().to_str().map(str::to_owned))
        .collect::<Option<_>>()?;
    if matches!(segments.last().map(String::as_str), Some("mod")) {
        segments.pop();
    }
    if segments == ["lib"] || segments == ["main"] {
        segments.clear();
    }
    Some(segments)
}

/// A token of Rust source, as far as paths need: identifiers, `::` and
/// single punctuation characters.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The tokens of `text`, without comments, strings, character literals,
/// lifetimes and numbers.
fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&chars, i + 1);
        } else if c == '\'' {
            i = skip_quote(&chars, i);
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_string = matches!(word.as_str(), "r" | "br" | "cr")
                && matches!(chars.get(i), Some('"' | '#'))
                && raw_string_start(&chars, i);
            if raw_string {
                i = skip_raw_string(&chars, i);
            } else if matches!(word.as_str(), "b" | "c") && chars.get(i) == Some(&'"') {
                i = skip_string(&chars, i + 1);
            } else if word == "b" && chars.get(i) == Some(&'\'') {
                i = skip_quote(&chars, i);
            } else if word == "r" && chars.get(i) == Some(&'#') {
                // A raw identifier `r#name`: the name is the identifier.
                i += 1;
            } else {
                out.push(Token::Ident(word));
            }
        } else if c == ':' && next == Some(':') {
            out.push(Token::PathSep);
            i += 2;
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// The index after a string whose opening quote is just before `i`.
fn skip_string(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// Whether `#…#"` (or `"`) at `i` opens a raw string.
fn raw_string_start(chars: &[char], mut i: usize) -> bool {
    while chars.get(i) == Some(&'#') {
        i += 1;
    }
    chars.get(i) == Some(&'"')
}

/// The index after a raw string whose `#`s or quote start at `i`.
fn skip_raw_string(chars: &[char], mut i: usize) -> usize {
    let mut hashes = 0;
    while chars.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    i += 1;
    while i < chars.len() {
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        i += 1;
    }
    i
}

/// The index after a character literal or a lifetime starting at `i` (`'`).
fn skip_quote(chars: &[char], i: usize) -> usize {
    match (chars.get(i + 1), chars.get(i + 2)) {
        // `'\n'`, `'\''`, `'\u{…}'`: up to the closing quote.
        (Some('\\'), _) => {
            let mut j = i + 3;
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            j + 1
        }
        // `'x'`
        (Some(_), Some('\'')) => i + 3,
        // A lifetime or label: `'a`, `'static`.
        _ => {
            let mut j = i + 1;
            while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            j
        }
    }
}

/// Reads the path tree starting at `tokens[i]` (an identifier) below
/// `prefix`, adding each full path to `out`; returns the index after it.
/// A tree is `a::b::c`, `a::{tree, tree}`, `a::*` or `a::b as c`.
fn tree(tokens: &[Token], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(i) {
            Some(Token::Ident(name)) => {
                path.push(name.clone());
                i += 1;
                if tokens.get(i) == Some(&Token::PathSep) {
                    i += 1;
                    continue;
                }
                out.push(path);
                return i;
            }
            Some(Token::Punct('*')) => {
                out.push(path);
                return i + 1;
            }
            Some(Token::Punct('{')) => {
                i += 1;
                loop {
                    match tokens.get(i) {
                        Some(Token::Punct('}')) => return i + 1,
                        Some(Token::Punct(',')) => i += 1,
                        // `a as b`: the alias names nothing new.
                        Some(Token::Ident(word)) if word == "as" => i += 2,
                        Some(Token::Ident(_) | Token::Punct('*' | '{')) => {
                            i = tree(tokens, i, &path, out);
                        }
                        Some(_) => i += 1,
                        None => return i,
                    }
                }
            }
            _ => {
                out.push(path);
                return i;
            }
        }
    }
}

/// The absolute module paths `text`, the source of module `module`, names
/// through `crate::`, `super::` and `self::` (see the module docs). A path
/// is given as its segments after resolution, item names included
/// (`crate::a::X` is `[a, X]`).
pub fn uses(module: &[String], text: &str) -> Vec<Vec<String>> {
    let tokens = tokens(text);
    let mut found = Vec::new();
    // Inline modules open in this file: name and the brace depth inside it.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut pending_mod: Option<String> = None;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Punct('{') => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    inline.push((name, depth));
                }
                i += 1;
                continue;
            }
            Token::Punct('}') => {
                if inline.last().is_some_and(|(_, open)| *open == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            Token::Punct(';') => pending_mod = None,
            Token::Ident(word) if word == "mod" => {
                if let Some(Token::Ident(name)) = tokens.get(i + 1) {
                    pending_mod = Some(name.clone());
                    i += 2;
                    continue;
                }
            }
            _ => {}
        }
        let starts_path = matches!(&tokens[i], Token::Ident(word) if matches!(word.as_str(), "crate" | "super" | "self"))
            && tokens.get(i + 1) == Some(&Token::PathSep)
            && !matches!(
                i.checked_sub(1).map(|before| &tokens[before]),
                Some(Token::Punct('$') | Token::PathSep)
            );
        if !starts_path {
            i += 1;
            continue;
        }
        let mut paths = Vec::new();
        let after = tree(&tokens, i, &[], &mut paths);
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(name, _)| name.clone()))
            .collect();
        for path in paths {
            if let Some(resolved) = resolve(&here, &path) {
                found.push(resolved);
            }
        }
        i = after;
    }
    found
}

/// `path` (starting with `crate`, `super` or `self`) written in module
/// `here`, as segments below the crate root; `None` when `super` climbs
/// above the root.
fn resolve(here: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut segments = path.iter().peekable();
    let mut base: Vec<String> = match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        _ => here.to_vec(),
    };
    while let Some(segment) = segments.peek() {
        match segment.as_str() {
            "super" => {
                base.pop()?;
            }
            "self" => {}
            _ => break,
        }
        segments.next();
    }
    base.extend(segments.filter(|segment| *segment != "self").cloned());
    Some(base)
}

/// Every `.rs` file under `src`, with its module path and its text.
pub fn sources(src: &Path) -> Vec<(Vec<String>, String)> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, files);
            } else {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files
        .into_iter()
        .filter_map(|path| {
            let module = module_of(path.strip_prefix(src).unwrap())?;
            let text = std::fs::read_to_string(&path).unwrap();
            Some((module, text))
        })
        .collect()
}

/// The names the crate root (`root`, the text of `lib.rs`) re-exports from
/// its own `modules`, each with the module it comes from: `pub use
/// a::{X, b::Y};` maps `X` and `Y` to `a`.
pub fn root_exports(root: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let tokens = tokens(root);
    let mut exports = BTreeMap::new();
    for (i, token) in tokens.iter().enumerate() {
        if !matches!(token, Token::Ident(word) if word == "use") {
            continue;
        }
        let mut paths = Vec::new();
        tree(&tokens, i + 1, &[], &mut paths);
        for path in paths {
            let path: Vec<&String> = path
                .iter()
                .skip_while(|segment| matches!(segment.as_str(), "crate" | "self"))
                .collect();
            if let (Some(module), Some(name)) = (path.first(), path.last())
                && path.len() >= 2
                && modules.contains(*module)
            {
                exports.insert((*name).clone(), (*module).clone());
            }
        }
    }
    exports
}

/// The crate's top-level modules and, for each, the other top-level
/// modules its files use.
pub fn edges(sources: &[(Vec<String>, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = sources
        .iter()
        .filter_map(|(module, _)| module.first().cloned())
        .collect();
    let exports = sources
        .iter()
        .find(|(module, _)| module.is_empty())
        .map(|(_, root)| root_exports(root, &modules))
        .unwrap_or_default();
    let mut edges: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|module| (module.clone(), BTreeSet::new()))
        .collect();
    for (module, text) in sources {
        let Some(own) = module.first() else { continue };
        for path in uses(module, text) {
            let Some(first) = path.first() else { continue };
            let target = match exports.get(first) {
                Some(module) if !modules.contains(first) => module,
                _ => first,
            };
            if target != own && modules.contains(target) {
                edges.get_mut(own).unwrap().insert(target.clone());
            }
        }
    }
    edges
}

/// Every way `edges` breaks `layers`, one sentence each: a module missing
/// from the table, a table entry naming no module, an edge that points
/// sideways or up.
pub fn violations(
    edges: &BTreeMap<String, BTreeSet<String>>,
    layers: &[(&str, u32)],
) -> Vec<String> {
    let layer = |module: &str| {
        layers
            .iter()
            .find(|(name, _)| *name == module)
            .map(|(_, layer)| *layer)
    };
    let mut found = Vec::new();
    for (name, _) in layers {
        if !edges.contains_key(*name) {
            found.push(format!(
                "`{name}` is in the layer table but is no module of src/"
            ));
        }
    }
    for (module, used) in edges {
        let Some(own) = layer(module) else {
            found.push(format!(
                "src/{module} is not in the layer table: add it to LAYERS and to the crate doc"
            ));
            continue;
        };
        for target in used {
            match layer(target) {
                Some(theirs) if theirs >= own => found.push(format!(
                    "{module} (layer {own}) uses {target} (layer {theirs})"
                )),
                _ => {}
            }
        }
    }
    found
}

/// The check for the crate whose `src/` is `src`: its violations of `layers`.
pub fn check(src: &Path, layers: &[(&str, u32)]) -> Vec<String> {
    violations(&edges(&sources(src)), layers)
}

/// The parser and the check on sample sources, so that the check itself
/// can fail: each including test calls this from a `#[test]`.
pub fn self_test() {
    let segments = |text: &str| -> Vec<String> {
        text.split("::")
            .filter(|part| !part.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let module = |text: &str| segments(text);
    // Modules are `.rs` files only, keyed by path.
    assert_eq!(module_of(Path::new("system_prompt.md")), None);
    assert_eq!(
        module_of(Path::new("system_prompt.rs")),
        Some(module("system_prompt"))
    );
    assert_eq!(
        module_of(Path::new("builtin/bash/mod.rs")),
        Some(module("builtin::bash"))
    );
    assert_eq!(
        module_of(Path::new("workspace/open.rs")),
        Some(module("workspace::open"))
    );
    assert_eq!(module_of(Path::new("lib.rs")), Some(Vec::new()));

    // Groups, nested groups, `self` in a group, globs, aliases.
    let text = r#"
        use crate::{a::X, b, c::{d::Y, self}, e::*, q as r};
        use crate::f as g;
        use std::collections::HashMap;
    "#;
    let found: Vec<Vec<String>> = uses(&module("m"), text);
    let expected: Vec<Vec<String>> = ["a::X", "b", "c::d::Y", "c", "e", "q", "f"]
        .map(segments)
        .to_vec();
    assert_eq!(found, expected);

    // `super` and `self` resolve against the file's module, and against an
    // inline module within it; `super::super` climbs twice.
    let text = r#"
        use super::output::Collector;
        use self::inner::Z;
        fn f() { super::super::top::call(); }
        mod tests {
            use super::*;
            use super::super::sibling::W;
        }
        fn g() { crate::late::h(); }
    "#;
    let found = uses(&module("builtin::bash"), text);
    let expected: Vec<Vec<String>> = [
        "builtin::output::Collector",
        "builtin::bash::inner::Z",
        "top::call",
        "builtin::bash",
        "builtin::sibling::W",
        "late::h",
    ]
    .map(segments)
    .to_vec();
    assert_eq!(found, expected);
    // Above the root: no path.
    assert!(uses(&module("top"), "use super::super::x;").is_empty());

    // Comments, strings, chars, lifetimes, `$crate` and `pub(crate)` name
    // no module.
    let text = r##"
        // use crate::commented;
        /* crate::blocked /* nested */ crate::still */
        /// [`crate::doc_link`]
        const S: &str = "crate::in_string";
        const R: &str = r#"crate::in_raw "quoted" string"#;
        const C: char = '"';
        fn l<'a>(x: &'a str) -> &'a str { x }
        macro_rules! m { () => { $crate::macro_own::f() }; }
        pub(crate) fn visible() { crate::real::f(); }
    "##;
    assert_eq!(uses(&module("m"), text), [segments("real::f")]);

    // The check: edges between top-level modules only, upward or sideways
    // ones reported, and the table kept complete both ways.
    let sources = vec![
        (
            Vec::new(),
            "mod high; pub use high::Exported; pub use peer::{Root as Other};".to_owned(),
        ),
        (module("low"), "use crate::high::X;".to_owned()),
        (module("high"), "use crate::{low::Y, peer};".to_owned()),
        (
            module("peer"),
            "use crate::Other; fn f() { crate::Missing::g() }".to_owned(),
        ),
        (module("user"), "use crate::Exported;".to_owned()),
        (
            module("high::inner"),
            "use super::super::low::Z; use super::W;".to_owned(),
        ),
        (module("unlisted"), String::new()),
    ];
    let graph = edges(&sources);
    assert_eq!(
        graph["high"],
        BTreeSet::from(["low".to_owned(), "peer".to_owned()])
    );
    // A name the root re-exports from a module is a use of that module
    // (an alias is not followed, a name nobody exports is no edge).
    assert_eq!(graph["user"], BTreeSet::from(["high".to_owned()]));
    assert!(graph["peer"].is_empty(), "{:?}", graph["peer"]);
    let layers = [
        ("low", 0),
        ("peer", 1),
        ("high", 1),
        ("user", 2),
        ("gone", 2),
    ];
    let found = violations(&graph, &layers);
    assert_eq!(
        found,
        [
            "`gone` is in the layer table but is no module of src/",
            "high (layer 1) uses peer (layer 1)",
            "low (layer 0) uses high (layer 1)",
            "src/unlisted is not in the layer table: add it to LAYERS and to the crate doc",
        ],
        "{found:#?}"
    );
}
