//! The shared vocabulary: `key=value` pairs ↔ [`EstimateInput`].
//!
//! Keys are the CLI flags without their dashes (`reserve-gib`, `kv-heads`), so a
//! page URL (`?parameters=7000000000&bits=16&reserve-gib=4`) and a command line
//! describe the same estimate. Parsing collects one error per bad field so the page
//! can show each message beside its field, and loses nothing the user typed.

// Checked arithmetic only: every operand here is user input.
#![deny(clippy::arithmetic_side_effects)]

use crate::arch::{
    Architecture, GlobalAttn, Indexer, KvShare, MAX_DIM, Mixer, MixerKind, Mla, Moe, PerLayerInput,
    SharedAttn, VisionTower, fact_of,
};
use crate::error::EstimateError;
use crate::estimate::{EstimateInput, Fsdp, KvDims, Logits, Offload, Pipeline, TrainMode};
use crate::format::{Bnb4, Dtype, StorageFormat};
use crate::kv::KvDtype;
use crate::training::{AttentionImpl, CheckpointPolicy, Framework, Loss, Optimizer, QloraKernel};

pub use crate::fields::{FIELDS, Field, FieldGroup, FieldKind, field};

/// The estimate's keys (every field of [`FIELDS`] but the engine's), in table order.
pub fn keys() -> impl Iterator<Item = &'static str> + Clone {
    FIELDS.iter().filter(|f| !f.is_engine()).map(|f| f.key)
}

/// Parses a whole number as users type it: `7000000000`, `7_000_000_000`,
/// `7 000 000 000`, `7,000,000,000` or `7e9`.
pub fn parse_count(field: &'static str, text: &str) -> Result<u64, EstimateError> {
    let t: String = text
        .trim()
        .chars()
        .filter(|c| !matches!(c, '_' | ',' | ' ' | '\u{202f}' | '\u{a0}'))
        .collect();
    if t.is_empty() {
        return Err(EstimateError::invalid(
            field,
            "is empty; type a whole number",
        ));
    }
    if t.starts_with('-') {
        return Err(EstimateError::invalid(
            field,
            format!("{text:?} is negative; type a whole number ≥ 0"),
        ));
    }
    let (mantissa, exp) = match t.to_ascii_lowercase().split_once('e') {
        Some((m, e)) => (m.to_string(), Some(e.to_string())),
        None => (t.clone(), None),
    };
    let not_number = || EstimateError::invalid(field, format!("{text:?} is not a whole number"));
    let too_big = || EstimateError::invalid(field, format!("{text:?} is absurdly large"));
    let exp: u32 = match exp {
        Some(e) if !e.is_empty() && e.chars().all(|c| c.is_ascii_digit()) => {
            // u64 holds 20 digits: an exponent beyond 64 is absurd whatever the
            // mantissa, and bounding it keeps the scaling loops below short.
            e.parse::<u32>()
                .ok()
                .filter(|x| *x <= 64)
                .ok_or_else(too_big)?
        }
        Some(_) => return Err(not_number()),
        None => 0,
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((&mantissa, ""));
    if int.is_empty() && frac.is_empty()
        || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())
    {
        return Err(not_number());
    }
    let frac_len = frac.len() as u32;
    if frac_len > exp && frac.chars().skip(exp as usize).any(|c| c != '0') {
        return Err(EstimateError::invalid(
            field,
            format!("{text:?} is not a whole number"),
        ));
    }
    let digits = format!("{int}{frac}");
    let mut v: u128 = 0;
    for c in digits.chars() {
        v = v
            .checked_mul(10)
            .and_then(|x| x.checked_add(u128::from(c.to_digit(10)?)))
            .ok_or_else(too_big)?;
    }
    if exp >= frac_len {
        for _ in 0..exp.saturating_sub(frac_len) {
            v = v.checked_mul(10).ok_or_else(too_big)?;
        }
    } else {
        for _ in 0..frac_len.saturating_sub(exp) {
            v /= 10;
        }
    }
    u64::try_from(v).map_err(|_| too_big())
}

fn parse_bool(field: &'static str, text: &str) -> Result<bool, EstimateError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        other => Err(EstimateError::invalid(
            field,
            format!("{other:?} is not true or false"),
        )),
    }
}

fn key_static(key: &str) -> Option<&'static Field> {
    field(key).filter(|f| !f.is_engine())
}

/// Reads `key=value` pairs into an input. Unknown keys and bad values each give
/// one error; valid fields are still applied.
pub fn from_pairs<'a, I>(pairs: I) -> (EstimateInput, Vec<EstimateError>)
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    read_pairs(&mut pairs.into_iter())
}

