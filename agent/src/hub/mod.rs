//! `estimate --model ORG/NAME`: a model's architecture and exact weight bytes from the
//! Hugging Face Hub (or a mirror), without downloading the weights.
//!
//! `config.json` and `model.safetensors.index.json` are fetched together; then every
//! weight file's header is read with HTTP Range requests, grown exactly as the core's
//! read policy asks ([`gpumem_core::import::read_policy`], the same policy the agent
//! uses for local files and the page for dropped ones), the file's size learnt from the
//! first answer's `Content-Range`. The files are read concurrently by a bounded pool
//! ([`WORKERS`]), and a file's later reads go straight to the CDN address its first
//! read was redirected to, so a 61-shard checkpoint costs a handful of sequential round
//! trips, not 61 × 2. What was read is cached ([`cache`]); a cached lookup sends nothing.
//!
//! This is the only part of the agent that talks to the network (tests use a loopback
//! stand-in through `HF_ENDPOINT`).

pub mod cache;
pub mod client;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, Result, anyhow, bail};
use gpumem_core::import::TensorSummary;
use gpumem_core::import::read_policy::{HeaderFormat, HeaderRead, Step};

use cache::{Cache, Manifest};
use client::{Client, NotFound};

/// Weight files read at once. Enough that 61 shards take 4 files per worker; few
/// enough to stay a polite client of the Hub.
pub const WORKERS: usize = 16;
const INDEX: &str = "model.safetensors.index.json";
const SINGLE: &str = "model.safetensors";

/// What a lookup found.
#[derive(Debug)]
pub struct Found {
    /// `config.json`'s text (absent for a repository without one, e.g. GGUF only).
    pub config: Option<String>,
    /// Every tensor of every weight file.
    pub tensors: TensorSummary,
    /// The weight files read.
    pub files: Vec<String>,
    /// The commit read (when the Hub said), else the revision as given.
    pub key: String,
    /// HTTP requests sent (0 when everything came from the cache).
    pub requests: u64,
}

/// Looks `repo` up at `revision`; `file` names the weight file to read instead of
/// the safetensors checkpoint (a `.gguf` in a GGUF repository).
pub fn lookup(repo: &str, revision: &str, file: Option<&str>) -> Result<Found> {
    check_repo(repo)?;
    if revision.is_empty() || revision.len() > 256 || revision.chars().any(char::is_control) {
        bail!("--revision: expected a branch, tag or commit id");
    }
    if let Some(f) = file {
        check_file(f).context("--model-file")?;
    }
    let variant = file.unwrap_or("default");
    let cache = Cache::for_repo(repo);
    let client = Client::from_env();
    let label = |f: &str| format!("{repo}@{revision}/{f}");

    // Step 1: the commit and the manifest, from the cache when both are there.
    let known = cache.commit_of(revision);
    let cached = known
        .as_deref()
        .and_then(|k| cache.manifest(k, variant).map(|m| (k.to_string(), m)))
        // A cache entry is data like any other: its file names are checked again.
        .filter(|(_, m)| m.files.iter().all(|f| check_file(f).is_ok()));
    let (key, manifest) = match cached {
        Some(hit) => hit,
        None => {
            let (key, m) = fetch_manifest(&client, repo, revision, file, &label)?;
            if key != revision {
                cache.set_commit(revision, &key);
            }
            cache.set_manifest(&key, variant, &m);
            (key, m)
        }
    };

    // Step 2: every file's header, concurrently (cached ones without a request).
    let summaries = read_headers(&client, &cache, repo, &key, &manifest.files, &label)
        .map_err(|e| {
            if e.is::<NotFound>() && file.is_none() && manifest.files == [SINGLE] {
                anyhow!(
                    "{e}: the repository has neither {INDEX} nor {SINGLE}; for a GGUF repository name the file with --model-file"
                )
            } else {
                e
            }
        })?;
    let mut tensors: Option<TensorSummary> = None;
    for s in summaries {
        match &mut tensors {
            Some(acc) => acc.merge(&s).context("merging shards")?,
            None => tensors = Some(s),
        }
    }
    Ok(Found {
        config: manifest.config,
        tensors: tensors.ok_or_else(|| anyhow!("{repo}: no weight files"))?,
        files: manifest.files,
        key,
        requests: client.requests(),
    })
}

