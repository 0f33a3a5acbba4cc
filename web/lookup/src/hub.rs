//! A model looked up on the Hugging Face Hub (or a mirror) by its id, from the page:
//! the same conventions and the same shared pieces as `gpumem-agent estimate --model`
//! ([`gpumem_core::import::hub`]: ids, URLs, the file list, which weight files to read).
//!
//! Round 1 asks for `config.json`, the file list's first page (with sizes, folders'
//! files included) and `model.safetensors.index.json` together; a longer list's further
//! pages follow its `Link` headers, one round each ([`hub::TreePages`]); then every
//! weight file's header is read with Range requests, all files at once, each file's
//! reads grown as [`gpumem_core::import::read_policy`] asks. A 61-shard checkpoint
//! costs round 1 plus the reads of its slowest file (two for a safetensors header: its
//! length, then the header), not 61 sequential round trips.
//!
//! The page reads `Link` only if the Hub's CORS answer exposes it
//! (`Access-Control-Expose-Headers`); that huggingface.co does could not be
//! established here (huggingface.js's `listFiles`, written for browsers too, reads it
//! the same way, which suggests so). A page that sees no `Link` cannot tell a last
//! page from a hidden next one, so it takes the list as complete, and when the choice
//! then fails for want of a file it says the list may have gone on unseen (the agent,
//! outside the browser, always sees `Link`).

use futures_util::future::join_all;
use gpumem_core::import::TensorSummary;
use gpumem_core::import::config::parse_config;
use gpumem_core::import::hub::{
    self, CONFIG_FILE, HubError, INDEX_FILE, MAX_LISTING_BYTES, RepoFile, SINGLE_FILE, TreePages,
    WeightFiles, check_file, check_read_split, check_repo_id, check_revision, choose_weights,
    index_shards, parse_search, resolve_url, search_url, split_set_names, tree_url,
};
use gpumem_core::import::read_policy::{Header, HeaderFormat, HeaderRead, Step};
use gpumem_proto::lookup::{LookupOutcome, LookupRequest, TensorsRead};

use crate::config_read;
use crate::http::{Answer, Http};

/// A config.json larger than this is not a config.
const MAX_CONFIG_BYTES: usize = 8 << 20;

