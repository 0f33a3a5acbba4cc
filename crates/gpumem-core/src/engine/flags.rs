//! An engine's flags as rows ([`Flag`]: the field the agent's `--help` and the page's
//! form show, and how its value is read), their values once read ([`EngineParams`]),
//! and the rows every engine shares: the card, `max-model-len` and the batch a start-up
//! profiles. Each engine lists the rows it reads in its [`super::Info`]; the registry
//! makes the field table's engine group and the parser from those lists.

use crate::arch::MAX_DIM;
use crate::catalogue::GpuCard;
use crate::error::EstimateError;
use crate::field::f;
use crate::fields::{Field, FieldGroup, FieldKind, Unit};
use crate::params::parse_count;

use super::fraction::parse_fraction;

/// One engine flag: its field (key, label, help, choices…) and how a value of it is read.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// The field: the key is the flag without dashes, as the engine names it.
    pub field: Field,
    /// Reads a value (the key, for the error, and the text): a refused value is an
    /// error naming the key.
    pub parse: fn(&'static str, &str) -> Result<Value, EstimateError>,
    /// What the budget says when the flag is given and the engine named does not read
    /// it (`None`: nothing).
    pub unread: Option<&'static str>,
}

impl Flag {
    /// A row of the engine group.
    pub const fn new(
        field: Field,
        parse: fn(&'static str, &str) -> Result<Value, EstimateError>,
    ) -> Flag {
        Flag {
            field,
            parse,
            unread: None,
        }
    }

    /// The same row, saying `text` when an engine that does not read it is named.
    pub const fn unread(mut self, text: &'static str) -> Flag {
        self.unread = Some(text);
        self
    }

    /// The key (the flag without dashes).
    pub const fn key(&self) -> &'static str {
        self.field.key
    }
}

/// A field of the engine group: its label, placeholder and help (see
/// [`crate::fields::Field`]).
pub const fn field(
    key: &'static str,
    kind: FieldKind,
    label: &'static str,
    placeholder: &'static str,
    help: &'static str,
) -> Field {
    f(key, FieldGroup::Engine, kind, label, placeholder, help)
}

/// A flag's value, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A whole number.
    Count(u64),
    /// A fraction in parts per 10^18 ([`super::ONE`] is 1).
    Fraction(u64),
    /// A switch.
    On(bool),
    /// Text the flag's own parser checked (a cache type, a method, rules, a shape).
    Text(String),
}

/// One engine of the registry, by its place there ([`super::ENGINES`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EngineId(pub(super) u8);

/// The engine flags as read: the engine and its release, the card, the length served,
/// and every other flag by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineParams {
    /// The engine, if one was named.
    pub engine: Option<EngineId>,
    /// The release named after `@` (`vllm@0.10`), by its place in the engine's
    /// [`super::Info::releases`]; `None` is the newest carried.
    pub release: Option<usize>,
    /// The card (a catalogue entry, or a typed capacity); with several, the first
    /// (llama.cpp's device 0).
    pub card: Option<GpuCard>,
    /// Every card, in device order, when `--card` names several (`rtx-4090,rtx-3090`:
    /// llama.cpp's `--tensor-split` over them); empty for one card.
    pub devices: Vec<GpuCard>,
    /// `--max-model-len`.
    pub max_model_len: Option<u64>,
    /// `--max-model-len auto`: the largest length the pool holds, as vLLM computes it.
    pub max_model_len_auto: bool,
    /// Every other flag given, by key ([`Flag::key`]), once each, as its row read it;
    /// read back through [`EngineParams::count`], [`EngineParams::fraction`],
    /// [`EngineParams::on`] and [`EngineParams::text`]. (A list, not a map: a handful of
    /// flags, and the page's wasm carries no map code for them.)
    pub flags: Vec<(&'static str, Value)>,
}

impl EngineParams {
    /// Whether any engine key was given.
    pub fn is_empty(&self) -> bool {
        *self == EngineParams::default()
    }

    /// What these flags decide of the estimate itself, set on `input`: the layout of
    /// the recurrent-state and indexer lines (the named engine's cache, transformers'
    /// own without one) and the card generation a training step's cuBLAS workspaces
    /// follow (the cards named; none or a typed capacity: the larger). Called by
    /// [`crate::inputs::read`] alone, the one reader every caller answers from, so the
    /// agent's commands and the page's modules agree.
    pub(crate) fn settle(&self, input: &mut crate::estimate::EstimateInput) {
        input.runtime = self
            .engine
            .map_or(crate::arch::CacheRuntime::Transformers, |e| {
                e.cache_runtime()
            });
        let cards = if self.devices.is_empty() {
            self.card.as_slice()
        } else {
            &self.devices
        };
        input.card_sm90 = crate::catalogue::cards_sm90(cards);
        input.card_fp8 = crate::catalogue::cards_fp8(cards);
    }

