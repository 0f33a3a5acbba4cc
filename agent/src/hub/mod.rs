//! `estimate --model ORG/NAME`: a model's architecture and exact weight bytes from the
//! Hugging Face Hub (or a mirror), without downloading the weights.
//!
//! `config.json`, `model.safetensors.index.json` and the first page of the repository's
//! whole file listing (`/api/models/{repo}/tree/{revision}?recursive=true`) are fetched
//! together, in one round; a longer listing's further pages follow its `Link` headers
//! ([`gpumem_core::import::hub::TreePages`], one more round each, bounded). The weight
//! files are chosen from them by the rules the page shares
//! ([`gpumem_core::import::hub::choose_weights`]: a `--model-file` that must be listed,
//! else the index's shards, else `model.safetensors`, else the one GGUF model — a
//! single file or every file of a split set, whose headers are then checked against
//! the set by [`gpumem_core::import::hub::check_split`]).
//! Then every weight file's header is read with HTTP Range requests, grown exactly as
//! the core's read policy asks ([`gpumem_core::import::read_policy`], the same policy
//! the agent uses for local files and the page for dropped ones), the file's size
//! learnt from the first answer's `Content-Range`. The files are read concurrently by a bounded pool
//! ([`WORKERS`]), and a file's later reads go straight to the CDN address its first
//! read was redirected to, so a 61-shard checkpoint costs a handful of sequential round
//! trips, not 61 × 2. The header bytes all readers hold at once are bounded
//! ([`HEADER_BYTES_AT_ONCE`]), so 64 legal 100 MB headers are not 6.4 GB at once. What
//! was read is cached ([`cache`], bounded by [`cache::CACHE_BUDGET`]); a cached lookup
//! sends nothing.
//!
//! This is the only part of the agent that talks to the network (tests use a loopback
//! stand-in through `HF_ENDPOINT`). A model of the bundled catalogue ([`bundled`]) is
//! answered from its bundled config.json instead, with no request, unless a revision
//! or a weight file is asked for ([`bundled_for`]).

pub mod bundled;
pub mod cache;
pub mod client;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use anyhow::{Context, Result, anyhow, bail};
use gpumem_core::import::TensorSummary;
use gpumem_core::import::hub::{
    self as rules, CONFIG_FILE, HubError, INDEX_FILE as INDEX, SINGLE_FILE as SINGLE,
};
use gpumem_core::import::read_policy::{Header, HeaderFormat, HeaderRead, Step};

use cache::{Cache, Manifest};
use client::{Client, NotFound};

/// Weight files read at once: every shard of a 64-shard checkpoint in one wave, so a
/// lookup costs a handful of round trips (61 shards over a 100 ms link took
/// 13.9 rounds with 16 workers, 4.7 with 64). Each read is a few kB of header, the
/// load a browser on HTTP/2 puts on the Hub for the same lookup.
pub const WORKERS: usize = 64;

/// Header bytes the readers hold at once, all files together: a read waits while the
/// others hold this much, except the earliest file being read, which may always go on
/// (so the readers never wait on each other for ever): at most this plus one header
/// (256 MiB for GGUF, 100 MB for safetensors) are held. Eight 100 MB headers took
/// 1.25 GB at once before.
pub const HEADER_BYTES_AT_ONCE: u64 = 256 << 20;

/// What a lookup found.
#[derive(Debug)]
pub struct Found {
    /// `config.json`'s text (absent for a repository without one, e.g. GGUF only).
    pub config: Option<String>,
    /// Every tensor of every weight file.
    pub tensors: TensorSummary,
    /// The KV cache's shape from the first GGUF header's metadata (a GGUF file).
    pub gguf_shape: Option<gpumem_core::import::gguf::GgufShape>,
    /// The weight files read.
    pub files: Vec<String>,
    /// The commit read (when the Hub said), else the revision as given.
    pub key: String,
    /// HTTP requests sent (0 when everything came from the cache).
    pub requests: u64,
}

/// The bundled model `--model ID` names, when its bundled config.json is to be read
/// instead of the Hub: only without `--revision` and `--model-file` (either asks for
/// the Hub's files themselves).
pub fn bundled_for(
    model: &str,
    revision: Option<&str>,
    file: Option<&str>,
) -> Option<&'static bundled::Bundled> {
    if revision.is_some() || file.is_some() {
        return None;
    }
    bundled::find(model)
}

/// [`lookup`], a failure followed by what reads `repo` without the Hub: its bundled
/// copy (when `--revision` or `--model-file` asked for the Hub), or the bundled ids
/// close to it.
pub fn lookup_or_hint(repo: &str, revision: Option<&str>, file: Option<&str>) -> Result<Found> {
    lookup(repo, revision.unwrap_or("main"), file).map_err(|e| {
        let hint = match bundled::find(repo) {
            Some(b) => format!(
                "{} is bundled: without --revision and --model-file its bundled config.json is read, with no request",
                b.id
            ),
            None => bundled::hint(repo),
        };
        anyhow!("{e:#}\n{hint}")
    })
}

