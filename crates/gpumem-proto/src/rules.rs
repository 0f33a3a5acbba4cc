//! What the dimensioner and its lazily loaded engine module (`web/engine`, crate
//! `gpumem-engine`) say to each other: the engine rules — vLLM, SGLang, TGI, llama.cpp,
//! transformers, speculative decoding, `-ot` placement — live in that module only, so
//! the page's first module carries none of them.
//!
//! The page asks with a [`RulesRequest`] (a workload's pairs, the page's engine and card
//! pairs, the imported tensors) and hears back either an [`Answer`] (the answer under
//! an engine: the same [`Headline`] `gpumem-agent estimate --engine` prints and, over
//! several cards, the same rows per GPU) or a [`Panel`] (the engine section's figures,
//! already in words). Both cross as the tab-separated text documents of
//! [`crate::lookup::text`]: the dimensioner carries no JSON reader.

use gpumem_core::engine::{DeviceShare, MAX_CARDS, Outcome};
use gpumem_core::fit::{CardFit, Margin};
use gpumem_core::headline::{Cards, FormatFit, Headline, HostFit, Sequences, Unified};

use crate::lookup::TensorsRead;
use crate::lookup::text::{Line, Writer, lines, tensor_record};

/// First line of a [`RulesRequest`].
pub const REQUEST: &str = "gpumem.rules-request 1";
/// First line of an answer: a [`Headline`], or why there is none.
pub const ANSWER: &str = "gpumem.rules-answer 1";
/// First line of a [`Panel`].
pub const PANEL: &str = "gpumem.rules-panel 1";
/// First line of a [`Reading`].
pub const READING: &str = "gpumem.rules-reading 1";

/// What the engine module answers: the headline and, when the budget is judged over
/// several cards (llama.cpp's split, vLLM's pipeline stages), each device's row in
/// device order ([`gpumem_core::engine::EngineBudget::devices`]; empty otherwise).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The headline, as the CLI prints it.
    pub headline: Headline,
    /// Each device's share, need and headroom, as the CLI's table prints them.
    pub devices: Vec<DeviceShare>,
}

impl From<Headline> for Answer {
    fn from(headline: Headline) -> Answer {
        Answer {
            headline,
            devices: Vec::new(),
        }
    }
}

/// What the page asks the engine module about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RulesRequest {
    /// The workload's `key=value` pairs (the CLI's flags).
    pub pairs: Vec<(String, String)>,
    /// The page's engine keys and its card (`engine`, `gpu-memory-utilization`, `card`…).
    pub page: Vec<(String, String)>,
    /// The imported weights, when there are.
    pub tensors: Option<TensorsRead>,
}

/// The engine section of the page for one workload on one card, in words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Panel {
    /// The card's name.
    pub card: String,
    /// Whose answer the largest workload is ("(vllm's pool)", "(no engine: …)").
    pub basis: String,
    /// The sequences the largest context was searched at.
    pub at_sequences: String,
    /// The largest context, in words.
    pub context: String,
    /// Where it goes past what the model serves, if it does.
    pub beyond: Option<String>,
    /// The most sequences at the workload's context, in words, if searched.
    pub sequences: Option<String>,
    /// One row per engine.
    pub rows: Vec<PanelRow>,
}

/// How the engine module reads a workload's pairs and the page's engine keys (the
/// core's `params::from_pairs` and `engine::from_pairs_among`), so the page itself
/// carries neither parser: the messages for the fields, the engine's routing and the
/// preset the shape is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// Each refused pair: the field it is reported at (`None`: not one field's) and
    /// the message, in the parser's order.
    pub errors: Vec<(Option<String>, String)>,
    /// Each refused engine key (the page's pairs): field and message.
    pub page_errors: Vec<(String, String)>,
    /// Whether the page's keys choose an engine.
    pub engine: bool,
    /// How many cards the page's keys split over (empty: one card).
    pub devices: usize,
    /// The preset (its index in the core's `PRESETS`) whose shape the pairs describe.
    pub preset: Option<usize>,
}

