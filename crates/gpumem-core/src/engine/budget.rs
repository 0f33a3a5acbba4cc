//! The budget of a request under the engine it names ([`budget`]), on one card or on
//! every catalogue card ([`budget_per_card`]): the length it serves, the facts every
//! rule starts from, the named engine's rule, what the engine does not model, and the
//! common ending.

use super::arith::search;
use super::flags::EngineParams;
use super::outcome::{CardKv, EngineBudget};
use super::pool::{finish, finish_batch};
use super::request::{Ctx, engine_weights, kv_bytes_per_token, line_bytes};
use super::{batch_rule_of, rule_of};
use crate::arch::MAX_DIM;
use crate::catalogue::CATALOGUE;
use crate::error::EstimateError;
use crate::estimate::{Estimate, EstimateInput, LineKey, TrainMode};

/// Predicts the KV-cache pool `params.engine` leaves on `params.card` for the
/// workload `input` (whose estimate is `est`).
pub fn budget(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
) -> Result<EngineBudget, EstimateError> {
    if input.is_encoder()
        && let Some(e) = params.engine
        && !e.encoders()
    {
        // An encoder keeps no KV cache: the engines whose rule sizes a decoder's pool
        // (and nothing else) do not serve it; vLLM's pooling runner and TEI do, by
        // their own rules.
        let serving: Vec<&str> = super::registry::all()
            .filter(|e| e.encoders())
            .map(|e| e.name())
            .collect();
        return Err(EstimateError::invalid(
            "engine",
            format!(
                "{} sizes a decoder's KV pool and does not serve an encoder-only model (no KV cache): name {} (their rules for an encoder's batches), or leave out --engine for the encoder's own forward",
                e.name(),
                serving.join(" or ")
            ),
        ));
    }
    if input.beams > 1
        && let Some(e) = params.engine
    {
        // The engines' beam search (vLLM's `BeamSearchParams`, llama.cpp's and
        // SGLang's own) shares or forks blocks of their pools by their own rules, not
        // modelled here; every engine's rule (transformers' included) counts the
        // sequences a pool holds, not beams. Without --engine, transformers' generate
        // keeps one cache per beam, line by line.
        return Err(EstimateError::invalid(
            "beams",
            format!(
                "beam search under --engine {} is not modelled (its rule counts sequences, not the beams each keeps): leave out --engine for transformers' generate(num_beams=k), or give --beams 1",
                e.name()
            ),
        ));
    }
    // An encoder-decoder (Whisper) goes to the engine's own rule for it
    // (`Engine::encoder_decoder`, through `cross::layout`): vLLM's V1 engine pages its
    // cross-attention layers beside its self-attention layers; the engines whose
    // handling was not read refuse it there, saying so.
    if let Some(n) = input.arch.map(|a| a.prefix_tokens).filter(|n| *n > 0) {
        // GIT: its image's tokens go ahead of the prompt's ids inside the model
        // (transformers' GitModel.forward); no engine's rule modelled here lays out a
        // request whose cache holds tokens its prompt does not name.
        return Err(EstimateError::invalid(
            "engine",
            format!(
                "the model puts {n} tokens ahead of the prompt's ids (prefix-tokens: GIT's image), which no engine's rule modelled here lays out: leave out --engine for transformers' own forward"
            ),
        ));
    }
    if !(params.max_model_len_auto && params.max_model_len.is_none()) {
        return budget_at(input, est, params);
    }
    // vllm kv_cache_utils.py `_auto_fit_max_model_len`: the longest length whose one
    // request fits the pool, up to the model's own (its positions, as far as its
    // RoPE scaling reaches: `_get_and_verify_max_len`'s derived length).
    let cap = input.position_limit().unwrap_or(MAX_DIM);
    let at = |m: u64| {
        let p = EngineParams {
            max_model_len: Some(m),
            max_model_len_auto: false,
            ..params.clone()
        };
        budget_at(input, est, &p)
    };
    let m = search(cap, |m| at(m).is_ok_and(|b| b.fits_one_sequence)).unwrap_or(cap);
    let mut b = at(m)?;
    b.assumptions.push(format!(
        "max-model-len auto: {m}, the longest the pool holds (≤ {cap})"
    ));
    Ok(b)
}

