//! Model files and Hub lookups: the import zone and the model field.
//! The readers themselves — config, safetensors and GGUF headers, HTTP Range reads — are
//! the lookup module (`web/lookup`, a wasm module of its own) that this page imports on
//! the first import or lookup, so the dimensioner's wasm carries none of them. What it
//! answers is a [`LookupOutcome`], applied here to the form: the shape into the fields
//! (and the link), the tensors as the imported weights.
//!
//! The token for a gated model lives in this component's memory only: never in the URL,
//! in local storage or in the sheet.

use gpumem_core::units::group_digits;
use gpumem_proto::lookup::{LookupOutcome, LookupRequest, text};
use js_sys::{Array, Function, Promise, Reflect};
use leptos::prelude::*;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{FileList, HtmlInputElement};

use crate::state::{Form, Imported};

/// Where the build put the lookup module (`scripts/build-web.sh` passes its
/// content-hashed path); the fallback serves builds without it (native checks).
pub const LOOKUP_JS: &str = match option_env!("GPUMEM_LOOKUP_JS") {
    Some(url) => url,
    None => "/lookup/gpumem_lookup.js",
};

#[wasm_bindgen(module = "/src/lazy.js")]
extern "C" {
    #[wasm_bindgen(catch)]
    async fn load_lookup(url: &str) -> Result<JsValue, JsValue>;
    /// Aborts the lookup under way (the module's `cancel`).
    fn cancel_lookup();
}

fn js_text(e: &JsValue, fallback: &str) -> String {
    e.as_string()
        .or_else(|| {
            Reflect::get(e, &"message".into())
                .ok()
                .and_then(|m| m.as_string())
        })
        .unwrap_or_else(|| fallback.to_string())
}

/// Calls `name(a, b)` of the lookup module (loading it first); its answer.
pub(crate) async fn call_text(name: &str, a: &JsValue, b: &JsValue) -> Result<String, String> {
    let module = load_lookup(LOOKUP_JS)
        .await
        .map_err(|e| format!("the reader did not load: {}", js_text(&e, "unknown error")))?;
    let f: Function = Reflect::get(&module, &name.into())
        .ok()
        .and_then(|f| f.dyn_into().ok())
        .ok_or("the reader module is not the one this page was built with")?;
    let promise: Promise = f
        .call2(&JsValue::NULL, a, b)
        .ok()
        .and_then(|p| p.dyn_into().ok())
        .ok_or("the reader did not start")?;
    Ok(JsFuture::from(promise)
        .await
        .map_err(|e| js_text(&e, "the read failed"))?
        .as_string()
        .unwrap_or_default())
}

/// Calls a reader of the lookup module: what it read.
async fn call(name: &str, a: &JsValue, b: &JsValue) -> Result<LookupOutcome, String> {
    let answer = call_text(name, a, b).await?;
    text::read_outcome(&answer).map_err(|e| format!("the reader's answer: {e}"))
}

/// Asks the lookup module to fill the model field's suggestions for what is typed (it
/// waits for a pause in the typing and asks the Hub's model search). A failed search
/// only means no suggestions: a lookup says why it fails.
fn suggest(typed: String) {
    leptos::task::spawn_local(async move {
        let _ = call_text("suggest", &JsValue::from(typed), &JsValue::UNDEFINED).await;
    });
}

/// Clears the lookup's keys, so a link or a reload does not look the model up again.
fn forget_model(form: &Form) {
    for key in ["model", "revision", "model-file"] {
        form.sig(key).set(String::new());
    }
}

/// Applies an outcome to the form and says what changed.
fn apply(form: &Form, outcome: LookupOutcome) -> String {
    let mut said: Vec<String> = Vec::new();
    if let Some(c) = outcome.config {
        let pairs: Vec<(&str, String)> = c
            .pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        form.set_shape(&pairs);
        for key in ["format", "attention-format", "max-position"] {
            if let Some((_, v)) = pairs.iter().find(|(k, _)| *k == key) {
                form.sig(key).set(v.clone());
            }
        }
        // Which quantiser wrote the format: set or cleared with each config read.
        let ct = pairs.iter().find(|(k, _)| *k == "compressed-tensors");
        form.sig("compressed-tensors")
            .set(ct.map(|(_, v)| v.clone()).unwrap_or_default());
        let mut text = format!(
            "Read {} ({}; {}): the shape is now in the fields above and in the link.",
            c.name, c.model_type, c.confidence
        );
        for n in &c.notes {
            text.push_str(&format!(" Note: {n}."));
        }
        for w in &c.warnings {
            text.push_str(&format!(" Warning: {w}."));
        }
        said.push(text);
    }
    if let Some(t) = outcome.tensors {
        let n = t.files.len();
        said.push(format!(
            "Counted {} tensors in {} file{}: {} B of weights, exactly.",
            group_digits(t.summary.total.tensors),
            n,
            if n == 1 { "" } else { "s" },
            group_digits(t.summary.total.bytes)
        ));
        form.imported.set(Some(Imported {
            files: t.files,
            summary: t.summary,
        }));
    }
    if let Some((name, pairs)) = outcome.mmproj {
        form.sig("mmproj").set(pairs);
        if form.sig("engine").get_untracked().trim().is_empty() {
            form.sig("engine").set("llama.cpp".into());
        }
        said.push(format!(
            "Read {name}'s GGUF header: a multimodal projector, now in llama.cpp's mmproj field (its weights and its vision encoder's compute buffer on the card, as llama-server --mmproj loads them); the model's fields are unchanged."
        ));
    }
    if outcome.requests > 0 {
        said.push(format!(
            "{} requests in {} round trips{}.",
            outcome.requests,
            outcome.round_trips,
            outcome
                .commit
                .map(|c| format!(", commit {}", c.get(..12).unwrap_or(&c)))
                .unwrap_or_default()
        ));
    }
    said.join(" ")
}

