//! vLLM's speculative decoding (`--speculative-config`): what a drafter adds to the
//! budget, by the vllm v0.19.0 rules.
//!
//! - `vllm/config/speculative.py`: the methods (`ngram`, `eagle`, `eagle3`, `mtp` — the
//!   older `deepseek_mtp`, `glm4_moe_mtp`, … names are replaced by `mtp` —, and
//!   `draft_model`); `num_speculative_tokens` defaults to the checkpoint's MTP layers
//!   (`n_predict`) and is required otherwise.
//! - `vllm/v1/worker/gpu_model_runner.py` `load_model`: the drafter is loaded inside the
//!   measured window ("Model loading took"), so its weights count as weights;
//!   `vllm/v1/spec_decode/eagle.py` `_maybe_share_embeddings` / `_maybe_share_lm_head`:
//!   an MTP drafter always uses the target's embedding and lm_head, an EAGLE head when
//!   it has none of its own or identical ones.
//! - The drafter's attention layers are registered beside the target's, so they take
//!   KV in the same pool: `vllm/v1/core/kv_cache_utils.py` `get_kv_cache_groups` puts
//!   full-attention layers of different widths in one `UniformTypeKVCacheSpecs`
//!   group whose page is the sum of theirs (`vllm/v1/kv_cache_interface.py`), i.e. the
//!   per-token bytes add up and the token capacity shrinks.
//! - `gpu_model_runner.py` `_dummy_run`: after the target's forward the drafter's
//!   `dummy_run` runs its forward over the same `max_num_batched_tokens`,
//!   `num_speculative_tokens` times, one after the other, while the target's hidden
//!   states are held; `_dummy_sampler_run` then runs the rejection sampler over one
//!   draft token per request, holding fresh target logits of 2 rows per request.
//! - `ngram` proposes on the host (`vllm/v1/spec_decode/ngram_proposer.py`, numba):
//!   no GPU weights, no KV, only the rejection sampler.
//! - The main model skips the checkpoint's MTP layers unless it speculates with them
//!   (`model_executor/models/deepseek_v2.py` `load_weights`:
//!   `get_spec_layer_idx_from_weight_name` → `continue`; `qwen3_next.py` and
//!   `nemotron_h.py` skip the `mtp.` prefix).

use super::flags::{DRAFT_MODEL, NUM_SPECULATIVE_TOKENS, SPECULATIVE_METHOD};
use super::profile::moe_workspace;
use crate::engine::arith::{prod, sum};
use crate::engine::drafter::{SpecMethod, Speculative};
use crate::engine::outcome::{EngineLine, Inputs, line};
use crate::engine::request::{
    Ctx, engine_weights, forward_peak, kv_bytes_per_token, line_bytes,
};
use crate::error::EstimateError;
use crate::estimate::{EstimateInput, Kind, LineKey, TrainMode, estimate};

/// The drafter as the vLLM rule uses it.
pub(super) struct Plan {
    pub info: Speculative,
    /// KV bytes per token of one drafter layer (the hybrid allocator's unit).
    pub layer_kv_bytes: u64,
    /// The drafter's share of the fused-MoE workspace (the one buffer serves both).
    pub workspace: u64,
    pub line: Option<EngineLine>,
    pub assumptions: Vec<String>,
}

const SRC: &str = "vllm/v1/spec_decode/eagle.py (load_model, dummy_run)";

/// Parses `draft-model`: a preset id, or a shape as `key=value` pairs separated by
/// commas (the agent's `--draft-config` writes a config.json's pairs so).
pub fn parse_draft(text: &str) -> Result<EstimateInput, EstimateError> {
    let t = text.trim();
    let bad = |why: String| EstimateError::invalid("draft-model", why);
    let pairs: Vec<(&str, &str)> = match crate::presets::find(t) {
        Some(p) => p.pairs.to_vec(),
        None => {
            let mut v = Vec::new();
            for part in t.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (k, val) = part.split_once('=').ok_or_else(|| {
                    bad(format!(
                        "{part:?}: give a preset id (llama-3.2-1b) or key=value pairs (layers=1,hidden=4096,…)"
                    ))
                })?;
                v.push((k.trim(), val.trim()));
            }
            v
        }
    };
    let (input, errors) = crate::params::from_pairs(pairs);
    if let Some(e) = errors.first() {
        return Err(bad(e.to_string()));
    }
    if input.arch.is_none() {
        return Err(bad(
            "give the draft's layers, hidden, heads, intermediate and vocab".into(),
        ));
    }
    Ok(input)
}

