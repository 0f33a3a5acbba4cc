//! A diffusers pipeline, answered as `gpumem-agent estimate --diffusers` answers it.
//!
//! The diffusion module (`web/diffusion`, crate `gpumem-diffusion`, a wasm module of
//! its own loaded when a pipeline is first read) reads the pipeline's files from the
//! Hub (`files`: `model_index.json`, then each component's `config.json`) or from a
//! folder on this computer, picked or dropped (`folder_files`, `folder_entries`: the
//! same files, nothing else of the folder), and answers
//! (`answer`): the dimensioner carries none of the pipeline reader, its counts or its
//! JSON reader. What crosses is text ([`gpumem_proto::diffusion`]); the files are
//! kept here as the module wrote them, and once loaded the module's `answer` is called
//! synchronously, so the answer follows every field like the page's other figures.
//! The card, the reserve and the host RAM are the page's own fields.

use std::cell::RefCell;

use gpumem_core::units::Bytes;
use gpumem_proto::diffusion::{DiffusionAnswer, read_answer, write_pairs};
use gpumem_proto::lookup::{LookupRequest, text};
use js_sys::{Function, Promise, Reflect};
use leptos::prelude::*;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crate::state::Form;

/// Where the build put the diffusion module (`scripts/build-web.sh` passes its
/// content-hashed path); the fallback serves builds without it (native checks).
pub const DIFFUSION_JS: &str = match option_env!("GPUMEM_DIFFUSION_JS") {
    Some(url) => url,
    None => "/diffusion/gpumem_diffusion.js",
};

#[wasm_bindgen(module = "/src/lazy.js")]
extern "C" {
    #[wasm_bindgen(catch)]
    async fn load_diffusion(url: &str) -> Result<JsValue, JsValue>;
}

thread_local! {
    /// The loaded module.
    static MODULE: RefCell<Option<JsValue>> = const { RefCell::new(None) };
}

/// The pipeline's own fields: key (the command's flag without dashes), label,
/// placeholder (the command's default), choices (empty: typed).
const FIELDS: [(&str, &str, &str, &[&str]); 18] = [
    ("height", "Height (px)", "1024 (Wan: 480)", &[]),
    ("width", "Width (px)", "1024 (Wan: 832)", &[]),
    ("frames", "Frames", "1 (Wan: 81)", &[]),
    ("images", "Images per prompt", "1", &[]),
    ("cfg", "Classifier-free guidance", "", &["", "on", "off"]),
    (
        "offload",
        "Offload",
        "",
        &["none", "model", "sequential", "group"],
    ),
    ("group-blocks", "Blocks per group", "group: N", &[]),
    ("group-leaf", "Leaf level", "", &["", "true"]),
    ("group-stream", "Stream", "", &["", "true"]),
    ("group-pipeline", "Whole pipeline", "", &["", "true"]),
    ("compute-dtype", "Dtype", "", &["bf16", "fp16", "fp32"]),
    (
        "format",
        "Denoiser format",
        "the dtype (nf4, int8, fp8, q8_0…)",
        &[],
    ),
    ("text-format", "Text encoders' format", "the dtype", &[]),
    (
        "text-tokens",
        "Text tokens",
        "the pipeline's max_sequence_length",
        &[],
    ),
    ("attention", "Attention", "", &["sdpa", "eager"]),
    ("vae-tiling", "VAE tiling", "", &["", "true"]),
    ("vae-slicing", "VAE slicing", "", &["", "true"]),
    (
        "layerwise-casting",
        "Layerwise casting (fp8)",
        "",
        &["", "true"],
    ),
];

/// The page's own keys the answer reads (the card judged, the reserve, the host RAM).
const PAGE_KEYS: [&str; 4] = ["card", "reserve-gib", "ram", "wired-limit-mb"];

/// The loaded module's function `name`.
fn function(name: &str) -> Result<Function, String> {
    MODULE.with(|m| {
        m.borrow()
            .as_ref()
            .and_then(|m| Reflect::get(m, &name.into()).ok())
            .and_then(|f| f.dyn_into().ok())
            .ok_or_else(|| "the diffusion module is not the one this page was built with".into())
    })
}

/// Calls the loaded module's `answer(files, pairs)`.
fn call(files: &str, pairs: &str) -> Result<Result<DiffusionAnswer, String>, String> {
    let answer = function("answer")?
        .call2(&JsValue::NULL, &files.into(), &pairs.into())
        .ok()
        .and_then(|v| v.as_string())
        .ok_or("the diffusion module failed")?;
    read_answer(&answer)
}

