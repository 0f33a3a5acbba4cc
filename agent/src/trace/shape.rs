//! A config.json for the trace from the estimator's input alone, when there is no
//! config file: the page's dimensioner sends its inputs (layers, hidden size, heads,
//! …), not a file.
//!
//! Only what transformers builds exactly from those numbers is written: a dense
//! decoder with a gated (SwiGLU) MLP, RMSNorm and rotary positions — Llama's layout
//! (`LlamaConfig`), Qwen2's when q/k/v carry a bias and o does not (`Qwen2Config`), and
//! Qwen3's with q/k norms (`Qwen3Config`). Anything else (MoE, MLA, a mixer, learned
//! positions, sliding windows, attention sinks, …) is refused with its name: its
//! memory depends on code these configs do not run, and a trace of the wrong code would
//! be a wrong figure presented as traced.

use gpumem_core::arch::{Architecture, facts};
use gpumem_core::estimate::EstimateInput;
use serde_json::{Value, json};

/// The config.json of the dense decoder `input` describes, or why there is none.
pub fn config_for(input: &EstimateInput) -> Result<Value, String> {
    let Some(a) = &input.arch else {
        return Err("the trace needs the model's shape (layers, hidden size, heads, …): pick a model or fill in its shape".into());
    };
    if let Some(what) = unsupported(a, input) {
        return Err(format!(
            "{what}: the page's trace covers dense Llama-style decoders; for this model run `gpumem-agent trace --config config.json` with its own config"
        ));
    }
    // transformers' families (configuration_llama.py, configuration_qwen2.py,
    // configuration_qwen3.py; transformers 4.57 / 5.x): `attention_bias` puts a bias on
    // q, k, v and o in Llama and Qwen3; Qwen2 always has one on q, k and v, none on o.
    let model_type = match (a.qkv_bias, a.o_bias, a.qk_norm) {
        (_, _, true) if a.qkv_bias != a.o_bias => {
            return Err("q/k norms with a bias on q/k/v but not o: no family the trace builds from a shape has that".into());
        }
        (_, _, true) => "qwen3",
        (true, false, false) => "qwen2",
        _ => "llama",
    };
    if model_type == "qwen2" && a.mlp_bias {
        return Err("Qwen2's layout has no MLP bias".into());
    }
    let mut c = json!({
        "model_type": model_type,
        "vocab_size": a.vocab,
        "hidden_size": a.hidden,
        "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "tie_word_embeddings": a.tied_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": input.context.unwrap_or(4096).saturating_add(input.generate).max(4096),
        "use_cache": true,
    });
    match model_type {
        "llama" => {
            c["attention_bias"] = Value::Bool(a.qkv_bias);
            c["mlp_bias"] = Value::Bool(a.mlp_bias);
        }
        // Qwen2's q/k/v biases are built in (modeling_qwen2.py: `bias=True`), o has none.
        "qwen2" => c["use_sliding_window"] = Value::Bool(false),
        _ => {
            c["attention_bias"] = Value::Bool(a.qkv_bias);
            c["use_sliding_window"] = Value::Bool(false);
        }
    }
    Ok(c)
}

/// The facts a config of Llama's, Qwen2's or Qwen3's layout carries from a shape: its
/// sizes, tied embeddings, biases and per-head q/k norms. Any other fact of the table
/// ([`gpumem_core::arch::facts`]) not at its default is refused by its key, so a fact
/// added to the table is refused here until a layout carries it.
const CARRIED: &[&str] = &[
    // The rotary embedding every written family builds (one table; more are refused).
    "rope-tables",
    "layers",
    "hidden",
    "heads",
    "kv-heads",
    "head-dim",
    "intermediate",
    "vocab",
    "tied-embeddings",
    "qkv-bias",
    "o-bias",
    "mlp-bias",
    "qk-norm",
];

/// The first feature of `a` (or of the input) a dense Llama-style config cannot carry.
fn unsupported(a: &Architecture, input: &EstimateInput) -> Option<String> {
    let part = [
        (a.moe.is_some(), "mixture of experts"),
        (a.mla.is_some(), "multi-head latent attention"),
        (a.mixer.is_some(), "a state-space or linear-attention mixer"),
        (
            a.global_attn.is_some(),
            "global layers with their own KV shape",
        ),
        (a.indexer.is_some(), "a sparse-attention indexer"),
        (input.sliding_window.is_some(), "sliding-window attention"),
        (a.rope_tables > 1, "rotary tables per layer type"),
    ]
    .into_iter()
    .find_map(|(yes, what)| yes.then_some(what.to_string()));
    part.or_else(|| {
        facts().find_map(|f| {
            let v = f.value(a)?;
            let label = gpumem_core::params::field(f.key).map_or(f.key, |g| g.label);
            (!CARRIED.contains(&f.key) && Some(v) != f.default_value())
                .then(|| format!("{label} ({}={})", f.key, v.text().unwrap_or_default()))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem_core::import::config as hf_config;

    fn input_of(path: &str) -> EstimateInput {
        let text = std::fs::read_to_string(format!(
            "{}/../crates/gpumem-core/tests/cases/configs/{path}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let c = hf_config::parse_config(&text).unwrap();
        let pairs: Vec<(String, String)> = c
            .pairs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let (input, errors) =
            gpumem_core::params::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        input
    }

    /// The config written from Llama-3.2-1B's shape reads back through the same config
    /// reader to the same architecture: nothing the estimate counts was lost.
    #[test]
    fn a_dense_decoder_round_trips_through_the_config_reader() {
        for name in ["llama-3.2-1b.json", "qwen2.5-0.5b.json", "qwen3-0.6b.json"] {
            let input = input_of(name);
            let config = config_for(&input).unwrap();
            assert!(
                name.starts_with(
                    config["model_type"]
                        .as_str()
                        .unwrap()
                        .trim_end_matches(".5")
                ),
                "{name}: {}",
                config["model_type"]
            );
            let back = hf_config::parse_config(&config.to_string()).unwrap();
            let pairs: Vec<(String, String)> = back
                .pairs()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            let (again, errors) = gpumem_core::params::from_pairs(
                pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            );
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!(again.arch, input.arch, "{name}");
        }
    }

    #[test]
    fn what_the_shape_cannot_say_is_refused_by_name() {
        let no_shape = config_for(&EstimateInput::default()).unwrap_err();
        assert!(no_shape.contains("shape"), "{no_shape}");
        let mut moe = input_of("llama-3.2-1b.json");
        let mut a = moe.arch.unwrap();
        a.learned_positions = 2048;
        moe.arch = Some(a);
        let e = config_for(&moe).unwrap_err();
        assert!(e.contains("learned-positions=2048"), "{e}");
        assert!(e.contains("gpumem-agent trace --config"), "{e}");
        for (name, what) in [
            ("mistral-7b-v0.1.json", "sliding-window"),
            ("mixtral-8x7b.json", "mixture of experts"),
            ("deepseek-v2-lite.json", "mixture of experts"),
            ("gpt2.json", "gated-mlp=false"),
        ] {
            let e = config_for(&input_of(name)).unwrap_err();
            assert!(e.contains(what), "{name}: {e}");
        }
    }
}
