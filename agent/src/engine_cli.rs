//! `estimate --engine … --card …`: the engine budget (its version, lines, pool, tokens,
//! sequences and whether it fits, is borderline or is refused) and the largest
//! workload that fits, on the command line.
//!
//! The flags come from the engine group of the field table, which the engines'
//! registry makes from each engine's rows ([`gpumem_core::engine::FIELDS`], the
//! engines' own flag names); the figures from
//! [`gpumem_core::engine`]. `estimate.rs` only calls
//! [`augment`], [`collect`] and [`compute`], so this stays one self-contained hook.

use clap::{Arg, ArgMatches, Command};
use gpumem_core::engine::{self, CardKv, EngineBudget, Largest, Outcome};
use gpumem_core::estimate::{Estimate, EstimateInput};
use gpumem_core::import::config;
use gpumem_core::placement::{
    self, device_map::DeviceMapPlan, llama_cpp::LlamaPlacement, vllm::VllmOffload,
};
use gpumem_core::units::{
    Bytes, group_digits, signed_gb_string, signed_gib_string, signed_group_digits,
};
use serde::Serialize;

/// Adds one flag per engine key, and `--draft-config`.
pub fn augment(mut cmd: Command) -> Command {
    for f in engine::FIELDS {
        cmd = cmd.arg(crate::flags::flag_of(f));
    }
    cmd.arg(
        Arg::new(DRAFT_CONFIG)
            .long(DRAFT_CONFIG)
            .value_name("CONFIG_JSON")
            .conflicts_with("draft-model")
            .help("vLLM: the draft model's or EAGLE head's config.json (read into --draft-model)"),
    )
}

/// The flag naming the drafter's config.json; [`read_draft_config`] turns it into
/// the `draft-model` key.
const DRAFT_CONFIG: &str = "draft-config";

/// The engine flags given, as `key=value` pairs (`--draft-config` as its path).
pub fn collect(m: &ArgMatches) -> Vec<(String, String)> {
    engine::engine_keys()
        .chain([DRAFT_CONFIG])
        .filter_map(|k| m.get_one::<String>(k).map(|v| (k.to_string(), v.clone())))
        .collect()
}

/// Reads `--draft-config`'s file (headers only: a config.json) and replaces the pair
/// with `draft-model`: the config's shape as `key=value` pairs, the value the page's
/// URL keeps too. An EAGLE-3 head's `draft_vocab_size` is its lm_head's vocabulary.
pub fn read_draft_config(pairs: &mut [(String, String)]) -> anyhow::Result<()> {
    use anyhow::Context;
    for (k, v) in pairs.iter_mut().filter(|(k, _)| k == DRAFT_CONFIG) {
        let text = crate::private::read_to_string_bounded(
            std::path::Path::new(v.as_str()),
            config::MAX_CONFIG_BYTES,
        )?;
        let c = config::parse_config(&text).with_context(|| format!("reading {v}"))?;
        let draft_vocab = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|j| j.get("draft_vocab_size").and_then(|d| d.as_u64()));
        for w in &c.warnings {
            crate::out::errln!("gpumem-agent: --draft-config: {w}");
        }
        let shape: Vec<String> = c
            .pairs()
            .into_iter()
            .map(|(key, value)| match (key, draft_vocab) {
                ("vocab", Some(d)) => format!("vocab={d}"),
                _ => format!("{key}={value}"),
            })
            .collect();
        *k = "draft-model".into();
        *v = shape.join(",");
    }
    Ok(())
}

