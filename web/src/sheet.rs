//! The sheet panel (method §12): the page assembles one `gpumem.sheet/v1`
//! document from what it computed, what the agent observed and what is still assumed,
//! offers it as a download, and reads one back to restore the page.
//!
//! [`assemble`] and [`restore_pairs`] are plain functions over the page's state; the
//! panel only adds the file I/O (a Blob download, a file input) in event handlers.

use std::collections::BTreeMap;

use gpumem_core::catalogue::{CATALOGUE, GpuCard};
use gpumem_core::estimate::{Estimate, Kind as LineKind};
use gpumem_core::params::parse_count;
use gpumem_core::units::group_digits;
use gpumem_proto::sheet::{
    AssumedValue, Assumption, Computed as SheetComputed, ComputedEstimate, Decision, Identity,
    MaximumLoad, ObservationSource, ObservationsProvenance, Observed, ObservedRun, Provenance,
    SHEET_SCHEMA, Sheet, SheetImport, Workload, WorkloadKey, WorkloadMode, Workloads,
};
use gpumem_proto::wire::PROTOCOL_VERSION;
use leptos::prelude::*;
use serde_json::{Map, Value};
use wasm_bindgen::{JsCast, JsValue};
use web_sys::HtmlInputElement;

use crate::agent::{Link, RunRecord, RunState};
use crate::agent_panel::Agent;
use crate::compute::{Computed, DIMS, WORKLOADS, dim_key};
use crate::state::Form;

const KEYS: [WorkloadKey; 3] = [
    WorkloadKey::Typical,
    WorkloadKey::Long,
    WorkloadKey::NearLimit,
];

/// What the user types into the sheet itself (identity and decision).
#[derive(Clone, Copy)]
pub struct SheetForm {
    /// Model or code under study.
    pub model: RwSignal<String>,
    /// Its revision.
    pub revision: RwSignal<String>,
    /// The input set the workloads come from.
    pub input_set: RwSignal<String>,
    /// The trial's random seed.
    pub seed: RwSignal<String>,
    /// The chosen card's catalogue id ("" while undecided).
    pub card: RwSignal<String>,
    /// Devices and split, in words.
    pub configuration: RwSignal<String>,
    /// Why.
    pub reason: RwSignal<String>,
    /// The environment of an imported sheet, kept unchanged for the next download.
    pub imported_environment: RwSignal<Option<Value>>,
}

impl SheetForm {
    /// Empty fields.
    pub fn new() -> SheetForm {
        SheetForm {
            model: RwSignal::new(String::new()),
            revision: RwSignal::new(String::new()),
            input_set: RwSignal::new(String::new()),
            seed: RwSignal::new(String::new()),
            card: RwSignal::new(String::new()),
            configuration: RwSignal::new(String::new()),
            reason: RwSignal::new(String::new()),
            imported_environment: RwSignal::new(None),
        }
    }
}

impl Default for SheetForm {
    fn default() -> Self {
        SheetForm::new()
    }
}

/// The identity and decision as typed, read once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Typed {
    /// See [`SheetForm`].
    pub model: String,
    /// See [`SheetForm`].
    pub revision: String,
    /// See [`SheetForm`].
    pub input_set: String,
    /// See [`SheetForm`].
    pub seed: String,
    /// See [`SheetForm`].
    pub card: String,
    /// See [`SheetForm`].
    pub configuration: String,
    /// See [`SheetForm`].
    pub reason: String,
}

fn opt(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

fn find_card(text: &str) -> Option<&'static GpuCard> {
    let t = text.trim();
    CATALOGUE
        .iter()
        .find(|c| c.id == t || c.name == t || format!("{} ({})", c.name, c.label) == t)
}

