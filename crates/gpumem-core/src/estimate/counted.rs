//! A model counted by its own code: the agent builds a family the config reader does
//! not know with transformers on PyTorch's `meta` device and reads every parameter and
//! buffer from its modules and the KV cache from the cache its forward returns
//! (`gpumem-agent estimate --count-with`). Those counts, as [`Counted`], replace the
//! reader's weights and KV lines here, so every figure made from the input (the fit,
//! the format ladder, the cards needed) uses them. The lines are `traced`: the model's
//! code ran, no weight was read.

use super::*;

/// Weight matrices of one kind and shape: `banks` of `rows × cols` (an expert bank
/// `[experts, rows, cols]` is `experts` banks; a plain matrix one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountedMatrices {
    /// `embeddings`, `attention`, `mlp`, `norms`, `lm_head` or `other`.
    pub kind: String,
    /// Matrices of this shape (product of the leading dimensions, over every tensor).
    pub banks: u64,
    /// Output rows.
    pub rows: u64,
    /// Input columns.
    pub cols: u64,
    /// Held by a module other than an `nn.Linear` (or GPT-2's `Conv1D`): an MoE's
    /// expert banks, a convolution's kernel. A loader that quantises linears only
    /// leaves them in the model's dtype ([`super::weights::linear_only_loader`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outside_linear: bool,
}

/// Vectors of one kind (biases, norms' scales): stored in the kept format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountedVectors {
    /// As [`CountedMatrices::kind`].
    pub kind: String,
    /// Tensors.
    pub tensors: u64,
    /// Elements.
    pub elements: u64,
}

/// One layer of the model's own cache for one sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountedLayer {
    /// Key and value elements one more token adds.
    pub kv_per_token: u64,
    /// Key and value elements there before the first token (none in a plain cache).
    pub kv_fixed: u64,
    /// Bytes of the other state, constant in the tokens (linear attention, SSM).
    pub state_bytes: u64,
    /// Tokens after which the layer stops growing (its sliding window).
    pub window: Option<u64>,
    /// Bytes one more token adds to the layer's other tensors (a sparse-attention
    /// indexer's keys beside the keys and values), kept in their own dtype whatever the
    /// KV dtype and never windowed.
    #[serde(default)]
    pub other_per_token_bytes: u64,
}

/// What the model's own code says it holds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Counted {
    /// Who counted, e.g. `transformers 5.23.0`.
    pub by: String,
    /// Every parameter once (tied ones once).
    pub parameters: u64,
    /// Parameter matrices by kind and shape.
    pub matrices: Vec<CountedMatrices>,
    /// Parameter vectors by kind.
    pub vectors: Vec<CountedVectors>,
    /// Buffers (rotary tables, masks) as the model keeps them, bytes.
    pub buffer_bytes: u64,
    /// Buffers, tensors.
    pub buffers: u64,
    /// The cache per layer; `None`: the reader's KV lines stand. An encoder-decoder's:
    /// its decoder's self-attention cache.
    pub cache: Option<Vec<CountedLayer>>,
    /// An encoder, built bare (transformers' `AutoModel`): it keeps no cache.
    #[serde(default)]
    pub encoder: bool,
    /// An encoder-decoder's cross-attention cache and encoder output.
    #[serde(default)]
    pub cross: Option<CountedCross>,
    /// A cache that does not grow by the same elements each token (a compressed cache
    /// that emits an entry every few tokens beside a window): the model's own cache
    /// read after a forward of exactly the tokens the estimate needs, when
    /// [`Counted::cache`] is `None`. Its figures hold at those lengths only.
    #[serde(default)]
    pub measured: Option<Vec<CountedMeasured>>,
}

/// The model's own cache after one forward of `tokens` tokens, one sequence (twice
/// that for two: checked by the count), as it holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountedMeasured {
    /// Tokens of the forward.
    pub tokens: u64,
    /// Key and value elements (a window layer's at its window, as while decoding).
    pub kv_elements: u64,
    /// Other tensors' bytes (compressed entries, compressor buffers, an indexer's
    /// keys), in the dtype the model keeps them whatever the KV dtype.
    pub other_bytes: u64,
}

