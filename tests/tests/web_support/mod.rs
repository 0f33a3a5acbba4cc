//! Support for the browser tests: a tiny static file server for `dist/`, and a
//! minimal blocking WebDriver client that drives headless Chromium through
//! chromedriver over plain HTTP on 127.0.0.1.
//!
//! No WebDriver crate: the dozen endpoints used here fit in a page of std code,
//! build in no time on a small machine, and need no TLS stack.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use gpumem_e2e::{Missing, skip};
use serde_json::{Value, json};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where test artifacts (screenshots) go.
pub fn artifacts() -> PathBuf {
    let d = root().join("target").join("artifacts");
    std::fs::create_dir_all(&d).expect("create target/artifacts");
    d
}

/// Builds `gpumem-agent` (a no-op when it is up to date) and returns its path. Its
/// build script embeds `dist/` and reruns when `dist/` changes, so the binary serves
/// the page as built now; this checks that too. `GPUMEM_AGENT_UNDER_TEST` names
/// another build instead (to measure a "before").
pub fn agent_binary() -> PathBuf {
    if let Some(other) = std::env::var_os("GPUMEM_AGENT_UNDER_TEST") {
        return PathBuf::from(other);
    }
    let ok = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "gpumem-agent"])
        .current_dir(root())
        .status()
        .expect("run cargo build -p gpumem-agent");
    assert!(ok.success(), "could not build gpumem-agent");
    // The tests run from <target>/debug/deps; the agent is in <target>/debug.
    let exe = std::env::current_exe().expect("test binary path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/debug")
        .join("gpumem-agent");
    assert!(bin.exists(), "{} not found", bin.display());
    let built = mtime(&bin);
    for entry in std::fs::read_dir(root().join("dist")).expect("dist/") {
        let path = entry.expect("dist entry").path();
        assert!(
            mtime(&path) <= built,
            "{} is newer than {}: the agent would serve a stale page",
            path.display(),
            bin.display()
        );
    }
    bin
}

fn mtime(path: &Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .expect("mtime")
}

/// A running `gpumem-agent serve --replay FILE`, stopped when dropped.
pub struct ReplayAgent {
    child: Child,
    /// The pairing URL it printed.
    pub url: String,
    /// `http://127.0.0.1:PORT`.
    pub origin: String,
}

impl ReplayAgent {
    /// Starts the agent replaying `fixture` (relative to the workspace root) on a free
    /// port, with `extra` flags, and waits for the pairing URL it prints.
    pub fn start(fixture: &str, extra: &[&str]) -> ReplayAgent {
        let mut args = vec!["--replay", fixture];
        args.extend_from_slice(extra);
        ReplayAgent::serve(&args, &[])
    }

    /// Starts `gpumem-agent serve` on a free port with `args` and the environment
    /// `envs`, and waits for the pairing URL it prints.
    pub fn serve(args: &[&str], envs: &[(&str, &str)]) -> ReplayAgent {
        let mut child = Command::new(agent_binary())
            .args(["serve", "--port", "0", "--no-open"])
            .args(args)
            .envs(envs.iter().copied())
            .current_dir(root())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start gpumem-agent serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.find("http://127.0.0.1:")
                    && line.contains("#token=")
                {
                    let _ = tx.send(line[at..].trim().to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the agent printed no pairing URL");
        let origin = url.split("/#").next().unwrap_or_default().to_string();
        ReplayAgent { child, url, origin }
    }

    /// Stops the agent (the page then sees it go away).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ReplayAgent {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Browser tests share one machine's two cores: run them one at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// chromedriver's path, or `None` when it is absent (see [`browser_tools`]).
pub fn chromedriver() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMEDRIVER") {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    ["/usr/bin/chromedriver", "/usr/local/bin/chromedriver"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Chromium's path.
pub fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// chromedriver's path when both it and Chromium are here; otherwise `None`, after
/// [`gpumem_e2e::skip`] has failed the test (test script, CI) or printed `SKIPPED`.
pub fn browser_tools(test: &str) -> Option<PathBuf> {
    let Some(driver) = chromedriver() else {
        skip(
            test,
            Missing::Tool,
            "chromedriver not found (set CHROMEDRIVER, or install /usr/bin/chromedriver)",
        );
        return None;
    };
    if !chromium().exists() {
        skip(
            test,
            Missing::Tool,
            &format!(
                "Chromium not found at {} (set CHROMIUM)",
                chromium().display()
            ),
        );
        return None;
    }
    Some(driver)
}

// ------------------------------------------------------------------ static server

/// Serves a folder on 127.0.0.1 and records every path requested.
pub struct StaticServer {
    /// `http://127.0.0.1:PORT`.
    pub origin: String,
    /// Every request line's path, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl StaticServer {
    /// Starts serving `dir` on a free port (threads die with the test process).
    pub fn start(dir: &Path) -> StaticServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind static server");
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let dir = dir.to_path_buf();
        let log = requests.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let dir = dir.clone();
                let log = log.clone();
                thread::spawn(move || serve_one(stream, &dir, &log));
            }
        });
        StaticServer { origin, requests }
    }
}

