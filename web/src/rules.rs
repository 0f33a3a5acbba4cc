//! The estimator and the serving engines' rules, in a module of their own
//! (`web/engine`, crate `gpumem-engine`) that the page loads once its first screen is
//! up, as it loads its readers: the dimensioner's wasm carries no estimate (its first
//! screen is the inputs; the figures follow once the module is there) and none of
//! vLLM's, SGLang's, TGI's, llama.cpp's or transformers' rules. Once loaded, the
//! module's functions are called synchronously, so the estimates, the answer and the
//! engine section are plain derived values (`Memo`s) like every other figure; until
//! then they say they are loading. What crosses is text ([`gpumem_proto::rules`],
//! [`gpumem_proto::training`]'s estimate document).

use std::cell::RefCell;

use gpumem_core::import::TensorSummary;
use gpumem_proto::lookup::TensorsRead;
use gpumem_proto::rules::{self, Reading, RulesRequest};
use js_sys::{Function, Reflect};
use leptos::prelude::*;
use wasm_bindgen::prelude::*;

/// Where the build put the engine module (`scripts/build-web.sh` passes its
/// content-hashed path); the fallback serves builds without it (native checks).
pub const ENGINE_JS: &str = match option_env!("GPUMEM_ENGINE_JS") {
    Some(url) => url,
    None => "/engine/gpumem_engine.js",
};

#[wasm_bindgen(module = "/src/lazy.js")]
extern "C" {
    #[wasm_bindgen(catch)]
    async fn load_engine(url: &str) -> Result<JsValue, JsValue>;
}

/// The request for one workload (its `pairs`), the page's engine and card keys
/// (`page`) and the imported `tensors`.
pub fn request(
    pairs: &[(&'static str, String)],
    page: &[(&'static str, String)],
    tensors: Option<&TensorSummary>,
) -> RulesRequest {
    let own =
        |v: &[(&'static str, String)]| v.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    RulesRequest {
        pairs: own(pairs),
        page: own(page),
        tensors: tensors.map(|t| TensorsRead {
            files: Vec::new(),
            summary: t.clone(),
        }),
    }
}

/// Calls `name(request)` of a loaded module (`what` names it in errors): its text, or
/// why there is none.
pub(crate) fn call_in(
    module: Option<&JsValue>,
    name: &str,
    request: &RulesRequest,
    what: &str,
) -> Result<String, String> {
    let f: Function = module
        .and_then(|m| Reflect::get(m, &name.into()).ok())
        .and_then(|f| f.dyn_into().ok())
        .ok_or_else(|| format!("the {what} module is not the one this page was built with"))?;
    f.call1(
        &JsValue::NULL,
        &JsValue::from(rules::write_request(request)),
    )
    .ok()
    .and_then(|v| v.as_string())
    .ok_or_else(|| format!("the {what} module failed"))
}

thread_local! {
    /// The loaded module.
    static MODULE: RefCell<Option<JsValue>> = const { RefCell::new(None) };
}

/// What the page says of an estimate while the module loads (the answer shows "…"
/// for a reason ending so).
pub const LOADING: &str = "loading the estimator…";

/// Calls the loaded module's `estimate` with `request` outside the page's reactive
/// graph (the budget script's benchmark hook): its estimate document, or why there is
/// none (not loaded yet).
pub fn estimate_now(request: &RulesRequest) -> Result<String, String> {
    MODULE.with(|m| call_in(m.borrow().as_ref(), "estimate", request, "engine"))
}

/// Whether the engine module is there: `None` while it loads, `Some(Err)` when it
/// could not be loaded (offline: a reload tries again).
#[derive(Clone, Copy)]
pub struct Rules(RwSignal<Option<Result<(), String>>>);

impl Rules {
    /// Starts loading the module; the page's components find the value in context.
    pub fn load() -> Rules {
        let state = RwSignal::new(None);
        leptos::task::spawn_local(async move {
            let loaded = load_engine(ENGINE_JS).await.map(|m| {
                MODULE.with(|slot| *slot.borrow_mut() = Some(m));
            });
            state.set(Some(loaded.map_err(|e| {
                e.as_string()
                    .unwrap_or_else(|| "the engine rules did not load".into())
            })));
        });
        Rules(state)
    }

    /// Calls `name(request)` of the module: its text, or why there is none. Tracks
    /// the loading, so a value derived from it is computed again once loaded.
    fn call(self, name: &str, request: &RulesRequest) -> Result<String, String> {
        match self.0.get() {
            None => return Err("the engine rules are loading…".into()),
            Some(Err(e)) => return Err(format!("the engine rules did not load: {e}")),
            Some(Ok(())) => {}
        }
        MODULE.with(|m| call_in(m.borrow().as_ref(), name, request, "engine"))
    }

    /// One workload's estimate document (its `pairs`, a refused pair at its default, the
    /// page's engine keys among `page`, and the imported `tensors`;
    /// [`gpumem_proto::training`]'s: the estimate or why there is none), or why the
    /// module cannot say yet ([`LOADING`] while it loads).
    pub fn estimate_text(
        self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
        tensors: Option<&TensorSummary>,
    ) -> Result<String, String> {
        if self.0.get().is_none() {
            return Err(LOADING.into());
        }
        self.call("estimate", &request(pairs, page, tensors))
    }

    /// How the module reads one workload's `pairs` and the page's engine keys (`page`):
    /// the fields' messages, the engine's routing, the preset the shape is; or why it
    /// cannot say (loading, or not loaded).
    pub fn read(
        self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
    ) -> Result<Reading, String> {
        rules::read_reading(&self.call("read", &request(pairs, page, None))?)
    }

    /// The answer's first line for one workload (its inputs in words, naming `model`).
    pub fn line(
        self,
        pairs: &[(&'static str, String)],
        tensors: Option<&TensorSummary>,
        model: Option<&str>,
    ) -> String {
        let page: Vec<(&'static str, String)> = model
            .map(|m| ("model", m.to_string()))
            .into_iter()
            .collect();
        self.call("line", &request(pairs, &page, tensors))
            .unwrap_or_default()
    }

    /// The answer document for one workload ([`gpumem_proto::rules`]'s: the headline
    /// under the page's engine, and each device's row over several cards, or the
    /// estimate's without one; or why there is none), which the module draws
    /// ([`Rules::draw`]).
    pub fn answer(self, request: &RulesRequest) -> Result<String, String> {
        self.call("answer", request)
    }

    /// The markup the module draws with `name` (`answer_view`, `card_view`,
    /// `breakdown_view`, `panel_view`, `sweep_view`: the results' figures, web/engine's
    /// view; `command_view`: the command line, in words) for `request`, or why it
    /// cannot (loading, or not loaded).
    pub fn draw(self, name: &str, request: &RulesRequest) -> Result<String, String> {
        self.call(name, request)
    }
}
