//! gpumem-lookup: the readers the dimensioner loads only when they are needed — model
//! files dropped in the browser ([`files`]) and a model looked up on the Hugging Face Hub
//! by its id ([`hub`]), both reading headers only, or in the bundled catalogue beside
//! the page when the Hub cannot be reached ([`bundled`]).
//!
//! Built as a wasm-bindgen module of its own (`scripts/build-web.sh` → `dist/lookup-*/`)
//! and imported by the page on the first import or lookup, so the dimensioner's wasm
//! carries none of the config, safetensors, GGUF or HTTP code. Parsing is the core's
//! ([`gpumem_core::import`]); this crate only fetches the bytes the core asks for, and
//! answers with a [`gpumem_proto::lookup::LookupOutcome`] as text
//! ([`gpumem_proto::lookup::text`]: the dimensioner carries no JSON reader).
//!
//! Its feature `exports` (on by default) makes those functions the module's exports;
//! the diffusion module (`web/diffusion`) links this crate without it, for its HTTP
//! client and its pipeline reader ([`pipeline`]), and exports only its own.

pub mod bundled;
pub mod files;
pub mod http;
pub mod hub;
pub mod pipeline;

use gpumem_core::import::config::ImportedConfig;
use gpumem_core::import::gguf::GgufHeader;
use gpumem_proto::lookup::{ConfigRead, LookupOutcome, text};
use wasm_bindgen::prelude::*;

/// The Hub the page talks to when the page names none.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Reads dropped or picked files (a `config.json`, the `.safetensors` shards of one
/// checkpoint, or `.gguf` files): a [`LookupOutcome`] as text, or an error in words.
#[cfg_attr(feature = "exports", wasm_bindgen)]
pub async fn read_files(files: js_sys::Array) -> Result<String, JsValue> {
    let files: Vec<web_sys::File> = files.iter().filter_map(|f| f.dyn_into().ok()).collect();
    let outcome = files::read_files(files).await.map_err(JsValue::from)?;
    answer(&outcome)
}

/// Looks a model up on the Hub the page names (its `gpumem-hub` meta tag, else
/// [`DEFAULT_ENDPOINT`]). `request` is a [`gpumem_proto::lookup::LookupRequest`] as
/// text; `progress` is called with a line of text as the reads go on. A
/// [`LookupOutcome`] as text, or an error in words.
#[cfg_attr(feature = "exports", wasm_bindgen)]
pub async fn lookup(request: String, progress: js_sys::Function) -> Result<String, JsValue> {
    let request = text::read_request(&request)
        .map_err(|e| JsValue::from(format!("bad lookup request: {e}")))?;
    let endpoint = hub_endpoint();
    http::begin();
    let say = move |text: &str| {
        let _ = progress.call1(&JsValue::NULL, &JsValue::from(text));
    };
    let outcome = hub::lookup(&endpoint, &request, &say)
        .await
        .map_err(JsValue::from)?;
    answer(&outcome)
}

/// Cancels the lookup under way: its requests are aborted and it fails with "the
/// lookup was cancelled".
#[cfg_attr(feature = "exports", wasm_bindgen)]
pub fn cancel() {
    http::cancel();
}

thread_local! {
    /// The latest suggestion request: an older one still waiting gives way.
    static TYPED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Fills the page's `<datalist id="model-suggestions">` with the model ids matching
/// `query` on the page's Hub (most downloaded first), once the typing has paused for
/// [`hub::SUGGEST_PAUSE_MS`]; a newer call supersedes a waiting one. Answers how many
/// ids were offered (as text), or an error in words.
#[cfg_attr(feature = "exports", wasm_bindgen)]
pub async fn suggest(query: String) -> Result<String, JsValue> {
    let mine = TYPED.with(|t| {
        let n = t.get().wrapping_add(1);
        t.set(n);
        n
    });
    let current = || TYPED.with(|t| t.get()) == mine;
    // What was offered answered an earlier text: it goes at once, so no suggestion
    // ever stands beside a text it does not match.
    offer(&[])?;
    http::sleep_ms(hub::SUGGEST_PAUSE_MS).await;
    if !current() {
        return Ok(String::new());
    }
    // The bundled models first (they answer offline too), then the Hub's, each once;
    // a failed search still offers the bundled ones.
    let mut ids = bundled::matching(&bundled::index(&bundled::http()).await, &query);
    match hub::search(&hub_endpoint(), &query).await {
        Ok(found) => {
            for id in found {
                if !ids.iter().any(|i| i.eq_ignore_ascii_case(&id)) {
                    ids.push(id);
                }
            }
        }
        Err(e) if ids.is_empty() => return Err(JsValue::from(e)),
        Err(_) => {}
    }
    if !current() {
        return Ok(String::new());
    }
    offer(&ids)?;
    Ok(ids.len().to_string())
}

/// Puts `ids`, and only those, in the page's `<datalist id="model-suggestions">`.
fn offer(ids: &[String]) -> Result<(), JsValue> {
    let document = web_sys::window()
        .and_then(|w| w.document())
        .ok_or("no document")?;
    let list = document
        .get_element_by_id("model-suggestions")
        .ok_or("no suggestion list on this page")?;
    list.set_text_content(None);
    for id in ids {
        let option = document.create_element("option")?;
        option.set_attribute("value", id)?;
        list.append_child(&option)?;
    }
    Ok(())
}

/// The Hub endpoint of this page: `<meta name="gpumem-hub" content="…">`, which the
/// build (a mirror) or `gpumem-agent serve` (its `HF_ENDPOINT`) sets together with the
/// Content-Security-Policy that allows it.
pub fn hub_endpoint() -> String {
    web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.query_selector("meta[name=\"gpumem-hub\"]").ok().flatten())
        .and_then(|m| m.get_attribute("content"))
        .map(|c| c.trim().trim_end_matches('/').to_string())
        .filter(|c| c.starts_with("https://") || c.starts_with("http://"))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
}

/// The shape a config gave, as the page applies it.
pub fn config_read(name: String, c: &ImportedConfig) -> ConfigRead {
    ConfigRead {
        name,
        model_type: c.model_type.clone(),
        pairs: c
            .pairs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        notes: c.notes.clone(),
        warnings: c.warnings.clone(),
        confidence: c.confidence.clone(),
    }
}

/// The KV cache's shape a GGUF header's metadata gives, as the page applies it, when
/// no config.json was read (the weights are the header's tensors), as
/// `estimate --gguf` does.
pub fn gguf_read(name: &str, h: &GgufHeader) -> Option<ConfigRead> {
    let shape = h.shape()?;
    let mut notes = shape.notes;
    if let Some(v) = shape.vocab {
        notes.push(format!("vocabulary {v} tokens"));
    }
    Some(ConfigRead {
        name: format!("{name}'s GGUF header"),
        model_type: h.architecture.clone().unwrap_or_default(),
        pairs: shape
            .pairs
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        notes,
        warnings: shape.warnings,
        confidence: "the KV cache's shape from the header; the weights are its tensors".into(),
    })
}

fn answer(outcome: &LookupOutcome) -> Result<String, JsValue> {
    Ok(text::write_outcome(outcome))
}

/// A JavaScript error's message, or `fallback`.
pub fn js_message(e: &JsValue, fallback: &str) -> String {
    e.as_string()
        .or_else(|| {
            js_sys::Reflect::get(e, &"message".into())
                .ok()
                .and_then(|m| m.as_string())
        })
        .unwrap_or_else(|| fallback.to_string())
}