/// The files read, named in full up to three, else the first and last and how many.
fn files_label(files: &[String]) -> String {
    match files {
        [first, .., last] if files.len() > 3 => format!("{first} … {last} ({} files)", files.len()),
        _ => files.join(", "),
    }
}

/// Drop or pick model files, or look a model up on the Hub; only headers are read.
#[component]
pub fn ImportZone() -> impl IntoView {
    let form = expect_context::<Form>();
    let status: RwSignal<Option<Result<String, String>>> = RwSignal::new(None);
    let busy: RwSignal<Option<String>> = RwSignal::new(None);
    let dragging = RwSignal::new(false);
    // In memory only: not a form key, so never in the link or storage.
    let token = RwSignal::new(String::new());
    // The model whose figures the page shows (the link's, then each lookup that
    // succeeded): a failed lookup goes back to it.
    let shown = RwSignal::new(form.sig("model").get_untracked());

    let read = {
        let form = form.clone();
        move |list: Option<FileList>| {
            let Some(list) = list else { return };
            let files: Array = (0..list.length()).filter_map(|i| list.get(i)).collect();
            let form = form.clone();
            busy.set(Some("Reading headers…".into()));
            leptos::task::spawn_local(async move {
                let outcome = call("read_files", &files, &JsValue::UNDEFINED).await;
                busy.set(None);
                if outcome.is_ok() {
                    // The link must not name a model the page no longer shows.
                    forget_model(&form);
                }
                status.set(Some(outcome.map(|o| apply(&form, o))));
            });
        }
    };
    let look_up = {
        let form = form.clone();
        move || {
            let request = LookupRequest {
                model: form.sig("model").get_untracked().trim().to_string(),
                revision: form.sig("revision").get_untracked().trim().to_string(),
                file: Some(form.sig("model-file").get_untracked().trim().to_string())
                    .filter(|f| !f.is_empty()),
                token: Some(token.get_untracked()).filter(|t| !t.trim().is_empty()),
            };
            if request.model.is_empty() {
                status.set(Some(Err(
                    "type a model id, e.g. meta-llama/Llama-3.1-8B".into()
                )));
                return;
            }
            let asked = text::write_request(&request);
            let form = form.clone();
            busy.set(Some(format!("Looking up {}…", request.model)));
            leptos::task::spawn_local(async move {
                let progress = Closure::<dyn Fn(JsValue)>::new(move |line: JsValue| {
                    if let Some(line) = line.as_string() {
                        busy.set(Some(line));
                    }
                });
                let outcome = call("lookup", &JsValue::from(asked), progress.as_ref()).await;
                drop(progress);
                busy.set(None);
                match &outcome {
                    // Nothing is lost: the fields, the weights and the link stay those of
                    // the model shown before, whose id goes back into the field; why is
                    // said at the top of the answer, where the user looks.
                    Err(e) => {
                        let before = shown.get_untracked();
                        form.sig("model").set(before.clone());
                        form.lookup_failed.set(Some(format!(
                            "Looking up {} failed: {e}. The figures are still those of {}.",
                            request.model,
                            if before.is_empty() {
                                "the fields"
                            } else {
                                &before
                            }
                        )));
                    }
                    Ok(o) => {
                        shown.set(request.model.clone());
                        // A bundled config alone: no earlier model's tensors stay.
                        if o.tensors.is_none() {
                            form.imported.set(None);
                        }
                    }
                }
                status.set(Some(outcome.map(|o| apply(&form, o))));
            });
        }
    };
    // A link that names a model looks it up when the page opens (unless its tensors
    // are already here, restored from this browser's storage).
    {
        let look_up = look_up.clone();
        let form = form.clone();
        // Reads nothing it tracks: it runs once, after the first render.
        Effect::new(move |_| {
            if form.imported.get_untracked().is_none()
                && !form.sig("model").get_untracked().trim().is_empty()
            {
                look_up();
            }
        });
    }
    let on_drop = {
        let read = read.clone();
        move |ev: web_sys::DragEvent| {
            ev.prevent_default();
            dragging.set(false);
            read(ev.data_transfer().and_then(|d| d.files()));
        }
    };
    let on_pick = move |ev: web_sys::Event| {
        let input: HtmlInputElement = event_target(&ev);
        read(input.files());
        input.set_value("");
    };
    let on_submit = {
        let look_up = look_up.clone();
        move |ev: web_sys::SubmitEvent| {
            ev.prevent_default();
            look_up();
        }
    };
    let (model, revision, file) = (
        form.sig("model"),
        form.sig("revision"),
        form.sig("model-file"),
    );
    let imported = form.imported;
    view! {
        <form class="lookup" data-testid="lookup" on:submit=on_submit>
            <label for="model"><strong>"Model"</strong>" — as you type, the bundled models and the Hub's search suggest ids"</label>
            <div class="lookup-row">
                <input id="model" data-testid="model" type="text" placeholder="meta-llama/Llama-3.1-8B"
                    spellcheck="false" autocomplete="off" list="model-suggestions"
                    prop:value=move || model.get()
                    on:input=move |ev| {
                        let typed = event_target_value(&ev);
                        model.set(typed.clone());
                        suggest(typed);
                    }/>
                <datalist id="model-suggestions"></datalist>
                <button type="submit" data-testid="lookup-go"
                    prop:disabled=move || busy.get().is_some()>"Look up"</button>
                // Aborts the lookup's requests (each also ends by itself after 30 s).
                <button type="button" data-testid="lookup-cancel"
                    prop:hidden=move || busy.get().is_none()
                    on:click=|_| cancel_lookup()>"Cancel"</button>
            </div>
            <details class="sub">
                <summary>"Revision, GGUF file, access token"</summary>
                <div class="grid3">
                    <label>"Revision" <input data-testid="revision" type="text" placeholder="main"
                        prop:value=move || revision.get() on:input=move |ev| revision.set(event_target_value(&ev))/></label>
                    <label>"Weight file (a .gguf)" <input data-testid="model-file" type="text" placeholder="chosen from the repository"
                        prop:value=move || file.get() on:input=move |ev| file.set(event_target_value(&ev))/></label>
                    <label>"Access token (gated models)" <input data-testid="token" type="password" autocomplete="off"
                        prop:value=move || token.get() on:input=move |ev| token.set(event_target_value(&ev))/></label>
                </div>
                <p class="hint">"What you type here is sent to the Hub's model search for suggestions. A lookup reads only config.json, the file list and each weight file's header, by Range requests to the Hub. The token stays in this page's memory: not in the link, not stored."</p>
            </details>
        </form>
        <div
            class="drop"
            class:dragging=move || dragging.get()
            on:dragover=move |ev: web_sys::DragEvent| { ev.prevent_default(); dragging.set(true); }
            on:dragleave=move |_| dragging.set(false)
            on:drop=on_drop
        >
            <label for="import-file" class="drop-label">
                <strong>"Import a model file"</strong>
                " — drop or pick a config.json, the .safetensors shards of a checkpoint, or a .gguf file (an mmproj projector alone fills llama.cpp's mmproj field). "
                "Only the header bytes are read, in this browser; nothing is uploaded."
            </label>
            <input
                type="file"
                id="import-file"
                data-testid="import-file"
                multiple
                accept=".json,.safetensors,.gguf"
                on:change=on_pick
            />
        </div>
        <p class="msg" role="status" data-testid="import-status"
            class:error=move || matches!(status.get(), Some(Err(_)))>
            {move || busy.get().or_else(|| {
                status.get().map(|s| match s { Ok(t) => t, Err(e) => format!("Could not import: {e}") })
            })}
        </p>
        {move || imported.get().map(|i| { let form = form.clone(); view! {
            <div class="imported" data-testid="imported">
                <p>
                    "Weights are counted from the headers of "
                    <strong>{files_label(&i.files)}</strong>
                    " (" {group_digits(i.summary.total.tensors)} " tensors, "
                    {group_digits(i.summary.total.bytes)} " B). "
                    "Imported tensors are not part of the link: they stay in this browser."
                </p>
                <button type="button" on:click=move |_| { imported.set(None); forget_model(&form); }>"Forget imported tensors"</button>
            </div>
        }})}
    }
}