/// What an encoder-decoder's generation holds over its encoder's output, read from the
/// model's own forward (transformers' `EncoderDecoderCache.cross_attention_cache`,
/// written at the first decoder step and never grown, and the `encoder_outputs`
/// generate keeps to the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountedCross {
    /// Key and value elements of the cross-attention cache per encoder position, every
    /// decoder layer together, for one sequence.
    pub per_source_token: u64,
    /// Values of the encoder's output per position (its hidden width).
    pub hidden: u64,
    /// Decoder layers holding a cross-attention cache.
    pub layers: u64,
    /// The encoder's length: an audio encoder's own (Whisper's frames), or the
    /// source's as given (`encoder-length`); `None`: the context.
    pub source_length: Option<u64>,
}

fn key_of(kind: &str) -> LineKey {
    match kind {
        "embeddings" => LineKey::WeightsEmbeddings,
        "attention" => LineKey::WeightsAttention,
        "mlp" => LineKey::WeightsMlp,
        "norms" => LineKey::WeightsNorms,
        "lm_head" => LineKey::WeightsLmHead,
        _ => LineKey::WeightsOther,
    }
}

fn format_of(kind: &str, f: &ModuleFormats) -> StorageFormat {
    match kind {
        "embeddings" | "lm_head" => f.vocab,
        "attention" => f.attention,
        "norms" => f.kept,
        _ => f.linear,
    }
}

/// The counted weights' lines, each matrix in its role's format (a quantised one with
/// its scales, matrix by matrix) and every vector in the kept format.
pub(super) fn weights(
    c: &Counted,
    input: &EstimateInput,
    split: &Split,
    b: &mut Builder,
) -> Result<(Option<u64>, Option<u64>), EstimateError> {
    let f = module_formats(input)?;
    let over = || EstimateError::Overflow {
        what: "counted weights",
    };
    // (key, parameters, bytes, formats)
    let mut rows: Vec<(LineKey, u64, u64, Vec<String>)> = Vec::new();
    let mut add = |key: LineKey, params: u64, bytes: u64, format: String| {
        match rows.iter_mut().find(|r| r.0 == key) {
            Some(r) => {
                r.1 = r.1.checked_add(params).ok_or_else(over)?;
                r.2 = r.2.checked_add(bytes).ok_or_else(over)?;
                if !r.3.contains(&format) {
                    r.3.push(format);
                }
            }
            None => rows.push((key, params, bytes, vec![format])),
        }
        Ok::<(), EstimateError>(())
    };
    let linear_only = super::weights::linear_only_loader(input, f.linear);
    let stored = super::weights::stored_formats(input)?;
    let outside: u64 = c
        .matrices
        .iter()
        .filter(|m| m.outside_linear)
        .try_fold(0u64, |n, m| {
            checked_product(&[m.banks, m.rows, m.cols], "counted parameters")
                .map(|p| n.saturating_add(p))
        })?;
    if linear_only && outside > 0 && super::weights::prequantised_gptq_awq(f.linear) {
        // See `weights::experts_left_dense`: the checkpoint's quantised keys for them
        // reach no parameter, which transformers initialises in the model's dtype.
        b.warnings.push(format!(
            "{} under transformers: {outside} parameters are held outside nn.Linear modules (an MoE's expert banks, convolutions), which its GPTQ/AWQ loader does not convert: the checkpoint's quantised keys for them fill nothing and transformers initialises them at random in {}, counted so; the model is not the checkpoint's (serve it with vLLM or SGLang)",
            f.linear.name(),
            f.kept.name()
        ));
    }
    for m in &c.matrices {
        let fmt = if m.outside_linear && linear_only {
            f.kept
        } else {
            format_of(&m.kind, &f)
        };
        // A compressed-tensors linear transformers decompressed keeps its scales.
        let was = format_of(&m.kind, &stored);
        let scales = super::weights::ct_scales_beside(input, was, fmt, m.rows, m.cols)?;
        let one = fmt
            .matrix_bytes(m.rows, m.cols)?
            .bytes
            .checked_add(scales)
            .ok_or_else(over)?;
        add(
            key_of(&m.kind),
            checked_product(&[m.banks, m.rows, m.cols], "counted parameters")?,
            checked_product(&[m.banks, one], "counted weights")?,
            if scales > 0 {
                format!("{} + {} scales", fmt.name(), was.name())
            } else {
                fmt.name()
            },
        )?;
    }
    for v in &c.vectors {
        let bytes = if v.elements == 0 {
            0
        } else {
            f.kept.matrix_bytes(1, v.elements)?.bytes
        };
        add(key_of(&v.kind), v.elements, bytes, f.kept.name())?;
    }
    if c.buffer_bytes > 0 {
        add(LineKey::WeightsOther, 0, c.buffer_bytes, "as kept".into())?;
    }
    for (key, params, bytes, formats) in rows {
        let device = match key {
            LineKey::WeightsAttention | LineKey::WeightsMlp => split.layered(bytes, true),
            LineKey::WeightsNorms => split.layered(bytes, false),
            _ => Split::part(bytes, 1, split.tp),
        };
        let what = key.as_str().strip_prefix("weights.").unwrap_or("other");
        let buffers = if key == LineKey::WeightsOther && c.buffer_bytes > 0 {
            format!(" and {} buffers ({} B)", c.buffers, c.buffer_bytes)
        } else {
            String::new()
        };
        b.line(
            key,
            format!("Weights: {what} (counted by {})", c.by),
            bytes,
            device,
            Kind::Traced,
            true,
            format!(
                "{params} parameters{buffers} read from the model's modules built on the meta device, stored as {}",
                formats.join(" + ")
            ),
            &[
                ("parameters", params.to_string()),
                ("format", formats.join(" + ")),
            ],
        );
    }
    if split.pp > 1 {
        b.assumptions.push(
            "counted weights: the layers are assumed to split evenly over the pipeline stages"
                .into(),
        );
    }
    // Active parameters per token depend on the routing: not counted.
    Ok((Some(c.parameters), None))
}