/// The drafter's plan, or `None` without `speculative-method`.
pub(super) fn plan(c: &Ctx, batched: u64) -> Result<Option<Plan>, EstimateError> {
    let p = c.params;
    let Some(method) = p.text(SPECULATIVE_METHOD.key()) else {
        if p.count(NUM_SPECULATIVE_TOKENS.key()).is_some() || p.text(DRAFT_MODEL.key()).is_some() {
            return Err(EstimateError::invalid(
                "speculative-method",
                "name the method for num-speculative-tokens or draft-model",
            ));
        }
        return Ok(None);
    };
    planned(c, batched, SpecMethod::parse(method)?)
}

fn planned(c: &Ctx, batched: u64, method: SpecMethod) -> Result<Option<Plan>, EstimateError> {
    let p = c.params;
    let input = c.input;
    let arch = input.arch;
    let mtp_layers = arch.map_or(0, |a| a.mtp_layers);
    if method == SpecMethod::Mtp && mtp_layers == 0 {
        return Err(EstimateError::invalid(
            "speculative-method",
            "mtp: the model stores no MTP layers (mtp-layers, num_nextn_predict_layers)",
        ));
    }
    let k = match (p.count(NUM_SPECULATIVE_TOKENS.key()), method) {
        (Some(k), _) => k,
        (None, SpecMethod::Mtp) if mtp_layers > 0 => mtp_layers,
        (None, _) => {
            return Err(EstimateError::invalid(
                "num-speculative-tokens",
                "vLLM needs num_speculative_tokens with this method",
            ));
        }
    };
    let b = input.compute_dtype.bytes();
    let info = |w, layers, kv, fwd| Speculative {
        method,
        num_speculative_tokens: k,
        draft_weights_bytes: w,
        draft_kv_layers: layers,
        draft_kv_bytes_per_token: kv,
        draft_forward_bytes: fwd,
    };
    // The target's hidden states, held through the drafter's forward.
    let held = prod(&[batched, arch.map_or(0, |a| a.hidden), b])?;
    let (draft, kind_text, weights, mut inputs): (EstimateInput, &str, u64, Inputs) = match method {
        SpecMethod::Ngram => {
            return Ok(Some(Plan {
                info: info(0, 0, 0, 0),
                layer_kv_bytes: 0,
                workspace: 0,
                line: None,
                assumptions: vec![
                    "ngram proposes on the host: only the rejection sampler's logits".into(),
                ],
            }));
        }
        SpecMethod::Mtp => {
            let Some(a) = arch else {
                return Err(EstimateError::invalid(
                    "speculative-method",
                    "mtp: no architecture",
                ));
            };
            // The MTP layers' weights without their vocabulary copies (shared with the
            // target), as the estimator counts them, per device.
            let mut shared = input.clone();
            let mut sa = a;
            sa.mtp_shared_vocab = true;
            shared.arch = Some(sa);
            shared.tensors = None;
            let w = line_bytes(&estimate(&shared)?, LineKey::WeightsMtp);
            // The drafter's forward: the MTP layers as a decoder of their own.
            let mut d = input.clone();
            d.arch = Some(a.mtp_drafter());
            d.tensors = None;
            d.sliding_window = None;
            d.sliding_layers = None;
            d.state_layers = 0;
            d.pp = 1;
            d.gpus = input.tp.max(1);
            (
                d,
                "the checkpoint's MTP layers, no vocabulary copies",
                w,
                Vec::new(),
            )
        }
        SpecMethod::Eagle | SpecMethod::Eagle3 | SpecMethod::DraftModel => {
            // vLLM needs the drafter's checkpoint (`model`) for these methods.
            let Some(text) = p.text(DRAFT_MODEL.key()) else {
                return Err(EstimateError::invalid(
                    "draft-model",
                    "give the draft or EAGLE head: a preset id or its shape",
                ));
            };
            let mut d = parse_draft(text)?;
            // The drafter runs at the target's tensor-parallel degree
            // (draft_model.py `_raise_if_draft_tp_mismatch`), in its dtype and cache dtype.
            d.tp = input.tp.max(1);
            d.gpus = d.tp;
            d.pp = 1;
            d.compute_dtype = input.compute_dtype;
            d.kv_dtype = input.kv_dtype;
            d.tensors = None;
            d.sliding_window = None;
            d.sliding_layers = None;
            d.train = TrainMode::None;
            let est = estimate(&d)?;
            let all = engine_weights(&est, &d)?;
            let da = d
                .arch
                .ok_or_else(|| EstimateError::invalid("draft-model", "no shape"))?;
            let h = da.hidden;
            let (w, inputs) = match method {
                SpecMethod::DraftModel => (all, Vec::new()),
                _ => {
                    // llama_eagle.py: fc [2·hidden → hidden], no final norm and no
                    // input norm in the first layer; llama_eagle3.py: fc [3·hidden →
                    // hidden], a `hidden_norm` per layer, its first layer's q/k/v read
                    // 2·hidden, and d2t maps the draft vocabulary (int64) to the
                    // target's. The embedding is the target's (assumed: the heads
                    // publish none or an identical copy); EAGLE-1 uses the target's
                    // lm_head too.
                    let emb = line_bytes(&est, LineKey::WeightsEmbeddings);
                    let head = if method == SpecMethod::Eagle {
                        line_bytes(&est, LineKey::WeightsLmHead)
                    } else {
                        0
                    };
                    let fc = prod(&[if method == SpecMethod::Eagle { 2 } else { 3 }, h, h, b])?;
                    let (extra, fewer) = if method == SpecMethod::Eagle3 {
                        let qkv = sum(&[da.heads, prod(&[2, da.kv_heads])?])?;
                        let extra = sum(&[
                            prod(&[h, qkv, da.head_dim, b])?.div_ceil(d.tp),
                            prod(&[da.layers, h, b])?,
                            prod(&[da.vocab, 8])?,
                        ])?;
                        (extra, 0)
                    } else {
                        (0, prod(&[2, h, b])?)
                    };
                    let kept = all
                        .saturating_sub(emb)
                        .saturating_sub(head)
                        .saturating_sub(fewer);
                    let w = sum(&[kept, fc, extra])?;
                    (w, vec![("fc", fc.to_string())])
                }
            };
            let label = if method == SpecMethod::DraftModel {
                "the draft model, whole"
            } else {
                "the EAGLE head, less what it shares, + fc"
            };
            (d, label, w, inputs)
        }
    };
    // The drafter's KV per token (its attention layers, in the target's cache dtype).
    let da = draft
        .arch
        .ok_or_else(|| EstimateError::invalid("draft-model", "no shape"))?;
    let layers = da.attention_layers();
    let kv = kv_bytes_per_token(&draft, crate::arch::CacheRuntime::Serving)?;
    let layer_kv = kv.checked_div(layers).unwrap_or(0);
    let fwd = forward_peak(&draft, batched)?;
    let forward = sum(&[held, fwd])?;
    inputs.push(("num-speculative-tokens", k.to_string()));
    inputs.push(("kv-bytes-per-token", kv.to_string()));
    inputs.push(("forward", fwd.to_string()));
    let shares = match method {
        SpecMethod::Eagle => "; the head shares the target's embedding and lm_head",
        SpecMethod::Eagle3 => "; the head shares the target's embedding",
        _ => "",
    };
    let assumptions = vec![format!(
        "{}: {k} token(s) per step, the drafter's forward repeated, each freed (the peak does not grow); its {layers} layer(s) share the KV pool{shares}",
        method.name()
    )];
    let line = line(
        "draft_weights",
        "Drafter's weights (speculative decoding)",
        weights,
        Kind::Computed,
        kind_text.into(),
        &inputs,
        SRC,
    );
    Ok(Some(Plan {
        info: info(weights, layers, kv, forward),
        layer_kv_bytes: layer_kv,
        workspace: moe_workspace(&draft, batched, draft.tp)?,
        line: Some(line),
        assumptions,
    }))
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    //! One hand derivation per method, on Llama-3.1-8B (bf16, H100 80GB, 16 000
    //! tokens) unless the method needs another target.

    use super::*;
    use crate::engine::{EngineBudget, EngineParams, budget, from_pairs};
    use crate::presets;

    fn preset(id: &str, extra: &[(&str, &str)]) -> EstimateInput {
        let p = presets::find(id).expect("preset");
        let (input, errors) =
            crate::params::from_pairs(p.pairs.iter().copied().chain(extra.iter().copied()));
        assert!(errors.is_empty(), "{errors:?}");
        input
    }

    fn params(pairs: &[(&str, &str)]) -> EngineParams {
        // The drafter's hand derivations are 0.19's (0.27 and the default 0.29 count
        // speculative decoding with the same V1 profile, the CUDA-graph estimate off
        // the pool).
        let base = [
            ("engine", "vllm@0.19"),
            ("card", "h100-sxm-80gb"),
            ("max-model-len", "16000"),
        ];
        let (p, errors) = from_pairs(base.iter().chain(pairs).copied());
        assert!(errors.is_empty(), "{errors:?}");
        p
    }

    fn run(input: &EstimateInput, pairs: &[(&str, &str)]) -> Result<EngineBudget, EstimateError> {
        budget(input, &estimate(input).expect("estimate"), &params(pairs))
    }

    fn line_of(b: &EngineBudget, key: &str) -> u64 {
        b.lines.iter().find(|l| l.key == key).map_or(0, |l| l.bytes)
    }

    fn input_of(b: &EngineBudget, key: &str, part: &str) -> u64 {
        let l = b.lines.iter().find(|l| l.key == key).expect("line");
        l.inputs[part].parse().expect("a number")
    }

    const H: u64 = 4096;
    /// One Llama-3.1-8B layer, as the published EAGLE heads for it (spaces allowed).
    const HEAD: &str = "layers=1, hidden=4096, heads=32, kv-heads=8, head-dim=128, intermediate=14336, vocab=128256";
    const VOCAB: u64 = 128_256;
    /// One Llama-3.1-8B decoder layer: q, k, v, o, gate/up/down and two norms, in bf16.
    const LAYER: u64 = 2 * (H * (H + 1024 + 1024 + H) + 3 * H * 14_336 + 2 * H);

    /// The pool in tokens, as vLLM counts it: whole 16-token blocks.
    fn tokens(b: &EngineBudget) -> u64 {
        (b.kv_capacity_bytes as u64 / (16 * b.kv_bytes_per_token)) * 16
    }

    #[test]
    fn ngram_adds_only_the_rejection_samplers_logits() {
        let input = preset("llama-3.1-8b", &[]);
        let plain = run(&input, &[]).expect("budget");
        let ngram = run(
            &input,
            &[
                ("speculative-method", "ngram"),
                ("num-speculative-tokens", "4"),
            ],
        )
        .expect("budget");
        // 1024 requests (H100 default) × 2 rows of 128 256 bf16 logits.
        let rejection = 2 * 1024 * VOCAB * 2;
        assert_eq!(
            input_of(&ngram, "activation_peak", "rejection-logits"),
            rejection
        );
        assert_eq!(
            input_of(&ngram, "activation_peak", "sampler-phase"),
            input_of(&plain, "activation_peak", "sampler-phase") + rejection
        );
        // The sampler phase is the profile's peak here (the vocabulary is large).
        assert_eq!(
            line_of(&ngram, "activation_peak"),
            line_of(&plain, "activation_peak") + rejection
        );
        assert_eq!(
            ngram.kv_capacity_bytes,
            plain.kv_capacity_bytes - rejection as i64
        );
        assert_eq!(ngram.kv_bytes_per_token, plain.kv_bytes_per_token);
        assert_eq!(line_of(&ngram, "draft_weights"), 0);
        let s = ngram.speculative.expect("speculative");
        assert_eq!((s.method, s.num_speculative_tokens), (SpecMethod::Ngram, 4));
        assert_eq!(s.draft_kv_bytes_per_token, 0);
    }

    #[test]
    fn an_eagle_head_is_one_layer_sharing_embedding_and_lm_head() {
        let input = preset("llama-3.1-8b", &[]);
        let plain = run(&input, &[]).expect("budget");
        let eagle = run(
            &input,
            &[
                ("speculative-method", "eagle"),
                ("num-speculative-tokens", "3"),
                ("draft-model", HEAD),
            ],
        )
        .expect("budget");
        // One layer without its input norm, no final norm, fc [2·hidden → hidden],
        // all bf16.
        let weights = LAYER - 2 * H + 2 * 2 * H * H;
        assert_eq!(line_of(&eagle, "draft_weights"), weights);
        // One more layer of K and V: 2 × 8 heads × 128 × 2 B.
        assert_eq!(plain.kv_bytes_per_token, 32 * 4096);
        assert_eq!(eagle.kv_bytes_per_token, 33 * 4096);
        let s = eagle.speculative.clone().expect("speculative");
        assert_eq!((s.draft_kv_layers, s.draft_kv_bytes_per_token), (1, 4096));
        assert_eq!(eagle.kv_capacity_tokens, tokens(&eagle));
        // The pool loses the head's weights and whatever the profile grew by.
        let peak = line_of(&eagle, "activation_peak") - line_of(&plain, "activation_peak");
        assert_eq!(
            eagle.kv_capacity_bytes,
            plain.kv_capacity_bytes - (weights + peak) as i64
        );
        // Without the head, as vLLM, nothing to load.
        let e = run(
            &input,
            &[
                ("speculative-method", "eagle"),
                ("num-speculative-tokens", "3"),
            ],
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("draft-model:"), "{e}");
    }

    #[test]
    fn an_eagle3_head_has_its_own_lm_head_wider_qkv_and_d2t() {
        let input = preset("llama-3.1-8b", &[]);
        let b = run(
            &input,
            &[
                ("speculative-method", "eagle3"),
                ("num-speculative-tokens", "3"),
                ("draft-model", HEAD),
            ],
        )
        .expect("budget");
        // One layer + its hidden_norm + final norm + lm_head (draft vocabulary = the
        // target's when the config names none) + fc [3·hidden → hidden] + the first
        // layer's q/k/v on 2·hidden (one more hidden's worth) + d2t (int64 per draft
        // token).
        let weights = LAYER
            + 2 * H
            + 2 * H
            + 2 * VOCAB * H
            + 2 * 3 * H * H
            + 2 * H * (32 + 2 * 8) * 128
            + 8 * VOCAB;
        assert_eq!(line_of(&b, "draft_weights"), weights);
        assert_eq!(b.kv_bytes_per_token, 33 * 4096);
    }

    #[test]
    fn mtp_loads_the_checkpoints_layers_only_to_speculate() {
        let input = preset(
            "deepseek-v3",
            &[("tp", "8"), ("gpus", "8"), ("format", "fp8-block")],
        );
        let est = estimate(&input).expect("estimate");
        let mtp_full = line_bytes(&est, LineKey::WeightsMtp);
        assert!(mtp_full > 0);
        let plain = run(&input, &[("card", "h200-141gb")]).expect("budget");
        // Without speculation vLLM does not load them.
        assert_eq!(input_of(&plain, "weights", "mtp-layers-skipped"), mtp_full);
        let mtp = run(
            &input,
            &[
                ("card", "h200-141gb"),
                ("speculative-method", "deepseek_mtp"),
            ],
        )
        .expect("budget");
        let s = mtp.speculative.clone().expect("speculative");
        // num_speculative_tokens defaults to the MTP layers (n_predict).
        assert_eq!((s.method, s.num_speculative_tokens), (SpecMethod::Mtp, 1));
        // Loaded without the vocabulary copies: embed_tokens and shared_head.head
        // (129 280 × 7168, bf16, each sharded by tp 8) are the target's.
        let copies = 2 * (129_280 * 7168 * 2 / 8);
        assert_eq!(s.draft_weights_bytes, mtp_full - copies);
        assert_eq!(line_of(&mtp, "weights"), line_of(&plain, "weights"));
        // One more MLA layer in the pool: (512 latent + 64 rope) × 2 B per token.
        assert_eq!(s.draft_kv_layers, 1);
        assert_eq!(s.draft_kv_bytes_per_token, 576 * 2);
        assert_eq!(mtp.kv_bytes_per_token, plain.kv_bytes_per_token + 1152);
        assert!(mtp.kv_capacity_tokens < plain.kv_capacity_tokens);
        // A model without MTP layers cannot.
        let llama = preset("llama-3.1-8b", &[]);
        let e = run(&llama, &[("speculative-method", "mtp")]).unwrap_err();
        assert!(e.to_string().contains("no MTP layers"), "{e}");
    }

    #[test]
    fn a_draft_model_adds_its_weights_and_kv_layers() {
        let input = preset("llama-3.1-8b", &[]);
        let plain = run(&input, &[]).expect("budget");
        let b = run(
            &input,
            &[
                ("speculative-method", "draft_model"),
                ("num-speculative-tokens", "5"),
                ("draft-model", "llama-3.2-1b"),
            ],
        )
        .expect("budget");
        // Llama-3.2-1B in bf16: its own estimate's weights, whole, less transformers'
        // rotary buffers (two of 32 fp32 values: vLLM builds its own).
        let draft = preset("llama-3.2-1b", &[]);
        let dw = estimate(&draft).expect("estimate").weights_bytes - 2 * 32 * 4;
        assert_eq!(line_of(&b, "draft_weights"), dw);
        // 16 layers × 2 × 8 KV heads × 64 × 2 B.
        assert_eq!(b.kv_bytes_per_token, plain.kv_bytes_per_token + 16 * 2048);
        let peak = line_of(&b, "activation_peak") - line_of(&plain, "activation_peak");
        assert_eq!(
            b.kv_capacity_bytes,
            plain.kv_capacity_bytes - (dw + peak) as i64
        );
        assert_eq!(b.kv_capacity_tokens, tokens(&b));
        assert!(b.kv_capacity_tokens * 10 < plain.kv_capacity_tokens * 9);
    }

    #[test]
    fn speculative_flags_are_checked_as_vllm_checks_them() {
        let input = preset("llama-3.1-8b", &[]);
        let err = |pairs: &[(&str, &str)]| run(&input, pairs).unwrap_err().to_string();
        assert!(err(&[("speculative-method", "eagle")]).contains("num_speculative_tokens"));
        assert!(
            err(&[
                ("speculative-method", "draft_model"),
                ("num-speculative-tokens", "2")
            ])
            .contains("draft-model")
        );
        assert!(err(&[("num-speculative-tokens", "2")]).contains("speculative-method"));
        let (_, e) = from_pairs([("speculative-method", "medusa")]);
        assert!(e[0].to_string().starts_with("speculative-method:"), "{e:?}");
        for bad in ["layers=1,hidden", "no-such-preset", "layers=1"] {
            let e = parse_draft(bad).unwrap_err();
            assert!(e.to_string().starts_with("draft-model:"), "{bad}: {e}");
        }
        let older = budget(
            &input,
            &estimate(&input).expect("estimate"),
            &params(&[
                ("engine", "vllm@0.10"),
                ("speculative-method", "ngram"),
                ("num-speculative-tokens", "2"),
            ]),
        );
        assert!(older.is_err());
    }
}