impl Reading {
    /// The reading of the pairs' refusals (`errors`: the workload's, `page_errors`: the
    /// engine keys') under the page's engine flags (`settings`): each message at its
    /// field, as the page shows it.
    pub fn of(
        errors: Vec<gpumem_core::error::EstimateError>,
        page_errors: Vec<gpumem_core::error::EstimateError>,
        settings: &gpumem_core::engine::EngineParams,
        preset: Option<usize>,
    ) -> Reading {
        use gpumem_core::error::EstimateError;
        Reading {
            errors: errors
                .into_iter()
                .map(|e| match e {
                    EstimateError::Invalid { field, reason } if field != "input" => {
                        (Some(field.to_string()), reason)
                    }
                    other => (None, other.to_string()),
                })
                .collect(),
            page_errors: page_errors
                .into_iter()
                .filter_map(|e| match e {
                    EstimateError::Invalid { field, reason } => Some((field.to_string(), reason)),
                    _ => None,
                })
                .collect(),
            engine: settings.engine.is_some(),
            devices: settings.devices.len(),
            preset,
        }
    }
}

/// Writes a [`Reading`].
pub fn write_reading(r: &Reading) -> String {
    let mut w = Writer::new(READING);
    for (field, reason) in &r.errors {
        match field {
            Some(f) => w.record("field", &[f, reason]),
            None => w.record("general", &[reason]),
        }
    }
    for (field, reason) in &r.page_errors {
        w.record("page", &[field, reason]);
    }
    w.record(
        "engine",
        &[
            flag(r.engine),
            &r.devices.to_string(),
            &r.preset.map(|p| p.to_string()).unwrap_or_default(),
        ],
    );
    w.0
}

/// Reads a [`Reading`] written by [`write_reading`].
pub fn read_reading(text: &str) -> Result<Reading, String> {
    let mut r = Reading::default();
    let number = |line: &Line, t: &str| {
        t.parse::<usize>()
            .map_err(|_| line.error("a count that does not read"))
    };
    for line in lines(text, READING)? {
        match line.kind {
            "field" => {
                let f = line.fields(2)?;
                r.errors.push((Some(f[0].clone()), f[1].clone()));
            }
            "general" => r.errors.push((None, line.fields(1)?[0].clone())),
            "page" => {
                let f = line.fields(2)?;
                r.page_errors.push((f[0].clone(), f[1].clone()));
            }
            "engine" => {
                let f = line.fields(3)?;
                r.engine = f[0] == "1";
                r.devices = number(&line, &f[1])?;
                r.preset = if f[2].is_empty() {
                    None
                } else {
                    Some(number(&line, &f[2])?)
                };
            }
            _ => return Err(line.error("an unknown record")),
        }
    }
    Ok(r)
}

/// One engine's row of the [`Panel`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanelRow {
    /// The engine's name (`vllm`): the row's test id.
    pub engine: String,
    /// Its cells (name and version, KV bytes, GiB, tokens, sequences, outcome) and the
    /// explanation line under them; or why it has no budget.
    pub cells: Result<(Vec<String>, String), String>,
}

fn flag(b: bool) -> &'static str {
    if b { "1" } else { "0" }
}

/// Writes a [`RulesRequest`].
pub fn write_request(r: &RulesRequest) -> String {
    let mut w = Writer::new(REQUEST);
    for (k, v) in &r.pairs {
        w.record("pair", &[k, v]);
    }
    for (k, v) in &r.page {
        w.record("page", &[k, v]);
    }
    if let Some(t) = &r.tensors {
        w.tensors(t);
    }
    w.0
}

/// Reads a [`RulesRequest`] written by [`write_request`].
pub fn read_request(text: &str) -> Result<RulesRequest, String> {
    let mut r = RulesRequest::default();
    for line in lines(text, REQUEST)? {
        if tensor_record(&line, &mut r.tensors)? {
            continue;
        }
        let f = line.fields(2)?;
        let pair = (f[0].clone(), f[1].clone());
        match line.kind {
            "pair" => r.pairs.push(pair),
            "page" => r.page.push(pair),
            _ => return Err(line.error("an unknown record")),
        }
    }
    Ok(r)
}

fn fit_record(w: &mut Writer, role: &str, f: &CardFit) {
    w.record(
        "fit",
        &[
            role,
            &f.id,
            &f.name,
            &f.capacity_bytes.to_string(),
            &f.capacity_kind,
            &f.need_bytes.to_string(),
            &f.headroom_bytes.to_string(),
            flag(f.fits),
            &f.margin_bytes.to_string(),
            &f.reserve_bytes.to_string(),
            &f.verdict,
        ],
    );
}