/// What the engine flags add to the output (`engine` and `largest` in `--json`).
#[derive(Debug, Default, Serialize)]
pub struct EngineOutput {
    /// The engine's KV budget, with `--engine`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineBudget>,
    /// With `--engine` and no `--card`: the engine's KV pool on every catalogue card.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_per_card: Option<Vec<CardKv>>,
    /// The largest context and most sequences on `--card`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest: Option<Largest>,
    /// llama.cpp on `--card`, when every layer does not fit and no placement flag was
    /// given: the placement chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<LlamaPlacement>,
    /// transformers on `--card` (`--gpus` of them), when the model does not fit one
    /// card, several GPUs are given, or `--max-memory`: `device_map="auto"` planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_map: Option<DeviceMapPlan>,
    /// vLLM on `--card`, when the workload does not fit and no `--cpu-offload-gb` was
    /// given: the smallest whole `--cpu-offload-gb` that fits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_offload: Option<VllmOffload>,
}

/// Computes the engine budget and the largest workload; `Err` holds one message per
/// invalid flag (the caller prints them and exits 2).
pub fn compute(
    pairs: &[(String, String)],
    input: &EstimateInput,
    est: &Estimate,
) -> Result<EngineOutput, Vec<String>> {
    if pairs.is_empty() {
        return Ok(EngineOutput::default());
    }
    let (params, errors) = engine::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if !errors.is_empty() {
        return Err(errors.iter().map(|e| format!("--{e}")).collect());
    }
    let Some(card) = params.card else {
        if params.engine.is_none() {
            return Err(vec![
                "--card: name a card (e.g. --card h100-sxm-80gb) or an --engine for these flags"
                    .into(),
            ]);
        }
        let rows =
            engine::budget_per_card(input, est, &params).map_err(|e| vec![format!("--{e}")])?;
        return Ok(EngineOutput {
            engine_per_card: Some(rows),
            ..EngineOutput::default()
        });
    };
    let budget = match params.engine {
        Some(_) => Some(engine::budget(input, est, &params).map_err(|e| vec![format!("--{e}")])?),
        None => None,
    };
    let placement =
        placement::choose(input, est, &params, &card).map_err(|e| vec![format!("--{e}")])?;
    let device_map =
        placement::device_map(input, est, &params, &card).map_err(|e| vec![format!("--{e}")])?;
    let cpu_offload =
        placement::cpu_offload(input, est, &params, &card).map_err(|e| vec![format!("--{e}")])?;
    Ok(EngineOutput {
        engine: budget,
        engine_per_card: None,
        largest: Some(engine::largest(input, &card, &params)),
        placement,
        device_map,
        cpu_offload,
    })
}

/// The outcome as the table prints it.
fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Fits => "fits",
        Outcome::Borderline => "BORDERLINE",
        Outcome::Refused => "REFUSED",
    }
}