/// The counted cache's lines: after prefill (shown), at the end of generation, and the
/// layers' constant states.
pub(super) fn kv_cache(
    layers: &[CountedLayer],
    by: &str,
    input: &EstimateInput,
    context: u64,
    end: u64,
    split: &Split,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    if input.counted.as_ref().is_some_and(|c| c.encoder) {
        return encoder_no_cache(by, input, b);
    }
    let dtype = input.kv_dtype.unwrap_or(KvDtype::Dense {
        dtype: input.compute_dtype,
    });
    let over = || EstimateError::Overflow {
        what: "counted KV cache",
    };
    let at = |tokens: u64| -> Result<u64, EstimateError> {
        let mut total = 0u64;
        for l in layers {
            let shape = KvShape {
                layers: 1,
                values: l.kv_per_token,
                layout: KvLayout::Heads,
                dtype,
                sequences: input.sequences,
                sliding_window: l.window,
                sliding_layers: None,
                static_tokens: input.static_cache,
                full_values: None,
            };
            let fixed = match dtype {
                KvDtype::Dense { dtype } => {
                    checked_product(&[l.kv_fixed, dtype.bytes(), input.sequences], "KV bytes")?
                }
                // A fixed part beside a quantised cache: kept unquantised (at most).
                KvDtype::Quantised { residual_dtype, .. } => checked_product(
                    &[l.kv_fixed, residual_dtype.bytes(), input.sequences],
                    "KV bytes",
                )?,
            };
            let other = checked_product(
                &[
                    l.other_per_token_bytes,
                    input.static_cache.unwrap_or(tokens),
                    input.sequences,
                ],
                "KV bytes",
            )?;
            total = total
                .checked_add(shape.bytes(tokens)?)
                .and_then(|t| t.checked_add(fixed))
                .and_then(|t| t.checked_add(other))
                .ok_or_else(over)?;
        }
        Ok(total)
    };
    let windows: Vec<u64> = layers.iter().filter_map(|l| l.window).collect();
    let per_value = match dtype {
        KvDtype::Dense { dtype } => format!("{} B per value", dtype.bytes()),
        KvDtype::Quantised { bits, group, .. } => {
            format!("{bits} bits + scales per {group} values")
        }
    };
    let others = layers
        .iter()
        .filter(|l| l.other_per_token_bytes > 0)
        .count();
    let shape = format!(
        "{} layers as the model's own cache holds them after a forward of 1 and 2 tokens{}, {per_value} × sequences{}",
        layers.len(),
        match windows.iter().max() {
            None => String::new(),
            Some(w) => format!(
                ", {} of them at most {w} tokens (read past their window)",
                windows.len()
            ),
        },
        if others > 0 {
            format!(
                "; {others} layers' other tensors that grow with the tokens (an indexer's keys) as the model keeps them"
            )
        } else {
            String::new()
        }
    );
    let inputs = [
        ("layers", layers.len().to_string()),
        ("sequences", input.sequences.to_string()),
    ];
    // Heads split over tensor parallelism is not known from the count: every device
    // is given the whole layer's cache (never less than it holds).
    let prefill = at(context)?;
    b.line(
        LineKey::KvCachePrefill,
        format!("KV cache after prefill (shown, not added; counted by {by})"),
        prefill,
        split.layered(prefill, false),
        Kind::Traced,
        false,
        format!("{shape}, {context} tokens"),
        &inputs,
    );
    let generation = at(end)?;
    b.line(
        LineKey::KvCache,
        format!("KV cache at the end of generation (counted by {by})"),
        generation,
        split.layered(generation, false),
        Kind::Traced,
        true,
        format!("{shape}, {end} tokens"),
        &inputs,
    );
    let state_layers = layers.iter().filter(|l| l.state_bytes > 0).count();
    if state_layers > 0 {
        let per_seq = layers
            .iter()
            .try_fold(0u64, |a, l| a.checked_add(l.state_bytes))
            .ok_or_else(over)?;
        let bytes = checked_product(&[per_seq, input.sequences], "recurrent state")?;
        b.line(
            LineKey::KvCacheState,
            format!("Recurrent state of state-space / linear-attention layers (counted by {by})"),
            bytes,
            split.layered(bytes, true),
            Kind::Traced,
            true,
            format!(
                "{state_layers} layers' states as the model's own cache holds them × sequences (constant in tokens)"
            ),
            &inputs,
        );
    }
    if let Some(x) = input.counted.as_ref().and_then(|c| c.cross) {
        cross_lines(&x, by, input, context, dtype, split, b)?;
    }
    if split.tp > 1 {
        b.assumptions.push(
            "counted KV cache: each tensor-parallel rank is given every layer's whole cache (the count does not split heads)"
                .into(),
        );
    }
    Ok(())
}