/// The words of an [`Outcome`] in a `device` record.
fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Fits => "fits",
        Outcome::Borderline => "borderline",
        Outcome::Refused => "refused",
    }
}

/// Writes the answer: `a`, or the reason there is none.
pub fn write_answer(a: &Result<Answer, String>) -> String {
    let mut w = Writer::new(ANSWER);
    let (h, devices) = match a {
        Ok(a) => (&a.headline, &a.devices),
        Err(e) => {
            w.record("error", &[e]);
            return w.0;
        }
    };
    w.record(
        "headline",
        &[
            &h.verdict,
            flag(h.card_given),
            &h.basis,
            &h.used_ppm.to_string(),
            flag(h.any_fits),
        ],
    );
    fit_record(&mut w, "card", &h.card);
    let m = &h.margin;
    w.record(
        "margin",
        &[
            &m.assumed_bytes.to_string(),
            &m.capacity_bytes.to_string(),
            &m.bytes.to_string(),
            &m.reserve_bytes.to_string(),
        ],
    );
    if let Some(s) = &h.sequences {
        w.record(
            "sequences",
            &[
                &s.asked.to_string(),
                &s.fit.to_string(),
                &s.tokens.to_string(),
            ],
        );
    }
    if let Some(c) = &h.cards {
        w.record(
            "cards",
            &[
                &c.cards.to_string(),
                &c.tp.to_string(),
                &c.pp.to_string(),
                &c.need_bytes.to_string(),
            ],
        );
    }
    if let Some(n) = &h.cards_note {
        w.record("cards-note", &[n]);
    }
    if let Some(s) = &h.smallest {
        fit_record(&mut w, "smallest", s);
    }
    if let Some(f) = &h.format {
        w.record(
            "format",
            &[&f.format, &f.weights_bytes.to_string(), flag(f.runs)],
        );
        fit_record(&mut w, "format", &f.fit);
    }
    for warning in &h.warnings {
        w.record("warning", &[warning]);
    }
    if let Some(u) = &h.unified {
        w.record(
            "unified",
            &[
                &u.ram_bytes.to_string(),
                &u.gpu_bytes.to_string(),
                &u.system_bytes.to_string(),
                flag(u.wired_limit),
            ],
        );
    }
    if let Some(h) = &h.host {
        let opt = |v: Option<String>| v.unwrap_or_default();
        w.record(
            "host",
            &[
                &h.need_bytes.to_string(),
                &h.what,
                &opt(h.ram_bytes.map(|b| b.to_string())),
                &h.gpu_bytes.to_string(),
                &opt(h.left_bytes.map(|b| b.to_string())),
                &opt(h.fits.map(|f| flag(f).to_string())),
            ],
        );
    }
    for d in devices {
        w.record(
            "device",
            &[
                &d.device.to_string(),
                &d.card,
                &d.card_name,
                &d.capacity_bytes.to_string(),
                &d.split,
                &d.layers,
                &d.blocks.to_string(),
                flag(d.output_layer),
                &d.weights_bytes.to_string(),
                &d.kv_bytes.to_string(),
                &d.compute_bytes.to_string(),
                &d.mmproj_bytes.to_string(),
                &d.context_bytes.to_string(),
                &d.fit_margin_bytes.to_string(),
                &d.need_bytes.to_string(),
                &d.headroom_bytes.to_string(),
                &d.uncertainty_bytes.to_string(),
                outcome_word(d.outcome),
                flag(d.most_loaded),
            ],
        );
    }
    w.0
}