/// Looks `request.model` up on `endpoint`; `say` hears progress in words.
pub async fn lookup(
    endpoint: &str,
    request: &LookupRequest,
    say: &dyn Fn(&str),
) -> Result<LookupOutcome, String> {
    let (repo, revision) = repo_and_revision(request)?;
    let file = request
        .file
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty());
    if let Some(f) = file {
        check_file(f).map_err(|e| format!("file: {e}"))?;
    }
    let http = Http::new(endpoint, request.token.clone());
    let named = |what: &str| format!("{repo}@{revision}: {what}");

    say(&format!(
        "Asking {endpoint} for {repo}: config.json and the file list…"
    ));
    let config_url = resolve_url(endpoint, repo, revision, CONFIG_FILE);
    let list_url = tree_url(endpoint, repo, revision);
    let index_url = resolve_url(endpoint, repo, revision, INDEX_FILE);
    let mut round = join_all([
        http.get(&config_url, None, MAX_CONFIG_BYTES),
        http.get(&list_url, None, MAX_LISTING_BYTES),
        http.get(&index_url, None, MAX_LISTING_BYTES),
    ])
    .await
    .into_iter();
    let mut next = || {
        round
            .next()
            .unwrap_or_else(|| Err("a request went missing".into()))
    };
    let (config, list, index) = (next(), next(), next());
    // No answer at all (offline, blocked, refused): a bundled model answers from its
    // copy beside the page, as the agent's does without a revision.
    if let (Err(e), Err(_)) = (&config, &list)
        && e.contains(crate::http::UNREACHABLE)
        && file.is_none()
        && request.revision.trim().is_empty()
        && let Some(bundled) =
            crate::bundled::read(repo, &format!("{endpoint} could not be reached")).await
    {
        return bundled;
    }
    let (config, list, index) = (config?, list?, index?);
    // The file list first: it names a missing repository or revision best. A mirror
    // without the listing API (404 for it alone, config.json served) is read the way
    // the agent reads it: the file named, else the index's shards, else the single
    // file, their sizes learnt from the first answer's Content-Range.
    let no_listing = list.status == 404
        && config.status == 200
        && !matches!(
            list.error_code.as_deref(),
            Some("RepositoryNotFound" | "RevisionNotFound")
        );
    let list = if no_listing {
        say("This Hub has no file listing: choosing the weight files without it…");
        None
    } else {
        Some(body_of(
            list,
            &named("the file list"),
            repo,
            endpoint,
            &http,
        )?)
    };
    let config = optional(config, &named(CONFIG_FILE), repo, endpoint, &http)?;
    let index = optional(index, &named(INDEX_FILE), repo, endpoint, &http)?;
    let commit = list
        .as_ref()
        .and_then(|l| l.commit.clone())
        .or_else(|| config.as_ref().and_then(|c| c.commit.clone()));
    // Pages of the file list read (1 without a list: round 1 all the same).
    let mut listing_pages = 1usize;
    let (files, format) = match list {
        Some(first) => {
            let mut pages = TreePages::new(endpoint);
            let mut page = first;
            while let Some(next) = pages
                .add(&page.body, page.link.as_deref())
                .map_err(|e| named(&e.to_string()))?
            {
                say(&format!(
                    "Reading page {} of the file list…",
                    pages.pages().saturating_add(1)
                ));
                let answer = http.get(&next, None, MAX_LISTING_BYTES).await?;
                page = body_of(answer, &named("the file list"), repo, endpoint, &http)?;
            }
            listing_pages = pages.pages();
            let tree = pages.into_files();
            match choose_weights(&tree, index.as_ref().map(|i| i.body.as_slice()), file) {
                Ok(WeightFiles::Safetensors(v)) => (v, HeaderFormat::Safetensors),
                Ok(WeightFiles::Gguf(v)) => (v, HeaderFormat::Gguf),
                Err(
                    e @ (HubError::FileNotFound { .. }
                    | HubError::NoWeights { .. }
                    | HubError::ShardMissing(_)
                    | HubError::IncompleteSplit(_)),
                ) if listing_pages == 1 => {
                    return Err(named(&format!(
                        "{e} (this page read the Hub's file list as one page of {} entries: if the Hub hides its Link header from pages, a longer list goes on unseen here — gpumem-agent estimate --model reads every page)",
                        tree.len()
                    )));
                }
                Err(e) => return Err(named(&e.to_string())),
            }
        }
        None => {
            let paths = match (file, &index) {
                // A split GGUF file's name says its set's files.
                (Some(f), _) => split_set_names(f),
                (None, Some(i)) => index_shards(&i.body).map_err(|e| named(&e.to_string()))?,
                (None, None) => vec![SINGLE_FILE.to_string()],
            };
            let gguf = paths
                .iter()
                .all(|p| p.to_ascii_lowercase().ends_with(".gguf"));
            let format = if gguf {
                HeaderFormat::Gguf
            } else {
                HeaderFormat::Safetensors
            };
            // Size 0: not listed; the first read's Content-Range tells it.
            let files = paths
                .into_iter()
                .map(|path| RepoFile { path, size: 0 })
                .collect();
            (files, format)
        }
    };

    say(&format!(
        "Reading the headers of {} weight file{} (only the headers)…",
        files.len(),
        if files.len() == 1 { "" } else { "s" }
    ));
    let reads = join_all(files.iter().map(|f| {
        let url = resolve_url(endpoint, repo, revision, &f.path);
        read_header(&http, url, f, format, repo, endpoint)
    }))
    .await;
    let (headers, counts): (Vec<Header>, Vec<u32>) = reads
        .into_iter()
        .collect::<Result<Vec<_>, String>>()?
        .into_iter()
        .unzip();
    let slowest = counts.into_iter().max().unwrap_or(0);
    // A split GGUF model's headers must agree with the set they were read as.
    let paths: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    check_read_split(&paths, &headers).map_err(|e| named(&e.to_string()))?;
    let gguf_shape = headers.iter().zip(&files).find_map(|(h, f)| match h {
        Header::Gguf(g) => crate::gguf_read(&f.path, g),
        Header::Safetensors(_) => None,
    });
    let summary = TensorSummary::merge_all(headers.into_iter().map(Header::into_tensors))
        .map_err(|e| e.to_string())?
        .ok_or_else(|| named("no weight file to read"))?;
    let config = match config {
        Some(c) => {
            let text =
                String::from_utf8(c.body).map_err(|_| named("config.json is not UTF-8 text"))?;
            let parsed = parse_config(&text).map_err(|e| named(&format!("config.json: {e}")))?;
            Some(config_read(
                format!("{repo}@{revision}/config.json"),
                &parsed,
            ))
        }
        // Without a config.json, a GGUF header's metadata gives the KV cache its shape.
        None => gguf_shape,
    };
    Ok(LookupOutcome {
        config,
        tensors: Some(TensorsRead {
            files: files.into_iter().map(|f| f.path).collect(),
            summary,
        }),
        requests: http.requests(),
        // Round 1, each further page of the file list, then the slowest file's reads.
        round_trips: slowest.saturating_add(u32::try_from(listing_pages).unwrap_or(u32::MAX)),
        commit,
        mmproj: None,
    })
}

