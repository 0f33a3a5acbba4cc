//! The transients' lines: CUDA context, and the prefill's peak beyond weights and
//! KV cache: intermediates, eager attention's tokens² tensors and logits, derived
//! moment by moment for transformers' Llama-style decoder
//! ([`crate::training::decoder_prefill`]), else assumed and summed (an upper bound).

use super::*;

pub(super) fn transients(
    input: &EstimateInput,
    split: &Split,
    b: &mut Builder,
) -> Result<(), EstimateError> {
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
    if input.train != TrainMode::None {
        return Ok(());
    }
    let (Some(a), Some(tokens)) = (input.arch, input.context) else {
        return Ok(());
    };
    let value = input.compute_dtype.bytes();
    let all = input.logits == Logits::All;
    let derived = decoder_prefill(
        &a,
        tokens,
        input.sequences,
        value,
        input.attention,
        input.sliding_window,
        all,
    )?;
    let inputs = [
        ("sequences", input.sequences.to_string()),
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
                match input.attention {
                    AttentionImpl::Eager => format!(
                        "eager: mask sequences × tokens² × v, and at the attention's moment (v + 8) × sequences × heads × tokens² (the scores with the mask added, softmax's fp32 input and output); peak: {}",
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
        return Ok(());
    };
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
        LineKey::PrefillMlp,
        "Prefill MLP intermediates (assumed)",
        mlp,
        Split::part(mlp, 1, split.tp),
        Kind::Assumed,
        true,
        format!(
            "{live} live tensors × sequences × tokens × intermediate × {value} B (assumed: {why}; `estimate --trace` traces it)"
        ),
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
    let logits = checked_product(&[input.sequences, kept, a.vocab, 4], "logits")?;
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
    Ok(())
}