/// Reads a `device` record (its 19 fields) written by [`write_answer`].
fn read_device(line: &Line, f: &[String]) -> Result<DeviceShare, String> {
    Ok(DeviceShare {
        device: line.number(&f[0])?,
        card: f[1].clone(),
        card_name: f[2].clone(),
        capacity_bytes: line.number(&f[3])?,
        split: f[4].clone(),
        layers: f[5].clone(),
        blocks: line.number(&f[6])?,
        output_layer: boolean(line, &f[7])?,
        weights_bytes: line.number(&f[8])?,
        kv_bytes: line.number(&f[9])?,
        compute_bytes: line.number(&f[10])?,
        mmproj_bytes: line.number(&f[11])?,
        context_bytes: line.number(&f[12])?,
        fit_margin_bytes: line.number(&f[13])?,
        need_bytes: line.number(&f[14])?,
        headroom_bytes: signed(line, &f[15])?,
        uncertainty_bytes: line.number(&f[16])?,
        outcome: match f[17].as_str() {
            "fits" => Outcome::Fits,
            "borderline" => Outcome::Borderline,
            "refused" => Outcome::Refused,
            _ => return Err(line.error("not fits, borderline or refused")),
        },
        most_loaded: boolean(line, &f[18])?,
    })
}

fn boolean(line: &Line, text: &str) -> Result<bool, String> {
    match text {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(line.error("not 0 or 1")),
    }
}

fn signed(line: &Line, text: &str) -> Result<i64, String> {
    text.parse()
        .map_err(|_| line.error(&format!("{text:?} is not a signed count")))
}

fn read_fit(line: &Line, f: &[String]) -> Result<CardFit, String> {
    Ok(CardFit {
        id: f[1].clone(),
        name: f[2].clone(),
        capacity_bytes: line.number(&f[3])?,
        capacity_kind: f[4].clone(),
        need_bytes: line.number(&f[5])?,
        headroom_bytes: signed(line, &f[6])?,
        fits: boolean(line, &f[7])?,
        margin_bytes: line.number(&f[8])?,
        reserve_bytes: line.number(&f[9])?,
        verdict: f[10].clone(),
    })
}

/// Reads an answer written by [`write_answer`]: the answer, or why there is none. The
/// `device` records come in device order, at most [`MAX_CARDS`] of them (the most
/// cards a list takes).
pub fn read_answer(text: &str) -> Result<Result<Answer, String>, String> {
    // The headline record's fields, then the card's fit, which every headline has.
    let mut head: Option<(String, bool, String, u64, bool)> = None;
    let mut card: Option<CardFit> = None;
    let mut margin = Margin::default();
    let (mut sequences, mut cards, mut cards_note, mut smallest) = (None, None, None, None);
    let (mut format, mut format_fit) = (None, None);
    let mut warnings = Vec::new();
    let mut unified = None;
    let mut host = None;
    let mut devices: Vec<DeviceShare> = Vec::new();
    for line in lines(text, ANSWER)? {
        if line.kind == "error" {
            return Ok(Err(line.fields(1)?[0].clone()));
        }
        if line.kind != "headline" && head.is_none() {
            return Err(line.error("before the headline record"));
        }
        match line.kind {
            "headline" => {
                let f = line.fields(5)?;
                head = Some((
                    f[0].clone(),
                    boolean(&line, &f[1])?,
                    f[2].clone(),
                    line.number(&f[3])?,
                    boolean(&line, &f[4])?,
                ));
            }
            "fit" => {
                let f = line.fields(11)?;
                let fit = read_fit(&line, f)?;
                match f[0].as_str() {
                    "card" => card = Some(fit),
                    "smallest" => smallest = Some(fit),
                    "format" => format_fit = Some(fit),
                    _ => return Err(line.error("an unknown role")),
                }
            }
            "margin" => {
                let f = line.fields(4)?;
                margin = Margin {
                    assumed_bytes: line.number(&f[0])?,
                    capacity_bytes: line.number(&f[1])?,
                    bytes: line.number(&f[2])?,
                    reserve_bytes: line.number(&f[3])?,
                };
            }
            "sequences" => {
                let f = line.fields(3)?;
                sequences = Some(Sequences {
                    asked: line.number(&f[0])?,
                    fit: line.number(&f[1])?,
                    tokens: line.number(&f[2])?,
                });
            }
            "cards" => {
                let f = line.fields(4)?;
                cards = Some(Cards {
                    cards: line.number(&f[0])?,
                    tp: line.number(&f[1])?,
                    pp: line.number(&f[2])?,
                    need_bytes: line.number(&f[3])?,
                });
            }
            "cards-note" => cards_note = Some(line.fields(1)?[0].clone()),
            "format" => {
                let f = line.fields(3)?;
                format = Some((f[0].clone(), line.number(&f[1])?, boolean(&line, &f[2])?));
            }
            "warning" => warnings.push(line.fields(1)?[0].clone()),
            "unified" => {
                let f = line.fields(4)?;
                unified = Some(Unified {
                    ram_bytes: line.number(&f[0])?,
                    gpu_bytes: line.number(&f[1])?,
                    system_bytes: line.number(&f[2])?,
                    wired_limit: boolean(&line, &f[3])?,
                });
            }
            "host" => {
                let f = line.fields(6)?;
                let some = |t: &String| (!t.is_empty()).then_some(t.clone());
                host = Some(HostFit {
                    need_bytes: line.number(&f[0])?,
                    what: f[1].clone(),
                    ram_bytes: some(&f[2]).map(|t| line.number(&t)).transpose()?,
                    gpu_bytes: line.number(&f[3])?,
                    left_bytes: some(&f[4]).map(|t| signed(&line, &t)).transpose()?,
                    fits: some(&f[5]).map(|t| boolean(&line, &t)).transpose()?,
                });
            }
            "device" => {
                if devices.len() >= MAX_CARDS {
                    return Err(line.error(&format!("more than {MAX_CARDS} devices")));
                }
                let d = read_device(&line, line.fields(19)?)?;
                if usize::try_from(d.device).ok() != Some(devices.len()) {
                    return Err(line.error("a device out of order"));
                }
                devices.push(d);
            }
            _ => return Err(line.error("an unknown record")),
        }
    }
    let (verdict, card_given, basis, used_ppm, any_fits) = head.ok_or("no headline record")?;
    let format = match (format, format_fit) {
        (Some((format, weights_bytes, runs)), Some(fit)) => Some(FormatFit {
            format,
            weights_bytes,
            fit,
            runs,
        }),
        (None, None) => None,
        _ => return Err("a format record without its fit, or a fit without its format".into()),
    };
    let headline = Headline {
        verdict,
        card: card.ok_or("no card record")?,
        card_given,
        margin,
        basis,
        used_ppm,
        sequences,
        cards,
        cards_note,
        any_fits,
        smallest,
        format,
        warnings,
        unified,
        host,
    };
    Ok(Ok(Answer { headline, devices }))
}

