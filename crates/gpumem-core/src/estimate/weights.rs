//! The weights' lines: from the architecture, from imported tensors or from the
//! parameter count.

use super::*;
use crate::arch::{Role, WeightBreakdown};

/// The label of the line of the buffers transformers' modules build beside the
/// weights ([`crate::arch::Architecture::buffers`]): not in the checkpoint, on the
/// device all the same.
pub const BUFFERS_LABEL: &str = "Weights: buffers (not in the checkpoint)";

/// Maps the classic `--bits` to a storage format.
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

/// The storage formats of the architecture mode, per role (the engine rules place
/// tensors one by one in the same formats), as the runtime holds them: the stored
/// formats ([`stored_formats`]) with the linears transformers dequantises
/// ([`fp8_dequantised`], [`ct_decompressed`]) in the model's dtype.
pub fn module_formats(input: &EstimateInput) -> Result<ModuleFormats, EstimateError> {
    let stored = stored_formats(input)?;
    let dense = |f: StorageFormat| {
        if fp8_dequantised(input, f) || ct_decompressed(input, f) {
            input.keep_format
        } else {
            f
        }
    };
    Ok(ModuleFormats {
        linear: dense(stored.linear),
        attention: dense(stored.attention),
        ..stored
    })
}

/// The storage formats per role as the checkpoint stores them.
pub(crate) fn stored_formats(input: &EstimateInput) -> Result<ModuleFormats, EstimateError> {
    let linear = match (input.format, input.bits) {
        (Some(f), _) => f,
        (None, Some(bits)) => format_for_bits(bits)?,
        (None, None) => StorageFormat::BF16,
    };
    // A llama.cpp file type quantises token_embd and output too (its own rules), and
    // so does mlx-lm: `nn.quantize` converts every module with `to_quantized`, the
    // embedding and lm_head included (ml-explore/mlx-lm d78bf58e `mlx_lm/utils.py`
    // `quantize_model`).
    let vocab = if linear.file_type().is_some() || matches!(linear, StorageFormat::Mlx { .. }) {
        linear
    } else {
        input.keep_format
    };
    Ok(ModuleFormats {
        linear,
        attention: input.attention_format.unwrap_or(linear),
        vocab,
        kept: input.keep_format,
        experts: experts_left_dense(input, linear).then_some(input.keep_format),
    })
}

/// The bytes compressed-tensors keeps beside one decompressed `rows` × `cols`
/// matrix ([`ct_kept_scales`]) where the runtime holds it in `now` and the
/// checkpoint stores it in `was`; 0 elsewhere.
pub(crate) fn ct_scales_beside(
    input: &EstimateInput,
    was: StorageFormat,
    now: StorageFormat,
    rows: u64,
    cols: u64,
) -> Result<u64, EstimateError> {
    if was == now || !ct_decompressed(input, was) {
        return Ok(0);
    }
    ct_kept_scales(was, rows, cols)
}

/// Whether transformers dequantises fp8 weights at load on the card named: its
/// fine-grained fp8 quantizer (the checkpoints whose `quantization_config` says
/// `"quant_method": "fp8"`) sets `dequantize` below compute capability 8.9 or without
/// a CUDA device (transformers 5.23 `quantizers/quantizer_finegrained_fp8.py`
/// `validate_environment`), and the weights load in the model's dtype. Under the
/// transformers runtime and the frameworks that load through it; a serving engine
/// keeps them (vLLM's weight-only fp8 kernels on Ampere).
pub fn fp8_dequantised(input: &EstimateInput, format: StorageFormat) -> bool {
    transformers_loads(input)
        && !input.compressed_tensors
        && matches!(format, StorageFormat::Fp8 { .. })
        && input.card_fp8() == Some(false)
}