/// `config.json` and the weight files' names, fetched together.
fn fetch_manifest(
    client: &Client,
    repo: &str,
    revision: &str,
    file: Option<&str>,
    label: &(dyn Fn(&str) -> String + Sync),
) -> Result<(String, Manifest)> {
    let (config, index) = std::thread::scope(|s| {
        let config = s.spawn(|| {
            client.get_text(
                &client.resolve_url(repo, revision, "config.json"),
                &label("config.json"),
            )
        });
        let index = match file {
            Some(_) => None,
            None => {
                Some(client.get_text(&client.resolve_url(repo, revision, INDEX), &label(INDEX)))
            }
        };
        (
            config
                .join()
                .unwrap_or_else(|_| Err(anyhow!("config.json: reader panicked"))),
            index,
        )
    });
    // A GGUF repository often has no config.json: the named file is enough.
    let config = match config {
        Ok(f) => Some(f),
        Err(e) if file.is_some() && e.is::<NotFound>() => None,
        Err(e) if e.is::<NotFound>() && !e.to_string().contains("no such repository") => {
            bail!("{e}; if this is a GGUF repository, name its file with --model-file")
        }
        Err(e) => return Err(e),
    };
    let mut commit = config.as_ref().and_then(|c| c.commit.clone());
    let files = match (file, index) {
        (Some(f), _) => vec![f.to_string()],
        (None, Some(Ok(idx))) => {
            commit = commit.or(idx.commit.clone());
            shard_names(&idx.body).with_context(|| label(INDEX))?
        }
        (None, Some(Err(e))) if e.is::<NotFound>() => vec![SINGLE.to_string()],
        (None, Some(Err(e))) => return Err(e),
        (None, None) => vec![SINGLE.to_string()],
    };
    let config = match config {
        Some(c) => Some(
            String::from_utf8(c.body)
                .map_err(|_| anyhow!("{}: not UTF-8", label("config.json")))?,
        ),
        None => None,
    };
    Ok((
        commit.unwrap_or_else(|| revision.to_string()),
        Manifest { config, files },
    ))
}

/// The distinct files of an index's `weight_map`, sorted.
fn shard_names(text: &[u8]) -> Result<Vec<String>> {
    let v: serde_json::Value = serde_json::from_slice(text).context("not valid JSON")?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| anyhow!("no weight_map"))?;
    let mut files: Vec<String> = Vec::new();
    for f in map.values() {
        let f = f
            .as_str()
            .ok_or_else(|| anyhow!("weight_map values should be file names"))?;
        check_file(f)?;
        files.push(f.to_string());
    }
    files.sort();
    files.dedup();
    if files.is_empty() {
        bail!("weight_map is empty");
    }
    Ok(files)
}

/// Reads every file's header with [`WORKERS`] threads; results in file order, the
/// first error (in file order) wins.
fn read_headers(
    client: &Client,
    cache: &Cache,
    repo: &str,
    key: &str,
    files: &[String],
    label: &(dyn Fn(&str) -> String + Sync),
) -> Result<Vec<TensorSummary>> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Vec<Mutex<Option<Result<TensorSummary>>>> =
        files.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..WORKERS.min(files.len()) {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(file) = files.get(i) else { break };
                    let r = read_one(client, cache, repo, key, file, label);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if let Some(slot) = results.get(i)
                        && let Ok(mut guard) = slot.lock()
                    {
                        *guard = Some(r);
                    }
                }
            });
        }
    });
    let mut out = Vec::with_capacity(files.len());
    for slot in results {
        match slot.into_inner().ok().flatten() {
            Some(Ok(t)) => out.push(t),
            Some(Err(e)) => return Err(e),
            // Not read because another file failed first; that error comes first.
            None => continue,
        }
    }
    if out.len() != files.len() {
        bail!("{repo}: not every weight file was read");
    }
    Ok(out)
}

