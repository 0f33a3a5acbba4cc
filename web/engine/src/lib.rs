//! gpumem-engine: the estimator and the engine rules the dimensioner loads once its
//! first screen is up — a workload's estimate ([`estimate`]), the answer (under a
//! serving engine, or on the estimate without one: [`answer`]) and the engine section
//! ([`panel`]).
//!
//! Built as a wasm-bindgen module of its own (`scripts/build-web.sh` →
//! `dist/engine-*/`), so the dimensioner's wasm carries no estimate (it shows the
//! inputs at once and the figures once this module is there), no engine's rules,
//! speculative decoding or the `-ot` placement: the page answers with the same rules as
//! `gpumem-agent estimate --engine`, every engine of the registry
//! ([`gpumem_core::engine::ENGINES`]), in its order. Every figure is [`gpumem_core`]'s; this crate routes the
//! page's text to the core and the answer back as text ([`gpumem_proto::rules`]).

use std::sync::OnceLock;

use gpumem_core::EstimateError;
use gpumem_core::arch::Architecture;
use gpumem_core::catalogue::{CATALOGUE, resolve};
use gpumem_core::engine::{self, EngineBudget, EngineId, EngineParams, Outcome};
use gpumem_core::estimate::{EstimateInput, estimate as estimate_all};
use gpumem_core::headline::{Basis, ByEstimate, headline, inputs_line};
use gpumem_core::params::from_pairs;
use gpumem_core::presets::{PRESETS, is_shape_key};
use gpumem_core::units::{group_digits, signed_gib_string, signed_group_digits};
use gpumem_proto::rules::{self, Answer, Panel, PanelRow, Reading, RulesRequest};
use gpumem_proto::training::{read_estimate, write_estimate};
use wasm_bindgen::prelude::*;

pub mod view;

/// The estimate of one workload: a [`gpumem_proto::training`] estimate document (the
/// estimate, or why there is none). A refused pair is left at its default, as the
/// page leaves it (the page reports it beside its field); the estimate is the core's,
/// every stage ([`gpumem_core::estimate::estimate`]: for an input that trains nothing,
/// the same value as inference's own, which the core's tests check preset by preset).
#[wasm_bindgen]
pub fn estimate(request: String) -> String {
    write_estimate(&match rules::read_request(&request) {
        Ok(r) => estimate_all(&input_read(&r)),
        Err(e) => Err(EstimateError::invalid("input", e)),
    })
}

/// The answer under the page's engine for one workload: a [`gpumem_proto::rules`]
/// answer document (the headline, or why there is none).
#[wasm_bindgen]
pub fn answer(request: String) -> String {
    rules::write_answer(&rules::read_request(&request).and_then(|r| answer_of(&r)))
}

/// The engine section for one workload on the page's card: a
/// [`gpumem_proto::rules::Panel`] document, or empty text when the workload has no
/// estimate (its error is shown beside its field).
#[wasm_bindgen]
pub fn panel(request: String) -> String {
    rules::read_request(&request)
        .ok()
        .and_then(|r| panel_of(&r))
        .map(|p| rules::write_panel(&p))
        .unwrap_or_default()
}

/// How the page's text reads (the workload's pairs, the page's engine keys): a
/// [`gpumem_proto::rules::Reading`] document — each refused pair's message (the
/// messages beside the fields), whether an engine is chosen and over how many cards,
/// the preset the shape is. The page carries no parser of its own.
#[wasm_bindgen]
pub fn read(request: String) -> String {
    rules::write_reading(&match rules::read_request(&request) {
        Ok(r) => reading_of(&r),
        Err(e) => Reading {
            errors: vec![(None, e)],
            ..Reading::default()
        },
    })
}

/// The answer's first line for one workload: its inputs in words, naming the model the
/// page shows (its page key `model`), as `gpumem-agent estimate` prints it; empty when
/// the workload has no estimate.
#[wasm_bindgen]
pub fn line(request: String) -> String {
    rules::read_request(&request)
        .map(|r| line_of(&r))
        .unwrap_or_default()
}