/// Looks `repo` up at `revision`; `file` names the weight file to read instead of
/// the safetensors checkpoint (a `.gguf` in a GGUF repository).
pub fn lookup(repo: &str, revision: &str, file: Option<&str>) -> Result<Found> {
    rules::check_repo_id(repo).context("--model")?;
    rules::check_revision(revision).context("--revision")?;
    if let Some(f) = file {
        rules::check_file(f).context("--model-file")?;
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
        .filter(|(_, m)| m.files.iter().all(|f| rules::check_file(f).is_ok()));
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

    let is_gguf = |f: &String| f.to_ascii_lowercase().ends_with(".gguf");
    match (file, manifest.files.as_slice()) {
        (None, [only]) if is_gguf(only) => crate::out::errln!(
            "gpumem-agent: {repo}: reading {only}, the repository's only GGUF file (name another with --model-file)"
        ),
        (None, [first, ..]) if manifest.files.iter().all(is_gguf) => crate::out::errln!(
            "gpumem-agent: {repo}: reading {first} and the {} other files of its split set, the repository's only GGUF model (name another with --model-file)",
            manifest.files.len().saturating_sub(1)
        ),
        _ => {}
    }

    // Step 2: every file's header, concurrently (cached ones without a request).
    let headers = read_headers(&client, &cache, repo, &key, &manifest.files, &label)
        .map_err(|e| {
            if e.is::<NotFound>() && file.is_none() && manifest.files == [SINGLE] {
                anyhow!(
                    "{e}: the repository has neither {INDEX} nor {SINGLE}; for a GGUF repository name the file with --model-file"
                )
            } else {
                e
            }
        })?;
    // Keep the cache within its budget, now that this lookup's entries are written.
    cache.evict(cache::CACHE_BUDGET);
    // A split GGUF model's headers must agree with the set they were read as.
    rules::check_read_split(&manifest.files, &headers).map_err(|e| anyhow!("{repo}: {e}"))?;
    let gguf_shape = headers.iter().find_map(|h| match h {
        Header::Gguf(g) => g.shape(),
        Header::Safetensors(_) => None,
    });
    let tensors = TensorSummary::merge_all(headers.into_iter().map(Header::into_tensors))
        .context("merging shards")?;
    Ok(Found {
        config: manifest.config,
        tensors: tensors.ok_or_else(|| anyhow!("{repo}: no weight files"))?,
        gguf_shape,
        files: manifest.files,
        key,
        requests: client.requests(),
    })
}

/// `config.json`, the shard index and the file listing, fetched together (one round
/// of concurrent requests); then the weight files chosen from them.
fn fetch_manifest(
    client: &Client,
    repo: &str,
    revision: &str,
    file: Option<&str>,
    label: &(dyn Fn(&str) -> String + Sync),
) -> Result<(String, Manifest)> {
    let tree_label = format!("{repo}@{revision} (file list)");
    let (config, index, tree) = std::thread::scope(|s| {
        let get = |url: String, what: String| s.spawn(move || client.get_text(&url, &what));
        let config = get(
            client.resolve_url(repo, revision, CONFIG_FILE),
            label(CONFIG_FILE),
        );
        // A named file needs no index: the listing says whether it is there.
        let index = file
            .is_none()
            .then(|| get(client.resolve_url(repo, revision, INDEX), label(INDEX)));
        let tree = get(client.tree_url(repo, revision), tree_label.clone());
        let join = |h: std::thread::ScopedJoinHandle<'_, Result<client::Fetched>>| {
            h.join()
                .unwrap_or_else(|_| Err(anyhow!("{repo}: a reader panicked")))
        };
        (join(config), index.map(join), join(tree))
    });
    let absent = |r: Result<client::Fetched>| -> Result<Option<client::Fetched>> {
        match r {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.is::<NotFound>() => Ok(None),
            Err(e) => Err(e),
        }
    };
    // The listing's refusal first: it names a missing repository, revision or access
    // as well as any file would, and it is the one answer every lookup needs.
    let tree = match tree {
        Ok(t) => Some(t),
        // A mirror without the listing API, where the files themselves are served:
        // the weights are then chosen the way they were before the listing existed.
        Err(e) if e.is::<NotFound>() && config.is_ok() => {
            crate::out::errln!("gpumem-agent: {e}; choosing the weight files without it");
            None
        }
        Err(e) => return Err(e),
    };
    let config = absent(config)?;
    let index = match index {
        Some(r) => absent(r)?,
        None => None,
    };
    let mut commit = config.as_ref().and_then(|c| c.commit.clone());
    if let Some(i) = &index {
        commit = commit.or(i.commit.clone());
    }
    let files = match tree {
        Some(first) => {
            let listing = read_listing(client, first, &tree_label)?;
            let chosen =
                rules::choose_weights(&listing, index.as_ref().map(|i| i.body.as_slice()), file)
                    .map_err(|e| explain(repo, e))?;
            chosen.paths()
        }
        // Without the listing a split GGUF file's name still says its set's files.
        None => match (file, &index) {
            (Some(f), _) => rules::split_set_names(f),
            (None, Some(i)) => rules::index_shards(&i.body).with_context(|| label(INDEX))?,
            (None, None) => vec![SINGLE.to_string()],
        },
    };
    let is_gguf = files
        .iter()
        .all(|f| f.to_ascii_lowercase().ends_with(".gguf"));
    // safetensors headers carry no architecture: without config.json there is
    // nothing to estimate from (a GGUF header carries its own).
    if config.is_none() && !is_gguf {
        bail!(
            "{}: not found: the architecture comes from it",
            label(CONFIG_FILE)
        );
    }
    let config = match config {
        Some(c) => Some(
            String::from_utf8(c.body).map_err(|_| anyhow!("{}: not UTF-8", label(CONFIG_FILE)))?,
        ),
        None => None,
    };
    Ok((
        commit.unwrap_or_else(|| revision.to_string()),
        Manifest { config, files },
    ))
}