/// Whether transformers holds a compressed-tensors checkpoint's quantised linears
/// in the model's dtype. Its quantizer (transformers 5.23
/// `quantizers/quantizer_compressed_tensors.py` `_process_model_before_weight_loading`)
/// loads the compressed tensors as they are, and compressed-tensors' `compress_model`
/// registers a forward pre-hook (compressed-tensors 0.20.1
/// `compressors/model_compressors/model_compressor.py`
/// `ModelCompressor.add_decompress_hook`) that runs `decompress_model` on the first
/// forward: module by module, `decompress_module` (`compressors/base.py`) replaces
/// the compressed state with `decompress`'s (`replace_direct_state_dict`,
/// `utils/module.py`) — a dense `weight` in the scale's dtype (`dequantize`,
/// `quantization/lifecycle/forward.py`; bf16 for NVFP4, `unpack_fp4_from_uint8`),
/// the scales kept beside it — and removes the hook. With `dequantize=True` the
/// weights are dense from the load. Only `use_optimized_inference=True` on compute
/// capability 8.9 or more keeps FP8 layers in FP8 (opt-in, not modelled). Under the
/// transformers runtime and the frameworks that load through it; a serving engine
/// runs the compressed format.
pub fn ct_decompressed(input: &EstimateInput, format: StorageFormat) -> bool {
    transformers_loads(input)
        && input.compressed_tensors
        && !matches!(format, StorageFormat::Dense { .. })
}

/// What compressed-tensors keeps of one `rows` × `cols` matrix stored as `format`
/// beside its decompressed weight: the stored bytes less the quantised values
/// (`weight` or `weight_packed`, which `decompress` pops). NVFP4's FP8 group scales
/// come back in bf16 (compressed-tensors 0.20.1 `compressors/nvfp4/base.py`
/// `NVFP4PackedCompressor.decompress`: `weight_scale = scale.to(unpacked.dtype)`).
pub(crate) fn ct_kept_scales(
    format: StorageFormat,
    rows: u64,
    cols: u64,
) -> Result<u64, EstimateError> {
    let stored = format.matrix_bytes(rows, cols)?.bytes;
    let over = EstimateError::Overflow { what: "weights" };
    let values = match format {
        StorageFormat::Fp8 { .. } | StorageFormat::Fp8Channel => {
            checked_product(&[rows, cols], "weights")?
        }
        StorageFormat::W4a16 { .. } => checked_product(&[rows, cols.div_ceil(8), 4], "weights")?,
        StorageFormat::Nvfp4 { .. } => {
            let packed = checked_product(&[rows, cols.div_ceil(2)], "weights")?;
            let fp8_scales = checked_product(&[rows, cols.div_ceil(16)], "weights")?;
            // The scales double: taken out here once, counted back twice below.
            return stored
                .checked_sub(packed)
                .and_then(|s| s.checked_add(fp8_scales))
                .ok_or(over);
        }
        _ => return Ok(0),
    };
    stored.checked_sub(values).ok_or(over)
}

