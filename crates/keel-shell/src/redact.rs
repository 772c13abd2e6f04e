//! Keeping secrets out of what the analysis reports.
//!
//! Targets and reasons end up in permission requests and in the session's
//! `permission_decision` entries, which promise hashes of arguments, never
//! the arguments. A command's URLs often carry credentials
//! (`https://user:TOKEN@host/`, `?access_token=…`), so every URL in a target
//! or a reason is reduced to scheme, host (with port) and path: userinfo,
//! query and fragment are dropped. A remote host (`user@host`) keeps only
//! the host.

/// `scheme://host/path` of a URL, without userinfo, query or fragment.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let path = tail.split(['?', '#']).next().unwrap_or_default();
    format!("{scheme}://{host}{path}")
}

/// A remote host operand without its user (`user:secret@host` → `host`);
/// a URL is left whole for [`redact_url`].
pub(crate) fn host_only(host: &str) -> &str {
    if host.contains("://") {
        return host;
    }
    host.rsplit_once('@').map_or(host, |(_, host)| host)
}

/// `text` with every URL in it (a run of scheme characters, `://`, then
/// everything up to whitespace or a quote) passed through [`redact_url`].
pub(crate) fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = rest.find("://") {
        let before = rest.get(..found).unwrap_or_default();
        let scheme_len = before
            .bytes()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
            .count();
        let start = found - scheme_len;
        let after = rest.get(found..).unwrap_or_default();
        let end = found
            + after
                .find(|c: char| c.is_whitespace() || matches!(c, '`' | '"' | '\'' | '<' | '>'))
                .unwrap_or(after.len());
        out.push_str(rest.get(..start).unwrap_or_default());
        match rest.get(start..end) {
            Some(url) if scheme_len > 0 => out.push_str(&redact_url(url)),
            Some(text) => out.push_str(text),
            None => {}
        }
        rest = rest.get(end..).unwrap_or_default();
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_userinfo_query_and_fragment() {
        let cases = [
            (
                "https://user:TOKEN@example.com/a/b?access_token=S#frag",
                "https://example.com/a/b",
            ),
            (
                "https://TOKEN@example.com:8443?x=1",
                "https://example.com:8443",
            ),
            ("git+https://u:p@host/repo.git", "git+https://host/repo.git"),
            ("http://plain.example/", "http://plain.example/"),
            ("https://a@b@host/#x", "https://host/"),
        ];
        for (url, expected) in cases {
            assert_eq!(redact_url(url), expected, "{url}");
        }
    }

    #[test]
    fn urls_inside_text_are_redacted_and_the_rest_kept() {
        assert_eq!(
            redact_urls_in("`https://u:TOKEN@h/p?k=SECRET` is a network address; `x://` too"),
            "`https://h/p` is a network address; `x://` too"
        );
        assert_eq!(redact_urls_in("no url here"), "no url here");
        assert_eq!(redact_urls_in("://odd"), "://odd");
        assert_eq!(host_only("git:TOKEN@github.com"), "github.com");
    }
}