/// The whole listing: `first` (fetched in the first round) and the pages its `Link`
/// headers lead to, one after the other.
fn read_listing(
    client: &Client,
    first: client::Fetched,
    what: &str,
) -> Result<Vec<rules::RepoFile>> {
    let mut pages = rules::TreePages::new(client.endpoint());
    let mut page = first;
    while let Some(next) = pages
        .add(&page.body, page.link.as_deref())
        .with_context(|| what.to_string())?
    {
        page = client.get_text(
            &next,
            &format!("{what}, page {}", pages.pages().saturating_add(1)),
        )?;
    }
    Ok(pages.into_files())
}

/// The core's refusal in the agent's words (its flag names).
fn explain(repo: &str, e: HubError) -> anyhow::Error {
    match e {
        HubError::ManyGguf(_) => anyhow!("{repo}: {e}\npass --model-file NAME to choose one"),
        HubError::IncompleteSplit(_) => anyhow!("{repo}: {e}"),
        HubError::FileNotFound { .. } | HubError::UnsupportedFile(_) => {
            anyhow!("--model-file {e}")
        }
        other => anyhow!("{repo}: {other}"),
    }
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
) -> Result<Vec<Header>> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let budget = Budget::new(HEADER_BYTES_AT_ONCE);
    let results: Vec<Mutex<Option<Result<Header>>>> =
        files.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..WORKERS.min(files.len()) {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(file) = files.get(i) else { break };
                    let r = read_one(client, cache, repo, key, file, label, &mut budget.holder(i));
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
    budget: &mut Holder<'_>,
) -> Result<Header> {
    let what = label(file);
    let format = if file.to_ascii_lowercase().ends_with(".gguf") {
        HeaderFormat::Gguf
    } else {
        HeaderFormat::Safetensors
    };
    if let Some(bytes) = cache.head_len(key, file) {
        budget.take(bytes);
    }
    if let Some((size, prefix)) = cache.head(key, file)
        && let Ok(Step::Done(h)) = HeaderRead::new(format, size).next_read(&prefix)
    {
        return Ok(h);
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
                return Ok(h);
            }
            Step::Need(r) => r,
        };
        budget.take(range.end.saturating_sub(range.start));
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

/// The header bytes held by every reader together ([`HEADER_BYTES_AT_ONCE`]).
struct Budget {
    limit: u64,
    /// Bytes held, by the index of the file holding them.
    held: Mutex<BTreeMap<usize, u64>>,
    freed: Condvar,
}

impl Budget {
    fn new(limit: u64) -> Budget {
        Budget {
            limit,
            held: Mutex::new(BTreeMap::new()),
            freed: Condvar::new(),
        }
    }

    /// The share of file `file`; what it took is given back when it is dropped.
    fn holder(&self, file: usize) -> Holder<'_> {
        Holder { budget: self, file }
    }

    /// The bytes held now, all files together.
    #[cfg(test)]
    fn in_use(&self) -> u64 {
        self.held
            .lock()
            .map(|h| h.values().fold(0u64, |a, b| a.saturating_add(*b)))
            .unwrap_or(0)
    }
}

/// One file's share of the [`Budget`].
struct Holder<'a> {
    budget: &'a Budget,
    file: usize,
}