fn value_of<'a>(pairs: &'a [(&'static str, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.as_str())
}

/// One workload's dimensions for the sheet.
fn workload(title: &str, pairs: &[(&'static str, String)]) -> Result<Workload, String> {
    let count = |key: &'static str, default: u64| -> Result<u64, String> {
        value_of(pairs, key).map_or(Ok(default), |v| {
            parse_count(key, v).map_err(|e| format!("{title}: {e}"))
        })
    };
    let prompt = count("context", 0)?;
    let generated = count("generate", 0)?;
    let train = value_of(pairs, "train").is_some_and(|t| !t.is_empty());
    Ok(Workload {
        label: title.to_owned(),
        batch: count("sequences", 1)?,
        context_tokens: prompt.saturating_add(generated),
        mode: if train {
            WorkloadMode::Training
        } else {
            WorkloadMode::Inference
        },
        note: Some(format!(
            "{prompt} prompt tokens + {generated} generated per sequence"
        )),
    })
}

/// A line input like `"4096"` or `"4 GiB"` as a number and its unit; words are not
/// numbers and stay in the statement.
fn number_and_unit(text: &str) -> Option<(f64, String)> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e'))
        .unwrap_or(t.len());
    let value: f64 = t[..split].trim().parse().ok()?;
    value
        .is_finite()
        .then(|| (value, t[split..].trim().to_owned()))
}

/// Each assumed line of an estimate, in words and numbers.
fn assumptions_of(e: &Estimate, prefix: &str, out: &mut Vec<Assumption>) {
    for l in e.lines.iter().filter(|l| l.kind == LineKind::Assumed) {
        let key = format!("{prefix}{}", l.key);
        if prefix.is_empty()
            || !out
                .iter()
                .any(|a| a.key == l.key.as_str() && a.bytes == Some(l.bytes))
        {
            out.push(Assumption {
                key,
                statement: format!(
                    "{}: {} — assumed; only a measurement on your workload settles it.",
                    l.label, l.formula
                ),
                values: l
                    .inputs
                    .iter()
                    .filter_map(|(name, v)| {
                        number_and_unit(v).map(|(value, unit)| AssumedValue {
                            name: name.to_string(),
                            value,
                            unit,
                        })
                    })
                    .collect(),
                bytes: Some(l.bytes),
            });
        }
    }
}

/// Largest sheet file imported, like the cap on `config.json`: a real sheet holds a
/// few runs of a few dozen phases with their raw results (tens of KB each); 16 MiB is
/// hundreds of runs, and still lets a 20 000-phase sheet (about 12 MB) in, whose
/// drawing is bounded separately (`agent_panel::MAX_PHASES_SHOWN`).
pub const MAX_SHEET_BYTES: u64 = 16 * 1024 * 1024;

/// The refusal of a file over [`MAX_SHEET_BYTES`], in words.
fn too_large(name: &str, size: f64) -> String {
    // A browser's File.size is an integer number of bytes (below 2^53).
    let size = if size.is_finite() && size >= 0.0 {
        group_digits(size as u64)
    } else {
        "?".into()
    };
    format!(
        "Not imported: {name} is {size} bytes, larger than the {} bytes (16 MiB) a sheet may be. \
         Nothing was read.",
        group_digits(MAX_SHEET_BYTES)
    )
}

/// The largest load the agent ran, and whether it passed (method §11).
fn maximum_load(runs: &[ObservedRun]) -> Option<MaximumLoad> {
    let (index, run) = runs.iter().enumerate().max_by_key(|(_, r)| {
        let q = r.request;
        // Saturating: four u64 dimensions of a hostile sheet overflow even u128.
        u128::from(q.batch)
            .saturating_mul(u128::from(q.context))
            .saturating_mul(u128::from(q.width))
            .saturating_mul(u128::from(q.layers))
    })?;
    let q = run.request;
    let failed = run
        .phases
        .iter()
        .any(|p| p.status == gpumem_proto::results::Status::Failed);
    let passed = if run.raw.is_some() {
        Some(run.ok)
    } else if failed {
        Some(false)
    } else {
        None
    };
    let verdict = match passed {
        Some(true) => "passed",
        Some(false) => "failed",
        None => "not run to completion",
    };
    Some(MaximumLoad {
        statement: format!(
            "The agent's built-in network at batch {} × context {} × width {}, {} layers, {}: \
             {verdict} ({}). It checks the method on this GPU, not your model; one \
             passing input does not validate the maximum load.",
            q.batch,
            q.context,
            q.width,
            q.layers,
            q.dtype,
            match run.source {
                gpumem_proto::sheet::ObservationSource::Live => "live",
                gpumem_proto::sheet::ObservationSource::Replay => "replay of a saved file",
            }
        ),
        workload: run.workload,
        dimensions: BTreeMap::from([
            ("batch".to_owned(), q.batch),
            ("context".to_owned(), q.context),
            ("width".to_owned(), q.width),
            ("layers".to_owned(), q.layers),
            ("warmup".to_owned(), q.warmup),
            ("repeats".to_owned(), q.repeats),
        ]),
        passed,
        run: Some(index),
    })
}

/// The sheet for the page's current state; `Err` says, in words, what to fix first.
pub fn assemble(
    computed: &Computed,
    typed: &Typed,
    runs: &[RunRecord],
    workload_runs: &[crate::workload::WorkloadRecord],
    agent_version: Option<String>,
    environment: Option<Value>,
    created_at: Option<String>,
) -> Result<Sheet, String> {
    let mut workloads = Vec::with_capacity(3);
    let mut estimates = Vec::with_capacity(3);
    let mut assumed = Vec::new();
    for (i, ((title, _), w)) in WORKLOADS.iter().zip(&computed.workloads).enumerate() {
        let e = w
            .result
            .as_ref()
            .map_err(|err| format!("{title}: {err} — fix the inputs before making the sheet"))?;
        workloads.push(workload(title, &w.pairs)?);
        let input: Map<String, Value> = w
            .pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String(v.clone())))
            .collect();
        estimates.push(ComputedEstimate {
            workload: KEYS[i],
            input: Value::Object(input),
            lines: e
                .lines
                .iter()
                .map(|l| serde_json::to_value(l).unwrap_or(Value::Null))
                .collect(),
            total_bytes: e.total_bytes,
        });
        let prefix = match i {
            0 => "",
            1 => "long.",
            _ => "near_limit.",
        };
        assumptions_of(e, prefix, &mut assumed);
    }
    let [typical, long, near_limit]: [Workload; 3] = workloads
        .try_into()
        .map_err(|_| "the page has three workloads".to_string())?;
    let seed = match opt(&typed.seed) {
        None => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| format!("seed: {s:?} is not a whole number"))?,
        ),
    };
    let runs: Vec<ObservedRun> = runs
        .iter()
        .map(|r| {
            let mut run = r.run.clone();
            if run.raw.is_none() && run.failure.is_none() {
                run.failure =
                    Some("still running when the sheet was made: no results document yet".into());
            }
            run
        })
        .collect();
    let decision = (opt(&typed.card).is_some()
        || opt(&typed.configuration).is_some()
        || opt(&typed.reason).is_some())
    .then(|| Decision {
        card: find_card(&typed.card)
            .map(|c| c.name.to_owned())
            .or_else(|| opt(&typed.card)),
        configuration: opt(&typed.configuration).unwrap_or_else(|| {
            let p = &computed.workloads[0].pairs;
            format!(
                "{} GPU(s), tensor parallel {}, pipeline stages {}",
                value_of(p, "gpus").unwrap_or("1"),
                value_of(p, "tp").unwrap_or("1"),
                value_of(p, "pp").unwrap_or("1")
            )
        }),
        reason: opt(&typed.reason).unwrap_or_default(),
    });
    let sheet = Sheet {
        schema: SHEET_SCHEMA.to_owned(),
        identity: Identity {
            model: opt(&typed.model).unwrap_or_else(|| "(not named)".into()),
            revision: opt(&typed.revision),
            input_set: opt(&typed.input_set),
            seed,
        },
        dimensions: Workloads {
            typical,
            long,
            near_limit,
        },
        environment,
        computed: SheetComputed {
            estimator_version: env!("CARGO_PKG_VERSION").to_owned(),
            estimates,
        },
        maximum_load_tested: maximum_load(&runs),
        provenance: Provenance {
            page_version: env!("CARGO_PKG_VERSION").to_owned(),
            agent_version,
            protocol_version: PROTOCOL_VERSION,
            observations: ObservationsProvenance::of(&runs),
            created_at,
        },
        observed: Observed {
            runs,
            // The user's own workloads the page was shown, documents attached unchanged.
            workloads: workload_runs.iter().map(|w| w.observed()).collect(),
        },
        assumed,
        decision,
    };
    sheet.validate().map_err(|e| e.message)?;
    Ok(sheet)
}

