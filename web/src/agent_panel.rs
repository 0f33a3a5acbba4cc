//! The agent panel: pairing state, the GPU environment, the bounded
//! measurement form, and — as phases arrive — the phases table beside gpumem-core's
//! prediction and a timeline chart of the counters.
//!
//! The WebSocket lives here and only here: it is opened by an `Effect` when a pairing
//! target is set, each of its events feeds [`Received`], and it is closed by
//! `on_cleanup` (or when another target replaces it). Everything it received stays in
//! [`Received`] when it closes.

use gpumem_core::units::{Bytes, group_digits};
use gpumem_proto::results::{Dtype, EnvironmentReport, Fact, PhaseName, Status};
use gpumem_proto::sheet::{ObservationSource, ObservedPhase};
use gpumem_proto::wire::{ClientMessage, MeasureRequest, PROTOCOL_VERSION, TraceRequest};
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::{CloseEvent, Event, MessageEvent, WebSocket};

use crate::agent::{
    After, Link, PairTarget, Received, RunRecord, RunState, TraceView, observed_overhead,
    parse_pairing_url, prediction_for, predictions,
};
use crate::state::Form;

/// An open WebSocket and the callbacks it holds (dropped together).
struct Conn {
    ws: WebSocket,
    _on_open: Closure<dyn FnMut(Event)>,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_close: Closure<dyn FnMut(CloseEvent)>,
}

/// The page's handle on the agent: what it received, where it pairs, and the socket.
#[derive(Clone, Copy)]
pub struct Agent {
    /// Everything received (kept when the agent goes away).
    pub received: RwSignal<Received>,
    /// Where to pair; setting it (re)connects.
    pub target: RwSignal<Option<PairTarget>>,
    conn: StoredValue<Option<Conn>, LocalStorage>,
}

impl Agent {
    /// A handle with nothing received, pairing with `target` if given.
    pub fn new(target: Option<PairTarget>) -> Agent {
        Agent {
            received: RwSignal::new(Received::default()),
            target: RwSignal::new(target),
            conn: StoredValue::new_local(None),
        }
    }

    /// Closes the connection on purpose: its callbacks are detached first, so this is
    /// not reported as the agent going away. Never called from the socket's own
    /// callbacks (it drops them).
    fn close(&self) {
        self.conn.update_value(|c| {
            if let Some(c) = c.take() {
                c.ws.set_onopen(None);
                c.ws.set_onmessage(None);
                c.ws.set_onclose(None);
                let _ = c.ws.close();
            }
        });
    }

    /// Sends one message; a closed socket is reported in the notice.
    pub fn send(&self, message: &ClientMessage) {
        let sent = self.conn.with_value(|c| {
            c.as_ref().is_some_and(|c| {
                c.ws.ready_state() == WebSocket::OPEN
                    && c.ws.send_with_str(&message.to_json()).is_ok()
            })
        });
        if !sent {
            self.received.update(|r| {
                r.notice = Some("not sent: the connection to the agent is not open".into());
            });
        }
    }

    /// Opens the WebSocket to `target` and wires its events into [`Received`].
    fn connect(self, target: PairTarget) {
        self.close();
        let host = target.host.clone();
        self.received
            .update(|r| r.link = Link::Connecting { host: host.clone() });
        let ws = match WebSocket::new(&target.ws_url()) {
            Ok(ws) => ws,
            Err(_) => {
                self.received.update(|r| {
                    r.link = Link::Gone {
                        message: format!("Could not open a WebSocket to {host}."),
                    }
                });
                return;
            }
        };
        let hello_ws = ws.clone();
        let on_open = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
            let hello = ClientMessage::Hello {
                version: PROTOCOL_VERSION,
                client: Some(concat!("gpumem-web ", env!("CARGO_PKG_VERSION")).into()),
            };
            let _ = hello_ws.send_with_str(&hello.to_json());
        });
        let received = self.received;
        let msg_ws = ws.clone();
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |ev: MessageEvent| {
            let Some(text) = ev.data().as_string() else {
                received.update(|r| r.notice = Some("the agent sent a binary message".into()));
                return;
            };
            let after = received.try_update(|r| r.apply_text(&text, &host));
            if after == Some(After::Close) {
                let _ = msg_ws.close();
            }
        });
        let on_close = Closure::<dyn FnMut(CloseEvent)>::new(move |ev: CloseEvent| {
            let reason = ev.reason();
            received.update(|r| r.went_away(&reason));
        });
        ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        self.conn.set_value(Some(Conn {
            ws,
            _on_open: on_open,
            _on_message: on_message,
            _on_close: on_close,
        }));
    }
}

