//! HTTP for the page's Hub lookup, through the browser's `fetch`: bounded bodies, 429
//! and 5xx retried with capped backoff, the token only to the Hub's own origin, no
//! cookies, and a count of the requests sent.
//!
//! Redirects (the Hub's `resolve` URL → its CDN) are followed by the browser, which
//! drops `Authorization` on a cross-origin redirect (Fetch standard, "HTTP-redirect
//! fetch", step 13); a file's later reads go straight to the address its first answer
//! came from (`Response.url`), without the token.
//!
//! Every request ends: it is aborted [`TIMEOUT_MS`] after it was sent (plus time for
//! the bytes it asks for), or when the user cancels the lookup ([`cancel`]), and the
//! lookup then fails with words saying which.

use std::cell::Cell;

use js_sys::{Reflect, Uint8Array};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    Headers, ReadableStreamDefaultReader, Request, RequestCredentials, RequestInit, Response,
};

use gpumem_core::import::hub::{origin, parse_content_range, same_origin};

use crate::js_message;

/// What a request that got no answer at all fails with (no status: offline, blocked by
/// the Content-Security-Policy, refused), before the browser's words.
pub const UNREACHABLE: &str = "the request failed (";

/// Retries of one request answered 429 or 5xx (the first try not counted).
const RETRIES: u32 = 3;
/// The longest wait before a retry, in milliseconds, whatever `Retry-After` says.
const MAX_WAIT_MS: u32 = 8_000;
/// How long a request may take, in milliseconds, before it is aborted (as the agent's
/// client does; a Hub that never answers left the page waiting for good)…
pub const TIMEOUT_MS: u32 = 30_000;
/// …plus one millisecond per this many bytes a ranged read asks for (a 100 MB header
/// gets 25 s more: 4 MB/s).
const BYTES_PER_MS: u64 = 4_000;

#[wasm_bindgen(module = "/src/limits.js")]
extern "C" {
    /// A new lookup begins: its requests can be cancelled together.
    pub fn begin();
    /// Aborts every request of the lookup under way.
    pub fn cancel();
    /// `fetch(request)`, aborted after `ms` milliseconds or by [`cancel`].
    fn fetch_limited(request: &Request, ms: u32) -> js_sys::Promise;
}

/// What an aborted request's error says: its reason, which names a cancel or a
/// timeout (`limits.js`).
fn aborted(e: &JsValue) -> Option<String> {
    let name = Reflect::get(e, &"name".into()).ok()?.as_string()?;
    matches!(name.as_str(), "AbortError" | "TimeoutError").then(|| js_message(e, "aborted"))
}

/// An answer: status, the address it finally came from, the headers the lookup
/// reads (when the server exposed them to the page) and the body read so far.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The URL after redirects.
    pub url: String,
    /// `X-Error-Code` (the Hub names its refusals there).
    pub error_code: Option<String>,
    /// `X-Repo-Commit`.
    pub commit: Option<String>,
    /// The whole file's size, from `Content-Range: bytes a-b/SIZE` (a 206).
    pub total_size: Option<u64>,
    /// `Link` (the file listing's next page), when the server exposed it to the page.
    pub link: Option<String>,
    /// The body, up to the cap asked for.
    pub body: Vec<u8>,
    /// Whether the body went past the cap (the rest was not read).
    pub truncated: bool,
}

/// The page's HTTP client for one lookup.
pub struct Http {
    endpoint: String,
    token: Option<String>,
    requests: Cell<u32>,
}

impl Http {
    /// A client for `endpoint` (scheme://host[:port], no trailing slash).
    pub fn new(endpoint: &str, token: Option<String>) -> Http {
        Http {
            endpoint: endpoint.to_string(),
            token: token.filter(|t| !t.trim().is_empty()),
            requests: Cell::new(0),
        }
    }

    /// Requests sent so far (retries included).
    pub fn requests(&self) -> u32 {
        self.requests.get()
    }

