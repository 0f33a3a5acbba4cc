//! The training estimator, in a module of its own (`web/training`, crate
//! `gpumem-training`) that the page loads when a training run is first asked about, as
//! it loads its engine rules and readers: the dimensioner's wasm carries no estimate
//! (inference is estimated by the engine module, [`crate::rules`], loaded once the
//! first screen is up) and none of the training stages (the training state, the
//! ranks' plan, the caching allocator's model). A page that only ever asks about
//! inference never fetches this module.
//!
//! Once loaded, the module's functions are called synchronously, so a training run's
//! estimate and answer are plain derived values (`Memo`s) like every other figure;
//! until then they say they are loading (never a figure without the training state).
//! What crosses is text ([`gpumem_proto::training`], [`gpumem_proto::rules`]).

use std::cell::{Cell, RefCell};

use gpumem_core::EstimateError;
use gpumem_core::estimate::Estimate;
use gpumem_core::import::TensorSummary;
use gpumem_proto::rules::Reading;
use gpumem_proto::training::read_figures;
use leptos::prelude::*;
use wasm_bindgen::prelude::*;

use crate::rules::{Rules, call_in, request};

/// Where the build put the training module (`scripts/build-web.sh` passes its
/// content-hashed path); the fallback serves builds without it (native checks).
pub const TRAINING_JS: &str = match option_env!("GPUMEM_TRAINING_JS") {
    Some(url) => url,
    None => "/training/gpumem_training.js",
};

/// What the page says of a training run while its module loads (the answer shows
/// "…" for a reason ending so).
pub const LOADING: &str = "loading the training estimator…";

#[wasm_bindgen(module = "/src/lazy.js")]
extern "C" {
    #[wasm_bindgen(catch)]
    async fn load_training(url: &str) -> Result<JsValue, JsValue>;
}

