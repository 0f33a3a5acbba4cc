//! The `Family` record: everything the estimator knows of a model family beyond the
//! generic decoder keys — its facts over [`Architecture::BASE`] (norms per layer,
//! biases, q/k norms, tied embeddings), how its config is read (positions, the
//! sliding-window pattern, which its GGUF headers share, MoE details, whether its
//! positions already include the RoPE scaling) and the optional hooks where its layers
//! differ (a mixer, its own MoE blocks or layer map, its vision tower, a whole reader of
//! its own). One family per file in `families/`; the registry there maps `model_type`
//! names to the records.

use serde_json::Value;

use crate::arch::Architecture;
use crate::error::EstimateError;

use super::ImportedConfig;
use super::decoder::Draft;
use super::json::Cfg;

/// Which layers keep only the last `sliding_window` tokens when the config does
/// not list `layer_types`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sliding {
    /// Every layer.
    All,
    /// Every other layer, from the first (Gemma-2).
    Alternate,
    /// All but every `sliding_window_pattern`-th layer (Gemma-3; the default).
    Pattern(u8),
    /// The layers from `max_window_layers` on (Qwen2).
    FromMaxWindowLayers,
}

/// The routers' bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouterBias {
    /// None.
    No,
    /// Always (gpt-oss's router bias).
    Yes,
    /// An fp32 `e_score_correction_bias` with `topk_method` `noaux_tc` (DeepSeek-V2:
    /// vLLM's `DeepseekV2MoE` builds it only then).
    NoauxTc,
    /// An fp32 `e_score_correction_bias` always (GLM-4.5 and later's routers).
    Correction,
}

/// A family's hook: reads what the generic decoder cannot and edits the draft.
pub(crate) type Hook = fn(&Cfg, &mut Draft) -> Result<(), EstimateError>;

/// A vision tower counted from its own config: (the root config, its `vision_config`,
/// the text model's hidden size) → the tower's and its projector's parameters and, where
/// the processor fixes them, one image's prompt tokens and pixel values; `None` for a
/// tower this family's counter does not know.
pub(crate) type Tower = fn(&Cfg, &Value, u64) -> Result<Option<TowerCount>, EstimateError>;

/// Reads what the root config (the multimodal wrapper's) says of the language model's
/// layers beyond its `text_config`: Mllama's vision tokens per image, which its
/// cross-attention layers attend to.
pub(crate) type RootHook = fn(&Cfg, &mut Draft) -> Result<(), EstimateError>;

/// A patch embedding counted from the root config: (the root config, the text model's
/// hidden size) → its parameters.
pub(crate) type Patches = fn(&Cfg, u64) -> Result<u64, EstimateError>;

/// A counted vision tower's rotary tables: its `vision_config` → their bytes.
pub(crate) type TowerRope = fn(&Value) -> Result<u64, EstimateError>;

/// A vision tower's shape where its forward is derived: (the root config, its
/// `vision_config`) → the shape ([`crate::arch::VisionTower`]); `None` for a tower the
/// reader does not derive.
pub(crate) type TowerShape =
    fn(&Cfg, &Value) -> Result<Option<crate::arch::VisionTower>, EstimateError>;

/// An audio tower's shape where its forward is derived: its `audio_config` → the
/// shape ([`crate::arch::AudioTower`]); `None` for a tower the reader does not derive.
pub(crate) type AudioShape = fn(&Value) -> Result<Option<crate::arch::AudioTower>, EstimateError>;

/// A counted tower: its parameters and one image (prompt tokens, pixel values).
pub(crate) type TowerCount = (u64, Option<(u64, u64)>);

/// A reader of its own, for families that are no decoder of attention layers at all
/// (Mamba): the text-level config, its `model_type`, the notes so far.
pub(crate) type Whole = fn(&Cfg, &str, Vec<String>) -> Result<ImportedConfig, EstimateError>;

