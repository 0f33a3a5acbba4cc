//! The page's static files, as `serve` answers them: embedded in the binary from `dist/`
//! at build time (see `agent/build.rs`), or — for page development — read once at start
//! from a directory given with `--dist`.
//!
//! Either way every file is in memory before the first request, and a request can only
//! name an entry of this table: no request ever reaches the file system, so there is no
//! path to traverse.

use std::borrow::Cow;
use std::fs;
use std::path::Path;

use anyhow::{Context, bail};

use super::content_type::content_type;
use super::csp;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/dist_assets.rs"));
}

/// Largest `--dist` directory loaded into memory; a built page is a few MiB.
const MAX_DIST_BYTES: u64 = 256 * 1024 * 1024;

/// Answered for `/` when no page was built into the agent.
const NOT_BUILT: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>gpumem agent</title></head><body>\n<h1>gpumem agent</h1>\n\
<p>The page was not built into this agent. Build it with <code>trunk build --release</code> \
in <code>web/</code> (it writes <code>dist/</code>), then rebuild <code>gpumem-agent</code>; \
or start <code>gpumem-agent serve --dist DIR</code>.</p>\n\
<p>The agent's WebSocket at <code>/ws</code> works regardless: a page hosted elsewhere can \
pair by pasting the pairing URL.</p>\n</body></html>\n";

/// The Hub the built page looks models up on (`scripts/build-web.sh`'s default).
const HUGGING_FACE: &str = "https://huggingface.co";

/// One file of the page.
struct Asset {
    path: String,
    content_type: &'static str,
    bytes: Cow<'static, [u8]>,
}

/// The page's files, by URL path.
pub struct Assets {
    files: Vec<Asset>,
    origin: String,
    /// The Content-Security-Policy of the built page (its `index.html` meta tag), sent
    /// as a header with each of its files; the strict one when there is no page.
    policy: String,
}

impl Assets {
    /// The files embedded at build time.
    pub fn embedded() -> Assets {
        let files = embedded::ASSETS
            .iter()
            .map(|(path, content_type, bytes)| Asset {
                path: (*path).to_owned(),
                content_type,
                bytes: Cow::Borrowed(*bytes),
            })
            .collect();
        Assets::sorted(files, "embedded at build time".into())
    }

    /// Loads every file under `dir` into memory (hidden files skipped).
    pub fn from_dir(dir: &Path) -> anyhow::Result<Assets> {
        if !dir.is_dir() {
            bail!("--dist {} is not a directory", dir.display());
        }
        let mut files = Vec::new();
        let mut total = 0u64;
        load_dir(dir, dir, &mut files, &mut total)?;
        Ok(Assets::sorted(
            files,
            format!("read from {}", dir.display()),
        ))
    }

    fn sorted(mut files: Vec<Asset>, origin: String) -> Assets {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut assets = Assets {
            files,
            origin,
            policy: String::new(),
        };
        assets.policy = assets
            .find("/index.html")
            .and_then(|page| std::str::from_utf8(&page.bytes).ok())
            .and_then(csp::policy_from_html)
            .unwrap_or_else(|| csp::STRICT.to_owned());
        assets
    }

    /// Points the page's model lookup at `endpoint` (the agent's `HF_ENDPOINT`, a
    /// mirror or a test stand-in) instead of huggingface.co: the dimensioner's
    /// `<meta name="gpumem-hub">` names it, and the policy's connect-src allows its
    /// host — in the header and in every page's meta tag alike, since a browser
    /// enforces both. An endpoint that is not `http(s)://host[:port]` is refused.
    pub fn with_hub(mut self, endpoint: &str) -> anyhow::Result<Assets> {
        let endpoint = endpoint.trim().trim_end_matches('/');
        let Some(source) = csp::hub_source(endpoint) else {
            bail!("HF_ENDPOINT={endpoint}: expected http(s)://host[:port]");
        };
        let old = self.policy.clone();
        let new = csp::with_connect_source(&old, &source);
        let old_tag = format!("content=\"{old}\"");
        let new_tag = format!("content=\"{new}\"");
        let hub_tag = format!("<meta name=\"gpumem-hub\" content=\"{HUGGING_FACE}\">");
        let our_tag = format!("<meta name=\"gpumem-hub\" content=\"{endpoint}\">");
        for asset in &mut self.files {
            if !asset.path.ends_with(".html") {
                continue;
            }
            if let Ok(text) = std::str::from_utf8(&asset.bytes) {
                let text = text.replace(&old_tag, &new_tag).replace(&hub_tag, &our_tag);
                asset.bytes = Cow::Owned(text.into_bytes());
            }
        }
        self.policy = new;
        Ok(self)
    }

    /// The Content-Security-Policy sent with the page's files.
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// Whether the page itself (`/index.html`) is present.
    pub fn has_page(&self) -> bool {
        self.find("/index.html").is_some()
    }

    /// Where the files come from and how many there are, for the startup banner.
    pub fn describe(&self) -> String {
        if self.has_page() {
            format!("{} files {}", self.files.len(), self.origin)
        } else {
            format!(
                "no page built ({}); / explains how to build it",
                self.origin
            )
        }
    }