/// The counted cache's lines where it was measured at the lengths needed (not per
/// token): the prompt's and the end of generation's, each the model's own cache after
/// one forward of that many tokens × sequences. A length the count did not measure, or
/// a quantised KV dtype (the count cannot say which tensors it quantises), is refused.
pub(super) fn kv_measured(
    measured: &[CountedMeasured],
    by: &str,
    input: &EstimateInput,
    context: u64,
    end: u64,
    split: &Split,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    let dtype = match input.kv_dtype {
        None => input.compute_dtype,
        Some(KvDtype::Dense { dtype }) => dtype,
        Some(KvDtype::Quantised { .. }) => {
            return Err(EstimateError::invalid(
                "kv-dtype",
                "this model's cache was measured by its own code at the lengths asked, not per token; a quantised KV cache of it is not modelled (give a dense kv-dtype)",
            ));
        }
    };
    if input.static_cache.is_some() {
        return Err(EstimateError::invalid(
            "static-cache",
            "this model's cache was measured by its own code at the lengths asked, not per token, so a cache preallocated to another length is not derived",
        ));
    }
    let at = |tokens: u64| -> Result<u64, EstimateError> {
        let m = measured.iter().find(|m| m.tokens == tokens).ok_or_else(|| {
            EstimateError::invalid(
                "context",
                format!(
                "this model's cache does not grow by the same bytes each token and was measured at {} tokens only, not {tokens} (it is not extrapolated)",
                measured
                    .iter()
                    .map(|m| m.tokens.to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
            )
        })?;
        let kv = checked_product(&[m.kv_elements, dtype.bytes()], "KV bytes")?;
        let one = kv
            .checked_add(m.other_bytes)
            .ok_or(EstimateError::Overflow {
                what: "counted KV cache",
            })?;
        checked_product(&[one, input.sequences], "KV bytes")
    };
    let inputs = [("sequences", input.sequences.to_string())];
    let how = |tokens: u64| {
        format!(
            "measured at {tokens} tokens by the model's own cache (one forward on the meta device; not per token: it compresses or selects its tokens), keys and values at {} B per value, its other tensors as the model keeps them, × sequences (linear in the batch: checked)",
            dtype.bytes()
        )
    };
    let prefill = at(context)?;
    b.line(
        LineKey::KvCachePrefill,
        format!("KV cache after prefill (shown, not added; counted by {by})"),
        prefill,
        split.layered(prefill, false),
        Kind::Traced,
        false,
        how(context),
        &inputs,
    );
    // A compressed cache can hold less after more tokens (a block of buffered tokens
    // compressed into one entry): the line in the total is never below the prompt's.
    let at_end = at(end)?;
    let generation = at_end.max(prefill);
    b.line(
        LineKey::KvCache,
        format!("KV cache at the end of generation (counted by {by})"),
        generation,
        split.layered(generation, false),
        Kind::Traced,
        true,
        if at_end < prefill {
            format!(
                "{}; less than after the prompt ({context} tokens: its buffered tokens compressed), so the prompt's is kept",
                how(end)
            )
        } else {
            how(end)
        },
        &inputs,
    );
    if end > context {
        b.warnings.push(format!(
            "counted KV cache measured at {context} and {end} tokens only: between them a compressed cache's buffers may hold up to a block of tokens more than at either (not measured)"
        ));
    }
    let lengths = if context == end {
        context.to_string()
    } else {
        format!("{context} and {end}")
    };
    b.assumptions.push(format!(
        "counted KV cache measured at {lengths} tokens by {by}, not per token: figures that need bytes per token (an engine's pool of blocks) are not derived from it"
    ));
    if split.tp > 1 {
        b.assumptions.push(
            "counted KV cache: each tensor-parallel rank is given every layer's whole cache (the count does not split heads)"
                .into(),
        );
    }
    Ok(())
}

/// A counted encoder's cache: none (the bare model's forward reads the whole input at
/// once and returns no cache; BertModel and kin cache only as a decoder).
fn encoder_no_cache(by: &str, input: &EstimateInput, b: &mut Builder) -> Result<(), EstimateError> {
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
    b.line(
        LineKey::KvCache,
        format!("KV cache: none (an encoder keeps no KV cache; counted by {by})"),
        0,
        0,
        Kind::Traced,
        true,
        "the bare model (AutoModel) returns no cache from its forward".into(),
        &[],
    );
    b.assumptions
        .push("an encoder keeps no KV cache: kv_cache_bytes is 0".into());
    Ok(())
}

/// A counted encoder-decoder's cross-attention cache over the encoder's length and the
/// encoder's output generate keeps, beside the decoder's self-attention cache
/// (transformers 5.23, `generation/utils.py`: the encoder runs once and
/// `model_kwargs["encoder_outputs"]` stays to the end; `cache_utils.py`,
/// `EncoderDecoderCache`: the cross-attention layers written at the first step).
fn cross_lines(
    x: &CountedCross,
    by: &str,
    input: &EstimateInput,
    context: u64,
    dtype: KvDtype,
    split: &Split,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    let length = x.source_length.unwrap_or(context);
    let shape = KvShape {
        layers: 1,
        values: x.per_source_token,
        layout: KvLayout::Heads,
        dtype,
        sequences: input.sequences,
        sliding_window: None,
        sliding_layers: None,
        static_tokens: None,
        full_values: None,
    };
    let bytes = shape.bytes(length)?;
    b.line(
        LineKey::KvCacheCross,
        format!("Cross-attention cache over the encoder's output (counted by {by})"),
        bytes,
        split.layered(bytes, false),
        Kind::Traced,
        true,
        format!(
            "{} decoder layers' K and V as the model's own cache holds them per encoder position × encoder length × sequences (written once)",
            x.layers
        ),
        &[
            ("layers", x.layers.to_string()),
            ("values per encoder position", x.per_source_token.to_string()),
            ("encoder length", length.to_string()),
            ("sequences", input.sequences.to_string()),
        ],
    );
    super::kv::encoder_output(
        input,
        length,
        x.hidden,
        format!("Encoder output, kept through generation (counted by {by})"),
        Kind::Traced,
        b,
    )?;
    if x.source_length.is_none() {
        b.warnings.push(format!(
            "encoder-decoder: no encoder length given, so the source is taken as the context's {length} tokens; the cross-attention cache and the encoder output grow with the source: give encoder-length (the longest source in tokens)"
        ));
    }
    b.assumptions.push(format!(
        "encoder-decoder: the encoder reads {length} positions; the decoder's self-attention cache holds the context (its prompt) and the generated tokens, the cross-attention cache does not grow"
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counted model of 1 000 parameters in one matrix, its cache `cache`.
    fn counted(cache: Vec<CountedLayer>, encoder: bool, cross: Option<CountedCross>) -> Counted {
        Counted {
            by: "transformers 5.23.0".into(),
            parameters: 1000,
            matrices: vec![CountedMatrices {
                kind: "attention".into(),
                banks: 1,
                rows: 10,
                cols: 100,
                outside_linear: false,
            }],
            vectors: Vec::new(),
            buffer_bytes: 0,
            buffers: 0,
            cache: Some(cache),
            encoder,
            cross,
            measured: None,
        }
    }

    fn bytes(e: &Estimate, key: LineKey) -> Option<u64> {
        e.lines.iter().find(|l| l.key == key).map(|l| l.bytes)
    }

    #[test]
    fn a_measured_cache_holds_at_its_lengths_only() {
        let mut c = counted(Vec::new(), false, None);
        c.cache = None;
        c.measured = Some(vec![
            CountedMeasured {
                tokens: 100,
                kv_elements: 1000,
                other_bytes: 300,
            },
            CountedMeasured {
                tokens: 110,
                kv_elements: 1000,
                other_bytes: 340,
            },
        ]);
        let input = EstimateInput {
            counted: Some(c),
            context: Some(100),
            generate: 10,
            sequences: 3,
            kv_dtype: Some(KvDtype::Dense { dtype: Dtype::Bf16 }),
            ..EstimateInput::default()
        };
        let e = estimate(&input).unwrap();
        assert_eq!(bytes(&e, LineKey::KvCachePrefill), Some((2000 + 300) * 3));
        assert_eq!(bytes(&e, LineKey::KvCache), Some((2000 + 340) * 3));
        // Less after the generated tokens than after the prompt: the prompt's is kept.
        let mut shrinking = input.clone();
        if let Some(m) = shrinking.counted.as_mut().and_then(|c| c.measured.as_mut()) {
            m[1].other_bytes = 100;
        }
        let e2 = estimate(&shrinking).unwrap();
        assert_eq!(bytes(&e2, LineKey::KvCache), Some((2000 + 300) * 3));
        let line = e.lines.iter().find(|l| l.key == LineKey::KvCache).unwrap();
        assert_eq!(line.kind, Kind::Traced);
        assert!(
            line.formula.contains("measured at 110 tokens"),
            "{}",
            line.formula
        );
        // Another length is refused, not extrapolated.
        let other = EstimateInput {
            context: Some(200),
            ..input.clone()
        };
        let why = estimate(&other).unwrap_err().to_string();
        assert!(why.contains("not extrapolated"), "{why}");
        // A quantised KV cache of it is refused.
        let quantised = EstimateInput {
            kv_dtype: Some(KvDtype::Quantised {
                bits: 4,
                group: 64,
                residual: 128,
                residual_dtype: Dtype::Bf16,
            }),
            ..input
        };
        assert!(estimate(&quantised).is_err());
    }

    /// In nf4 under transformers a bank held outside an `nn.Linear` (an MoE's experts)
    /// stays in the model's dtype, 100 × 64 × 64 × 2 B, beside the quantised linear;
    /// under a serving engine's runtime every bank is quantised.
    #[test]
    fn a_bank_outside_a_linear_keeps_the_models_dtype_under_bitsandbytes() {
        let mut c = counted(Vec::new(), false, None);
        c.parameters = 101 * 64 * 64;
        c.matrices = vec![
            CountedMatrices {
                kind: "mlp".into(),
                banks: 100,
                rows: 64,
                cols: 64,
                outside_linear: true,
            },
            CountedMatrices {
                kind: "mlp".into(),
                banks: 1,
                rows: 64,
                cols: 64,
                outside_linear: false,
            },
        ];
        let nf4 = StorageFormat::parse("format", "nf4").unwrap();
        let linear = nf4.matrix_bytes(64, 64).unwrap().bytes;
        let input = EstimateInput {
            counted: Some(c),
            context: Some(16),
            format: Some(nf4),
            ..EstimateInput::default()
        };
        assert_eq!(input.runtime(), CacheRuntime::Transformers);
        let e = estimate(&input).unwrap();
        assert_eq!(
            bytes(&e, LineKey::WeightsMlp),
            Some(100 * 64 * 64 * 2 + linear)
        );
        let served = EstimateInput {
            runtime: CacheRuntime::Serving,
            ..input
        };
        let e = estimate(&served).unwrap();
        assert_eq!(bytes(&e, LineKey::WeightsMlp), Some(101 * linear));
        // A pre-quantised GPTQ checkpoint's banks are not loaded: 16-bit, and said.
        let gptq = StorageFormat::parse("format", "gptq-4-g128").unwrap();
        let linear = gptq.matrix_bytes(64, 64).unwrap().bytes;
        let e = estimate(&EstimateInput {
            format: Some(gptq),
            runtime: CacheRuntime::Transformers,
            ..served
        })
        .unwrap();
        assert_eq!(
            bytes(&e, LineKey::WeightsMlp),
            Some(100 * 64 * 64 * 2 + linear)
        );
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("409600 parameters are held outside nn.Linear")),
            "{:?}",
            e.warnings
        );
    }

    #[test]
    fn a_counted_encoder_keeps_no_cache_and_generates_nothing() {
        let input = EstimateInput {
            counted: Some(counted(Vec::new(), true, None)),
            context: Some(512),
            sequences: 8,
            ..EstimateInput::default()
        };
        let e = estimate(&input).unwrap();
        assert_eq!((e.parameters, e.kv_cache_bytes), (Some(1000), 0));
        let generating = EstimateInput {
            generate: 4,
            ..input.clone()
        };
        assert!(estimate(&generating).is_err());
        let training = EstimateInput {
            train: TrainMode::Full,
            ..input
        };
        assert!(estimate(&training).is_err());
    }

    #[test]
    fn a_counted_encoder_decoder_has_its_cross_attention_cache_and_encoder_output() {
        // Two decoder layers of 4 heads × 8 wide: 64 K and V values a token each.
        let layer = CountedLayer {
            kv_per_token: 64,
            kv_fixed: 0,
            state_bytes: 0,
            window: None,
            other_per_token_bytes: 0,
        };
        let cross = CountedCross {
            per_source_token: 128,
            hidden: 32,
            layers: 2,
            source_length: Some(300),
        };
        let input = EstimateInput {
            counted: Some(counted(vec![layer; 2], false, Some(cross))),
            context: Some(10),
            generate: 6,
            sequences: 3,
            kv_dtype: Some(KvDtype::Dense { dtype: Dtype::Bf16 }),
            ..EstimateInput::default()
        };
        let e = estimate(&input).unwrap();
        // Self-attention: 2 layers × 64 values × 16 tokens × 2 B × 3 sequences.
        assert_eq!(bytes(&e, LineKey::KvCache), Some(2 * 64 * 16 * 2 * 3));
        // Cross-attention over the 300 positions, written once.
        assert_eq!(bytes(&e, LineKey::KvCacheCross), Some(128 * 300 * 2 * 3));
        // The encoder's output, 32 values a position in bf16.
        assert_eq!(
            bytes(&e, LineKey::KvCacheEncoderOutput),
            Some(3 * 300 * 32 * 2)
        );
        assert_eq!(
            e.kv_cache_bytes,
            2 * 64 * 16 * 2 * 3 + 128 * 300 * 2 * 3 + 3 * 300 * 32 * 2
        );
        assert!(
            !e.warnings
                .iter()
                .any(|w| w.contains("no encoder length given"))
        );
        // No source length given: the context's, with a warning.
        let mut no_length = input.clone();
        if let Some(c) = no_length.counted.as_mut().and_then(|c| c.cross.as_mut()) {
            c.source_length = None;
        }
        let e = estimate(&no_length).unwrap();
        assert_eq!(bytes(&e, LineKey::KvCacheCross), Some(128 * 10 * 2 * 3));
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("no encoder length given"))
        );
        // Tensor parallelism and training are refused, as for the reader's.
        for bad in [
            EstimateInput {
                tp: 2,
                gpus: 2,
                ..input.clone()
            },
            EstimateInput {
                train: TrainMode::Full,
                ..input
            },
        ] {
            assert!(estimate(&bad).is_err());
        }
    }
}
