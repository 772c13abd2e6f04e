//! Bearer tokens by name: a token's name is its tenant.
//!
//! Only each token's SHA-256 digest is kept. A presented token is hashed
//! and compared with every digest in constant time ([`subtle`]), so the
//! comparison reveals neither how much of a token matched nor its length,
//! and every configured token is compared whichever matches.

use std::fmt;
use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::ServerError;

/// The shortest token accepted, in bytes.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The largest token file read.
pub const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// The tenant of the unnamed token (`--token-file`, `KEEL_SERVER_TOKEN`,
/// `[server] token_file`).
pub const DEFAULT_TOKEN_NAME: &str = "default";

/// The tenant of a client that needs no token (stdio, or loopback with no
/// token configured).
pub const LOCAL_TENANT: &str = "local";

/// The tokens a server accepts, by name. `Debug` shows the names only.
#[derive(Clone, Default)]
pub struct Tokens {
    entries: Vec<(String, [u8; 32])>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(name, _)| name))
            .finish()
    }
}

impl Tokens {
    /// No tokens.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether there is no token (then only loopback clients are served).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tokens' names, in the order added.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(name, _)| name.as_str())
    }

    /// Adds `token` under `name`. Refuses a token shorter than
    /// [`MIN_TOKEN_BYTES`] or with whitespace or control characters, a
    /// name given twice or reserved ([`LOCAL_TENANT`]), and a token equal
    /// to one already added (its tenant would be ambiguous).
    pub fn add(&mut self, name: &str, token: &str) -> Result<(), ServerError> {
        let bad = |why: &str| ServerError::BadToken {
            what: format!("token `{name}`"),
            why: why.to_owned(),
        };
        if name.is_empty() || name == LOCAL_TENANT {
            return Err(bad("this name is reserved"));
        }
        if self.entries.iter().any(|(known, _)| known == name) {
            return Err(bad("a token of this name is already configured"));
        }
        if token.len() < MIN_TOKEN_BYTES {
            return Err(bad(&format!(
                "shorter than {MIN_TOKEN_BYTES} bytes (make one with `head -c 32 /dev/urandom | base64`)"
            )));
        }
        if token
            .bytes()
            .any(|byte| byte.is_ascii_whitespace() || byte.is_ascii_control())
        {
            return Err(bad("it holds whitespace or control characters"));
        }
        let digest = digest(token.as_bytes());
        if self.check(token.as_bytes()).is_some() {
            return Err(bad("the same token as another name's"));
        }
        self.entries.push((name.to_owned(), digest));
        Ok(())
    }

    /// Reads a token from `path` (surrounding whitespace trimmed) and adds
    /// it under `name`. A file larger than [`MAX_TOKEN_FILE_BYTES`] is
    /// refused.
    pub fn add_file(&mut self, name: &str, path: &Path) -> Result<(), ServerError> {
        use std::io::Read;
        let io = |source| ServerError::TokenFile {
            path: path.to_path_buf(),
            source,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|file| file.take(MAX_TOKEN_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(io)?;
        if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
            return Err(ServerError::BadToken {
                what: format!("the token file {}", path.display()),
                why: format!("it holds more than {MAX_TOKEN_FILE_BYTES} bytes"),
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| ServerError::BadToken {
            what: format!("the token file {}", path.display()),
            why: "it is not UTF-8 text".into(),
        })?;
        self.add(name, text.trim())
    }

    /// The name of the token `presented` is, if any; constant time in the
    /// presented token and over every configured token.
    pub fn check(&self, presented: &[u8]) -> Option<&str> {
        let presented = digest(presented);
        let mut found = None;
        for (name, known) in &self.entries {
            let equal: bool = presented.ct_eq(known).into();
            if equal {
                found = Some(name.as_str());
            }
        }
        found
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The token of an `Authorization: Bearer TOKEN` header value, if it is one.
pub fn bearer(header: &[u8]) -> Option<&[u8]> {
    let scheme = header.get(..7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = header.get(7..)?.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tokens_are_found_by_value_and_named() {
        let mut tokens = Tokens::new();
        tokens.add("ci", "0123456789abcdef-ci").unwrap();
        tokens.add("alice", "0123456789abcdef-alice").unwrap();
        assert_eq!(tokens.check(b"0123456789abcdef-alice"), Some("alice"));
        assert_eq!(tokens.check(b"0123456789abcdef-ci"), Some("ci"));
        assert_eq!(tokens.check(b"0123456789abcdef-c"), None);
        assert_eq!(tokens.check(b""), None);
        assert!(
            tokens.add("bob", "0123456789abcdef-ci").is_err(),
            "same token"
        );
        assert!(
            tokens.add("ci", "0123456789abcdef-other").is_err(),
            "same name"
        );
        assert!(tokens.add("x", "short").is_err());
        assert!(tokens.add("local", "0123456789abcdef-local").is_err());
        assert!(!format!("{tokens:?}").contains("0123"), "{tokens:?}");
        let error = tokens
            .add("y", "0123456789abc def")
            .unwrap_err()
            .to_string();
        assert!(!error.contains("0123"), "{error}");
    }

    #[test]
    fn token_files_are_trimmed_and_bounded() {
        let dir = std::env::temp_dir().join(format!("keel-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(&good, "0123456789abcdef-file\n").unwrap();
        let big = dir.join("big");
        std::fs::write(&big, "a".repeat(5000)).unwrap();
        let mut tokens = Tokens::new();
        tokens.add_file("a", &good).unwrap();
        assert_eq!(tokens.check(b"0123456789abcdef-file"), Some("a"));
        let error = tokens.add_file("b", &big).unwrap_err();
        assert_eq!(error.code(), "bad_token");
        assert!(!error.to_string().contains("aaaa"), "{error}");
        let missing = tokens.add_file("c", &dir.join("missing")).unwrap_err();
        assert_eq!(missing.code(), "token_file");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bearer_reads_the_scheme_case_insensitively() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bear"), None);
    }
}
