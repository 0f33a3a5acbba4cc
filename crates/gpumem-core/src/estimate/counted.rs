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
    /// The cache per layer; `None`: the reader's KV lines stand.
    pub cache: Option<Vec<CountedLayer>>,
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
    for m in &c.matrices {
        let fmt = format_of(&m.kind, &f);
        let one = fmt.matrix_bytes(m.rows, m.cols)?.bytes;
        add(
            key_of(&m.kind),
            checked_product(&[m.banks, m.rows, m.cols], "counted parameters")?,
            checked_product(&[m.banks, one], "counted weights")?,
            fmt.name(),
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
    if split.tp > 1 {
        b.assumptions.push(
            "counted KV cache: each tensor-parallel rank is given every layer's whole cache (the count does not split heads)"
                .into(),
        );
    }
    Ok(())
}