fn serve_one(mut stream: TcpStream, dir: &Path, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    // Drain the headers.
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            break;
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    log.lock().unwrap().push(path.clone());
    let clean = path.split(['?', '#']).next().unwrap_or("/");
    // A directory's path (`/`, `/agent/`) is its index.html, as the agent serves it.
    let rel = if clean.ends_with('/') {
        format!("{}index.html", clean.trim_start_matches('/'))
    } else {
        clean.trim_start_matches('/').to_owned()
    };
    let safe = !rel.contains("..");
    let file = dir.join(rel);
    let (status, body, ctype) = match std::fs::read(&file) {
        Ok(b) if safe => {
            let ctype = match file.extension().and_then(|e| e.to_str()) {
                Some("html") => "text/html; charset=utf-8",
                Some("js") => "text/javascript",
                Some("wasm") => "application/wasm",
                Some("css") => "text/css",
                _ => "application/octet-stream",
            };
            ("200 OK", b, ctype)
        }
        _ => ("404 Not Found", b"not found".to_vec(), "text/plain"),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body);
}

// ------------------------------------------------------------------ WebDriver

/// Minimal HTTP/1.1 JSON request to chromedriver.
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(120))).ok();
    let payload = body.map(Value::to_string).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    // chromedriver keeps the connection open whatever we ask: read the headers,
    // then exactly Content-Length bytes (or the chunks).
    let mut reader = BufReader::new(s);
    let mut length: Option<usize> = None;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.is_empty() || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().ok();
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let body = if chunked {
        let mut out = Vec::new();
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).map_err(|e| e.to_string())?;
            let n = usize::from_str_radix(size.trim(), 16).map_err(|e| e.to_string())?;
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    } else {
        let mut buf = vec![0; length.ok_or("no Content-Length")?];
        reader.read_exact(&mut buf).map_err(|e| e.to_string())?;
        String::from_utf8_lossy(&buf).into_owned()
    };
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if let Some(err) = v["value"]["error"].as_str() {
        return Err(format!("{err}: {}", v["value"]["message"]));
    }
    Ok(v["value"].clone())
}

/// A chromedriver process and one headless Chromium session.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