    /// Whether a token was given.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// GETs `url`, reading at most `cap` bytes of the body; `range` asks for bytes
    /// `[start, end)`. 429 and 5xx are retried with backoff; every other status is
    /// returned for the caller to name.
    pub async fn get(
        &self,
        url: &str,
        range: Option<(u64, u64)>,
        cap: usize,
    ) -> Result<Answer, String> {
        let mut attempt = 0u32;
        loop {
            let response = self.send(url, range).await?;
            let answer_status = response.status();
            let retry = answer_status == 429 || (500..600).contains(&answer_status);
            if retry && attempt < RETRIES {
                let wait = header(&response, "retry-after")
                    .and_then(|s| s.trim().parse::<u32>().ok())
                    .map_or(500u32.saturating_mul(1 << attempt), |s| {
                        s.saturating_mul(1000)
                    })
                    .min(MAX_WAIT_MS);
                if let Some(body) = response.body() {
                    let _ = body.cancel();
                }
                sleep_ms(wait).await;
                attempt = attempt.saturating_add(1);
                continue;
            }
            let (body, truncated) = read_body(&response, cap).await?;
            return Ok(Answer {
                status: answer_status,
                url: response.url(),
                error_code: header(&response, "x-error-code"),
                commit: header(&response, "x-repo-commit"),
                total_size: header(&response, "content-range")
                    .and_then(|r| parse_content_range(&r))
                    .map(|(_, total)| total),
                link: header(&response, "link"),
                body,
                truncated,
            });
        }
    }

    async fn send(&self, url: &str, range: Option<(u64, u64)>) -> Result<Response, String> {
        let headers = Headers::new().map_err(|e| js_message(&e, "no Headers"))?;
        if let Some((start, end)) = range {
            let last = end.checked_sub(1).ok_or("an empty range was asked for")?;
            headers
                .set("Range", &format!("bytes={start}-{last}"))
                .map_err(|e| js_message(&e, "bad Range header"))?;
        }
        if let Some(t) = &self.token
            && same_origin(url, &self.endpoint)
        {
            headers
                .set("Authorization", &format!("Bearer {t}"))
                .map_err(|_| "the token has characters a header cannot carry".to_string())?;
        }
        let init = RequestInit::new();
        init.set_method("GET");
        init.set_headers(&headers);
        init.set_credentials(RequestCredentials::Omit);
        let asked = range.map_or(0, |(start, end)| end.saturating_sub(start));
        let limit = u64::from(TIMEOUT_MS).saturating_add(asked / BYTES_PER_MS);
        let request =
            Request::new_with_str_and_init(url, &init).map_err(|e| js_message(&e, "bad URL"))?;
        self.requests.set(self.requests.get().saturating_add(1));
        let response = JsFuture::from(fetch_limited(
            &request,
            u32::try_from(limit).unwrap_or(u32::MAX),
        ))
            .await
            .map_err(|e| {
                if let Some(words) = aborted(&e) {
                    return words;
                }
                format!(
                    "{}: {UNREACHABLE}{}) — offline, blocked by the page's Content-Security-Policy, or refused by the server",
                    origin(url).map_or_else(|| url.to_string(), |(s, h, p)| format!("{s}://{h}:{p}")),
                    js_message(&e, "network error")
                )
            })?;
        response
            .dyn_into()
            .map_err(|_| "fetch did not answer a Response".to_string())
    }
}

/// A response header the server exposed to the page, if any.
fn header(response: &Response, name: &str) -> Option<String> {
    response.headers().get(name).ok().flatten()
}

/// Reads at most `cap` bytes of the body; says whether more was there.
async fn read_body(response: &Response, cap: usize) -> Result<(Vec<u8>, bool), String> {
    let Some(body) = response.body() else {
        return Ok((Vec::new(), false));
    };
    let reader: ReadableStreamDefaultReader = body.get_reader().unchecked_into();
    let mut out: Vec<u8> = Vec::new();
    loop {
        let chunk = JsFuture::from(reader.read())
            .await
            .map_err(|e| aborted(&e).unwrap_or_else(|| js_message(&e, "the answer broke off")))?;
        if Reflect::get(&chunk, &"done".into())
            .ok()
            .and_then(|d| d.as_bool())
            .unwrap_or(true)
        {
            return Ok((out, false));
        }
        let value: Uint8Array = Reflect::get(&chunk, &"value".into())
            .map_err(|e| js_message(&e, "a chunk without bytes"))?
            .unchecked_into();
        let room = cap.saturating_sub(out.len());
        let n = value.length() as usize;
        if n > room {
            let keep = u32::try_from(room).unwrap_or(u32::MAX);
            out.extend_from_slice(&value.subarray(0, keep).to_vec());
            let _ = reader.cancel();
            return Ok((out, true));
        }
        out.extend_from_slice(&value.to_vec());
    }
}

/// Waits `ms` milliseconds (at once where there is no window).
pub async fn sleep_ms(ms: u32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let scheduled = web_sys::window().and_then(|w| {
            w.set_timeout_with_callback_and_timeout_and_arguments_0(
                &resolve,
                i32::try_from(ms).unwrap_or(i32::MAX),
            )
            .ok()
        });
        if scheduled.is_none() {
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    let _ = JsFuture::from(promise).await;
}