fn optional(text: &Option<String>) -> &str {
    text.as_deref().unwrap_or("")
}

/// Writes a [`Panel`] (an absent text is an empty field).
pub fn write_panel(p: &Panel) -> String {
    let mut w = Writer::new(PANEL);
    w.record(
        "largest",
        &[
            &p.card,
            &p.basis,
            &p.at_sequences,
            &p.context,
            optional(&p.beyond),
            optional(&p.sequences),
        ],
    );
    for r in &p.rows {
        match &r.cells {
            Ok((cells, explained)) => {
                let mut fields: Vec<&str> = vec![&r.engine, explained];
                fields.extend(cells.iter().map(String::as_str));
                w.record("engine", &fields);
            }
            Err(e) => w.record("engine-error", &[&r.engine, e]),
        }
    }
    w.0
}

/// Reads a [`Panel`] written by [`write_panel`].
pub fn read_panel(text: &str) -> Result<Panel, String> {
    let mut p = Panel::default();
    let given = |t: &String| (!t.is_empty()).then(|| t.clone());
    for line in lines(text, PANEL)? {
        match line.kind {
            "largest" => {
                let f = line.fields(6)?;
                p.card = f[0].clone();
                p.basis = f[1].clone();
                p.at_sequences = f[2].clone();
                p.context = f[3].clone();
                p.beyond = given(&f[4]);
                p.sequences = given(&f[5]);
            }
            "engine" => {
                let f = line.fields(8)?;
                p.rows.push(PanelRow {
                    engine: f[0].clone(),
                    cells: Ok((f[2..].to_vec(), f[1].clone())),
                });
            }
            "engine-error" => {
                let f = line.fields(2)?;
                p.rows.push(PanelRow {
                    engine: f[0].clone(),
                    cells: Err(f[1].clone()),
                });
            }
            _ => return Err(line.error("an unknown record")),
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use gpumem_core::catalogue::resolve;
    use gpumem_core::engine::{self, EngineParams};
    use gpumem_core::estimate::estimate;
    use gpumem_core::headline::{Basis, headline};
    use gpumem_core::params::from_pairs;

    use super::*;

    fn input(extra: &[(&str, &str)]) -> gpumem_core::estimate::EstimateInput {
        let mut pairs = vec![
            ("layers", "28"),
            ("hidden", "3584"),
            ("heads", "28"),
            ("kv-heads", "4"),
            ("head-dim", "128"),
            ("intermediate", "18944"),
            ("vocab", "152064"),
        ];
        pairs.extend_from_slice(extra);
        let (i, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        i
    }

    #[test]
    fn a_headline_reads_back_whole() {
        // Under vLLM on an L40S at 16 × 32 768, and on the estimate without a card
        // (smallest card, widest format, cards needed): every field crosses.
        let i = input(&[("context", "32768"), ("sequences", "16")]);
        let est = estimate(&i).unwrap();
        let vllm = Basis::Engine(Box::new(EngineParams {
            engine: engine::find("vllm"),
            ..EngineParams::default()
        }));
        let l40s = resolve("l40s").unwrap();
        // A Mac with a wired limit: its split crosses too.
        let mac = resolve("m3-max-128gb")
            .unwrap()
            .with_wired_limit(100_000)
            .unwrap();
        for h in [
            headline(&i, &est, Some(&l40s), &vllm).unwrap(),
            headline(&i, &est, None, &Basis::Estimate).unwrap(),
            headline(&i, &est, Some(&mac), &Basis::Estimate).unwrap(),
            {
                let mut r = i.clone();
                r.ram = Some(64 << 30);
                headline(&r, &est, Some(&l40s), &Basis::Estimate).unwrap()
            },
        ] {
            let a = Answer::from(h);
            let back = read_answer(&write_answer(&Ok(a.clone()))).unwrap().unwrap();
            assert_eq!(back, a);
        }
        assert_eq!(
            read_answer(&write_answer(&Err("no pool\tat all".into()))).unwrap(),
            Err("no pool\tat all".into())
        );
        assert!(read_answer("gpumem.rules-answer 1\nfit\tcard").is_err());
        assert!(read_answer("not a document").is_err());
        let _ = engine::engine_keys();
    }

    /// The answer over several cards as the engine module writes it: the core's
    /// budget's rows per device, whole, for vLLM's stages (tp 2 × pp 2) and llama.cpp's
    /// split over unequal cards.
    fn split_answers() -> Vec<Answer> {
        let mut out = Vec::new();
        for (extra, page) in [
            (
                &[("tp", "2"), ("pp", "2"), ("gpus", "4")][..],
                &[
                    ("engine", "vllm"),
                    ("card", "h100-sxm,h100-sxm,h100-sxm,h100-sxm"),
                ][..],
            ),
            (
                &[][..],
                &[("engine", "llama.cpp"), ("card", "24GiB,12GiB")][..],
            ),
        ] {
            let mut pairs = extra.to_vec();
            pairs.push(("context", "16384"));
            let i = input(&pairs);
            let est = estimate(&i).unwrap();
            let (params, errors) = engine::from_pairs(page.iter().copied());
            assert!(errors.is_empty(), "{errors:?}");
            let b = engine::budget(&i, &est, &params).unwrap();
            assert_eq!(b.devices.len(), params.devices.len(), "{page:?}");
            let basis = Basis::Engine(Box::new(params.clone()));
            out.push(Answer {
                headline: headline(&i, &est, params.card.as_ref(), &basis).unwrap(),
                devices: b.devices,
            });
        }
        out
    }

    #[test]
    fn the_rows_per_device_read_back_whole() {
        for a in split_answers() {
            let text = write_answer(&Ok(a.clone()));
            assert_eq!(
                text.lines().filter(|l| l.starts_with("device\t")).count(),
                a.devices.len()
            );
            assert_eq!(read_answer(&text).unwrap(), Ok(a.clone()));
            // Malformed rows are refused with the line that is wrong, never a panic.
            let first = text
                .lines()
                .position(|l| l.starts_with("device\t"))
                .unwrap();
            let edit = |f: &dyn Fn(&str) -> String| {
                text.lines()
                    .enumerate()
                    .map(|(i, l)| if i == first { f(l) } else { l.to_string() })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            for (bad, why) in [
                (edit(&|l| l.replace("\tfits\t", "\tfine\t")), "not fits"),
                (
                    edit(&|l| l.rsplit_once('\t').unwrap().0.to_string()),
                    "expected 19",
                ),
                (edit(&|l| l.replacen("device\t0", "device\t1", 1)), "order"),
                (edit(&|l| l.replacen("device\t0", "device\t-1", 1)), "count"),
                (edit(&|l| format!("{l}\t1")), "expected 19"),
            ] {
                let e = read_answer(&bad).expect_err(&bad);
                assert!(e.contains(why), "{why}: {e}");
                assert!(e.contains(&format!("line {}", first + 1)), "{e}");
            }
            // At most MAX_CARDS rows: one more is refused.
            let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("device\t")).collect();
            let row = rows[0]
                .split_once('\t')
                .unwrap()
                .1
                .split_once('\t')
                .unwrap()
                .1;
            let mut many: String = text
                .lines()
                .filter(|l| !l.starts_with("device\t"))
                .collect::<Vec<_>>()
                .join("\n");
            for n in 0..MAX_CARDS {
                many.push_str(&format!("\ndevice\t{n}\t{row}"));
            }
            assert_eq!(
                read_answer(&many).unwrap().unwrap().devices.len(),
                MAX_CARDS
            );
            many.push_str(&format!("\ndevice\t{MAX_CARDS}\t{row}"));
            let e = read_answer(&many).expect_err("one row too many");
            assert!(e.contains(&format!("more than {MAX_CARDS} devices")), "{e}");
        }
    }

    proptest::proptest! {
        /// Whatever the text, an answer is read or refused, never a panic.
        #[test]
        fn any_answer_text_is_read_without_a_panic(
            records in "(\n(device|fit|host|warning)(\t[^\t\n]{0,6}){0,20}){0,20}"
        ) {
            let _ = read_answer(&format!("{ANSWER}{records}"));
            let _ = read_answer(&format!("{ANSWER}\nheadline\tFITS\t1\tvllm\t0\t1{records}"));
        }
    }

    #[test]
    fn a_reading_reads_back_whole_and_a_bad_one_is_refused() {
        let r = Reading {
            errors: vec![
                (
                    Some("context".into()),
                    "is empty; type a whole number".into(),
                ),
                (None, "the inputs: no\ttab".into()),
            ],
            page_errors: vec![(
                "gpu-memory-utilization".into(),
                "1.5: use a fraction".into(),
            )],
            engine: true,
            devices: 3,
            preset: Some(4),
        };
        assert_eq!(read_reading(&write_reading(&r)).unwrap(), r);
        let none = Reading::default();
        assert_eq!(read_reading(&write_reading(&none)).unwrap(), none);
        let bad = format!("{READING}\nengine\t1\tmany\t");
        assert!(read_reading(&bad).unwrap_err().contains("count"));
        assert!(read_reading(&format!("{READING}\nwhat\t1")).is_err());
    }

    #[test]
    fn a_request_and_a_panel_read_back_whole() {
        let r = RulesRequest {
            pairs: vec![("context".into(), "4096".into())],
            page: vec![
                ("engine".into(), "vllm".into()),
                ("card".into(), "l40s".into()),
            ],
            tensors: None,
        };
        assert_eq!(read_request(&write_request(&r)).unwrap(), r);
        let p = Panel {
            card: "NVIDIA L40S".into(),
            basis: " (vllm's pool)".into(),
            at_sequences: "16".into(),
            context: "14 000 tokens".into(),
            beyond: None,
            sequences: Some("14 at 32 768 tokens".into()),
            rows: vec![
                PanelRow {
                    engine: "vllm".into(),
                    cells: Ok(((1..=6).map(|n| n.to_string()).collect(), "a − b".into())),
                },
                PanelRow {
                    engine: "tgi".into(),
                    cells: Err("refused".into()),
                },
            ],
        };
        assert_eq!(read_panel(&write_panel(&p)).unwrap(), p);
        assert!(read_panel("gpumem.rules-panel 1\nengine\tvllm").is_err());
    }
}