/// [`budget`] at a given (or derived) max-model-len: one copy of the rules, called
/// by the searches (never inlined into them, which would copy every engine's rule).
#[inline(never)]
fn budget_at(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
) -> Result<EngineBudget, EstimateError> {
    let Some(engine) = params.engine else {
        return Err(EstimateError::invalid("engine", "name an engine"));
    };
    let Some(card) = params.card else {
        return Err(EstimateError::invalid(
            "card",
            "an engine budget needs a card (e.g. --card h100-sxm-80gb)",
        ));
    };
    if !params.devices.is_empty() && !engine.several_cards() {
        return Err(EstimateError::invalid(
            "card",
            "several cards are judged under llama.cpp (its --tensor-split over them) and vLLM (its pipeline stages); this engine's rule judges one card",
        ));
    }
    // An encoder keeps no KV cache: its rule reads no bytes per token.
    let per_token = if input.arch.is_some_and(|a| a.encoder) {
        0
    } else {
        kv_bytes_per_token(input, engine.cache_runtime())?
    };
    // Cross-attention layers (Llama 3.2 Vision's, an encoder-decoder's) as the engine
    // lays them out.
    let cross = super::cross::layout(engine, params, input, per_token)?;
    let per_token = cross.as_ref().map_or(per_token, |x| x.per_token);
    let max_model_len = match params.max_model_len {
        Some(m) => m,
        None => match (input.context, input.position_limit()) {
            // An engine whose length is the context of all its sequences together
            // (llama-server's `-c`: N sequences of L tokens are `-c N×L -np N`) serves
            // the workload at length × sequences; the pool engines serve each sequence
            // at max-model-len.
            (Some(c), _) => c
                .checked_add(input.generate)
                .and_then(|l| {
                    if engine.shared_context() {
                        l.checked_mul(input.sequences.max(1))
                    } else {
                        Some(l)
                    }
                })
                .ok_or(EstimateError::Overflow {
                    what: "max-model-len",
                })?,
            (None, Some(p)) => p,
            (None, None) => {
                return Err(EstimateError::invalid(
                    "max-model-len",
                    "give max-model-len (or context, or a model whose max-position is known)",
                ));
            }
        },
    };
    // A length derived from the workload's text grows by the image tokens the engine
    // counts in a request's length (SGLang's padded image); a length given holds them.
    let max_model_len = match (&cross, params.max_model_len, input.context) {
        (Some(x), None, Some(_)) => {
            max_model_len
                .checked_add(x.length_tokens)
                .ok_or(EstimateError::Overflow {
                    what: "max-model-len",
                })?
        }
        _ => max_model_len,
    };
    let ctx = Ctx {
        input,
        est,
        params,
        card,
        weights: engine_weights(est, input)?,
        embed_bytes: line_bytes(est, LineKey::WeightsEmbeddings),
        mtp_bytes: line_bytes(est, LineKey::WeightsMtp),
        per_token,
        max_model_len,
        encoder_tokens: cross.as_ref().map_or(0, |x| x.encoder_tokens),
        stage: None,
    };
    // An encoder-only model keeps no KV cache: the engines that serve one answer by
    // their batch's rule (`Engine::batch_budget`), the others refused it above.
    let (mut d, batch) = if input.arch.is_some_and(|a| a.encoder) {
        let (d, b) = batch_rule_of(engine, &ctx)?;
        (d, Some(b))
    } else {
        (rule_of(engine, &ctx)?, None)
    };
    // A flag given that this engine does not read, where the flag says so.
    for (key, _) in &params.flags {
        if let Some(text) = super::registry::unread(key)
            && !engine.reads(key)
        {
            d.warnings.push(text.into());
        }
    }
    if let Some(x) = cross {
        d.assumptions.push(x.assumption);
    }
    if input.sliding_window.is_some() && !engine.windows() {
        d.assumptions
            .push("sliding-window layers are counted at the full length per token".into());
    }
    if ctx.weights == 0 {
        d.warnings.push("no weights counted (only the KV cache's shape was given): the KV capacity is an upper bound".into());
    }
    if input.state_layers > 0 {
        d.warnings
            .push("recurrent-state layers are not counted in the engine budget".into());
    }
    if input.train != TrainMode::None {
        d.warnings
            .push("an engine budget is for inference; the training mode is ignored".into());
    }
    if card.unified() && !engine.metal() {
        d.warnings.push(engine.not_on_a_mac());
    }
    match batch {
        Some(b) => finish_batch(engine, &ctx, d, &b),
        None => finish(engine, &ctx, d),
    }
}

/// The engine's budget on every catalogue card, in catalogue order (the fit table's
/// engine columns); `params.card` is ignored.
pub fn budget_per_card(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
) -> Result<Vec<CardKv>, EstimateError> {
    CATALOGUE
        .iter()
        .filter_map(|card| {
            let p = EngineParams {
                card: Some(*card),
                ..params.clone()
            };
            let b = budget(input, est, &p);
            // A card an encoder's rule is not modelled on (TEI off its flash-attention
            // cards) has no row; any other refusal is the request's.
            if input.arch.is_some_and(|a| a.encoder)
                && matches!(&b, Err(EstimateError::Invalid { field: "card", .. }))
            {
                return None;
            }
            Some(b.map(|b| CardKv {
                id: b.card,
                name: b.card_name,
                kv_capacity_bytes: b.kv_capacity_bytes,
                kv_capacity_tokens: b.kv_capacity_tokens,
                max_sequences: b.max_sequences,
                outcome: b.outcome,
            }))
        })
        .collect()
}
