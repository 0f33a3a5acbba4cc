//! gpumem-web: the dimensioner page, a thin Leptos (CSR) layer over
//! [`gpumem_core`].
//!
//! **Architecture Invariant:** no formula lives here. Raw input text goes through
//! [`gpumem_core::params::from_pairs`] and [`gpumem_core::estimate::estimate`] —
//! the same calls `gpumem-agent estimate` makes — so the page and the CLI print the
//! same bytes for the same keys (on the dimensioner, by the same call in the modules it
//! loads: the pairs' reading — the messages beside the fields — and inference's
//! estimate in the engine module, [`rules`], a training run's in the training module,
//! [`training`]).
//!
//! Shape of the app (after the Leptos examples): components in [`inputs`] and
//! [`results`]; derived values are `Memo`s over the input signals of
//! [`state::Form`]; I/O (URL, local storage, file reading, performance marks) runs
//! only in [`start`], in `Effect`s and in event handlers.

pub mod agent;
pub mod agent_panel;
pub mod compute;
pub mod diffusion;
pub mod engine_panel;
pub mod history_view;
pub mod inputs;
pub mod lookup;
pub mod query;
pub mod results;
pub mod rules;
pub mod run_state;
pub mod sheet;
pub mod state;
pub mod training;
pub mod workload;

use gpumem_proto::lookup::{TensorsRead, text};
use leptos::prelude::*;
use wasm_bindgen::prelude::*;

use crate::agent::{PairTarget, token_from_fragment};
use crate::agent_panel::Agent;
use crate::compute::{Computed, Estimator, Full, compute};
use crate::sheet::SheetForm;
use crate::state::{Form, Imported};

/// Local-storage key of the last query string.
const STORE_QUERY: &str = "gpumem.query";
/// Local-storage key of the last imported tensors (they cannot live in a URL), as
/// [`text::write_tensors`] writes them.
const STORE_IMPORTED: &str = "gpumem.imported";
/// The performance mark set once the first results are in the DOM.
pub const FIRST_RESULTS_MARK: &str = "gpumem-first-results";

fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok().flatten()
}

/// `performance.now()`, or 0 where there is no window (native tests).
pub fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// Reads the pairing token from the URL's fragment (`#token=…`, as `gpumem-agent serve`
/// prints it) and removes it from the address bar at once, so it is neither kept in
/// history nor shared with a copied link. The page is then served by the agent itself,
/// so the agent is at `location.host`.
fn take_pairing() -> Option<PairTarget> {
    let window = web_sys::window()?;
    let location = window.location();
    let hash = location.hash().ok()?;
    if hash.is_empty() {
        return None;
    }
    let token = token_from_fragment(&hash);
    let clean = format!(
        "{}{}",
        location.pathname().unwrap_or_default(),
        location.search().unwrap_or_default()
    );
    if let Ok(h) = window.history() {
        let _ = h.replace_state_with_url(&JsValue::NULL, "", Some(&clean));
    }
    Some(PairTarget {
        host: location.host().ok()?,
        token: token?,
    })
}

/// The stored state: the last query string (else the defaults) and the imported
/// tensors (a stored text that does not read is dropped: an import is redone).
fn stored_state() -> (Vec<(String, String)>, Option<Imported>) {
    let pairs = storage()
        .and_then(|s| s.get_item(STORE_QUERY).ok().flatten())
        .filter(|q| !q.is_empty())
        .map(|q| query::parse(&q))
        .unwrap_or_else(state::default_pairs);
    let imported: Option<Imported> = storage()
        .and_then(|s| s.get_item(STORE_IMPORTED).ok().flatten())
        .and_then(|t| text::read_tensors(&t).ok())
        .map(|t| Imported {
            files: t.files,
            summary: t.summary,
        });
    (pairs, imported)
}

/// Reads the starting state (the URL's query, else local storage, else the
/// defaults) and mounts the dimensioner. The only place that reads the outside world
/// before the first render.
pub fn start() {
    let search = web_sys::window()
        .and_then(|w| w.location().search().ok())
        .unwrap_or_default();
    let (stored, imported) = stored_state();
    // A link's keys merge over the default model: `?context=8192` keeps Llama 3.1 8B.
    let pairs = if search.trim_start_matches('?').is_empty() {
        stored
    } else {
        state::over_defaults(query::parse(&search))
    };
    leptos::mount::mount_to_body(move || view! { <App pairs imported/> });
}

/// Mounts the agent & sheet page (`/agent/`): the pairing target comes from the URL's
/// fragment (forwarded by the dimensioner's `index.html`), the estimator state from
/// the local storage the dimensioner writes — and changes made here (a reserve, an
/// imported sheet) go back there, so the dimensioner shows them.
pub fn start_agent() {
    let pair = take_pairing();
    let (pairs, imported) = stored_state();
    leptos::mount::mount_to_body(move || view! { <AgentApp pairs imported pair/> });
}

