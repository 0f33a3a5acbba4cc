//! Where a running `run` or `measure` sends its metrics: a `.prom` file for
//! node_exporter's textfile collector and/or a Pushgateway group.
//!
//! - **Textfile** (`--textfile-dir DIR`): `DIR/gpumem_<run_id>.prom`, rewritten at each
//!   phase end and at exit by writing a temporary file in `DIR` and renaming it over
//!   the old one, so the collector never reads half a file (node_exporter's textfile
//!   collector reads `*.prom` only; the temporary name does not end so). The final file
//!   stays: it is the run's record until the operator removes it.
//! - **Pushgateway** (`--pushgateway URL`): `PUT URL/metrics/job/gpumem/instance/<host>/
//!   run_id/<id>` at each phase end (PUT replaces the whole group) and `DELETE` of the
//!   same group when the run ends, so a finished run leaves no series behind
//!   (prometheus/pushgateway `README.md`, "API"; a value outside `[A-Za-z0-9._~-]` is
//!   sent as `<label>@base64/<base64url>`).
//!
//! Writing happens on a thread of its own that always sends the latest text (readings
//! queued meanwhile are coalesced), so a slow gateway never holds up the measured
//! program's messages. A failure is reported once on stderr and never stops the run.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use gpumem_proto::context::RunContext;
use gpumem_proto::results::{Environment, PhaseResult};
use gpumem_proto::workload::WorkloadPhase;

use super::Metrics;

/// The flags `run` and `measure` share.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ExportArgs {
    /// Write the metrics for node_exporter's textfile collector into this folder
    /// (`gpumem_<run_id>.prom`, replaced atomically at each phase end and at exit).
    #[arg(long, value_name = "DIR")]
    pub textfile_dir: Option<PathBuf>,
    /// Push the metrics to this Prometheus Pushgateway (e.g. `http://pushgw:9091`) at
    /// each phase end, grouped by job="gpumem", instance and run_id; the group is
    /// deleted when the run ends.
    #[arg(long, value_name = "URL")]
    pub pushgateway: Option<String>,
}

impl ExportArgs {
    /// Step one: the folder exists and the URL is one we can push to.
    pub fn validate(&self) -> Result<()> {
        if let Some(dir) = &self.textfile_dir
            && !dir.is_dir()
        {
            bail!("--textfile-dir {}: not a folder", dir.display());
        }
        if let Some(url) = &self.pushgateway {
            gateway_base(url)?;
        }
        Ok(())
    }

    /// Whether any export was asked for.
    pub fn any(&self) -> bool {
        self.textfile_dir.is_some() || self.pushgateway.is_some()
    }
}

/// The gateway's base URL without a trailing slash; only plain http(s) addresses.
fn gateway_base(url: &str) -> Result<String> {
    let base = url.trim().trim_end_matches('/');
    let rest = base
        .strip_prefix("http://")
        .or_else(|| base.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.contains(['?', '#', '@', ' ']) => Ok(base.to_owned()),
        _ => bail!(
            "--pushgateway {url:?}: expected http://HOST:PORT or https://HOST:PORT (no query, no credentials in the URL)"
        ),
    }
}

/// URL-safe base64 without padding (RFC 4648 §5), for a grouping-key value.
fn base64url(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let idx = ((n >> (18 - 6 * i)) & 63) as usize;
            out.push(char::from(T[idx]));
        }
    }
    out
}

/// One `/label/value` segment of a grouping key.
fn key_segment(label: &str, value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '~' | '-'));
    if plain {
        format!("/{label}/{value}")
    } else {
        format!("/{label}@base64/{}", base64url(value.as_bytes()))
    }
}

/// The group's URL: `BASE/metrics/job/gpumem/instance/<host>/run_id/<id>`.
pub fn group_url(base: &str, context: &RunContext) -> String {
    format!(
        "{base}/metrics/job/gpumem{}{}",
        key_segment("instance", context.hostname.as_deref().unwrap_or("unknown")),
        key_segment("run_id", &context.run_id)
    )
}

/// The textfile's name for a run: `gpumem_<run_id>.prom`, the id cut to safe characters.
pub fn textfile_name(run_id: &str) -> String {
    let safe: String = run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    format!("gpumem_{safe}.prom")
}

/// Replaces `path` with `text` atomically, mode 0600: a temporary file of a random
/// name in the same folder, created exclusively (a link planted there is never
/// followed), then renamed over `path` (`crate::private::write_atomically`).
pub fn replace_atomically(path: &Path, text: &str) -> Result<()> {
    crate::private::write_atomically(path, text.as_bytes(), crate::private::Existing::Replace)
}

/// What the writer thread is asked to do.
enum Job {
    Write(String),
    Finish(String),
}

struct Targets {
    textfile: Option<PathBuf>,
    push: Option<(ureq::Agent, String)>,
}

