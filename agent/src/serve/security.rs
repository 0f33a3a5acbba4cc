//! The checks every request to `serve` passes before anything else happens:
//! the pairing token, the `Host` header (DNS-rebinding defence) and the `Origin` header
//! (cross-site WebSocket hijacking defence).
//!
//! Why all three: the agent listens on loopback, but any web page the user visits can
//! make the browser connect to loopback. A foreign page cannot read the token (it lives
//! in the pairing URL's fragment, which never leaves the browser), a rebound DNS name
//! arrives with a foreign `Host`, and a cross-site WebSocket arrives with a foreign
//! `Origin`. Each check alone has known gaps; together they leave only the paired page.

use std::fmt::Write as _;

use anyhow::{Context, bail};

/// The secret a page must present on `/ws?token=…`: 256 random bits, hex-encoded.
pub struct Token {
    hex: String,
}

impl Token {
    /// Draws a fresh token from the operating system's random source.
    pub fn generate() -> anyhow::Result<Token> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("drawing the pairing token from the OS random source")?;
        let mut hex = String::with_capacity(64);
        for byte in bytes {
            // Writing to a String cannot fail.
            let _ = write!(hex, "{byte:02x}");
        }
        Ok(Token { hex })
    }

    /// The token as it appears in the pairing URL.
    pub fn as_str(&self) -> &str {
        &self.hex
    }

    /// Compares `candidate` with the token in time that does not depend on where they
    /// first differ, so the token cannot be guessed byte by byte from response times.
    /// (The length is not secret: every token is 64 hex digits.)
    pub fn matches(&self, candidate: &str) -> bool {
        let expected = self.hex.as_bytes();
        let candidate = candidate.as_bytes();
        if expected.len() != candidate.len() {
            return false;
        }
        let difference = expected
            .iter()
            .zip(candidate)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        // black_box keeps the optimiser from turning the fold into an early exit.
        std::hint::black_box(difference) == 0
    }
}

/// Why a request was refused; the text is the body of the 403 answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// The `Host` and `Origin` rules for one listening port.
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    port: u16,
    allowed_origins: Vec<String>,
}

impl OriginPolicy {
    /// The rules for an agent on `port`, allowing its own origin and `extra` ones
    /// (already normalised by [`normalise_origin`]).
    pub fn new(port: u16, extra: &[String]) -> OriginPolicy {
        let mut allowed_origins = vec![
            format!("http://127.0.0.1:{port}"),
            format!("http://localhost:{port}"),
        ];
        for origin in extra {
            if !allowed_origins.contains(origin) {
                allowed_origins.push(origin.clone());
            }
        }
        OriginPolicy {
            port,
            allowed_origins,
        }
    }

    /// `Host` must name this agent by a loopback name and the right port, exactly.
    pub fn check_host(&self, host: Option<&str>) -> Result<(), Refusal> {
        let Some(host) = host else {
            return Err(Refusal("missing Host header".into()));
        };
        let host = host.trim().to_ascii_lowercase();
        let port = self.port;
        if host == format!("127.0.0.1:{port}") || host == format!("localhost:{port}") {
            Ok(())
        } else {
            Err(Refusal(format!(
                "Host {:?} is not this agent (expected 127.0.0.1:{port} or localhost:{port})",
                shorten(&host)
            )))
        }
    }

    /// `Origin`, when present, must be allowed; `required` makes a missing one a refusal
    /// too (the WebSocket: every browser sends Origin there, so a missing one is not a
    /// browser page we paired with).
    pub fn check_origin(&self, origin: Option<&str>, required: bool) -> Result<(), Refusal> {
        match origin {
            None if required => Err(Refusal("missing Origin header".into())),
            None => Ok(()),
            Some(origin) => {
                let normalised = normalise_origin(origin).unwrap_or_default();
                if self.allowed_origins.contains(&normalised) {
                    Ok(())
                } else {
                    Err(Refusal(format!(
                        "Origin {:?} is not allowed (start the agent with --allow-origin to allow it)",
                        shorten(origin)
                    )))
                }
            }
        }
    }

    /// The origins accepted, for the startup banner.
    pub fn allowed(&self) -> &[String] {
        &self.allowed_origins
    }
}