/// How byte figures are shown in the phases table.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    Bytes,
    Gb,
    Gib,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Gb => "GB",
            Unit::Gib => "GiB",
        }
    }

    fn show(self, b: Option<u64>) -> String {
        match b {
            // Not read is not zero (method §7).
            None => "—".into(),
            Some(b) => match self {
                Unit::Bytes => group_digits(b),
                Unit::Gb => Bytes(b).gb_string(4),
                Unit::Gib => Bytes(b).gib_string(4),
            },
        }
    }
}

fn fact<T: ToString>(f: &Fact<T>) -> (String, bool) {
    match (&f.value, &f.reason) {
        (Some(v), _) => (v.to_string(), true),
        (None, Some(r)) => (format!("unknown — {r}"), false),
        (None, None) => ("unknown".into(), false),
    }
}

fn three(b: u64) -> String {
    Bytes(b).describe()
}

/// The whole agent panel.
#[component]
pub fn AgentPanel() -> impl IntoView {
    let agent = expect_context::<Agent>();
    let received = agent.received;
    // (Re)connect whenever a target is set; close on unmount.
    Effect::new(move |_| {
        if let Some(t) = agent.target.get() {
            agent.connect(t);
        }
    });
    on_cleanup(move || agent.close());

    let link = Memo::new(move |_| received.with(|r| r.link.clone()));
    let paste = RwSignal::new(String::new());
    let paste_error = RwSignal::new(None::<String>);
    let pair = move || match parse_pairing_url(&paste.get_untracked()) {
        Ok(t) => {
            paste_error.set(None);
            agent.target.set(Some(t));
        }
        Err(e) => paste_error.set(Some(e)),
    };
    let runs_len = Memo::new(move |_| received.with(|r| r.runs.len()));
    view! {
        <section class="panel agent" aria-label="GPU agent" data-testid="agent-panel">
            <div class="agent-head">
                <h2>"Observed — GPU agent"</h2>
                <p class=move || format!("link {}", link.get().key()) role="status"
                    data-testid="pair-state" data-state=move || link.get().key()
                    data-measure=move || match received.with(|r| r.can_measure()) { Some(true) => "yes", Some(false) => "no", None => "" }>
                    {move || link.get().describe()}
                    {move || match received.with(|r| r.can_measure()) {
                        Some(true) => " Live measurements on its GPU.",
                        Some(false) => " This machine cannot measure (see below): replays and your own runs still show here.",
                        None => "",
                    }}
                </p>
            </div>
            {move || matches!(link.get(), Link::NotPaired | Link::Gone { .. } | Link::Refused { .. }).then(|| view! {
                <div class="pair-form">
                    <label for="pair-url">
                        "Run " <code>"gpumem-agent serve"</code>
                        " on the GPU machine and open the URL it prints — or paste that URL here:"
                    </label>
                    <div class="row">
                        <input type="text" id="pair-url" data-testid="pair-url" autocomplete="off"
                            spellcheck="false" placeholder="http://127.0.0.1:PORT/#token=…"
                            prop:value=move || paste.get()
                            on:input=move |ev| paste.set(event_target_value(&ev))
                            on:keydown=move |ev: web_sys::KeyboardEvent| if ev.key() == "Enter" { pair() }/>
                        <button type="button" data-testid="pair-button" on:click=move |_| pair()>"Pair"</button>
                    </div>
                    <p class="msg error" role="alert">{move || paste_error.get()}</p>
                </div>
            })}
            {move || received.with(|r| r.notice.clone()).map(|n| view! {
                <p class="banner warn" role="status" data-testid="agent-notice">"Agent: " {n}</p>
            })}
            {move || received.with(|r| r.environment.clone()).map(|e| view! { <EnvironmentView e/> })}
            {move || matches!(link.get(), Link::Paired { .. }).then(|| view! { <TracePanel/> })}
            // An agent showing a workload measures nothing on request: no form then.
            {move || (matches!(link.get(), Link::Paired { .. }) && received.with(|r| r.workloads.is_empty()))
                .then(|| view! { <MeasureForm/> })}
            <div class="runs">
                {move || (0..runs_len.get()).rev().take(MAX_RUNS_SHOWN).map(|i| view! { <RunView index=i/> }).collect_view()}
                {move || more_note(runs_len.get(), MAX_RUNS_SHOWN, "older run(s) not shown here; the sheet keeps them all")}
            </div>
            <div class="workloads">
                {move || received.with(|r| r.workloads.iter().rev().cloned().collect::<Vec<_>>())
                    .into_iter()
                    .map(|record| view! { <crate::workload::WorkloadView record/> })
                    .collect_view()}
            </div>
        </section>
    }
}

