//! The HTTP answers' headers read the same way by the agent and the page: a `Link`
//! header's next page, `Content-Range`, the origin of a URL (where a token may be
//! sent), and the Hub's refusals in words.

#![deny(clippy::arithmetic_side_effects)]

/// The `rel="next"` target of an HTTP `Link` header (RFC 8288: link-values
/// `<URI>; param=value; …` separated by commas; `rel` may hold several
/// space-separated types, quoted or not, in any case), trimmed; `None` when there is
/// none.
pub fn link_next(header: &str) -> Option<&str> {
    let mut rest = header;
    loop {
        let open = rest.find('<')?;
        let after = rest.get(open.checked_add(1)?..)?;
        let close = after.find('>')?;
        let target = after.get(..close)?.trim();
        let tail = after.get(close.checked_add(1)?..)?;
        // This link-value's parameters run to the next comma outside quotes.
        let mut quoted = false;
        let end = tail
            .char_indices()
            .find(|&(_, c)| {
                if c == '"' {
                    quoted = !quoted;
                }
                c == ',' && !quoted
            })
            .map_or(tail.len(), |(i, _)| i);
        let params = tail.get(..end)?;
        let next = params.split(';').any(|p| {
            p.split_once('=').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("rel")
                    && value
                        .trim()
                        .trim_matches('"')
                        .split_ascii_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("next"))
            })
        });
        if next && !target.is_empty() {
            return Some(target);
        }
        rest = tail.get(end..)?;
    }
}

/// The Hub's refusal of a request in words, the same from the agent and the page:
/// 401/403 (gated, private, or — as the Hub answers without a token — missing) and 404
/// (repository, revision or file, as `X-Error-Code` names it). `what` names the request,
/// `model_page` the repository's page (for the licence), `token_sent` whether a token
/// went with it and `token_how` how this client is given one. `None` for any other
/// status.
pub fn refusal(
    status: u16,
    error_code: Option<&str>,
    what: &str,
    model_page: &str,
    token_sent: bool,
    token_how: &str,
) -> Option<String> {
    match status {
        401 | 403 if error_code == Some("RepositoryNotFound") => Some(format!(
            "{what}: not found (no such repository, or a private one: check the id, or {token_how})"
        )),
        401 | 403 => Some(format!(
            "{what}: access refused (HTTP {status}): the model is gated or private ({}): accept the licence on the model page ({model_page}) and {token_how}",
            if token_sent {
                "a token was sent, but it has no access to this repository"
            } else {
                "no token was given"
            }
        )),
        404 => Some(format!(
            "{what}: not found ({})",
            match error_code {
                Some("RepositoryNotFound") => "no such repository",
                Some("RevisionNotFound") => "no such revision",
                Some("EntryNotFound") => "no such file in this revision",
                _ => "HTTP 404",
            }
        )),
        _ => None,
    }
}

/// `Content-Range: bytes START-END/TOTAL` → (START, TOTAL), for a range inside the
/// file; `None` for anything else (an unknown total `*`, an inverted or outside span).
pub fn parse_content_range(v: &str) -> Option<(u64, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (start, end) = span.split_once('-')?;
    let (start, end, total): (u64, u64, u64) = (
        start.trim().parse().ok()?,
        end.trim().parse().ok()?,
        total.trim().parse().ok()?,
    );
    (start <= end && end < total).then_some((start, total))
}

/// The origin of an `http(s)` URL: scheme, host (lower case) and port (the scheme's
/// default when none is written). `None` for any other scheme, an empty host, a bad
/// port, or userinfo (`user@host`: a URL that could dress one host as another is
/// never treated as the Hub's).
pub fn origin(url: &str) -> Option<(&'static str, String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let (scheme, default_port): (&'static str, u16) = if scheme.eq_ignore_ascii_case("https") {
        ("https", 443)
    } else if scheme.eq_ignore_ascii_case("http") {
        ("http", 80)
    } else {
        return None;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return None;
    }
    let (host, port) = match authority.rsplit_once(':') {
        // A bracketed IPv6 literal without a port has colons but ends in `]`.
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (authority, None),
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok()?,
        None => default_port,
    };
    (!host.is_empty()).then(|| (scheme, host.to_ascii_lowercase(), port))
}

