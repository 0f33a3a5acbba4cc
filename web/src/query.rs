//! The query string: `key=value` pairs, percent-encoded. Pure functions, so the
//! round trip is tested natively; the page calls them from its Effects.

/// Splits `?a=1&b=x%20y` into decoded pairs, in order. A leading `?` is ignored,
/// `+` means a space (form encoding), and a malformed escape is kept as typed.
pub fn parse(query: &str) -> Vec<(String, String)> {
    query
        .trim_start_matches('?')
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|part| {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Joins pairs into a query string without the leading `?`.
pub fn build<'a, I>(pairs: I) -> String
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    pairs
        .into_iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encodes everything but the unreserved characters (RFC 3986) and `,`,
/// which keeps `lora-targets=q,k,v,o` readable.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b',') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes and `+`; invalid escapes and invalid UTF-8 are kept
/// (lossily) rather than dropped, so nothing typed disappears.
pub fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_what_users_type() {
        let pairs = [
            ("parameters", "7 000 000 000"),
            ("format", "gptq-4-g128"),
            ("lora-targets", "q,k,v,o"),
            ("context", "-1"),
            ("odd", "a&b=c%d+é"),
        ];
        let q = build(pairs);
        let back = parse(&format!("?{q}"));
        let want: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(back, want);
    }

    #[test]
    fn malformed_escapes_are_kept() {
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz1"), "%zz1");
        assert_eq!(decode("a+b"), "a b");
        assert_eq!(
            parse("?&x&y=1"),
            vec![("x".into(), "".into()), ("y".into(), "1".into())]
        );
    }
}
