//! The outcome of a rule: its lines, the pool, the tokens and sequences it holds, and
//! whether the engine starts — fits, *borderline* when the margin for one sequence is
//! within the assumed lines' uncertainty, or refused — for one card ([`EngineBudget`])
//! or every catalogue card ([`CardKv`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::drafter::Speculative;
use super::flags::EngineId;
use crate::estimate::Kind;

/// A line's inputs, by name.
pub(super) type Inputs = Vec<(&'static str, String)>;

/// One line an engine's rule adds or subtracts, per device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EngineLine {
    /// Stable key ("budget", "weights", "activation_peak", …).
    pub key: Cow<'static, str>,
    /// Human label.
    pub label: Cow<'static, str>,
    /// Bytes per device.
    pub bytes: u64,
    /// Computed (from the inputs and the engine's rule) or assumed.
    pub kind: Kind,
    /// Whether the rule subtracts it from the first line (false: shown only, e.g.
    /// vLLM 0.19's CUDA-graph line; 0.27's V1 runner subtracts its estimate).
    #[serde(default = "yes")]
    pub subtracted: bool,
    /// The formula, in words.
    pub formula: String,
    /// The formula's inputs.
    pub inputs: BTreeMap<Cow<'static, str>, String>,
    /// The engine source file the rule comes from.
    pub source: Cow<'static, str>,
}

fn yes() -> bool {
    true
}

/// How the engine's start-up ends for this workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Outcome {
    /// The pool holds a sequence of `max-model-len` with more than the uncertainty to spare.
    Fits,
    /// The margin is within the assumed lines' uncertainty of zero.
    Borderline,
    /// The engine refuses to start (no pool, or one sequence does not fit).
    Refused,
}

/// What an engine leaves for the KV cache on one card (per device of the tp × pp group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EngineBudget {
    /// The engine.
    pub engine: EngineId,
    /// The version whose rules were applied.
    pub version: String,
    /// Catalogue id of the card.
    pub card: String,
    /// Card name.
    pub card_name: String,
    /// The card's capacity (bytes) the rule starts from.
    pub capacity_bytes: u64,
    /// "torch" (the total torch reports), "torch, derived" (assumed), "reported" or "label".
    pub capacity_kind: String,
    /// The first line (the engine's share of the card), then every other line.
    pub lines: Vec<EngineLine>,
    /// Bytes left for the KV cache on the most loaded device: the share minus the
    /// subtracted lines; negative when the engine refuses to start.
    pub kv_capacity_bytes: i64,
    /// llama.cpp: the KV cache it allocates for its context cells (it sizes the cache
    /// from `-c`, not from free memory); `None` for pool engines.
    pub kv_cache_bytes: Option<u64>,
    /// llama.cpp: the model weights it keeps in host memory (its CPU buffer: the
    /// token embeddings, blocks left off the card by `-ngl`, tensors sent there by
    /// `--n-cpu-moe` or `--override-tensor`); `None` for the other engines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_weights_bytes: Option<u64>,
    /// KV bytes one token takes on that device (every layer, K and V).
    pub kv_bytes_per_token: u64,
    /// The engine's allocation unit in tokens (vLLM and TGI blocks; 1 otherwise).
    pub block_size: u64,
    /// Tokens the KV pool holds as the engine reports them ("GPU KV cache size").
    pub kv_capacity_tokens: u64,
    /// The sequence length served.
    pub max_model_len: u64,
    /// Sequences of `max_model_len` tokens the pool holds at once.
    pub max_sequences: u64,
    /// Whether one sequence of `max_model_len` tokens fits (vLLM refuses to start otherwise).
    pub fits_one_sequence: bool,
    /// Fits, borderline or refused.
    pub outcome: Outcome,
    /// The pool less what one sequence of `max_model_len` needs (negative: short).
    pub margin_bytes: i64,
    /// The sequences asked for (`sequences`), served at once.
    pub sequences: u64,
    /// The pool less what the asked sequences need at once (negative: short): the
    /// workload's own check, beside the engine's start-up check of one sequence.
    pub workload_margin_bytes: i64,
    /// Whether the pool holds the asked sequences at once.
    pub workload_outcome: Outcome,
    /// The assumed lines' uncertainty the margin is compared with.
    pub uncertainty_bytes: u64,
    /// An encoder-only model (vLLM's pooling runner, TEI): the most tokens one batch's
    /// forward takes. There is no KV pool: `kv_capacity_bytes` is what is still free on
    /// the card at that batch's peak, the KV tokens are 0 and `max_sequences` is the
    /// sequences of `max_model_len` one batch holds. `None`: a decoder's pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_tokens: Option<u64>,
    /// vLLM's drafter, with `speculative-method`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Speculative>,
    /// Several cards (`--card a,b`: llama.cpp's `--tensor-split`, vLLM's pipeline
    /// stages): each device's share and verdict, in device order. The budget's card and
    /// lines are then the most loaded device's (llama.cpp: the least headroom; vLLM: the
    /// fewest blocks, which the engine keeps on every GPU), and it fits only if every
    /// device does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceShare>,
    /// Hypotheses the figure rests on.
    pub assumptions: Vec<String>,
    /// Soft problems.
    pub warnings: Vec<String>,
}