    /// The value given for `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.flags.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Sets `key` to `value` (`None`: as if it were not given).
    pub fn set(&mut self, key: &'static str, value: Option<Value>) {
        self.flags.retain(|(k, _)| *k != key);
        if let Some(v) = value {
            self.flags.push((key, v));
        }
    }

    /// A count flag's value, if given (`key`: its row's, [`Flag::key`]).
    pub fn count(&self, key: &str) -> Option<u64> {
        match self.get(key) {
            Some(Value::Count(v)) => Some(*v),
            _ => None,
        }
    }

    /// A fraction flag's value (parts per 10^18), if given.
    pub fn fraction(&self, key: &str) -> Option<u64> {
        match self.get(key) {
            Some(Value::Fraction(v)) => Some(*v),
            _ => None,
        }
    }

    /// Whether a switch is on (off when absent).
    pub fn on(&self, key: &str) -> bool {
        matches!(self.get(key), Some(Value::On(true)))
    }

    /// A text flag's value, if given.
    pub fn text(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(Value::Text(v)) => Some(v),
            _ => None,
        }
    }
}

/// Reads a count of at least 1 (and at most [`MAX_DIM`]: a length, a batch, a rank).
pub fn positive(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    let v = at_least_one(key, text)?;
    if v > MAX_DIM {
        return Err(EstimateError::invalid(key, "absurdly large"));
    }
    Ok(Value::Count(v))
}

/// Reads a count of bytes, at least 1.
pub fn bytes(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    at_least_one(key, text).map(Value::Count)
}

/// Reads a count, 0 included.
pub fn count(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    parse_count(key, text).map(Value::Count)
}

/// Reads a fraction in (0, 1].
pub fn fraction(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    parse_fraction(key, text).map(Value::Fraction)
}

/// Reads a switch: true/false, 1/0, yes/no; empty is on.
pub fn switch(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "" => Ok(Value::On(true)),
        "false" | "0" | "no" => Ok(Value::On(false)),
        _ => Err(EstimateError::invalid(
            key,
            format!("{text:?} is not true or false"),
        )),
    }
}

fn at_least_one(key: &'static str, text: &str) -> Result<u64, EstimateError> {
    let v = parse_count(key, text)?;
    if v == 0 {
        return Err(EstimateError::invalid(key, "must be at least 1"));
    }
    Ok(v)
}

/// Most cards one answer names (`--card a,b,…`): llama.cpp's `LLAMA_MAX_DEVICES`.
pub const MAX_CARDS: usize = 16;

/// Reads `--card`: one card, or several separated by commas (device 0 first, as
/// llama.cpp numbers them: `rtx-4090,rtx-3090`), each an id, a short form or a
/// capacity; at most [`MAX_CARDS`]. A Mac's unified memory is one device, never one of
/// several.
pub fn resolve_cards(text: &str) -> Result<Vec<GpuCard>, String> {
    if !text.contains(',') {
        return crate::catalogue::resolve(text).map(|c| vec![c]);
    }
    let items: Vec<&str> = text.split(',').map(str::trim).collect();
    if items.len() > MAX_CARDS {
        return Err(format!(
            "{} cards: at most {MAX_CARDS} (llama.cpp's LLAMA_MAX_DEVICES)",
            items.len()
        ));
    }
    let mut cards = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if item.is_empty() {
            return Err(format!(
                "card {i} of the list is empty: name each card, separated by commas (rtx-4090,rtx-3090)"
            ));
        }
        let card = crate::catalogue::resolve(item).map_err(|why| format!("card {i}: {why}"))?;
        if card.unified() {
            return Err(format!(
                "card {i}: {} is a Mac, whose unified memory is one device: name it alone",
                card.name
            ));
        }
        cards.push(card);
    }
    Ok(cards)
}