/// Whether two URLs share scheme, host and port: where the token may be sent (the
/// Hub's own origin, never its CDN).
pub fn same_origin(a: &str, b: &str) -> bool {
    match (origin(a), origin(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data from small known numbers
mod tests {
    use super::*;

    #[test]
    fn content_range_is_checked() {
        assert_eq!(parse_content_range("bytes 0-7/100"), Some((0, 100)));
        assert_eq!(parse_content_range("bytes 8-99/100"), Some((8, 100)));
        assert_eq!(parse_content_range("bytes 0-7/*"), None);
        assert_eq!(parse_content_range("bytes 9-7/100"), None);
        assert_eq!(parse_content_range("bytes 0-100/100"), None);
    }

    #[test]
    fn refusals_are_named() {
        let words = |status, code| {
            refusal(
                status,
                code,
                "x/y@main: config.json",
                "https://h/x/y",
                false,
                "set HF_TOKEN",
            )
        };
        assert!(
            words(401, Some("GatedRepo"))
                .unwrap()
                .contains("gated or private (no token was given)")
        );
        assert!(
            words(401, Some("RepositoryNotFound"))
                .unwrap()
                .contains("not found (no such repository")
        );
        assert!(
            words(404, Some("RevisionNotFound"))
                .unwrap()
                .ends_with("not found (no such revision)")
        );
        assert!(
            words(404, Some("EntryNotFound"))
                .unwrap()
                .ends_with("not found (no such file in this revision)")
        );
        assert!(words(404, None).unwrap().ends_with("not found (HTTP 404)"));
        assert_eq!(words(500, None), None);
        assert!(
            refusal(403, None, "w", "p", true, "t")
                .unwrap()
                .contains("a token was sent, but it has no access")
        );
    }

    #[test]
    fn origins_compare_scheme_host_and_port() {
        assert!(same_origin(
            "https://huggingface.co/a",
            "https://huggingface.co"
        ));
        assert!(same_origin(
            "https://HuggingFace.co:443/x",
            "https://huggingface.co"
        ));
        assert!(same_origin(
            "http://127.0.0.1:8080?x",
            "http://127.0.0.1:8080"
        ));
        assert!(!same_origin(
            "https://cdn-lfs.hf.co/x",
            "https://huggingface.co"
        ));
        assert!(!same_origin("http://127.0.0.1:1/x", "http://127.0.0.1:2"));
        assert!(!same_origin(
            "http://huggingface.co/x",
            "https://huggingface.co"
        ));
        assert!(!same_origin(
            "https://huggingface.co.evil.example/x",
            "https://huggingface.co"
        ));
        assert!(!same_origin(
            "https://huggingface.co@evil.example/x",
            "https://huggingface.co"
        ));
        assert!(!same_origin(
            "ftp://huggingface.co/x",
            "ftp://huggingface.co"
        ));
        assert!(!same_origin(
            "https://huggingface.co:99999/x",
            "https://huggingface.co:99999"
        ));
        assert_eq!(
            origin("http://[::1]:8080/x"),
            Some(("http", "[::1]".to_string(), 8080))
        );
        assert_eq!(
            origin("http://[::1]/x"),
            Some(("http", "[::1]".to_string(), 80))
        );
    }

    #[test]
    fn link_headers_name_the_next_page() {
        let next = "https://huggingface.co/api/models/o/m/tree/main?recursive=true&cursor=ZXlK%3D";
        assert_eq!(link_next(&format!("<{next}>; rel=\"next\"")), Some(next));
        // Several links, the next one not first; rel lists, case and spacing.
        assert_eq!(
            link_next(&format!(
                "<https://h/a?x=1,2>; rel=\"prev first\", < {next} > ;REL = \"last NEXT\""
            )),
            Some(next)
        );
        assert_eq!(link_next(&format!("<{next}>;rel=next")), Some(next));
        assert_eq!(
            link_next("<https://h/a>; title=\"next, page\"; rel=\"last\""),
            None
        );
        for none in [
            "",
            "garbage",
            "<https://h/a>; rel=\"last\"",
            "<>; rel=next",
            "<https://h/a; rel=next",
        ] {
            assert_eq!(link_next(none), None, "{none}");
        }
    }
}