/// The form and its computed estimate, provided as context; local storage (and, on
/// the dimensioner, the URL) follows the state.
fn provide_state(
    pairs: &[(String, String)],
    imported: Option<Imported>,
    in_url: bool,
    estimator: impl Estimator + Send + Sync + 'static,
) -> Memo<Computed> {
    let form = Form::new(pairs, imported);
    provide_context(form.clone());
    let cli = {
        let form = form.clone();
        Memo::new(move |_| form.cli_pairs())
    };
    let page = {
        let form = form.clone();
        Memo::new(move |_| form.page_pairs())
    };
    let computed: Memo<Computed> = {
        let form = form.clone();
        Memo::new(move |_| {
            let imported = form.imported.get();
            cli.with(|c| {
                page.with(|p| {
                    let tensors = imported.as_ref().map(|i| &i.summary);
                    compute(c, p, tensors, &now_ms, &estimator)
                })
            })
        })
    };
    provide_context(computed);

    // URL and local storage follow the state (replaceState: no history spam).
    let query = Memo::new(move |_| {
        let c = cli.get();
        let p = page.get();
        query::build(c.iter().chain(p.iter()).map(|(k, v)| (*k, v.as_str())))
    });
    Effect::new(move |_| {
        let q = query.get();
        if in_url && let Some(h) = web_sys::window().and_then(|w| w.history().ok()) {
            let _ = h.replace_state_with_url(&JsValue::NULL, "", Some(&format!("?{q}")));
        }
        if let Some(s) = storage() {
            let _ = s.set_item(STORE_QUERY, &q);
        }
    });
    Effect::new(move |_| {
        let imported = form.imported.get();
        form.sig("tensors").set(
            imported
                .as_ref()
                .map(|i| i.summary.total.bytes.to_string())
                .unwrap_or_default(),
        );
        if let Some(s) = storage() {
            let _ = match imported {
                Some(i) => s.set_item(
                    STORE_IMPORTED,
                    &text::write_tensors(&TensorsRead {
                        files: i.files,
                        summary: i.summary,
                    }),
                ),
                None => s.remove_item(STORE_IMPORTED),
            };
        }
    });
    computed
}

/// Drops the query from the address bar before leaving for the agent page, so that
/// coming back (the browser's Back button included) reads local storage, where the
/// agent page writes what it changes (a reserve, an imported sheet).
fn forget_query() {
    if let Some(w) = web_sys::window()
        && let Ok(h) = w.history()
    {
        let path = w.location().pathname().unwrap_or_default();
        let _ = h.replace_state_with_url(&JsValue::NULL, "", Some(&path));
    }
}

/// The dimensioner.
#[component]
pub fn App(
    /// The starting `key=value` pairs (from the URL, local storage or defaults).
    pairs: Vec<(String, String)>,
    /// Tensors imported in an earlier visit.
    imported: Option<Imported>,
) -> impl IntoView {
    let unknown: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| !crate::state::url_keys().any(|u| u == k))
        .map(|(k, _)| k.clone())
        .collect();
    // The estimator and the engine rules load beside the first screen (a module of
    // their own, which estimates inference); the training estimator when a training
    // run is first asked about (another).
    let rules = rules::Rules::load();
    provide_context(rules);
    let training = training::Training::new(rules);
    provide_context(training);
    let computed = provide_state(&pairs, imported, true, training);
    // Mark the first render of results (the first workload's figures, or why it has
    // none; not the note that its estimator is loading), for the first-render budget.
    Effect::new(move |marked: Option<bool>| {
        let shown = computed.with(|c| {
            c.workloads.first().is_some_and(|w| match &w.result {
                Ok(_) => true,
                Err(e) => !training::is_loading(e),
            })
        });
        if marked == Some(true) || !shown {
            return marked == Some(true);
        }
        if let Some(p) = web_sys::window().and_then(|w| w.performance()) {
            let _ = p.mark(FIRST_RESULTS_MARK);
        }
        true
    });

    view! {
        <header class="top">
            <div class="brand">
                <h1>"gpumem " <span class="sub">"dimensioner"</span></h1>
                <p class="tagline">
                    "Will this workload fit in GPU memory — and on which card? "
                    "Exact bytes, what is computed and what is assumed, per device."
                </p>
            </div>
            <p class="privacy">"Runs entirely in your browser. The only requests that leave this page are a model lookup you ask for (to the Hub named above: config.json, the file list and the weight files' headers) and a gpumem agent you pair it with."</p>
            <p class="nav">
                <a href="agent/" class="nav-link" data-testid="to-agent-page" on:click=move |_| forget_query()>
                    "Agent & sheet →"
                </a>
            </p>
        </header>
        {(!unknown.is_empty()).then(|| view! {
            <p class="banner warn" role="status">
                "Ignored unknown keys in the link: " {unknown.join(", ")}
            </p>
        })}
        <main class="layout">
            <inputs::InputsPanel/>
            <results::ResultsPanel/>
        </main>
        <diffusion::DiffusionPanel/>
        <footer class="foot">
            <p>
                "Keys in the address bar are the flags of "
                <code>"gpumem-agent estimate"</code>
                " without their dashes, so a link and a command line describe the same estimate. "
                "GB = 10⁹ bytes, GiB = 2³⁰ bytes."
            </p>
        </footer>
    }
}

/// The agent & sheet page: pairing, measuring and the sheet, over the dimensioner's
/// stored state.
#[component]
pub fn AgentApp(
    /// The dimensioner's stored `key=value` pairs (or the defaults).
    pairs: Vec<(String, String)>,
    /// Its imported tensors, if any.
    imported: Option<Imported>,
    /// The agent to pair with at once (from the pairing URL), if any.
    pair: Option<PairTarget>,
) -> impl IntoView {
    provide_state(&pairs, imported, false, Full);
    provide_context(Agent::new(pair));
    provide_context(SheetForm::new());
    view! {
        <header class="top">
            <div class="brand">
                <h1>"gpumem " <span class="sub">"agent & sheet"</span></h1>
                <p class="tagline">
                    "Pair with a gpumem agent, measure or replay, and keep the decision in a sheet. "
                    "The estimate is the dimensioner's, as you left it."
                </p>
            </div>
            <p class="nav">
                <a href="../" class="nav-link" data-testid="to-dimensioner">"← Dimensioner"</a>
            </p>
        </header>
        <div class="wide">
            <agent_panel::AgentPanel/>
            <sheet::SheetPanel/>
        </div>
    }
}
