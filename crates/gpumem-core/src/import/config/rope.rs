//! How far a config's RoPE scaling reaches: the longest `max_model_len` vLLM
//! accepts for it, which is what "largest context" may offer without warning.
//!
//! vLLM v0.19.0 `vllm/config/model.py` (`_get_and_verify_max_len`): the derived
//! length starts at the config's positions; unless the model type contains
//! `gemma3` (its 128K already includes the scaling: the family record's
//! `scaled_positions`), each `rope_parameters` entry
//! (transformers 5; `rope_scaling` before) whose type is not `su`, `longrope` or
//! `llama3` (whose `max_position_embeddings` already includes the scaling) sets the
//! factor (`factor`, default 1), and `yarn` restarts from its
//! `original_max_position_embeddings`; the length is multiplied by the factor and
//! truncated (`int(...)`).

use serde_json::{Map, Value};

use super::json::Cfg;

/// The positions the scaling reaches when they differ from `max_position` (unless
/// `scaled`: the family's positions already include it); the scaling the config
/// declares is named in `notes` either way.
pub(super) fn positions(
    c: &Cfg,
    scaled: bool,
    max_position: Option<u64>,
    notes: &mut Vec<String>,
) -> Option<u64> {
    let params = [c.get("rope_parameters"), c.get("rope_scaling")]
        .into_iter()
        .flatten()
        .find_map(Value::as_object)?;
    // Per layer type (`{"full_attention": {...}, "sliding_attention": {...}}`) or flat.
    let nested = !params.is_empty() && params.values().all(Value::is_object);
    let entries: Vec<&Map<String, Value>> = if nested {
        params.values().filter_map(Value::as_object).collect()
    } else {
        vec![params]
    };
    let kind = |rp: &Map<String, Value>| {
        rp.get("rope_type")
            .or_else(|| rp.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string()
    };
    let base = max_position?;
    let mut derived = base as f64;
    let mut factor = 1.0_f64;
    let mut named = Vec::new();
    for rp in &entries {
        let k = kind(rp);
        let f = rp.get("factor").and_then(Value::as_f64);
        if k != "default" {
            named.push(match f {
                Some(f) => format!("{k} ×{f}"),
                None => k.clone(),
            });
        }
        if scaled || matches!(k.as_str(), "su" | "longrope" | "llama3") {
            continue;
        }
        if let Some(f) = f {
            factor = f;
        }
        if k == "yarn"
            && let Some(o) = rp
                .get("original_max_position_embeddings")
                .and_then(Value::as_u64)
        {
            derived = o as f64;
        }
    }
    if named.is_empty() {
        return None;
    }
    let scaled = derived * factor;
    // A factor that is not a finite positive number reaches nothing we can name.
    let reach = (1.0..1e15).contains(&scaled).then_some(scaled as u64);
    let named = named.join(", ");
    let Some(reach) = reach else {
        notes.push(format!(
            "RoPE scaling {named}: its factor reaches no length that can be served; the positions stay max_position_embeddings ({base})"
        ));
        return None;
    };
    match Some(reach).filter(|r| *r != base) {
        Some(r) => {
            notes.push(format!(
                "RoPE scaling {named}: reaches {r} positions (max_position_embeddings {base}), the longest max-model-len vLLM derives"
            ));
            Some(r)
        }
        None => {
            notes.push(format!(
                "RoPE scaling {named}: already within max_position_embeddings ({base})"
            ));
            None
        }
    }
}