/// The page inputs a sheet describes: the typical workload's pairs, plus the long and
/// near-limit workloads' own dimensions where they differ, plus the chosen card.
pub fn restore_pairs(sheet: &SheetImport) -> Result<Vec<(String, String)>, String> {
    let input = |key: WorkloadKey| -> Option<Vec<(String, String)>> {
        let e = sheet
            .computed
            .estimates
            .iter()
            .find(|e| e.workload == key)?;
        e.input.as_object().map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
    };
    let typical = input(WorkloadKey::Typical)
        .ok_or("this sheet has no computed typical workload to restore the inputs from")?;
    let mut pairs = typical.clone();
    for (key, (_, prefix)) in KEYS.iter().zip(WORKLOADS).skip(1) {
        let Some(other) = input(*key) else { continue };
        for dim in DIMS {
            let theirs = other.iter().find(|(k, _)| k == dim).map(|(_, v)| v);
            let ours = typical.iter().find(|(k, _)| k == dim).map(|(_, v)| v);
            if let Some(v) = theirs
                && theirs != ours
            {
                pairs.push((dim_key(prefix, dim), v.clone()));
            }
        }
    }
    if let Some(card) = sheet
        .decision
        .as_ref()
        .and_then(|d| d.card.as_deref())
        .and_then(find_card)
    {
        pairs.push(("card".into(), card.id.into()));
    }
    Ok(pairs)
}