/// What compressed-tensors holds, at the peak of one `rows` × `cols` linear's
/// decompression, beyond the state it leaves (the weight in `now` and
/// [`ct_kept_scales`]): the module's compressed values, and the dequantisation's
/// temporaries beside its output. Read in compressed-tensors 0.20.1:
/// `compressors/base.py` `BaseCompressor.decompress_module` keeps the module's
/// state dict (`get_direct_state_dict`) until it returns, so the compressed values
/// stay alive through `decompress` and `replace_direct_state_dict` and are freed
/// with it, before the next module; the values `decompress` allocates, in order:
///
/// - FP8 (`compressors/naive_quantized/base.py` `decompress` → `dequantize`,
///   `quantization/lifecycle/forward.py`, → `_dequantize`,
///   `quantization/lifecycle/forward_helpers.py`): `x_q.to(scale.dtype)` and
///   `dequant_value * scale` — two dense tensors at once, the cast freed after the
///   product. FP8-block first pads to whole 128 × 128 tiles (`_process_block`,
///   `maybe_pad_tensor_for_block_quant`: a padded fp8 copy when a side is not a
///   multiple of 128) and works on the padded tiles.
/// - W4A16 (`compressors/pack_quantized/base.py` `decompress`): `unpack_from_int32`
///   (`pack_quantized/helpers.py`: the two nibble halves and their `stack`, then the
///   int8 values less 8, one byte each), kept in `unpacked` while `_process_group` →
///   `_dequantize` casts them (dense) and multiplies (dense): int8 values + two dense
///   tensors, the largest of its moments.
/// - NVFP4 (`compressors/nvfp4/base.py` `decompress` → `nvfp4/helpers.py`
///   `unpack_fp4_from_uint8`): per value, the high and low nibbles (½ B each), their
///   `stack` (1 B), the sign mask (bool, 1 B), the magnitude indices (int64, 8 B),
///   the looked-up fp32 values, `torch.where`'s fp32 signs and their fp32 product
///   (4 B each) — 23 B a value, all alive at the product — and the lookup table's
///   copy on the device (`kE2M1ToFloat.to(device)`: 8 fp32). The later bf16 cast
///   and `dequantize` (the scale promoted to fp32 by the fp32 global scale, an fp32
///   cast and product) hold less.
///
/// Zero for a format compressed-tensors does not decompress.
pub(crate) fn ct_decompress_excess(
    was: StorageFormat,
    now: StorageFormat,
    rows: u64,
    cols: u64,
) -> Result<u64, EstimateError> {
    const WHAT: &str = "decompression";
    let StorageFormat::Dense { dtype } = now else {
        return Ok(0);
    };
    let d = dtype.bytes();
    let values = checked_product(&[rows, cols], WHAT)?;
    let temporaries = match was {
        StorageFormat::Fp8 {
            scales: Fp8Scales::Block128,
        } => {
            let padded =
                checked_product(&[rows.div_ceil(128), cols.div_ceil(128), 128 * 128], WHAT)?;
            let copy = if padded == values { 0 } else { padded };
            copy.checked_add(checked_product(&[padded, d, 2], WHAT)?)
        }
        StorageFormat::Fp8 { .. } | StorageFormat::Fp8Channel => {
            checked_product(&[values, d, 2], WHAT).ok()
        }
        StorageFormat::W4a16 { .. } => values.checked_add(checked_product(&[values, d, 2], WHAT)?),
        StorageFormat::Nvfp4 { .. } => checked_product(&[values, 23], WHAT)?.checked_add(8 * 4),
        _ => return Ok(0),
    }
    .ok_or(EstimateError::Overflow { what: WHAT })?;
    let stored = was.matrix_bytes(rows, cols)?.bytes;
    let left = now
        .matrix_bytes(rows, cols)?
        .bytes
        .checked_add(ct_kept_scales(was, rows, cols)?)
        .ok_or(EstimateError::Overflow { what: WHAT })?;
    stored
        .checked_add(temporaries)
        .and_then(|b| b.checked_sub(left))
        .ok_or(EstimateError::Overflow { what: WHAT })
}

/// Whether transformers' quantizer leaves an MoE's routed experts in the model's
/// dtype ([`linear_only_loader`]): since transformers 5.0 every MoE family it ships
/// stores its experts as 3D `nn.Parameter`s (`MixtralExperts.gate_up_proj`,
/// `Qwen3MoeExperts`, `Llama4TextExperts`, `DbrxExpertGLU`, `JetMoeParallelExperts`,
/// …), which no `nn.Linear`-only quantizer converts.
///
/// - bitsandbytes (`load_in_4bit` or `load_in_8bit` over a 16-bit checkpoint): the
///   experts load in the model's dtype — a PEFT QLoRA preparation then casts them to
///   fp32 with the rest.
/// - a pre-quantised GPTQ or AWQ checkpoint: the experts are not loaded at all. Their
///   per-expert keys (`experts.0.gate_proj.qweight`, `.qzeros`, `.scales`, `.g_idx`)
///   match none of the model's converters, which merge `experts.*.gate_proj.weight`
///   into `experts.gate_up_proj` (transformers 5.23 `conversion_mapping.py`, the
///   `qwen2_moe` and `mixtral` entries; `GptqHfQuantizer` and `AwqQuantizer` declare no
///   `serialized_names`, so `quantizers/base.py` `update_weight_conversions` adds none),
///   so `core_model_loading.py` `convert_and_load_state_dict_in_model` files them as
///   unexpected and `modeling_utils.py` `_move_missing_keys_from_meta_to_device` and
///   `_initialize_missing_keys` give the 3D parameters fresh values in the model's
///   dtype: 16-bit experts, not the checkpoint's. (GPTQ quantising a 16-bit
///   checkpoint at load, `GPTQConfig(dataset=…)`, quantises what `get_layers` finds
///   and leaves the experts as loaded, in the model's dtype: the same bytes.)
///
/// So under transformers (no engine, `--engine transformers`) and the training
/// frameworks that load through it; not under a serving engine (vLLM's
/// `BitsAndBytesMoEMethod` and its GPTQ/AWQ MoE methods keep the experts quantised),
/// LitGPT (its experts are `nn.Linear`s), unsloth (it converts the experts to
/// `Params4bit` itself: unslothai/unsloth-zoo#527) or transformers 4.39 (per-expert
/// `nn.Linear`s).
pub(crate) fn experts_left_dense(input: &EstimateInput, linear: StorageFormat) -> bool {
    linear_only_loader(input, linear)
        && input
            .arch
            .is_some_and(|a| a.moe.is_some_and(|m| m.experts > 0))
}

