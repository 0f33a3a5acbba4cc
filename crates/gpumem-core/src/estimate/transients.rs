//! The transients' lines: CUDA context, and the prefill's peak beyond weights and
//! KV cache: intermediates, eager attention's tokens² tensors and logits, derived
//! moment by moment for transformers' Llama-style decoder and Gemma 2's and 3's
//! ([`crate::training::decoder_prefill`]), else assumed and summed (an upper bound).

use super::*;

/// The CUDA context's line, where its size is given (every estimate, training or not).
pub(super) fn cuda_context(input: &EstimateInput, b: &mut Builder) -> Result<(), EstimateError> {
    if let Some(mib) = input.cuda_context_mib {
        let bytes = checked_product(&[mib, MIB], "CUDA context")?;
        b.line(
            LineKey::CudaContext,
            "CUDA context and library workspaces, per device (assumed; outside any allocator)",
            bytes,
            bytes,
            Kind::Assumed,
            true,
            "cuda-context-mib × 2^20 (the agent measures it on your device)".into(),
            &[("cuda-context-mib", mib.to_string())],
        );
    }
    Ok(())
}

/// The prefill's peak beyond weights and KV cache (inference only: a training step's
/// activations are the training stages').
pub(super) fn prefill(
    input: &EstimateInput,
    split: &Split,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    if input.train != TrainMode::None {
        return Ok(());
    }
    let (Some(a), Some(tokens)) = (input.arch, input.context) else {
        return Ok(());
    };
    let value = input.compute_dtype.bytes();
    if a.encoder {
        return encoder_forward(input, &a, tokens, value, split, b);
    }
    if a.encdec_params > 0 {
        // The encoder's forward over its length and each decoder step's are not
        // derived: no decoder-only figure stands in for them.
        b.warnings.push(
            "this encoder-decoder's forward activations (the encoder's pass over its length, each decoder step's intermediates and logits) are not counted: add them to --reserve-gib".into(),
        );
        return Ok(());
    }
    let all = input.logits == Logits::All;
    // Beam search: transformers 5.23's `generate` repeat_interleaves the prompt by
    // `num_beams` before the first forward (`_expand_inputs_for_generation`), so the
    // prefill runs over sequences × beams rows; "sequences" below counts those rows.
    let rows = checked_product(&[input.sequences, input.beams], "sequences × beams")?;
    if input.beams > 1 {
        b.assumptions.push(format!(
            "beam search: the prefill's transients are for {} sequences × {} beams = {rows} rows (the prompt is expanded before the first forward)",
            input.sequences, input.beams
        ));
    }
    let derived = decoder_prefill(
        &a,
        tokens,
        rows,
        value,
        input.attention,
        input.sliding_window,
        all,
    )?;
    let inputs = [
        ("sequences", rows.to_string()),
        ("tokens", tokens.to_string()),
        ("attention", input.attention.name().into()),
        ("logits", input.logits.name().into()),
    ];
    let Some(why) = derived.assumed_because else {
        // The peak, derived moment by moment: each line is what is alive at that one
        // moment, so their sum is the prefill's peak beyond weights and KV cache.
        let p = derived;
        let lines = [
            (
                LineKey::PrefillMlp,
                format!("Prefill intermediates at its peak ({})", p.moment),
                p.intermediates,
                p.formula,
            ),
            (
                LineKey::PrefillAttentionScores,
                "Attention mask and scores (tokens²) at the prefill's peak".into(),
                p.scores,
                match p.attention {
                    AttentionImpl::Eager if input.attention != AttentionImpl::Eager => format!(
                        "{} asked runs eager here (transformers refuses it for this model): masks sequences × tokens² × v, and at the attention's moment (v + 8) × sequences × heads × tokens² (the scores with the mask added, softmax's fp32 input and output), at the MLP's v × sequences × heads × tokens² (the probabilities the decoder layer holds); peak: {}",
                        input.attention.name(),
                        p.moment
                    ),
                    AttentionImpl::Eager => format!(
                        "eager: mask sequences × tokens² × v (two masks where the model builds a full and a sliding one: Gemma, Qwen2-MoE), and at the attention's moment (v + 8) × sequences × heads × tokens² (the scores with the mask added, softmax's fp32 input and output), at the MLP's v × sequences × heads × tokens² (the probabilities the decoder layer holds); peak: {}",
                        p.moment
                    ),
                    other if p.scores > 0 => format!(
                        "{}: a sliding window no longer than the prompt needs a boolean mask, tokens² × 1 B; the fused kernel keeps no tokens² matrix",
                        other.name()
                    ),
                    other => format!("{}: fused kernel, no tokens² matrix is kept", other.name()),
                },
            ),
            (
                LineKey::PrefillLogits,
                "Logits at the prefill's peak".into(),
                p.logits,
                if p.logits == 0 {
                    format!(
                        "none: the peak is {}; the kept logits and generate()'s fp32 copy of the last position come after it, below it",
                        p.moment
                    )
                } else {
                    format!(
                        "{}: sequences × {} × vocab × v, then generate()'s fp32 copy of the last position",
                        p.moment,
                        if all {
                            "tokens"
                        } else {
                            "1 (logits_to_keep=1)"
                        }
                    )
                },
            ),
        ];
        for (key, label, bytes, formula) in lines {
            b.line(
                key,
                label,
                bytes,
                Split::part(bytes, 1, split.tp),
                Kind::Computed,
                true,
                formula,
                &inputs,
            );
        }
        return quantized_matmul(input, &a, rows, tokens, value, split, b);
    };
    let (inter, live) = match a.moe {
        Some(m) => (
            checked_product(&[m.expert_intermediate, m.active], "MLP intermediate")?,
            if a.gated_mlp { 3 } else { 2 },
        ),
        None => (a.intermediate, if a.gated_mlp { 3 } else { 2 }),
    };
    let mlp = checked_product(&[live, rows, tokens, inter, value], "MLP intermediate")?;
    // A mixture of experts outside the derivation: never below the grouped_mm experts'
    // moment derived for Mixtral's block (`decoder_prefill`), which transformers runs
    // for every routed MoE (DeepSeek's traced prefill peaks there).
    let mlp = if a.moe.is_some() {
        mlp.max(derived.intermediates)
    } else {
        mlp
    };
    b.line(
        LineKey::PrefillMlp,
        "Prefill MLP intermediates (assumed)",
        mlp,
        Split::part(mlp, 1, split.tp),
        Kind::Assumed,
        true,
        format!(
            "{live} live tensors × sequences × tokens × intermediate × {value} B{} (assumed: {why}; `estimate --trace` traces it)",
            if a.moe.is_some() {
                ", or if higher the routed experts' grouped_mm moment over tokens × k pairs as derived for Mixtral's block"
            } else {
                ""
            }
        ),
        &[
            ("sequences", rows.to_string()),
            ("tokens", tokens.to_string()),
            ("intermediate", inter.to_string()),
        ],
    );
    let scores = match input.attention {
        AttentionImpl::Eager => checked_product(
            &[2, rows, a.heads, tokens, tokens, value],
            "attention scores",
        )?,
        _ => 0,
    };
    // Likewise never below the tokens² tensors at the peak `decoder_prefill` bounds
    // (DeepSeek's latent attention under eager).
    let scores = if a.moe.is_some() {
        scores.max(derived.scores)
    } else {
        scores
    };
    b.line(
        LineKey::PrefillAttentionScores,
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
    let logits = checked_product(&[rows, kept, a.vocab, 4], "logits")?;
    b.line(
        LineKey::PrefillLogits,
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
    b.assumptions.push(format!(
        "prefill transients not derived ({why}): the MLP's intermediates, the scores and the logits summed, without the hidden states a trace shows beside them, so neither the peak nor a bound on it (`estimate --trace` traces them)"
    ));
    quantized_matmul(input, &a, rows, tokens, value, split, b)
}

/// What bitsandbytes' kernels add while a quantised linear runs over the prompt
/// (transformers' `Linear4bit` and `Linear8bitLt`, bitsandbytes 0.46.0
/// `autograd/_functions.py`), beyond the 16-bit linear's output the lines above count:
/// - 4-bit (`matmul_4bit`): for more than one token `MatMul4Bit.forward` runs
///   `linear(A, dequantize_4bit(B).to(A.dtype).t())`, the whole weight dequantised in
///   the compute dtype while it runs (one token takes `gemv_4bit`, no copy);
/// - LLM.int8 (`MatMul8bitLt.forward`, `backends/default/ops.py` `int8_scaled_mm`):
///   the input quantised to int8 (a byte a value) and the int32 accumulator (four
///   bytes an output) beside the output.
///
/// Counted at the widest of a layer's linears (the attention's projections, the
/// MLP's) and added to the prefill's peak: an upper bound on what the linear running
/// at the peak holds (assumed). The lm_head stays 16-bit (transformers leaves the
/// output embedding unquantised) and is not among them.
fn quantized_matmul(
    input: &EstimateInput,
    a: &Architecture,
    rows: u64,
    tokens: u64,
    value: u64,
    split: &Split,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    let q = checked_product(&[a.heads, a.head_dim], "query width")?;
    // Where bitsandbytes leaves the routed experts in the model's dtype
    // (`weights::experts_left_dense`) the widest quantised MLP linear is a dense
    // layer's or a shared expert's.
    let linear = super::weights::module_formats(input)?.linear;
    let inter = match a.moe {
        Some(m) if super::weights::experts_left_dense(input, linear) => {
            let dense = if m.dense_layers > 0 || m.every > 1 {
                a.intermediate
            } else {
                0
            };
            let shared = if m.shared_experts > 0 {
                m.shared_intermediate
            } else {
                0
            };
            dense.max(shared)
        }
        Some(m) => m.expert_intermediate.max(a.intermediate),
        None => a.intermediate,
    };
    let (bytes, formula) = match input.format {
        Some(StorageFormat::Bnb4 { .. }) => {
            let widest = [inter, q]
                .into_iter()
                .map(|n| n.saturating_mul(a.hidden))
                .max()
                .unwrap_or(0);
            (
                checked_product(&[widest, value], "dequantised weight")?,
                format!(
                    "bitsandbytes 4-bit: the widest linear ({widest} weights) dequantised to {value} B values while it runs over the prompt (MatMul4Bit.forward; assumed: at most that at the peak)"
                ),
            )
        }
        Some(StorageFormat::Int8) => {
            // bitsandbytes ≥ 0.46.1 (transformers 5.23's `BITSANDBYTES_MIN_VERSION`),
            // `MatMul8bitLt.forward` under `no_grad`: the input's fp16 copy (none in
            // fp16), its int8 rows, fp32 row scales and the outlier search's fp16 and
            // bool copies (`int8_vectorwise_quant`); then the int8 rows and scales
            // beside the int32 product and its fp16 dequantisation, cast to the
            // model's dtype (`int8_scaled_mm`, `int8_mm_dequant`): the cast is the
            // output the prefill counts.
            let h = a.hidden;
            let per_value = if input.compute_dtype == crate::format::Dtype::F16 {
                4
            } else {
                6
            };
            let per_row = [(h, inter), (inter, h), (h, q)]
                .into_iter()
                .map(|(width_in, out)| {
                    let quantise = width_in.saturating_mul(per_value).saturating_add(4);
                    let product = width_in
                        .saturating_add(4)
                        .saturating_add(out.saturating_mul(per_value));
                    quantise.max(product)
                })
                .max()
                .unwrap_or(0);
            (
                checked_product(&[rows, tokens, per_row], "int8 accumulator")?,
                format!(
                    "LLM.int8: the widest linear's quantised input (int8 rows, fp32 scales, the outlier search's copies) and its int32 product with the fp16 dequantisation, sequences × tokens × {per_row} B = {rows} × {tokens} × {per_row} (bitsandbytes MatMul8bitLt.forward; assumed: at most that at the peak, outlier columns not counted)"
                ),
            )
        }
        _ => return Ok(()),
    };
    b.line(
        LineKey::PrefillQuantizedMatmul,
        "Quantised linear's kernel at the prefill's peak (assumed)",
        bytes,
        Split::part(bytes, 1, split.tp),
        Kind::Assumed,
        true,
        formula,
        &[("format", input.format.map(|f| f.name()).unwrap_or_default())],
    );
    Ok(())
}

/// An encoder's forward at its peak, beyond the weights (no KV cache, no logits),
/// derived for BERT-style encoders (a plain MLP, learned positions: BERT, RoBERTa,
/// XLM-R) from transformers 5.23's modeling_bert.py under `torch.no_grad()`, every
/// tensor freed with its last reference:
/// - `BertModel.forward` keeps `embedding_output` for the whole encoder, and from the
///   second layer on `BertEncoder.forward` holds the layer's input beside it;
/// - the MLP's moment (`BertIntermediate`): the attention's output, the dense's
///   output and GELU's, T × (h + 2 · intermediate) values;
/// - the attention's moment (`BertSelfAttention`): q, k, v and, under eager
///   (`eager_attention_forward`: `matmul(q, kᵀ) * scaling`, then softmax), two
///   sequences × heads × tokens² score matrices; under sdpa the fused kernel's output
///   instead (no score matrix); under eager the probabilities (one such matrix)
///   outlive the attention: `BertLayer.forward` holds them through the MLP;
/// - a padded batch's mask (`masking_utils.create_bidirectional_mask`), held through
///   the encoder: sequences × tokens² × v under eager (its float mask), × 1 B under
///   sdpa (its boolean mask). An unpadded batch builds none; it is counted, so the
///   figure is never below a padded batch's.
///
/// Checked against the trace (`agent/python/gpumem_trace.py`'s tracker) of
/// transformers' own BertModel, RobertaModel and XLMRobertaModel on the meta device
/// (`tests/cases/families/bert.py`). Other encoders (ModernBERT: rotary positions, a
/// gated MLP, local-attention masks) are not derived: a warning says their
/// activations are not counted.
fn encoder_forward(
    input: &EstimateInput,
    a: &crate::arch::Architecture,
    tokens: u64,
    value: u64,
    split: &Split,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    if a.gated_mlp || a.learned_positions == 0 || a.moe.is_some() || a.mixer.is_some() {
        b.warnings.push(
            "this encoder's forward activations are not counted: they are derived for BERT-style encoders (BERT, RoBERTa, XLM-R) only, not for rotary positions, a gated MLP or local-attention masks (ModernBERT): add them to --reserve-gib".into(),
        );
        return Ok(());
    }
    let seqs = input.sequences;
    let rows = checked_product(&[seqs, tokens], "encoder activations")?;
    let per = |width: u64| checked_product(&[rows, width, value], "encoder activations");
    let kept_states: u64 = if a.layers >= 2 { 2 } else { 1 };
    let q_width = checked_product(&[a.heads, a.head_dim], "encoder activations")?;
    let kept = per(checked_product(
        &[kept_states, a.hidden],
        "encoder activations",
    )?)?;
    let mlp = per(a
        .hidden
        .checked_add(checked_product(
            &[2, a.intermediate],
            "encoder activations",
        )?)
        .ok_or(EstimateError::Overflow {
            what: "encoder activations",
        })?)?;
    let eager = input.attention == AttentionImpl::Eager;
    let qkv = per(checked_product(&[3, q_width], "encoder activations")?)?;
    // Eager: one sequences × heads × tokens² matrix of probabilities, held past the
    // attention by `BertLayer.forward` (`self_attention_output, _ = self.attention(…)`:
    // `_` keeps softmax's output until the layer returns); two at the attention's
    // moment (`matmul(q, kᵀ)` and its scaled copy, then softmax's output).
    let probs = if eager {
        checked_product(&[seqs, a.heads, tokens, tokens, value], "attention scores")?
    } else {
        0
    };
    let (scores, fused_out) = if eager {
        (checked_product(&[2, probs], "attention scores")?, 0)
    } else {
        (0, per(q_width)?)
    };
    let attention = [qkv, scores, fused_out]
        .iter()
        .try_fold(0u64, |s, x| s.checked_add(*x))
        .ok_or(EstimateError::Overflow {
            what: "encoder activations",
        })?;
    let mask = checked_product(
        &[seqs, tokens, tokens, if eager { value } else { 1 }],
        "attention mask",
    )?;
    let mlp_moment = mlp.checked_add(probs).ok_or(EstimateError::Overflow {
        what: "encoder activations",
    })?;
    let (moment, intermediates, at_scores) = if attention > mlp_moment {
        ("the attention", attention.saturating_sub(scores), scores)
    } else {
        ("the MLP", mlp, probs)
    };
    let intermediates = intermediates
        .checked_add(kept)
        .ok_or(EstimateError::Overflow {
            what: "encoder activations",
        })?;
    let at_scores = at_scores.checked_add(mask).ok_or(EstimateError::Overflow {
        what: "encoder activations",
    })?;
    let kind = match input.attention {
        AttentionImpl::Eager | AttentionImpl::Sdpa => Kind::Computed,
        // Flash and the memory-efficient kernel called directly unpad a padded batch
        // (copies of q, k, v): sdpa's figure is assumed.
        AttentionImpl::Flash | AttentionImpl::Efficient => Kind::Assumed,
    };
    let inputs = [
        ("sequences", seqs.to_string()),
        ("tokens", tokens.to_string()),
        ("attention", input.attention.name().into()),
    ];
    b.line(
        LineKey::PrefillMlp,
        format!("Encoder forward at its peak ({moment}'s moment)"),
        intermediates,
        Split::part(intermediates, 1, split.tp),
        kind,
        true,
        format!(
            "sequences × tokens × v × ({kept_states} kept hidden states + {}); peak at {moment} (the other: {} B)",
            if attention > mlp_moment {
                if eager { "q, k, v" } else { "q, k, v and the fused kernel's output" }
            } else {
                "the attention's output, the intermediate dense's and GELU's outputs"
            },
            if attention > mlp_moment { mlp_moment } else { attention }
        ),
        &inputs,
    );
    b.line(
        LineKey::PrefillAttentionScores,
        "Attention mask of a padded batch and scores (tokens²)",
        at_scores,
        Split::part(at_scores, 1, split.tp),
        kind,
        true,
        if eager {
            format!(
                "eager: the padded batch's float mask, sequences × tokens² × v, held through the encoder, and {}",
                if at_scores > probs.saturating_add(mask) {
                    "at the attention's moment two sequences × heads × tokens² × v score matrices (matmul(q, kᵀ) and its scaled copy, then softmax's output)"
                } else {
                    "at the MLP's moment the attention's probabilities, sequences × heads × tokens² × v, which the layer holds until it returns"
                }
            )
        } else {
            format!("{}: the padded batch's boolean mask, sequences × tokens² × 1 B; the fused kernel keeps no tokens² matrix", input.attention.name())
        },
        &inputs,
    );
    Ok(())
}