impl Targets {
    fn write(&self, text: &str, warned: &mut bool) {
        let mut fail = |what: String| {
            if !*warned {
                crate::out::errln!("gpumem-agent: export: {what} (the run goes on)");
                *warned = true;
            }
        };
        if let Some(path) = &self.textfile
            && let Err(e) = replace_atomically(path, text)
        {
            fail(format!("{e:#}"));
        }
        if let Some((agent, url)) = &self.push {
            match agent
                .put(url)
                .content_type("text/plain; version=0.0.4")
                .send(text)
            {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => fail(format!("Pushgateway {url}: HTTP {}", r.status())),
                Err(e) => fail(format!("Pushgateway {url}: {e}")),
            }
        }
    }

    fn delete(&self) -> Result<()> {
        if let Some((agent, url)) = &self.push {
            let r = agent
                .delete(url)
                .call()
                .with_context(|| format!("deleting {url}"))?;
            if !r.status().is_success() {
                bail!("deleting {url}: HTTP {}", r.status());
            }
        }
        Ok(())
    }
}

/// A run's exporter: collects phases as they end and hands the text to the writer.
pub struct Live {
    context: RunContext,
    synthetic: bool,
    metrics: Mutex<Metrics>,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    targets: Arc<Targets>,
}

impl Live {
    /// Starts the exporter asked for by `args`, or `None` when none was.
    pub fn start(args: &ExportArgs, context: &RunContext, synthetic: bool) -> Result<Option<Live>> {
        if !args.any() {
            return Ok(None);
        }
        args.validate()?;
        let push = match &args.pushgateway {
            Some(url) => {
                let agent = ureq::Agent::config_builder()
                    .max_redirects(0)
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(5)))
                    .user_agent(concat!("gpumem-agent/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .new_agent();
                Some((agent, group_url(&gateway_base(url)?, context)))
            }
            None => None,
        };
        let targets = Arc::new(Targets {
            textfile: args
                .textfile_dir
                .as_ref()
                .map(|d| d.join(textfile_name(&context.run_id))),
            push,
        });
        let (tx, rx) = mpsc::channel::<Job>();
        let t = Arc::clone(&targets);
        let writer = std::thread::Builder::new()
            .name("export".into())
            .spawn(move || {
                let mut warned = false;
                while let Ok(mut job) = rx.recv() {
                    // Coalesce: only the newest text matters, but a finish is never
                    // skipped.
                    while let Ok(next) = rx.try_recv() {
                        if matches!(job, Job::Finish(_)) {
                            break;
                        }
                        job = next;
                    }
                    match job {
                        Job::Write(text) => t.write(&text, &mut warned),
                        Job::Finish(text) => {
                            t.write(&text, &mut warned);
                            return;
                        }
                    }
                }
            })
            .context("starting the export thread")?;
        let live = Live {
            context: context.clone(),
            synthetic,
            metrics: Mutex::new(Metrics::default()),
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            targets,
        };
        Ok(Some(live))
    }

    fn send(&self, job: Job) {
        if let Ok(tx) = self.tx.lock()
            && let Some(tx) = tx.as_ref()
        {
            let _ = tx.send(job);
        }
    }

    fn base(&self) -> super::Labels {
        super::run_labels(Some(&self.context), self.synthetic)
    }

    /// A phase of a `run` rank ended.
    pub fn workload_phase(&self, rank: Option<u32>, phase: &WorkloadPhase) {
        let base = self.base();
        let labels = super::rank_labels(Some(&self.context), &base, rank, phase.device);
        let text = match self.metrics.lock() {
            Ok(mut m) => {
                super::workload_phase(&mut m, &labels, phase);
                m.render()
            }
            Err(_) => return,
        };
        self.send(Job::Write(text));
    }

    /// A phase of `measure` on one device ended.
    pub fn results_phase(&self, env: &Environment, phase: &PhaseResult) {
        let base = self.base();
        let labels = super::measured_labels(Some(&self.context), &base, env);
        let text = match self.metrics.lock() {
            Ok(mut m) => {
                super::results_phase(&mut m, &labels, phase);
                m.render()
            }
            Err(_) => return,
        };
        self.send(Job::Write(text));
    }

    /// The run ended: the complete document's metrics go to the textfile, and the
    /// Pushgateway group is pushed a last time and then deleted.
    pub fn finish(&self, metrics: &Metrics) {
        self.send(Job::Finish(metrics.render()));
        self.stop_writer();
        if let Err(e) = self.targets.delete() {
            crate::out::errln!("gpumem-agent: export: {e:#}");
        }
        if let Some(path) = &self.targets.textfile {
            crate::out::errln!("gpumem-agent: metrics written to {}", path.display());
        }
    }

    /// Waits for the writer to send what it was given; true the first time only.
    fn stop_writer(&self) -> bool {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        match self.writer.lock().ok().and_then(|mut w| w.take()) {
            Some(handle) => {
                let _ = handle.join();
                true
            }
            None => false,
        }
    }
}