/// "Trace this workload": the dimensioner's typical workload traced on the agent's
/// CPU, each traced line beside the estimate's line it replaces.
#[component]
fn TracePanel() -> impl IntoView {
    let agent = expect_context::<Agent>();
    let computed = expect_context::<Memo<crate::compute::Computed>>();
    let form = expect_context::<Form>();
    let received = agent.received;
    let next = StoredValue::new(0u64);
    let ask = move |_| {
        // Inserted one by one: `collect` into a map sorts, and a sort instance costs the
        // wasm kilobytes.
        let mut inputs = std::collections::BTreeMap::new();
        computed.with_untracked(|c| {
            for (k, v) in c.workloads.first().map_or(&[][..], |w| &w.pairs[..]) {
                inputs.insert((*k).to_owned(), v.clone());
            }
        });
        // The page's engine keys too: they decide what they decide of the estimate the
        // agent sets beside each traced line, as for the page's own figures.
        for (k, v) in untrack(|| form.page_pairs()) {
            if gpumem_core::engine::is_engine_key(k) {
                inputs.insert(k.to_owned(), v);
            }
        }
        let id = next.get_value() + 1;
        next.set_value(id);
        received.update(|r| r.trace = TraceView::Asked(id));
        agent.send(&ClientMessage::TraceEstimate(TraceRequest { id, inputs }));
    };
    let asked = move || received.with(|r| matches!(r.trace, TraceView::Asked(_)));
    view! {
        <div class="trace" data-testid="trace-panel">
            <h3>"Traced — the typical workload, the model's code on the agent's CPU (no GPU)"</h3>
            <button type="button" data-testid="trace-button" on:click=ask disabled=asked>
                "Trace this workload"
            </button>
            {move || received.with(|r| match &r.trace {
                TraceView::Traced(lines, allocated, reserved, detail) => view! {
                    <ul data-testid="trace-table">
                        {lines.iter().map(|t| view! {
                            <li data-key=t.key.clone() data-bytes=t.bytes.to_string()>
                                {format!(
                                    "{}: estimate {} ({}) · traced {}",
                                    t.label,
                                    t.estimate_bytes.map_or("—".into(), three),
                                    t.estimate_basis.as_deref().unwrap_or("none"),
                                    three(t.bytes)
                                )}
                            </li>
                        }).collect_view()}
                    </ul>
                    <p data-testid="trace-detail">
                        {format!("Peak allocated {}, reserved {}. {detail}", three(*allocated), three(*reserved))}
                    </p>
                }.into_any(),
                TraceView::Failed(why) => view! { <p class="msg error" role="alert" data-testid="trace-error">{why.clone()}</p> }.into_any(),
                _ => ().into_any(),
            })}
        </div>
    }
}

/// Runs drawn at once, newest first. A sheet (or an agent) can carry any number; the
/// page draws a bounded view so a hostile file cannot freeze it (20 000
/// phases took 15 s), and says how many it left out.
pub const MAX_RUNS_SHOWN: usize = 20;

/// Phases drawn per run, in the table and the timeline (a real run has a few dozen).
pub const MAX_PHASES_SHOWN: usize = 200;

/// "n more …" when `total` exceeds what is shown.
fn more_note(total: usize, shown: usize, what: &'static str) -> Option<impl IntoView> {
    let hidden = total.saturating_sub(shown);
    (hidden > 0).then(|| {
        view! { <p class="note more" data-testid="more-note">{group_digits(hidden as u64)} " " {what} "."</p> }
    })
}