/// Whether the weights are quantised by a transformers quantizer that converts
/// `nn.Linear` modules only (see [`experts_left_dense`]): bitsandbytes
/// (transformers 5.23 `integrations/bitsandbytes.py` `replace_with_bnb_linear`, GPT-2's
/// `Conv1D` too; `quantizers/quantizer_bnb_4bit.py` `param_needs_quantization` asks for
/// a `Linear4bit`), GPTQ (`quantizers/quantizer_gptq.py`
/// `_process_model_before_weight_loading` calls optimum's
/// `GPTQQuantizer.convert_model`, which replaces what `get_layers` finds under the
/// block prefix: exact `nn.Linear`, `Conv1D`, `nn.Conv2d`; optimum 2.3.0
/// `optimum/gptq/quantizer.py`, `optimum/gptq/utils.py`) and AWQ
/// (`integrations/awq.py` `replace_with_awq_linear`: `isinstance(module, nn.Linear)`,
/// with GPTQModel's kernels).
pub(crate) fn linear_only_loader(input: &EstimateInput, linear: StorageFormat) -> bool {
    transformers_loads(input)
        && matches!(
            linear,
            StorageFormat::Bnb4 { .. }
                | StorageFormat::Int8
                | StorageFormat::Gptq { .. }
                | StorageFormat::Awq { .. }
        )
}

/// Whether a pre-quantised GPTQ or AWQ MoE checkpoint loads under transformers with
/// its routed experts not the checkpoint's ([`experts_left_dense`],
/// [`prequantised_gptq_awq`]): the figure holds, the model does not run as trained.
pub fn experts_not_loaded(input: &EstimateInput, linear: StorageFormat) -> bool {
    experts_left_dense(input, linear) && prequantised_gptq_awq(linear)
}

/// Whether the linears are a pre-quantised GPTQ or AWQ checkpoint's, whose routed
/// experts transformers does not load (see [`experts_left_dense`]).
pub(crate) fn prequantised_gptq_awq(linear: StorageFormat) -> bool {
    matches!(
        linear,
        StorageFormat::Gptq { .. } | StorageFormat::Awq { .. }
    )
}

/// Whether transformers' `from_pretrained` loads the weights (its quantizers decide
/// what they hold): no engine or `--engine transformers`, and no framework or one
/// that loads through transformers (its `Trainer`, TRL, axolotl); not a serving
/// engine, LitGPT, torchtune, unsloth or transformers 4.39 (whose own loaders and
/// per-expert linears differ).
fn transformers_loads(input: &EstimateInput) -> bool {
    use crate::training::Framework;
    input.runtime() == CacheRuntime::Transformers
        && matches!(
            input.framework,
            Framework::Unnamed | Framework::Transformers | Framework::Trl | Framework::Axolotl
        )
}

