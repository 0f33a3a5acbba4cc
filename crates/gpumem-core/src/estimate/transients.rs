//! The transients' lines: CUDA context, prefill MLP intermediates, attention
//! scores and logits.

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
    b.assumptions.push(
        "prefill transients are summed although they are not all alive at once: an upper bound"
            .into(),
    );
    Ok(())
}