/// Checks the `token` query parameter of a WebSocket request.
pub fn check_token(token: &Token, query: Option<&str>) -> Result<(), Refusal> {
    let presented = query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="));
    match presented {
        None => Err(Refusal(
            "missing token (connect to /ws?token=<token from the pairing URL>)".into(),
        )),
        Some(candidate) if token.matches(candidate) => Ok(()),
        Some(_) => Err(Refusal(
            "wrong token (open the pairing URL the agent printed)".into(),
        )),
    }
}

/// Reduces an origin to `scheme://host[:port]` in lower case, without a trailing slash,
/// or refuses it. Used both for `--allow-origin` values and for incoming `Origin`s so the
/// comparison is exact.
pub fn normalise_origin(origin: &str) -> anyhow::Result<String> {
    let trimmed = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    let Some((scheme, rest)) = trimmed.split_once("://") else {
        bail!("origin {origin:?} must look like http://host:port or https://host");
    };
    if scheme != "http" && scheme != "https" {
        bail!("origin {origin:?} must use http or https");
    }
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ', '*']) {
        bail!("origin {origin:?} must be a bare scheme://host[:port], with no path or wildcard");
    }
    Ok(trimmed)
}

fn shorten(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_has_256_bits_and_compares_exactly() {
        let token = Token::generate().expect("random source");
        assert_eq!(token.as_str().len(), 64);
        assert!(token.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(token.matches(token.as_str()));
        let mut wrong = token.as_str().to_owned();
        wrong.replace_range(63.., if wrong.ends_with('0') { "1" } else { "0" });
        assert!(!token.matches(&wrong));
        assert!(!token.matches(&token.as_str()[..63]));
        assert!(!token.matches(""));
        let other = Token::generate().expect("random source");
        assert_ne!(token.as_str(), other.as_str());
    }

    #[test]
    fn token_must_be_in_the_query() {
        let token = Token::generate().expect("random source");
        let good = format!("a=1&token={}", token.as_str());
        assert_eq!(check_token(&token, Some(&good)), Ok(()));
        assert!(check_token(&token, None).is_err_and(|r| r.0.starts_with("missing token")));
        assert!(
            check_token(&token, Some("token=00")).is_err_and(|r| r.0.starts_with("wrong token"))
        );
    }

    #[test]
    fn host_must_be_loopback_with_our_port() {
        let policy = OriginPolicy::new(4100, &[]);
        assert_eq!(policy.check_host(Some("127.0.0.1:4100")), Ok(()));
        assert_eq!(policy.check_host(Some("LOCALHOST:4100")), Ok(()));
        for bad in [
            "127.0.0.1:4101",
            "127.0.0.1",
            "evil.example:4100",
            "localhost.evil:4100",
            "",
        ] {
            assert!(policy.check_host(Some(bad)).is_err(), "{bad}");
        }
        assert!(policy.check_host(None).is_err());
    }

    #[test]
    fn origin_must_be_ours_or_allowed() {
        let extra = vec![normalise_origin("https://gpumem.example/").expect("valid")];
        let policy = OriginPolicy::new(4100, &extra);
        assert_eq!(
            policy.check_origin(Some("http://127.0.0.1:4100"), true),
            Ok(())
        );
        assert_eq!(
            policy.check_origin(Some("http://localhost:4100"), true),
            Ok(())
        );
        assert_eq!(
            policy.check_origin(Some("https://GPUMEM.example"), true),
            Ok(())
        );
        assert!(
            policy
                .check_origin(Some("http://evil.example"), true)
                .is_err()
        );
        assert!(policy.check_origin(Some("null"), true).is_err());
        assert!(
            policy
                .check_origin(Some("http://127.0.0.1:4101"), true)
                .is_err()
        );
        assert!(policy.check_origin(None, true).is_err());
        assert_eq!(policy.check_origin(None, false), Ok(()));
    }

    #[test]
    fn allow_origin_values_are_checked() {
        assert_eq!(
            normalise_origin("HTTP://Example.org:8080/").ok().as_deref(),
            Some("http://example.org:8080")
        );
        for bad in [
            "*",
            "example.org",
            "ftp://x",
            "http://x/path",
            "https://*.example",
        ] {
            assert!(normalise_origin(bad).is_err(), "{bad}");
        }
    }
}
