//! The page's Content-Security-Policy, read from the built page's own
//! `<meta http-equiv="Content-Security-Policy">` so that the HTTP header `serve` sends
//! and the meta tag can never disagree.
//!
//! The one source of the policy is the meta tag of `web/index.html`;
//! `scripts/build-web.sh` adds the hashes of the inline scripts trunk emits and writes
//! the result into both built pages. `serve` sends it as a header (plus
//! `frame-ancestors 'none'`, which a meta tag cannot carry) with every file of the page.

/// The policy for answers that are not the page (refusals, errors, the not-built
/// notice): nothing may load or run.
pub const STRICT: &str = "default-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// The content of the first `<meta http-equiv="Content-Security-Policy">` in `html`,
/// with the few entities a minifier may write decoded; `None` when there is none or it
/// holds a character no header may carry.
pub fn policy_from_html(html: &str) -> Option<String> {
    let mut rest = html;
    while let Some(at) = find_ci(rest, "<meta") {
        let tag_end = rest[at..].find('>').map(|e| at + e)?;
        let tag = &rest[at + 5..tag_end];
        rest = &rest[tag_end..];
        let is_csp = attribute(tag, "http-equiv")
            .is_some_and(|v| v.eq_ignore_ascii_case("content-security-policy"));
        if !is_csp {
            continue;
        }
        let policy = attribute(tag, "content")?
            .replace("&#39;", "'")
            .replace("&#x27;", "'")
            .replace("&quot;", "\"")
            .replace("&amp;", "&");
        let policy = policy.trim().to_owned();
        return (!policy.is_empty() && policy.chars().all(|c| (' '..='~').contains(&c)))
            .then_some(policy);
    }
    None
}

/// The connect-src source for a Hub endpoint (`HF_ENDPOINT`): its scheme and host on
/// any port (a mirror's CDN may answer on another port of the same host, as the test
/// stand-in's does). `None` for anything but `http(s)://host[:port]`.
pub fn hub_source(endpoint: &str) -> Option<String> {
    let (scheme, rest) = endpoint.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let rest = rest.trim_end_matches('/');
    let (host, port) = rest.split_once(':').unwrap_or((rest, ""));
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    let port_ok = port.is_empty() || (port.len() <= 5 && port.chars().all(|c| c.is_ascii_digit()));
    (host_ok && port_ok).then(|| format!("{scheme}://{host}:*"))
}

/// `policy` with `source` added to its `connect-src` directive (appended as one when
/// there is none).
pub fn with_connect_source(policy: &str, source: &str) -> String {
    let mut found = false;
    let mut directives: Vec<String> = policy
        .split(';')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| {
            if d.split_whitespace().next() == Some("connect-src") {
                found = true;
                format!("{d} {source}")
            } else {
                d.to_owned()
            }
        })
        .collect();
    if !found {
        directives.push(format!("connect-src 'self' {source}"));
    }
    directives.join("; ")
}

fn find_ci(haystack: &str, needle: &str) -> Option<usize> {
    haystack
        .as_bytes()
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// The value of attribute `name` in the inside of a tag: quoted with `"` or `'`, or
/// bare up to the next space.
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let bytes = tag.as_bytes();
    let mut from = 0;
    while let Some(rel) = find_ci(&tag[from..], name) {
        let start = from + rel;
        from = start + name.len();
        // A whole attribute name: preceded by a space, followed by `=`.
        let before_ok = start > 0 && bytes[start - 1].is_ascii_whitespace();
        let value = tag[from..].trim_start();
        let Some(value) = value.strip_prefix('=').filter(|_| before_ok) else {
            continue;
        };
        let value = value.trim_start();
        return Some(match value.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let inner = &value[1..];
                &inner[..inner.find(q).unwrap_or(inner.len())]
            }
            _ => {
                let end = value
                    .find(|c: char| c.is_ascii_whitespace() || c == '/')
                    .unwrap_or(value.len());
                &value[..end]
            }
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hub_endpoint_adds_its_host_to_connect_src() {
        assert_eq!(
            hub_source("http://127.0.0.1:8080").as_deref(),
            Some("http://127.0.0.1:*")
        );
        assert_eq!(
            hub_source("https://hf-mirror.com/").as_deref(),
            Some("https://hf-mirror.com:*")
        );
        for bad in [
            "ftp://x",
            "https://",
            "https://a b",
            "https://x;script-src *",
            "https://x:99999999",
            "x",
        ] {
            assert_eq!(hub_source(bad), None, "{bad}");
        }
        assert_eq!(
            with_connect_source(
                "default-src 'self'; connect-src 'self' ws://127.0.0.1:*; object-src 'none'",
                "http://h:*"
            ),
            "default-src 'self'; connect-src 'self' ws://127.0.0.1:* http://h:*; object-src 'none'"
        );
        assert_eq!(
            with_connect_source("default-src 'self'", "http://h:*"),
            "default-src 'self'; connect-src 'self' http://h:*"
        );
    }

    #[test]
    fn reads_the_policy_in_either_attribute_order_and_quoting() {
        let normal = r#"<head><meta charset=utf-8><meta http-equiv="Content-Security-Policy" content="default-src 'self'; object-src 'none'"><title>x</title>"#;
        assert_eq!(
            policy_from_html(normal).as_deref(),
            Some("default-src 'self'; object-src 'none'")
        );
        let minified = r#"<meta content="width=device-width" name=viewport><meta content="script-src 'self' 'sha256-abc='" http-equiv=content-security-policy>"#;
        assert_eq!(
            policy_from_html(minified).as_deref(),
            Some("script-src 'self' 'sha256-abc='")
        );
        assert_eq!(policy_from_html("<meta charset=utf-8><p>no policy"), None);
        assert_eq!(
            policy_from_html("<meta http-equiv=Content-Security-Policy content=\"a\r\nX: y\">"),
            None,
            "a policy that would split the header is refused"
        );
    }
}