impl Drop for Live {
    /// A run that stopped on an error before `finish` still deletes its Pushgateway
    /// group: no series outlives the agent, except when the agent itself is killed.
    fn drop(&mut self) {
        if self.stop_writer() {
            let _ = self.targets.delete();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping_keys_are_plain_or_base64() {
        let mut c = RunContext {
            run_id: "slurm-42-0".into(),
            hostname: Some("node1".into()),
            ..RunContext::default()
        };
        assert_eq!(
            group_url("http://gw:9091", &c),
            "http://gw:9091/metrics/job/gpumem/instance/node1/run_id/slurm-42-0"
        );
        c.run_id = "a/b".into();
        assert!(group_url("http://gw:9091", &c).ends_with("/run_id@base64/YS9i"));
        assert_eq!(base64url(b"any carnal pleas"), "YW55IGNhcm5hbCBwbGVhcw");
        assert_eq!(base64url(b"\xfb\xff"), "-_8");
    }

    #[test]
    fn gateway_urls_are_checked_before_anything_starts() {
        assert_eq!(
            gateway_base("http://127.0.0.1:9091/").unwrap(),
            "http://127.0.0.1:9091"
        );
        for bad in [
            "127.0.0.1:9091",
            "ftp://x",
            "http://",
            "http://u:p@h",
            "http://h/?q",
        ] {
            assert!(gateway_base(bad).is_err(), "{bad}");
        }
    }

    /// A loopback stand-in for the Pushgateway: answers 200 to everything and records
    /// each request's method, path and body.
    fn gateway() -> (String, std::sync::mpsc::Receiver<(String, String, String)>) {
        use std::io::{BufRead as _, BufReader, Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut parts = line.split_whitespace();
                let (method, path) = (
                    parts.next().unwrap_or("").to_owned(),
                    parts.next().unwrap_or("").to_owned(),
                );
                let mut length = 0usize;
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    if h.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                let _ = tx.send((method, path, String::from_utf8(body).unwrap()));
            }
        });
        (url, rx)
    }

    #[test]
    fn a_run_pushes_each_phase_then_deletes_its_group_and_keeps_the_textfile() {
        let (url, rx) = gateway();
        let dir = tempfile::tempdir().unwrap();
        let context = RunContext {
            run_id: "slurm-9-0".into(),
            hostname: Some("node7".into()),
            ..RunContext::default()
        };
        let args = ExportArgs {
            textfile_dir: Some(dir.path().to_path_buf()),
            pushgateway: Some(url),
        };
        let live = Live::start(&args, &context, true).unwrap().unwrap();
        let phase = WorkloadPhase {
            name: "forward".into(),
            step: Some(0),
            first_step: true,
            manual: false,
            device: None,
            allocator: gpumem_proto::workload::AllocatorCounters {
                allocated_peak_bytes: Some(4096),
                ..Default::default()
            },
            device_free_end_bytes: None,
            device_total_bytes: None,
            process_tree_peak_bytes: None,
            wall_time_ns: 1,
            error: None,
        };
        live.workload_phase(Some(0), &phase);
        let (method, path, body) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(method, "PUT");
        assert_eq!(path, "/metrics/job/gpumem/instance/node7/run_id/slurm-9-0");
        assert!(body.contains("gpumem_phase_allocated_peak_bytes{run_id=\"slurm-9-0\",Hostname=\"node7\",synthetic=\"true\",rank=\"0\",phase=\"forward\",step=\"first\"} 4096"), "{body}");
        let mut last = Metrics::default();
        last.int(
            "gpumem_run_failed",
            &[("run_id", "slurm-9-0".to_owned())],
            0,
        );
        live.finish(&last);
        let mut seen = Vec::new();
        while let Ok((method, _, _)) = rx.recv_timeout(Duration::from_secs(10)) {
            seen.push(method.clone());
            if method == "DELETE" {
                break;
            }
        }
        assert_eq!(seen.last().map(String::as_str), Some("DELETE"), "{seen:?}");
        let text = std::fs::read_to_string(dir.path().join("gpumem_slurm-9-0.prom")).unwrap();
        assert_eq!(text, last.render(), "the textfile keeps the final text");

        // A run that stops on an error (the exporter dropped unfinished) still deletes.
        let args = ExportArgs {
            textfile_dir: None,
            pushgateway: args.pushgateway,
        };
        let live = Live::start(&args, &context, true).unwrap().unwrap();
        live.workload_phase(None, &phase);
        drop(live);
        let mut methods = Vec::new();
        while let Ok((m, _, _)) = rx.recv_timeout(Duration::from_secs(10)) {
            let done = m == "DELETE";
            methods.push(m);
            if done {
                break;
            }
        }
        assert_eq!(
            methods.last().map(String::as_str),
            Some("DELETE"),
            "{methods:?}"
        );
    }

    #[test]
    fn textfile_names_are_safe_and_replaced_atomically() {
        assert_eq!(textfile_name("slurm-1-0"), "gpumem_slurm-1-0.prom");
        assert_eq!(textfile_name("../x y"), "gpumem_.._x_y.prom");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("gpumem_a.prom");
        replace_atomically(&p, "one\n").unwrap();
        replace_atomically(&p, "two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two\n");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
    }
}