/// What the agent reported about its GPU and software; unknown facts with their reason.
#[component]
fn EnvironmentView(e: EnvironmentReport) -> impl IntoView {
    let (driver_lib, _) = fact(&e.cuda_driver_library);
    let (count, _) = fact(&e.device_count);
    view! {
        <div class="environment" data-testid="environment">
            <h3>"Environment"</h3>
            <p class="small muted">
                "Agent " {e.agent_version.clone()} " · " {e.os.clone()} " · CUDA driver library: "
                {driver_lib} " · devices: " {count}
            </p>
            {(!e.missing.is_empty()).then(|| view! {
                <p class="banner warn">"Cannot measure here: " {e.missing.join("; ")}</p>
            })}
            {e.devices.iter().map(|d| {
                let row = |label: &'static str, (text, known): (String, bool)| view! {
                    <dt>{label}</dt><dd class:muted=!known>{text}</dd>
                };
                let total = match d.total_memory_bytes.value {
                    Some(b) => (three(b), true),
                    None => fact(&d.total_memory_bytes),
                };
                view! {
                    <dl class="env-device" data-device=d.device.clone()>
                        <dt>"Device"</dt><dd>{d.device.clone()}</dd>
                        {row("GPU", fact(&d.gpu_name))}
                        {row("Total memory (device-reported)", total)}
                        {row("Driver", fact(&d.driver_version))}
                        {row("CUDA driver API", fact(&d.cuda_driver_api_version))}
                        {row("Compute capability", fact(&d.compute_capability))}
                        <dt>"Allocator"</dt>
                        <dd>{d.allocator.backend.clone()} <span class="muted small">" — " {d.allocator.pool.clone()}</span></dd>
                        <dt>"Binding"</dt><dd>{d.binding.clone()}</dd>
                    </dl>
                }
            }).collect_view()}
        </div>
    }
}

/// The bounded built-in measurement: the only thing the page can ask the agent to run.
#[component]
fn MeasureForm() -> impl IntoView {
    let agent = expect_context::<Agent>();
    let received = agent.received;
    let s = MeasureRequest::SEED_EXAMPLE;
    let batch = RwSignal::new(s.batch.to_string());
    let context = RwSignal::new(s.context.to_string());
    let width = RwSignal::new(s.width.to_string());
    let layers = RwSignal::new(s.layers.to_string());
    let dtype = RwSignal::new(s.dtype.as_str().to_string());
    let warmup = RwSignal::new(s.warmup.to_string());
    let repeats = RwSignal::new(s.repeats.to_string());
    let trim = RwSignal::new(false);
    let request = Memo::new(move |_| -> Result<MeasureRequest, String> {
        let n = |name: &str, sig: RwSignal<String>| {
            let t: String = sig
                .get()
                .chars()
                .filter(|c| !c.is_whitespace() && *c != '_')
                .collect();
            t.parse::<u64>()
                .map_err(|_| format!("{name}: {:?} is not a whole number", sig.get()))
        };
        let req = MeasureRequest {
            batch: n("batch", batch)?,
            context: n("context", context)?,
            width: n("width", width)?,
            layers: n("layers", layers)?,
            dtype: match dtype.get().as_str() {
                "float16" => Dtype::Float16,
                "bfloat16" => Dtype::Bfloat16,
                _ => Dtype::Float32,
            },
            warmup: n("warmup", warmup)?,
            repeats: n("repeats", repeats)?,
            trim_between_repeats: trim.get(),
        };
        match received.with(|r| r.limits) {
            Some(limits) => req.validate(&limits).map(|()| req),
            None => Err("waiting for the agent's bounds".into()),
        }
    });
    let running = Memo::new(move |_| received.with(|r| r.running().is_some()));
    let cannot = Memo::new(move |_| received.with(|r| r.can_measure() == Some(false)));
    let field = |id: &'static str, label: &'static str, sig: RwSignal<String>| {
        view! {
            <div class="field">
                <label for=id>{label}</label>
                <input type="text" id=id data-testid=id inputmode="numeric" autocomplete="off"
                    prop:value=move || sig.get() on:input=move |ev| sig.set(event_target_value(&ev))/>
            </div>
        }
    };
    view! {
        <fieldset class="group measure">
            <legend>"Measure the agent's built-in network"</legend>
            <p class="note">
                "A small dense network: layers × Linear(width, width) + ReLU on a [batch × context, width] "
                "synthetic input. It checks the method on this GPU; it does not measure your model."
            </p>
            <div class="grid4">
                {field("m-batch", "Batch", batch)}
                {field("m-context", "Context (rows)", context)}
                {field("m-width", "Width", width)}
                {field("m-layers", "Layers", layers)}
                <div class="field">
                    <label for="m-dtype">"Dtype"</label>
                    <select id="m-dtype" data-testid="m-dtype" prop:value=move || dtype.get()
                        on:change=move |ev| dtype.set(event_target_value(&ev))>
                        <option value="float32">"float32"</option>
                        <option value="float16">"float16"</option>
                        <option value="bfloat16">"bfloat16"</option>
                    </select>
                </div>
                {field("m-warmup", "Warm-up passes", warmup)}
                {field("m-repeats", "Warm repeats", repeats)}
                <div class="field bool">
                    <label for="m-trim">"Trim pool between repeats"</label>
                    <input type="checkbox" id="m-trim" prop:checked=move || trim.get()
                        on:change=move |ev| trim.set(event_target_checked(&ev))/>
                </div>
            </div>
            <p class="msg error" role="alert" data-testid="measure-error">
                {move || request.get().err()}
            </p>
            <div class="row">
                <button type="button" class="primary" data-testid="measure-start"
                    disabled=move || running.get() || cannot.get() || request.get().is_err()
                    title=move || cannot.get().then_some("this machine cannot measure: see the environment above")
                    on:click=move |_| {
                        if let Ok(req) = request.get_untracked() {
                            agent.send(&ClientMessage::StartMeasure(req));
                        }
                    }>
                    {move || if received.with(|r| r.replay()) { "Start replay" } else { "Start measurement" }}
                </button>
                <button type="button" data-testid="measure-cancel" disabled=move || !running.get()
                    on:click=move |_| agent.send(&ClientMessage::Cancel)>"Cancel"</button>
                {move || received.with(|r| r.limits).map(|l| view! {
                    <span class="muted small">
                        "Agent bounds: batch ≤ " {l.max_batch} ", context ≤ " {l.max_context} ", width ≤ "
                        {l.max_width} ", layers ≤ " {l.max_layers} ", repeats ≤ " {l.max_repeats}
                    </span>
                })}
            </div>
        </fieldset>
    }
}

