//! `dist/_headers` (the header rules static hosts such as Netlify and Cloudflare Pages
//! read) must carry, for every spelling of each page's path, exactly the CSP of that
//! page's meta tag. scripts/build-web.sh generates the file with Python's HTML parser;
//! this reads both pages with its own small parser, so the two cross-check.

use std::collections::BTreeMap;
use std::path::PathBuf;

fn dist() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist")
}

/// The attributes of every `<meta …>` tag: quoted ("…", '…') or bare values, names
/// lower-cased, entities left as they are (the policies use none).
fn meta_tags(html: &str) -> Vec<BTreeMap<String, String>> {
    let mut tags = Vec::new();
    let lower = html.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find("<meta") {
        let mut rest = &html[from + at + "<meta".len()..];
        let mut attrs = BTreeMap::new();
        loop {
            rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == '/');
            if rest.is_empty() || rest.starts_with('>') {
                break;
            }
            let name_end = rest
                .find(|c: char| c.is_ascii_whitespace() || c == '=' || c == '>')
                .unwrap_or(rest.len());
            let name = rest[..name_end].to_ascii_lowercase();
            rest = rest[name_end..].trim_start();
            let mut value = String::new();
            if let Some(after) = rest.strip_prefix('=') {
                let after = after.trim_start();
                if let Some(quote) = after.chars().next().filter(|c| *c == '"' || *c == '\'') {
                    let body = &after[1..];
                    let end = body.find(quote).expect("an unterminated attribute value");
                    value = body[..end].to_owned();
                    rest = &body[end + 1..];
                } else {
                    let end = after
                        .find(|c: char| c.is_ascii_whitespace() || c == '>')
                        .unwrap_or(after.len());
                    value = after[..end].to_owned();
                    rest = &after[end..];
                }
            }
            attrs.insert(name, value);
        }
        tags.push(attrs);
        from = html.len() - rest.len();
    }
    tags
}

/// The page's one CSP meta policy, whitespace-normalised (as a header must be).
fn meta_csp(page: &str) -> String {
    let html = std::fs::read_to_string(dist().join(page)).expect("the committed page");
    let policies: Vec<String> = meta_tags(&html)
        .into_iter()
        .filter(|a| {
            a.get("http-equiv")
                .is_some_and(|v| v.eq_ignore_ascii_case("content-security-policy"))
        })
        .map(|a| a.get("content").cloned().unwrap_or_default())
        .collect();
    assert_eq!(policies.len(), 1, "{page}: one CSP meta tag expected");
    let policy = policies[0].split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(policy.contains("default-src"), "{page}: {policy:?}");
    policy
}

/// `_headers` as (path → [(header name, value)]), in the Netlify format: a path line,
/// then indented `Name: value` lines; `#` lines are comments.
fn header_rules() -> BTreeMap<String, Vec<(String, String)>> {
    let text = std::fs::read_to_string(dist().join("_headers"))
        .expect("dist/_headers (scripts/build-web.sh writes it)");
    let mut rules: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            let path: &String = current.as_ref().expect("a header line before any path");
            let (name, value) = line.trim().split_once(':').expect("Name: value");
            rules
                .entry(path.clone())
                .or_default()
                .push((name.trim().to_owned(), value.trim().to_owned()));
        } else {
            assert!(line.starts_with('/'), "a path rule starts with /: {line:?}");
            current = Some(line.trim().to_owned());
        }
    }
    rules
}

#[test]
fn headers_carry_each_pages_meta_csp() {
    let rules = header_rules();
    let pages = [
        ("index.html", &["/", "/index.html"][..]),
        (
            "agent/index.html",
            &["/agent", "/agent/", "/agent/index.html"][..],
        ),
    ];
    let mut expected_paths = Vec::new();
    for (page, paths) in pages {
        let policy = meta_csp(page);
        for path in paths {
            let csp: Vec<&str> = rules
                .get(*path)
                .unwrap_or_else(|| panic!("_headers has no rule for {path}"))
                .iter()
                .filter(|(name, _)| name.eq_ignore_ascii_case("content-security-policy"))
                .map(|(_, value)| value.as_str())
                .collect();
            assert_eq!(
                csp,
                [policy.as_str()],
                "{path} must carry {page}'s meta CSP"
            );
            expected_paths.push(path.to_string());
        }
    }
    // No wildcard or stray rule: overlapping rules would merge into a second policy.
    expected_paths.sort();
    assert_eq!(rules.keys().cloned().collect::<Vec<_>>(), expected_paths);
}

#[test]
fn meta_parser_reads_quoted_and_bare_attributes() {
    let tags = meta_tags(
        "<META content=\"a 'b'; c > d\" http-equiv=Content-Security-Policy>\
         <meta name='x' content=y/>",
    );
    assert_eq!(tags.len(), 2);
    assert_eq!(tags[0]["content"], "a 'b'; c > d");
    assert_eq!(tags[0]["http-equiv"], "Content-Security-Policy");
    assert_eq!(tags[1]["name"], "x");
    assert_eq!(tags[1]["content"], "y/");
}