/// The human section printed after the estimate's table.
pub fn render(out: &EngineOutput) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if let Some(b) = &out.engine {
        let _ = writeln!(
            s,
            "\nengine {} {} on {} ({} B, {}), per device:",
            b.engine.name(),
            b.version,
            b.card_name,
            group_digits(b.capacity_bytes),
            b.capacity_kind
        );
        for (i, l) in b.lines.iter().enumerate() {
            let kind = l.kind.name();
            let sign = match (i, l.subtracted) {
                (0, _) => " ",
                (_, true) => "−",
                (_, false) => "·",
            };
            let _ = writeln!(
                s,
                "  {sign} {:<70} {kind:<9} {:>22} {:>10} GB {:>10} GiB",
                l.label,
                group_digits(l.bytes),
                Bytes(l.bytes).gb_string(2),
                Bytes(l.bytes).gib_string(2)
            );
            let _ = writeln!(s, "      {}  [{}]", l.formula, l.source);
        }
        let _ = writeln!(
            s,
            "  = {:<70} {:<9} {:>22} {:>10} GB {:>10} GiB",
            if b.batch_tokens.is_some() {
                "Left on the card at the largest batch (no KV cache)"
            } else {
                "KV cache capacity"
            },
            "",
            signed_group_digits(b.kv_capacity_bytes),
            signed_gb_string(b.kv_capacity_bytes, 2),
            signed_gib_string(b.kv_capacity_bytes, 2)
        );
        if let Some(k) = b.kv_cache_bytes {
            let _ = writeln!(
                s,
                "  KV cache allocated for max-model-len {}: {} B ({} GiB)",
                group_digits(b.max_model_len),
                group_digits(k),
                Bytes(k).gib_string(2)
            );
        }
        if let Some(d) = b.speculative.as_ref().filter(|d| d.draft_kv_layers > 0) {
            let _ = writeln!(
                s,
                "  speculative decoding ({}): the drafter's {} attention layer(s) take {} B of the KV per token",
                d.method.name(),
                d.draft_kv_layers,
                group_digits(d.draft_kv_bytes_per_token)
            );
        }
        if let Some(tokens) = b.batch_tokens {
            let _ = writeln!(
                s,
                "  no KV cache: one batch of {} tokens at most; max-model-len {} → {} sequence(s) a batch",
                group_digits(tokens),
                group_digits(b.max_model_len),
                group_digits(b.max_sequences)
            );
        } else {
            let _ = writeln!(
                s,
                "  KV per token {} B, block {} token(s): {} tokens; max-model-len {} → {} sequence(s) at once",
                group_digits(b.kv_bytes_per_token),
                b.block_size,
                group_digits(b.kv_capacity_tokens),
                group_digits(b.max_model_len),
                group_digits(b.max_sequences)
            );
        }
        let _ = writeln!(
            s,
            "  {}: margin {} GiB {} (assumed lines ±{} GiB)",
            outcome_word(b.outcome),
            signed_gib_string(b.margin_bytes, 2),
            if b.batch_tokens.is_some() {
                "at the largest batch"
            } else {
                "for one sequence"
            },
            Bytes(b.uncertainty_bytes).gib_string(2)
        );
        for a in &b.assumptions {
            let _ = writeln!(s, "  assumed: {a}");
        }
        for w in &b.warnings {
            let _ = writeln!(s, "  warning: {w}");
        }
    }
    if let Some(rows) = &out.engine_per_card {
        let _ = writeln!(
            s,
            "\nKV cache the engine leaves per device, on each card (--card CARD for the lines):"
        );
        let width = rows
            .iter()
            .map(|r| r.name.chars().count())
            .max()
            .unwrap_or(0);
        for r in rows {
            let _ = writeln!(
                s,
                "  {:<width$} {:>24} B {:>9} GiB {:>13} tokens {:>7} sequence(s)  {}",
                r.name,
                signed_group_digits(r.kv_capacity_bytes),
                signed_gib_string(r.kv_capacity_bytes, 2),
                group_digits(r.kv_capacity_tokens),
                group_digits(r.max_sequences),
                outcome_word(r.outcome)
            );
        }
    }
    if let Some(l) = &out.largest {
        let whose = if l.basis == "estimate" {
            "no engine: the estimate's need, transients and reserve included".to_string()
        } else {
            format!("{}'s pool", l.basis)
        };
        let _ = writeln!(s, "\nlargest workload on {} ({}):", l.card, whose);
        let _ = match l.largest_context {
            Some(c) => writeln!(
                s,
                "  largest context at {} sequence(s): {} tokens{}",
                l.at_sequences,
                group_digits(c),
                l.positions_note()
                    .map_or(String::new(), |n| format!(" — {n}"))
            ),
            None => writeln!(
                s,
                "  largest context at {} sequence(s): none (not even 1 token fits)",
                l.at_sequences
            ),
        };
        if let Some(ctx) = l.at_context {
            let _ = match l.most_sequences {
                Some(n) => writeln!(
                    s,
                    "  most sequences at context {}: {}",
                    group_digits(ctx),
                    group_digits(n)
                ),
                None => writeln!(
                    s,
                    "  most sequences at context {}: none (not even 1 fits)",
                    group_digits(ctx)
                ),
            };
        }
    }
    s
}