/// The element reference key of the W3C protocol.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    /// Starts chromedriver and a fresh headless Chromium (new profile, no
    /// background networking).
    pub fn start(driver: &Path) -> Browser {
        Browser::start_with_downloads(driver, None)
    }

    /// As [`Browser::start`], saving downloads into `downloads` without asking.
    pub fn start_with_downloads(driver: &Path, downloads: Option<&Path>) -> Browser {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let t0 = Instant::now();
        while http(port, "GET", "/status", None).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "chromedriver did not start"
            );
            thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1440,1800".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let mut options = json!({"binary": chromium().to_string_lossy(), "args": args});
        if let Some(dir) = downloads {
            options["prefs"] = json!({
                "download.default_directory": dir.to_string_lossy(),
                "download.prompt_for_download": false,
                "download.directory_upgrade": true,
            });
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": options
        }}});
        let v = http(port, "POST", "/session", Some(&caps)).expect("new session");
        let session = v["sessionId"].as_str().expect("session id").to_string();
        let browser = Browser {
            driver: child,
            port,
            session,
            _profile: profile,
        };
        if let Some(dir) = downloads {
            // Headless Chromium may ignore the profile preference; the DevTools command
            // sets the same folder for this session either way.
            let _ = browser.cmd(
                "POST",
                "/goog/cdp/execute",
                Some(json!({"cmd": "Browser.setDownloadBehavior",
                    "params": {"behavior": "allow", "downloadPath": dir.to_string_lossy()}})),
            );
        }
        browser
    }

    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        http(
            self.port,
            method,
            &format!("/session/{}{path}", self.session),
            body.as_ref(),
        )
    }

    /// Navigates and waits for the load event.
    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url})))
            .expect("navigate");
    }

    /// Runs a script (with `arguments`) and returns its value.
    pub fn js(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Runs an async script: the last argument is the callback.
    pub fn js_async(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/async",
            Some(json!({"script": script, "args": args})),
        )
        .unwrap_or_else(|e| panic!("async script failed: {e}\n{script}"))
    }

    /// Polls `script` until it returns something other than null/false/"".
    pub fn wait_for(&self, what: &str, script: &str) -> Value {
        self.wait_for_within(what, script, Duration::from_secs(20))
    }

    /// As [`Browser::wait_for`], with its own time limit.
    pub fn wait_for_within(&self, what: &str, script: &str, limit: Duration) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.js(script, json!([]));
            let done = match &v {
                Value::Null | Value::Bool(false) => false,
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if done {
                return v;
            }
            assert!(t0.elapsed() < limit, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The text of `[data-testid=id]`, or "" when absent.
    pub fn testid(&self, id: &str) -> String {
        self.js(
            "const e = document.querySelector(`[data-testid=\"${arguments[0]}\"]`); return e ? e.textContent : '';",
            json!([id]),
        )
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// A W3C element reference for a CSS selector, once the page has mounted it
    /// (right after `goto` the wasm may still be loading: waiting is what a user does).
    pub fn find(&self, css: &str) -> String {
        self.wait_for(
            &format!("an element {css}"),
            &format!(
                "return document.querySelector({}) !== null;",
                serde_json::to_string(css).expect("a selector is a string")
            ),
        );
        let v = self
            .cmd(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .unwrap_or_else(|e| panic!("no element {css}: {e}"));
        v[ELEMENT].as_str().expect("element id").to_string()
    }

    /// Clears an input and types `text` into it, as a user would (key events).
    pub fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css);
        self.cmd("POST", &format!("/element/{el}/clear"), Some(json!({})))
            .expect("clear");
        // Clearing programmatically fires no input event; type a key and delete it
        // so the page sees the field empty, then type the text.
        self.cmd(
            "POST",
            &format!("/element/{el}/value"),
            Some(json!({"text": format!("x\u{E003}{text}")})),
        )
        .expect("type");
    }

    /// Sends file paths to an `<input type=file>` (one per line for `multiple`).
    pub fn upload(&self, css: &str, files: &[&Path]) {
        let el = self.find(css);
        let text = files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join("\n");
        self.cmd(
            "POST",
            &format!("/element/{el}/value"),
            Some(json!({"text": text})),
        )
        .expect("upload");
    }

    /// Clicks the element matching `css` (through the DOM, as a user's click would
    /// reach the page's handler), waiting for it as [`Browser::find`] does: right after
    /// `goto` the page may not have mounted it yet.
    pub fn click(&self, css: &str) {
        self.wait_for(
            &format!("something to click at {css}"),
            &format!(
                "const e = document.querySelector({}); if (e) {{ e.click(); return true; }} return false;",
                serde_json::to_string(css).expect("a selector is a string")
            ),
        );
    }

    /// Saves a PNG screenshot of the viewport.
    pub fn screenshot(&self, path: &Path) {
        let v = self.cmd("GET", "/screenshot", None).expect("screenshot");
        let png = base64_decode(v.as_str().expect("base64"));
        std::fs::write(path, png).expect("write screenshot");
    }

    /// Resizes the window (the viewport of later screenshots).
    pub fn resize(&self, width: u32, height: u32) {
        let _ = self.cmd(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.cmd("DELETE", "", None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter_map(val) {
        acc = (acc << 6) | c;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// Digits only: "14 000 000 000" → 14000000000.
pub fn bytes_of(text: &str) -> Option<u64> {
    let d: String = text.chars().filter(char::is_ascii_digit).collect();
    d.parse().ok()
}

/// Everything a browser test needs.
pub struct Page {
    /// The static server for dist/.
    pub server: StaticServer,
    /// The browser.
    pub browser: Browser,
    _guard: MutexGuard<'static, ()>,
}

impl Page {
    /// Serves dist/ and starts a browser; `None` without the browser tools, after
    /// [`browser_tools`] has failed the test or printed why it is skipped.
    pub fn open(test: &str) -> Option<Page> {
        let driver = browser_tools(test)?;
        let guard = serial();
        let dist = root().join("dist");
        assert!(
            dist.join("index.html").exists(),
            "dist/ is not built: run scripts/build-web.sh"
        );
        let server = StaticServer::start(&dist);
        let browser = Browser::start(&driver);
        Some(Page {
            server,
            browser,
            _guard: guard,
        })
    }

    /// Loads the page with `query` (without `?`) and waits for the headline figures.
    pub fn load(&self, query: &str) {
        let url = if query.is_empty() {
            format!("{}/", self.server.origin)
        } else {
            format!("{}/?{query}", self.server.origin)
        };
        self.browser.goto(&url);
        self.browser.wait_for(
            "the headline figures",
            "const e = document.querySelector('[data-testid=\"total-bytes\"]'); return e && e.textContent;",
        );
    }
}