/// Saves `text` as a file through a Blob URL and an `<a download>`.
fn download(name: &str, text: &str) -> Result<(), JsValue> {
    let window = web_sys::window().ok_or("no window")?;
    let document = window.document().ok_or("no document")?;
    let parts = js_sys::Array::of1(&JsValue::from_str(text));
    let bag = web_sys::BlobPropertyBag::new();
    bag.set_type("application/json");
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &bag)?;
    let url = web_sys::Url::create_object_url_with_blob(&blob)?;
    let a: web_sys::HtmlAnchorElement = document.create_element("a")?.dyn_into()?;
    a.set_href(&url);
    a.set_download(name);
    a.click();
    // The download has taken the Blob; release the URL once the click is handled.
    let revoke = wasm_bindgen::closure::Closure::once_into_js(move || {
        let _ = web_sys::Url::revoke_object_url(&url);
    });
    window.set_timeout_with_callback_and_timeout_and_arguments_0(revoke.unchecked_ref(), 1000)?;
    Ok(())
}

fn now_rfc3339() -> String {
    String::from(js_sys::Date::new_0().to_iso_string())
}

/// The sheet panel: identity, decision, what the sheet holds, download and import.
#[component]
pub fn SheetPanel() -> impl IntoView {
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let agent = expect_context::<Agent>();
    let sf = expect_context::<SheetForm>();
    let status: RwSignal<Option<Result<String, String>>> = RwSignal::new(None);
    let typed = move || Typed {
        model: sf.model.get(),
        revision: sf.revision.get(),
        input_set: sf.input_set.get(),
        seed: sf.seed.get(),
        card: sf.card.get(),
        configuration: sf.configuration.get(),
        reason: sf.reason.get(),
    };
    let build = move |created_at: Option<String>| {
        let typed = typed();
        agent.received.with(|r| {
            let environment = r
                .environment_raw
                .clone()
                .or_else(|| sf.imported_environment.get());
            computed.with(|c| {
                assemble(
                    c,
                    &typed,
                    &r.runs,
                    &r.workloads,
                    r.agent_version.clone(),
                    environment,
                    created_at,
                )
            })
        })
    };
    let sheet = Memo::new(move |_| build(None));
    let on_download = move |_| match build(Some(now_rfc3339())) {
        Ok(s) => match download("gpumem-sheet.json", &s.to_json_pretty()) {
            Ok(()) => status.set(Some(Ok("Sheet downloaded as gpumem-sheet.json.".into()))),
            Err(_) => status.set(Some(Err("No download: the browser refused it.".into()))),
        },
        Err(e) => status.set(Some(Err(format!("No download: {e}")))),
    };
    let on_import = {
        let form = form.clone();
        move |ev: web_sys::Event| {
            let input: HtmlInputElement = event_target(&ev);
            let Some(file) = input.files().and_then(|l| l.get(0)) else {
                return;
            };
            input.set_value("");
            // Refused before a byte is read: a huge file would freeze the page while
            // it is parsed (a 60 MB file was), and no real sheet comes near the cap.
            if file.size() > MAX_SHEET_BYTES as f64 {
                return status.set(Some(Err(too_large(&file.name(), file.size()))));
            }
            let form = form.clone();
            leptos::task::spawn_local(async move {
                let name = file.name();
                let text = wasm_bindgen_futures::JsFuture::from(file.text())
                    .await
                    .ok()
                    .and_then(|t| t.as_string());
                // A fleet sheet (`gpumem-agent merge`) is shown as its summary and
                // changes nothing else on the page.
                if let Some(summary) = text
                    .as_deref()
                    .filter(|t| t.contains(gpumem_proto::fleet::FLEET_SCHEMA))
                    .and_then(|t| serde_json::from_slice(t.as_bytes()).ok())
                    .and_then(|v| gpumem_proto::fleet::summary_from_value(&v))
                {
                    return status.set(Some(Ok(format!("{name}: {summary}"))));
                }
                let outcome = match text {
                    None => Err(format!("{name}: the browser could not read the file")),
                    Some(text) => SheetImport::from_json(&text)
                        .map_err(|e| format!("{name}: {e}"))
                        .and_then(|s| restore_pairs(&s).map(|p| (s, p))),
                };
                // A refused file changes nothing on the page.
                let (s, pairs) = match outcome {
                    Ok(x) => x,
                    Err(e) => return status.set(Some(Err(format!("Not imported: {e}")))),
                };
                form.replace_all(&pairs);
                sf.model.set(if s.identity.model == "(not named)" {
                    String::new()
                } else {
                    s.identity.model.clone()
                });
                sf.revision
                    .set(s.identity.revision.clone().unwrap_or_default());
                sf.input_set
                    .set(s.identity.input_set.clone().unwrap_or_default());
                sf.seed
                    .set(s.identity.seed.map(|x| x.to_string()).unwrap_or_default());
                let d = s.decision.clone();
                sf.card.set(
                    d.as_ref()
                        .and_then(|d| d.card.as_deref())
                        .map(|c| find_card(c).map_or(c.to_owned(), |c| c.id.to_owned()))
                        .unwrap_or_default(),
                );
                sf.configuration.set(
                    d.as_ref()
                        .map(|d| d.configuration.clone())
                        .unwrap_or_default(),
                );
                sf.reason.set(d.map(|d| d.reason).unwrap_or_default());
                sf.imported_environment.set(s.environment.clone());
                let n = s.observed.runs.len();
                agent.received.update(|r| {
                    if !matches!(r.link, Link::Paired { .. }) {
                        r.agent_version = s.provenance.agent_version.clone();
                        r.environment = s
                            .environment
                            .clone()
                            .and_then(|e| gpumem_proto::json::from_value(e).ok());
                        r.environment_raw = s.environment.clone();
                    }
                    r.runs = s
                        .observed
                        .runs
                        .into_iter()
                        .map(|run| RunRecord {
                            run_id: None,
                            state: RunState::Imported,
                            run,
                        })
                        .collect();
                    r.workloads = s
                        .observed
                        .workloads
                        .into_iter()
                        .take(crate::workload::MAX_WORKLOADS)
                        .map(crate::workload::WorkloadRecord::imported)
                        .collect();
                });
                status.set(Some(Ok(format!(
                    "Imported {name}: inputs, identity, decision and {n} observed run(s) restored."
                ))));
            });
        }
    };
    let text = |id: &'static str,
                label: &'static str,
                sig: RwSignal<String>,
                placeholder: &'static str| {
        view! {
            <div class="field">
                <label for=id>{label}</label>
                <input type="text" id=id data-testid=id autocomplete="off" placeholder=placeholder
                    prop:value=move || sig.get() on:input=move |ev| sig.set(event_target_value(&ev))/>
            </div>
        }
    };
    let summary = move || {
        sheet.with(|s| match s {
            Ok(s) => {
                let runs = &s.observed.runs;
                // Measurement runs and the user's own runs (a replayed workload too).
                let p = s.provenance.observations;
                let w = |src| s.observed.workloads.iter().any(|x| x.source == src);
                let live = matches!(p, ObservationsProvenance::Live | ObservationsProvenance::Mixed)
                    || w(ObservationSource::Live);
                let replay = matches!(p, ObservationsProvenance::Replay | ObservationsProvenance::Mixed)
                    || w(ObservationSource::Replay);
                let source = match (live, replay) {
                    (false, false) => "nothing observed yet",
                    (true, false) => "live",
                    (false, true) => "replayed",
                    (true, true) => "live and replayed",
                };
                view! {
                    <ul class="sheet-summary" data-testid="sheet-summary">
                        <li><span class="tag computed">"computed"</span> " "
                            {s.computed.estimates.len()} " workloads, every line in bytes"</li>
                        <li data-testid="sheet-observed"><span class="tag observed">"observed"</span> " " {runs.len()} " measurement run(s) and "
                            {s.observed.workloads.len()} " run(s) of your own command, " {source}
                            ", raw documents attached unchanged"</li>
                        <li><span class="tag assumed">"assumed"</span> " " {s.assumed.len()}
                            " assumption(s), in words and numbers"</li>
                        <li>"Maximum load tested: " {s.maximum_load_tested.as_ref().map_or("none yet".to_string(), |m| m.statement.clone())}</li>
                    </ul>
                }
                .into_any()
            }
            Err(e) => view! { <p class="banner warn" data-testid="sheet-blocked">"No sheet yet: " {e.clone()}</p> }.into_any(),
        })
    };
    view! {
        <section class="panel sheet" aria-label="The sheet" data-testid="sheet-panel">
            <h2>"The sheet"</h2>
            <p class="note">
                "One JSON document (" <code>"gpumem.sheet/v1"</code> ") that keeps what was computed, what was "
                "observed and what is still assumed apart, with the agent's raw results attached."
            </p>
            <fieldset class="group">
                <legend>"Identity of the trial"</legend>
                <div class="grid4">
                    {text("sheet-model", "Model or code", sf.model, "e.g. meta-llama/Llama-3.1-8B")}
                    {text("sheet-revision", "Revision", sf.revision, "commit, tag…")}
                    {text("sheet-input-set", "Input set", sf.input_set, "which prompts")}
                    {text("sheet-seed", "Seed", sf.seed, "none")}
                </div>
            </fieldset>
            <fieldset class="group">
                <legend>"Decision"</legend>
                <div class="grid2">
                    <div class="field">
                        <label for="sheet-card">"Chosen card"</label>
                        <select id="sheet-card" data-testid="sheet-card" prop:value=move || sf.card.get()
                            on:change=move |ev| sf.card.set(event_target_value(&ev))>
                            <option value="">"— not decided —"</option>
                            {CATALOGUE.iter().map(|c| view! { <option value=c.id>{c.name}</option> }).collect_view()}
                        </select>
                    </div>
                    {text("sheet-configuration", "Configuration", sf.configuration, "e.g. 1 device; 2 × tensor parallel")}
                </div>
                <div class="field">
                    <label for="sheet-reason">"Why"</label>
                    <textarea id="sheet-reason" data-testid="sheet-reason" rows="2"
                        prop:value=move || sf.reason.get()
                        on:input=move |ev| sf.reason.set(event_target_value(&ev))></textarea>
                </div>
            </fieldset>
            {summary}
            <div class="row">
                <button type="button" class="primary" data-testid="sheet-download"
                    disabled=move || sheet.with(|s| s.is_err()) on:click=on_download>
                    "Download sheet (JSON)"
                </button>
                <label class="button" for="sheet-import">"Import sheet"</label>
                <input type="file" id="sheet-import" data-testid="sheet-import" class="sr"
                    accept=".json,application/json" on:change=on_import/>
            </div>
            <p class="msg" role="status" data-testid="sheet-status"
                class:error=move || matches!(status.get(), Some(Err(_)))>
                {move || status.get().map(|s| match s { Ok(t) | Err(t) => t })}
            </p>
        </section>
    }
}

