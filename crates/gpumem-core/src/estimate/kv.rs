//! The KV cache's lines (prefill, end of generation, recurrent state, MLA decompressed).

use super::*;

pub(super) fn kv_cache(
    input: &EstimateInput,
    split: &Split,
    b: &mut Builder,
) -> Result<(), EstimateError> {
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
    if input.arch.is_some_and(|a| a.encoder) {
        return encoder_no_cache(input, context, b);
    }
    let end = context
        .checked_add(input.generate)
        .ok_or(EstimateError::Overflow { what: "tokens" })?;
    // A model counted by its own code: its cache as it holds it (no shape needed).
    if let Some(c) = &input.counted
        && let Some(layers) = &c.cache
    {
        position_warnings(input, end, b);
        return super::counted::kv_cache(layers, &c.by, input, context, end, split, b);
    }
    if let Some(c) = &input.counted
        && let Some(measured) = &c.measured
    {
        position_warnings(input, end, b);
        return super::counted::kv_measured(measured, &c.by, input, context, end, split, b);
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
    // A mixer in the architecture names its layers (and the state's shape).
    let mixer = input.arch.and_then(|a| a.mixer);
    let state_layers = mixer.map_or(input.state_layers, |m| m.layers);
    if state_layers > layers {
        return Err(EstimateError::invalid(
            "state-layers",
            format!("{state_layers} state layers of {layers} layers"),
        ));
    }
    // Hybrids name their attention layers; a hand-entered state-layers replaces KV.
    let kv_layers = match input.arch {
        Some(a) if a.mixer.is_some() || a.attn_layers.is_some() => a.attention_layers(),
        _ => layers.saturating_sub(state_layers),
    };
    // KV-shared layers (Gemma 4) keep no cache: the windowed ones leave the sliding
    // layers, the global ones the full layers.
    let (shared_windowed, shared_global) = input.arch.map_or((0, 0), |a| a.kv_shared());
    // Cross-attention layers (Mllama) keep K and V of the vision tokens, not the text's.
    let cross_layers = input.arch.map_or(0, |a| a.cross_layers);
    let kv_layers = kv_layers
        .saturating_sub(shared_windowed)
        .saturating_sub(shared_global)
        .saturating_sub(cross_layers);
    let sliding_layers = input
        .sliding_layers
        .map(|s| s.saturating_sub(shared_windowed));
    // Beam search keeps every beam's cache: transformers 5.23's `generate`
    // (`generation/utils.py`, `_expand_inputs_for_generation`) repeat_interleaves the
    // prompt's ids by `num_beams` before the first forward, so each cache holds
    // sequences × beams rows from the prefill on.
    let rows = checked_product(&[input.sequences, input.beams], "sequences × beams")?;
    let shape = KvShape {
        layers: kv_layers,
        values,
        layout: if mla {
            KvLayout::MlaLatent
        } else {
            KvLayout::Heads
        },
        dtype: input.kv_dtype.unwrap_or(KvDtype::Dense {
            dtype: input.compute_dtype,
        }),
        sequences: rows,
        sliding_window: input.sliding_window,
        sliding_layers,
        static_tokens: input.static_cache,
        full_values: match input.arch {
            Some(a) => a.global_kv_values()?,
            None => None,
        },
    };
    position_warnings(input, end, b);
    // KV heads are split across tp; when tp exceeds them each device keeps one head's
    // copy. MLA's latent is one "head": every tp rank keeps all of it.
    let kv_per_device = |bytes: u64| -> u64 {
        if mla {
            return split.layered(bytes, false);
        }
        let heads_here = kv_heads.div_ceil(split.tp).max(1);
        Split::part(split.layered(bytes, false), heads_here, kv_heads)
    };
    let mut inputs = vec![
        ("layers", layers.to_string()),
        ("values per token and layer", values.to_string()),
        ("kv-dtype", shape.dtype.name()),
        ("sequences", input.sequences.to_string()),
    ];
    let beams = input.beams > 1;
    if beams {
        inputs.push(("beams", input.beams.to_string()));
    }
    let formula = if beams {
        format!(
            "{} × beams (beam search keeps every beam's cache)",
            shape.formula()
        )
    } else {
        shape.formula()
    };
    // transformers 5.23 `cache_utils.py` `DynamicSlidingWindowLayer.update`: the
    // prefill concatenates the prompt's keys and values into new tensors of the whole
    // prompt and keeps `[:, :, -sliding_window + 1:, :]` of them, a view that holds the
    // whole storage until the first decode step's concatenation replaces it (then
    // `min(tokens, window)` stay). So under transformers' own dynamic cache a sliding
    // layer holds every prompt token at the prefill's peak; a serving engine sizes its
    // own cache, and a static cache is its fixed length.
    let whole_prompt = input.runtime == CacheRuntime::Transformers
        && input.static_cache.is_none()
        && shape.sliding_window.is_some_and(|w| context > w);
    let prefill = if whole_prompt {
        // The same layers and widths, the window no longer cutting the prompt.
        KvShape {
            sliding_window: Some(u64::MAX),
            ..shape
        }
        .bytes(context)?
    } else {
        shape.bytes(context)?
    };
    let mut generation = shape.bytes(end)?;
    let mut gen_formula = formula.clone();
    let formula = if whole_prompt {
        format!(
            "{formula}; at the prefill every sliding layer holds the whole prompt's {context} tokens (transformers' DynamicSlidingWindowLayer keeps a view of the prompt's keys and values until the first decode step)"
        )
    } else {
        formula
    };
    if beams {
        // transformers 5.23 `cache_utils.py`: `_beam_search` calls the cache's
        // `reorder_cache` after each step, and `DynamicLayer.reorder_cache` replaces
        // `self.keys` by `self.keys.index_select(0, beam_idx)`, then the values: the
        // copy is made while the old tensor is alive, so one layer's K (or V) more at
        // once. `EncoderDecoderCache.reorder_cache` reorders the cross-attention cache
        // too: the widest of either layer's K is counted here.
        let cross_layer = match input.arch.filter(|a| a.encdec_params > 0) {
            Some(a) => {
                let length = match a.encoder_length {
                    0 => context,
                    n => n,
                };
                KvShape {
                    static_tokens: None,
                    sliding_window: None,
                    sliding_layers: None,
                    full_values: None,
                    ..shape
                }
                .largest_layer_bytes(length)?
            }
            None => 0,
        };
        // Mllama's cross-attention layers over the image's tokens are reordered alike.
        let vision_layer = match input.arch.filter(|a| a.cross_layers > 0) {
            Some(a) => KvShape {
                static_tokens: None,
                sliding_window: None,
                sliding_layers: None,
                full_values: None,
                ..shape
            }
            .largest_layer_bytes(a.cross_tokens)?,
            None => 0,
        };
        let layer = shape
            .largest_layer_bytes(end)?
            .max(cross_layer)
            .max(vision_layer);
        let copy = layer.div_ceil(2);
        generation = generation
            .checked_add(copy)
            .ok_or(EstimateError::Overflow { what: "KV bytes" })?;
        gen_formula.push_str(&format!(
            "; + one layer's K ({copy} B) copied by reorder_cache's index_select while the old is alive"
        ));
    }
    let mut pre_inputs = inputs.clone();
    pre_inputs.push(("tokens", context.to_string()));
    b.line(
        LineKey::KvCachePrefill,
        "KV cache after prefill (shown, not added)",
        prefill,
        kv_per_device(prefill),
        Kind::Computed,
        false,
        formula,
        &pre_inputs,
    );
    let mut gen_inputs = inputs;
    gen_inputs.push(("tokens", end.to_string()));
    // The counted cache is the larger of the two moments: where the prefill's sliding
    // layers hold the whole prompt beyond what the end of generation keeps, the
    // prefill's (the moment the prefill's transients are counted at).
    let (label, held, gen_formula) = if prefill > generation {
        (
            "KV cache at the prefill (sliding layers holding the whole prompt)",
            prefill,
            format!(
                "the prefill's cache, above the end of generation's {generation} B: every sliding layer holds the prompt's {context} tokens until the first decode step (transformers' DynamicSlidingWindowLayer keeps a view of the prompt's keys and values), then {gen_formula}"
            ),
        )
    } else {
        ("KV cache at the end of generation", generation, gen_formula)
    };
    b.line(
        LineKey::KvCache,
        label,
        held,
        kv_per_device(held),
        Kind::Computed,
        true,
        gen_formula,
        &gen_inputs,
    );
    if beams {
        b.assumptions.push(format!(
            "beam search: {} beams per sequence, every cache kept once per beam (transformers' generate expands the inputs and the encoder's output by num_beams); the beam scorer's per-step tensors (log-probabilities over beams × vocab) are not counted",
            input.beams
        ));
    }
    if let Some(a) = input.arch.filter(|a| a.encdec_params > 0) {
        encoder_decoder_caches(input, &a, context, &shape, &kv_per_device, b)?;
    }
    if let Some(a) = input.arch.filter(|a| a.cross_layers > 0) {
        vision_cross_cache(input, &a, &shape, &kv_per_device, b)?;
    }
    let runtime = input.runtime;
    let value = input.compute_dtype.bytes();
    if let Some(x) = input.arch.and_then(|a| a.indexer) {
        // One more cache per attention layer, one key per token; like the latent,
        // every tensor-parallel rank keeps all of it. Its width is the runtime's
        // (`Indexer::key_bytes`): transformers' keys in the model's dtype, the serving
        // engines' fp8 keys with a scale per 128.
        let per_token = x.key_bytes(runtime, value);
        let bytes = checked_product(&[kv_layers, per_token, end, rows], "indexer key cache")?;
        let (formula, held) = match runtime {
            CacheRuntime::Transformers => (
                format!(
                    "attention layers × tokens × indexer head dim × {value} B × sequences (transformers' DynamicIndexedLayer: the keys in {})",
                    input.compute_dtype.name()
                ),
                format!("the indexer's keys in {}", input.compute_dtype.name()),
            ),
            CacheRuntime::Serving => (
                "attention layers × tokens × (indexer head dim + head dim ÷ 128 × 4) B × sequences (vLLM's DeepseekV32IndexerCache: fp8 keys, an fp32 scale per 128)".into(),
                "fp8 indexer keys with an fp32 scale per 128".into(),
            ),
        };
        b.line(
            LineKey::KvCacheIndexer,
            format!("Sparse attention's indexer keys ({})", runtime.name()),
            bytes,
            split.layered(bytes, false),
            Kind::Computed,
            true,
            formula,
            &[
                ("layers", kv_layers.to_string()),
                ("bytes per token and layer", per_token.to_string()),
                ("tokens", end.to_string()),
                ("sequences", input.sequences.to_string()),
                ("layout", runtime.name().to_string()),
            ],
        );
        b.assumptions.push(match runtime {
            CacheRuntime::Transformers => format!(
                "indexer key cache as transformers 5.23 holds it ({held}, {per_token} B a token and layer); a serving engine keeps fp8 keys ({} B): name it with --engine",
                x.key_bytes(CacheRuntime::Serving, value)
            ),
            CacheRuntime::Serving => format!(
                "indexer key cache as vLLM allocates it ({held}, {per_token} B a token and layer); transformers' own cache keeps {} B",
                x.key_bytes(CacheRuntime::Transformers, value)
            ),
        });
    }
    if state_layers > 0 {
        // The mixer's shape as the runtime keeps it (`Mixer::state_shape`), or
        // state-bytes given by hand. Where both are known under transformers, the
        // larger stands: a state-bytes read for a serving engine (Nemotron's
        // `mamba_ssm_cache_dtype`) is not transformers' cache.
        let shaped = mixer
            .map(|m| m.state_shape(runtime, value).map(|s| (m, s)))
            .transpose()?;
        let (per_layer, formula) = match shaped {
            Some((m, s))
                if input.state_bytes == 0
                    || (runtime == CacheRuntime::Transformers
                        && s.bytes(value)? > input.state_bytes) =>
            {
                let per_layer = s.bytes(value)?;
                let other = match runtime {
                    CacheRuntime::Transformers => CacheRuntime::Serving,
                    CacheRuntime::Serving => CacheRuntime::Transformers,
                };
                let other_bytes = m.state_shape(other, value)?.bytes(value)?;
                let given = if input.state_bytes > 0 {
                    format!(
                        " (state-bytes {} given, below what this cache holds)",
                        input.state_bytes
                    )
                } else {
                    String::new()
                };
                b.assumptions.push(match runtime {
                    CacheRuntime::Transformers => format!(
                        "{} state as transformers 5.23's cache holds it: the whole convolution window in {}, the recurrent state in {} ({per_layer} B a layer and sequence){given}; a serving engine keeps {other_bytes} B (vLLM's layout): name it with --engine",
                        m.kind.name(),
                        input.compute_dtype.name(),
                        dtype_of(s.recurrent_bytes, input.compute_dtype),
                    ),
                    CacheRuntime::Serving => format!(
                        "{} state in {}, shaped as vLLM allocates it ({per_layer} B a layer and sequence); transformers' own cache holds {other_bytes} B; an fp32 SSM state (mamba_ssm_cache_dtype) needs more: give state-bytes",
                        m.kind.name(),
                        input.compute_dtype.name()
                    ),
                });
                (
                    per_layer,
                    format!(
                        "state layers × ({} conv × {value} B + {} recurrent × {} B) × sequences, {}'s layout (constant in tokens)",
                        s.conv,
                        s.recurrent,
                        s.recurrent_bytes,
                        runtime.name()
                    ),
                )
            }
            _ => (
                input.state_bytes,
                "state layers × state bytes per layer × sequences (constant in tokens)".into(),
            ),
        };
        let bytes = checked_product(&[state_layers, per_layer, rows], "recurrent state")?;
        let layout = match (
            shaped,
            per_layer == input.state_bytes && input.state_bytes > 0,
        ) {
            (Some(_), false) => runtime.name(),
            _ => "state-bytes given",
        };
        b.line(
            LineKey::KvCacheState,
            format!("SSM / linear-attention state ({layout})"),
            bytes,
            split.layered(bytes, true),
            Kind::Computed,
            true,
            formula,
            &[
                ("state-layers", state_layers.to_string()),
                ("state-bytes", per_layer.to_string()),
                ("sequences", input.sequences.to_string()),
                ("layout", layout.to_string()),
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
            LineKey::KvCacheDecompressed,
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

/// The name of a recurrent value `bytes` wide: the model's dtype, or fp32.
fn dtype_of(bytes: u64, model: Dtype) -> &'static str {
    if bytes == model.bytes() {
        model.name()
    } else {
        "fp32"
    }
}

/// An encoder attends over its whole input in one forward and keeps nothing for a
/// next token: no KV cache (a line of 0 B that says so), and nothing to generate.
fn encoder_no_cache(
    input: &EstimateInput,
    context: u64,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    if input.generate > 0 {
        return Err(EstimateError::invalid(
            "generate",
            "an encoder generates no tokens: give its input length as context and the batch as sequences",
        ));
    }
    if input.static_cache.is_some() {
        return Err(EstimateError::invalid(
            "static-cache",
            "an encoder keeps no KV cache",
        ));
    }
    if let Some(max) = input.max_position
        && context > max
    {
        b.warnings.push(format!(
            "{context} tokens per sequence exceed the encoder's {max} positions (its position table ends there; inputs are truncated to it)"
        ));
    }
    b.line(
        LineKey::KvCache,
        "KV cache: none (an encoder keeps no KV cache)",
        0,
        0,
        Kind::Computed,
        true,
        "an encoder keeps no KV cache: the whole input is attended in one forward and nothing is generated".into(),
        &[("sequences", input.sequences.to_string()), ("tokens", context.to_string())],
    );
    b.assumptions
        .push("an encoder keeps no KV cache: kv_cache_bytes is 0".into());
    Ok(())
}

/// Past what the model serves (its RoPE scaling's reach, else its trained positions),
/// or past a static cache: said beside the KV lines.
fn position_warnings(input: &EstimateInput, end: u64, b: &mut Builder) {
    match (input.rope_positions, input.max_position) {
        (Some(r), _) if end > r => b.warnings.push(format!(
            "{end} tokens per sequence exceed the {r} positions the config's RoPE scaling reaches"
        )),
        (None, Some(max)) if end > max => b.warnings.push(format!(
            "{end} tokens per sequence exceed the {max} positions it was trained for (no RoPE scaling beyond them)"
        )),
        (Some(r), Some(max)) if end > max => b.assumptions.push(format!(
            "{end} tokens per sequence: past the {max} trained positions, within the {r} the RoPE scaling reaches"
        )),
        _ => {}
    }
    if let Some(s) = input.static_cache
        && end > s
    {
        b.warnings.push(format!(
            "prompt + generated tokens ({end}) exceed the static cache ({s})"
        ));
    }
}

/// The cross-attention layers' cache over the vision tokens (Mllama): K and V of each
/// such layer over `cross_tokens`, written once from the image's states and kept to the
/// end (transformers' `MllamaTextCrossAttention` stores them in the layer's cache slot;
/// `MllamaForConditionalGeneration._prepare_static_cache` sizes it `images ×
/// max_num_tiles × num_patches`). Under tensor parallelism each device keeps its share
/// of the KV heads, as for the self-attention cache (`per_device`): vLLM's
/// `MllamaTextCrossAttention` (vllm-project/vllm 6f0b37b88978,
/// `vllm/model_executor/models/mllama.py`) gives its `Attention` layer
/// `num_local_key_value_heads = num_key_value_heads // tensor_parallel_size`, the
/// shards of its `QKVCrossParallelLinear`.
fn vision_cross_cache(
    input: &EstimateInput,
    a: &crate::arch::Architecture,
    shape: &KvShape,
    per_device: &dyn Fn(u64) -> u64,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    let cross = KvShape {
        layers: a.cross_layers,
        static_tokens: None,
        sliding_window: None,
        sliding_layers: None,
        full_values: None,
        ..*shape
    };
    let bytes = cross.bytes(a.cross_tokens)?;
    b.line(
        LineKey::KvCacheCross,
        "Cross-attention cache over the image's vision tokens",
        bytes,
        per_device(bytes),
        Kind::Computed,
        true,
        format!(
            "cross-attention layers × 2 × kv heads × head_dim × vision tokens × sequences{}, in {} (written once per image)",
            if input.beams > 1 { " × beams" } else { "" },
            shape.dtype.name()
        ),
        &[
            ("cross-layers", a.cross_layers.to_string()),
            ("values per token and layer", a.kv_values_per_token()?.to_string()),
            ("cross-tokens", a.cross_tokens.to_string()),
            ("sequences", input.sequences.to_string()),
        ],
    );
    b.assumptions.push(format!(
        "cross-attention layers read {} vision tokens per sequence (one image; more images multiply them: give cross-tokens)",
        a.cross_tokens
    ));
    Ok(())
}

/// The encoder's last hidden state an encoder-decoder's `generate` keeps to the end
/// (`encoder_outputs`): sequences × encoder length × `hidden` values in the compute
/// dtype, as the line `label` of kind `kind` (computed from the architecture, or
/// counted by the model's own code).
pub(super) fn encoder_output(
    input: &EstimateInput,
    length: u64,
    hidden: u64,
    label: impl Into<Cow<'static, str>>,
    kind: Kind,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    let value = input.compute_dtype.bytes();
    let out = checked_product(
        &[input.sequences, input.beams, length, hidden, value],
        "encoder output",
    )?;
    let mut inputs = vec![
        ("sequences", input.sequences.to_string()),
        ("encoder length", length.to_string()),
        ("hidden", hidden.to_string()),
    ];
    // Beam search: transformers 5.23 `_expand_inputs_for_generation` replaces
    // `encoder_outputs.last_hidden_state` in place by its `repeat_interleave` over
    // `num_beams`, so the expanded copy is what generate keeps (the original is no
    // longer referenced once replaced).
    let formula = if input.beams > 1 {
        inputs.push(("beams", input.beams.to_string()));
        format!(
            "sequences × beams × encoder length × hidden × {value} B (generate keeps encoder_outputs, repeat_interleaved by num_beams, to the end)"
        )
    } else {
        format!(
            "sequences × encoder length × hidden × {value} B (generate keeps encoder_outputs to the end)"
        )
    };
    b.line(
        LineKey::KvCacheEncoderOutput,
        label,
        out,
        out,
        kind,
        true,
        formula,
        &inputs,
    );
    Ok(())
}

/// What an encoder-decoder's generation holds beside the decoder's self-attention
/// cache, as transformers 5.23 builds it (`generation/utils.py`: the encoder runs once,
/// `model_kwargs["encoder_outputs"]` is kept to the end; `cache_utils.py`'s
/// `EncoderDecoderCache` pairs the self-attention `DynamicCache` with a cross-attention
/// one whose layers each hold K and V of `[sequences, heads, encoder length,
/// head_dim]`, written at the first decoder step and never grown — T5Attention,
/// BartAttention and WhisperAttention project the encoder's output with the
/// decoder's heads and head width):
/// - the cross-attention cache: 2 × decoder layers × heads × head_dim values per
///   encoder position and sequence, in the KV dtype (the model's); under tensor
///   parallelism each device holds its share of the heads as for the self-attention
///   cache (`per_device`: the heads split over tp, one head's copy each when tp
///   exceeds them), as vLLM shards it (vllm-project/vllm d1a2e94651cf,
///   `vllm/model_executor/models/whisper.py`: `WhisperCrossAttention` is a
///   `WhisperAttention`, whose `__init__` gives its `CrossAttention` layer
///   `num_kv_heads = max(1, total_num_heads // tp_size)` and its `kv_proj` a
///   `QKVParallelLinear` over the decoder's heads);
/// - the encoder's last hidden state: sequences × encoder length × hidden values in
///   the compute dtype.
fn encoder_decoder_caches(
    input: &EstimateInput,
    a: &crate::arch::Architecture,
    context: u64,
    shape: &KvShape,
    per_device: &dyn Fn(u64) -> u64,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    let length = match a.encoder_length {
        0 => context,
        n => n,
    };
    let cross = KvShape {
        static_tokens: None,
        sliding_window: None,
        sliding_layers: None,
        full_values: None,
        ..*shape
    };
    let bytes = cross.bytes(length)?;
    b.line(
        LineKey::KvCacheCross,
        "Cross-attention cache over the encoder's output",
        bytes,
        per_device(bytes),
        Kind::Computed,
        true,
        format!(
            "decoder layers × 2 × heads × head_dim × encoder length × sequences{}, in {} (K and V of every decoder layer's cross-attention, written once{})",
            if input.beams > 1 { " × beams" } else { "" },
            shape.dtype.name(),
            if input.beams > 1 { "; one copy per beam" } else { "" }
        ),
        &[
            ("layers", a.layers.to_string()),
            ("values per token and layer", a.kv_values_per_token()?.to_string()),
            ("encoder length", length.to_string()),
            ("sequences", input.sequences.to_string()),
            ("beams", input.beams.to_string()),
        ],
    );
    encoder_output(
        input,
        length,
        a.hidden,
        "Encoder output, kept through generation",
        Kind::Computed,
        b,
    )?;
    if a.encoder_length == 0 {
        // The source's length decides two lines; a short context (a decoder prompt of
        // one token, as generate starts) would size them for almost nothing.
        b.warnings.push(format!(
            "encoder-decoder: no encoder length given, so the source is taken as the context's {length} tokens; the cross-attention cache and the encoder output grow with the source: give encoder-length (the longest source in tokens)"
        ));
    }
    b.assumptions.push(match a.encoder_length {
        0 => format!(
            "encoder-decoder: the encoder reads {length} tokens, the context's (give encoder-length for the source's own length: the cross-attention cache and the encoder output grow with it); the decoder's self-attention cache holds the context and the generated tokens"
        ),
        _ => format!(
            "encoder-decoder: the encoder reads {length} positions (encoder-length); the decoder's self-attention cache holds the context (its prompt) and the generated tokens, the cross-attention cache does not grow"
        ),
    });
    Ok(())
}
