//! A diffusers pipeline looked up on the Hub, from the page: its `model_index.json`,
//! then the `config.json` of each component with weights, all at once — the files
//! `gpumem-agent estimate --diffusers` reads from a folder, and nothing else (no
//! weights, no listing). Each file is bounded ([`MAX_FILE_BYTES`]) and so is their
//! count (the index's components, [`gpumem_core::diffusion::components_of`]).
//!
//! The diffusion module (`web/diffusion`) links this crate without its exports and
//! calls [`lookup`]; the lookup module itself never reads a pipeline.

use futures_util::future::join_all;
use gpumem_core::diffusion::components_of;
use gpumem_core::import::hub::resolve_url;
use gpumem_proto::diffusion::{MAX_FILE_BYTES, PipelineFiles};
use gpumem_proto::lookup::LookupRequest;

use crate::http::Http;
use crate::hub::{body_of, optional};

/// The pipeline's index file.
pub const INDEX_FILE: &str = "model_index.json";

/// Reads `request.model`'s pipeline files on `endpoint`; `say` hears progress.
pub async fn lookup(
    endpoint: &str,
    request: &LookupRequest,
    say: &dyn Fn(&str),
) -> Result<PipelineFiles, String> {
    let (repo, revision) = crate::hub::repo_and_revision(request)?;
    let http = Http::new(endpoint, request.token.clone());
    let named = |what: &str| format!("{repo}@{revision}: {what}");
    say(&format!("Asking {endpoint} for {repo}'s {INDEX_FILE}…"));
    let url = resolve_url(endpoint, repo, revision, INDEX_FILE);
    let index = http.get(&url, None, MAX_FILE_BYTES).await?;
    let index = body_of(index, &named(INDEX_FILE), repo, endpoint, &http)?;
    let commit = index.commit.clone();
    let index = String::from_utf8(index.body)
        .map_err(|_| format!("{}: not UTF-8 text", named(INDEX_FILE)))?;
    // The core names the components with weights (bounded in count) and refuses an
    // index that is not a pipeline's, or a component name that is not a folder name.
    let (_, named_components, _) = components_of(&index).map_err(|e| e.to_string())?;
    say(&format!(
        "Reading the config.json of {} component(s)…",
        named_components.len()
    ));
    // The same futures the model lookup joins (`Http::get`'s), so no second join is
    // compiled into the module.
    let urls: Vec<String> = named_components
        .iter()
        .map(|(name, _)| resolve_url(endpoint, repo, revision, &format!("{name}/config.json")))
        .collect();
    let answers = join_all(urls.iter().map(|url| http.get(url, None, MAX_FILE_BYTES))).await;
    let mut configs = Vec::new();
    for ((name, _), answer) in named_components.iter().zip(answers) {
        let file = format!("{name}/config.json");
        // A component without its config is named by the core's reader, as the
        // agent's folder without it is.
        if let Some(a) = optional(answer?, &named(&file), repo, endpoint, &http)? {
            let text = String::from_utf8(a.body)
                .map_err(|_| format!("{}: not UTF-8 text", named(&file)))?;
            configs.push((name.clone(), text));
        }
    }
    let source = match commit {
        Some(c) => format!("{repo}@{revision} (commit {})", c.get(..12).unwrap_or(&c)),
        None => format!("{repo}@{revision}"),
    };
    say(&format!(
        "Read {INDEX_FILE} and {} config.json file(s) in {} request(s).",
        configs.len(),
        http.requests()
    ));
    Ok(PipelineFiles {
        source,
        index,
        configs,
    })
}