#[cfg(test)]
mod tests {
    //! `assemble` and `restore_pairs` natively: a sheet made from computed workloads
    //! validates, survives its own JSON, and gives back pairs that recompute the same
    //! estimates; the refusals name what to fix.

    use gpumem_proto::sheet::{Sheet, SheetImport};

    use super::{Typed, assemble, restore_pairs};
    use crate::compute::{Computed, compute};

    const SHAPE: [(&str, &str); 7] = [
        ("layers", "32"),
        ("hidden", "4096"),
        ("heads", "32"),
        ("kv-heads", "8"),
        ("intermediate", "14336"),
        ("vocab", "128256"),
        ("context", "4096"),
    ];

    fn pairs(p: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        p.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
    }

    fn computed(page: &[(&'static str, &str)]) -> Computed {
        compute(
            &pairs(&SHAPE),
            &pairs(page),
            None,
            &|| 0.0,
            &crate::compute::Full,
        )
    }

    fn sheet_of(c: &Computed, typed: &Typed) -> Result<Sheet, String> {
        assemble(
            c,
            typed,
            &[],
            &[],
            None,
            None,
            Some("2026-01-01T00:00:00Z".into()),
        )
    }

    /// Restored pairs as the page would hold them again (`&'static str` keys).
    fn as_page_pairs(restored: &[(String, String)]) -> Vec<(&'static str, String)> {
        restored
            .iter()
            .map(|(k, v)| (&*Box::leak(k.clone().into_boxed_str()), v.clone()))
            .collect()
    }

    #[test]
    fn a_workload_the_page_was_shown_is_attached_unchanged() {
        let raw: serde_json::Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/workloads/synthetic-generate_kv.json"
        ))
        .expect("fixture");
        let mut records = Vec::new();
        let source = gpumem_proto::sheet::ObservationSource::Replay;
        crate::workload::apply(
            &mut records,
            source,
            gpumem_proto::wire::AgentMessage::WorkloadStarted {
                run_id: 1,
                command: vec!["python".into()],
                synthetic: true,
                steps_instrumented: 3,
            },
        );
        crate::workload::apply(
            &mut records,
            source,
            gpumem_proto::wire::AgentMessage::WorkloadFinished {
                run_id: 1,
                ok: true,
                result: raw.clone(),
            },
        );
        let c = computed(&[]);
        let typed = Typed::default();
        let sheet = assemble(&c, &typed, &[], &records, None, None, None).expect("a sheet");
        assert_eq!(sheet.observed.workloads.len(), 1);
        assert_eq!(sheet.observed.workloads[0].raw.as_ref(), Some(&raw));
        let text = sheet.to_json_pretty();
        assert!(text.contains("\"workloads\""));
        // Without one, the key is absent: older readers see the sheet they know.
        let none = sheet_of(&c, &typed).expect("a sheet").to_json_pretty();
        assert!(!none.contains("\"workloads\": ["));
        assert!(SheetImport::from_json(&text).is_ok());
    }