/// [`line`]'s value.
fn line_of(r: &RulesRequest) -> String {
    let model = r
        .page
        .iter()
        .find(|(k, _)| k == "model")
        .map(|(_, v)| v.as_str());
    input_of(r)
        .and_then(|input| Some(inputs_line(&input, &estimate_all(&input).ok()?, model)))
        .unwrap_or_default()
}

/// The answer's markup for the focused workload ([`view::answer_body`]): its pairs, and
/// among the page's pairs the answer document the page got (`answer`: this module's
/// or, for a training run without an engine, the training module's) and the model's
/// name (`model-name`) for the first line ([`line`]'s); the verdict line alone when
/// the document holds no answer.
#[wasm_bindgen]
pub fn answer_view(request: String) -> String {
    let Ok(r) = rules::read_request(&request) else {
        return String::new();
    };
    match rules::read_answer(view::page_value(&r, "answer").unwrap_or_default()) {
        Ok(Ok(a)) => {
            let named = RulesRequest {
                pairs: r.pairs.clone(),
                page: view::page_value(&r, "model-name")
                    .map(|m| ("model".to_string(), m.to_string()))
                    .into_iter()
                    .collect(),
                tensors: r.tensors.clone(),
            };
            view::answer_body(&line_of(&named), a)
        }
        Ok(Err(why)) | Err(why) => view::no_answer(&why),
    }
}

/// A workload card's figures ([`view::card_figures`]) from the page's pairs: its place
/// (`index`), the card field (`card`), the workload's estimate document (`estimate`)
/// and, under an engine, its answer document (`answer`); empty without an estimate.
#[wasm_bindgen]
pub fn card_view(request: String) -> String {
    let Ok(r) = rules::read_request(&request) else {
        return String::new();
    };
    let Some(Ok(Ok(est))) = view::page_value(&r, "estimate").map(read_estimate) else {
        return String::new();
    };
    let answer = view::page_value(&r, "answer")
        .and_then(|a| rules::read_answer(a).ok())
        .and_then(Result::ok);
    let i = view::page_value(&r, "index")
        .and_then(|i| i.parse().ok())
        .unwrap_or(0);
    view::card_figures(i, &est, answer, &view::target_card(&r))
}

/// The focused workload's breakdown ([`view::breakdown`]) from the page's pairs: the
/// card field (`card`) and the estimate document (`estimate`); without an estimate,
/// the headline figures as dashes.
#[wasm_bindgen]
pub fn breakdown_view(request: String) -> String {
    let Ok(r) = rules::read_request(&request) else {
        return String::new();
    };
    match view::page_value(&r, "estimate").map(read_estimate) {
        Some(Ok(Ok(est))) => view::breakdown(
            &est,
            &view::target_card(&r),
            view::page_value(&r, "card").unwrap_or_default(),
        ),
        _ => view::headline_figures(None),
    }
}

/// The engine section's figures ([`panel_of`] in markup, [`view::panel_html`]); empty
/// text when the workload has no estimate.
#[wasm_bindgen]
pub fn panel_view(request: String) -> String {
    rules::read_request(&request)
        .ok()
        .and_then(|r| panel_of(&r))
        .map(view::panel_html)
        .unwrap_or_default()
}

/// The typical workload's command line ([`view::command`]): its pairs, the page's keys
/// (the engine's flags when one is named) and whether weights were imported
/// (`imported`).
#[wasm_bindgen]
pub fn command_view(request: String) -> String {
    rules::read_request(&request)
        .map(|r| view::command(&r))
        .unwrap_or_default()
}