/// One run: its header, the observed overhead offer, the phases table and the chart.
#[component]
fn RunView(index: usize) -> impl IntoView {
    let agent = expect_context::<Agent>();
    let form = expect_context::<Form>();
    let run = Memo::new(move |_| agent.received.with(|r| r.runs.get(index).cloned()));
    let unit = RwSignal::new(Unit::Bytes);
    move || {
        let RunRecord {
            state,
            run: observed,
            ..
        } = run.get()?;
        let replay = observed.source == ObservationSource::Replay;
        let q = observed.request;
        let (state_text, state_cls) = match state {
            RunState::Running => ("running — phases arrive as they are read", "running"),
            RunState::Finished if observed.ok => ("finished: every phase passed", "ok"),
            RunState::Finished => ("finished: a phase failed (recorded)", "failed"),
            RunState::Failed => ("ended without results", "failed"),
            RunState::Interrupted => ("interrupted: the agent went away", "failed"),
            RunState::Imported => ("imported from a sheet", "imported"),
        };
        let overhead = observed_overhead(&observed.phases);
        let total = observed.phases.len();
        let shown: Vec<ObservedPhase> = observed
            .phases
            .iter()
            .take(MAX_PHASES_SHOWN)
            .cloned()
            .collect();
        let set_reserve = form.sig("reserve-bytes");
        Some(view! {
            <article class="run" data-testid="run" data-run=index.to_string() data-state=state_cls
                data-source=if replay { "replay" } else { "live" }>
                <h3>
                    "Run " {index + 1} " — "
                    {format!("batch {} × context {} × width {}, {} layers, {}, warm-up {}, {} repeats{}",
                        q.batch, q.context, q.width, q.layers, q.dtype, q.warmup, q.repeats,
                        if q.trim_between_repeats { ", pool trimmed between repeats" } else { "" })}
                    " "
                    {if replay {
                        view! { <span class="tag replay" data-testid="replay-label"
                            title="Pushed from a saved results file: nothing was measured now">"replay"</span> }.into_any()
                    } else {
                        view! { <span class="tag live">"live"</span> }.into_any()
                    }}
                    " " <span class=format!("tag state {state_cls}") data-testid="run-state">{state_text}</span>
                </h3>
                {observed.failure.clone().map(|f| view! { <p class="banner warn">{f}</p> })}
                {overhead.map(|o| view! {
                    <div class="overhead" data-testid="overhead">
                        <p>
                            <strong>"Observed non-pool device memory: " {three(o.bytes)}</strong>
                            <span class="tag observed">"observed"</span>
                            <br/>
                            <span class="small">
                                {if o.per_process { "This process's device memory (NVML)" } else { "Device memory used (cuMemGetInfo, every process on the device)" }}
                                " minus the pool's reserved bytes, read at the same checkpoint (" {o.phase.as_str()} ", "
                                {o.checkpoint} "); the largest over the run. It holds the CUDA context and library "
                                "workspaces" {if o.per_process { "" } else { ", and anything other processes hold" }} "."
                            </span>
                        </p>
                        <button type="button" data-testid="use-as-reserve"
                            on:click=move |_| set_reserve.set(o.bytes.to_string())>
                            "Use as reserve (reserve-bytes = " {group_digits(o.bytes)} ")"
                        </button>
                    </div>
                })}
                <div class="units row">
                    <span class="small muted">"Figures in "</span>
                    {[Unit::Bytes, Unit::Gb, Unit::Gib].into_iter().map(|u| view! {
                        <button type="button" class="linkish" aria-pressed=move || (unit.get() == u).to_string()
                            on:click=move |_| unit.set(u)>{u.name()}</button>
                    }).collect_view()}
                </div>
                <PhasesTable phases=shown.clone() request=q unit replay/>
                <Timeline phases=shown request=q/>
                {more_note(total, MAX_PHASES_SHOWN, "more phase(s) not drawn; the sheet keeps them all")}
            </article>
        })
    }
}