    #[test]
    fn a_sheet_round_trips_to_the_same_estimates() {
        let page = [("long-context", "32768"), ("limit-sequences", "8")];
        let c = computed(&page);
        let typed = Typed {
            model: "Llama-3.1-8B".into(),
            seed: "42".into(),
            card: "h100-sxm-80".into(),
            ..Typed::default()
        };
        let sheet = sheet_of(&c, &typed).expect("a valid sheet");
        assert_eq!(sheet.computed.estimates.len(), 3);
        for (e, w) in sheet.computed.estimates.iter().zip(&c.workloads) {
            assert_eq!(e.total_bytes, w.result.as_ref().unwrap().total_bytes);
        }
        assert_eq!(sheet.identity.seed, Some(42));
        assert!(sheet.observed.runs.is_empty());
        // Through its own JSON, as a user downloads and drops it back.
        let back = SheetImport::from_json(&sheet.to_json_pretty()).expect("reads back");
        let restored = restore_pairs(&back).expect("restores");
        // The workloads' own dimensions come back under their page keys…
        let has = |k: &str, v: &str| restored.iter().any(|(a, b)| a == k && b == v);
        assert!(has("long-context", "32768"), "{restored:?}");
        assert!(has("limit-sequences", "8"), "{restored:?}");
        assert!(has("context", "4096"), "{restored:?}");
        // …and recompute to the same three estimates.
        let all = as_page_pairs(&restored);
        let (cli, page): (Vec<_>, Vec<_>) = all
            .into_iter()
            .partition(|(k, _)| !k.starts_with("long-") && !k.starts_with("limit-"));
        let again = compute(&cli, &page, None, &|| 0.0, &crate::compute::Full);
        for (a, b) in again.workloads.iter().zip(&c.workloads) {
            assert_eq!(
                a.result.as_ref().unwrap().total_bytes,
                b.result.as_ref().unwrap().total_bytes
            );
        }
    }

