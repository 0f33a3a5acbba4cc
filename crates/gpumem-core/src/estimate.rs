//! The front door: [`EstimateInput`] in, [`Estimate`] out.
//!
//! The input is flat and named exactly like the CLI flags and the page's URL keys
//! (`parameters`, `bits`, `reserve-gib`, `kv-heads`, …: the flag without its
//! dashes), so one vocabulary serves the agent, the page and shared links. Each
//! output [`Line`] is tagged *computed* (follows from the inputs and a format's
//! layout) or *assumed* (a hypothesis only a measurement settles), and carries its
//! formula and inputs so the page can show them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::arch::{Architecture, MAX_DIM, ModuleFormats, Moe, ParamClass};
use crate::error::EstimateError;
use crate::format::{Dtype, StorageFormat};
use crate::import::TensorSummary;
use crate::kv::{KvDtype, KvLayout, KvShape};
use crate::training::{AttentionImpl, Optimizer, activation_bytes};
use crate::units::{Bytes, MIB, checked_product};

/// Side of the square matrices assumed in parameter-count mode to count a
/// quantised format's per-group and per-channel overhead.
pub const ASSUMED_MATRIX_DIM: u64 = 4096;

/// What is trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainMode {
    /// Inference only.
    #[default]
    None,
    /// Every parameter is trainable.
    Full,
    /// LoRA adapters on a frozen base.
    Lora,
}

/// Which positions' logits the framework keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Logits {
    /// Only the last position (Hugging Face `generate` with `logits_to_keep=1`).
    #[default]
    Last,
    /// Every position of the prompt.
    All,
}

impl Logits {
    /// The key's value: `last` or `all` (as serde writes it).
    pub const fn name(self) -> &'static str {
        match self {
            Logits::Last => "last",
            Logits::All => "all",
        }
    }
}

/// Every input of an estimate, named like the CLI flags (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct EstimateInput {
    /// Parameter-count mode: total parameters.
    pub parameters: Option<u64>,
    /// Parameter-count mode: bits per parameter (32, 16, 8, 4, 3, 2), mapped to a format.
    pub bits: Option<u32>,
    /// Storage format of the linear layers (or of everything in parameter-count mode).
    pub format: Option<StorageFormat>,
    /// Format of embeddings, lm_head, norms and biases (default bf16).
    pub keep_format: StorageFormat,
    /// Format of the attention projections (default: `format`); gpt-oss and many
    /// compressed-tensors checkpoints keep attention in bf16.
    pub attention_format: Option<StorageFormat>,
    /// Compute / activation dtype (default bf16).
    pub compute_dtype: Dtype,
    /// Architecture mode.
    pub arch: Option<Architecture>,
    /// The KV cache's shape alone (seed §4: layers, KV heads, head dim), when no
    /// full architecture is given; weights then come from `parameters` or are absent.
    pub kv_only: Option<KvDims>,
    /// Positions the model was trained for (`max_position_embeddings`); a longer
    /// context is warned about.
    pub max_position: Option<u64>,
    /// Exact tensors read from file headers.
    pub tensors: Option<TensorSummary>,
    /// Sequences processed together (the batch; also the training micro-batch).
    pub sequences: u64,
    /// Prompt (prefill) tokens per sequence; for training, the sequence length.
    pub context: Option<u64>,
    /// Tokens generated per sequence after the prompt.
    pub generate: u64,
    /// KV-cache value type (default: the compute dtype).
    pub kv_dtype: Option<KvDtype>,
    /// Sliding-window size.
    pub sliding_window: Option<u64>,
    /// Layers that use the sliding window (default all, when a window is set).
    pub sliding_layers: Option<u64>,
    /// Static cache length (pre-allocated per sequence).
    pub static_cache: Option<u64>,
    /// Layers that keep a constant per-sequence state instead of a KV cache
    /// (Mamba / linear-attention layers of hybrid models); the rest keep KV.
    pub state_layers: u64,
    /// Bytes of that state per layer and sequence (e.g. Mamba-2: heads × head dim
    /// × d_state plus the convolution window, in the state's dtype).
    pub state_bytes: u64,
    /// Attention implementation (decides whether a tokens² score matrix exists).
    pub attention: AttentionImpl,
    /// Logits kept in prefill.
    pub logits: Logits,
    /// CUDA context + library workspaces per device, in MiB (assumed; `None` = inside the reserve).
    pub cuda_context_mib: Option<u64>,
    /// Training mode.
    pub train: TrainMode,
    /// Optimizer (training).
    pub optimizer: Optimizer,
    /// Gradient dtype (training; default: the compute dtype).
    pub grad_dtype: Option<Dtype>,
    /// Keep fp32 master weights (mixed precision).
    pub master_weights: bool,
    /// LoRA rank.
    pub lora_rank: u64,
    /// LoRA target projections, e.g. "q,k,v,o" or "all".
    pub lora_targets: String,
    /// Full activation checkpointing.
    pub checkpointing: bool,
    /// Reserve per device in whole GiB (seed §2: a preparation hypothesis).
    pub reserve_gib: u64,
    /// Reserve per device in bytes (overrides `reserve-gib`, e.g. an observed overhead).
    pub reserve_bytes: Option<u64>,
    /// GPUs in total.
    pub gpus: u64,
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Pipeline stages.
    pub pp: u64,
}

impl Default for EstimateInput {
    fn default() -> Self {
        EstimateInput {
            parameters: None,
            bits: None,
            format: None,
            keep_format: StorageFormat::BF16,
            attention_format: None,
            compute_dtype: Dtype::Bf16,
            arch: None,
            kv_only: None,
            max_position: None,
            tensors: None,
            sequences: 1,
            context: None,
            generate: 0,
            kv_dtype: None,
            sliding_window: None,
            sliding_layers: None,
            static_cache: None,
            state_layers: 0,
            state_bytes: 0,
            attention: AttentionImpl::Sdpa,
            logits: Logits::Last,
            cuda_context_mib: None,
            train: TrainMode::None,
            optimizer: Optimizer::Adamw,
            grad_dtype: None,
            master_weights: true,
            lora_rank: 16,
            lora_targets: "q,k,v,o".into(),
            checkpointing: false,
            reserve_gib: 4,
            reserve_bytes: None,
            gpus: 1,
            tp: 1,
            pp: 1,
        }
    }
}