fn phase_label(p: &ObservedPhase) -> String {
    match p.repeat {
        Some(r) => format!("{} #{}", p.phase, u64::from(r) + 1),
        None => p.phase.to_string(),
    }
}

/// Pool counters, reserved − allocated at each checkpoint, gpumem-core's prediction and
/// the device-level figures, each in its own columns.
#[component]
fn PhasesTable(
    /// The phases received so far.
    phases: Vec<ObservedPhase>,
    /// The run's dimensions (for the prediction).
    request: MeasureRequest,
    /// How figures are shown.
    unit: RwSignal<Unit>,
    /// Label the table as a replay.
    replay: bool,
) -> impl IntoView {
    let predicted = predictions(&request).unwrap_or_default();
    move || {
        let u = unit.get();
        let n = u.name();
        let cell = move |b: Option<u64>| {
            let title = b
                .map(three)
                .unwrap_or_else(|| "not read (null, never 0)".into());
            view! { <td class="num" title=title>{u.show(b)}</td> }
        };
        let rows = phases
            .iter()
            .map(|p| {
                let c = prediction_for(&predicted, p.phase);
                let pool = p.pool;
                let gap = |r: Option<u64>, a: Option<u64>| r.zip(a).and_then(|(r, a)| r.checked_sub(a));
                let d = &p.device_level;
                let ok = p.status == Status::Ok;
                view! {
                    <tr data-testid="phase-row" data-phase=p.phase.as_str() class:failed=!ok>
                        <th scope="row">{phase_label(p)} <span class="muted small">" " {p.device.clone()}</span></th>
                        <td>
                            <span class=if ok { "tag ok" } else { "tag failed" }>{if ok { "ok" } else { "failed" }}</span>
                            {p.error.clone().map(|e| view! { <span class="error small block">{e}</span> })}
                        </td>
                        {cell(pool.allocated_start_bytes)}
                        {cell(pool.allocated_peak_bytes)}
                        {cell(pool.allocated_end_bytes)}
                        {cell(c.map(|c| c.start.get()))}
                        {cell(c.map(|c| c.peak.get()))}
                        {cell(c.map(|c| c.end.get()))}
                        {cell(pool.reserved_start_bytes)}
                        {cell(pool.reserved_peak_bytes)}
                        {cell(pool.reserved_end_bytes)}
                        {cell(gap(pool.reserved_start_bytes, pool.allocated_start_bytes))}
                        {cell(gap(pool.reserved_end_bytes, pool.allocated_end_bytes))}
                        {cell(d.used_start_bytes)}
                        {cell(d.used_end_bytes)}
                        {cell(d.process_used_start_bytes)}
                        {cell(d.process_used_end_bytes)}
                    </tr>
                }
            })
            .collect_view();
        view! {
            <div class="scroll">
                <table class="phases" data-testid="phases-table">
                    <caption>
                        {if replay { "Replay of a saved results file (nothing measured now). " } else { "" }}
                        "Phases as the agent read them, in " {n} ". "
                        <strong>"Reserved − allocated"</strong>
                        " is read at one checkpoint (start or end), never as the difference of the two peaks: "
                        "each peak may come from a different moment, so their difference describes no moment at all. "
                        "Device-level columns have a broader scope (the CUDA context, library workspaces, other processes) "
                        "and are never added to the pool figures. — means not read."
                    </caption>
                    <thead>
                        <tr>
                            <th rowspan="2" scope="col">"Phase"</th>
                            <th rowspan="2" scope="col">"Status"</th>
                            <th colspan="3" scope="colgroup" class="obs">"Allocated, pool (" {n} ") — observed"</th>
                            <th colspan="3" scope="colgroup" class="comp">"Allocated (" {n} ") — computed, gpumem-core"</th>
                            <th colspan="3" scope="colgroup" class="obs">"Reserved, pool (" {n} ") — observed"</th>
                            <th colspan="2" scope="colgroup" class="obs">"Reserved − allocated, same checkpoint (" {n} ")"</th>
                            <th colspan="2" scope="colgroup" class="dev">"Device used, cuMemGetInfo (" {n} ")"</th>
                            <th colspan="2" scope="colgroup" class="dev">"This process, NVML (" {n} ")"</th>
                        </tr>
                        <tr>
                            {["start", "peak", "end", "start", "peak", "end", "start", "peak", "end", "at start", "at end", "start", "end", "start", "end"]
                                .into_iter().map(|h| view! { <th scope="col" class="num">{h}</th> }).collect_view()}
                        </tr>
                    </thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
        }
    }
}

