//! The bundled catalogue beside the page: the agent's named models (`agent/models/`),
//! whose config.json the build writes to `models/<owner>--<name>.json` next to the page,
//! with an index (`models/index.txt`: per line the id, the day its config was read and
//! where, tab-separated). The model search offers them first, also
//! offline; a lookup the Hub cannot answer at all (offline, blocked, refused) reads the
//! bundled config.json instead, and says so — as `gpumem-agent estimate --model ID`
//! does without `--revision`. Same origin as the page: no token goes with these reads.

use std::cell::RefCell;

use gpumem_core::import::config::parse_config;
use gpumem_proto::lookup::LookupOutcome;

use crate::config_read;
use crate::http::Http;

/// The index of bundled ids, relative to the page.
const INDEX: &str = "models/index.txt";
/// Larger than any bundled file (the largest config.json is about 10 KB).
const MAX_FILE_BYTES: usize = 1 << 20;
/// Suggestions offered from the bundled set for one query.
const MAX_SUGGESTIONS: usize = 8;

/// One bundled model, as the index names it.
#[derive(Clone)]
pub struct Entry {
    /// The Hub id.
    pub id: String,
    /// The day its config.json was read, and where.
    pub read: String,
    /// Where it was read: a URL, or a repository and path.
    pub source: String,
}

thread_local! {
    /// The index, once read (an index that failed to load is asked for again).
    static INDEX_READ: RefCell<Option<Vec<Entry>>> = const { RefCell::new(None) };
}

/// `path` resolved against the page's own address.
fn url_of(path: &str) -> Option<String> {
    let base = web_sys::window()?.document()?.base_uri().ok()??;
    web_sys::Url::new_with_base(path, &base)
        .ok()
        .map(|u| u.href())
}

/// A client for the page's own origin (no token).
pub fn http() -> Http {
    let origin = web_sys::window()
        .and_then(|w| w.location().origin().ok())
        .unwrap_or_default();
    Http::new(&origin, None)
}

/// The bundled models (none when the page was built without them), read with `http`
/// the first time.
pub async fn index(http: &Http) -> Vec<Entry> {
    if let Some(entries) = INDEX_READ.with(|i| i.borrow().clone()) {
        return entries;
    }
    let Some(url) = url_of(INDEX) else {
        return Vec::new();
    };
    let Ok(answer) = http.get(&url, None, MAX_FILE_BYTES).await else {
        return Vec::new();
    };
    if answer.status != 200 || answer.truncated {
        return Vec::new();
    }
    let entries: Vec<Entry> = String::from_utf8_lossy(&answer.body)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some(Entry {
                id: f.next()?.trim().to_string(),
                read: f.next()?.to_string(),
                source: f.next()?.to_string(),
            })
        })
        .filter(|e| !e.id.is_empty())
        .collect();
    INDEX_READ.with(|i| *i.borrow_mut() = Some(entries.clone()));
    entries
}

/// The bundled ids containing `query` (ASCII case ignored), at most
/// [`MAX_SUGGESTIONS`], in catalogue order.
pub fn matching(entries: &[Entry], query: &str) -> Vec<String> {
    let q = query.trim().to_ascii_lowercase();
    if q.len() < 2 {
        return Vec::new();
    }
    entries
        .iter()
        .filter(|e| e.id.to_ascii_lowercase().contains(&q))
        .take(MAX_SUGGESTIONS)
        .map(|e| e.id.clone())
        .collect()
}

/// The bundled copy of `repo` (ASCII case ignored), as a lookup's outcome, when there
/// is one; `why` says why the Hub was not read.
pub async fn read(repo: &str, why: &str) -> Option<Result<LookupOutcome, String>> {
    let http = http();
    let entry = index(&http)
        .await
        .into_iter()
        .find(|e| e.id.eq_ignore_ascii_case(repo))?;
    let id = &entry.id;
    let url = url_of(&format!("models/{}.json", id.replace('/', "--")))?;
    let answer = match http.get(&url, None, MAX_FILE_BYTES).await {
        Ok(a) if a.status == 200 && !a.truncated => a,
        Ok(a) => {
            return Some(Err(format!(
                "{id}: the bundled copy answered HTTP {}",
                a.status
            )));
        }
        Err(e) => return Some(Err(e)),
    };
    let named = |what: &str| format!("{id}: the bundled config.json: {what}");
    let read = String::from_utf8(answer.body)
        .map_err(|_| named("not UTF-8 text"))
        .and_then(|text| parse_config(&text).map_err(|e| named(&e.to_string())))
        .map(|parsed| {
            let mut read = config_read(
                format!(
                    "{id} (the bundled config.json, read {} from {}; {why})",
                    entry.read, entry.source
                ),
                &parsed,
            );
            read.notes.push(
                "the weights are counted from the config: only the checkpoint's headers, on the Hub, give them exactly".into(),
            );
            LookupOutcome {
                config: Some(read),
                tensors: None,
                requests: http.requests(),
                round_trips: http.requests(),
                commit: None,
                mmproj: None,
            }
        });
    Some(read)
}