/// The KV cache's dimensions without the rest of the architecture (seed §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvDims {
    /// Attention layers.
    pub layers: u64,
    /// KV heads per layer.
    pub kv_heads: u64,
    /// Width of one head.
    pub head_dim: u64,
}

/// Which headline figure a line adds to; each line belongs to exactly one, so no
/// line is counted twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// Stored weights (`weights_bytes`).
    Weights,
    /// The KV cache (`kv_cache_bytes`).
    KvCache,
    /// Gradients, optimizer states, master weights, adapters (`training_bytes`).
    Training,
    /// Activations, prefill intermediates, logits, CUDA context (`transient_bytes`).
    Transient,
    /// The reserve (`reserve_bytes`).
    Reserve,
}

impl Group {
    /// The group of a line key: the part before the first dot names it.
    pub fn of(key: &str) -> Group {
        match key.split('.').next().unwrap_or("") {
            "weights" => Group::Weights,
            "kv_cache" => Group::KvCache,
            "training" => Group::Training,
            "reserve" => Group::Reserve,
            _ => Group::Transient,
        }
    }
}

/// Whether a line follows from the inputs or is a hypothesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Follows from the inputs and the formats' layouts.
    Computed,
    /// A hypothesis: only a measurement settles it.
    Assumed,
}

/// One line of the breakdown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// Stable key ("weights.mlp", "kv_cache", "reserve", …).
    pub key: Cow<'static, str>,
    /// Human label.
    pub label: Cow<'static, str>,
    /// Bytes for the whole workload.
    pub bytes: u64,
    /// Bytes on the most loaded device under the chosen split.
    pub device_bytes: u64,
    /// Computed or assumed.
    pub kind: Kind,
    /// The headline figure the line adds to.
    pub group: Group,
    /// Whether the line is part of the total (informational lines are not).
    pub in_total: bool,
    /// The formula, in words.
    pub formula: String,
    /// The formula's inputs, name → value.
    pub inputs: BTreeMap<Cow<'static, str>, String>,
}

/// The result: headline figures (a public contract, also in `--json`) and lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Estimate {
    /// All weights, stored bytes.
    pub weights_bytes: u64,
    /// KV cache at its largest (end of generation, or the static length).
    pub kv_cache_bytes: u64,
    /// Gradients + optimizer states + master weights + adapters (0 for inference).
    pub training_bytes: u64,
    /// Assumed activations and transients (training activations, prefill
    /// intermediates, logits, CUDA context).
    pub transient_bytes: u64,
    /// The reserve, per device.
    pub reserve_bytes: u64,
    /// Sum of the lines in the total (reserve counted once).
    pub total_bytes: u64,
    /// What the most loaded device must hold (reserve included).
    pub per_device_bytes: u64,
    /// Parameters (logical, unquantised elements); `None` when weights come from a
    /// file header, which gives bytes but not the logical count of packed tensors.
    pub parameters: Option<u64>,
    /// Parameters used per token (MoE: active experts only); `None` as above.
    pub active_parameters: Option<u64>,
    /// Every line.
    pub lines: Vec<Line>,
    /// Hypotheses the figures rest on, in words.
    pub assumptions: Vec<String>,
    /// Soft problems with the input.
    pub warnings: Vec<String>,
}

struct Builder {
    lines: Vec<Line>,
    assumptions: Vec<String>,
    warnings: Vec<String>,
}