/// Whether PEFT adapts an MoE's routed experts as transformers 5 stores them: PEFT
/// 0.21.2 (`tuners/tuners_utils.py` `inject_adapter` →
/// `utils/transformers_weight_conversion.py` `convert_peft_config_for_transformers`,
/// `_convert_peft_config_moe`) turns the v4 expert and router targets of the MoE
/// families in transformers' conversion table (Mixtral's and Qwen2-MoE's patterns:
/// Qwen3-MoE, OLMoE, DeepSeek-V2/V3, GLM-4.5, MiniMax, ERNIE-4.5-MoE, …; `all-linear`
/// included) into `target_parameters` on the stacked `gate_up_proj` (at twice the rank:
/// gate and up fused) and `down_proj`, and on the router's weight, each a
/// `ParamWrapper` (`tuners/lora/layer.py`: `lora_A` in × r·E, `lora_B` r·E × out).
/// Under the frameworks that load through transformers.
pub(crate) fn peft_stacked_experts(input: &EstimateInput) -> bool {
    transformers_loads(input)
        && input
            .arch
            .is_some_and(|a| a.moe.is_some_and(|m| m.experts > 0))
}

/// Whether a QLoRA base quantises the output projection with the decoder's linears:
/// Lightning's `BitsandbytesPrecision` (LitGPT) replaces every `nn.Linear` under
/// `module_init_context` (`_ClassReplacementContextManager({"torch.nn.Linear": ...})`,
/// lightning/fabric/plugins/precision/bitsandbytes.py); transformers and PEFT leave it
/// in 16 bits (`get_keys_to_not_convert`), as does a tied embedding.
pub(crate) fn head_quantised(input: &EstimateInput) -> bool {
    input.train == TrainMode::Qlora
        && input.framework.defaults().head_4bit
        && input.arch.is_some_and(|a| !a.tied_embeddings)
        && matches!(input.format, Some(StorageFormat::Bnb4 { .. }) | None)
}

/// The architecture's weights by class under the input's formats, the output
/// projection in the linears' format where [`head_quantised`].
pub(crate) fn weight_breakdown(
    a: &Architecture,
    input: &EstimateInput,
) -> Result<WeightBreakdown, EstimateError> {
    let formats = module_formats(input)?;
    let mut w = a.weights(&formats)?;
    // The linears compressed-tensors decompressed keep their scales (`ct_kept_scales`).
    if input.compressed_tensors {
        let stored = stored_formats(input)?;
        for t in a.tensors()? {
            if !matches!(t.role, Role::Linear | Role::AttnLinear) {
                continue;
            }
            let was = stored.for_group(&t);
            let one = ct_scales_beside(input, was, formats.for_group(&t), t.rows, t.cols)?;
            let kept = checked_product(&[one, t.count], "weights")?;
            if kept == 0 {
                continue;
            }
            if let Some(c) = w.classes.iter_mut().find(|c| c.class == t.class) {
                c.bytes = c
                    .bytes
                    .checked_add(kept)
                    .ok_or(EstimateError::Overflow { what: "weights" })?;
                let note = format!("{} scales", was.name());
                if !c.formats.contains(&note) {
                    c.formats = format!("{} + {note}", c.formats);
                }
            }
        }
    }
    if head_quantised(input) {
        let q = a.weights(&ModuleFormats {
            vocab: formats.linear,
            ..formats
        })?;
        for c in &mut w.classes {
            if c.class == ParamClass::LmHead
                && let Some(h) = q.classes.iter().find(|h| h.class == ParamClass::LmHead)
            {
                *c = h.clone();
            }
        }
    }
    Ok(w)
}

/// An encoder-decoder's stacks on one of `tp` ranks: what every rank keeps whole
/// plus its share of what is split (`Architecture::encdec_whole`, `encdec_split`, as
/// the config reader placed them), in the stacks' dense dtype (a quantised format is
/// refused for them). The split part holds the zero k biases vLLM adds, so the ranks
/// together hold a little more than the checkpoint.
fn encdec_per_rank(
    a: &crate::arch::Architecture,
    c: &crate::arch::ClassTotal,
    tp: u64,
) -> Result<u64, EstimateError> {
    let per_param = c.bytes.checked_div(c.params).unwrap_or(0);
    let params = a
        .encdec_whole
        .checked_add(a.encdec_split.div_ceil(tp))
        .ok_or(EstimateError::Overflow { what: "weights" })?;
    checked_product(&[params, per_param], "weights")
}