impl Holder<'_> {
    /// Waits until `bytes` more fit in the budget — or until this file is the earliest
    /// one holding bytes, which always goes on — then holds them.
    fn take(&mut self, bytes: u64) {
        let Ok(mut held) = self.budget.held.lock() else {
            return;
        };
        loop {
            let in_use = held.values().fold(0u64, |a, b| a.saturating_add(*b));
            let earliest = held.keys().next() == Some(&self.file);
            if in_use.saturating_add(bytes) <= self.budget.limit || earliest || in_use == 0 {
                let mine = held.entry(self.file).or_insert(0);
                *mine = mine.saturating_add(bytes);
                return;
            }
            held = match self.budget.freed.wait(held) {
                Ok(h) => h,
                Err(_) => return,
            };
        }
    }
}

impl Drop for Holder<'_> {
    fn drop(&mut self) {
        if let Ok(mut held) = self.budget.held.lock() {
            held.remove(&self.file);
        }
        self.budget.freed.notify_all();
    }
}

/// A diffusers pipeline's files from the Hub (`estimate --diffusers ORG/NAME`): its
/// `model_index.json`, then the `config.json` of each component with weights, all at
/// once — the files the page's pipeline lookup reads, and nothing else (no weights, no
/// listing). Each file is bounded by the client's text limit and the core's config
/// limit, their count by the index ([`gpumem_core::diffusion::components_of`]); a
/// component without its `config.json` is left for the core's reader to name, as a
/// folder without it is.
pub struct PipelineFiles {
    /// `model_index.json`'s text.
    pub index: String,
    /// Each component's name and its `config.json`'s text.
    pub configs: Vec<(String, String)>,
    /// `ORG/NAME@REVISION` and the commit when the Hub said.
    pub source: String,
    /// HTTP requests sent.
    pub requests: u64,
}

/// Reads a pipeline's files from the Hub (see [`PipelineFiles`]).
pub fn pipeline(repo: &str, revision: &str) -> Result<PipelineFiles> {
    use gpumem_core::diffusion::{MAX_CONFIG_BYTES, components_of};
    rules::check_repo_id(repo).context("--diffusers")?;
    rules::check_revision(revision).context("--revision")?;
    let client = Client::from_env();
    let label = |f: &str| format!("{repo}@{revision}/{f}");
    let text = |f: &str, fetched: client::Fetched| -> Result<String> {
        if fetched.body.len() > MAX_CONFIG_BYTES {
            bail!("{}: over {MAX_CONFIG_BYTES} bytes", label(f));
        }
        String::from_utf8(fetched.body).map_err(|_| anyhow!("{}: not UTF-8 text", label(f)))
    };
    const INDEX_FILE: &str = "model_index.json";
    let index = client.get_text(
        &client.resolve_url(repo, revision, INDEX_FILE),
        &label(INDEX_FILE),
    )?;
    let commit = index.commit.clone();
    let index = text(INDEX_FILE, index)?;
    // The core refuses a component name that is not one plain folder name.
    let (_, named, _) = components_of(&index)?;
    // Every component's config.json in one round (at most the index's bounded count).
    let files: Vec<String> = named
        .iter()
        .map(|(n, _)| format!("{n}/config.json"))
        .collect();
    let answers: Vec<Result<client::Fetched>> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .iter()
            .map(|f| {
                let (url, what) = (client.resolve_url(repo, revision, f), label(f));
                let client = &client;
                s.spawn(move || client.get_text(&url, &what))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("{repo}: a reader panicked")))
            })
            .collect()
    });
    let mut configs = Vec::new();
    for (((name, _), file), answer) in named.iter().zip(&files).zip(answers) {
        match answer {
            Ok(f) => configs.push((name.clone(), text(file, f)?)),
            Err(e) if e.is::<NotFound>() => {}
            Err(e) => return Err(e),
        }
    }
    let source = match commit {
        Some(c) => format!("{repo}@{revision} (commit {})", c.get(..12).unwrap_or(&c)),
        None => format!("{repo}@{revision}"),
    };
    Ok(PipelineFiles {
        index,
        configs,
        source,
        requests: client.requests(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_hold_at_most_the_budget_plus_the_earliest_file() {
        // 16 readers of 100 MB headers in 10 MB reads, as 16 concurrent files would.
        let budget = Budget::new(HEADER_BYTES_AT_ONCE);
        let peak = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for file in 0..16 {
                let (budget, peak) = (&budget, &peak);
                s.spawn(move || {
                    let mut holder = budget.holder(file);
                    for _ in 0..10 {
                        holder.take(10_000_000);
                        peak.fetch_max(budget.in_use(), Ordering::SeqCst);
                        std::thread::yield_now();
                    }
                });
            }
        });
        let peak = peak.into_inner();
        assert!(
            peak <= HEADER_BYTES_AT_ONCE + 100_000_000,
            "{peak} bytes held at once"
        );
        assert_eq!(budget.in_use(), 0, "every share given back");
    }
}