    #[test]
    fn the_chosen_card_comes_back_as_its_catalogue_id() {
        let card = &gpumem_core::catalogue::CATALOGUE[0];
        let typed = Typed {
            card: card.id.into(),
            reason: "fits with room".into(),
            ..Typed::default()
        };
        let sheet = sheet_of(&computed(&[]), &typed).unwrap();
        let decision = sheet.decision.as_ref().expect("a decision");
        assert_eq!(decision.card.as_deref(), Some(card.name));
        let back = SheetImport::from_json(&sheet.to_json_pretty()).unwrap();
        let restored = restore_pairs(&back).unwrap();
        assert!(restored.contains(&("card".to_string(), card.id.to_string())));
    }

    #[test]
    fn refusals_name_what_to_fix() {
        // A workload that cannot be computed.
        let bad = computed(&[("long-context", "-3")]);
        let e = sheet_of(&bad, &Typed::default()).unwrap_err();
        assert!(e.starts_with("Long but expected:"), "{e}");
        // A seed that is not a whole number.
        let typed = Typed {
            seed: "4.2".into(),
            ..Typed::default()
        };
        let e = sheet_of(&computed(&[]), &typed).unwrap_err();
        assert!(e.contains("seed"), "{e}");
        // A sheet without a typical workload has nothing to restore from.
        let sheet = sheet_of(&computed(&[]), &Typed::default()).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&sheet.to_json_pretty()).unwrap();
        v["computed"]["estimates"]
            .as_array_mut()
            .unwrap()
            .retain(|e| e["workload"] != "typical");
        let back = SheetImport::from_json(&v.to_string()).unwrap();
        assert!(restore_pairs(&back).unwrap_err().contains("typical"));
    }
}