/// The one non-generic body of [`from_pairs`], compiled once rather than for each
/// caller's iterator type.
#[inline(never)]
fn read_pairs<'a>(
    pairs: &mut dyn Iterator<Item = (&'a str, &'a str)>,
) -> (EstimateInput, Vec<EstimateError>) {
    let mut input = EstimateInput::default();
    let mut errors = Vec::new();
    let mut arch_facts: Vec<(&'static str, u64)> = Vec::new();
    let mut kv_text: Option<String> = None;
    let mut mixer: Option<MixerKind> = None;
    let mut checkpointing_given = false;
    let mut keep_given = false;
    let mut given: Vec<&'static str> = Vec::new();
    for (key, value) in pairs {
        let Some(f) = key_static(key) else {
            errors.push(EstimateError::invalid(
                "input",
                format!("unknown key {key:?}"),
            ));
            continue;
        };
        checkpointing_given |= f.key == "checkpointing";
        keep_given |= f.key == "keep-format";
        given.push(f.key);
        if f.key == "mixer" {
            match value.trim() {
                "" | "none" => mixer = None,
                "mamba" => mixer = Some(MixerKind::Mamba),
                "deltanet" => mixer = Some(MixerKind::DeltaNet),
                "kda" => mixer = Some(MixerKind::Kda),
                "mamba2" => mixer = Some(MixerKind::Mamba2),
                "shortconv" => mixer = Some(MixerKind::ShortConv),
                "lightning" => mixer = Some(MixerKind::Lightning),
                "rglru" => mixer = Some(MixerKind::RgLru),
                "rwkv" => mixer = Some(MixerKind::Rwkv),
                other => errors.push(EstimateError::invalid(
                    "mixer",
                    format!(
                        "{other:?}: use mamba, mamba2, deltanet, kda, shortconv, lightning, rglru or rwkv"
                    ),
                )),
            }
            continue;
        }
        if let Err(e) = apply(&mut input, f, value, &mut arch_facts, &mut kv_text) {
            errors.push(e);
        }
    }
    // A named framework's defaults, for the keys not given (before QLoRA's, which
    // they may set: torchtune keeps the unquantised modules in bf16).
    let framework_set = apply_framework(&mut input, &given);
    checkpointing_given |= framework_set.contains(&"checkpointing");
    keep_given |= framework_set.contains(&"keep-format");
    if input.train == TrainMode::Qlora {
        // QLoRA as its recipes run it: the base's linear layers in bitsandbytes NF4
        // with double quantisation (`BitsAndBytesConfig(load_in_4bit=True,
        // bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)`), activation
        // checkpointing on (peft's `prepare_model_for_kbit_training` enables it by
        // default) and the modules it does not quantise in fp32 (the same function
        // casts every fp16/bf16 parameter that is not `Params4bit` to fp32,
        // `peft/utils/other.py`, PEFT 0.20), each unless given.
        if !matches!(input.format, Some(StorageFormat::Bnb4 { .. })) {
            input.format = Some(StorageFormat::Bnb4 {
                code: Bnb4::Nf4,
                double_quant: true,
            });
        }
        if !checkpointing_given {
            input.checkpointing = true;
        }
        if !keep_given {
            input.keep_format = StorageFormat::Dense { dtype: Dtype::F32 };
        }
    }
    if let Some(t) = kv_text {
        match KvDtype::parse("kv-dtype", &t, input.compute_dtype) {
            Ok(d) => input.kv_dtype = Some(d),
            Err(e) => errors.push(e),
        }
    }
    match build_arch(&arch_facts, mixer, input.state_layers) {
        Ok(Shape::Full(a)) => input.arch = Some(*a),
        Ok(Shape::Kv(k)) => input.kv_only = Some(k),
        Ok(Shape::None) => {}
        Err(e) => errors.push(e),
    }
    (input, errors)
}

fn apply(
    input: &mut EstimateInput,
    f: &'static Field,
    v: &str,
    arch_facts: &mut Vec<(&'static str, u64)>,
    kv_text: &mut Option<String>,
) -> Result<(), EstimateError> {
    let k = f.key;
    // The table's kind says how a value reads: a count or a switch is parsed once
    // here, and the match below only says where it goes.
    let (n, on) = match f.kind {
        FieldKind::Count => (parse_count(k, v)?, false),
        FieldKind::Bool(_) => (0, parse_bool(k, v)?),
        _ => (0, false),
    };
    // The architecture's facts are collected (a switch as 0 or 1) and set together,
    // through their accessors, in `build_arch`.
    if f.group.is_arch() {
        arch_facts.push((k, if on { 1 } else { n }));
        return Ok(());
    }
    match k {
        "parameters" => input.parameters = Some(n),
        "bits" => {
            input.bits =
                Some(u32::try_from(n).map_err(|_| EstimateError::invalid(k, "absurdly large"))?)
        }
        "format" => input.format = Some(StorageFormat::parse(k, v)?),
        "keep-format" => input.keep_format = StorageFormat::parse(k, v)?,
        "attention-format" => input.attention_format = Some(StorageFormat::parse(k, v)?),
        "compressed-tensors" => input.compressed_tensors = on,
        "max-position" => input.max_position = Some(n),
        "rope-positions" => input.rope_positions = Some(n),
        "mm-item-tokens" => input.mm_item_tokens = Some(n),
        "mm-item-values" => input.mm_item_values = Some(n),
        "mm-audio-seconds" => input.audio_seconds = Some(n),
        "compute-dtype" => input.compute_dtype = Dtype::parse(k, v)?,
        "sequences" => input.sequences = n,
        "beams" => input.beams = n,
        "context" => input.context = Some(n),
        "generate" => input.generate = n,
        "kv-dtype" => *kv_text = Some(v.to_string()),
        "sliding-window" => input.sliding_window = Some(n),
        "sliding-layers" => input.sliding_layers = Some(n),
        "static-cache" => input.static_cache = Some(n),
        "state-layers" => input.state_layers = n,
        "state-bytes" => input.state_bytes = n,
        "attention" => input.attention = AttentionImpl::parse(k, v)?,
        "logits" => {
            input.logits = match v.trim() {
                "last" => Logits::Last,
                "all" => Logits::All,
                other => {
                    return Err(EstimateError::invalid(
                        k,
                        format!("{other:?}: use last or all"),
                    ));
                }
            }
        }
        "cuda-context-mib" => input.cuda_context_mib = Some(n),
        "train" => {
            input.train = match v.trim() {
                "none" | "" => TrainMode::None,
                "full" => TrainMode::Full,
                "lora" => TrainMode::Lora,
                "qlora" => TrainMode::Qlora,
                other => {
                    return Err(EstimateError::invalid(
                        k,
                        format!("{other:?}: use none, full, lora or qlora"),
                    ));
                }
            }
        }
        "optimizer" => input.optimizer = Optimizer::parse(k, v)?,
        "grad-dtype" => input.grad_dtype = Some(Dtype::parse(k, v)?),
        "master-weights" => input.master_weights = on,
        "lora-rank" => input.lora_rank = n,
        "lora-targets" => input.lora_targets = v.trim().to_string(),
        "lora-dtype" => {
            input.lora_dtype = match v.trim() {
                "" => Dtype::F32,
                t => Dtype::parse(k, t)?,
            }
        }
        "lora-dropout" => input.lora_dropout = on,
        "autocast" => {
            input.autocast = match v.trim().to_ascii_lowercase().as_str() {
                "" | "off" | "none" | "false" | "no" => None,
                t => Some(Dtype::parse(k, t)?),
            }
        }
        "qlora-kernel" => input.qlora_kernel = QloraKernel::parse(k, v)?,
        "checkpointing" => input.checkpointing = on,
        "checkpointing-policy" => input.checkpointing_policy = CheckpointPolicy::parse(k, v)?,
        "framework" => input.framework = Framework::parse(k, v)?,
        "loss" => input.loss = Loss::parse(k, v)?,
        "optimizer-in-backward" => input.optimizer_in_backward = on,
        "checkpointing-every" => input.checkpointing_every = n,
        "offload-activations" => input.offload_activations = on,
        "modules-to-save" => {
            input.modules_to_save = crate::training::ModulesToSave::parse(k, v)?.name()
        }
        "expandable-segments" => input.expandable_segments = on,
        "zero" => {
            input.zero = match v.trim() {
                "" | "0" | "off" => 0,
                "1" => 1,
                "2" => 2,
                "3" => 3,
                other => {
                    return Err(EstimateError::invalid(
                        k,
                        format!("{other:?}: use 1, 2 or 3"),
                    ));
                }
            }
        }
        "fsdp" => input.fsdp = Fsdp::parse(k, v)?,
        "offload-optimizer" => input.offload_optimizer = Offload::parse(k, v)?,
        "offload-param" => input.offload_param = Offload::parse(k, v)?,
        "reduce-dtype" => {
            input.reduce_dtype = match v.trim() {
                "" => None,
                t => Some(Dtype::parse(k, t)?),
            }
        }
        "ddp-bucket-view" => input.ddp_bucket_view = on,
        "nodes" => input.nodes = n,
        "micro-batches" => input.micro_batches = Some(n),
        "sp" => input.sp = on,
        "cp" => input.cp = n,
        "ep" => input.ep = n,
        "pipeline" => {
            input.pipeline = match v.trim().to_ascii_lowercase().as_str() {
                "" | "1f1b" => Pipeline::OneFOneB,
                "gpipe" => Pipeline::Gpipe,
                other => {
                    return Err(EstimateError::invalid(
                        k,
                        format!("{other:?}: use 1f1b or gpipe"),
                    ));
                }
            }
        }
        "reserve-gib" => input.reserve_gib = n,
        "reserve-bytes" => input.reserve_bytes = Some(n),
        "ram" => match crate::catalogue::parse_capacity(v) {
            Some(0) => return Err(EstimateError::invalid(k, "a RAM of 0 holds nothing")),
            Some(b) => input.ram = Some(b),
            None => {
                return Err(EstimateError::invalid(
                    k,
                    format!("{v:?} is not a size: give one such as 64GiB or 128GB"),
                ));
            }
        },
        "gpus" => input.gpus = n,
        "tp" => input.tp = n,
        "pp" => input.pp = n,
        _ => {
            return Err(EstimateError::invalid(
                "input",
                format!("unknown key {k:?}"),
            ));
        }
    }
    Ok(())
}

/// What the shape keys describe.
enum Shape {
    /// No shape key at all.
    None,
    /// Only the KV cache's dimensions (method §4).
    Kv(KvDims),
    /// A whole architecture.
    Full(Box<Architecture>),
}

fn build_arch(
    given: &[(&'static str, u64)],
    mixer_kind: Option<MixerKind>,
    state_layers: u64,
) -> Result<Shape, EstimateError> {
    if given.is_empty() {
        if mixer_kind.is_some() {
            return Err(EstimateError::invalid(
                "mixer",
                "the architecture keys (layers, hidden, vocab, mixer-…) are needed with it",
            ));
        }
        return Ok(Shape::None);
    }
    // The last value of a key wins.
    let get = |k: &str| given.iter().rev().find(|(f, _)| *f == k).map(|(_, v)| *v);
    // Method §4: layers, KV heads and head dim are all the KV line needs. Without any
    // of the weight-only sizes, the shape is the cache's alone.
    let weight_keys = ["hidden", "intermediate", "vocab"];
    if weight_keys.iter().all(|k| get(k).is_none())
        && let (Some(layers), Some(head_dim)) = (get("layers"), get("head-dim"))
        && let Some(kv_heads) = get("kv-heads").or(get("heads"))
    {
        for (f, v) in [
            ("layers", layers),
            ("kv-heads", kv_heads),
            ("head-dim", head_dim),
        ] {
            if v == 0 {
                return Err(EstimateError::invalid(f, "must be at least 1"));
            }
            if v > MAX_DIM {
                return Err(EstimateError::invalid(f, "absurdly large"));
            }
        }
        return Ok(Shape::Kv(KvDims {
            layers,
            kv_heads,
            head_dim,
        }));
    }
    // The parts their keys turn on, each from its base; then every fact given, into
    // its slot (a part's facts without the part are ignored, as is a lone
    // `experts=1`).
    let mut a = Architecture::BASE;
    a.mixer = mixer_kind.map(|kind| Mixer {
        kind,
        layers: state_layers,
        ..Mixer::BASE
    });
    a.moe = get("experts").filter(|e| *e > 1).map(|_| Moe::BASE);
    a.mla = get("kv-lora-rank").map(|_| Mla::BASE);
    a.global_attn = get("global-layers").map(|_| GlobalAttn::BASE);
    a.indexer = get("indexer-heads").map(|_| Indexer::BASE);
    a.vision = get("tower-hidden")
        .filter(|w| *w > 0)
        .map(|_| VisionTower::BASE);
    a.audio = get("audio-hidden")
        .filter(|w| *w > 0)
        .map(|_| crate::arch::AudioTower::BASE);
    a.per_layer_input = get("per-layer-input")
        .filter(|w| *w > 0)
        .map(|_| PerLayerInput::BASE);
    a.shared_attn = get("shared-blocks")
        .filter(|n| *n > 0)
        .map(|_| SharedAttn::BASE);
    a.kv_share = get("kv-shared-layers")
        .filter(|n| *n > 0)
        .map(|_| KvShare::BASE);
    for (k, v) in given {
        if let Some(f) = fact_of(k) {
            f.set(&mut a, *v);
        }
    }
    if a.mixer.is_some() && state_layers == 0 {
        return Err(EstimateError::invalid(
            "state-layers",
            "needed with mixer: how many layers have it",
        ));
    }
    // What a present part cannot do without.
    for f in crate::arch::facts() {
        if let Some(why) = f.need
            && f.value(&a).is_some()
            && get(f.key).is_none()
        {
            return Err(EstimateError::invalid(f.key, why));
        }
    }
    // A model whose every layer is a mixer (Mamba) has no attention heads, and one
    // with a mixer may have no MLP; the others need both.
    let all_mixer = a.mixer.is_some_and(|m| m.layers >= a.layers);
    if get("heads").is_none() && !all_mixer {
        return Err(EstimateError::invalid(
            "heads",
            "needed by the architecture mode",
        ));
    }
    if a.heads == 0 && a.mixer.is_none() {
        return Err(EstimateError::invalid("heads", "must be at least 1"));
    }
    if get("intermediate").is_none() && a.mixer.is_none() {
        return Err(EstimateError::invalid(
            "intermediate",
            "needed by the architecture mode",
        ));
    }
    // Defaults derived from other keys.
    if get("kv-heads").is_none() {
        a.kv_heads = a.heads;
    }
    if get("head-dim").is_none() {
        a.head_dim = a.hidden.checked_div(a.heads).unwrap_or(0);
    }
    if let Some(m) = a.moe.as_mut() {
        if get("expert-intermediate").is_none() {
            m.expert_intermediate = get("intermediate").unwrap_or(0);
        }
        if get("shared-intermediate").is_none() {
            m.shared_intermediate = get("expert-intermediate").unwrap_or(0);
        }
    }
    a.validate()?;
    Ok(Shape::Full(Box::new(a)))
}

/// Writes an input back as pairs, omitting defaults — the page's URL query.
pub fn to_pairs(input: &EstimateInput) -> Vec<(&'static str, String)> {
    let d = EstimateInput::default();
    let mut out: Vec<(&'static str, String)> = Vec::new();
    // A key is written once (a named framework writes keys other rules may write too).
    let mut put = |k: &'static str, v: String| {
        if !out.iter().any(|(o, _)| *o == k) {
            out.push((k, v))
        }
    };
    if let Some(p) = input.parameters {
        put("parameters", p.to_string());
    }
    if let Some(b) = input.bits {
        put("bits", b.to_string());
    }
    if let Some(f) = input.format {
        put("format", f.name());
    }
    // QLoRA keeps its modules in fp32 unless told otherwise: its value is always written.
    if input.keep_format != d.keep_format || input.train == TrainMode::Qlora {
        put("keep-format", input.keep_format.name());
    }
    if let Some(f) = input.attention_format {
        put("attention-format", f.name());
    }
    if input.compressed_tensors {
        put("compressed-tensors", "true".into());
    }
    if input.compute_dtype != d.compute_dtype {
        put("compute-dtype", input.compute_dtype.name().into());
    }
    if let Some(k) = input.kv_only {
        put("layers", k.layers.to_string());
        put("kv-heads", k.kv_heads.to_string());
        put("head-dim", k.head_dim.to_string());
    }
    if let Some(a) = &input.arch {
        arch_pairs(a, &mut put);
    }
    if input.sequences != d.sequences {
        put("sequences", input.sequences.to_string());
    }
    if input.beams != d.beams {
        put("beams", input.beams.to_string());
    }
    if let Some(c) = input.context {
        put("context", c.to_string());
    }
    if let Some(m) = input.max_position {
        put("max-position", m.to_string());
    }
    if let Some(m) = input.rope_positions {
        put("rope-positions", m.to_string());
    }
    if let Some(m) = input.mm_item_tokens {
        put("mm-item-tokens", m.to_string());
    }
    if let Some(m) = input.mm_item_values {
        put("mm-item-values", m.to_string());
    }
    if let Some(s) = input.audio_seconds {
        put("mm-audio-seconds", s.to_string());
    }
    if input.generate != d.generate {
        put("generate", input.generate.to_string());
    }
    if let Some(k) = input.kv_dtype {
        put("kv-dtype", k.name());
    }
    for (k, v) in [
        ("sliding-window", input.sliding_window),
        ("sliding-layers", input.sliding_layers),
        ("static-cache", input.static_cache),
        ("cuda-context-mib", input.cuda_context_mib),
        ("reserve-bytes", input.reserve_bytes),
    ] {
        if let Some(v) = v {
            put(k, v.to_string());
        }
    }
    if let Some(b) = input.ram {
        put("ram", size_text(b));
    }
    if input.attention != d.attention {
        put("attention", input.attention.name().into());
    }
    if input.logits != d.logits {
        put("logits", "all".into());
    }
    if input.train != d.train {
        put("train", input.train.name().into());
    }
    if input.optimizer != d.optimizer {
        put("optimizer", input.optimizer.name().into());
    }
    if let Some(g) = input.grad_dtype {
        put("grad-dtype", g.name().into());
    }
    if input.master_weights != d.master_weights {
        put("master-weights", input.master_weights.to_string());
    }
    if input.lora_rank != d.lora_rank {
        put("lora-rank", input.lora_rank.to_string());
    }
    if input.lora_targets != d.lora_targets {
        put("lora-targets", input.lora_targets.clone());
    }
    if input.lora_dtype != d.lora_dtype {
        put("lora-dtype", input.lora_dtype.name().into());
    }
    if input.lora_dropout != d.lora_dropout {
        put("lora-dropout", input.lora_dropout.to_string());
    }
    if let Some(t) = input.autocast {
        put("autocast", t.name().into());
    }
    if input.qlora_kernel != d.qlora_kernel {
        put("qlora-kernel", input.qlora_kernel.name().into());
    }
    if input.checkpointing_policy != d.checkpointing_policy {
        put(
            "checkpointing-policy",
            input.checkpointing_policy.name().into(),
        );
    }
    // QLoRA turns checkpointing on unless told otherwise: its value is always written.
    if input.checkpointing != d.checkpointing || input.train == TrainMode::Qlora {
        put("checkpointing", input.checkpointing.to_string());
    }
    // A named framework sets defaults of its own: every key it sets is written, so a
    // value given back to gpumem's default survives the round trip.
    let framework = input.framework != Framework::Unnamed;
    if framework {
        put("framework", input.framework.name().into());
    }
    if framework || input.loss != d.loss {
        let name = input.loss.name();
        put("loss", if name.is_empty() { "full".into() } else { name });
    }
    if framework {
        put("optimizer", input.optimizer.name().into());
        put("master-weights", input.master_weights.to_string());
        put("lora-dtype", input.lora_dtype.name().into());
        put("lora-dropout", input.lora_dropout.to_string());
        put("checkpointing", input.checkpointing.to_string());
        put("keep-format", input.keep_format.name());
    }
    for (k, on, default) in [
        (
            "optimizer-in-backward",
            input.optimizer_in_backward,
            d.optimizer_in_backward,
        ),
        (
            "offload-activations",
            input.offload_activations,
            d.offload_activations,
        ),
        (
            "expandable-segments",
            input.expandable_segments,
            d.expandable_segments,
        ),
    ] {
        if framework || on != default {
            put(k, on.to_string());
        }
    }
    if input.checkpointing_every != d.checkpointing_every {
        put("checkpointing-every", input.checkpointing_every.to_string());
    }
    if !input.modules_to_save.is_empty() {
        put("modules-to-save", input.modules_to_save.clone());
    }
    if input.zero != d.zero {
        put("zero", input.zero.to_string());
    }
    for (k, v) in [
        ("fsdp", input.fsdp.name()),
        ("offload-optimizer", input.offload_optimizer.name()),
        ("offload-param", input.offload_param.name()),
    ] {
        if !v.is_empty() {
            put(k, v.into());
        }
    }
    if let Some(r) = input.reduce_dtype {
        put("reduce-dtype", r.name().into());
    }
    if !input.pipeline.name().is_empty() {
        put("pipeline", input.pipeline.name().into());
    }
    if input.sp != d.sp {
        put("sp", input.sp.to_string());
    }
    if let Some(m) = input.micro_batches {
        put("micro-batches", m.to_string());
    }
    if input.ddp_bucket_view != d.ddp_bucket_view {
        put("ddp-bucket-view", input.ddp_bucket_view.to_string());
    }
    for (k, v, dv) in [
        ("nodes", input.nodes, d.nodes),
        ("state-layers", input.state_layers, d.state_layers),
        ("state-bytes", input.state_bytes, d.state_bytes),
        ("reserve-gib", input.reserve_gib, d.reserve_gib),
        ("gpus", input.gpus, d.gpus),
        ("tp", input.tp, d.tp),
        ("pp", input.pp, d.pp),
        ("cp", input.cp, d.cp),
        ("ep", input.ep, d.ep),
    ] {
        if v != dv {
            put(k, v.to_string());
        }
    }
    out
}

/// The pairs of an architecture (every fact that differs from its default, and the
/// keys its parts always write: [`Architecture::write_pairs`]), part of [`to_pairs`];
/// the config reader writes its shape with it alone.
pub fn arch_pairs(a: &Architecture, put: &mut dyn FnMut(&'static str, String)) {
    a.write_pairs(put);
}

/// One sentence of help per key (from [`FIELDS`]), shared by `--help` and the page's
/// field hints; "" for an unknown key.
pub fn describe(key: &str) -> &'static str {
    field(key).map_or("", |f| f.help)
}

/// A size as [`crate::catalogue::parse_capacity`] reads it back exactly: whole GiB
/// ("64GiB"), else the decimal GB to the byte ("22.5GB").
fn size_text(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    if bytes.is_multiple_of(GIB) {
        return format!("{}GiB", bytes / GIB);
    }
    let (whole, frac) = (bytes / 1_000_000_000, bytes % 1_000_000_000);
    let frac = format!("{frac:09}");
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        format!("{whole}GB")
    } else {
        format!("{whole}.{frac}GB")
    }
}

/// Applies a named framework's defaults to the keys not `given`; returns the keys it
/// set. Called by [`from_pairs`] before QLoRA's own defaults.
fn apply_framework(
    input: &mut crate::estimate::EstimateInput,
    given: &[&'static str],
) -> Vec<&'static str> {
    let d = input.framework.defaults();
    let mut set = Vec::new();
    let free = |k: &'static str| !given.contains(&k);
    let qlora = input.train == crate::estimate::TrainMode::Qlora;
    if let Some(c) = d.checkpointing
        && free("checkpointing")
    {
        input.checkpointing = c;
        set.push("checkpointing");
    }
    if let Some(o) = d.offload_activations
        && free("offload-activations")
    {
        input.offload_activations = o;
        set.push("offload-activations");
    }
    if let Some((lora, q)) = d.optimizer
        && free("optimizer")
    {
        input.optimizer = if qlora { q } else { lora };
        set.push("optimizer");
    }
    if let Some(m) = d.master_weights
        && free("master-weights")
    {
        input.master_weights = m;
        set.push("master-weights");
    }
    if let Some(c) = d.adapters_in_compute
        && free("lora-dtype")
    {
        input.lora_dtype = if c {
            input.compute_dtype
        } else {
            crate::format::Dtype::F32
        };
        set.push("lora-dtype");
    }
    if let Some(o) = d.lora_dropout
        && free("lora-dropout")
    {
        input.lora_dropout = o;
        set.push("lora-dropout");
    }
    if let Some(true) = d.qlora_keeps_compute
        && qlora
        && free("keep-format")
    {
        input.keep_format = crate::format::StorageFormat::Dense {
            dtype: input.compute_dtype,
        };
        set.push("keep-format");
    }
    if let Some(k) = d.qlora_kernel
        && qlora
        && free("qlora-kernel")
    {
        input.qlora_kernel = k;
        set.push("qlora-kernel");
    }
    if let Some(l) = d.loss
        && free("loss")
    {
        input.loss = l;
        set.push("loss");
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ram` reads as `--card` capacities do and is written back to the byte.
    #[test]
    fn ram_is_a_size_read_back_exactly() {
        for (typed, bytes, back) in [
            ("64GiB", 64u64 << 30, "64GiB"),
            ("128GB", 128_000_000_000, "128GB"),
            ("22.5GB", 22_500_000_000, "22.5GB"),
            ("0.5TiB", 1 << 39, "512GiB"),
            ("16384MiB", 16 << 30, "16GiB"),
        ] {
            let (i, e) = from_pairs([("parameters", "7e9"), ("ram", typed)]);
            assert!(e.is_empty(), "{typed}: {e:?}");
            assert_eq!(i.ram, Some(bytes), "{typed}");
            let pairs = to_pairs(&i);
            let written = pairs
                .iter()
                .find(|(k, _)| *k == "ram")
                .map(|(_, v)| v.as_str());
            assert_eq!(written, Some(back), "{typed}");
        }
        for bad in ["64", "lots", "0GB", "-1GB"] {
            let (_, e) = from_pairs([("parameters", "7e9"), ("ram", bad)]);
            assert_eq!(e.len(), 1, "{bad}");
            assert!(e[0].to_string().contains("ram"), "{bad}: {}", e[0]);
        }
    }

    #[test]
    fn counts_as_users_type_them() {
        assert_eq!(parse_count("p", "7000000000").unwrap(), 7_000_000_000);
        assert_eq!(parse_count("p", "7e9").unwrap(), 7_000_000_000);
        assert_eq!(parse_count("p", "7.5e9").unwrap(), 7_500_000_000);
        assert_eq!(parse_count("p", "7 000 000 000").unwrap(), 7_000_000_000);
        assert_eq!(parse_count("p", "1,024").unwrap(), 1024);
        assert_eq!(
            parse_count("p", "1e19").unwrap(),
            10_000_000_000_000_000_000
        );
        for bad in [
            "",
            "-1",
            "abc",
            "1.5",
            "1e999",
            "99999999999999999999999",
            "0e4294967295",
            "1e99999999999999",
            "1e",
            "1e-3",
        ] {
            assert!(parse_count("p", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pairs_round_trip() {
        let pairs = [
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("intermediate", "14336"),
            ("vocab", "128256"),
            ("format", "gptq-4-g128"),
            ("context", "8192"),
            ("sequences", "4"),
            ("kv-dtype", "fp8"),
            ("reserve-gib", "2"),
            ("tp", "2"),
            ("gpus", "2"),
        ];
        let (input, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        let back = to_pairs(&input);
        let (again, errors) = from_pairs(back.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty());
        assert_eq!(again, input);
    }

    #[test]
    fn the_kv_shape_alone_is_a_kv_only_input_and_round_trips() {
        let (input, errors) = from_pairs([
            ("layers", "32"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("context", "8192"),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(input.arch.is_none());
        assert_eq!(
            input.kv_only,
            Some(KvDims {
                layers: 32,
                kv_heads: 8,
                head_dim: 128
            })
        );
        let back = to_pairs(&input);
        let (again, _) = from_pairs(back.iter().map(|(k, v)| (*k, v.as_str())));
        assert_eq!(again, input);
        // A weight-only size turns it into the architecture mode, which then needs the rest.
        let (_, errors) = from_pairs([("layers", "32"), ("head-dim", "128"), ("hidden", "4096")]);
        assert!(!errors.is_empty());
    }

    #[test]
    fn mla_and_new_shape_keys_round_trip() {
        let pairs = [
            ("layers", "4"),
            ("hidden", "1024"),
            ("heads", "8"),
            ("intermediate", "2048"),
            ("vocab", "1000"),
            ("kv-lora-rank", "512"),
            ("q-lora-rank", "256"),
            ("qk-nope-dim", "128"),
            ("qk-rope-dim", "64"),
            ("v-head-dim", "128"),
            ("layer-norms", "4"),
            ("learned-positions", "1024"),
            ("attn-sinks", "true"),
            ("qk-norm-whole", "true"),
            ("mtp-layers", "1"),
            ("tower-params", "1000"),
            ("experts", "8"),
            ("active-experts", "2"),
            ("moe-every", "2"),
            ("router-bias", "true"),
            ("correction-bias", "true"),
            ("indexer-heads", "4"),
            ("indexer-head-dim", "32"),
            ("mtp-shared-vocab", "true"),
            ("layer-scalars", "4"),
            ("global-layers", "1"),
            ("global-kv-heads", "2"),
            ("global-head-dim", "64"),
            ("global-k-eq-v", "true"),
            ("attention-format", "bf16"),
            ("format", "mxfp4"),
            ("max-position", "4096"),
        ];
        let (input, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        let back = to_pairs(&input);
        let (again, errors) = from_pairs(back.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty());
        assert_eq!(again, input);
    }

    #[test]
    fn each_bad_field_gets_its_own_error_and_good_fields_stay() {
        let (input, errors) = from_pairs([
            ("parameters", "7e9"),
            ("bits", "x"),
            ("reserve-gib", "-4"),
            ("nope", "1"),
        ]);
        assert_eq!(input.parameters, Some(7_000_000_000));
        assert_eq!(errors.len(), 3);
        assert!(errors.iter().any(|e| e.to_string().starts_with("bits:")));
        assert!(
            errors
                .iter()
                .any(|e| e.to_string().starts_with("reserve-gib:"))
        );
    }
}