/// One file's header: from the cache, else by ranged reads as the read policy asks.
fn read_one(
    client: &Client,
    cache: &Cache,
    repo: &str,
    key: &str,
    file: &str,
    label: &dyn Fn(&str) -> String,
) -> Result<TensorSummary> {
    let what = label(file);
    let format = if file.to_ascii_lowercase().ends_with(".gguf") {
        HeaderFormat::Gguf
    } else {
        HeaderFormat::Safetensors
    };
    if let Some((size, prefix)) = cache.head(key, file)
        && let Ok(Step::Done(h)) = HeaderRead::new(format, size).next_read(&prefix)
    {
        return Ok(h.into_tensors());
    }
    let resolve = client.resolve_url(repo, key, file);
    // After the first read, the CDN address it was sent to (no second resolve).
    let mut direct: Option<String> = None;
    let mut size: Option<u64> = None;
    let mut prefix: Vec<u8> = Vec::new();
    loop {
        // Until the first answer the size is unknown: the first range does not depend
        // on it (8 bytes; GGUF's first read), and the server bounds it by the file.
        let policy = HeaderRead::new(format, size.unwrap_or(u64::MAX));
        let range = match policy.next_read(&prefix).with_context(|| what.clone())? {
            Step::Done(h) => {
                if let Some(n) = size {
                    cache.set_head(key, file, n, &prefix);
                }
                return Ok(h.into_tensors());
            }
            Step::Need(r) => r,
        };
        let got = match &direct {
            // A signed CDN address may expire: ask the Hub again once.
            Some(d) => client
                .get_range(d, range.clone(), &what)
                .or_else(|_| client.get_range(&resolve, range.clone(), &what))?,
            None => client.get_range(&resolve, range.clone(), &what)?,
        };
        let total = got
            .total
            .ok_or_else(|| anyhow!("{what}: the server did not say the file's size"))?;
        if size.is_some_and(|s| s != total) {
            bail!("{what}: the file changed size while being read");
        }
        if got.body.is_empty() {
            bail!("{what}: the file ended inside its header");
        }
        size = Some(total);
        prefix.extend_from_slice(&got.body);
        if got.final_url != resolve {
            direct = Some(got.final_url);
        }
    }
}

/// `ORG/NAME` (or a legacy `NAME`): plain segments, no traversal.
fn check_repo(repo: &str) -> Result<()> {
    let segments: Vec<&str> = repo.split('/').collect();
    let ok = (1..=2).contains(&segments.len())
        && repo.len() <= 200
        && segments.iter().all(|s| plain_segment(s));
    if !ok {
        bail!(
            "--model: expected ORG/NAME as on the Hub (letters, digits, '-', '_', '.'), got {repo:?}"
        );
    }
    Ok(())
}

/// A file path inside a repository, safe both in a URL and under the cache folder.
fn check_file(file: &str) -> Result<()> {
    let ok = file.len() <= 500
        && file.split('/').all(|s| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.+=@".contains(&b))
        });
    if !ok {
        bail!("{file:?}: not a plain file path");
    }
    Ok(())
}

fn plain_segment(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_and_file_names_are_checked() {
        assert!(check_repo("meta-llama/Llama-3.1-8B").is_ok());
        assert!(check_repo("gpt2").is_ok());
        for bad in ["", "a/b/c", "../x", "a/..", "a b/c", "a/b?x", "/a"] {
            assert!(check_repo(bad).is_err(), "{bad}");
        }
        assert!(check_file("model-00001-of-00061.safetensors").is_ok());
        assert!(check_file("gguf/Llama-3.1-8B-Q4_K_M.gguf").is_ok());
        for bad in ["", "../config.json", "a//b", "a/./b", "a b", "a?b", "a%2Fb"] {
            assert!(check_file(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shard_names_are_distinct_and_sorted() {
        let idx = br#"{"metadata":{},"weight_map":{"a":"m-2.safetensors","b":"m-1.safetensors","c":"m-2.safetensors"}}"#;
        assert_eq!(
            shard_names(idx).unwrap(),
            vec!["m-1.safetensors", "m-2.safetensors"]
        );
        assert!(shard_names(br#"{"weight_map":{"a":"../x"}}"#).is_err());
        assert!(shard_names(br#"{"weight_map":{}}"#).is_err());
        assert!(shard_names(b"[]").is_err());
    }
}