/// One model family: its `model_type` names, transformers' config class, its
/// defaults and its hooks. Families start from [`BASE`] (a Llama-style decoder) and
/// say only what differs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Family {
    /// `model_type` values (text or root) read with this record, space-separated.
    pub types: &'static str,
    /// transformers' configuration class, named when one of its defaults is assumed.
    pub class: &'static str,
    /// Whether every tensor of the family is modelled; otherwise it is read with
    /// these rules and a warning says so.
    pub modelled: bool,
    /// The family's facts where its config does not set them (transformers' model
    /// class builds them so): tied embeddings when `tie_word_embeddings` is absent, the
    /// MLP's gate, biases it always has (GPT-2's on every linear layer, Qwen2's on q/k/v),
    /// norms per layer, q/k norms, LayerNorm with bias, sinks. It starts from
    /// [`Architecture::BASE`] and names only what differs; the sizes come from the
    /// config. The decoder reads its keys over it, a hook may edit the result.
    pub arch: Architecture,
    /// `head_dim` when absent; 0 = hidden / heads.
    pub head_dim: u16,
    /// Reads `multi_query` (default true): one K/V head (Falcon, GPTBigCode).
    pub multi_query: bool,
    /// A learned position table of `n_positions` rows (GPT-2).
    pub positions: bool,
    /// Layers that keep a window, when `layer_types` does not list them (and in a GGUF
    /// header of one of the `gguf` architectures).
    pub sliding: Sliding,
    /// llama.cpp's names of the family (`general.architecture`, space-separated): a
    /// GGUF header of one of them keeps the window in the layers `sliding` says, as
    /// llama.cpp's `hparams.set_swa_pattern` does (src/llama-model.cpp).
    pub gguf: &'static str,
    /// `max_position_embeddings` already includes the RoPE scaling: vLLM applies no
    /// factor (its `_get_and_verify_max_len` skips model types containing `gemma3`).
    pub scaled_positions: bool,
    /// The routers' bias.
    pub router_bias: RouterBias,
    /// A sigmoid gate on the shared expert's output (Qwen2-MoE, Qwen3-Next).
    pub shared_gate: bool,
    /// The router casts its top-k weights to the compute dtype (Qwen2-MoE's,
    /// Qwen3-MoE's, Qwen3-Next's: [`crate::arch::Moe::router_casts`]).
    pub router_casts: bool,
    /// The router's logits are fp32 (GraniteMoE's:
    /// [`crate::arch::Moe::router_fp32_logits`]).
    pub router_fp32_logits: bool,
    /// Every how many layers an MoE layer comes when the config does not say.
    pub moe_every: u8,
    /// Keys the published configs leave out, filled with the class's defaults.
    pub defaults: &'static [(&'static str, u64)],
    /// `layer_types` entries beyond `sliding_attention` and `full_attention`
    /// (space-separated).
    pub layer_types: &'static str,
    /// Keys of this family known to change nothing in memory (space-separated).
    pub inert: &'static str,
    /// Reads what the generic decoder does not (a mixer, MoE blocks, layer maps).
    pub hook: Option<Hook>,
    /// Counts the vision tower of a config whose root `model_type` is this record's.
    pub tower: Option<Tower>,
    /// Counts its audio tower (`audio_config`), alike.
    pub audio: Option<Tower>,
    /// The bytes of the rotary tables its counted vision tower keeps, from the
    /// tower's config ([`Architecture::tower_rope_bytes`]); `None`: no such table.
    pub tower_rope: Option<TowerRope>,
    /// The shape of its vision tower, where the estimate derives the tower's forward
    /// over an image ([`Architecture::vision`]); `None`: not derived.
    pub vision: Option<TowerShape>,
    /// The shape of its audio tower, where the estimate derives the tower's forward
    /// over a clip ([`Architecture::audio`]); `None`: not derived.
    pub audio_shape: Option<AudioShape>,
    /// Reads the root config into the draft, for a config whose root `model_type` is
    /// this record's (after the hook).
    pub root_hook: Option<RootHook>,
    /// Counts a patch embedding the root config sizes without a `vision_config`
    /// (Fuyu's `vision_embed_tokens`): (the root config, the text model's hidden size)
    /// → its parameters.
    pub patches: Option<Patches>,
    /// Reads the whole config instead of the generic decoder.
    pub whole: Option<Whole>,
    /// Rotary embeddings whose frequency buffers the model keeps
    /// ([`Architecture::rope_tables`]): 1 (a Llama-style decoder's one
    /// `rotary_emb`), 2 (one pair per layer type), 0 (no rotary buffers: learned or no
    /// positions, ALiBi; or rotary tables of another layout, not counted).
    pub rope_tables: u8,
    /// `partial_rotary_factor` when the config does not state it (the config class's
    /// default, e.g. PhiConfig's 0.5); 1.0 = the whole head rotates.
    pub rotary_fraction: f64,
}

/// A Llama-style decoder: gated MLP, RMSNorm before attention and MLP, no biases,
/// untied embeddings, RoPE (no position table).
pub(crate) const BASE: Family = Family {
    types: "",
    class: "",
    modelled: true,
    arch: Architecture::BASE,
    head_dim: 0,
    multi_query: false,
    positions: false,
    sliding: Sliding::All,
    gguf: "",
    scaled_positions: false,
    router_bias: RouterBias::No,
    shared_gate: false,
    router_casts: false,
    router_fp32_logits: false,
    moe_every: 1,
    defaults: &[],
    layer_types: "",
    inert: "",
    hook: None,
    tower: None,
    audio: None,
    tower_rope: None,
    vision: None,
    audio_shape: None,
    root_hook: None,
    patches: None,
    whole: None,
    rope_tables: 1,
    rotary_fraction: 1.0,
};

/// What an unknown `model_type` is read as: the generic decoder, tied embeddings
/// when the config does not say (transformers' `PretrainedConfig` default).
pub(crate) const GENERIC: Family = Family {
    modelled: false,
    arch: Architecture {
        tied_embeddings: true,
        ..Architecture::BASE
    },
    ..BASE
};

impl Family {
    /// How many of `layers` keep the window in a GGUF model of llama.cpp's `arch`, by the
    /// record that names it (every `n`-th layer full: `layers − ⌊layers / n⌋`); `None`
    /// when no record names it or its pattern is no period.
    pub(crate) fn gguf_sliding_layers(arch: &str, layers: u64) -> Option<u64> {
        let f = super::families::all().find(|f| f.gguf.split(' ').any(|g| g == arch))?;
        let every = match f.sliding {
            Sliding::Alternate => 2,
            Sliding::Pattern(p) => u64::from(p),
            Sliding::All | Sliding::FromMaxWindowLayers => return None,
        };
        Some(layers.saturating_sub(layers.checked_div(every).unwrap_or(0)))
    }

    /// The record of `model_type`, if registered.
    pub(crate) fn find(model_type: &str) -> Option<&'static Family> {
        super::families::all().find(|f| f.types.split(' ').any(|t| t == model_type))
    }
}