impl Builder {
    #[allow(clippy::too_many_arguments)]
    fn line(
        &mut self,
        key: impl Into<Cow<'static, str>>,
        label: impl Into<Cow<'static, str>>,
        bytes: u64,
        device_bytes: u64,
        kind: Kind,
        in_total: bool,
        formula: String,
        inputs: &[(&'static str, String)],
    ) {
        self.push_line(
            key.into(),
            label.into(),
            [bytes, device_bytes],
            kind,
            in_total,
            formula,
            inputs,
        );
    }

    /// The one non-generic body of [`Builder::line`]: kept out of line so the
    /// fifteen call sites share it (the page's wasm size).
    #[inline(never)]
    fn push_line(
        &mut self,
        key: Cow<'static, str>,
        label: Cow<'static, str>,
        [bytes, device_bytes]: [u64; 2],
        kind: Kind,
        in_total: bool,
        formula: String,
        inputs: &[(&'static str, String)],
    ) {
        // Inserted one by one rather than collected: `BTreeMap::from_iter` sorts,
        // and each sort instance costs the page kilobytes. A repeated name keeps
        // its last value either way.
        let mut map = BTreeMap::new();
        for (k, v) in inputs {
            map.insert(Cow::Borrowed(*k), v.clone());
        }
        self.lines.push(Line {
            group: Group::of(&key),
            key,
            label,
            bytes,
            device_bytes,
            kind,
            in_total,
            formula,
            inputs: map,
        });
    }
}

/// The most loaded device's share under tensor/pipeline parallelism.
struct Split {
    tp: u64,
    pp: u64,
    layers: Option<u64>,
}

impl Split {
    /// `bytes × num / den`, rounded up, in u128.
    fn part(bytes: u64, num: u64, den: u64) -> u64 {
        if den == 0 {
            return bytes;
        }
        let v = (u128::from(bytes) * u128::from(num)).div_ceil(u128::from(den));
        u64::try_from(v).unwrap_or(u64::MAX)
    }
    /// Per-layer weights (attention, MLP, norms, KV, activations): the heaviest
    /// stage holds ceil(layers / pp) layers; tensor parallelism divides by tp.
    fn layered(&self, bytes: u64, tp_splits: bool) -> u64 {
        let tp = if tp_splits { self.tp } else { 1 };
        match self.layers {
            Some(l) => Self::part(bytes, l.div_ceil(self.pp), l * tp),
            None => Self::part(bytes, 1, self.pp * tp),
        }
    }
}

/// Computes an estimate.
pub fn estimate(input: &EstimateInput) -> Result<Estimate, EstimateError> {
    validate(input)?;
    let mut b = Builder {
        lines: Vec::new(),
        assumptions: Vec::new(),
        warnings: Vec::new(),
    };
    let arch = input.arch;
    if let Some(a) = arch {
        a.validate()?;
    }
    let split = Split {
        tp: input.tp,
        pp: input.pp,
        layers: arch.map(|a| a.layers).or(input.kv_only.map(|k| k.layers)),
    };
    if input.tp > 1 || input.pp > 1 {
        if let Some(a) = arch {
            if a.kv_heads % input.tp != 0 && !input.tp.is_multiple_of(a.kv_heads) {
                b.warnings.push(format!(
                    "tp = {} does not divide {} KV heads evenly",
                    input.tp, a.kv_heads
                ));
            }
            if a.layers % input.pp != 0 {
                b.warnings.push(format!(
                    "{} layers do not split evenly into {} stages: the heaviest stage is counted",
                    a.layers, input.pp
                ));
            }
        } else {
            b.assumptions.push("no architecture given: weights and states are assumed to split evenly across tp × pp devices".into());
        }
    }
    if input.gpus > input.tp * input.pp {
        b.assumptions.push(format!(
            "{} GPUs with tp × pp = {}: {} data-parallel replicas, each device holding its own copy (memory is never pooled across GPUs, seed §12)",
            input.gpus,
            input.tp * input.pp,
            input.gpus / (input.tp * input.pp)
        ));
    }

    // Weights.
    let (params, active_params) = weights(input, &split, &mut b)?;
    let weights_bytes = group_sum(&b.lines, Group::Weights)?;

    // KV cache.
    kv_cache(input, &split, &mut b)?;

    // Training state.
    training(input, params, weights_bytes, &split, &mut b)?;

    // Activations and transients.
    transients(input, &split, &mut b)?;

    // Reserve.
    let reserve = match input.reserve_bytes {
        Some(r) => r,
        None => Bytes::from_gib(input.reserve_gib)?.get(),
    };
    let reserve_formula = match input.reserve_bytes {
        Some(_) => "a reserve given in bytes (e.g. the agent's observed context/non-pool overhead)"
            .to_string(),
        None => format!("{} GiB × 2^30", input.reserve_gib),
    };
    b.line(
        "reserve",
        "Reserve (preparation hypothesis, not proof — seed §2)",
        reserve,
        reserve,
        Kind::Assumed,
        true,
        reserve_formula,
        &[("reserve-gib", input.reserve_gib.to_string())],
    );
    if input.cuda_context_mib.is_none() {
        b.assumptions.push("the CUDA context and library workspaces are assumed to fit inside the reserve (set cuda-context-mib, or use the agent's observed value)".into());
    }

    let counted = |l: &&Line| l.in_total;
    let kv_cache_bytes = group_sum(&b.lines, Group::KvCache)?;
    let training_bytes = group_sum(&b.lines, Group::Training)?;
    let transient_bytes = group_sum(&b.lines, Group::Transient)?;
    let total_bytes = sum_lines(&b.lines, counted, |l| l.bytes, "total")?;
    let per_device_bytes = sum_lines(&b.lines, counted, |l| l.device_bytes, "per-device total")?;
    Ok(Estimate {
        weights_bytes,
        kv_cache_bytes,
        training_bytes,
        transient_bytes,
        reserve_bytes: reserve,
        total_bytes,
        per_device_bytes,
        parameters: params,
        active_parameters: active_params,
        lines: b.lines,
        assumptions: b.assumptions,
        warnings: b.warnings,
    })
}

/// Checked sum of one field over the lines that `keep` selects.
fn sum_lines(
    lines: &[Line],
    keep: impl Fn(&&Line) -> bool,
    field: impl Fn(&Line) -> u64,
    what: &'static str,
) -> Result<u64, EstimateError> {
    Bytes::sum(lines.iter().filter(keep).map(|l| Bytes(field(l))), what).map(Bytes::get)
}

/// Checked sum of the bytes of the counted lines of one group.
fn group_sum(lines: &[Line], group: Group) -> Result<u64, EstimateError> {
    sum_lines(
        lines,
        |l| l.in_total && l.group == group,
        |l| l.bytes,
        "headline figure",
    )
}

/// Checks ranges that cut across fields.
fn validate(i: &EstimateInput) -> Result<(), EstimateError> {
    let positive = [
        ("sequences", i.sequences),
        ("gpus", i.gpus),
        ("tp", i.tp),
        ("pp", i.pp),
    ];
    for (f, v) in positive {
        if v == 0 {
            return Err(EstimateError::invalid(f, "must be at least 1"));
        }
        if v > MAX_DIM {
            return Err(EstimateError::invalid(f, "absurdly large"));
        }
    }
    if !i.gpus.is_multiple_of(i.tp * i.pp) {
        return Err(EstimateError::invalid(
            "gpus",
            format!(
                "{} GPUs cannot be split into tp {} × pp {} groups",
                i.gpus, i.tp, i.pp
            ),
        ));
    }
    if let Some(a) = i.arch
        && i.pp > a.layers
    {
        return Err(EstimateError::invalid(
            "pp",
            format!("{} stages for {} layers", i.pp, a.layers),
        ));
    }
    for (f, v) in [
        ("context", i.context.unwrap_or(0)),
        ("generate", i.generate),
        ("static-cache", i.static_cache.unwrap_or(0)),
        ("sliding-window", i.sliding_window.unwrap_or(0)),
    ] {
        if v > MAX_DIM {
            return Err(EstimateError::invalid(f, "absurdly large"));
        }
    }
    if i.sliding_window == Some(0) {
        return Err(EstimateError::invalid(
            "sliding-window",
            "must be at least 1",
        ));
    }
    if let Some(p) = i.parameters
        && p == 0
    {
        return Err(EstimateError::invalid("parameters", "must be at least 1"));
    }
    if i.train == TrainMode::Lora && i.lora_rank == 0 {
        return Err(EstimateError::invalid("lora-rank", "must be at least 1"));
    }
    Ok(())
}

/// Maps the seed script's `--bits` to a storage format.
fn format_for_bits(bits: u32) -> Result<StorageFormat, EstimateError> {
    let name = match bits {
        32 => "fp32",
        16 => "bf16",
        8 => "int8",
        4 => "gptq-4-g128",
        3 => "gptq-3-g128",
        2 => "gptq-2-g128",
        _ => {
            return Err(EstimateError::invalid(
                "bits",
                format!(
                    "{bits} bits is not a storage format; use 32, 16, 8, 4, 3 or 2, or name one with format"
                ),
            ));
        }
    };
    StorageFormat::parse("bits", name)
}

fn weights(
    input: &EstimateInput,
    split: &Split,
    b: &mut Builder,
) -> Result<(Option<u64>, Option<u64>), EstimateError> {
    let linear = match (input.format, input.bits) {
        (Some(f), Some(bits)) => {
            let implied = format_for_bits(bits).ok();
            if implied.is_some_and(|i| i != f)
                && !matches!(f, StorageFormat::Dense { dtype } if u64::from(bits) == dtype.bytes() * 8)
            {
                b.warnings.push(format!(
                    "bits = {bits} ignored: format {} is used",
                    f.name()
                ));
            }
            f
        }
        (Some(f), None) => f,
        (None, Some(bits)) => format_for_bits(bits)?,
        (None, None) => StorageFormat::BF16,
    };
    if let Some(t) = &input.tensors {
        return imported_weights(t, input.arch.as_ref(), split, b);
    }
    if let Some(a) = input.arch {
        let formats = ModuleFormats {
            linear,
            attention: input.attention_format.unwrap_or(linear),
            vocab: input.keep_format,
            kept: input.keep_format,
        };
        let w = a.weights(&formats)?;
        for c in &w.classes {
            let device = match c.class {
                ParamClass::Attention | ParamClass::Mlp | ParamClass::Mtp => {
                    split.layered(c.bytes, true)
                }
                ParamClass::Norms => split.layered(c.bytes, false),
                // Vocab-parallel across tp; held by the first (embeddings) or last (lm_head) stage.
                ParamClass::Embeddings | ParamClass::LmHead | ParamClass::Tower => {
                    Split::part(c.bytes, 1, split.tp)
                }
            };
            let label = match c.class {
                ParamClass::Embeddings => "Weights: embeddings",
                ParamClass::Attention => "Weights: attention",
                ParamClass::Mlp => "Weights: MLP",
                ParamClass::Norms => "Weights: norms",
                ParamClass::LmHead => "Weights: lm_head",
                ParamClass::Mtp => "Weights: MTP layers (stored in the checkpoint)",
                ParamClass::Tower => "Weights: vision/audio tower",
            };
            b.line(
                format!("weights.{}", c.class.key()),
                label,
                c.bytes,
                device,
                Kind::Computed,
                true,
                format!("{} parameters stored as {}", c.params, c.formats),
                &[
                    ("parameters", c.params.to_string()),
                    ("format", c.formats.clone()),
                ],
            );
        }
        if split.pp > 1 {
            // Embeddings sit on the first stage, lm_head on the last: only the larger counts per device.
            let emb = b.lines.iter().position(|l| l.key == "weights.embeddings");
            let head = b.lines.iter().position(|l| l.key == "weights.lm_head");
            if let (Some(e), Some(h)) = (emb, head) {
                let smaller = if b.lines[e].device_bytes <= b.lines[h].device_bytes {
                    e
                } else {
                    h
                };
                b.lines[smaller].device_bytes = 0;
            }
        }
        b.warnings.extend(w.notes.iter().cloned());
        if a.mtp_layers > 0 {
            b.assumptions.push(format!(
                "{} multi-token-prediction layer(s) counted because the checkpoint stores them; an engine that does not speculate with them may skip loading them",
                a.mtp_layers
            ));
        }
        let active = w.classes.iter().map(|c| c.active_params).sum();
        return Ok((Some(w.params()), Some(active)));
    }
    let Some(n) = input.parameters else {
        if input.kv_only.is_some() {
            b.warnings.push(
                "weights not counted: only the KV cache's shape was given (add parameters, the full architecture or a model file)"
                    .into(),
            );
            return Ok((None, None));
        }
        return Err(EstimateError::invalid(
            "parameters",
            "give the parameter count, the architecture (layers, hidden, heads, …), the KV shape (layers, kv-heads, head-dim) or a model file",
        ));
    };
    let (bytes, kind, formula) = match linear {
        StorageFormat::Dense { dtype } => (
            checked_product(&[n, dtype.bytes()], "weights")?,
            Kind::Computed,
            format!("parameters × {} B ({})", dtype.bytes(), dtype.name()),
        ),
        q => {
            let d = ASSUMED_MATRIX_DIM;
            let square = q.matrix_bytes(d, d)?.bytes;
            let full = n / (d * d);
            let rest = n % (d * d);
            let mut bytes = checked_product(&[square, full], "weights")?;
            if rest > 0 {
                bytes = bytes
                    .checked_add(q.matrix_bytes(rest.div_ceil(d), d)?.bytes)
                    .ok_or(EstimateError::Overflow { what: "weights" })?;
            }
            b.assumptions.push(format!(
                "parameter-count mode with {}: every parameter is assumed quantised, in {d}×{d} linear layers, to count its scales and zero-points; use the architecture mode or a model file for exact bytes",
                q.name()
            ));
            (
                bytes,
                Kind::Assumed,
                format!(
                    "{} layout over {d}×{d} matrices (scales, zero-points, indices included)",
                    q.name()
                ),
            )
        }
    };
    b.line(
        "weights",
        "Weights",
        bytes,
        Split::part(bytes, 1, split.tp * split.pp),
        kind,
        true,
        formula,
        &[("parameters", n.to_string()), ("format", linear.name())],
    );
    Ok((Some(n), Some(n)))
}

fn imported_weights(
    t: &TensorSummary,
    arch: Option<&Architecture>,
    split: &Split,
    b: &mut Builder,
) -> Result<(Option<u64>, Option<u64>), EstimateError> {
    for (class, tally) in &t.by_class {
        let device = match class.as_str() {
            "attention" | "mlp" => split.layered(tally.bytes, true),
            "norms" => split.layered(tally.bytes, false),
            _ => Split::part(tally.bytes, 1, split.tp),
        };
        b.line(
            format!("weights.{class}"),
            format!(
                "Weights: {class} (from {} header{})",
                t.source,
                if t.files > 1 { "s" } else { "" }
            ),
            tally.bytes,
            device,
            Kind::Computed,
            true,
            format!(
                "{} tensors, dtype × shape from the file header, every scale and index included",
                tally.tensors
            ),
            &[
                ("tensors", tally.tensors.to_string()),
                ("files", t.files.to_string()),
            ],
        );
    }
    if arch.is_none() && (split.tp > 1 || split.pp > 1) {
        b.assumptions.push(
            "imported weights without an architecture: layers are assumed to split evenly".into(),
        );
    }
    // A file header gives bytes, not the logical parameters of packed tensors.
    Ok((None, None))
}

fn kv_cache(input: &EstimateInput, split: &Split, b: &mut Builder) -> Result<(), EstimateError> {
    let Some(context) = input.context else {
        if input.generate > 0 || input.static_cache.is_some() {
            return Err(EstimateError::invalid(
                "context",
                "the KV cache needs the prompt length (context)",
            ));
        }
        return Ok(());
    };
    if input.train != TrainMode::None {
        return Ok(());
    }
    let dims = match (input.arch, input.kv_only) {
        (Some(a), _) => Some((
            a.layers,
            a.kv_heads,
            a.kv_values_per_token()?,
            a.mla.is_some(),
        )),
        (None, Some(k)) => Some((
            k.layers,
            k.kv_heads,
            checked_product(&[2, k.kv_heads, k.head_dim], "KV values")?,
            false,
        )),
        (None, None) => None,
    };
    let Some((layers, kv_heads, values, mla)) = dims else {
        return Err(EstimateError::invalid(
            "context",
            "the KV cache needs layers, kv-heads and head-dim (give them, a preset or a config.json)",
        ));
    };
    if input.state_layers > layers {
        return Err(EstimateError::invalid(
            "state-layers",
            format!("{} state layers of {layers} layers", input.state_layers),
        ));
    }
    let shape = KvShape {
        layers: layers - input.state_layers,
        values,
        layout: if mla {
            KvLayout::MlaLatent
        } else {
            KvLayout::Heads
        },
        dtype: input.kv_dtype.unwrap_or(KvDtype::Dense {
            dtype: input.compute_dtype,
        }),
        sequences: input.sequences,
        sliding_window: input.sliding_window,
        sliding_layers: input.sliding_layers,
        static_tokens: input.static_cache,
    };
    let end = context
        .checked_add(input.generate)
        .ok_or(EstimateError::Overflow { what: "tokens" })?;
    if let Some(max) = input.max_position
        && end > max
    {
        b.warnings.push(format!(
            "{end} tokens per sequence exceed the {max} positions the model was trained for (max-position); quality beyond them needs rope scaling the model supports"
        ));
    }
    if let Some(s) = input.static_cache
        && context + input.generate > s
    {
        b.warnings.push(format!(
            "prompt + generated tokens ({}) exceed the static cache ({s})",
            context + input.generate
        ));
    }
    // KV heads are split across tp; when tp exceeds them each device keeps one head's
    // copy. MLA's latent is one "head": every tp rank keeps all of it.
    let kv_per_device = |bytes: u64| -> u64 {
        if mla {
            return split.layered(bytes, false);
        }
        let heads_here = kv_heads.div_ceil(split.tp).max(1);
        Split::part(split.layered(bytes, false), heads_here, kv_heads)
    };
    let inputs = [
        ("layers", layers.to_string()),
        ("values per token and layer", values.to_string()),
        ("kv-dtype", shape.dtype.name()),
        ("sequences", input.sequences.to_string()),
    ];
    let prefill = shape.bytes(context)?;
    let generation = shape.bytes(end)?;
    let mut pre_inputs = inputs.to_vec();
    pre_inputs.push(("tokens", context.to_string()));
    b.line(
        "kv_cache.prefill",
        "KV cache after prefill (shown, not added)",
        prefill,
        kv_per_device(prefill),
        Kind::Computed,
        false,
        shape.formula(),
        &pre_inputs,
    );
    let mut gen_inputs = inputs.to_vec();
    gen_inputs.push(("tokens", end.to_string()));
    b.line(
        "kv_cache",
        "KV cache at the end of generation",
        generation,
        kv_per_device(generation),
        Kind::Computed,
        true,
        shape.formula(),
        &gen_inputs,
    );
    if input.state_layers > 0 {
        let bytes = checked_product(
            &[input.state_layers, input.state_bytes, input.sequences],
            "recurrent state",
        )?;
        b.line(
            "kv_cache.state",
            "Recurrent state of state-space / linear-attention layers",
            bytes,
            split.layered(bytes, true),
            Kind::Computed,
            true,
            "state layers × state bytes per layer × sequences (constant in tokens)".into(),
            &[
                ("state-layers", input.state_layers.to_string()),
                ("state-bytes", input.state_bytes.to_string()),
                ("sequences", input.sequences.to_string()),
            ],
        );
    }
    if let Some(full) = input
        .arch
        .map(|a| a.mla_decompressed_values())
        .transpose()?
        .flatten()
    {
        let wide = KvShape {
            values: full,
            layout: KvLayout::MlaDecompressed,
            ..shape
        };
        let bytes = wide.bytes(end)?;
        b.line(
            "kv_cache.decompressed",
            "KV cache, decompressed K/V (shown, not added)",
            bytes,
            split.layered(bytes, true),
            Kind::Computed,
            false,
            wide.formula(),
            &[("values per token and layer", full.to_string())],
        );
        b.assumptions.push("MLA: the cache holds the compressed latent (vLLM, SGLang); an engine caching decompressed K and V (e.g. transformers' eager path) needs the kv_cache.decompressed line instead".into());
    }
    Ok(())
}

/// LoRA-trainable parameters: r × (in + out) per targeted projection per layer.
fn lora_params(a: &Architecture, rank: u64, targets: &str) -> Result<u64, EstimateError> {
    let q = a.heads * a.head_dim;
    let kv = a.kv_heads * a.head_dim;
    let h = a.hidden;
    let (inter, mlp_count) = match a.moe {
        Some(Moe {
            experts,
            expert_intermediate,
            dense_layers,
            ..
        }) => (
            expert_intermediate,
            experts * (a.layers - dense_layers) + dense_layers,
        ),
        None => (a.intermediate, a.layers),
    };
    let all = targets.trim() == "all";
    let mut per_layer_attn = 0u64;
    let mut mlp = 0u64;
    for t in ["q", "k", "v", "o", "gate", "up", "down"] {
        let on = all
            || targets
                .split(',')
                .any(|x| x.trim().trim_end_matches("_proj") == t);
        if !on {
            continue;
        }
        match t {
            "q" => per_layer_attn += h + q,
            "k" | "v" => per_layer_attn += h + kv,
            "o" => per_layer_attn += q + h,
            "gate" | "up" if a.gated_mlp || t == "up" => mlp += h + inter,
            "down" => mlp += inter + h,
            _ => {}
        }
    }
    for t in targets
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty() && !all)
    {
        if !["q", "k", "v", "o", "gate", "up", "down"].contains(&t.trim_end_matches("_proj")) {
            return Err(EstimateError::invalid(
                "lora-targets",
                format!("unknown projection {t:?}; use q,k,v,o,gate,up,down or all"),
            ));
        }
    }
    let attn = checked_product(&[rank, per_layer_attn, a.layers], "LoRA parameters")?;
    let mlp = checked_product(&[rank, mlp, mlp_count], "LoRA parameters")?;
    attn.checked_add(mlp).ok_or(EstimateError::Overflow {
        what: "LoRA parameters",
    })
}

fn training(
    input: &EstimateInput,
    params: Option<u64>,
    weights_bytes: u64,
    split: &Split,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    if input.train == TrainMode::None {
        return Ok(());
    }
    let grad = input.grad_dtype.unwrap_or(input.compute_dtype);
    let (trainable, state_dtype, master) = match input.train {
        TrainMode::Full => {
            let Some(params) = params else {
                return Err(EstimateError::invalid(
                    "train",
                    "full training needs the parameter count or the architecture",
                ));
            };
            let master = input.master_weights && input.compute_dtype != Dtype::F32;
            (
                params,
                if master {
                    Dtype::F32
                } else {
                    input.compute_dtype
                },
                master,
            )
        }
        TrainMode::Lora => {
            let Some(a) = input.arch else {
                return Err(EstimateError::invalid(
                    "train",
                    "LoRA needs the architecture to size its adapters",
                ));
            };
            // PEFT keeps adapter weights in fp32 (autocast_adapter_dtype) on a frozen base.
            (
                lora_params(&a, input.lora_rank, &input.lora_targets)?,
                Dtype::F32,
                false,
            )
        }
        TrainMode::None => return Ok(()),
    };
    // Device share of trainable state follows the weights' split.
    let device_share = |bytes: u64| split.layered(bytes, true);
    let add = |b: &mut Builder,
               key: &'static str,
               label: Cow<'static, str>,
               bytes: u64,
               formula: String,
               inputs: &[(&'static str, String)]| {
        b.line(
            key,
            label,
            bytes,
            device_share(bytes),
            Kind::Computed,
            true,
            formula,
            inputs,
        );
    };
    let tr = ("trainable parameters", trainable.to_string());
    if input.train == TrainMode::Lora {
        let bytes = checked_product(&[trainable, 4], "adapters")?;
        add(
            b,
            "training.adapters",
            "LoRA adapters (fp32)".into(),
            bytes,
            "r × (in + out) per targeted projection × 4 B".into(),
            &[
                tr.clone(),
                ("lora-rank", input.lora_rank.to_string()),
                ("lora-targets", input.lora_targets.clone()),
            ],
        );
    }
    let grad_dtype = if input.train == TrainMode::Lora {
        Dtype::F32
    } else {
        grad
    };
    let gbytes = checked_product(&[trainable, grad_dtype.bytes()], "gradients")?;
    add(
        b,
        "training.gradients",
        "Gradients".into(),
        gbytes,
        format!(
            "trainable × {} B ({})",
            grad_dtype.bytes(),
            grad_dtype.name()
        ),
        std::slice::from_ref(&tr),
    );
    let obytes = input.optimizer.state_bytes(trainable, state_dtype)?;
    if obytes > 0 {
        let formula = match input.optimizer {
            Optimizer::Adamw => format!(
                "2 states × trainable × {} B ({})",
                state_dtype.bytes(),
                state_dtype.name()
            ),
            Optimizer::Adamw8bit => {
                "2 states × (trainable × 1 B + fp32 absmax per 256 values)".into()
            }
            _ => format!("1 state × trainable × {} B", state_dtype.bytes()),
        };
        add(
            b,
            "training.optimizer",
            format!("Optimizer states ({})", input.optimizer.name()).into(),
            obytes,
            formula,
            &[tr.clone(), ("optimizer", input.optimizer.name().into())],
        );
    }
    if master {
        let mbytes = checked_product(&[trainable, 4], "master weights")?;
        add(
            b,
            "training.master_weights",
            "fp32 master weights".into(),
            mbytes,
            "trainable × 4 B".into(),
            &[tr],
        );
    }
    if input.train == TrainMode::Lora {
        b.assumptions.push(format!(
            "LoRA: the frozen base stays in its storage format ({} B of weights)",
            weights_bytes
        ));
    }
    // Activations: an assumption with its formula.
    if let (Some(a), Some(seq)) = (input.arch, input.context) {
        let (bytes, formula) = activation_bytes(
            a.layers,
            a.hidden,
            a.heads,
            seq,
            input.sequences,
            input.checkpointing,
            input.attention,
        )?;
        b.line(
            "activations",
            "Activations kept for backward (assumed — only a measured step settles it)",
            bytes,
            split.layered(bytes, false),
            Kind::Assumed,
            true,
            format!("{formula} (Korthikanti et al. 2022, 16-bit activations)"),
            &[
                ("L (layers)", a.layers.to_string()),
                ("h (hidden)", a.hidden.to_string()),
                ("a (heads)", a.heads.to_string()),
                ("s (context)", seq.to_string()),
                ("b (sequences)", input.sequences.to_string()),
                ("checkpointing", input.checkpointing.to_string()),
                ("attention", input.attention.name().into()),
            ],
        );
        let logits = checked_product(&[2, input.sequences, seq, a.vocab, 4], "logits")?;
        b.line(
            "logits",
            "Logits and their gradient in fp32 (assumed)",
            logits,
            Split::part(logits, 1, split.tp),
            Kind::Assumed,
            true,
            "2 × sequences × tokens × vocab × 4 B (fp32 upcast for the loss)".into(),
            &[
                ("sequences", input.sequences.to_string()),
                ("tokens", seq.to_string()),
                ("vocab", a.vocab.to_string()),
            ],
        );
    } else {
        b.assumptions.push("training activations are not estimated: give the architecture and the context (sequence length)".into());
    }
    Ok(())
}

fn transients(input: &EstimateInput, split: &Split, b: &mut Builder) -> Result<(), EstimateError> {
    if let Some(mib) = input.cuda_context_mib {
        let bytes = checked_product(&[mib, MIB], "CUDA context")?;
        b.line(
            "cuda_context",
            "CUDA context and library workspaces, per device (assumed; outside any allocator)",
            bytes,
            bytes,
            Kind::Assumed,
            true,
            "cuda-context-mib × 2^20 (the agent measures it on your device)".into(),
            &[("cuda-context-mib", mib.to_string())],
        );
    }
    if input.train != TrainMode::None {
        return Ok(());
    }
    let (Some(a), Some(tokens)) = (input.arch, input.context) else {
        return Ok(());
    };
    let value = input.compute_dtype.bytes();
    let (inter, live) = match a.moe {
        Some(m) => (
            checked_product(&[m.expert_intermediate, m.active], "MLP intermediate")?,
            if a.gated_mlp { 3 } else { 2 },
        ),
        None => (a.intermediate, if a.gated_mlp { 3 } else { 2 }),
    };
    let mlp = checked_product(
        &[live, input.sequences, tokens, inter, value],
        "MLP intermediate",
    )?;
    b.line(
        "prefill.mlp",
        "Prefill MLP intermediates (assumed)",
        mlp,
        Split::part(mlp, 1, split.tp),
        Kind::Assumed,
        true,
        format!("{live} live tensors × sequences × tokens × intermediate × {value} B"),
        &[
            ("sequences", input.sequences.to_string()),
            ("tokens", tokens.to_string()),
            ("intermediate", inter.to_string()),
        ],
    );
    let scores = match input.attention {
        AttentionImpl::Eager => checked_product(
            &[2, input.sequences, a.heads, tokens, tokens, value],
            "attention scores",
        )?,
        _ => 0,
    };
    b.line(
        "prefill.attention_scores",
        "Attention score matrix (assumed)",
        scores,
        Split::part(scores, 1, split.tp),
        Kind::Assumed,
        true,
        match input.attention {
            AttentionImpl::Eager => format!(
                "eager: scores + probabilities, 2 × sequences × heads × tokens² × {value} B"
            ),
            other => format!("{}: fused kernel, no tokens² matrix is kept", other.name()),
        },
        &[
            ("attention", input.attention.name().into()),
            ("heads", a.heads.to_string()),
            ("tokens", tokens.to_string()),
        ],
    );
    let kept = match input.logits {
        Logits::Last => 1,
        Logits::All => tokens,
    };
    let logits = checked_product(&[input.sequences, kept, a.vocab, 4], "logits")?;
    b.line(
        "prefill.logits",
        "Logits in fp32 (assumed)",
        logits,
        Split::part(logits, 1, split.tp),
        Kind::Assumed,
        true,
        format!(
            "sequences × {} × vocab × 4 B",
            if kept == 1 {
                "1 (last position)".to_string()
            } else {
                "tokens".into()
            }
        ),
        &[
            ("logits", input.logits.name().into()),
            ("vocab", a.vocab.to_string()),
        ],
    );
    b.assumptions.push(
        "prefill transients are summed although they are not all alive at once: an upper bound"
            .into(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::from_pairs;

    fn llama_8b(extra: &[(&'static str, &'static str)]) -> EstimateInput {
        let mut pairs = vec![
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("intermediate", "14336"),
            ("vocab", "128256"),
        ];
        pairs.extend_from_slice(extra);
        let (input, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        input
    }

    #[test]
    fn three_workloads_side_by_side_vary_one_dimension() {
        let base = llama_8b(&[]);
        let results: Vec<Result<Estimate, EstimateError>> = [2048, 4096, 8192]
            .into_iter()
            .map(|context| {
                estimate(&EstimateInput {
                    context: Some(context),
                    ..base.clone()
                })
            })
            .collect();
        let kv: Vec<u64> = results
            .iter()
            .map(|r| r.as_ref().map(|e| e.kv_cache_bytes).unwrap_or(0))
            .collect();
        // Doubling the context at constant batch doubles a dense cache (seed §11).
        assert_eq!(kv, vec![1 << 28, 1 << 29, 1 << 30]);
    }

    #[test]
    fn pipeline_stages_hold_their_layers_and_one_vocab_matrix() {
        let one = estimate(&llama_8b(&[])).unwrap();
        let two = estimate(&llama_8b(&[("gpus", "2"), ("pp", "2")])).unwrap();
        let line = |e: &Estimate, k: &str| {
            e.lines
                .iter()
                .find(|l| l.key == k)
                .map(|l| l.device_bytes)
                .unwrap()
        };
        assert_eq!(line(&two, "weights.mlp") * 2, line(&one, "weights.mlp"));
        // Embeddings and lm_head are the same size here: only one counts per device.
        assert_eq!(
            line(&two, "weights.embeddings") + line(&two, "weights.lm_head"),
            line(&one, "weights.lm_head")
        );
        assert!(two.per_device_bytes < one.per_device_bytes);
        // The reserve is per device, never pooled.
        assert_eq!(line(&two, "reserve"), line(&one, "reserve"));
    }

    /// Every headline figure is the sum of its group and the total is their sum:
    /// no line counts twice (issue 9: the assumed weights line of parameter-count
    /// mode was also summed as a transient).
    #[test]
    fn headline_figures_partition_the_total() {
        let cases: [&[(&str, &str)]; 4] = [
            &[("parameters", "7e9"), ("bits", "4")],
            &[
                ("parameters", "7e9"),
                ("train", "full"),
                ("cuda-context-mib", "500"),
            ],
            &[
                ("layers", "32"),
                ("kv-heads", "8"),
                ("head-dim", "128"),
                ("context", "8192"),
            ],
            &[
                ("layers", "32"),
                ("hidden", "4096"),
                ("heads", "32"),
                ("intermediate", "14336"),
                ("vocab", "128256"),
                ("context", "4096"),
                ("attention", "eager"),
            ],
        ];
        for pairs in cases {
            let (input, errors) = from_pairs(pairs.iter().copied());
            assert!(errors.is_empty(), "{errors:?}");
            let e = estimate(&input).unwrap();
            let parts = e.weights_bytes
                + e.kv_cache_bytes
                + e.training_bytes
                + e.transient_bytes
                + e.reserve_bytes;
            assert_eq!(parts, e.total_bytes, "{pairs:?}");
        }
        let (input, _) = from_pairs([("parameters", "7e9"), ("bits", "4")]);
        assert_eq!(estimate(&input).unwrap().transient_bytes, 0);
    }

    /// DeepSeek-style MLA caches one latent per token and layer: 61 layers ×
    /// (512 + 64) values × 8192 tokens × 2 B; the decompressed line is shown aside.
    #[test]
    fn mla_caches_the_latent_and_shows_the_decompressed_cache_aside() {
        let (input, errors) = from_pairs([
            ("layers", "61"),
            ("hidden", "7168"),
            ("heads", "128"),
            ("intermediate", "18432"),
            ("vocab", "129280"),
            ("kv-lora-rank", "512"),
            ("q-lora-rank", "1536"),
            ("qk-nope-dim", "128"),
            ("qk-rope-dim", "64"),
            ("v-head-dim", "128"),
            ("context", "8192"),
            ("kv-dtype", "bf16"),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        let e = estimate(&input).unwrap();
        assert_eq!(e.kv_cache_bytes, 61 * 576 * 8192 * 2);
        let wide = e
            .lines
            .iter()
            .find(|l| l.key == "kv_cache.decompressed")
            .unwrap();
        assert_eq!(wide.bytes, 61 * 128 * (192 + 128) * 8192 * 2);
        assert!(!wide.in_total);
    }

    /// A hybrid's state layers keep a constant state instead of KV: 48 layers of
    /// which 36 linear-attention layers (Qwen3-Next's 3:1 pattern) keep 1 MiB each.
    #[test]
    fn state_layers_replace_kv_with_a_constant_state() {
        let pairs = |tokens: &'static str| {
            from_pairs([
                ("parameters", "80e9"),
                ("layers", "48"),
                ("kv-heads", "2"),
                ("head-dim", "256"),
                ("state-layers", "36"),
                ("state-bytes", "1048576"),
                ("sequences", "2"),
                ("context", tokens),
            ])
            .0
        };
        let short = estimate(&pairs("1024")).unwrap();
        let long = estimate(&pairs("2048")).unwrap();
        let state = 36 * 1_048_576 * 2;
        let kv = |t: u64| 12 * 2 * 2 * 256 * t * 2 * 2;
        assert_eq!(short.kv_cache_bytes, kv(1024) + state);
        assert_eq!(long.kv_cache_bytes, kv(2048) + state);
        let (bad, _) = from_pairs([
            ("layers", "4"),
            ("kv-heads", "2"),
            ("head-dim", "64"),
            ("state-layers", "5"),
            ("context", "8"),
        ]);
        assert!(
            estimate(&bad)
                .unwrap_err()
                .to_string()
                .starts_with("state-layers:")
        );
    }

    #[test]
    fn a_split_that_does_not_divide_the_gpus_is_refused() {
        let err = estimate(&llama_8b(&[("gpus", "3"), ("tp", "2")])).unwrap_err();
        assert!(err.to_string().starts_with("gpus:"), "{err}");
    }

    #[test]
    fn eager_attention_adds_a_tokens_squared_matrix_and_sdpa_does_not() {
        let sdpa = estimate(&llama_8b(&[("context", "4096")])).unwrap();
        let eager = estimate(&llama_8b(&[("context", "4096"), ("attention", "eager")])).unwrap();
        let scores = |e: &Estimate| {
            e.lines
                .iter()
                .find(|l| l.key == "prefill.attention_scores")
                .unwrap()
                .bytes
        };
        assert_eq!(scores(&sdpa), 0);
        assert_eq!(scores(&eager), 2 * 32 * 4096 * 4096 * 2);
        assert!(
            eager
                .lines
                .iter()
                .all(|l| l.key != "prefill.attention_scores" || l.kind == Kind::Assumed)
        );
    }
}