    /// The content type and bytes for a URL path; `/` is `/index.html`, which falls back
    /// to the not-built notice. A directory's path (`/agent/` or `/agent`: the agent &
    /// sheet page) is its `index.html`, when the table holds one.
    pub fn get(&self, path: &str) -> Option<(&'static str, &[u8])> {
        let path = if path == "/" { "/index.html" } else { path };
        let index = if path.ends_with('/') {
            format!("{path}index.html")
        } else {
            format!("{path}/index.html")
        };
        match self.find(path).or_else(|| self.find(&index)) {
            Some(asset) => Some((asset.content_type, &asset.bytes)),
            None if path == "/index.html" => {
                Some(("text/html; charset=utf-8", NOT_BUILT.as_bytes()))
            }
            None => None,
        }
    }

    fn find(&self, path: &str) -> Option<&Asset> {
        self.files
            .binary_search_by(|asset| asset.path.as_str().cmp(path))
            .ok()
            .and_then(|index| self.files.get(index))
    }
}

fn load_dir(
    root: &Path,
    dir: &Path,
    files: &mut Vec<Asset>,
    total: &mut u64,
) -> anyhow::Result<()> {
    let entries = fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let kind = entry
            .file_type()
            .with_context(|| format!("reading {}", path.display()))?;
        if kind.is_dir() {
            load_dir(root, &path, files, total)?;
        } else if kind.is_file() {
            let Some(relative) = path.strip_prefix(root).ok().and_then(|r| r.to_str()) else {
                continue;
            };
            let url = format!("/{}", relative.replace(std::path::MAIN_SEPARATOR, "/"));
            let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            *total += bytes.len() as u64;
            if *total > MAX_DIST_BYTES {
                bail!(
                    "--dist {} holds more than {MAX_DIST_BYTES} bytes; is it the right directory?",
                    root.display()
                );
            }
            files.push(Asset {
                content_type: content_type(&url),
                path: url,
                bytes: Cow::Owned(bytes),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hub_endpoint_reaches_the_header_and_the_meta_tags() {
        let dir = tempfile::tempdir().expect("tempdir");
        let policy = "default-src 'self'; connect-src 'self' https://huggingface.co";
        fs::write(
            dir.path().join("index.html"),
            format!("<head><meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\"><meta name=\"gpumem-hub\" content=\"https://huggingface.co\">"),
        )
        .expect("write");
        let assets = Assets::from_dir(dir.path())
            .expect("load")
            .with_hub("http://127.0.0.1:4321/")
            .expect("a loopback endpoint");
        let want = format!("{policy} http://127.0.0.1:*");
        assert_eq!(assets.policy(), want);
        let page = String::from_utf8(assets.get("/").expect("page").1.to_vec()).expect("utf8");
        assert!(page.contains(&format!("content=\"{want}\"")), "{page}");
        assert!(
            page.contains("<meta name=\"gpumem-hub\" content=\"http://127.0.0.1:4321\">"),
            "{page}"
        );
        assert!(
            Assets::from_dir(dir.path())
                .expect("load")
                .with_hub("https://x; script-src *")
                .is_err()
        );
    }

    #[test]
    fn a_directory_is_served_by_exact_path_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("index.html"), "<p>page</p>").expect("write");
        fs::create_dir(dir.path().join("pkg")).expect("mkdir");
        fs::write(dir.path().join("pkg").join("app_bg.wasm"), b"\0asm").expect("write");
        fs::write(dir.path().join(".hidden"), "no").expect("write");
        let assets = Assets::from_dir(dir.path()).expect("load");
        assert!(assets.has_page());
        assert_eq!(
            assets.get("/"),
            Some(("text/html; charset=utf-8", &b"<p>page</p>"[..]))
        );
        assert_eq!(
            assets.get("/pkg/app_bg.wasm").map(|a| a.0),
            Some("application/wasm")
        );
        assert_eq!(assets.get("/.hidden"), None);
        assert_eq!(assets.get("/../Cargo.toml"), None);
        assert_eq!(assets.get("/pkg/../index.html"), None);
    }

    #[test]
    fn a_directory_path_is_its_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("index.html"), "<p>page</p>").expect("write");
        fs::create_dir(dir.path().join("agent")).expect("mkdir");
        fs::write(dir.path().join("agent").join("index.html"), "<p>agent</p>").expect("write");
        let assets = Assets::from_dir(dir.path()).expect("load");
        for path in ["/agent/", "/agent", "/agent/index.html"] {
            assert_eq!(
                assets.get(path),
                Some(("text/html; charset=utf-8", &b"<p>agent</p>"[..])),
                "{path}"
            );
        }
        assert_eq!(assets.get("/missing/"), None);
        assert_eq!(assets.get("/agent//"), None);
        assert_eq!(assets.get("/agent/../"), None);
    }

    #[test]
    fn without_a_page_the_root_explains_how_to_build_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let assets = Assets::from_dir(dir.path()).expect("load");
        assert!(!assets.has_page());
        let (content_type, body) = assets.get("/").expect("notice");
        assert!(content_type.starts_with("text/html"));
        assert!(String::from_utf8_lossy(body).contains("not built"));
    }
}