pub(super) fn weights(
    input: &EstimateInput,
    split: &Split,
    b: &mut Builder,
) -> Result<(Option<u64>, Option<u64>), EstimateError> {
    let linear = match (input.format, input.bits) {
        (Some(f), Some(bits)) => {
            let implied = format_for_bits(bits).ok();
            if implied.is_some_and(|i| i != f)
                && !matches!(f, StorageFormat::Dense { dtype } if u64::from(bits) == dtype.bytes().saturating_mul(8))
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
    if let Some(c) = &input.counted {
        return super::counted::weights(c, input, split, b);
    }
    if let Some(a) = input.arch {
        let w = weight_breakdown(&a, input)?;
        // An encoder-decoder over tp ranks (validated: Whisper, placed as vLLM does).
        let encdec_tp = a.encdec_params > 0 && split.tp > 1;
        for c in &w.classes {
            let device = match c.class {
                ParamClass::EncoderDecoder if encdec_tp => encdec_per_rank(&a, c, split.tp)?,
                // vLLM's Whisper keeps its `embed_tokens` an `nn.Embedding`, whole on
                // every rank (vllm-project/vllm d1a2e94651cf, whisper.py `WhisperDecoder`).
                ParamClass::Embeddings if encdec_tp => c.bytes,
                ParamClass::Attention
                | ParamClass::Mlp
                | ParamClass::Mtp
                | ParamClass::EncoderDecoder => split.layered(c.bytes, true),
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
                ParamClass::EncoderDecoder => "Weights: encoder and decoder stacks",
            };
            b.line(
                LineKey::weights(c.class),
                label,
                c.bytes,
                device,
                Kind::Computed,
                true,
                if c.mix.is_empty() {
                    format!("{} parameters stored as {}", c.params, c.formats)
                } else {
                    let types: Vec<String> = c
                        .mix
                        .iter()
                        .map(|(ty, n)| format!("{n} × {}", ty.name()))
                        .collect();
                    format!(
                        "{} parameters stored as {} (llama.cpp's tensor types: {})",
                        c.params,
                        c.formats,
                        types.join(", ")
                    )
                },
                &[
                    ("parameters", c.params.to_string()),
                    ("format", c.formats.clone()),
                ],
            );
        }
        let formats = module_formats(input)?;
        if input.format.is_some_and(|f| fp8_dequantised(input, f)) {
            b.warnings.push(format!(
                "{} under transformers on this card: its fp8 quantizer dequantises the checkpoint to {} at load below compute capability 8.9 (Volta, Turing, Ampere) or without CUDA, so the linears are counted in {}; a serving engine keeps them in fp8",
                input.format.map(|f| f.name()).unwrap_or_default(),
                input.keep_format.name(),
                input.keep_format.name()
            ));
        }
        if let Some(f) = input.format.filter(|f| ct_decompressed(input, *f)) {
            b.warnings.push(format!(
                "{} (compressed-tensors) under transformers: compressed-tensors decompresses the linears to {} on the first forward, module by module, and keeps their scales beside them (dequantize=True does it at load), so they are counted in {} with the scales; a serving engine keeps {}",
                f.name(),
                input.keep_format.name(),
                input.keep_format.name(),
                f.name()
            ));
        }
        if input.runtime() == CacheRuntime::Transformers
            && !input.compressed_tensors
            && input.card_fp8().is_none()
            && matches!(input.format, Some(StorageFormat::Fp8 { .. }))
        {
            b.assumptions.push(
                "fp8 under transformers counted as stored, for a card of compute capability 8.9 or more: below it (Volta, Turing, Ampere) and on a Mac transformers dequantises the checkpoint to bf16 at load (name the card: --card)".into(),
            );
        }
        if let (Some(kept), Some(m)) = (formats.experts, a.moe) {
            let experts = a
                .tensors()?
                .iter()
                .filter(|t| formats.for_group(t) == kept && formats.for_role(t.role) != kept)
                .try_fold(0u64, |n, t| t.params().map(|p| n.saturating_add(p)))?;
            if prequantised_gptq_awq(formats.linear) {
                b.warnings.push(format!(
                    "{} under transformers: the model is not the checkpoint's. Its GPTQ/AWQ loader replaces nn.Linear modules only, and transformers 5 stores an MoE's routed experts as 3D parameters that no converter fills from a pre-quantised checkpoint's per-expert qweight/qzeros/scales keys: transformers drops those keys as unexpected and initialises the {experts} expert parameters ({} experts a layer) at random in {}, counted so (GPTQ quantising a 16-bit checkpoint at load leaves them in that dtype, loaded). Serve a pre-quantised checkpoint with vLLM or SGLang (--engine vllm), whose MoE methods keep the experts quantised",
                    formats.linear.name(),
                    m.experts,
                    kept.name()
                ));
            } else {
                let after = if input.train == TrainMode::None {
                    "vLLM's bitsandbytes path quantises them: --engine vllm"
                } else if kept == (StorageFormat::Dense { dtype: Dtype::F32 }) {
                    "PEFT's k-bit preparation casts them to fp32 with the other 16-bit parameters"
                } else {
                    "frozen, in the model's dtype"
                };
                b.warnings.push(format!(
                    "{} under transformers: bitsandbytes quantises nn.Linear modules only, and transformers 5 stores an MoE's routed experts as 3D parameters: their {experts} parameters ({} experts a layer) stay in {} ({after})",
                    formats.linear.name(),
                    m.experts,
                    kept.name()
                ));
            }
        }
        if encdec_tp {
            b.assumptions.push(format!(
                "encoder-decoder over tp {}: its stacks placed as vLLM shards Whisper (parallel linears split, LayerNorms, row-parallel biases, convolutions, position tables and the token embedding whole on every rank; {} parameters whole, {} split, with the zero k biases vLLM adds)",
                split.tp, a.encdec_whole, a.encdec_split
            ));
        }
        // The model's dtype: the one its norms and biases are kept in.
        let dtype_bytes = match module_formats(input)?.kept {
            StorageFormat::Dense { dtype } => dtype.bytes(),
            _ => 2,
        };
        let buffers = a.buffers(dtype_bytes)?;
        let bytes = buffers
            .iter()
            .try_fold(0u64, |sum, (_, b)| sum.checked_add(*b))
            .ok_or(EstimateError::Overflow { what: "weights" })?;
        if bytes > 0 {
            // Built at load beside the weights (no checkpoint tensor, no parameter),
            // whole on every GPU.
            let what: Vec<&str> = buffers.iter().map(|(w, _)| w.as_str()).collect();
            b.line(
                LineKey::WeightsOther,
                BUFFERS_LABEL,
                bytes,
                bytes,
                Kind::Computed,
                true,
                format!("{}, computed when the model is built", what.join("; ")),
                &[("parameters", "0".into())],
            );
        }
        if split.pp > 1 {
            // Embeddings sit on the first stage, lm_head on the last: only the larger counts per device.
            let emb = b
                .lines
                .iter()
                .position(|l| l.key == LineKey::WeightsEmbeddings);
            let head = b.lines.iter().position(|l| l.key == LineKey::WeightsLmHead);
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
            const SQUARE: u64 = ASSUMED_MATRIX_DIM * ASSUMED_MATRIX_DIM;
            let (full, rest) = (n / SQUARE, n % SQUARE);
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
            if let (Some(ft), StorageFormat::Gguf { ty, .. }) = (q.file_type(), q) {
                b.assumptions.push(format!(
                    "{} counted as its main type {} throughout: the types llama.cpp gives each tensor need the architecture",
                    ft.name(),
                    ty.name()
                ));
            }
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
        LineKey::Weights,
        "Weights",
        bytes,
        Split::part(bytes, 1, split.tp.saturating_mul(split.pp)),
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
            LineKey::weights_named(class),
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