/// One device of a split over several cards (llama.cpp's `--tensor-split`, vLLM's
/// pipeline stages): what it holds, what that needs there, and its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeviceShare {
    /// Its place in the device order (llama.cpp's CUDA0, CUDA1…).
    pub device: u64,
    /// Catalogue id of the card ("custom" for a typed capacity).
    pub card: String,
    /// Card name.
    pub card_name: String,
    /// The card's capacity, bytes.
    pub capacity_bytes: u64,
    /// Its share of the split, as text: llama.cpp's weight (`--tensor-split`'s value,
    /// or by default its free memory in bytes, as float32); vLLM's stage ("stage 1 of
    /// 2", with its tp rank).
    pub split: String,
    /// The repeating blocks it holds, in words ("blocks 0–23", "none").
    pub layers: String,
    /// How many repeating blocks (decoder layers) it holds.
    pub blocks: u64,
    /// Whether it holds the output layer.
    pub output_layer: bool,
    /// Model weights on it.
    pub weights_bytes: u64,
    /// The KV cache of its layers (llama.cpp: its cells; vLLM: one sequence of
    /// max-model-len).
    pub kv_bytes: u64,
    /// Its compute buffer (llama.cpp, assumed); vLLM: its profile's torch peak, the
    /// buffers for a previous stage's activations and the CUDA-graph estimate it
    /// subtracts.
    pub compute_bytes: u64,
    /// llama.cpp's `--mmproj` projector on it (device 0, the first GPU): its weights and
    /// its vision encoder's compute buffer (assumed); 0 elsewhere.
    #[serde(default)]
    pub mmproj_bytes: u64,
    /// The CUDA context on it (llama.cpp, assumed); vLLM: the memory outside torch.
    pub context_bytes: u64,
    /// What the engine leaves free on it: llama.cpp's `--fit` margin; vLLM's share the
    /// utilisation keeps off (total × (1 − gpu_memory_utilization)).
    pub fit_margin_bytes: u64,
    /// Everything above: what the device needs.
    pub need_bytes: u64,
    /// Capacity less need (negative: short).
    pub headroom_bytes: i64,
    /// The assumed lines' uncertainty its headroom is judged against.
    pub uncertainty_bytes: u64,
    /// Fits, borderline or refused, as the answer judges a card: the headroom against
    /// the uncertainty and, on a label capacity, what the label may lack.
    pub outcome: Outcome,
    /// Whether this is the most loaded device (the worst verdict, then the least
    /// headroom): the budget's card and lines are its.
    pub most_loaded: bool,
}

/// What the rows of llama.cpp's split over several cards ([`DeviceShare`]) add up to:
/// the words the CLI's table and the page's say under them.
pub const SPLIT_NOTE_LLAMA_CPP: &str = "need = weights + KV + compute buffer + CUDA context + 1 GiB --fit margin on each; token embeddings in host memory; the answer fits only if every GPU does";

/// What the rows of vLLM's pipeline stages over several cards ([`DeviceShare`]) add up
/// to: the words the CLI's table and the page's say under them.
pub const SPLIT_NOTE_VLLM: &str = "KV = one sequence of max-model-len on the GPU's layers; need = weights + KV + profile peak (+ received activations' buffers, CUDA graphs) + memory outside torch + the share gpu-memory-utilization keeps off + what the card holds beyond the total torch reports; every GPU keeps as many blocks as the one with the fewest (most loaded); the answer fits only if every GPU does";

#[allow(clippy::too_many_arguments)]
pub(super) fn line(
    key: &'static str,
    label: &'static str,
    bytes: u64,
    kind: Kind,
    formula: String,
    inputs: &[(&'static str, String)],
    source: &'static str,
) -> EngineLine {
    let map: BTreeMap<_, _> = inputs
        .iter()
        .map(|(k, v)| (Cow::Borrowed(*k), v.clone()))
        .collect();
    EngineLine {
        key: Cow::Borrowed(key),
        label: Cow::Borrowed(label),
        bytes,
        kind,
        subtracted: true,
        formula,
        inputs: map,
        source: Cow::Borrowed(source),
    }
}

/// One card's row of the engine fit table: the KV pool the engine leaves there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CardKv {
    /// Catalogue id.
    pub id: String,
    /// Card name.
    pub name: String,
    /// [`EngineBudget::kv_capacity_bytes`] on this card (negative: the engine refuses to start).
    pub kv_capacity_bytes: i64,
    /// [`EngineBudget::kv_capacity_tokens`].
    pub kv_capacity_tokens: u64,
    /// [`EngineBudget::max_sequences`].
    pub max_sequences: u64,
    /// [`EngineBudget::outcome`].
    pub outcome: Outcome,
}