/// Loads the module (once) and reads a pipeline's files with its function `name`
/// (`files(request, progress)` from the Hub, `folder_files(list, progress)` from a
/// picked folder, `folder_entries(entries, progress)` from a dropped one): their
/// document, or why not.
async fn read_files(name: &str, what: JsValue, progress: &Function) -> Result<String, String> {
    let module = load_diffusion(DIFFUSION_JS).await.map_err(|e| {
        e.as_string()
            .unwrap_or_else(|| "the diffusion estimator did not load".into())
    })?;
    MODULE.with(|slot| *slot.borrow_mut() = Some(module));
    let promise: Promise = function(name)?
        .call2(&JsValue::NULL, &what, progress)
        .ok()
        .and_then(|p| p.dyn_into().ok())
        .ok_or("the diffusion module did not start")?;
    JsFuture::from(promise)
        .await
        .map_err(|e| e.as_string().unwrap_or_else(|| "the read failed".into()))?
        .as_string()
        .ok_or_else(|| "the diffusion module failed".into())
}

fn both(b: u64) -> String {
    let b = Bytes(b);
    format!("{} GB ({} GiB)", b.gb_string(2), b.gib_string(2))
}

/// The section: a pipeline's repository, its workload, and its answer.
#[component]
pub fn DiffusionPanel() -> impl IntoView {
    let form = use_context::<Form>();
    let model = RwSignal::new(String::new());
    let revision = RwSignal::new(String::new());
    // A gated pipeline's token lives in this component's memory only: never in the
    // URL, never stored; the lookup sends it to the Hub's own origin alone.
    let token = RwSignal::new(String::new());
    let values: Vec<(&'static str, RwSignal<String>)> = FIELDS
        .iter()
        .map(|(k, _, _, choices)| {
            (
                *k,
                RwSignal::new(choices.first().unwrap_or(&"").to_string()),
            )
        })
        .collect();
    // The pipeline's files as read, and where from.
    let files: RwSignal<Option<String>> = RwSignal::new(None);
    let status = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    // Reads with the module's function `name` on `what`; `id` names it in words.
    let start = move |name: &'static str, what: JsValue, id: String| {
        if busy.get_untracked() {
            return;
        }
        busy.set(true);
        files.set(None);
        status.set(format!("Reading {id}'s model_index.json…"));
        leptos::task::spawn_local(async move {
            let progress = Closure::<dyn Fn(String)>::new(move |t: String| status.set(t));
            let progress_fn: &Function = progress.as_ref().unchecked_ref();
            let read = read_files(name, what, progress_fn).await;
            drop(progress);
            match read {
                Ok(t) => files.set(Some(t)),
                Err(e) => status.set(format!("Could not read {id}: {e}")),
            }
            busy.set(false);
        });
    };
    let fetch = move || {
        let id = model.get_untracked().trim().to_string();
        if id.is_empty() {
            return;
        }
        let request = text::write_request(&LookupRequest {
            model: id.clone(),
            revision: revision.get_untracked().trim().to_string(),
            token: Some(token.get_untracked()).filter(|t| !t.trim().is_empty()),
            ..LookupRequest::default()
        });
        start("files", request.into(), id);
    };
    // A folder picked (the input's files, each with its path in the folder).
    let on_pick = move |ev: web_sys::Event| {
        let Some(input) = ev.target() else { return };
        let list = Reflect::get(&input, &"files".into()).unwrap_or(JsValue::NULL);
        if !list.is_object() {
            return;
        }
        start("folder_files", list, "the folder".into());
        // The same folder picked again is read again.
        let _ = Reflect::set(&input, &"value".into(), &"".into());
    };
    // A folder dropped: its entries are taken while the drop event runs (the
    // browser forgets them after), and walked by the module.
    let dragging = RwSignal::new(false);
    let on_drop = move |ev: web_sys::DragEvent| {
        ev.prevent_default();
        dragging.set(false);
        let Some(items) = ev
            .data_transfer()
            .and_then(|d| Reflect::get(&d, &"items".into()).ok())
        else {
            return;
        };
        let entries = js_sys::Array::new();
        let length = Reflect::get(&items, &"length".into())
            .ok()
            .and_then(|l| l.as_f64())
            .unwrap_or(0.0);
        for i in 0..(length as u32).min(1024) {
            let entry = Reflect::get(&items, &i.into())
                .ok()
                .and_then(|item| {
                    let f: Function = Reflect::get(&item, &"webkitGetAsEntry".into())
                        .ok()?
                        .dyn_into()
                        .ok()?;
                    f.call0(&item).ok()
                })
                .filter(JsValue::is_object);
            if let Some(e) = entry {
                entries.push(&e);
            }
        }
        if entries.length() > 0 {
            start(
                "folder_entries",
                entries.into(),
                "the dropped folder".into(),
            );
        }
    };
    let pairs = {
        let values = values.clone();
        move || {
            let mut p: Vec<(String, String)> = values
                .iter()
                .map(|(k, v)| (k.to_string(), v.get()))
                .collect();
            if let Some(form) = &form {
                for k in PAGE_KEYS {
                    p.push((k.to_string(), form.sig(k).get()));
                }
            }
            p
        }
    };
    // Files are there only once the module read them: it is loaded.
    let answer = move || {
        let f = files.get()?;
        Some(call(&f, &write_pairs(&pairs())).and_then(|a| a))
    };
    let inputs = values
        .iter()
        .zip(FIELDS)
        .map(|((key, sig), (_, label, placeholder, choices))| {
            let sig = *sig;
            let id = format!("diffusion-{key}");
            let control = if choices.is_empty() {
                view! {
                    <input id=id.clone() data-testid=id.clone() type="text" placeholder=placeholder
                        prop:value=move || sig.get()
                        on:input=move |ev| sig.set(event_target_value(&ev))/>
                }
                .into_any()
            } else {
                let options = choices
                    .iter()
                    .map(|c| {
                        let c = c.to_string();
                        let shown = if c.is_empty() { "default".to_string() } else { c.clone() };
                        view! { <option value=c.clone() selected=move || sig.get() == c>{shown}</option> }
                    })
                    .collect_view();
                view! {
                    <select id=id.clone() data-testid=id.clone()
                        on:change=move |ev| sig.set(event_target_value(&ev))>{options}</select>
                }
                .into_any()
            };
            view! { <label class="field" for=id><span class="label">{label}</span>{control}</label> }
        })
        .collect_view();
    let shown = move || {
        answer().map(|a| match a {
            Err(why) => {
                view! { <p class="banner warn" data-testid="diffusion-refused">{why}</p> }.into_any()
            }
            Ok(a) => {
                let class = match &a.verdict {
                    Some((k, _)) => format!("verdict-line {k}"),
                    None => "verdict-line no".to_string(),
                };
                let mut lines = a.lines.into_iter();
                let first = lines.next().unwrap_or_default();
                let rest = lines.collect::<Vec<_>>().join("\n");
                let rows = a
                    .figures
                    .into_iter()
                    .map(|(name, b)| {
                        let key = name.clone();
                        view! {
                            <tr data-figure=key data-bytes=b.to_string()>
                                <td>{name}</td><td class="num">{format!("{b} B")}</td><td class="num">{both(b)}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <p class=class data-testid="diffusion-verdict"
                        data-verdict=a.verdict.as_ref().map(|v| v.0.clone()).unwrap_or_default()
                        data-card=a.verdict.as_ref().map(|v| v.1.clone()).unwrap_or_default()>{first}</p>
                    <pre class="diffusion-lines" data-testid="diffusion-lines">{rest}</pre>
                    <table class="diffusion-figures" data-testid="diffusion-figures">
                        <thead><tr><th>"figure"</th><th>"bytes"</th><th>"GB (GiB)"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                }
                .into_any()
            }
        })
    };
    view! {
        <section class="diffusion" data-testid="diffusion">
            <details>
                <summary>"Diffusion pipeline (diffusers): an image or video model by its Hub id or its folder"</summary>
                <p class="hint">"Reads the pipeline's model_index.json and each component's config.json (no weights), then answers as "<code>"gpumem-agent estimate --diffusers"</code>" does, on the card chosen above."</p>
                <form class="diffusion-model" on:submit=move |ev| { ev.prevent_default(); fetch(); }>
                    <label class="field" for="diffusion-model"><span class="label">"Pipeline"</span>
                        <input id="diffusion-model" data-testid="diffusion-model" type="text"
                            placeholder="stabilityai/stable-diffusion-xl-base-1.0"
                            prop:value=move || model.get()
                            on:input=move |ev| model.set(event_target_value(&ev))/>
                    </label>
                    <button type="submit" data-testid="diffusion-go" prop:disabled=move || busy.get()>"Read"</button>
                    <details class="diffusion-access">
                        <summary>"Revision, access token"</summary>
                        <label>"Revision" <input data-testid="diffusion-revision" type="text" placeholder="main"
                            prop:value=move || revision.get() on:input=move |ev| revision.set(event_target_value(&ev))/></label>
                        <label>"Access token (gated pipelines, e.g. FLUX.1-dev)" <input data-testid="diffusion-token" type="password" autocomplete="off"
                            prop:value=move || token.get() on:input=move |ev| token.set(event_target_value(&ev))/></label>
                        <p class="hint">"The token stays in this page's memory: not in the link, not stored; it goes to the Hub only."</p>
                    </details>
                </form>
                <div class="drop diffusion-drop" data-testid="diffusion-drop" class:dragging=move || dragging.get()
                    on:dragover=move |ev: web_sys::DragEvent| { ev.prevent_default(); dragging.set(true); }
                    on:dragleave=move |_| dragging.set(false)
                    on:drop=on_drop>
                    <label for="diffusion-folder" class="drop-label">
                        <strong>"Or a pipeline folder on this computer"</strong>
                        " — drop or pick it: only model_index.json and each component's config.json are read, in this browser; no weights, nothing uploaded."
                    </label>
                    <input type="file" id="diffusion-folder" data-testid="diffusion-folder"
                        prop:webkitdirectory=true multiple on:change=on_pick/>
                </div>
                <div class="diffusion-fields">{inputs}</div>
                <p class="status" role="status" data-testid="diffusion-status">{move || status.get()}</p>
                <div class="diffusion-answer" data-testid="diffusion-answer">{shown}</div>
            </details>
        </section>
    }
}