/// The sweep's rows ([`view::sweep_row`]) from the page's pairs: the card field
/// (`card`), then each row as its `value`, whether it is the workload's own (`base`:
/// `1`) and its estimate document (`estimate`) or why it has none (`error`).
#[wasm_bindgen]
pub fn sweep_view(request: String) -> String {
    let Ok(r) = rules::read_request(&request) else {
        return String::new();
    };
    let card = view::target_card(&r);
    let mut out = String::new();
    let mut row: Option<(u64, bool)> = None;
    for (k, v) in &r.page {
        match k.as_str() {
            "value" => row = v.parse().ok().map(|v| (v, false)),
            "base" => row = row.map(|(n, _)| (n, v == "1")),
            "estimate" | "error" => {
                let Some((n, base)) = row.take() else {
                    continue;
                };
                let est = if k == "error" {
                    Err(v.clone())
                } else {
                    match read_estimate(v) {
                        Ok(Ok(e)) => Ok(e),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(e) => Err(e),
                    }
                };
                out.push_str(&view::sweep_row(n, base, est, &card));
            }
            _ => {}
        }
    }
    out
}

/// [`read`]'s value: the pairs through `params::from_pairs` (an `Invalid` error at its
/// field, any other at none), the page's through `engine::from_pairs_among`.
pub fn reading_of(r: &RulesRequest) -> Reading {
    let (_, errors) = from_pairs(r.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let (settings, page_errors) =
        engine::from_pairs_among(r.page.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let shape: Vec<(&str, &str)> = r
        .pairs
        .iter()
        .filter(|(k, v)| is_shape_key(k) && !v.trim().is_empty())
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    Reading::of(errors, page_errors, &settings, preset_index(&shape))
}

/// The preset whose shape `shape` (the shape keys' pairs) describes, if any: the same
/// architecture and sliding window once read.
pub fn preset_index(shape: &[(&str, &str)]) -> Option<usize> {
    let (input, _) = from_pairs(shape.iter().copied());
    let s = (input.arch, input.sliding_window, input.sliding_layers);
    s.0.as_ref()?;
    preset_shapes().iter().position(|p| *p == s)
}

/// What [`preset_index`] compares: the architecture and the sliding window once read.
type Shape = (Option<Architecture>, Option<u64>, Option<u64>);

/// The presets' shapes, read once: the page asks which preset a shape is at every
/// recompute, and a shape that is none of them is compared with each.
fn preset_shapes() -> &'static [Shape] {
    static SHAPES: OnceLock<Vec<Shape>> = OnceLock::new();
    SHAPES.get_or_init(|| {
        PRESETS
            .iter()
            .map(|p| {
                let (i, _) = from_pairs(p.pairs.iter().copied());
                (i.arch, i.sliding_window, i.sliding_layers)
            })
            .collect()
    })
}

/// The workload's input as the page reads it: its pairs (a refused pair leaves its
/// default) with the imported tensors.
fn input_read(r: &RulesRequest) -> EstimateInput {
    input_with(r).0
}

/// [`input_read`] and whether every pair was read.
/// The page's engine and card decide what they decide for the command: both are read
/// by the core's one reader (`inputs::read`), as `gpumem-agent estimate` reads them.
fn input_with(r: &RulesRequest) -> (EstimateInput, bool) {
    let mut read = gpumem_core::inputs::read(
        r.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        r.page.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    read.input.tensors = r.tensors.as_ref().map(|t| t.summary.clone());
    (read.input, read.errors.is_empty())
}

/// The workload's input (its pairs and the imported tensors), or `None` when a pair is
/// refused.
fn input_of(r: &RulesRequest) -> Option<EstimateInput> {
    let (input, read) = input_with(r);
    read.then_some(input)
}

/// The engine flags among the page's pairs (other keys are skipped).
fn settings_of(page: &[(String, String)]) -> EngineParams {
    engine::from_pairs_among(page.iter().map(|(k, v)| (k.as_str(), v.as_str()))).0
}

/// The headline under the page's engine (on its card, or on the smallest catalogue
/// card that serves it), as `gpumem-agent estimate --engine` computes it; over several
/// cards, with each device's row of the budget the headline judges (the one
/// `gpumem-agent estimate --engine --card a,b` tabulates). Without an engine, the
/// estimate's headline on the page's card (or the smallest that fits), as
/// `gpumem-agent estimate` computes it.
pub fn answer_of(r: &RulesRequest) -> Result<Answer, String> {
    let input = input_of(r).ok_or("the inputs do not describe a workload yet")?;
    let est = estimate_all(&input).map_err(|e| e.to_string())?;
    let settings = settings_of(&r.page);
    if settings.engine.is_none() {
        return headline(&input, &est, settings.card.as_ref(), &ByEstimate)
            .map(Answer::from)
            .map_err(|e| e.to_string());
    }
    let basis = Basis::Engine(Box::new(settings.clone()));
    let headline = headline(&input, &est, settings.card.as_ref(), &basis)
        .map_err(|e: EstimateError| e.to_string())?;
    // Over several cards the headline judges the split on its first card with these
    // very settings (`Basis::need`): the same budget, of whose rows it keeps only the
    // most loaded one's figures.
    let devices = if settings.devices.len() > 1 {
        engine::budget(&input, &est, &settings)
            .map_err(|e| e.to_string())?
            .devices
    } else {
        Vec::new()
    };
    Ok(Answer { headline, devices })
}

/// "fits", "borderline (±margin GiB)" or "refused (margin GiB)", as the CLI says it.
pub fn outcome_text(b: &EngineBudget) -> String {
    match b.outcome {
        Outcome::Fits => "fits".into(),
        Outcome::Borderline => format!("borderline ({} GiB)", signed_gib_string(b.margin_bytes, 2)),
        Outcome::Refused => format!("refused ({} GiB)", signed_gib_string(b.margin_bytes, 2)),
    }
}

/// The engine section in words: on the page's card (`card`; the catalogue's first when
/// it names none), the largest workload that fits and each engine's budget (every
/// engine, or the one the page names) with the page's engine flags.
pub fn panel_of(r: &RulesRequest) -> Option<Panel> {
    let input = input_of(r)?;
    let est = estimate_all(&input).ok()?;
    let settings = settings_of(&r.page);
    // Several cards (llama.cpp's --tensor-split): device 0 stands for them, and the
    // budgets judge the split (the other engines' rows say they judge one card).
    let card = r
        .page
        .iter()
        .find(|(k, _)| k == "card")
        .and_then(|(_, v)| resolve(v.trim()).ok())
        .or(settings.card.filter(|_| !settings.devices.is_empty()))
        .unwrap_or(CATALOGUE[0]);
    // Every engine of the registry, in its order (or the one the page names).
    let rows = engine::all()
        .filter(|e| settings.engine.is_none_or(|s| s == *e))
        .map(|e| {
            let params = EngineParams {
                engine: Some(e),
                card: Some(card),
                ..settings.clone()
            };
            PanelRow {
                engine: e.name().to_string(),
                cells: engine::budget(&input, &est, &params)
                    .map(|b| (cells(e, &b), explained(&b)))
                    .map_err(|err| err.to_string()),
            }
        })
        .collect();
    let l = engine::largest(&input, &card, &settings);
    Some(Panel {
        card: if settings.devices.is_empty() {
            card.name.to_string()
        } else {
            settings
                .devices
                .iter()
                .map(|c| c.name)
                .collect::<Vec<_>>()
                .join(" + ")
        },
        basis: if l.basis == "estimate" {
            " (no engine: the estimate with its reserve)".to_string()
        } else {
            format!(" ({}'s pool)", l.basis)
        },
        at_sequences: l.at_sequences.to_string(),
        context: match l.largest_context {
            Some(c) => format!("{} tokens", group_digits(c)),
            None => "none (not even 1 token fits)".into(),
        },
        beyond: l.positions_note().map(|n| format!(" — {n}")),
        sequences: match (l.at_context, l.most_sequences) {
            (Some(c), Some(n)) => {
                Some(format!("{} at {} tokens", group_digits(n), group_digits(c)))
            }
            (Some(c), None) => Some(format!("none at {} tokens", group_digits(c))),
            _ => None,
        },
        rows,
    })
}

/// An engine's row: name and version, KV bytes, GiB, tokens, sequences at
/// max-model-len, start-up outcome.
fn cells(e: EngineId, b: &EngineBudget) -> Vec<String> {
    vec![
        format!("{} {}", e.name(), b.version),
        format!("{} B", signed_group_digits(b.kv_capacity_bytes)),
        signed_gib_string(b.kv_capacity_bytes, 2),
        group_digits(b.kv_capacity_tokens),
        format!(
            "{} × {}",
            group_digits(b.max_sequences),
            group_digits(b.max_model_len)
        ),
        outcome_text(b),
    ]
}

/// The budget's lines in one sentence, each with its source.
fn explained(b: &EngineBudget) -> String {
    b.lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            format!(
                "{}{} {} B ({})",
                match (i, l.subtracted) {
                    (0, _) => "",
                    (_, true) => " − ",
                    _ => " · ",
                },
                l.label,
                group_digits(l.bytes),
                l.source
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(pairs: &[(&str, &str)], page: &[(&str, &str)]) -> RulesRequest {
        let own = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        RulesRequest {
            pairs: own(pairs),
            page: own(page),
            tensors: None,
        }
    }

    const LLAMA_8B: [(&str, &str); 8] = [
        ("layers", "32"),
        ("hidden", "4096"),
        ("heads", "32"),
        ("kv-heads", "8"),
        ("head-dim", "128"),
        ("intermediate", "14336"),
        ("vocab", "128256"),
        ("context", "16000"),
    ];

    #[test]
    fn the_reading_puts_each_message_at_its_field_and_names_the_preset() {
        let r = reading_of(&request(
            &[("layers", "32"), ("context", "-3"), ("train", "sometimes")],
            &[("engine", "vllm"), ("gpu-memory-utilization", "1.5")],
        ));
        let fields: Vec<&str> = r.errors.iter().filter_map(|(f, _)| f.as_deref()).collect();
        assert!(
            fields.contains(&"context") && fields.contains(&"train"),
            "{r:?}"
        );
        assert_eq!(r.page_errors.len(), 1, "{r:?}");
        assert_eq!(r.page_errors[0].0, "gpu-memory-utilization");
        assert!(r.engine && r.devices == 0 && r.preset.is_none());
        // Every preset's own pairs read back as that preset (the page's picker).
        for (i, p) in PRESETS.iter().enumerate() {
            let r = reading_of(&request(p.pairs, &[]));
            assert!(r.errors.is_empty(), "{}: {r:?}", p.id);
            assert_eq!(r.preset, Some(i), "{}", p.id);
        }
        // A read that is not a request says so, at no field.
        let bad = read("not a request".into());
        let r = rules::read_reading(&bad).expect("a reading");
        assert!(matches!(r.errors.as_slice(), [(None, _)]), "{r:?}");
    }

    #[test]
    fn the_line_is_the_clis_and_empty_without_an_estimate() {
        let r = request(&LLAMA_8B, &[("model", "meta-llama/Llama-3.1-8B")]);
        let input = input_of(&r).expect("read");
        let want = inputs_line(
            &input,
            &estimate_all(&input).expect("an estimate"),
            Some("meta-llama/Llama-3.1-8B"),
        );
        let got = line(rules::write_request(&r));
        assert_eq!(got, want);
        assert!(got.starts_with("meta-llama/Llama-3.1-8B"), "{got}");
        assert_eq!(
            line(rules::write_request(&request(&[("context", "x")], &[]))),
            ""
        );
    }

    #[test]
    fn the_panel_matches_the_core_for_llama_8b_on_h100() {
        let p = panel_of(&request(&LLAMA_8B, &[("card", "h100-sxm-80gb")])).expect("a panel");
        assert_eq!(p.card, "NVIDIA H100 SXM 80GB");
        assert_eq!(p.rows.len(), engine::ENGINES.len());
        let (cells, explained) = p.rows[0].cells.as_ref().unwrap();
        assert_eq!(p.rows[0].engine, "vllm");
        // The same figure the core and the CLI derive under the default vLLM (0.29, Model
        // Runner V2 with its CUDA-graph estimate off the pool; max-model-len = context
        // here; the weights' whole allocator segments in its non-KV figure):
        // `gpumem-agent estimate` with these flags and `--engine vllm --card
        // h100-sxm-80gb --json`.
        assert_eq!(cells[1], "58 219 665 818 B");
        assert!(cells[4].starts_with("27 × "), "{cells:?}");
        assert_eq!(cells[5], "fits");
        assert!(explained.contains("gpu_memory_utilization"), "{explained}");
        assert!(p.sequences.is_some_and(|s| s.ends_with("at 16 000 tokens")));
        // Bad input: no panel rather than a wrong one.
        assert!(panel_of(&request(&[("layers", "x")], &[])).is_none());
        assert!(panel(String::from("not a request")).is_empty());
        // The engine flags apply, and `engine` keeps only that engine.
        let p85 = panel_of(&request(
            &LLAMA_8B,
            &[
                ("engine", "vllm"),
                ("gpu-memory-utilization", "0.85"),
                ("card", "h100"),
            ],
        ))
        .expect("a panel");
        assert_eq!(p85.rows.len(), 1);
        assert_ne!(p85.rows[0].cells.as_ref().unwrap().0[1], cells[1]);
    }

    #[test]
    fn the_answer_is_the_cores_headline_under_the_engine() {
        let r = request(&LLAMA_8B, &[("engine", "vllm"), ("card", "l40s")]);
        let a = answer_of(&r).unwrap();
        assert_eq!(a.headline.basis, "vllm");
        assert!(a.headline.card_given);
        // One card: no rows per device.
        assert!(a.devices.is_empty());
        let back = rules::read_answer(&answer(rules::write_request(&r))).unwrap();
        assert_eq!(back, Ok(a));
        let bad = rules::read_answer(&answer(rules::write_request(&request(
            &[("layers", "x")],
            &[],
        ))));
        assert!(matches!(bad, Ok(Err(_))), "{bad:?}");
    }

    /// The estimate crossing back is the one the page made itself before it loaded
    /// this module (inference's, every line); a refused pair is left at its default as
    /// the page leaves it; a request that is not one is refused, not answered.
    #[test]
    fn the_estimate_is_inferences_own() {
        use gpumem_core::estimate::estimate_inference;
        use gpumem_proto::training::read_estimate;
        for pairs in [
            &LLAMA_8B[..],
            &[
                ("parameters", "7000000000"),
                ("bits", "4"),
                ("sequences", "8"),
            ][..],
        ] {
            let r = request(pairs, &[]);
            let (input, read) = input_with(&r);
            assert!(read);
            let own = estimate_inference(&input);
            assert!(
                own.as_ref()
                    .is_ok_and(|e| e.total_bytes > 0 && !e.lines.is_empty())
            );
            let back = read_estimate(&estimate(rules::write_request(&r))).unwrap();
            assert_eq!(back, own, "{pairs:?}");
        }
        let mut bad = LLAMA_8B.to_vec();
        bad.push(("context", "x"));
        let r = request(&bad, &[]);
        let (input, read) = input_with(&r);
        assert!(!read);
        let back = read_estimate(&estimate(rules::write_request(&r))).unwrap();
        assert_eq!(back, estimate_inference(&input));
        let refused = read_estimate(&estimate("not a request".into())).unwrap();
        assert!(refused.is_err());
        // An input the core refuses crosses as its refusal, field and all.
        let r = request(&[("layers", "32")], &[]);
        let back = read_estimate(&estimate(rules::write_request(&r))).unwrap();
        assert_eq!(back, estimate_inference(&input_with(&r).0));
        assert!(back.is_err());
    }

    /// The page's engine and card decide of a workload's estimate what `--engine` and
    /// `--card` decide for `gpumem-agent estimate` (the core's one reader): a hybrid
    /// model's state line under vLLM is its layout, not transformers' own.
    #[test]
    fn the_pages_engine_settles_the_estimate_as_the_commands() {
        use gpumem_core::estimate::LineKey;
        use gpumem_proto::training::read_estimate;
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../crates/gpumem-core/tests/cases/configs/qwen3-next-80b-a3b.json"
        ));
        let mut pairs = gpumem_core::import::config::parse_config(text)
            .unwrap()
            .pairs();
        pairs.push(("context", "4096".into()));
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let page = [
            ("engine", "vllm"),
            ("card", "l4"),
            ("model", "Qwen/Qwen3-Next"),
        ];
        let state = |e: &gpumem_core::estimate::Estimate| {
            e.lines
                .iter()
                .find(|l| l.key == LineKey::KvCacheState)
                .map(|l| l.bytes)
        };
        let command = estimate_all(&gpumem_core::inputs::read(pairs.clone(), page).input).unwrap();
        let back = read_estimate(&estimate(rules::write_request(&request(&pairs, &page))))
            .unwrap()
            .unwrap();
        assert_eq!(back, command);
        let alone = read_estimate(&estimate(rules::write_request(&request(&pairs, &[]))))
            .unwrap()
            .unwrap();
        assert!(
            state(&back) < state(&alone),
            "{:?} {:?}",
            state(&back),
            state(&alone)
        );
    }

    /// Without an engine the answer is the headline the page judged itself before
    /// (inference's estimate, on the card or on the smallest that fits).
    #[test]
    fn without_an_engine_the_answer_is_inferences_headline() {
        use gpumem_core::estimate::estimate_inference;
        use gpumem_core::headline::ByInference;
        for page in [
            &[("card", "l4")][..],
            &[("card", "h100-sxm-80gb")][..],
            &[][..],
        ] {
            let r = request(&LLAMA_8B, page);
            let input = input_of(&r).unwrap();
            let est = estimate_inference(&input).unwrap();
            let (settings, _) = engine::from_pairs(page.iter().copied());
            let want = headline(&input, &est, settings.card.as_ref(), &ByInference).unwrap();
            assert_eq!(want.card_given, !page.is_empty(), "{page:?}");
            let back = rules::read_answer(&answer(rules::write_request(&r))).unwrap();
            assert_eq!(back, Ok(Answer::from(want)), "{page:?}");
        }
        let bad = rules::read_answer(&answer(rules::write_request(&request(
            &[("layers", "x")],
            &[("card", "l4")],
        ))));
        assert!(matches!(bad, Ok(Err(_))), "{bad:?}");
    }

    /// Several cards under llama.cpp: the page's answer is the CLI's (the most loaded
    /// card's verdict), the panel names the cards, vLLM's row asks for its pipeline
    /// stages (`--pp`) and the other engines' rows say they judge one card.
    #[test]
    fn a_list_of_cards_is_llama_cpps_split_on_the_page() {
        let page = [("engine", "llama.cpp"), ("card", "24GiB,12GiB")];
        let a = answer_of(&request(&LLAMA_8B, &page)).unwrap();
        let h = &a.headline;
        let input = input_of(&request(&LLAMA_8B, &page)).unwrap();
        let est = estimate_all(&input).unwrap();
        let (params, errors) = engine::from_pairs(page);
        assert!(errors.is_empty(), "{errors:?}");
        let b = engine::budget(&input, &est, &params).unwrap();
        assert_eq!(h.card.capacity_bytes, b.capacity_bytes);
        assert_eq!(h.card.capacity_bytes, 12 << 30);
        assert_eq!(
            h.card.headroom_bytes,
            b.margin_bytes.min(b.workload_margin_bytes)
        );
        assert_eq!(a.devices, b.devices);
        let p = panel_of(&request(&LLAMA_8B, &[("card", "24GiB,12GiB")])).expect("a panel");
        assert!(p.card.contains(" + "), "{}", p.card);
        for row in &p.rows {
            match row.engine.as_str() {
                "llama.cpp" => assert!(row.cells.is_ok(), "{:?}", row.cells),
                "vllm" => assert!(
                    row.cells
                        .as_ref()
                        .is_err_and(|e| e.contains("pipeline stages")),
                    "{:?}",
                    row.cells
                ),
                _ => assert!(
                    row.cells
                        .as_ref()
                        .is_err_and(|e| e.contains("several cards")),
                    "{}: {:?}",
                    row.engine,
                    row.cells
                ),
            }
        }
    }

    /// Over several cards the answer carries each device's row, the core's budget's
    /// own (vLLM's tp 2 × pp 2 on four H100s, its stages over an L40S and an A10,
    /// llama.cpp over 24 and 12 GiB), in device order, the most loaded one the
    /// headline's card; its need is the headline's when one sequence is asked, and the
    /// headline's verdict is never better than a row's.
    #[test]
    fn several_cards_answer_with_each_devices_row() {
        let h100 = "h100-sxm-80gb,h100-sxm-80gb,h100-sxm-80gb,h100-sxm-80gb";
        for (extra, page, n) in [
            (
                &[("tp", "2"), ("pp", "2"), ("gpus", "4")][..],
                &[("engine", "vllm"), ("card", h100)][..],
                4,
            ),
            (
                &[("pp", "2"), ("gpus", "2")][..],
                &[("engine", "vllm"), ("card", "l40s,a10")][..],
                2,
            ),
            (
                &[("pp", "2"), ("gpus", "2"), ("sequences", "13")][..],
                &[("engine", "vllm"), ("card", "l40s,a10")][..],
                2,
            ),
            (
                &[][..],
                &[("engine", "llama.cpp"), ("card", "24GiB,12GiB")][..],
                2,
            ),
            (
                &[("sequences", "4")][..],
                &[("engine", "llama.cpp"), ("card", "12GiB,8GiB")][..],
                2,
            ),
        ] {
            let mut pairs = LLAMA_8B.to_vec();
            pairs.extend_from_slice(extra);
            let r = request(&pairs, page);
            let a = answer_of(&r).unwrap_or_else(|e| panic!("{page:?}: {e}"));
            let input = input_of(&r).unwrap();
            let est = estimate_all(&input).unwrap();
            let (params, errors) = engine::from_pairs(page.iter().copied());
            assert!(errors.is_empty(), "{errors:?}");
            let b = engine::budget(&input, &est, &params).unwrap();
            assert_eq!(a.devices.len(), n, "{page:?}");
            assert_eq!(a.devices, b.devices, "{page:?}");
            for (i, d) in a.devices.iter().enumerate() {
                assert_eq!(d.device, i as u64);
                assert_eq!(d.card, params.devices[i].id);
            }
            let loaded: Vec<_> = a.devices.iter().filter(|d| d.most_loaded).collect();
            assert_eq!(loaded.len(), 1, "{page:?}");
            let (h, d) = (&a.headline, loaded[0]);
            assert_eq!(h.card.name, d.card_name, "{page:?}");
            assert_eq!(h.card.capacity_bytes, d.capacity_bytes, "{page:?}");
            let sequences = h.sequences.as_ref().unwrap();
            if sequences.asked == 1 || b.kv_cache_bytes.is_some() {
                assert_eq!(h.card.need_bytes, d.need_bytes, "{page:?}");
            } else {
                // vLLM's rows hold one sequence; the headline also the asked ones.
                assert!(h.card.need_bytes > d.need_bytes, "{page:?}");
            }
            // No row is better placed than the headline says.
            let rank = |o: Outcome| match o {
                Outcome::Refused => 0,
                Outcome::Borderline => 1,
                Outcome::Fits => 2,
            };
            let headline_rank = match h.verdict() {
                gpumem_core::fit::Verdict::DoesNotFit => 0,
                gpumem_core::fit::Verdict::Borderline => 1,
                gpumem_core::fit::Verdict::Fits => 2,
            };
            assert!(
                a.devices.iter().all(|d| headline_rank <= rank(d.outcome)),
                "{page:?}: {} {:?}",
                h.verdict,
                a.devices.iter().map(|d| d.outcome).collect::<Vec<_>>()
            );
            // They cross to the page whole.
            let back = rules::read_answer(&answer(rules::write_request(&r))).unwrap();
            assert_eq!(back, Ok(a), "{page:?}");
        }
    }
}