/// Reads `card` ([`EngineParams::card`] and [`EngineParams::devices`], resolved by the
/// parser before it).
fn card(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    resolve_cards(text)
        .map(|c| {
            Value::Text(
                c.iter()
                    .map(|c| c.id.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            )
        })
        .map_err(|why| EstimateError::invalid(key, why))
}

/// The card judged against (every engine).
pub const CARD: Flag = Flag::new(
    field(
        "card",
        FieldKind::Card,
        "GPU card",
        "",
        "The card judged against: an id (h100-sxm-80gb), a short form (4090, t4, a100-40, l40s) or a capacity (24GiB, 22.5GB); a card with the total torch reports on your machine (rtx-3090@23.58GiB, vLLM's total_gpu_memory) keeps the card's facts; several, comma-separated in device order (rtx-4090,rtx-3090): llama.cpp splits the layers by --tensor-split, vLLM puts one pipeline stage (--pp) on each",
    ),
    card,
);

/// A Mac's GPU working set as `sudo sysctl iogpu.wired_limit_mb=N` sets it (every
/// engine: it is the card's capacity, [`crate::catalogue::GpuCard::with_wired_limit`],
/// applied by the parser once the card is read).
pub const WIRED_LIMIT_MB: Flag = Flag::new(
    field(
        "wired-limit-mb",
        FieldKind::Count,
        "Mac GPU wired limit",
        "macOS default",
        "On a Mac (--card m3-max-128gb): the GPU's working set as `sudo sysctl iogpu.wired_limit_mb=N` sets it, MiB (default: what macOS allows, 2/3 of the RAM below 64 GiB, 3/4 from it)",
    )
    .unit(Unit::Mib),
    positive,
);

/// The length each sequence is served at (every engine; `auto`: the longest the pool
/// holds, vLLM's own choice).
pub const MAX_MODEL_LEN: Flag = Flag::new(
    field(
        "max-model-len",
        FieldKind::Count,
        "Max model length",
        "context + generate",
        "Tokens per sequence to serve (auto: the longest that fits)",
    )
    .unit(Unit::Tokens),
    // `auto` and `-1` are read by the parser before it (`EngineParams::max_model_len_auto`).
    positive,
);

/// The batch an engine's start-up runs through the model before it sizes its pool:
/// vLLM's profiled forward, SGLang's chunked prefill, TGI's warm-up, llama.cpp's
/// ubatch — one row, since each engine's flag sets the same thing; each engine's rule
/// reads it under its own name and default.
pub const BATCHED_TOKENS: Flag = Flag::new(
    field(
        "max-num-batched-tokens",
        FieldKind::Count,
        "Batched tokens (profiling)",
        "8192 or 2048",
        "Profiled forward (vLLM), chunked prefill (SGLang), warmup (TGI), ubatch (llama.cpp)",
    )
    .unit(Unit::Tokens),
    positive,
);

/// Memory other processes already hold on each GPU when the engine starts (a desktop,
/// another server; under WSL2 what Windows keeps): `nvidia-smi`'s use before the
/// launch. The engines differ in what they do with it: SGLang sizes its pool from what
/// is free (`model_runner.py` `init_torch_distributed`: pre_model_load_memory), vLLM
/// from the card's total, and refuses to start when less than its share is free
/// (`gpu_worker.py` `init_device`) — see each rule.
pub const MEMORY_IN_USE: Flag = Flag::new(
    field(
        "memory-in-use",
        FieldKind::Text,
        "Memory in use elsewhere (GiB)",
        "0",
        "GiB already held on each GPU by other processes when the engine starts (nvidia-smi's use before launch: a desktop, another server); 1.5, 800MiB, 2GB",
    )
    .choices(&[("0.5", "0.5 GiB"), ("1.5", "1.5 GiB")]),
    in_use,
)
.unread("--memory-in-use is modelled for vLLM and SGLang only: ignored");

/// How the GPUs of a tensor-parallel group reach each other: NVLink (an SXM board's
/// NVSwitch, or a bridge) or PCIe only. It decides which communicators the engines and
/// NCCL set up at tp > 1 and so the memory they take before the pool is sized
/// (the engines' `request::interconnect`); the card's row says it where it can
/// ([`crate::catalogue::Links`]), and this flag where the row cannot (A100, H100 PCIe
/// or SXM, a bridged pair).
pub const INTERCONNECT: Flag = Flag::new(
    field(
        "interconnect",
        FieldKind::Choice,
        "GPU interconnect (tp > 1)",
        "the card's",
        "nvlink (SXM/NVSwitch boards, NVLink bridges) or pcie (PCIe only): what the engine's communicators take at tp > 1; the card's own where its row knows",
    )
    .choices(&[
        ("", "the card's"),
        ("nvlink", "NVLink / NVSwitch"),
        ("pcie", "PCIe only"),
    ]),
    interconnect,
)
.unread("--interconnect is modelled for vLLM and SGLang only: ignored");

/// Reads `--interconnect`: `nvlink` or `pcie` (empty: the card's).
fn interconnect(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    match text.trim().to_ascii_lowercase().as_str() {
        t @ ("nvlink" | "pcie" | "") => Ok(Value::Text(t.to_string())),
        _ => Err(EstimateError::invalid(
            key,
            format!("{text:?}: nvlink (SXM/NVSwitch boards, NVLink bridges) or pcie (PCIe only)"),
        )),
    }
}

/// Reads `--memory-in-use`: a number of GiB (`1.5`) or a capacity with its unit
/// (`800MiB`, `2GB`), 0 included, in bytes rounded down.
fn in_use(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    memory_in_use_bytes(text).map(Value::Count).ok_or_else(|| {
        EstimateError::invalid(
            key,
            format!("{text:?} is not a size (GiB as a number: 1.5; or 800MiB, 2GB)"),
        )
    })
}

/// `--memory-in-use` in bytes: a bare number is GiB; `None` when the text is not a size.
pub fn memory_in_use_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    if t.is_empty() || t.starts_with('.') {
        return None;
    }
    if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        if t.ends_with('.') {
            return None;
        }
        return crate::catalogue::parse_capacity(&format!("{t}GiB"));
    }
    crate::catalogue::parse_capacity(t)
}