thread_local! {
    /// The loaded module.
    static MODULE: RefCell<Option<JsValue>> = const { RefCell::new(None) };
    /// Whether its loading has started.
    static STARTED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the training module is there: `None` until it is loaded, `Some(Err)` when
/// it could not be (offline: a reload tries again). Its loading starts at the first
/// training run asked about. With the engine module (`Rules`: inference's estimate and
/// answer), the dimensioner's estimator.
#[derive(Clone, Copy)]
pub struct Training(RwSignal<Option<Result<(), String>>>, Rules);

impl Training {
    /// The page's handle; nothing loads until a training run is asked about. `rules`
    /// estimates inference.
    pub fn new(rules: Rules) -> Training {
        Training(RwSignal::new(None), rules)
    }

    /// The engine module, which estimates and answers inference.
    pub fn rules(self) -> Rules {
        self.1
    }

    /// A workload's estimate document (a training run's by the training module,
    /// inference's by the engine module: [`gpumem_proto::training`]'s, the estimate or
    /// why there is none), with what the page's engine keys (`page`) decide of it as
    /// `estimate --engine --card` decides it, or why the module cannot say yet.
    pub fn estimate_text(
        self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
        tensors: Option<&TensorSummary>,
    ) -> Result<String, String> {
        if trains(pairs) {
            self.call("estimate", pairs, page, tensors)
        } else {
            self.1.estimate_text(pairs, page, tensors)
        }
    }

    /// [`Training::estimate_text`], read for its figures (`read_figures`: its lines and
    /// words are the engine module's to draw): the estimate or why there is none, or
    /// why the module cannot say yet.
    pub fn estimate_any(
        self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
        tensors: Option<&TensorSummary>,
    ) -> Result<Result<Estimate, EstimateError>, String> {
        read_figures(&self.estimate_text(pairs, page, tensors)?)
    }

    /// Starts loading the module if it has not started.
    fn start(self) {
        if STARTED.with(|s| s.replace(true)) {
            return;
        }
        let state = self.0;
        leptos::task::spawn_local(async move {
            let loaded = load_training(TRAINING_JS).await.map(|m| {
                MODULE.with(|slot| *slot.borrow_mut() = Some(m));
            });
            state.set(Some(loaded.map_err(|e| {
                e.as_string()
                    .unwrap_or_else(|| "the training estimator did not load".into())
            })));
        });
    }

    /// Calls `name` of the module with one workload: its text, or why there is none
    /// (loading, or not loaded). Tracks the loading, so a value derived from it is
    /// computed again once loaded.
    fn call(
        self,
        name: &str,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
        tensors: Option<&TensorSummary>,
    ) -> Result<String, String> {
        self.start();
        match self.0.get() {
            None => return Err(LOADING.into()),
            Some(Err(e)) => return Err(format!("the training estimator did not load: {e}")),
            Some(Ok(())) => {}
        }
        let r = request(pairs, page, tensors);
        MODULE.with(|m| call_in(m.borrow().as_ref(), name, &r, "training"))
    }

    /// A training run's answer document on the page's card (`page`), without an engine
    /// (the engine module draws it).
    pub fn answer(
        self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
        tensors: Option<&TensorSummary>,
    ) -> Result<String, String> {
        self.call("answer", pairs, page, tensors)
    }
}

/// Whether `pairs` ask about a training run: their `train` key is one the core reads as
/// training (`full`, `lora`, `qlora`; any other value is refused there and reads as
/// inference).
pub fn trains(pairs: &[(&'static str, String)]) -> bool {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| *k == "train")
        .is_some_and(|(_, v)| matches!(v.trim(), "full" | "lora" | "qlora"))
}

/// Who reads and estimates a workload given as `pairs` (with the imported `tensors`):
/// [`Training`] on the dimensioner (the engine module reads the pairs, the engine or
/// training module estimates), [`crate::compute::Full`] (the core's parser and every
/// stage here) on the agent page.
pub trait Estimator {
    /// How `pairs` and the page's engine keys (`page`) read: each refused pair's
    /// message and the engine's routing; `None` while the reader is not there.
    fn read(
        &self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
    ) -> Option<Reading>;

    /// The estimate of `pairs` (a refused pair at its default), with what the page's
    /// engine keys (`page`) decide of it, or why there is none, with the document it
    /// was read from (empty where it was estimated here).
    fn estimate(
        &self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
        tensors: Option<&TensorSummary>,
    ) -> (Result<Estimate, EstimateError>, String);
}

impl Estimator for Training {
    /// By the engine module (while it loads: `None`, so no message yet).
    fn read(
        &self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
    ) -> Option<Reading> {
        self.1.read(pairs, page).ok()
    }

    /// Inference by the engine module, a training run by the training module (while
    /// either loads: [`pending`], with [`LOADING`] or [`crate::rules::LOADING`] as its
    /// reason), with the module's document (which the engine module draws).
    fn estimate(
        &self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
        tensors: Option<&TensorSummary>,
    ) -> (Result<Estimate, EstimateError>, String) {
        match self.estimate_text(pairs, page, tensors) {
            Ok(doc) => (
                read_figures(&doc).unwrap_or_else(|why| Err(pending(why))),
                doc,
            ),
            Err(why) => (Err(pending(why)), String::new()),
        }
    }
}

/// The error's format when an estimate is not there yet ([`pending`]).
const PENDING: &str = "estimate";

/// Why a workload has no estimate yet (its module loading, or not loaded), as an error
/// the page shows in place of one (never beside a field: it is no input's fault).
pub fn pending(why: String) -> EstimateError {
    EstimateError::Parse {
        format: PENDING,
        reason: why,
    }
}

/// Whether `e` says an estimate is not there yet because its module is loading (the
/// page shows no figures, rather than dashes, until it is).
pub fn is_loading(e: &EstimateError) -> bool {
    matches!(e, EstimateError::Parse { format, reason } if *format == PENDING && reason.ends_with('…'))
}