const CHART_W: u64 = 1000;
const PANEL_H: u64 = 150;

/// Polylines for one series, broken where a value was not read.
fn series(points: &[(u64, Option<u64>)], max: u64, top: u64) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for (x, v) in points {
        match v {
            Some(v) => {
                // In u128 and clamped to the panel: counters up to u64::MAX stay on it.
                let h = (u128::from(*v) * u128::from(PANEL_H) / u128::from(max.max(1)))
                    .min(u128::from(PANEL_H));
                let y = top + PANEL_H - u64::try_from(h).unwrap_or(PANEL_H);
                if !current.is_empty() {
                    current.push(' ');
                }
                current.push_str(&format!("{x},{y}"));
            }
            None if !current.is_empty() => out.push(std::mem::take(&mut current)),
            None => {}
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The counters across phases: pool allocated and reserved with the computed allocated
/// (top), and the device-level figures on their own scale (bottom), each phase drawn as
/// start → peak → end.
#[component]
fn Timeline(phases: Vec<ObservedPhase>, request: MeasureRequest) -> impl IntoView {
    if phases.is_empty() {
        return None;
    }
    let predicted = predictions(&request).unwrap_or_default();
    // The caller passes at most MAX_PHASES_SHOWN phases; the arithmetic is saturating
    // anyway. Slot j of 3n is centred at (2j + 1) · W / 6n, so the chart spans the
    // whole width at any n (a whole-number step was 0 beyond 333 phases).
    let n = u64::try_from(phases.len()).unwrap_or(u64::MAX);
    let slots6 = n.saturating_mul(6).max(1);
    let x = |i: usize, k: u64| {
        let j = u64::try_from(i)
            .unwrap_or(u64::MAX)
            .saturating_mul(3)
            .saturating_add(k);
        j.saturating_mul(2)
            .saturating_add(1)
            .saturating_mul(CHART_W)
            / slots6
    };
    let sep_at = |i: usize| u64::try_from(i).unwrap_or(u64::MAX).saturating_mul(CHART_W) / n.max(1);
    let mut alloc = Vec::new();
    let mut reserved = Vec::new();
    let mut computed = Vec::new();
    let mut used = Vec::new();
    let mut process = Vec::new();
    for (i, p) in phases.iter().enumerate() {
        let c = prediction_for(&predicted, p.phase);
        let pool = p.pool;
        alloc.extend([
            (x(i, 0), pool.allocated_start_bytes),
            (x(i, 1), pool.allocated_peak_bytes),
            (x(i, 2), pool.allocated_end_bytes),
        ]);
        reserved.extend([
            (x(i, 0), pool.reserved_start_bytes),
            (x(i, 1), pool.reserved_peak_bytes),
            (x(i, 2), pool.reserved_end_bytes),
        ]);
        computed.extend([
            (x(i, 0), c.map(|c| c.start.get())),
            (x(i, 1), c.map(|c| c.peak.get())),
            (x(i, 2), c.map(|c| c.end.get())),
        ]);
        used.extend([
            (x(i, 0), p.device_level.used_start_bytes),
            (x(i, 2), p.device_level.used_end_bytes),
        ]);
        process.extend([
            (x(i, 0), p.device_level.process_used_start_bytes),
            (x(i, 2), p.device_level.process_used_end_bytes),
        ]);
    }
    let max_of = |sets: &[&Vec<(u64, Option<u64>)>]| {
        sets.iter()
            .flat_map(|s| s.iter().filter_map(|(_, v)| *v))
            .max()
            .map_or(1, |m| m.saturating_add(m / 20))
    };
    let pool_max = max_of(&[&alloc, &reserved, &computed]);
    let dev_max = max_of(&[&used, &process]);
    let dev_top = PANEL_H + 40;
    let lines = |pts: &[(u64, Option<u64>)], max: u64, top: u64, class: &'static str| {
        series(pts, max, top)
            .into_iter()
            .map(|p| view! { <polyline points=p class=class/> })
            .collect_view()
    };
    let labels = phases
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let short = match (p.phase, p.repeat) {
                (PhaseName::ModelLoad, _) => "load".to_string(),
                (PhaseName::Inputs, _) => "inputs".into(),
                (PhaseName::ColdForward, _) => "cold".into(),
                (PhaseName::Warmup, _) => "warmup".into(),
                (PhaseName::WarmForward, r) => format!("warm{}", r.map_or(0, |r| u64::from(r) + 1)),
            };
            let sep = sep_at(i);
            view! {
                <line x1=sep.to_string() x2=sep.to_string() y1="0" y2=(2 * PANEL_H + 40).to_string() class="sep"/>
                <text x=x(i, 1).to_string() y=(2 * PANEL_H + 58).to_string() class="lbl">{short}</text>
            }
        })
        .collect_view();
    Some(view! {
        <figure class="timeline" data-testid="timeline">
            <svg viewBox=format!("0 0 {CHART_W} {}", 2 * PANEL_H + 66) role="img"
                aria-label="Counters across phases: pool allocated, reserved and computed allocated; device used on its own scale">
                <text x="4" y="12" class="axis">{format!("y: bytes in the pool, 0 to {}", three(pool_max))}</text>
                {lines(&computed, pool_max, 0, "s-computed")}
                {lines(&reserved, pool_max, 0, "s-reserved")}
                {lines(&alloc, pool_max, 0, "s-allocated")}
                <text x="4" y=(dev_top + 12).to_string() class="axis">{format!("y: device level, bytes on its own scale, 0 to {}", three(dev_max))}</text>
                {lines(&used, dev_max, dev_top, "s-used")}
                {lines(&process, dev_max, dev_top, "s-process")}
                {labels}
            </svg>
            <figcaption class="legend">
                <span><i class="sw s-allocated"></i>"allocated (observed)"</span>
                <span><i class="sw s-reserved"></i>"reserved (observed)"</span>
                <span><i class="sw s-computed"></i>"allocated (computed)"</span>
                <span><i class="sw s-used"></i>"device used, cuMemGetInfo"</span>
                <span><i class="sw s-process"></i>"this process, NVML"</span>
                <span class="muted">"x: the phases in order; each one's start, peak (its moment inside the phase is not known) and end."</span>
            </figcaption>
        </figure>
    })
}