/// How long the typing must pause before the page asks for suggestions.
pub const SUGGEST_PAUSE_MS: u32 = 300;

/// Model ids matching `query` (the Hub's model search, most downloaded first), for
/// suggestions while the user types; none for a query too short to search.
pub async fn search(endpoint: &str, query: &str) -> Result<Vec<String>, String> {
    let Some(url) = search_url(endpoint, query) else {
        return Ok(Vec::new());
    };
    // Public: no token goes with a search.
    let http = Http::new(endpoint, None);
    let answer = http.get(&url, None, MAX_LISTING_BYTES).await?;
    if answer.status != 200 || answer.truncated {
        return Err(format!(
            "model search: the Hub answered HTTP {}",
            answer.status
        ));
    }
    parse_search(&answer.body).map_err(|e| e.to_string())
}

/// Reads one weight file's header by Range requests; the number of reads it took.
async fn read_header(
    http: &Http,
    first: String,
    file: &RepoFile,
    format: HeaderFormat,
    repo: &str,
    endpoint: &str,
) -> Result<(Header, u32), String> {
    // Size 0: not listed (a mirror without the listing); the first read's
    // Content-Range tells it.
    let mut sized = file.size != 0;
    let mut policy = HeaderRead::new(format, if sized { file.size } else { u64::MAX });
    let name = &file.path;
    let mut url = first;
    let mut prefix: Vec<u8> = Vec::new();
    let mut reads = 0u32;
    loop {
        let range = match policy
            .next_read(&prefix)
            .map_err(|e| format!("{name}: {e}"))?
        {
            Step::Done(header) => return Ok((header, reads)),
            Step::Need(range) => range,
        };
        let want = range
            .end
            .checked_sub(range.start)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| format!("{name}: a read the page cannot hold"))?;
        let answer = http.get(&url, Some((range.start, range.end)), want).await?;
        reads = reads.saturating_add(1);
        match answer.status {
            206 => {}
            // A server that ignores Range answers the whole file: its first bytes are
            // still the header's, and no more than asked was read.
            200 if range.start == 0 => {}
            200 => return Err(format!("{name}: the server ignored the Range request")),
            _ => return Err(refusal(&answer, name, repo, endpoint, http)),
        }
        if answer.body.is_empty() {
            return Err(format!("{name}: the file ended inside its header"));
        }
        if !sized {
            let size = answer.total_size.ok_or_else(|| {
                format!("{name}: the Hub lists no files and its answer does not say the file's size (Content-Range)")
            })?;
            policy = HeaderRead::new(format, size);
            sized = true;
        }
        // Later reads go straight to where the first answer came from (the CDN).
        url = answer.url;
        prefix.extend_from_slice(&answer.body);
    }
}

/// The request's repository id and revision (`main` when none is given), each checked
/// as the Hub's paths take them.
pub(crate) fn repo_and_revision(request: &LookupRequest) -> Result<(&str, &str), String> {
    let repo = request.model.trim();
    check_repo_id(repo).map_err(|e| e.to_string())?;
    let revision = match request.revision.trim() {
        "" => "main",
        r => r,
    };
    check_revision(revision).map_err(|e| format!("revision: {e}"))?;
    Ok((repo, revision))
}

/// A text answer that must be there.
pub(crate) fn body_of(
    answer: Answer,
    what: &str,
    repo: &str,
    endpoint: &str,
    http: &Http,
) -> Result<Answer, String> {
    if answer.status != 200 {
        return Err(refusal(&answer, what, repo, endpoint, http));
    }
    if answer.truncated {
        return Err(format!("{what}: larger than the page reads"));
    }
    Ok(answer)
}

/// A text answer that may be missing (404 for the file, not the repository).
pub(crate) fn optional(
    answer: Answer,
    what: &str,
    repo: &str,
    endpoint: &str,
    http: &Http,
) -> Result<Option<Answer>, String> {
    let missing_file = answer.status == 404
        && !matches!(
            answer.error_code.as_deref(),
            Some("RepositoryNotFound" | "RevisionNotFound")
        );
    if missing_file {
        return Ok(None);
    }
    body_of(answer, what, repo, endpoint, http).map(Some)
}

/// The Hub's refusal in words, as the agent says it.
fn refusal(answer: &Answer, what: &str, repo: &str, endpoint: &str, http: &Http) -> String {
    hub::refusal(
        answer.status,
        answer.error_code.as_deref(),
        what,
        &format!("{endpoint}/{repo}"),
        http.has_token(),
        "give an access token (kept in this page's memory only)",
    )
    .unwrap_or_else(|| format!("{what}: the Hub answered HTTP {}", answer.status))
}
