//! The architecture mode: a decoder-only transformer's shape, split into parameter
//! classes so that each class is counted in its own storage format.
//!
//! Quantisers (GPTQ, AWQ, bitsandbytes, fp8, GGUF k-quants) convert the linear
//! layers of attention and MLP blocks; embeddings, the lm_head, norms, biases and MoE
//! routers usually stay in 16 bits. Counting them as one "4-bit model" is the error
//! method §2 warns against.

// Checked arithmetic only: every dimension here comes from user input.
#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use crate::error::EstimateError;
use crate::field::{Field, FieldGroup, FieldKind};
use crate::format::{Dtype, GgufType, MixModel, MixTensor, StorageFormat, TensorCategory};
use crate::units::checked_product;

/// Mixture-of-experts feed-forward blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub experts: u64,
    /// Experts each token is routed to.
    pub active: u64,
    /// Intermediate size of one routed expert.
    pub expert_intermediate: u64,
    /// Always-on shared experts per MoE layer (DeepSeek, Qwen2-MoE, Llama-4); 0 if none.
    pub shared_experts: u64,
    /// Intermediate size of one shared expert.
    pub shared_intermediate: u64,
    /// Layers among the MLP layers that keep a dense MLP: DeepSeek's leading
    /// `first_k_dense_replace`, Nemotron-3's `-` blocks (only their count matters).
    pub dense_layers: u64,
    /// After the leading dense layers, every `every`-th layer is MoE and the others
    /// dense (Llama-4's `interleave_moe_layer_step`, Qwen-MoE's `decoder_sparse_step`).
    pub every: u64,
    /// A 16-bit bias on the router (gpt-oss's, Kimi-Linear's bf16 correction bias).
    pub router_bias: bool,
    /// The router's `e_score_correction_bias` kept in fp32 (4 bytes each, whatever
    /// the format): DeepSeek-V3's `noaux_tc` routers and their kin (Kimi-K2, GLM-4.5 and
    /// later, Nemotron-3), as their checkpoints store it.
    #[serde(default)]
    pub correction_bias: bool,
    /// A sigmoid gate `[1, hidden]` on the shared expert's output per MoE layer
    /// (Qwen2-MoE's and Qwen3-Next's `shared_expert_gate`).
    pub shared_gate: bool,
    /// Nemotron-3 Super's latent MoE (`moe_latent_size`): the routed experts work at
    /// this width between `fc1_latent_proj` [latent, hidden] and `fc2_latent_proj`
    /// [hidden, latent]; the router and the shared expert stay at the hidden width
    /// (transformers' and vLLM's `NemotronHMoE`). 0 = none.
    #[serde(default)]
    pub latent: u64,
    /// One bias `[hidden]` added to each MoE block's output, after the experts are
    /// summed (JetMoE's `JetMoeMoE.bias`, transformers 5.23
    /// `models/jetmoe/modeling_jetmoe.py`), rather than biases on every expert.
    #[serde(default)]
    pub output_bias: bool,
    /// DeepSeek-V2's group-limited router (`topk_method` `group_limited_greedy`,
    /// transformers 5.23 `models/deepseek_v2/modeling_deepseek_v2.py`
    /// `DeepseekV2TopkRouter.forward`): the top-k runs over the experts of the
    /// `topk_group` best groups, the others masked out of the scores first.
    #[serde(default)]
    pub group_limited: bool,
    /// The router casts its top-k weights to the compute dtype before the experts
    /// weigh their outputs by them (transformers 5.23 `Qwen2MoeTopKRouter.forward`,
    /// `Qwen3MoeTopKRouter.forward`: `router_top_value.to(router_logits.dtype)`);
    /// without it they stay fp32 (`MixtralTopKRouter.forward`), and the product of
    /// the experts' outputs by them, the reordering and the sum are fp32 too.
    #[serde(default)]
    pub router_casts: bool,
    /// The router's logits are fp32 (transformers 5.23 `GraniteMoeTopKRouter.forward`:
    /// `F.linear(hidden_states, self.weight).float()`), which the MoE block holds while
    /// its experts run; otherwise they are in the compute dtype (Mixtral's, the Qwen
    /// routers').
    #[serde(default)]
    pub router_fp32_logits: bool,
    /// Every routed expert runs over every token, on a copy of the input weighed by the
    /// router's sigmoid score (zero for the experts not chosen), as one batched matmul
    /// over all experts (transformers 5.23 `models/llama4/modeling_llama4.py`,
    /// `Llama4TextMoe.forward` and `Llama4TextExperts.forward`: Llama-4's block).
    #[serde(default)]
    pub dense_dispatch: bool,
}

impl Moe {
    /// MoE layers among `layers`: layer `i` (0-based) is MoE when `i ≥ dense_layers`
    /// and `(i + 1) % every == 0` — transformers' Llama-4 and Qwen-MoE rule.
    pub fn moe_layers(&self, layers: u64) -> u64 {
        let every = self.every.max(1);
        // `every` is at least 1.
        let per = |n: u64| n.checked_div(every).unwrap_or(0);
        per(layers).saturating_sub(per(self.dense_layers))
    }
}

/// Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values pass
/// through low-rank projections, and engines cache the compressed latent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mla {
    /// Rank of the query compression (`q_lora_rank`); 0 = a plain `q_proj`.
    pub q_lora_rank: u64,
    /// Rank of the key/value latent (`kv_lora_rank`).
    pub kv_lora_rank: u64,
    /// Per-head query/key width without rotary embedding (`qk_nope_head_dim`).
    pub qk_nope_dim: u64,
    /// Per-head rotary width, shared by all heads in the latent (`qk_rope_head_dim`).
    pub qk_rope_dim: u64,
    /// Per-head value width (`v_head_dim`).
    pub v_head_dim: u64,
}

/// DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2, GLM-5), beside MLA
/// in every attention layer: `wq_b` [heads × head_dim, q_lora_rank], `wk` [head_dim,
/// hidden], `k_norm` (a LayerNorm: weight and bias) [head_dim], `weights_proj` [heads,
/// hidden] (DeepSeek-V3.2's inference/model.py `Indexer`; the checkpoint's
/// `self_attn.indexer.*`). Its keys are cached beside the latent: per token and
/// layer `head_dim` fp8 values and one fp32 scale per 128 (vLLM's
/// `DeepseekV32IndexerCache`: head_dim + head_dim / 128 × 4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Indexer {
    /// Indexer heads (`index_n_heads`).
    pub heads: u64,
    /// Indexer head width (`index_head_dim`).
    pub head_dim: u64,
}

impl Indexer {
    /// Bytes of the indexer key cache per token and layer as `runtime` keeps it, with
    /// the model's values `value` bytes wide.
    ///
    /// - Serving (vLLM v0.19.0 `vllm/model_executor/models/deepseek_v2.py`,
    ///   `DeepseekV32IndexerCache`): fp8 keys and one fp32 scale per 128, `head_dim +
    ///   head_dim / 128 × 4` bytes, whatever the KV dtype.
    /// - transformers 5.23 (`cache_utils.py`, `DynamicIndexedLayer.update_indexer`):
    ///   the indexer's keys `[batch, tokens, head_dim]` concatenated as the model
    ///   computed them, in its dtype (`DeepseekV32Indexer`'s `k_norm` output).
    pub fn key_bytes(&self, runtime: CacheRuntime, value: u64) -> u64 {
        match runtime {
            CacheRuntime::Serving => self
                .head_dim
                .saturating_add(self.head_dim.div_ceil(128).saturating_mul(4)),
            CacheRuntime::Transformers => self.head_dim.saturating_mul(value),
        }
    }
}

/// A vision tower's shape, as far as its forward over an image is derived
/// (`estimate::tower`, transformers' runtime): Gemma 3's SigLIP tower with its pooling
/// projector (`merge` 0: a fixed `image` side, pooled to the prompt's tokens) and
/// PaliGemma's (`merge` 0 and `out` > 0: a linear to `out` over every patch); the
/// Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Qwen3.5 towers (`merge` ≥ 1, `image` 0: patches of
/// `temporal` frames merged `merge` × `merge` into one token; Qwen2.5-VL's window
/// attention, Qwen3-VL's interpolated learned positions and deepstack mergers); Llama
/// 4's (`merge` ≥ 1 and `image` > 0: tiles `image` square with a class token,
/// pixel-shuffled `merge` × `merge` to `out`). Read from the config's `vision_config`
/// by the families whose tower forward is derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VisionTower {
    /// The tower's width (`hidden_size`).
    pub hidden: u64,
    /// Its layers (`num_hidden_layers`, `depth`).
    pub layers: u64,
    /// Its attention heads.
    pub heads: u64,
    /// Its MLP intermediate size.
    pub intermediate: u64,
    /// Pixels a side of one patch.
    pub patch: u64,
    /// Frames one patch spans (Qwen's `temporal_patch_size`; 1 for SigLIP).
    pub temporal: u64,
    /// Channels of the image (`num_channels`, `in_channels`).
    pub channels: u64,
    /// Patches merged a side into one token by the patch merger (Qwen: 2); 0: none,
    /// the projector pools the fixed grid (Gemma 3).
    pub merge: u64,
    /// The fixed image side the processor resizes to, pixels (Gemma 3: 896); 0: the
    /// image's own size.
    pub image: u64,
    /// Window attention's window side, pixels (Qwen2.5-VL's `window_size`: 112); 0: none.
    pub window: u64,
    /// Blocks attending over the whole image beside the windowed ones (Qwen2.5-VL's
    /// `fullatt_block_indexes`).
    pub full_layers: u64,
    /// Deepstack mergers whose outputs go to the language model (Qwen3-VL: 3).
    pub deepstack: u64,
    /// Width of the merger's output (`out_hidden_size`).
    pub out: u64,
    /// Taps of the learned positions' interpolation per patch (Qwen3-VL's bilinear: 4);
    /// 0: none.
    pub pos_taps: u64,
    /// Patches pooled a side into one soft token after the encoder (Gemma 4's
    /// `pooling_kernel_size`: 3); 0: not Gemma 4's tower.
    pub pool: u64,
    /// The attention's head size (Gemma 4's `head_dim`); 0: hidden ÷ heads.
    pub head_dim: u64,
    /// The attention's key/value heads (Gemma 4's `num_key_value_heads`); 0: as many
    /// as heads.
    pub kv_heads: u64,
    /// Whether every projection clamps its input and output (Gemma 4's
    /// `use_clipped_linears`).
    pub clipped: bool,
}

impl VisionTower {
    /// The tower's facts before its config is read.
    pub const BASE: VisionTower = VisionTower {
        hidden: 0,
        layers: 0,
        heads: 0,
        intermediate: 0,
        patch: 0,
        temporal: 1,
        channels: 3,
        merge: 0,
        image: 0,
        window: 0,
        full_layers: 0,
        deepstack: 0,
        out: 0,
        pos_taps: 0,
        pool: 0,
        head_dim: 0,
        kv_heads: 0,
        clipped: false,
    };
}

/// An audio tower's shape, as far as its forward over a clip is derived
/// (`estimate::audio`, transformers' runtime): Qwen2-Audio's Whisper-style encoder
/// (transformers 5.23 `models/qwen2_audio/modeling_qwen2_audio.py`
/// `Qwen2AudioEncoder`: two convolutions over `mels` mel bins, the second of stride 2,
/// `layers` pre-norm layers of `heads` heads over `positions` frames, an average pool of
/// 2, and `Qwen2AudioMultiModalProjector`'s linear to the text width). Read from the
/// config's `audio_config` (`d_model`, `encoder_layers`, `encoder_attention_heads`,
/// `encoder_ffn_dim`, `num_mel_bins`, `max_source_positions`). Or Gemma 4's conformer
/// (`chunk` > 0; `models/gemma4/modeling_gemma4.py` `Gemma4AudioModel`: two stride-2
/// subsampling convolutions, `layers` conformer layers of `heads` heads with chunked
/// local attention, `output_proj` and `Gemma4MultimodalEmbedder`), read from
/// Gemma4AudioConfig's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AudioTower {
    /// The encoder's width (`d_model`).
    pub hidden: u64,
    /// Its layers (`encoder_layers`).
    pub layers: u64,
    /// Its attention heads (`encoder_attention_heads`).
    pub heads: u64,
    /// Its MLP width (`encoder_ffn_dim`).
    pub intermediate: u64,
    /// Mel bins of the input features (`num_mel_bins`).
    pub mels: u64,
    /// Frames after the second convolution (`max_source_positions`): the encoder
    /// takes exactly twice as many feature frames, 30 s of audio at 1 500. Gemma 4:
    /// the most soft tokens a clip gives (`Gemma4Processor.audio_seq_length`, 750).
    pub positions: u64,
    /// Gemma 4's conformer (`Gemma4AudioModel`): the local attention's chunk of
    /// frames (`attention_chunk_size`, 12); 0: Qwen2-Audio's Whisper-style encoder.
    pub chunk: u64,
    /// Its left context, the chunk's own frame included (`attention_context_left`, 13).
    pub context_left: u64,
    /// Its right context (`attention_context_right`, 0).
    pub context_right: u64,
    /// Channels of its first subsampling convolution (`subsampling_conv_channels[0]`, 128).
    pub conv_channels: u64,
    /// Channels of its second (`subsampling_conv_channels[1]`, 32).
    pub conv_out: u64,
    /// Its light convolution's kernel (`conv_kernel_size`, 5).
    pub kernel: u64,
    /// Width of its output projection (`output_proj_dims`, 1536).
    pub output: u64,
    /// Its linears clamp their input and output (`use_clipped_linears`).
    pub clipped: bool,
}

impl AudioTower {
    /// The tower's facts before its config is read (Qwen2AudioEncoderConfig's mel
    /// bins and positions).
    pub const BASE: AudioTower = AudioTower {
        hidden: 0,
        layers: 0,
        heads: 0,
        intermediate: 0,
        mels: 128,
        positions: 1500,
        chunk: 0,
        context_left: 0,
        context_right: 0,
        conv_channels: 0,
        conv_out: 0,
        kernel: 0,
        output: 0,
        clipped: false,
    };
}

/// Whose cache layout the recurrent-state and indexer lines follow. transformers'
/// own cache (no engine named, or the `transformers` engine) keeps the whole
/// convolution window and most recurrent states in fp32, and the indexer's keys in the
/// model's dtype; the serving engines (vLLM, and the engines whose rules here follow
/// its layout) keep the convolution window less its newest input and the state in the
/// model's dtype, and fp8 indexer keys. The larger is transformers'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheRuntime {
    /// transformers 5.23's cache classes (`cache_utils.py`).
    #[default]
    Transformers,
    /// A serving engine's pool, as vLLM allocates it.
    Serving,
}

impl CacheRuntime {
    /// Whose layout, in words (the lines' `layout` input).
    pub const fn name(self) -> &'static str {
        match self {
            CacheRuntime::Transformers => "transformers 5.23",
            CacheRuntime::Serving => "vLLM",
        }
    }
}

/// One state layer's per-sequence state as a runtime keeps it: the convolution
/// window's values (in the model's dtype), the recurrent state's values, and the bytes
/// of one recurrent value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateShape {
    /// Convolution-window values, in the model's dtype.
    pub conv: u64,
    /// Recurrent-state values.
    pub recurrent: u64,
    /// Bytes of one recurrent value.
    pub recurrent_bytes: u64,
}

impl StateShape {
    /// Bytes per layer and sequence, the model's values `value` bytes wide.
    pub fn bytes(&self, value: u64) -> Result<u64, EstimateError> {
        let what = "recurrent state";
        add(
            checked_product(&[self.conv, value], what)?,
            checked_product(&[self.recurrent, self.recurrent_bytes], what)?,
            what,
        )
    }
}

/// Per-layer input embeddings (Gemma 4's and Gemma 3n's PLE, transformers 5.23
/// `models/gemma4/modeling_gemma4.py`): a second token table `embed_tokens_per_layer`
/// [vocab, layers × width] and `per_layer_model_projection` [layers × width, hidden]
/// with its RMSNorm [width] feed every layer a `width`-wide signal, which each
/// `Gemma4TextDecoderLayer` gates (`per_layer_input_gate` [width, hidden]), projects
/// back (`per_layer_projection` [hidden, width]) and norms
/// (`post_per_layer_input_norm` [hidden]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerLayerInput {
    /// Width of each layer's input (`hidden_size_per_layer_input`).
    pub width: u64,
    /// Rows of its token table (`vocab_size_per_layer_input`).
    pub vocab: u64,
}

impl PerLayerInput {
    /// The per-layer input's facts before its keys are read.
    pub const BASE: PerLayerInput = PerLayerInput { width: 0, vocab: 0 };
}

/// KV sharing (Gemma 4's `num_kv_shared_layers`, transformers 5.23
/// `models/gemma4/configuration_gemma4.py` `kv_sharing_modes`,
/// `modeling_gemma4.py` `Gemma4TextAttention`, `Gemma4TextMLP`): the last `layers`
/// layers reuse the K and V of the last earlier layer of their type, so they keep no
/// cache (`cache_utils.py` `get_layer_types_and_kwargs` gives them a "dummy" layer)
/// and hold no `k_proj`, `v_proj` or `k_norm`; `global` of them are global
/// (full-attention) layers. With `double_wide_mlp` their MLP is twice as wide
/// (`use_double_wide_mlp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvShare {
    /// The trailing layers that reuse an earlier layer's K and V.
    pub layers: u64,
    /// How many of them are global (full-attention) layers: [`GlobalAttn`]'s where the
    /// model has them, the unwindowed ones otherwise.
    pub global: u64,
    /// Their MLP is twice as wide.
    pub double_wide_mlp: bool,
}

impl KvShare {
    /// KV sharing's facts before its keys are read.
    pub const BASE: KvShare = KvShare {
        layers: 0,
        global: 0,
        double_wide_mlp: false,
    };
}

/// Shared transformer blocks (Zamba2: transformers' `Zamba2HybridLayer`,
/// `models/zamba2/modeling_zamba2.py`): `blocks` attention-and-MLP blocks whose weights
/// `uses` layers share in turn (`num_mem_blocks`, the `hybrid` layers), each use with
/// its own K and V, a `linear` hidden × hidden of its own and its own low-rank adapters.
/// The blocks read `width` values per token (the hidden state beside the original
/// embeddings: 2 × hidden): q/k/v from `width`, o_proj back to hidden, an RMSNorm over
/// `width` before attention and one over hidden before the gated MLP
/// (`Zamba2AttentionDecoderLayer`). The model's own layers are then the mixer's and
/// their norms alone (`attention-layers` = `uses` for the KV cache, no MLP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedAttn {
    /// Distinct blocks (`num_mem_blocks`, at most `uses`).
    pub blocks: u64,
    /// Layers that run a block (each keeps its own KV cache).
    pub uses: u64,
    /// Values per token the blocks' attention reads.
    pub width: u64,
    /// Rank of each use's adapter on the MLP's gate/up projection (`adapter_rank`;
    /// `Zamba2MLP.gate_up_proj_adapter_list`); 0 = none.
    pub mlp_adapter_rank: u64,
    /// Rank of each use's adapters on q, k and v (`use_shared_attention_adapter`;
    /// `Zamba2Attention.linear_q/k/v_adapter_list`); 0 = none.
    pub attn_adapter_rank: u64,
}

impl SharedAttn {
    /// Shared blocks' facts before their keys are read.
    pub const BASE: SharedAttn = SharedAttn {
        blocks: 0,
        uses: 0,
        width: 0,
        mlp_adapter_rank: 0,
        attn_adapter_rank: 0,
    };
}

/// Global layers with their own attention shape (Gemma 4): `layers` of the attention
/// layers — the ones without a window — use `kv_heads` and `head_dim` instead of the
/// model's, and with `k_eq_v` their values are their keys (no `v_proj`; the cache
/// still holds K and V). transformers' `Gemma4TextAttention`:
/// `num_global_key_value_heads`, `global_head_dim`, `attention_k_eq_v`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalAttn {
    /// Global layers.
    pub layers: u64,
    /// Their KV heads.
    pub kv_heads: u64,
    /// Their head width (queries, keys, values).
    pub head_dim: u64,
    /// No `v_proj`: the values are the keys.
    pub k_eq_v: bool,
}

/// The mixer that replaces attention in a hybrid's (or a pure state-space model's)
/// other layers; each such layer keeps a constant per-sequence state instead of KV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MixerKind {
    /// Mamba-1 selective scan (transformers' `MambaMixer`, Jamba's `JambaMambaMixer`).
    Mamba,
    /// Gated DeltaNet linear attention (Qwen3-Next's `Qwen3NextGatedDeltaNet`).
    DeltaNet,
    /// Mamba-2 (transformers' `Mamba2Mixer`): multi-head SSM with grouped B/C.
    Mamba2,
    /// Kimi Delta Attention (Kimi-Linear's `KimiDeltaAttention`): gated delta rule
    /// with per-channel decay, short convolutions on q, k and v.
    Kda,
    /// A gated short convolution (LFM2's `Lfm2ShortConv`,
    /// transformers `models/lfm2/modeling_lfm2.py`): `in_proj` to B, C and x (3 ×
    /// hidden), a depthwise `conv` of `conv` taps over B·x, `out_proj`; no recurrent
    /// state, only the convolution's window.
    ShortConv,
    /// Lightning attention (MiniMax-Text-01's `MiniMaxLightningAttention`,
    /// transformers `models/minimax/modeling_minimax.py`): a fused `qkv_proj`, an
    /// `output_gate`, an RMSNorm over all heads, `out_proj`; per head a `head dim ×
    /// head dim` state; decay tables of `block` positions kept as buffers.
    Lightning,
    /// Griffin's recurrent block (RecurrentGemma's `RecurrentGemmaRecurrentBlock`,
    /// transformers `models/recurrent_gemma/modeling_recurrent_gemma.py`): `linear_x`
    /// and `linear_y` to the LRU width, a depthwise conv with bias, the RG-LRU
    /// (block-diagonal input and recurrent gates of `heads` blocks, `recurrent_param`),
    /// `linear_out`, every linear with its bias.
    RgLru,
    /// RWKV-4's time mixing (transformers `models/rwkv/modeling_rwkv.py`,
    /// `RwkvSelfAttention`: key, value, receptance and output, `time_decay`,
    /// `time_first`, three token-shift mixes) and its channel mixing's receptance and
    /// two mixes (`RwkvFeedForward`; its key and value are the plain MLP's up and down).
    Rwkv,
}

impl MixerKind {
    /// The key's value (`mixer=mamba`).
    pub const fn name(self) -> &'static str {
        match self {
            MixerKind::Mamba => "mamba",
            MixerKind::DeltaNet => "deltanet",
            MixerKind::Mamba2 => "mamba2",
            MixerKind::Kda => "kda",
            MixerKind::ShortConv => "shortconv",
            MixerKind::Lightning => "lightning",
            MixerKind::RgLru => "rglru",
            MixerKind::Rwkv => "rwkv",
        }
    }
}

/// The state-space / linear-attention layers of a model.
///
/// Mamba: `inner` = d_inner, `state` = d_state, `dt_rank` the Δ projection's rank.
/// Mamba-2: `inner` = heads × head dim, `state` = d_state, `heads` = SSM heads,
/// `key_heads` = groups of B/C (`n_groups`).
/// Gated DeltaNet: `inner` = value heads × value head dim, `state` = key head dim,
/// `heads` = value heads, `key_heads` = key heads.
/// KDA: `inner` = heads × head dim, `state` = head dim, `heads` = `key_heads` = heads.
/// Short convolution: `inner` = hidden, `conv` = taps (LFM2's `conv_L_cache`); no state.
/// Lightning attention: `inner` = heads × head dim, `state` = head dim, `heads` = heads,
/// `block` = the kernel's block; no convolution.
/// RG-LRU: `inner` = `lru_width`, `heads` = the gates' blocks, `conv` = taps.
/// RWKV: `inner` = `attention_hidden_size` (= hidden); no convolution, no heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mixer {
    /// Which mixer.
    pub kind: MixerKind,
    /// Layers with this mixer instead of attention (the rest are attention layers).
    pub layers: u64,
    /// Inner width (see the type's doc).
    pub inner: u64,
    /// State width per channel (Mamba d_state) or key head dim (DeltaNet).
    pub state: u64,
    /// Causal convolution width (`d_conv`, `linear_conv_kernel_dim`).
    pub conv: u64,
    /// Mamba: rank of the Δ projection (`time_step_rank`, `mamba_dt_rank`).
    pub dt_rank: u64,
    /// DeltaNet: value heads; Mamba-2: heads.
    pub heads: u64,
    /// DeltaNet: key heads; Mamba-2: groups (`n_groups`).
    pub key_heads: u64,
    /// Mamba: RMSNorms on Δ, B and C (Jamba's `dt_layernorm`, `b_layernorm`, `c_layernorm`).
    pub norms: bool,
    /// Mamba-2: the gated RMSNorm (`mixer.norm`, inner wide) before `out_proj`;
    /// Falcon-H1 has it only with `mamba_rms_norm`. Unused by the other kinds.
    pub gated_norm: bool,
    /// Lightning attention: the block its kernel works in (`block_size`), the width of
    /// its decay tables. Unused by the other kinds.
    #[serde(default)]
    pub block: u64,
}

impl Mixer {
    /// Values one layer keeps per sequence: (convolution window, recurrent state).
    ///
    /// As vLLM allocates them (`vllm/model_executor/layers/mamba/mamba_utils.py`,
    /// `MambaStateShapeCalculator`): Mamba-1 conv `d_inner × (d_conv − 1)` and SSM
    /// `d_inner × d_state`; Gated DeltaNet conv `(2 × key heads × key dim + value dim)
    /// × (kernel − 1)` and recurrent `value heads × key dim × value head dim` (KDA the
    /// same with q, k and v all `heads × head dim`: `kda_state_shape`); Mamba-2
    /// conv `(d_inner + 2 × groups × d_state) × (d_conv − 1)` and SSM `heads × head dim
    /// × d_state`; a short convolution (LFM2) `hidden × (L_cache − 1)` and no recurrent
    /// state (`short_conv_state_shape`).
    /// (transformers' caches keep more: [`Mixer::state_shape`].)
    pub fn state_values(&self) -> Result<(u64, u64), EstimateError> {
        let window = self.conv.saturating_sub(1);
        let what = "recurrent state";
        match self.kind {
            MixerKind::ShortConv => Ok((checked_product(&[self.inner, window], what)?, 0)),
            // MiniMaxCache's `linear_cache`: heads × head dim × head dim (vLLM's
            // `linear_attention_state_shape` alike); no convolution.
            MixerKind::Lightning => Ok((0, checked_product(&[self.inner, self.state], what)?)),
            // RecurrentGemmaRecurrentBlock._setup_cache: the conv's last width − 1
            // inputs and the LRU's state, one value per channel.
            MixerKind::RgLru => Ok((checked_product(&[self.inner, window], what)?, self.inner)),
            // RwkvModel's five state tensors of hidden per layer: the last token's
            // input to the time mixing and to the channel mixing (the token shift),
            // and the WKV numerator, denominator and running maximum (fp32 in
            // transformers).
            MixerKind::Rwkv => Ok((
                checked_product(&[2, self.inner], what)?,
                checked_product(&[3, self.inner], what)?,
            )),
            MixerKind::Mamba => Ok((
                checked_product(&[self.inner, window], what)?,
                checked_product(&[self.inner, self.state], what)?,
            )),
            MixerKind::DeltaNet | MixerKind::Mamba2 | MixerKind::Kda => {
                // All: a conv over x plus two grouped projections (q/k, or B/C).
                let conv_dim = add(
                    checked_product(&[2, self.key_heads, self.state], what)?,
                    self.inner,
                    what,
                )?;
                Ok((
                    checked_product(&[conv_dim, window], what)?,
                    checked_product(&[self.inner, self.state], what)?,
                ))
            }
        }
    }
}

impl Mixer {
    /// One layer's per-sequence state as `runtime` keeps it, the model's values
    /// `value` bytes wide.
    ///
    /// Serving: [`Mixer::state_values`], everything in the model's dtype (vLLM's
    /// `mamba_cache_dtype` and `mamba_ssm_cache_dtype` "auto").
    ///
    /// transformers 5.23: `cache_utils.py`'s `LinearAttentionLayer` is made lazily from
    /// the tensors the mixer hands it — `update_conv_state(…, conv_kernel_size)` keeps
    /// a window of the whole kernel (`lazy_initialization`: zeros of `(…,
    /// conv_kernel_size)` in the input's dtype, the model's), `update_recurrent_state`
    /// a `zeros_like` of the final state, whose dtype is the mixer's:
    /// - Mamba (`models/mamba/modeling_mamba.py`, `mamba_selective_scan`; FalconMamba,
    ///   Jamba and Zamba copy it): the state is the product of the fp32 discretised A
    ///   and B (`discrete_A`, `deltaB_u`), fp32; `[batch, d_inner, d_state]`.
    /// - Mamba-2 (`models/mamba2/modeling_mamba2.py`, `mamba2_chunk_scan`, which casts
    ///   x, B and C to fp32; NemotronH, Falcon-H1, Bamba, GraniteMoeHybrid, Zamba2
    ///   alike): the final state in fp32, `[batch, heads, head_dim, d_state]`.
    /// - Gated DeltaNet (`models/qwen3_next/modeling_qwen3_next.py`,
    ///   `torch_chunk_gated_delta_rule` casts q, k, v to fp32; Qwen3.5 alike) and KDA
    ///   (`models/kimi_linear/modeling_kimi_linear.py`, `KimiDeltaAttention.forward`:
    ///   `last_recurrent_state.to(torch.float32)`): fp32 `[batch, heads, key dim,
    ///   value dim]`; the convolution over q, k and v together.
    /// - Short convolution (`models/lfm2/modeling_lfm2.py`, `Lfm2ShortConv`):
    ///   `conv_kernel_size = conv_L_cache`, the whole window; no recurrent state.
    /// - RG-LRU (`models/recurrent_gemma/modeling_recurrent_gemma.py`,
    ///   `RecurrentGemmaRecurrentBlock._setup_cache`): the conv's last `width − 1`
    ///   inputs in the model's dtype, the LRU's state `[batch, lru_width]` in fp32.
    /// - RWKV (`models/rwkv/modeling_rwkv.py`, `RwkvModel.forward`): five tensors of
    ///   hidden per layer, the two token shifts in the model's dtype, the WKV
    ///   numerator, denominator and maximum in fp32.
    /// - Lightning attention (`models/minimax/modeling_minimax.py`,
    ///   `MiniMaxLightningAttention`): the `heads × head dim × head dim` state made in
    ///   the values' dtype, as the serving layout.
    pub fn state_shape(
        &self,
        runtime: CacheRuntime,
        value: u64,
    ) -> Result<StateShape, EstimateError> {
        let what = "recurrent state";
        let (conv, recurrent) = self.state_values()?;
        if runtime == CacheRuntime::Serving {
            return Ok(StateShape {
                conv,
                recurrent,
                recurrent_bytes: value,
            });
        }
        let fp32 = 4;
        Ok(match self.kind {
            MixerKind::Lightning => StateShape {
                conv: 0,
                recurrent,
                recurrent_bytes: value,
            },
            MixerKind::RgLru => StateShape {
                conv,
                recurrent,
                recurrent_bytes: fp32,
            },
            MixerKind::Rwkv => StateShape {
                conv,
                recurrent,
                recurrent_bytes: fp32,
            },
            MixerKind::ShortConv => StateShape {
                conv: checked_product(&[self.inner, self.conv], what)?,
                recurrent: 0,
                recurrent_bytes: fp32,
            },
            MixerKind::Mamba | MixerKind::Mamba2 | MixerKind::DeltaNet | MixerKind::Kda => {
                // The same channels as the serving window, over the whole kernel.
                let channels = match self.kind {
                    MixerKind::Mamba => self.inner,
                    _ => add(
                        checked_product(&[2, self.key_heads, self.state], what)?,
                        self.inner,
                        what,
                    )?,
                };
                StateShape {
                    conv: checked_product(&[channels, self.conv], what)?,
                    recurrent,
                    recurrent_bytes: fp32,
                }
            }
        })
    }
}

/// A decoder-only transformer's shape, as in a Hugging Face `config.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Architecture {
    /// Vocabulary size.
    pub vocab: u64,
    /// Hidden (model) width.
    pub hidden: u64,
    /// Decoder layers.
    pub layers: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads (grouped-query / multi-query attention when below `heads`).
    pub kv_heads: u64,
    /// Width of one head.
    pub head_dim: u64,
    /// Intermediate width of the dense MLP; 0 = no MLP (Mamba's blocks are the mixer alone).
    pub intermediate: u64,
    /// Gated MLP (SwiGLU/GeGLU: gate, up, down) rather than up, down.
    pub gated_mlp: bool,
    /// The lm_head shares the embedding matrix.
    pub tied_embeddings: bool,
    /// Biases on the q, k, v projections (e.g. Qwen2).
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub o_bias: bool,
    /// Biases on the MLP projections (experts included).
    pub mlp_bias: bool,
    /// RMSNorm/LayerNorm on queries and keys per head (e.g. Qwen3, Gemma-3).
    pub qk_norm: bool,
    /// q/k norms over the whole projection (OLMo-2: `heads × head_dim` and
    /// `kv_heads × head_dim` weights) rather than one head's width.
    pub qk_norm_whole: bool,
    /// One fused `qkv_proj` (Phi-3, Phi-4): the same weights as three projections, but
    /// the backward keeps its whole output alive (v is a view of it), where separate
    /// projections keep only v's. Changes activations, not parameters.
    pub fused_qkv: bool,
    /// LayerNorm with a bias (GPT-2 style) rather than RMSNorm.
    pub layernorm_bias: bool,
    /// The decoder's norms (each layer's and the final one) hold no weight and no bias:
    /// OLMo's non-parametric LayerNorm (transformers' `OlmoLayerNorm`).
    #[serde(default)]
    pub nonparametric_norms: bool,
    /// Norms per decoder layer: 2 usually, 4 in Gemma-2/3, 1 in Falcon-7B and GPT-J
    /// (one norm feeding parallel attention and MLP).
    pub layer_norms: u64,
    /// Rows of a learned position-embedding table (GPT-2's `n_positions`); 0 = none.
    pub learned_positions: u64,
    /// One learned attention-sink logit per head and layer (gpt-oss).
    pub attn_sinks: bool,
    /// The final logits pass through `cap·tanh(x / cap)` (Gemma 2's and Gemma 4's
    /// `final_logit_softcapping`): training keeps the tanh's output for its backward.
    #[serde(default)]
    pub logit_softcap: bool,
    /// A prompt's image tokens attend to each other both ways in the sliding layers
    /// (Gemma 4's `use_bidirectional_attention: "vision"`): `Gemma4Model.forward`
    /// holds the image's int64 block ids through the language model and builds the
    /// sliding mask with them (`create_masks_for_vision_model`, transformers 5.23).
    #[serde(default)]
    pub vision_bidirectional: bool,
    /// Attention and MLP read the same layer input, each through its own norm, and
    /// both outputs join the residual at once (GPT-NeoX's `use_parallel_residual`):
    /// the second norm's input is the layer's input, not a new sum.
    #[serde(default)]
    pub parallel_residual: bool,
    /// The non-gated MLP's activation is transformers' `NewGELUActivation` (`gelu_new`:
    /// GPT-2), the tanh approximation written out in Python, whose tanh and two
    /// products autograd keeps; otherwise a fused GELU that keeps only its input.
    #[serde(default)]
    pub gelu_new: bool,
    /// Width of the token embeddings where it differs from the hidden size, with a
    /// projection into and out of the layers (OPT-350m's `word_embed_proj_dim`,
    /// `project_in` / `project_out`); 0 = none. Its projections are not counted in
    /// the parameters (the config reader says so).
    #[serde(default)]
    pub embed_proj: u64,
    /// The non-gated MLP's activation is ReLU (OPT's and CTRL's `nn.ReLU`), whose
    /// backward reads its output alone: the first projection's output is not kept.
    #[serde(default)]
    pub relu: bool,
    /// The non-gated MLP's activation is neither a GELU, transformers' `gelu_new` nor
    /// ReLU (Persimmon's relu²): autograd keeps other tensors for its backward than the
    /// derivations count.
    #[serde(default)]
    pub other_activation: bool,
    /// The layers are Falcon's (transformers 5.23 `models/falcon/modeling_falcon.py`,
    /// `FalconDecoderLayer`: its own split of the fused `query_key_value`, `dropout_add`
    /// residuals, ALiBi in Falcon-RW), which the derivations follow for Falcon-7B's,
    /// Falcon-40B's and Falcon2-11B's layouts (RoPE) and Falcon-RW's (ALiBi), without
    /// dropout.
    #[serde(default)]
    pub falcon_layer: bool,
    /// Dropout runs in training after the attention's and the MLP's output projections
    /// (GPT-2's `resid_pdrop`, GPT-NeoX's `hidden_dropout`, StarCoder 2's
    /// `residual_dropout`, Phi's `resid_pdrop`, OPT's `dropout` above 0): each keeps a
    /// boolean mask for its backward. Families whose dropouts the derivations do not
    /// follow one by one set it when any is on.
    #[serde(default)]
    pub dropout: bool,
    /// Dropout over the attention's probabilities in training (GPT-2's `attn_pdrop`,
    /// `attention_dropout` elsewhere, above 0): eager attention keeps its mask and the
    /// dropped copy; the fused kernels drop inside.
    #[serde(default)]
    pub attn_dropout: bool,
    /// Dropout over the embeddings in training (GPT-2's `embd_pdrop`, GPT-NeoX's
    /// `hidden_dropout`, StarCoder 2's `embedding_dropout`, Phi's `embd_pdrop`).
    #[serde(default)]
    pub embedding_dropout: bool,
    /// Eager attention's softmax runs in the compute dtype (GPT-2's
    /// `eager_attention_forward`) rather than in fp32 with a 16-bit copy.
    #[serde(default)]
    pub softmax_in_dtype: bool,
    /// Rotary width of one head when only part of it rotates (GPT-NeoX's
    /// `rotary_pct`, `partial_rotary_factor`); 0 = the whole head.
    #[serde(default)]
    pub rotary_dims: u64,
    /// A sigmoid output gate computed by `q_proj` (Qwen3-Next): q_proj is twice as wide.
    pub attn_gate: bool,
    /// State-space / linear-attention layers replacing attention in `mixer.layers` layers.
    pub mixer: Option<Mixer>,
    /// Layers with attention when not `layers − mixer.layers`: Nemotron-H's blocks are
    /// each attention, mixer or MLP alone.
    pub attn_layers: Option<u64>,
    /// Layers with an MLP (dense or MoE) when not every layer (Nemotron-H's MLP blocks).
    pub mlp_layers: Option<u64>,
    /// Multi-head latent attention, replacing q/k/v projections.
    pub mla: Option<Mla>,
    /// The sparse-attention indexer beside MLA (DeepSeek-V3.2, GLM-5).
    #[serde(default)]
    pub indexer: Option<Indexer>,
    /// Global layers with their own attention shape (Gemma 4).
    #[serde(default)]
    pub global_attn: Option<GlobalAttn>,
    /// Per-layer input embeddings (Gemma 4's and Gemma 3n's PLE).
    #[serde(default)]
    pub per_layer_input: Option<PerLayerInput>,
    /// Trailing layers that reuse an earlier layer's K and V (Gemma 4).
    #[serde(default)]
    pub kv_share: Option<KvShare>,
    /// Shared transformer blocks (Zamba2).
    #[serde(default)]
    pub shared_attn: Option<SharedAttn>,
    /// Learned scalars per layer: Gemma 4's `layer_scalar` (1), Apertus's xIELU
    /// activation (`alpha_p`, `alpha_n`, `beta`, `eps`: 4).
    #[serde(default)]
    pub layer_scalars: u64,
    /// Mixture-of-experts blocks, if any.
    pub moe: Option<Moe>,
    /// Multi-token-prediction layers the checkpoint stores after the last layer
    /// (DeepSeek-V3's `num_nextn_predict_layers`), counted as DeepSeek stores them.
    pub mtp_layers: u64,
    /// The MTP layers use the model's embedding and lm_head (GLM-5) instead of
    /// storing their own copies (DeepSeek-V3, GLM-4.5).
    #[serde(default)]
    pub mtp_shared_vocab: bool,
    /// Parameters of vision/audio towers and their projectors (counted by the config
    /// reader from the tower's own config), kept in 16 bits; 0 = none.
    pub tower_params: u64,
    /// An encoder (BERT, RoBERTa, XLM-R, ModernBERT: embedding, reranking and
    /// classification models): bidirectional attention over the whole input in one
    /// forward, so no KV cache, nothing generated and no lm_head (the base model as
    /// transformers' `AutoModel` builds it).
    #[serde(default)]
    pub encoder: bool,
    /// Rows of the token-type (segment) embedding table (BERT's `type_vocab_size`,
    /// `BertEmbeddings.token_type_embeddings`); 0 = none.
    #[serde(default)]
    pub token_types: u64,
    /// A pooler: one dense layer `[hidden, hidden]` with its bias over the first token
    /// (`BertPooler`, built by `BertModel(add_pooling_layer=True)`, as `AutoModel` does).
    #[serde(default)]
    pub pooler: bool,
    /// The lm_head has a bias of one value per vocabulary row (Phi-1/2's and GPT-J's
    /// `lm_head`, `nn.Linear(hidden, vocab, bias=True)`).
    #[serde(default)]
    pub lm_head_bias: bool,
    /// A norm over the token embeddings before the first layer (BLOOM's
    /// `word_embeddings_layernorm`), of the layers' norm kind.
    #[serde(default)]
    pub embedding_norm: bool,
    /// A prediction head between the last layer and the output projection: a dense
    /// [hidden, hidden] and a norm of the layers' kind (ModernBERT-decoder's `lm_head`,
    /// `ModernBertDecoderPredictionHead`), the dense with a bias where
    /// `prediction_head_bias` says (its config's `classifier_bias`).
    #[serde(default)]
    pub prediction_head: bool,
    /// The prediction head's dense has a bias (one value per hidden unit).
    #[serde(default)]
    pub prediction_head_bias: bool,
    /// A norm inside the attention (over its output, before o_proj) and one inside
    /// the MLP (over the intermediate, before down_proj): BitNet's `attn_sub_norm`
    /// and `ffn_sub_norm`.
    #[serde(default)]
    pub sub_norms: bool,
    /// An encoder-decoder (T5, BART, Whisper): every parameter of its encoder and
    /// decoder stacks as transformers builds the generation class, counted by the config
    /// reader (`import/config/encdec.rs`); 0 = a decoder-only model. The decoder's
    /// shape is the rest of the facts (`layers`, `heads`, `head-dim`: its
    /// self-attention cache and its cross-attention's).
    #[serde(default)]
    pub encdec_params: u64,
    /// The encoder's length in tokens or frames that the decoder's cross-attention
    /// reads (Whisper: `max_source_positions`, 1500 frames for 30 s of audio);
    /// 0 = the context.
    #[serde(default)]
    pub encoder_length: u64,
    /// Of an encoder-decoder's stacks (`encdec_params` less the shared embedding), the
    /// parameters a tensor-parallel serving engine keeps whole on every rank: its
    /// LayerNorms, row-parallel biases, convolutions and position tables, as vLLM
    /// places Whisper's (`import/config/encdec.rs`). With `encdec_split`; both 0 =
    /// no placement derived, and tensor parallelism is refused.
    #[serde(default)]
    pub encdec_whole: u64,
    /// Of an encoder-decoder's stacks, the parameters a tensor-parallel serving engine
    /// splits over its ranks (column- and row-parallel weights, column-parallel
    /// biases), with the zero biases it adds where the checkpoint has none (vLLM's
    /// Whisper k projections).
    #[serde(default)]
    pub encdec_split: u64,
    /// Layers whose attention is a gated cross-attention over an image's vision
    /// states instead of self-attention (Llama 3.2 Vision's `cross_attention_layers`,
    /// transformers' `MllamaCrossAttentionDecoderLayer`): the same q/k/v/o projections
    /// plus a q and a k RMSNorm over one head and two scalar gates; no KV over the
    /// text, K and V over `cross_tokens` instead. 0 = none.
    #[serde(default)]
    pub cross_layers: u64,
    /// Vision tokens the cross-attention layers read per sequence (Mllama, one image:
    /// `max_num_tiles × ((image_size / patch_size)² + 1)`).
    #[serde(default)]
    pub cross_tokens: u64,
    /// Tokens the model puts ahead of the prompt's ids in every sequence, through the
    /// same layers and into the same cache (GIT, one image: `GitModel.forward`
    /// concatenates the projected image's `(image_size / patch_size)² + 1` states
    /// ahead of the text's embeddings, transformers 5.23 `models/git/modeling_git.py`).
    /// They take no row of the position table. 0 = none.
    #[serde(default)]
    pub prefix_tokens: u64,
    /// Rows of the token embedding beyond the vocabulary (Mllama's `embed_tokens`
    /// has `vocab_size + 8` rows, its lm_head `vocab_size`).
    #[serde(default)]
    pub extra_embedding_rows: u64,
    /// A norm after the last layer, before the lm_head (every decoder here but GPT-1:
    /// transformers' `OpenAIGPTModel` ends at its last block's `ln_2`,
    /// `models/openai/modeling_openai.py`, transformers 5.23).
    #[serde(default = "yes")]
    pub final_norm: bool,
    /// Attention experts: a mixture of attention heads (JetMoE's `JetMoeMoA`,
    /// transformers 5.23 `models/jetmoe/modeling_jetmoe.py`). Each of the attention
    /// layers holds this many experts, each a query projection `[kv_heads × head_dim,
    /// hidden]` and an output projection `[hidden, kv_heads × head_dim]` (the
    /// checkpoint's `experts.input_linear` and `experts.output_linear` banks), and a
    /// router `[attn_experts, hidden]`; each token runs `heads ÷ kv_heads` of them,
    /// over one shared key and value projection (`kv_proj`), so the cache holds
    /// `kv_heads` heads. The attention's output bias (`o-bias`) is the mixture's
    /// `bias`. They replace the plain q and o projections (not MLA's, not Gemma 4's
    /// global layers'). 0 = plain attention.
    #[serde(default)]
    pub attn_experts: u64,
    /// Rows of a sinusoidal position table `[rows, hidden]` the model computes when it
    /// is built and keeps in fp32 beside its weights, never stored in the checkpoint
    /// (CTRL's `pos_encoding`, `n_positions` rows: a non-persistent buffer made with
    /// `dtype=torch.float`, transformers 5.23 `models/ctrl/modeling_ctrl.py`,
    /// `CTRLModel.__init__`). Bytes, not parameters. 0 = none.
    #[serde(default)]
    pub sinusoid_positions: u64,
    /// Positions `n` of the causal mask `[n, n]` every attention layer keeps as a
    /// buffer in the model's dtype, beside the model's position ids `[n]` in int64
    /// (GPT-1: `Attention.bias`, `torch.tril(torch.ones(n_positions, n_positions))`,
    /// and `OpenAIGPTModel.position_ids`, both non-persistent, transformers 5.23
    /// `models/openai/modeling_openai.py`). Bytes, not parameters. 0 = none.
    #[serde(default)]
    pub mask_positions: u64,
    /// Rotary embeddings the model registers, each with its two fp32 frequency
    /// buffers, never stored in the checkpoint: transformers 5.23's
    /// `LlamaRotaryEmbedding.__init__` (`models/llama/modeling_llama.py`, and every
    /// family's copy of it) keeps `inv_freq` and `original_inv_freq`, non-persistent,
    /// each of `⌈rotary width ÷ 2⌉` values (`torch.arange(0, dim, 2)` in the rope
    /// type's init, `modeling_rope_utils.py`; YaRN, llama3, longrope and MRoPE
    /// change the values, not the length). One per model; 2 where a rotary
    /// embedding holds one pair per layer type (`Gemma3RotaryEmbedding`,
    /// `ModernBertRotaryEmbedding`, `Gemma4RotaryEmbedding`: `{layer_type}_inv_freq`
    /// and `{layer_type}_original_inv_freq`, the full layers' over the global head
    /// width when they have their own). Bytes, not parameters. 0 = no rotary
    /// buffers (learned or no positions, ALiBi, or a family not read for them).
    #[serde(default)]
    pub rope_tables: u64,
    /// The rotary width the frequency buffers span when only part of a head rotates
    /// and `rotary_dims` does not say so (`int(head_dim × partial_rotary_factor)`,
    /// transformers 5.23 `_compute_default_rope_parameters`); 0 = `rotary_dims`,
    /// else MLA's `qk_rope_dim`, else the head.
    #[serde(default)]
    pub rope_dims: u64,
    /// Rows of the fp32 sin/cos rotary table every attention layer keeps, never
    /// stored in the checkpoint (GPT-J's and CodeGen's `embed_positions`:
    /// `create_sinusoidal_positions(max_positions, pos_embd_dim)`, a non-persistent
    /// buffer of each `GPTJAttention` / `CodeGenAttention`, transformers 5.23
    /// `models/gptj/modeling_gptj.py` and `models/codegen/modeling_codegen.py`:
    /// `max_position_embeddings` rows of `sin ‖ cos`, `2 × ⌈width ÷ 2⌉` values, made
    /// from an `.float()` product, so fp32 whatever the model's dtype). Bytes, not
    /// parameters. 0 = none.
    #[serde(default)]
    pub sincos_positions: u64,
    /// The width those tables span (`pos_embd_dim = rotary_dim or embed_dim`); 0 =
    /// the hidden size (a null `rotary_dim`).
    #[serde(default)]
    pub sincos_dims: u64,
    /// Scalar buffers in the model's dtype the embeddings scale by, never stored in
    /// the checkpoint (Gemma's `embed_scale`: `nn.Buffer(torch.tensor(hidden ** 0.5),
    /// persistent=False)` in `GemmaTextScaledWordEmbedding`, its copies in Gemma 2, 3
    /// and 4 and VaultGemma, transformers 5.23 `models/gemma*/modeling_gemma*.py`;
    /// made in the default dtype the model is built under; Gemma 4 has a second one,
    /// `embed_tokens_per_layer`'s). Bytes, not parameters. 0 = none.
    #[serde(default)]
    pub embed_scales: u64,
    /// Every Mamba-2 mixer layer keeps a muP vector as wide as its in-projection's
    /// output (`2 × inner + 2 × groups × state + heads`) in the model's dtype, never
    /// stored in the checkpoint (Falcon-H1's `mup_vector`: `compute_mup_vector`,
    /// `torch.ones(1, 1, vector_shape)` registered non-persistent on each
    /// `layer.mamba` by `FalconH1Model.__init__`, transformers 5.23
    /// `models/falcon_h1/modeling_falcon_h1.py`). Bytes, not parameters.
    #[serde(default)]
    pub mup_vectors: bool,
    /// Bytes of the vision tower's rotary tables, never stored in the checkpoint
    /// (the counted tower's own rotary embedding: Qwen2.5-VL's and Qwen3-VL's
    /// `inv_freq` and `original_inv_freq`, Pixtral's, Llama 4's `freqs_ci`), set by
    /// the config reader beside `tower_params`. 0 = none.
    #[serde(default)]
    pub tower_rope_bytes: u64,
    /// The vision tower's shape where its forward over an image is derived.
    #[serde(default)]
    pub vision: Option<VisionTower>,
    /// The audio tower's shape where its forward over a clip is derived.
    #[serde(default)]
    pub audio: Option<AudioTower>,
}

/// serde's default for facts that are on unless a stored import says otherwise.
const fn yes() -> bool {
    true
}

/// The facts' values when a key is absent: the base every parser and every model
/// family starts from (a Llama-style decoder: a gated MLP, two RMSNorms per layer, no
/// biases, untied embeddings), and the defaults [`FACTS`] reads through its
/// accessors. A family sets only what differs (`Architecture { gated_mlp: false,
/// ..Architecture::BASE }`); the sizes (0 here) come from its config.
impl Architecture {
    /// The base architecture (see the impl's doc).
    pub const BASE: Architecture = Architecture {
        vocab: 0,
        hidden: 0,
        layers: 0,
        heads: 0,
        kv_heads: 0,
        head_dim: 0,
        intermediate: 0,
        gated_mlp: true,
        tied_embeddings: false,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        qk_norm: false,
        qk_norm_whole: false,
        fused_qkv: false,
        layernorm_bias: false,
        nonparametric_norms: false,
        layer_norms: 2,
        learned_positions: 0,
        attn_sinks: false,
        logit_softcap: false,
        vision_bidirectional: false,
        parallel_residual: false,
        gelu_new: false,
        embed_proj: 0,
        relu: false,
        other_activation: false,
        falcon_layer: false,
        attn_dropout: false,
        embedding_dropout: false,
        dropout: false,
        softmax_in_dtype: false,
        rotary_dims: 0,
        attn_gate: false,
        mixer: None,
        attn_layers: None,
        mlp_layers: None,
        mla: None,
        indexer: None,
        global_attn: None,
        per_layer_input: None,
        kv_share: None,
        shared_attn: None,
        layer_scalars: 0,
        moe: None,
        mtp_layers: 0,
        mtp_shared_vocab: false,
        tower_params: 0,
        encoder: false,
        token_types: 0,
        pooler: false,
        lm_head_bias: false,
        embedding_norm: false,
        prediction_head: false,
        prediction_head_bias: false,
        sub_norms: false,
        encdec_params: 0,
        encoder_length: 0,
        encdec_whole: 0,
        encdec_split: 0,
        cross_layers: 0,
        cross_tokens: 0,
        prefix_tokens: 0,
        extra_embedding_rows: 0,
        final_norm: true,
        attn_experts: 0,
        sinusoid_positions: 0,
        mask_positions: 0,
        rope_tables: 0,
        rope_dims: 0,
        sincos_positions: 0,
        sincos_dims: 0,
        embed_scales: 0,
        mup_vectors: false,
        tower_rope_bytes: 0,
        vision: None,
        audio: None,
    };

    /// [`Architecture::BASE`] with every optional part at its own base: where each
    /// fact's default is read.
    pub const WITH_PARTS: Architecture = Architecture {
        mixer: Some(Mixer::BASE),
        mla: Some(Mla::BASE),
        indexer: Some(Indexer::BASE),
        global_attn: Some(GlobalAttn::BASE),
        per_layer_input: Some(PerLayerInput::BASE),
        kv_share: Some(KvShare::BASE),
        shared_attn: Some(SharedAttn::BASE),
        moe: Some(Moe::BASE),
        vision: Some(VisionTower::BASE),
        audio: Some(AudioTower::BASE),
        ..Architecture::BASE
    };
}

impl Default for Architecture {
    fn default() -> Self {
        Architecture::BASE
    }
}

impl Moe {
    /// A MoE block's facts when their keys are absent (every layer MoE, no shared
    /// expert, no router bias); `experts` and `active` always come from the input.
    pub const BASE: Moe = Moe {
        experts: 0,
        active: 0,
        expert_intermediate: 0,
        shared_experts: 0,
        shared_intermediate: 0,
        dense_layers: 0,
        every: 1,
        router_bias: false,
        correction_bias: false,
        shared_gate: false,
        latent: 0,
        output_bias: false,
        group_limited: false,
        router_casts: false,
        router_fp32_logits: false,
        dense_dispatch: false,
    };
}

impl Mla {
    /// MLA's facts when their keys are absent (a plain `q_proj`).
    pub const BASE: Mla = Mla {
        q_lora_rank: 0,
        kv_lora_rank: 0,
        qk_nope_dim: 0,
        qk_rope_dim: 0,
        v_head_dim: 0,
    };
}

impl Indexer {
    /// The indexer's facts before its keys are read.
    pub const BASE: Indexer = Indexer {
        heads: 0,
        head_dim: 0,
    };
}

impl GlobalAttn {
    /// The global layers' facts before their keys are read (values have their own
    /// projection).
    pub const BASE: GlobalAttn = GlobalAttn {
        layers: 0,
        kv_heads: 0,
        head_dim: 0,
        k_eq_v: false,
    };
}

impl Mixer {
    /// A mixer's facts when their keys are absent: a convolution 4 wide (every
    /// published Mamba-family config's `d_conv`), Mamba-2's gated norm.
    pub const BASE: Mixer = Mixer {
        kind: MixerKind::Mamba,
        layers: 0,
        inner: 0,
        state: 0,
        conv: 4,
        dt_rank: 0,
        heads: 0,
        key_heads: 0,
        norms: false,
        gated_norm: true,
        block: 0,
    };
}

/// Where one fact's value lives in an [`Architecture`].
#[derive(Debug)]
pub enum Slot<'a> {
    /// A size or count.
    Count(&'a mut u64),
    /// A switch.
    Flag(&'a mut bool),
    /// A count that stands for "all but the mixer's layers" or "every layer" when unset.
    Maybe(&'a mut Option<u64>),
    /// The mixer's kind.
    Mixer(&'a mut MixerKind),
}

impl<'a> From<&'a mut u64> for Slot<'a> {
    fn from(v: &'a mut u64) -> Self {
        Slot::Count(v)
    }
}

impl<'a> From<&'a mut bool> for Slot<'a> {
    fn from(v: &'a mut bool) -> Self {
        Slot::Flag(v)
    }
}

impl<'a> From<&'a mut Option<u64>> for Slot<'a> {
    fn from(v: &'a mut Option<u64>) -> Self {
        Slot::Maybe(v)
    }
}

impl<'a> From<&'a mut MixerKind> for Slot<'a> {
    fn from(v: &'a mut MixerKind) -> Self {
        Slot::Mixer(v)
    }
}

/// A fact's value, read through its [`Slot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactValue {
    /// A size or count.
    Count(u64),
    /// A switch.
    Flag(bool),
    /// A count that may be unset.
    Maybe(Option<u64>),
    /// The mixer's kind.
    Mixer(MixerKind),
}

impl FactValue {
    /// As a `key=value` value (`None` for an unset count).
    pub fn text(self) -> Option<String> {
        match self {
            FactValue::Count(n) | FactValue::Maybe(Some(n)) => Some(n.to_string()),
            FactValue::Flag(b) => Some(b.to_string()),
            FactValue::Maybe(None) => None,
            FactValue::Mixer(k) => Some(k.name().to_string()),
        }
    }

    /// The count, if it is one (set).
    pub fn count(self) -> Option<u64> {
        match self {
            FactValue::Count(n) | FactValue::Maybe(Some(n)) => Some(n),
            _ => None,
        }
    }
}

/// Where a fact lives: its slot in an architecture, `None` while the part that holds
/// it (MoE, MLA, a mixer, global layers, the indexer) is absent.
pub type Accessor = for<'a> fn(&'a mut Architecture) -> Option<Slot<'a>>;

/// One architecture fact, as its row is written: its key and how it is presented
/// (`field`: kind, label, help; a switch's default), and how the parsers and
/// derivations treat it (`rule`). The rows are read at compile time only: their fields
/// are spliced into [`crate::fields::FIELDS`], their rules into [`RULES`], so each
/// module carries the text it shows and the rules it runs, not both twice.
#[derive(Debug, Clone, Copy)]
pub struct Fact {
    /// The key and its presentation (an entry of [`crate::fields::FIELDS`]).
    pub field: Field,
    /// What the code reads of it.
    pub rule: FactRule,
}

/// What the code reads of a fact: where its value lives (`slot`, through which its
/// default is read from [`Architecture::WITH_PARTS`]). Parsing
/// ([`crate::params::from_pairs`]), writing back ([`Architecture::write_pairs`]), the
/// bound every count keeps ([`MAX_DIM`], in [`Architecture::validate`]) and the
/// activation derivations' coverage ([`Architecture::underived`]) are read from these.
#[derive(Debug, Clone, Copy)]
pub struct FactRule {
    /// The key (the field's).
    pub key: &'static str,
    /// Where the value lives.
    pub slot: Accessor,
    /// A key its part cannot do without, with the reason an input lacking it is
    /// refused ("needed by the architecture mode").
    pub need: Option<&'static str>,
    /// Written back whenever its part is present, even at its default (a key whose
    /// absence reads as something else: a needed key, or one whose default is derived
    /// from other keys).
    pub always: bool,
    /// Why the training and prefill derivations do not cover a value other than the
    /// default (`None`: they do, or it changes no activation).
    pub underived: Option<&'static str>,
}

impl Fact {
    const fn new(field: Field, slot: Accessor) -> Fact {
        Fact {
            field,
            rule: FactRule {
                key: field.key,
                slot,
                need: None,
                always: false,
                underived: None,
            },
        }
    }

    /// Needed whenever its part is present.
    const fn need(mut self) -> Fact {
        self.rule.need = Some("needed by the architecture mode");
        self.rule.always = true;
        self
    }

    /// Needed, with its own reason.
    const fn need_because(mut self, why: &'static str) -> Fact {
        self.rule.need = Some(why);
        self.rule.always = true;
        self
    }

    /// Written whenever its part is present.
    const fn always(mut self) -> Fact {
        self.rule.always = true;
        self
    }

    /// Outside the activation derivations when not at its default.
    const fn underived(mut self, why: &'static str) -> Fact {
        self.rule.underived = Some(why);
        self
    }

    const fn choices(mut self, choices: &'static [(&'static str, &'static str)]) -> Fact {
        self.field = self.field.choices(choices);
        self
    }
}

impl FactRule {
    /// Its value in `a`; `None` while its part is absent.
    pub fn value(&self, a: &Architecture) -> Option<FactValue> {
        let mut a = *a;
        (self.slot)(&mut a).map(|s| match s {
            Slot::Count(v) => FactValue::Count(*v),
            Slot::Flag(v) => FactValue::Flag(*v),
            Slot::Maybe(v) => FactValue::Maybe(*v),
            Slot::Mixer(v) => FactValue::Mixer(*v),
        })
    }

    /// Its value when its key is absent.
    pub fn default_value(&self) -> Option<FactValue> {
        self.value(&Architecture::WITH_PARTS)
    }

    /// Sets it in `a` from a parsed count (a switch: 0 is false); nothing while its
    /// part is absent.
    pub fn set(&self, a: &mut Architecture, v: u64) {
        match (self.slot)(a) {
            Some(Slot::Count(x)) => *x = v,
            Some(Slot::Flag(x)) => *x = v != 0,
            Some(Slot::Maybe(x)) => *x = Some(v),
            Some(Slot::Mixer(_)) | None => {}
        }
    }
}

/// The slot of a fact of the architecture (`at!(layers)`) or of one of its parts
/// (`at!(moe.experts)`).
macro_rules! at {
    ($f:ident) => {
        |a| Some(Slot::from(&mut a.$f))
    };
    ($p:ident . $f:ident) => {
        |a| a.$p.as_mut().map(|p| Slot::from(&mut p.$f))
    };
}

/// A fact: its field row and its slot.
const fn fact(
    key: &'static str,
    group: FieldGroup,
    kind: FieldKind,
    label: &'static str,
    placeholder: &'static str,
    help: &'static str,
    slot: Accessor,
) -> Fact {
    Fact::new(
        crate::field::f(key, group, kind, label, placeholder, help),
        slot,
    )
}

use FieldGroup as G;
use FieldKind as K;

/// Why the derivations leave LayerNorm, learned positions and non-gated MLPs out.
const LAYERNORM_STYLE: &str = "LayerNorm, learned positions or a non-gated MLP (GPT-2/Pythia/Falcon style) keep other tensors";
/// Why they leave gated outputs and sinks out.
const GATE_OR_SINKS: &str = "gated attention outputs, and sinks outside gpt-oss's full fine-tune, are not in the derivation";

/// The decoder's own facts: its sizes and switches, in the order the page and
/// `--help` present them (first of the two tables [`crate::fields::FIELDS`] splices in).
#[rustfmt::skip]
pub const DECODER_FACTS: &[Fact] = &[
    fact("layers", G::Architecture, K::Count, "Layers", "", "Decoder layers", at!(layers)).need(),
    fact("hidden", G::Architecture, K::Count, "Hidden size", "", "Width of the residual stream (hidden_size)", at!(hidden)).need(),
    fact("heads", G::Architecture, K::Count, "Attention heads", "", "Attention (query) heads", at!(heads)),
    fact("kv-heads", G::Architecture, K::Count, "KV heads", "= heads",
        "Key/value heads (GQA/MQA)", at!(kv_heads)),
    fact("head-dim", G::Architecture, K::Count, "Head dim", "hidden ÷ heads",
        "Width of one head", at!(head_dim)),
    fact("intermediate", G::Architecture, K::Count, "MLP intermediate", "", "MLP intermediate size", at!(intermediate)),
    fact("vocab", G::Architecture, K::Count, "Vocabulary", "", "Vocabulary size", at!(vocab)).need(),
    fact("gated-mlp", G::Architecture, K::Bool(Architecture::BASE.gated_mlp), "Gated MLP", "",
        "Gated MLP (gate, up, down)", at!(gated_mlp))
        .underived(LAYERNORM_STYLE),
    fact("tied-embeddings", G::Architecture, K::Bool(Architecture::BASE.tied_embeddings), "Tied embeddings", "",
        "lm_head shares the embedding matrix", at!(tied_embeddings)),
    fact("qkv-bias", G::Architecture, K::Bool(Architecture::BASE.qkv_bias), "q/k/v bias", "",
        "Biases on q, k, v projections (e.g. Qwen2)", at!(qkv_bias)),
    fact("o-bias", G::Architecture, K::Bool(Architecture::BASE.o_bias), "o bias", "",
        "Bias on the attention output projection", at!(o_bias)),
    fact("mlp-bias", G::Architecture, K::Bool(Architecture::BASE.mlp_bias), "MLP bias", "", "Biases on the MLP projections", at!(mlp_bias)),
    fact("qk-norm", G::Architecture, K::Bool(Architecture::BASE.qk_norm), "q/k norm", "",
        "Per-head norms on queries and keys (e.g. Qwen3)", at!(qk_norm)),
    fact("layernorm-bias", G::Architecture, K::Bool(Architecture::BASE.layernorm_bias), "LayerNorm bias", "",
        "LayerNorm with bias (GPT-2 style)", at!(layernorm_bias))
        .underived(LAYERNORM_STYLE),
    fact("layer-norms", G::Variants, K::Count, "Norms per layer", "2",
        "Norms per decoder layer (Gemma-2/3: 4; Falcon-7B, GPT-J: 1)", at!(layer_norms))
        .underived("sandwich norms and Gemma's fp32 norm keep other tensors"),
    fact("nonparametric-norms", G::Variants, K::Bool(Architecture::BASE.nonparametric_norms), "Norms without weights", "",
        "The norms hold no weight or bias (OLMo's non-parametric LayerNorm)", at!(nonparametric_norms))
        .underived("norms without weights (OLMo's LayerNorm in fp32) keep other tensors"),
    fact("qk-norm-whole", G::Variants, K::Bool(Architecture::BASE.qk_norm_whole), "q/k norm over the projection", "",
        "q/k norms over the whole projection, not one head (OLMo-2)", at!(qk_norm_whole)),
    fact("fused-qkv", G::Variants, K::Bool(Architecture::BASE.fused_qkv), "Fused q/k/v projection", "",
        "One qkv_proj whose whole output the backward keeps (Phi-3)", at!(fused_qkv)),
    fact("learned-positions", G::Variants, K::Count, "Learned positions", "none",
        "Rows of a learned position-embedding table (GPT-2: n_positions)", at!(learned_positions))
        .underived(LAYERNORM_STYLE),
    fact("attn-sinks", G::Variants, K::Bool(Architecture::BASE.attn_sinks), "Attention sinks", "",
        "A learned attention-sink logit per head and layer (gpt-oss)", at!(attn_sinks))
        .underived(GATE_OR_SINKS),
    fact("logit-softcap", G::Variants, K::Bool(Architecture::BASE.logit_softcap), "Soft-capped logits", "",
        "The final logits pass through cap·tanh(x / cap) (Gemma 2 and 4: final_logit_softcapping)", at!(logit_softcap)),
    fact("vision-bidirectional", G::Variants, K::Bool(Architecture::BASE.vision_bidirectional), "Bidirectional image tokens", "",
        "An image's tokens attend to each other both ways in the sliding layers (Gemma 4: use_bidirectional_attention \"vision\")", at!(vision_bidirectional)),
    fact("parallel-residual", G::Variants, K::Bool(Architecture::BASE.parallel_residual), "Parallel residual", "",
        "Attention and MLP read the same layer input through their own norms (GPT-NeoX: use_parallel_residual)", at!(parallel_residual))
        .underived(LAYERNORM_STYLE),
    fact("gelu-new", G::Variants, K::Bool(Architecture::BASE.gelu_new), "GELU written out (gelu_new)", "",
        "The MLP's activation is transformers' NewGELUActivation, whose tanh and products are kept (GPT-2)", at!(gelu_new))
        .underived(LAYERNORM_STYLE),
    fact("embed-proj", G::Variants, K::Count, "Projected embedding width", "none",
        "Token embedding width projected to the hidden size (OPT-350m: 512)", at!(embed_proj))
        .underived("projections between the embeddings and the layers (OPT's project_in, project_out) are not in the derivation"),
    fact("relu", G::Variants, K::Bool(Architecture::BASE.relu), "ReLU MLP", "",
        "The non-gated MLP's activation is ReLU (OPT)", at!(relu))
        .underived(LAYERNORM_STYLE),
    fact("other-activation", G::Variants, K::Bool(Architecture::BASE.other_activation), "Other MLP activation", "",
        "The non-gated MLP's activation is another (Persimmon's relu²)", at!(other_activation))
        .underived("an MLP activation other than a GELU or ReLU (relu²) keeps other tensors than the derivation counts"),
    fact("falcon-layer", G::Variants, K::Bool(Architecture::BASE.falcon_layer), "Falcon's layer", "",
        "The layers are Falcon's (FalconDecoderLayer)", at!(falcon_layer))
        .underived("Falcon's layers other than Falcon-7B's (one norm, one K/V head) and Falcon-40B's (two parallel norms, grouped K/V), with RoPE and no dropout, are not in the derivation"),
    fact("dropout", G::Variants, K::Bool(Architecture::BASE.dropout), "Dropout in training", "",
        "Dropout after the attention's and the MLP's outputs runs in training and keeps its masks (GPT-2: resid_pdrop 0.1)", at!(dropout))
        .underived("dropout in training keeps masks outside the Llama-style derivation"),
    fact("attn-dropout", G::Variants, K::Bool(Architecture::BASE.attn_dropout), "Attention dropout in training", "",
        "Dropout over the attention's probabilities runs in training (GPT-2: attn_pdrop 0.1)", at!(attn_dropout))
        .underived("dropout in training keeps masks outside the Llama-style derivation"),
    fact("embedding-dropout", G::Variants, K::Bool(Architecture::BASE.embedding_dropout), "Embedding dropout in training", "",
        "Dropout over the embeddings runs in training (GPT-2: embd_pdrop 0.1)", at!(embedding_dropout))
        .underived("dropout in training keeps masks outside the Llama-style derivation"),
    fact("softmax-in-dtype", G::Variants, K::Bool(Architecture::BASE.softmax_in_dtype), "Softmax in the compute dtype", "",
        "Eager attention's softmax runs in the compute dtype, not fp32 (GPT-2)", at!(softmax_in_dtype))
        .underived(LAYERNORM_STYLE),
    fact("rotary-dims", G::Variants, K::Count, "Rotary width", "= head-dim",
        "Rotary width of one head when only part of it rotates (GPT-NeoX: rotary_pct × head size)", at!(rotary_dims)),
    fact("final-norm", G::Variants, K::Bool(Architecture::BASE.final_norm), "Final norm", "",
        "A norm after the last layer (GPT-1 has none)", at!(final_norm)),
    fact("attn-experts", G::Variants, K::Count, "Attention experts", "none",
        "Mixture of attention heads (JetMoE): q and o projections are this many experts of kv-heads × head-dim each, heads ÷ kv-heads of them per token, over shared k and v", at!(attn_experts))
        .underived("a mixture of attention heads is not in the derivation"),
    fact("sinusoid-positions", G::Variants, K::Count, "Sinusoidal position rows", "none",
        "Rows of an fp32 sinusoidal position table kept beside the weights, not in the checkpoint (CTRL: n_positions)", at!(sinusoid_positions)),
    fact("mask-positions", G::Variants, K::Count, "Causal-mask buffer positions", "none",
        "Positions n of an [n, n] causal mask each layer keeps in the model's dtype, with int64 position ids [n] (GPT-1: n_positions)", at!(mask_positions)),
    fact("rope-tables", G::Variants, K::Count, "Rotary frequency tables", "none",
        "Rotary embeddings whose fp32 inv_freq and original_inv_freq (⌈rotary width ÷ 2⌉ values each) the model keeps beside the weights, not in the checkpoint (1; 2 with one per layer type: Gemma 3 and 4)", at!(rope_tables)),
    fact("rope-dims", G::Variants, K::Count, "Rotary width of the frequency tables", "= rotary-dims, MLA's qk-rope-dim or head-dim",
        "Rotary width the frequency tables span when only part of a head rotates (partial_rotary_factor × head-dim)", at!(rope_dims)),
    fact("sincos-positions", G::Variants, K::Count, "Sin/cos table rows", "none",
        "Rows of each attention layer's fp32 sin/cos table (GPT-J: n_positions)", at!(sincos_positions)),
    fact("sincos-dims", G::Variants, K::Count, "Sin/cos table width", "= hidden",
        "Width of the sin/cos tables (GPT-J: rotary_dim)", at!(sincos_dims)),
    fact("embed-scales", G::Variants, K::Count, "Embedding scales", "none",
        "Scalar embedding-scale buffers in the model's dtype (Gemma: 1)", at!(embed_scales)),
    fact("mup-vectors", G::Variants, K::Bool(Architecture::BASE.mup_vectors), "muP vectors", "",
        "A muP vector per Mamba-2 layer, in_proj wide (Falcon-H1)", at!(mup_vectors)),
    fact("tower-rope-bytes", G::Variants, K::Count, "Tower rotary bytes", "none",
        "Bytes of the vision tower's rotary tables", at!(tower_rope_bytes)),
];

/// The variants and optional parts (MLA, MTP, global layers, the indexer, towers, a
/// mixer, MoE), in the order the page and `--help` present them (the second table
/// [`crate::fields::FIELDS`] splices in).
#[rustfmt::skip]
pub const VARIANT_FACTS: &[Fact] = &[
    fact("q-lora-rank", G::Variants, K::Count, "MLA query rank", "0",
        "MLA: query compression rank (0 = plain q_proj)", at!(mla.q_lora_rank)),
    fact("kv-lora-rank", G::Variants, K::Count, "MLA KV latent rank", "no MLA",
        "MLA: key/value latent rank; turns on multi-head latent attention", at!(mla.kv_lora_rank))
        .always(),
    fact("qk-nope-dim", G::Variants, K::Count, "MLA q/k no-RoPE dim", "",
        "MLA: per-head q/k width without rotary", at!(mla.qk_nope_dim)).need(),
    fact("qk-rope-dim", G::Variants, K::Count, "MLA RoPE dim", "",
        "MLA: rotary width (shared key part, cached with the latent)", at!(mla.qk_rope_dim)).need(),
    fact("v-head-dim", G::Variants, K::Count, "MLA value dim", "", "MLA: per-head value width", at!(mla.v_head_dim)).need(),
    fact("mtp-layers", G::Variants, K::Count, "MTP layers", "0",
        "Multi-token-prediction layers stored in the checkpoint (DeepSeek-V3: 1)", at!(mtp_layers)),
    fact("mtp-shared-vocab", G::Variants, K::Bool(Architecture::BASE.mtp_shared_vocab), "MTP without vocab copies", "",
        "MTP layers use the model's embedding and lm_head (GLM-5)", at!(mtp_shared_vocab)),
    fact("global-layers", G::Variants, K::Count, "Global layers", "none",
        "Unwindowed layers with their own KV shape (Gemma 4)", at!(global_attn.layers))
        .always(),
    fact("global-kv-heads", G::Variants, K::Count, "Global KV heads", "", "KV heads of the global layers", at!(global_attn.kv_heads)).need(),
    fact("global-head-dim", G::Variants, K::Count, "Global head dim", "", "Head dim of the global layers", at!(global_attn.head_dim)).need(),
    fact("global-k-eq-v", G::Variants, K::Bool(GlobalAttn::BASE.k_eq_v), "Global k = v", "",
        "Global layers without v_proj (attention_k_eq_v)", at!(global_attn.k_eq_v)),
    fact("per-layer-input", G::Variants, K::Count, "Per-layer input width", "none",
        "Per-layer input embeddings' width per layer (Gemma 4 E2B/E4B, Gemma 3n: hidden_size_per_layer_input)", at!(per_layer_input.width))
        .always()
        .underived("per-layer input embeddings are not in the derivation"),
    fact("per-layer-vocab", G::Variants, K::Count, "Per-layer input vocab", "",
        "Rows of the per-layer input token table (vocab_size_per_layer_input)", at!(per_layer_input.vocab)).need(),
    fact("kv-shared-layers", G::Variants, K::Count, "KV-shared layers", "none",
        "Trailing layers that reuse an earlier layer's K and V: no cache, no k/v projections (Gemma 4: num_kv_shared_layers)", at!(kv_share.layers))
        .always(),
    fact("kv-shared-global", G::Variants, K::Count, "KV-shared global layers", "0",
        "How many of the KV-shared layers are global (full-attention) layers", at!(kv_share.global)),
    fact("double-wide-mlp", G::Variants, K::Bool(KvShare::BASE.double_wide_mlp), "Double-wide MLP", "",
        "The KV-shared layers' MLP is twice as wide (use_double_wide_mlp)", at!(kv_share.double_wide_mlp)),
    fact("shared-blocks", G::Variants, K::Count, "Shared blocks", "none",
        "Attention-and-MLP blocks whose weights several layers share in turn (Zamba2: num_mem_blocks)", at!(shared_attn.blocks))
        .always()
        .underived("shared transformer blocks are not in the derivation"),
    fact("shared-uses", G::Variants, K::Count, "Shared block uses", "",
        "Layers that run a shared block, each with its own KV cache and linear (Zamba2: the hybrid layers)", at!(shared_attn.uses)).need(),
    fact("shared-width", G::Variants, K::Count, "Shared block input width", "",
        "Values per token the shared blocks' attention reads (Zamba2: 2 × hidden)", at!(shared_attn.width)).need(),
    fact("shared-mlp-adapter-rank", G::Variants, K::Count, "Shared MLP adapter rank", "0",
        "Rank of each use's adapter on the shared MLP's gate/up projection (Zamba2: adapter_rank)", at!(shared_attn.mlp_adapter_rank)),
    fact("shared-attn-adapter-rank", G::Variants, K::Count, "Shared q/k/v adapter rank", "0",
        "Rank of each use's adapters on the shared q, k and v (Zamba2 with use_shared_attention_adapter)", at!(shared_attn.attn_adapter_rank)),
    fact("layer-scalars", G::Variants, K::Count, "Scalars per layer", "0",
        "Learned scalars per layer (Gemma 4: 1, Apertus: 4)", at!(layer_scalars)),
    fact("indexer-heads", G::Variants, K::Count, "Indexer heads", "none",
        "Sparse attention's indexer heads (DeepSeek-V3.2, GLM-5)", at!(indexer.heads))
        .always(),
    fact("indexer-head-dim", G::Variants, K::Count, "Indexer head dim", "",
        "Indexer head dim (its key cache: the model dtype in transformers, fp8 + an fp32 scale per 128 in vLLM)", at!(indexer.head_dim)).need(),
    fact("cross-layers", G::Variants, K::Count, "Cross-attention layers", "0",
        "Layers attending to an image's vision states instead of the text (Llama 3.2 Vision): no KV over the text, their own cache over cross-tokens", at!(cross_layers))
        .underived("cross-attention layers over vision states are not in the derivation"),
    fact("cross-tokens", G::Variants, K::Count, "Cross-attention tokens", "0",
        "Vision tokens the cross-attention layers read per sequence (Llama 3.2 Vision: 4 tiles × 1025 per image)", at!(cross_tokens)),
    fact("prefix-tokens", G::Variants, K::Count, "Tokens ahead of the prompt", "0",
        "Tokens the model puts ahead of the prompt's ids in every sequence, in its cache and activations (GIT: one image's 197)", at!(prefix_tokens)),
    fact("embedding-extra-rows", G::Variants, K::Count, "Extra embedding rows", "0",
        "Rows of the token embedding beyond the vocabulary (Llama 3.2 Vision: 8)", at!(extra_embedding_rows)),
    fact("tower-params", G::Variants, K::Count, "Vision/audio tower parameters", "0",
        "Parameters of vision/audio towers and projectors, kept in 16 bits", at!(tower_params))
        .underived("vision/audio towers are not in the derivation"),
    fact("tower-hidden", G::Variants, K::Count, "Vision tower width", "none",
        "The vision tower's hidden size, where its forward over an image is derived (Gemma 3, Qwen2.5-VL, Qwen3-VL)", at!(vision.hidden))
        .always(),
    fact("tower-layers", G::Variants, K::Count, "Vision tower layers", "", "The vision tower's layers", at!(vision.layers)).need(),
    fact("tower-heads", G::Variants, K::Count, "Vision tower heads", "", "The vision tower's attention heads", at!(vision.heads)).need(),
    fact("tower-intermediate", G::Variants, K::Count, "Vision tower MLP", "", "The vision tower's MLP intermediate size", at!(vision.intermediate)).need(),
    fact("tower-patch", G::Variants, K::Count, "Vision patch side", "", "Pixels a side of one patch", at!(vision.patch)).need(),
    fact("tower-temporal", G::Variants, K::Count, "Vision patch frames", "1", "Frames one patch spans (Qwen: 2; an image is repeated to fill them)", at!(vision.temporal)),
    fact("tower-channels", G::Variants, K::Count, "Image channels", "3", "Channels of the image", at!(vision.channels)).always(),
    fact("tower-merge", G::Variants, K::Count, "Patch merge side", "0",
        "Patches merged a side into one token (Qwen: 2); 0: a fixed grid pooled by the projector (Gemma 3)", at!(vision.merge)),
    fact("tower-image", G::Variants, K::Count, "Fixed image side", "0", "The side the processor resizes every image to, pixels (Gemma 3: 896); 0: the image's own", at!(vision.image)),
    fact("tower-window", G::Variants, K::Count, "Vision window side", "0", "Window attention's window side, pixels (Qwen2.5-VL: 112); 0: none", at!(vision.window)),
    fact("tower-full-layers", G::Variants, K::Count, "Full-attention tower blocks", "0", "Tower blocks attending over the whole image beside the windowed ones (Qwen2.5-VL: 4)", at!(vision.full_layers)),
    fact("tower-deepstack", G::Variants, K::Count, "Deepstack mergers", "0", "Mergers whose outputs feed the language model's first layers (Qwen3-VL: 3)", at!(vision.deepstack)),
    fact("tower-out", G::Variants, K::Count, "Vision merger width", "0", "Width of the patch merger's output (out_hidden_size)", at!(vision.out)),
    fact("tower-pos-taps", G::Variants, K::Count, "Position taps", "0", "Learned positions interpolated per patch from this many table rows (Qwen3-VL: 4); 0: none", at!(vision.pos_taps)),
    fact("tower-pool", G::Variants, K::Count, "Soft-token pooling side", "0", "Patches pooled a side into one soft token after the encoder (Gemma 4: 3); 0: none", at!(vision.pool)),
    fact("tower-head-dim", G::Variants, K::Count, "Vision head size", "0", "The vision tower's attention head size (Gemma 4: head_dim); 0: its width ÷ heads", at!(vision.head_dim)),
    fact("tower-kv-heads", G::Variants, K::Count, "Vision KV heads", "0", "The vision tower's key/value heads (Gemma 4: num_key_value_heads); 0: as many as its heads", at!(vision.kv_heads)),
    fact("tower-clipped", G::Variants, K::Bool(VisionTower::BASE.clipped), "Clipped vision projections", "",
        "Every projection of the vision tower clamps its input and output (Gemma 4: use_clipped_linears)", at!(vision.clipped)),
    fact("audio-hidden", G::Variants, K::Count, "Audio tower width", "none",
        "The audio tower's width (d_model; hidden_size), where its forward over a clip is derived (Qwen2-Audio, Gemma 4)", at!(audio.hidden))
        .always(),
    fact("audio-layers", G::Variants, K::Count, "Audio tower layers", "", "The audio tower's layers", at!(audio.layers)).need(),
    fact("audio-heads", G::Variants, K::Count, "Audio tower heads", "", "The audio tower's attention heads", at!(audio.heads)).need(),
    fact("audio-intermediate", G::Variants, K::Count, "Audio tower MLP", "", "The audio tower's MLP width (encoder_ffn_dim)", at!(audio.intermediate)).need(),
    fact("audio-mels", G::Variants, K::Count, "Mel bins", "128", "Mel bins of the audio tower's input features", at!(audio.mels)).always(),
    fact("audio-positions", G::Variants, K::Count, "Audio tower frames", "1500", "Frames the audio tower's layers run over (max_source_positions; twice as many feature frames: 30 s)", at!(audio.positions)).always(),
    fact("audio-chunk", G::Variants, K::Count, "Audio attention chunk", "0", "Gemma 4's conformer: frames of the local attention's chunk (attention_chunk_size, 12); 0: Qwen2-Audio's encoder", at!(audio.chunk)),
    fact("audio-context-left", G::Variants, K::Count, "Audio left context", "0", "Gemma 4's conformer: the local attention's left context, its own frame included (attention_context_left, 13)", at!(audio.context_left)),
    fact("audio-context-right", G::Variants, K::Count, "Audio right context", "0", "Gemma 4's conformer: the local attention's right context (attention_context_right, 0)", at!(audio.context_right)),
    fact("audio-conv-channels", G::Variants, K::Count, "Audio subsampling channels", "0", "Gemma 4's conformer: channels of the first subsampling convolution (subsampling_conv_channels[0], 128)", at!(audio.conv_channels)),
    fact("audio-conv-out", G::Variants, K::Count, "Audio subsampling output channels", "0", "Gemma 4's conformer: channels of the second subsampling convolution (subsampling_conv_channels[1], 32)", at!(audio.conv_out)),
    fact("audio-kernel", G::Variants, K::Count, "Audio light convolution kernel", "0", "Gemma 4's conformer: the light convolution's kernel (conv_kernel_size, 5)", at!(audio.kernel)),
    fact("audio-out", G::Variants, K::Count, "Audio output width", "0", "Gemma 4's conformer: width of its output projection (output_proj_dims, 1536)", at!(audio.output)),
    fact("audio-clipped", G::Variants, K::Bool(AudioTower::BASE.clipped), "Clipped audio linears", "",
        "Gemma 4's conformer: every clippable linear clamps its input and output (use_clipped_linears)", at!(audio.clipped)),
    fact("attn-gate", G::Variants, K::Bool(Architecture::BASE.attn_gate), "Gated attention output", "",
        "q_proj also yields an output gate: twice as wide (Qwen3-Next)", at!(attn_gate))
        .underived(GATE_OR_SINKS),
    fact("encoder", G::Variants, K::Bool(Architecture::BASE.encoder), "Encoder-only", "",
        "An encoder (BERT, RoBERTa, XLM-R, ModernBERT): the whole input in one forward, no KV cache, nothing generated, no lm_head", at!(encoder))
        .underived("an encoder's bidirectional forward is not the decoder's derivation"),
    fact("token-types", G::Variants, K::Count, "Token-type embeddings", "none",
        "Rows of the token-type (segment) embedding table (BERT: type_vocab_size)", at!(token_types)),
    fact("pooler", G::Variants, K::Bool(Architecture::BASE.pooler), "Pooler", "",
        "A dense pooler [hidden, hidden] with bias over the first token (BertModel's)", at!(pooler)),
    fact("lm-head-bias", G::Variants, K::Bool(Architecture::BASE.lm_head_bias), "lm_head bias", "",
        "The lm_head has a bias, one value per vocabulary row (Phi-1/2, GPT-J)", at!(lm_head_bias)),
    fact("embedding-norm", G::Variants, K::Bool(Architecture::BASE.embedding_norm), "Embedding norm", "",
        "A norm over the token embeddings before the first layer (BLOOM's word_embeddings_layernorm)", at!(embedding_norm))
        .underived("a norm over the embeddings outside BLOOM's layer (two norms, fused q/k/v, ALiBi, no dropout) is not in the derivation"),
    fact("prediction-head", G::Variants, K::Bool(Architecture::BASE.prediction_head), "Prediction head", "",
        "A dense [hidden, hidden] and a norm between the last layer and the output projection (ModernBERT-decoder's lm_head)", at!(prediction_head))
        .underived("a prediction head before the output projection is not in the derivation"),
    fact("prediction-head-bias", G::Variants, K::Bool(Architecture::BASE.prediction_head_bias), "Prediction head bias", "",
        "The prediction head's dense has a bias (ModernBERT-decoder's classifier_bias)", at!(prediction_head_bias)),
    fact("sub-norms", G::Variants, K::Bool(Architecture::BASE.sub_norms), "Sub-norms", "",
        "A norm over the attention's output and one over the MLP's intermediate, inside each layer (BitNet's attn_sub_norm, ffn_sub_norm)", at!(sub_norms))
        .underived("norms inside the attention and the MLP are not in the derivation"),
    fact("encoder-decoder-params", G::Variants, K::Count, "Encoder-decoder parameters", "decoder-only",
        "An encoder-decoder (T5, BART, Whisper): all its parameters; the decoder's shape is layers, heads and head-dim", at!(encdec_params))
        .underived("an encoder-decoder's forward is not the decoder's derivation"),
    fact("encoder-length", G::Variants, K::Count, "Encoder length", "= context",
        "Tokens or frames the encoder-decoder's encoder reads (source length; Whisper: 1500 frames for 30 s)", at!(encoder_length)),
    fact("encoder-decoder-whole", G::Variants, K::Count, "Encoder-decoder whole per rank", "",
        "An encoder-decoder's stack parameters every tensor-parallel rank keeps whole (norms, row-parallel biases, convolutions, position tables; vLLM's Whisper)", at!(encdec_whole))
        .underived("an encoder-decoder's forward is not the decoder's derivation"),
    fact("encoder-decoder-split", G::Variants, K::Count, "Encoder-decoder split over tp", "",
        "An encoder-decoder's stack parameters split over tensor-parallel ranks (its parallel linears; vLLM's Whisper, with the zero k biases it adds)", at!(encdec_split))
        .underived("an encoder-decoder's forward is not the decoder's derivation"),
    fact("mixer", G::Variants, K::Choice, "State-space mixer", "",
        "Mixer of the state-layers instead of attention: mamba, mamba2, deltanet, kda, shortconv, lightning, rglru or rwkv", at!(mixer.kind))
        .always()
        .choices(&[("", "none (attention only)"), ("mamba", "Mamba"), ("mamba2", "Mamba-2"), ("deltanet", "Gated DeltaNet"), ("kda", "Kimi Delta Attention"), ("shortconv", "Short convolution (LFM2)"), ("lightning", "Lightning attention (MiniMax-Text-01)"), ("rglru", "RG-LRU (RecurrentGemma)"), ("rwkv", "RWKV-4 time mixing")]),
    fact("mixer-inner", G::Variants, K::Count, "Mixer inner width", "",
        "Mamba: d_inner; Mamba-2: heads × head dim; DeltaNet: value heads × value dim; shortconv: hidden", at!(mixer.inner)).need(),
    fact("mixer-state", G::Variants, K::Count, "Mixer state width", "",
        "Mamba, Mamba-2: d_state; DeltaNet: key head dim (unused by shortconv)", at!(mixer.state)),
    fact("mixer-conv", G::Variants, K::Count, "Mixer conv width", "4",
        "Convolution width (d_conv; default 4)", at!(mixer.conv))
        .always(),
    fact("mixer-dt-rank", G::Variants, K::Count, "Mamba Δ rank", "",
        "Mamba: rank of the Δ projection (time_step_rank)", at!(mixer.dt_rank)),
    fact("mixer-heads", G::Variants, K::Count, "Mixer heads", "",
        "Mamba-2: heads; DeltaNet: value heads", at!(mixer.heads)),
    fact("mixer-key-heads", G::Variants, K::Count, "Mixer groups / key heads", "",
        "Mamba-2: B/C groups (n_groups); DeltaNet: key heads", at!(mixer.key_heads)),
    fact("mixer-block", G::Variants, K::Count, "Lightning attention block", "",
        "Lightning attention: the kernel's block (block_size), the width of its decay tables", at!(mixer.block)),
    fact("mixer-norms", G::Variants, K::Bool(Mixer::BASE.norms), "Mamba Δ/B/C norms", "",
        "Mamba: RMSNorms on Δ, B and C (Jamba)", at!(mixer.norms)),
    fact("mixer-gated-norm", G::Variants, K::Bool(Mixer::BASE.gated_norm), "Mamba-2 gated norm", "",
        "Mamba-2: the gated RMSNorm before out_proj (Falcon-H1 without mamba_rms_norm: false)", at!(mixer.gated_norm)),
    fact("attention-layers", G::Variants, K::Count, "Attention layers", "layers − state layers",
        "Layers with attention when not all but the state layers (Nemotron-H; Falcon-H1: all)", at!(attn_layers)),
    fact("mlp-layers", G::Variants, K::Count, "MLP layers", "all",
        "Layers with an MLP, dense or MoE (Nemotron-H; default all)", at!(mlp_layers)),
    fact("experts", G::Moe, K::Count, "Routed experts", "none", "MoE: routed experts per layer", at!(moe.experts))
        .always(),
    fact("active-experts", G::Moe, K::Count, "Active per token", "", "MoE: experts per token", at!(moe.active))
        .need_because("needed with experts"),
    fact("expert-intermediate", G::Moe, K::Count, "Expert intermediate", "= intermediate",
        "MoE: intermediate size of one expert", at!(moe.expert_intermediate))
        .always(),
    fact("shared-experts", G::Moe, K::Count, "Shared experts", "0",
        "MoE: always-on shared experts per layer", at!(moe.shared_experts))
        .always(),
    fact("shared-intermediate", G::Moe, K::Count, "Shared intermediate", "",
        "MoE: intermediate size of one shared expert", at!(moe.shared_intermediate))
        .always(),
    fact("dense-layers", G::Moe, K::Count, "Leading dense layers", "0",
        "MoE: leading layers with a dense MLP", at!(moe.dense_layers))
        .always(),
    fact("moe-every", G::Moe, K::Count, "MoE every n-th layer", "1",
        "MoE: every n-th layer is MoE, the others dense (Llama-4 Maverick: 2)", at!(moe.every)),
    fact("router-bias", G::Moe, K::Bool(Moe::BASE.router_bias), "MoE router bias", "",
        "MoE: a 16-bit bias on the router (gpt-oss)", at!(moe.router_bias)),
    fact("correction-bias", G::Moe, K::Bool(Moe::BASE.correction_bias), "fp32 router bias", "",
        "MoE: the router's fp32 e_score_correction_bias (DeepSeek-V3)", at!(moe.correction_bias)),
    fact("shared-gate", G::Moe, K::Bool(Moe::BASE.shared_gate), "Shared-expert gate", "",
        "MoE: a [1, hidden] gate on the shared expert (Qwen2-MoE, Qwen3-Next)", at!(moe.shared_gate)),
    fact("moe-latent", G::Moe, K::Count, "Expert latent width", "none",
        "MoE: routed experts work at this width between two projections (Nemotron-3 Super)", at!(moe.latent)),
    fact("moe-output-bias", G::Moe, K::Bool(Moe::BASE.output_bias), "MoE output bias", "",
        "MoE: one bias [hidden] on each MoE block's output (JetMoE)", at!(moe.output_bias)),
    fact("group-limited", G::Moe, K::Bool(Moe::BASE.group_limited), "Group-limited router", "",
        "MoE: the router picks its experts within its best groups (DeepSeek-V2's topk_method group_limited_greedy)", at!(moe.group_limited)),
    fact("router-casts", G::Moe, K::Bool(Moe::BASE.router_casts), "Router weights in the model's dtype", "",
        "MoE: the router casts its top-k weights to the compute dtype (Qwen2-MoE, Qwen3-MoE; Mixtral's stay fp32)", at!(moe.router_casts)),
    fact("router-fp32-logits", G::Moe, K::Bool(Moe::BASE.router_fp32_logits), "Router logits in fp32", "",
        "MoE: the router's logits are fp32, held while the experts run (GraniteMoE)", at!(moe.router_fp32_logits)),
    fact("dense-dispatch", G::Moe, K::Bool(Moe::BASE.dense_dispatch), "Every expert over every token", "",
        "MoE: every expert runs over every token, its input weighed by the router's sigmoid score (Llama-4's batched experts)", at!(moe.dense_dispatch)),
];

/// Every fact's rule, the decoder's then the variants', copied out of the rows.
pub static RULES: [FactRule; DECODER_FACTS.len() + VARIANT_FACTS.len()] = rules();

/// Copies the rows' rules into [`RULES`] (at compile time).
// Evaluated by the compiler only: an index past the table is a build error.
#[allow(clippy::arithmetic_side_effects)]
const fn rules() -> [FactRule; DECODER_FACTS.len() + VARIANT_FACTS.len()] {
    let mut out = [DECODER_FACTS[0].rule; DECODER_FACTS.len() + VARIANT_FACTS.len()];
    let mut i = 0;
    while i < DECODER_FACTS.len() {
        out[i] = DECODER_FACTS[i].rule;
        i += 1;
    }
    let mut j = 0;
    while j < VARIANT_FACTS.len() {
        out[i] = VARIANT_FACTS[j].rule;
        i += 1;
        j += 1;
    }
    out
}

/// Every architecture fact's rule, in table order.
pub fn facts() -> impl Iterator<Item = &'static FactRule> {
    RULES.iter()
}

/// The rule of the fact `key`, if it is one.
pub fn fact_of(key: &str) -> Option<&'static FactRule> {
    facts().find(|f| f.key == key)
}

impl Architecture {
    /// Writes every fact whose part is present and whose value differs from its
    /// default (or that is always written) as `key=value` pairs, in table order.
    pub fn write_pairs(&self, put: &mut dyn FnMut(&'static str, String)) {
        for f in facts() {
            let Some(v) = f.value(self) else { continue };
            if (f.always || Some(v) != f.default_value())
                && let Some(text) = v.text()
            {
                put(f.key, text);
            }
        }
    }

    /// The first reason the activation derivations do not cover this architecture's
    /// facts (a fact not at its default whose row says why), if any.
    pub fn underived(&self) -> Option<&'static str> {
        facts().find_map(|f| {
            let why = f.underived?;
            let v = f.value(self)?;
            (Some(v) != f.default_value()).then_some(why)
        })
    }
}

/// The classes parameters are counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamClass {
    /// Token embeddings.
    Embeddings,
    /// Attention projections (and their biases), or the state-space / linear-attention
    /// mixer that replaces attention in a layer (Mamba, Gated DeltaNet).
    Attention,
    /// MLP / expert projections (and their biases), routers included.
    Mlp,
    /// Normalisation weights.
    Norms,
    /// The output projection to the vocabulary.
    LmHead,
    /// Multi-token-prediction layers (their own decoder layer, projections and
    /// vocabulary copies), stored in the checkpoint but used only for speculation.
    Mtp,
    /// Vision/audio towers and their projectors, kept in 16 bits.
    Tower,
    /// An encoder-decoder's stacks beyond its shared embedding, counted as one.
    EncoderDecoder,
}

impl ParamClass {
    /// A short key ("embeddings", "attention", …).
    pub const fn key(self) -> &'static str {
        match self {
            ParamClass::Embeddings => "embeddings",
            ParamClass::Attention => "attention",
            ParamClass::Mlp => "mlp",
            ParamClass::Norms => "norms",
            ParamClass::LmHead => "lm_head",
            ParamClass::Mtp => "mtp",
            ParamClass::Tower => "tower",
            ParamClass::EncoderDecoder => "encoder_decoder",
        }
    }
}

/// The role of a tensor in a layer, which decides its storage format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An MLP / expert linear weight a quantiser converts.
    Linear,
    /// An attention linear weight (some checkpoints keep these unquantised:
    /// gpt-oss's `modules_to_not_convert`, compressed-tensors' `ignore`).
    AttnLinear,
    /// A bias, norm or router weight that stays in the "other" format.
    Kept,
    /// An embedding / lm_head matrix (its own format).
    Vocab,
    /// Kept in fp32 whatever the format (a router's correction bias, KDA's decay
    /// parameters), as the checkpoints store them.
    Fp32,
}

/// A group of identical tensors: `count` tensors of `[rows, cols]` (cols = 1 for vectors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorGroup {
    /// The class the tensors belong to.
    pub class: ParamClass,
    /// Which format applies.
    pub role: Role,
    /// Short name ("q_proj", "experts.down_proj", …).
    pub name: &'static str,
    /// Output features (rows).
    pub rows: u64,
    /// Input features (columns); 1 for a vector.
    pub cols: u64,
    /// How many such tensors in the whole model.
    pub count: u64,
    /// Per token, how many of them are used (MoE: active experts); equals `count` when dense.
    pub active: u64,
}

impl TensorGroup {
    /// Elements of all tensors in the group.
    pub fn params(&self) -> Result<u64, EstimateError> {
        checked_product(&[self.rows, self.cols, self.count], "parameter count")
    }
}

/// Which format each role is stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleFormats {
    /// MLP and expert linear weights.
    pub linear: StorageFormat,
    /// Attention linear weights.
    pub attention: StorageFormat,
    /// Embeddings and lm_head.
    pub vocab: StorageFormat,
    /// Norms, biases and routers.
    pub kept: StorageFormat,
    /// The routed experts' weights where they differ from their role's format (a
    /// loader that quantises `nn.Linear` modules only leaves experts stored as 3D
    /// parameters in the model's dtype); `None`: their role's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<StorageFormat>,
}

impl ModuleFormats {
    /// The format a tensor of this role is stored in.
    pub(crate) fn for_role(&self, role: Role) -> StorageFormat {
        match role {
            Role::Linear => self.linear,
            Role::AttnLinear => self.attention,
            Role::Vocab => self.vocab,
            Role::Kept => self.kept,
            Role::Fp32 => StorageFormat::Dense { dtype: Dtype::F32 },
        }
    }

    /// The format a group of tensors is stored in: its role's, or [`Self::experts`]
    /// for the routed experts' matrices (JetMoE's attention experts among them).
    pub fn for_group(&self, tg: &TensorGroup) -> StorageFormat {
        match self.experts {
            Some(f)
                if matches!(tg.role, Role::Linear | Role::AttnLinear)
                    && (tg.name.starts_with("experts.")
                        || tg.name.starts_with("attn_experts.")) =>
            {
                f
            }
            _ => self.for_role(tg.role),
        }
    }
}

/// Parameters and bytes of one class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassTotal {
    /// The class.
    pub class: ParamClass,
    /// Parameters (elements of the logical, unquantised weights).
    pub params: u64,
    /// Parameters used per token (MoE: only active experts).
    pub active_params: u64,
    /// Stored bytes, scales and indices included.
    pub bytes: u64,
    /// Formats used, e.g. "gptq-4-g128 + bf16".
    pub formats: String,
    /// Under a llama.cpp file type, the ggml types it wrote and how many tensors of
    /// each (GGUF counts a layer's experts as one tensor here too: one per expert).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mix: Vec<(GgufType, u64)>,
}

/// The weights of an architecture, class by class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightBreakdown {
    /// One entry per class present.
    pub classes: Vec<ClassTotal>,
    /// Notes on fallbacks and conventions.
    pub notes: Vec<String>,
}

impl WeightBreakdown {
    /// All parameters.
    pub fn params(&self) -> u64 {
        self.classes.iter().map(|c| c.params).sum()
    }
    /// All stored bytes.
    pub fn bytes(&self) -> u64 {
        self.classes.iter().map(|c| c.bytes).sum()
    }
    /// Bytes of one class.
    pub fn class_bytes(&self, class: ParamClass) -> u64 {
        self.classes
            .iter()
            .filter(|c| c.class == class)
            .map(|c| c.bytes)
            .sum()
    }
}

/// A group whose tensors are all used by every token.
fn grp(
    class: ParamClass,
    role: Role,
    name: &'static str,
    rows: u64,
    cols: u64,
    count: u64,
) -> TensorGroup {
    TensorGroup {
        class,
        role,
        name,
        rows,
        cols,
        count,
        active: count,
    }
}

/// Checked sum of two sizes.
fn add(a: u64, b: u64, what: &'static str) -> Result<u64, EstimateError> {
    a.checked_add(b).ok_or(EstimateError::Overflow { what })
}

/// Upper bound on any one dimension: far above any real model, low enough that
/// products of a few dimensions stay well inside `u128`.
pub const MAX_DIM: u64 = 1 << 40;

/// Upper bound on the decoder's layers: the deepest published decoders have a few
/// hundred; rules that replay a step layer by layer (TGI's warm-up through the caching
/// allocator, unsloth's step, vLLM's stages) then stay a few milliseconds whatever the
/// input.
pub const MAX_LAYERS: u64 = 1 << 12;

impl Architecture {
    /// Checks that the shape is usable: every size ≥ 1 where required and at most
    /// [`MAX_DIM`], heads divisible by KV heads, MoE counts coherent.
    pub fn validate(&self) -> Result<(), EstimateError> {
        let mut positive = vec![
            ("vocab", self.vocab),
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("layer-norms", self.layer_norms),
        ];
        // A pure state-space model has no attention (and Mamba no MLP).
        if self.attention_layers() > 0 {
            positive.extend([
                ("heads", self.heads),
                ("kv-heads", self.kv_heads),
                ("head-dim", self.head_dim),
            ]);
        }
        if self.mixer.is_none() {
            positive.push(("intermediate", self.intermediate));
        }
        for (field, v) in positive {
            if v == 0 {
                return Err(EstimateError::invalid(field, "must be at least 1"));
            }
        }
        if self.layers > MAX_LAYERS {
            return Err(EstimateError::invalid(
                "layers",
                format!(
                    "{} layers is beyond any decoder (at most {MAX_LAYERS}; the deepest have a few hundred)",
                    self.layers
                ),
            ));
        }
        for (field, v) in [
            ("attention-layers", self.attn_layers),
            ("mlp-layers", self.mlp_layers),
        ] {
            if v.is_some_and(|v| v > self.layers) {
                return Err(EstimateError::invalid(field, "more than layers"));
            }
        }
        if let Some(sa) = self.shared_attn {
            for (field, v) in [
                ("shared-blocks", sa.blocks),
                ("shared-uses", sa.uses),
                ("shared-width", sa.width),
            ] {
                if v == 0 {
                    return Err(EstimateError::invalid(
                        field,
                        "must be at least 1 with shared-blocks",
                    ));
                }
            }
            if sa.uses > self.layers {
                return Err(EstimateError::invalid("shared-uses", "more than layers"));
            }
        }
        if self.cross_layers > self.attention_layers() {
            return Err(EstimateError::invalid(
                "cross-layers",
                format!(
                    "{} cross-attention layers of {} attention layers",
                    self.cross_layers,
                    self.attention_layers()
                ),
            ));
        }
        if let Some(m) = self.mixer {
            if m.layers > self.layers {
                return Err(EstimateError::invalid(
                    "state-layers",
                    format!("{} state layers of {} layers", m.layers, self.layers),
                ));
            }
            let mut need = vec![("mixer-inner", m.inner)];
            if !matches!(m.kind, MixerKind::Lightning | MixerKind::Rwkv) {
                need.push(("mixer-conv", m.conv));
            }
            if !matches!(
                m.kind,
                MixerKind::ShortConv | MixerKind::RgLru | MixerKind::Rwkv
            ) {
                need.push(("mixer-state", m.state));
            }
            match m.kind {
                MixerKind::ShortConv | MixerKind::Rwkv => {}
                MixerKind::RgLru => need.push(("mixer-heads", m.heads)),
                MixerKind::Lightning => {
                    need.extend([("mixer-heads", m.heads), ("mixer-block", m.block)])
                }
                MixerKind::Mamba => need.push(("mixer-dt-rank", m.dt_rank)),
                MixerKind::DeltaNet | MixerKind::Mamba2 | MixerKind::Kda => {
                    need.extend([("mixer-heads", m.heads), ("mixer-key-heads", m.key_heads)])
                }
            }
            for (field, v) in need {
                if v == 0 {
                    return Err(EstimateError::invalid(
                        field,
                        format!("must be at least 1 with mixer={}", m.kind.name()),
                    ));
                }
                if v > MAX_DIM {
                    return Err(EstimateError::invalid(field, "absurdly large"));
                }
            }
            if !matches!(
                m.kind,
                MixerKind::Mamba | MixerKind::ShortConv | MixerKind::Rwkv
            ) && !m.inner.is_multiple_of(m.heads)
            {
                return Err(EstimateError::invalid(
                    "mixer-inner",
                    format!("{} is not a multiple of {} value heads", m.inner, m.heads),
                ));
            }
        }
        if self.attn_experts > 0 {
            let per = self.heads.checked_div(self.kv_heads).unwrap_or(0);
            if per == 0 || per > self.attn_experts {
                return Err(EstimateError::invalid(
                    "attn-experts",
                    format!(
                        "{} heads over {} KV heads run {per} attention experts per token, more than the {} there are",
                        self.heads, self.kv_heads, self.attn_experts
                    ),
                ));
            }
        }
        if let Some(m) = self.mla {
            for (field, v) in [
                ("kv-lora-rank", m.kv_lora_rank),
                ("v-head-dim", m.v_head_dim),
            ] {
                if v == 0 {
                    return Err(EstimateError::invalid(field, "must be at least 1 with MLA"));
                }
            }
        }
        if let Some(g) = self.global_attn
            && (g.layers > self.attention_layers() || g.kv_heads == 0 || g.head_dim == 0)
        {
            return Err(EstimateError::invalid(
                "global-layers",
                "global layers need KV heads and a head dim, and at most the attention layers",
            ));
        }
        // Every count the table holds (of the parts present) stays below the bound.
        for f in facts() {
            if let Some(v) = f.value(self).and_then(FactValue::count)
                && v > MAX_DIM
            {
                return Err(EstimateError::invalid(
                    f.key,
                    format!("{v} is absurdly large (max {MAX_DIM})"),
                ));
            }
        }
        if let Some(k) = self.kv_share
            && (k.layers >= self.attention_layers()
                || k.global > k.layers
                || self.global_attn.is_some_and(|g| k.global > g.layers))
        {
            return Err(EstimateError::invalid(
                "kv-shared-layers",
                "KV-shared layers must leave at least one attention layer its own cache, and their global layers be among the global layers",
            ));
        }
        if self.attention_layers() > 0
            && (self.kv_heads > self.heads || !self.heads.is_multiple_of(self.kv_heads))
        {
            return Err(EstimateError::invalid(
                "kv-heads",
                format!(
                    "{} KV heads must divide the {} query heads",
                    self.kv_heads, self.heads
                ),
            ));
        }
        if let Some(m) = self.moe {
            if m.experts == 0 || m.active == 0 || m.active > m.experts {
                return Err(EstimateError::invalid(
                    "active-experts",
                    format!(
                        "{} active of {} experts is not possible",
                        m.active, m.experts
                    ),
                ));
            }
            if m.dense_layers > self.layers {
                return Err(EstimateError::invalid(
                    "dense-layers",
                    "more dense layers than layers",
                ));
            }
            if m.every == 0 {
                return Err(EstimateError::invalid("moe-every", "must be at least 1"));
            }
            if m.expert_intermediate == 0 {
                return Err(EstimateError::invalid(
                    "expert-intermediate",
                    "must be at least 1",
                ));
            }
        }
        Ok(())
    }

    /// Vectors one decoder norm holds: a weight, and a bias under LayerNorm with bias;
    /// none without weights.
    fn norm_vectors(&self) -> u64 {
        match (self.nonparametric_norms, self.layernorm_bias) {
            (true, _) => 0,
            (false, true) => 2,
            (false, false) => 1,
        }
    }

    /// Layers with attention (all but the mixer's layers, unless given).
    pub fn attention_layers(&self) -> u64 {
        self.attn_layers.unwrap_or_else(|| {
            self.layers
                .saturating_sub(self.mixer.map_or(0, |m| m.layers))
        })
    }

    /// Layers with an MLP (every layer, unless given).
    pub fn mlp_layer_count(&self) -> u64 {
        self.mlp_layers.unwrap_or(self.layers)
    }

    /// The checkpoint's MTP layers as a decoder of their own, the drafter that
    /// speculates with them: `mtp_layers` layers of this model's attention and MLP (MoE
    /// in every one when the model has experts), with no mixer, block map, global layers,
    /// tower or MTP layers of their own. (Which of a family's facts its MTP layers keep
    /// is the architecture's knowledge, not the engine's.)
    pub fn mtp_drafter(&self) -> Architecture {
        Architecture {
            layers: self.mtp_layers,
            mtp_layers: 0,
            mixer: None,
            attn_layers: None,
            mlp_layers: None,
            global_attn: None,
            per_layer_input: None,
            kv_share: None,
            shared_attn: None,
            tower_params: 0,
            tower_rope_bytes: 0,
            vision: None,
            audio: None,
            moe: self.moe.map(|m| Moe {
                dense_layers: 0,
                every: 1,
                ..m
            }),
            ..*self
        }
    }

    /// The buffers the model builds beside its weights and never stores in the
    /// checkpoint, held on the device all the same (no parameters): what each is and its
    /// bytes, with `dtype_bytes` the model's dtype. CTRL's fp32 sinusoidal position table
    /// (`sinusoid_positions` × hidden × 4 B); GPT-1's causal masks (`mask_positions`²
    /// per attention layer in the model's dtype) with its position ids
    /// (`mask_positions` × 8 B); the rotary embeddings' fp32 frequency buffers
    /// ([`Architecture::rope_tables`]). A new buffer is one more entry here: the
    /// estimate's line lists them all.
    pub fn buffers(&self, dtype_bytes: u64) -> Result<Vec<(String, u64)>, EstimateError> {
        let what = "buffer bytes";
        let mut out = Vec::new();
        if self.sinusoid_positions > 0 {
            out.push((
                format!(
                    "an fp32 sinusoidal position table of {} rows × {}",
                    self.sinusoid_positions, self.hidden
                ),
                checked_product(&[self.sinusoid_positions, self.hidden, 4], what)?,
            ));
        }
        if self.rope_tables > 0 {
            let (freqs, global) = self.rope_freqs();
            let sizes = if self.rope_tables > 1 && global != freqs {
                format!("{freqs} and {global} values")
            } else {
                format!("{freqs} values")
            };
            out.push((
                format!(
                    "{} rotary embedding(s)' fp32 inv_freq and original_inv_freq of {sizes} each",
                    self.rope_tables
                ),
                self.rope_buffer_bytes()?,
            ));
        }
        if self.sincos_positions > 0 {
            let (layers, width) = (self.attention_layers(), self.sincos_width());
            out.push((
                format!(
                    "{layers} fp32 sin/cos tables of {} × {width}",
                    self.sincos_positions
                ),
                self.sincos_bytes()?,
            ));
        }
        if self.tower_rope_bytes > 0 {
            out.push((
                "the tower's rotary tables".to_string(),
                self.tower_rope_bytes,
            ));
        }
        if self.embed_scales > 0 {
            out.push((
                format!("{} embedding scale(s)", self.embed_scales),
                checked_product(&[self.embed_scales, dtype_bytes], what)?,
            ));
        }
        if let Some((layers, width)) = self.mup_shape() {
            out.push((
                format!("{layers} muP vectors of {width}"),
                checked_product(&[layers, width, dtype_bytes], what)?,
            ));
        }
        let n = self.mask_positions;
        if n > 0 {
            let masks = checked_product(&[self.attention_layers(), n, n, dtype_bytes], what)?;
            out.push((
                format!(
                    "a causal mask of {n} × {n} per attention layer in the model's dtype ({dtype_bytes} B) and {n} int64 position ids"
                ),
                add(masks, checked_product(&[n, 8], what)?, what)?,
            ));
        }
        Ok(out)
    }

    /// Values of one rotary table's `inv_freq` (⌈rotary width ÷ 2⌉: `torch.arange(0,
    /// dim, 2)`), and of the full-attention layers' table where they have their own
    /// head width. The width: `rope_dims`, else `rotary_dims`, else MLA's
    /// `qk_rope_dim`, else the head. With one table per layer type, the
    /// full-attention layers' spans their own head width where they have one (Gemma
    /// 4's `global_head_dim`, whose "proportional" rope keeps the whole width, the
    /// unrotated part at frequency 0: transformers 5.23 `modeling_rope_utils.py`,
    /// `_compute_proportional_rope_parameters`).
    fn rope_freqs(&self) -> (u64, u64) {
        let width = [self.rope_dims, self.rotary_dims]
            .into_iter()
            .find(|&w| w > 0)
            .or(self.mla.map(|m| m.qk_rope_dim))
            .unwrap_or(self.head_dim);
        let freqs = width.div_ceil(2);
        (
            freqs,
            self.global_attn.map_or(freqs, |g| g.head_dim.div_ceil(2)),
        )
    }

    /// Bytes of the rotary embeddings' frequency buffers ([`Architecture::rope_tables`]):
    /// two fp32 tensors per table, one table of the full-attention layers' width.
    pub fn rope_buffer_bytes(&self) -> Result<u64, EstimateError> {
        let what = "buffer bytes";
        if self.rope_tables == 0 {
            return Ok(0);
        }
        let (freqs, global) = self.rope_freqs();
        let values = if self.rope_tables > 1 {
            let rest = checked_product(&[self.rope_tables.saturating_sub(1), freqs], what)?;
            add(rest, global, what)?
        } else {
            freqs
        };
        checked_product(&[values, 2, 4], what)
    }

    /// Values of one row of the sin/cos tables ([`Architecture::sincos_positions`]):
    /// `torch.cat((sin, cos), dim=1)` over `torch.arange(0, dim, 2)`, 2 × ⌈dim ÷ 2⌉,
    /// with dim `sincos_dims`, else the hidden size (`rotary_dim or embed_dim`).
    fn sincos_width(&self) -> u64 {
        let dim = if self.sincos_dims > 0 {
            self.sincos_dims
        } else {
            self.hidden
        };
        dim.div_ceil(2).saturating_mul(2)
    }

    /// Bytes of the sin/cos tables: one fp32 table per attention layer.
    fn sincos_bytes(&self) -> Result<u64, EstimateError> {
        if self.sincos_positions == 0 {
            return Ok(0);
        }
        checked_product(
            &[
                self.attention_layers(),
                self.sincos_positions,
                self.sincos_width(),
                4,
            ],
            "buffer bytes",
        )
    }

    /// The muP vectors' (layers, values each) where the model keeps them: the Mamba-2
    /// mixer's layers, its in-projection's output width.
    fn mup_shape(&self) -> Option<(u64, u64)> {
        let m = self
            .mixer
            .filter(|m| self.mup_vectors && m.kind == MixerKind::Mamba2)?;
        let bc = m.key_heads.saturating_mul(m.state).saturating_mul(2);
        let width = m
            .inner
            .saturating_mul(2)
            .saturating_add(bc)
            .saturating_add(m.heads);
        Some((m.layers, width))
    }

    /// Bytes of the buffers transformers' rotary embeddings hold (the frequency
    /// tables, GPT-J's sin/cos tables, the tower's): what an engine that builds its
    /// own rotary embedding does not load (`engine::request::engine_weights`).
    pub fn rotary_buffer_bytes(&self) -> Result<u64, EstimateError> {
        let what = "buffer bytes";
        let b = add(self.rope_buffer_bytes()?, self.sincos_bytes()?, what)?;
        add(b, self.tower_rope_bytes, what)
    }

    /// KV values per token and attention layer (MTP layers are not counted).
    pub fn kv_values_per_token(&self) -> Result<u64, EstimateError> {
        match self.mla {
            // The latent c_kv and the shared rotary key: one vector per token and layer.
            Some(m) => add(m.kv_lora_rank, m.qk_rope_dim, "KV values"),
            None => checked_product(&[2, self.kv_heads, self.head_dim], "KV values"),
        }
    }

    /// KV values per token in the global layers, when they have their own shape.
    pub fn global_kv_values(&self) -> Result<Option<u64>, EstimateError> {
        self.global_attn
            .map(|g| checked_product(&[2, g.kv_heads, g.head_dim], "KV values"))
            .transpose()
    }

    /// The KV-shared layers ([`KvShare`]) by kind: (windowed, global — the
    /// full-attention ones).
    pub fn kv_shared(&self) -> (u64, u64) {
        self.kv_share
            .map_or((0, 0), |k| (k.layers.saturating_sub(k.global), k.global))
    }

    /// Attention layers that keep a KV cache: all but the KV-shared ones.
    pub fn cached_attention_layers(&self) -> u64 {
        let (r, g) = self.kv_shared();
        self.attention_layers().saturating_sub(r).saturating_sub(g)
    }

    /// Values per token and layer an engine that caches decompressed K and V keeps
    /// under MLA: heads × (qk_nope + qk_rope) for K and heads × v_head_dim for V.
    pub fn mla_decompressed_values(&self) -> Result<Option<u64>, EstimateError> {
        let Some(m) = self.mla else { return Ok(None) };
        let k = add(m.qk_nope_dim, m.qk_rope_dim, "KV values")?;
        Ok(Some(checked_product(
            &[self.heads, add(k, m.v_head_dim, "KV values")?],
            "KV values",
        )?))
    }

    /// Every tensor of the model, grouped by identical shape.
    pub fn tensors(&self) -> Result<Vec<TensorGroup>, EstimateError> {
        use ParamClass::*;
        use Role::*;
        let h = self.hidden;
        let rows = add(self.vocab, self.extra_embedding_rows, "embedding rows")?;
        let mut t = vec![grp(Embeddings, Vocab, "embed_tokens", rows, h, 1)];
        if self.encdec_params > 0 {
            // The shared token embedding (T5's and BART's `shared`, Whisper's decoder
            // `embed_tokens`; the head tied to it), then the stacks as the config reader
            // counted them.
            let embed = checked_product(&[self.vocab, h], "parameter count")?;
            let rest = self.encdec_params.checked_sub(embed).ok_or_else(|| {
                EstimateError::invalid(
                    "encoder-decoder-params",
                    "fewer than the shared embedding's vocab × hidden",
                )
            })?;
            t.push(grp(
                EncoderDecoder,
                Linear,
                "encoder and decoder stacks",
                rest,
                1,
                1,
            ));
            t.retain(|tg| tg.count > 0 && tg.rows > 0);
            return Ok(t);
        }
        if self.learned_positions > 0 {
            t.push(grp(
                Embeddings,
                Vocab,
                "position embeddings",
                self.learned_positions,
                h,
                1,
            ));
        }
        if self.token_types > 0 {
            t.push(grp(
                Embeddings,
                Vocab,
                "token-type embeddings",
                self.token_types,
                h,
                1,
            ));
        }
        let mlp = self.mlp_layer_count();
        let (dense, moe_layers) = match self.moe {
            Some(m) => {
                let moe = m.moe_layers(mlp);
                (mlp.saturating_sub(moe), moe)
            }
            None => (mlp, 0),
        };
        // Shared blocks hold the attention of the layers that use them.
        let own_attention = match self.shared_attn {
            Some(_) => 0,
            None => self.attention_layers(),
        };
        self.push_layers(&mut t, None, self.layers, own_attention, dense, moe_layers)?;
        if let Some(m) = self.mixer {
            self.push_mixer(&mut t, m)?;
        }
        if let Some(s) = self.shared_attn {
            self.push_shared(&mut t, s)?;
        }
        if self.cross_layers > 0 {
            // MllamaTextCrossAttention's q_norm and k_norm (one head wide) and the
            // layer's `cross_attn_attn_gate` and `cross_attn_mlp_gate` (one value
            // each); its projections are the attention layers' own.
            let l = self.cross_layers;
            t.push(grp(
                Norms,
                Kept,
                "cross_attn.q/k_norm",
                self.head_dim,
                1,
                l.saturating_mul(2),
            ));
            t.push(grp(Attention, Kept, "cross_attn gates", 2, 1, l));
        }
        // An encoder's norm outside the layers is its embeddings' (BERT's
        // `embeddings.LayerNorm`, ModernBERT's `embeddings.norm`; ModernBERT's layer 0
        // has no attention norm and its `final_norm` takes that place): one, as here.
        if self.final_norm {
            t.push(grp(Norms, Kept, "final norm", h, 1, self.norm_vectors()));
        }
        if self.embedding_norm {
            t.push(grp(
                Norms,
                Kept,
                "embedding norm",
                h,
                1,
                self.norm_vectors(),
            ));
        }
        if self.pooler {
            // BertPooler: dense [hidden, hidden] + bias (tanh has no tensor).
            t.push(grp(Mlp, Linear, "pooler dense", h, h, 1));
            t.push(grp(Mlp, Kept, "pooler bias", h, 1, 1));
        }
        if !self.tied_embeddings && !self.encoder {
            t.push(grp(LmHead, Vocab, "lm_head", self.vocab, h, 1));
        }
        if self.prediction_head && !self.encoder {
            // ModernBertDecoderPredictionHead: `dense` [hidden, hidden] (its bias under
            // `classifier_bias`), the activation (no tensor), `norm` of the layers' kind.
            t.push(grp(LmHead, Linear, "prediction head dense", h, h, 1));
            if self.prediction_head_bias {
                t.push(grp(LmHead, Kept, "prediction head bias", h, 1, 1));
            }
            t.push(grp(
                Norms,
                Kept,
                "prediction head norm",
                h,
                1,
                self.norm_vectors(),
            ));
        }
        if self.lm_head_bias && !self.encoder {
            // One value per vocabulary row, replicated on every rank (the safe side).
            t.push(grp(LmHead, Kept, "lm_head.bias", self.vocab, 1, 1));
        }
        if self.mtp_layers > 0 && self.mlp_layers.is_some() {
            // A block-pattern model (Nemotron-H, whose blocks are each one norm and one
            // mixer): Nemotron-3's MTP per predicted token (mtp_hybrid_override_pattern
            // "*E"; vLLM's nemotron_h_mtp.py): an attention block then an MLP block
            // (MoE when the backbone has one), each with its norm, enorm + hnorm and
            // eh_proj [hidden, 2·hidden] on the first, final_layernorm on the last; the
            // embedding and lm_head are the backbone's (no copies).
            let n = self.mtp_layers;
            let (dense_mtp, moe_mtp) = if self.moe.is_some() { (0, n) } else { (n, 0) };
            self.push_layers(&mut t, Some(Mtp), n, n, dense_mtp, moe_mtp)?;
            let blocks_norms = n.saturating_mul(self.layer_norms.max(1));
            let norms = n.saturating_mul(5).saturating_sub(blocks_norms);
            t.push(grp(Mtp, Kept, "mtp norms", h, 1, norms));
            t.push(grp(Mtp, Linear, "mtp eh_proj", h, h.saturating_mul(2), n));
            for tg in t.iter_mut().filter(|tg| tg.class == Mtp) {
                tg.active = 0;
            }
        } else if self.mtp_layers > 0 {
            // DeepSeek-V3's layout (modeling_deepseek / the checkpoint's layer 61):
            // a full MoE decoder layer, enorm + hnorm + shared_head.norm, eh_proj
            // [hidden, 2·hidden], and its own embed_tokens and shared_head.head copies.
            let n = self.mtp_layers;
            let moe = u64::from(self.moe.is_some());
            // Dimensions are at most MAX_DIM (validated): these small multiples
            // cannot saturate.
            let (dense_mtp, moe_mtp) = if moe == 1 { (0, n) } else { (n, 0) };
            self.push_layers(&mut t, Some(Mtp), n, n, dense_mtp, moe_mtp)?;
            t.push(grp(Mtp, Kept, "mtp norms", h, 1, n.saturating_mul(3)));
            t.push(grp(Mtp, Linear, "mtp eh_proj", h, h.saturating_mul(2), n));
            if !self.mtp_shared_vocab {
                t.push(grp(
                    Mtp,
                    Vocab,
                    "mtp embed/head copies",
                    self.vocab,
                    h,
                    n.saturating_mul(2),
                ));
            }
            // Not used to produce a token: no part of the active parameters.
            for tg in t.iter_mut().filter(|tg| tg.class == Mtp) {
                tg.active = 0;
            }
        }
        if let Some(p) = self.per_layer_input {
            let l = self.layers;
            let wide = checked_product(&[l, p.width], "per-layer input width")?;
            t.push(grp(
                Embeddings,
                Vocab,
                "embed_tokens_per_layer",
                p.vocab,
                wide,
                1,
            ));
            t.push(grp(
                Embeddings,
                Kept,
                "per_layer_model_projection",
                wide,
                h,
                1,
            ));
            t.push(grp(Norms, Kept, "per_layer_projection_norm", p.width, 1, 1));
            t.push(grp(Mlp, Kept, "per_layer_input_gate", p.width, h, l));
            t.push(grp(Mlp, Kept, "per_layer_projection", h, p.width, l));
            t.push(grp(Norms, Kept, "post_per_layer_input_norm", h, 1, l));
        }
        if self.tower_params > 0 {
            // Not used to produce a text token: no part of the active parameters.
            t.push(TensorGroup {
                active: 0,
                ..grp(Tower, Kept, "vision/audio tower", self.tower_params, 1, 1)
            });
        }
        t.retain(|tg| tg.count > 0);
        Ok(t)
    }

    /// The shared blocks' tensors and each use's own (see [`SharedAttn`]): per block
    /// q/k/v (from `width`), o_proj, the two RMSNorms and the gated MLP
    /// (`gate_up_proj`, `down_proj`, no biases); per use the `linear` and the adapters.
    fn push_shared(&self, t: &mut Vec<TensorGroup>, s: SharedAttn) -> Result<(), EstimateError> {
        use ParamClass::*;
        use Role::*;
        let (h, w, b, u) = (self.hidden, s.width, s.blocks.min(s.uses), s.uses);
        let what = "shared block width";
        let q = checked_product(&[self.heads, self.head_dim], what)?;
        let kv = checked_product(&[self.kv_heads, self.head_dim], what)?;
        let i = self.intermediate;
        let gate_up = checked_product(&[2, i], what)?;
        t.push(grp(Attention, AttnLinear, "shared q_proj", q, w, b));
        t.push(grp(
            Attention,
            AttnLinear,
            "shared k/v_proj",
            kv,
            w,
            b.saturating_mul(2),
        ));
        t.push(grp(Attention, AttnLinear, "shared o_proj", h, q, b));
        t.push(grp(Norms, Kept, "shared input_layernorm", w, 1, b));
        t.push(grp(Norms, Kept, "shared pre_ff_layernorm", h, 1, b));
        t.push(grp(Mlp, Linear, "shared gate_up_proj", gate_up, h, b));
        t.push(grp(Mlp, Linear, "shared down_proj", h, i, b));
        t.push(grp(Attention, AttnLinear, "hybrid linear", h, h, u));
        let r = s.mlp_adapter_rank;
        if r > 0 {
            t.push(grp(Mlp, Linear, "gate_up adapter down", r, h, u));
            t.push(grp(Mlp, Linear, "gate_up adapter up", gate_up, r, u));
        }
        let r = s.attn_adapter_rank;
        if r > 0 {
            let three = u.saturating_mul(3);
            t.push(grp(
                Attention,
                AttnLinear,
                "q/k/v adapter down",
                r,
                w,
                three,
            ));
            t.push(grp(Attention, AttnLinear, "q/k/v adapter up", w, r, three));
        }
        Ok(())
    }

    /// The tensors of the mixer's layers, as transformers' `MambaMixer` /
    /// `JambaMambaMixer` / `Qwen3NextGatedDeltaNet` store them (counted under the
    /// attention class: they are the layer's token mixer).
    fn push_mixer(&self, t: &mut Vec<TensorGroup>, m: Mixer) -> Result<(), EstimateError> {
        use ParamClass::*;
        use Role::*;
        let (h, l, d, n, k) = (self.hidden, m.layers, m.inner, m.state, m.conv);
        let w = "mixer width";
        match m.kind {
            MixerKind::Rwkv => {
                let three = l.saturating_mul(3);
                t.push(grp(
                    Attention,
                    AttnLinear,
                    "attention.key/value/receptance",
                    d,
                    h,
                    three,
                ));
                t.push(grp(Attention, AttnLinear, "attention.output", h, d, l));
                t.push(grp(
                    Attention,
                    Kept,
                    "attention.time_decay/time_first",
                    d,
                    1,
                    l.saturating_mul(2),
                ));
                // time_mix_key, _value, _receptance of the time mixing; _key,
                // _receptance of the channel mixing.
                t.push(grp(Attention, Kept, "time_mix", h, 1, l.saturating_mul(5)));
                t.push(grp(Mlp, Linear, "feed_forward.receptance", h, h, l));
            }
            MixerKind::RgLru => {
                // linear_x, linear_y [inner, hidden] and linear_out, each with its bias;
                // conv_1d [inner, taps] with bias; the gates: heads blocks of
                // (inner / heads)² (= inner × block width) with a bias each, and
                // recurrent_param [inner].
                let block = d.checked_div(m.heads).unwrap_or(0);
                let two = l.saturating_mul(2);
                t.push(grp(Attention, AttnLinear, "temporal.linear_x/y", d, h, two));
                t.push(grp(Attention, Kept, "temporal.linear_x/y.bias", d, 1, two));
                t.push(grp(Attention, AttnLinear, "temporal.linear_out", h, d, l));
                t.push(grp(Attention, Kept, "temporal.linear_out.bias", h, 1, l));
                t.push(grp(Attention, Kept, "temporal.conv_1d", d, k, l));
                t.push(grp(Attention, Kept, "temporal.conv_1d.bias", d, 1, l));
                t.push(grp(Attention, Kept, "rg_lru.gate weights", d, block, two));
                t.push(grp(
                    Attention,
                    Kept,
                    "rg_lru.gate biases/recurrent_param",
                    d,
                    1,
                    l.saturating_mul(3),
                ));
            }
            MixerKind::Lightning => {
                // qkv_proj, output_gate, the norm over all heads, out_proj; the decay
                // tables are persistent buffers (in the state dict): slope_rate
                // [heads], query_decay and key_decay [heads, block], diagonal_decay
                // [heads, block, block].
                t.push(grp(
                    Attention,
                    AttnLinear,
                    "lightning.qkv_proj",
                    checked_product(&[3, d], w)?,
                    h,
                    l,
                ));
                t.push(grp(Attention, AttnLinear, "lightning.output_gate", d, h, l));
                t.push(grp(Norms, Kept, "lightning.norm", d, 1, l));
                t.push(grp(Attention, AttnLinear, "lightning.out_proj", h, d, l));
                let b = m.block;
                let tables = add(
                    add(1, checked_product(&[2, b], w)?, w)?,
                    checked_product(&[b, b], w)?,
                    w,
                )?;
                t.push(grp(
                    Attention,
                    Kept,
                    "lightning decay tables",
                    m.heads,
                    tables,
                    l,
                ));
            }
            MixerKind::ShortConv => {
                // in_proj to B, C and x; the depthwise conv (one filter of `conv` taps
                // per channel, no bias); out_proj. LFM2's `conv_bias` is false in every
                // published config (the reader names the other case).
                t.push(grp(
                    Attention,
                    AttnLinear,
                    "conv.in_proj",
                    checked_product(&[3, d], w)?,
                    h,
                    l,
                ));
                t.push(grp(Attention, Kept, "conv.conv", d, k, l));
                t.push(grp(Attention, AttnLinear, "conv.out_proj", h, d, l));
            }
            MixerKind::Mamba => {
                let r = m.dt_rank;
                t.push(grp(
                    Attention,
                    AttnLinear,
                    "mixer.in_proj",
                    checked_product(&[2, d], w)?,
                    h,
                    l,
                ));
                t.push(grp(Attention, Kept, "mixer.conv1d", d, k, l));
                t.push(grp(Attention, Kept, "mixer.conv1d.bias", d, 1, l));
                let x_out = add(r, checked_product(&[2, n], w)?, w)?;
                t.push(grp(Attention, AttnLinear, "mixer.x_proj", x_out, d, l));
                t.push(grp(Attention, AttnLinear, "mixer.dt_proj", d, r, l));
                t.push(grp(Attention, Kept, "mixer.dt_proj.bias", d, 1, l));
                t.push(grp(Attention, Kept, "mixer.A_log", d, n, l));
                t.push(grp(Attention, Kept, "mixer.D", d, 1, l));
                t.push(grp(Attention, AttnLinear, "mixer.out_proj", h, d, l));
                if m.norms {
                    t.push(grp(Norms, Kept, "mixer.dt_layernorm", r, 1, l));
                    t.push(grp(
                        Norms,
                        Kept,
                        "mixer.b/c_layernorm",
                        n,
                        1,
                        l.saturating_mul(2),
                    ));
                }
            }
            MixerKind::Mamba2 => {
                // in_proj: z and x (inner each), B and C (groups × d_state each), dt (heads).
                let bc = checked_product(&[2, m.key_heads, n], w)?;
                let zx = checked_product(&[2, d], w)?;
                let in_rows = add(add(zx, bc, w)?, m.heads, w)?;
                let conv_dim = add(d, bc, w)?;
                t.push(grp(Attention, AttnLinear, "mixer.in_proj", in_rows, h, l));
                t.push(grp(Attention, Kept, "mixer.conv1d", conv_dim, k, l));
                t.push(grp(Attention, Kept, "mixer.conv1d.bias", conv_dim, 1, l));
                t.push(grp(
                    Attention,
                    Kept,
                    "mixer.dt_bias/A_log/D",
                    m.heads,
                    1,
                    l.saturating_mul(3),
                ));
                if m.gated_norm {
                    t.push(grp(Norms, Kept, "mixer.norm", d, 1, l));
                }
                t.push(grp(Attention, AttnLinear, "mixer.out_proj", h, d, l));
            }
            MixerKind::Kda => {
                // q, k and v projections and their short convolutions (no bias); the
                // low-rank decay (f_a, f_b) and output-gate (g_a, g_b) projections of
                // rank head_dim; the β projection b_proj; A_log and dt_bias in fp32; the
                // output norm over one head; o_proj (the checkpoint's self_attn.*).
                let hd = d.checked_div(m.heads).unwrap_or(0);
                let three = l.saturating_mul(3);
                let two = l.saturating_mul(2);
                t.push(grp(Attention, AttnLinear, "kda.q/k/v_proj", d, h, three));
                t.push(grp(Attention, Kept, "kda.q/k/v_conv1d", d, k, three));
                t.push(grp(Attention, AttnLinear, "kda.f/g_a_proj", hd, h, two));
                t.push(grp(Attention, AttnLinear, "kda.f/g_b_proj", d, hd, two));
                t.push(grp(Attention, AttnLinear, "kda.b_proj", m.heads, h, l));
                t.push(grp(Attention, Fp32, "kda.A_log", m.heads, 1, l));
                t.push(grp(Attention, Fp32, "kda.dt_bias", d, 1, l));
                t.push(grp(Norms, Kept, "kda.o_norm", hd, 1, l));
                t.push(grp(Attention, AttnLinear, "kda.o_proj", h, d, l));
            }
            MixerKind::DeltaNet => {
                let key = checked_product(&[m.key_heads, n], w)?;
                let qk = checked_product(&[2, key], w)?;
                let qkvz = add(qk, checked_product(&[2, d], w)?, w)?;
                let ba = checked_product(&[2, m.heads], w)?;
                t.push(grp(
                    Attention,
                    AttnLinear,
                    "linear_attn.in_proj_qkvz",
                    qkvz,
                    h,
                    l,
                ));
                t.push(grp(
                    Attention,
                    AttnLinear,
                    "linear_attn.in_proj_ba",
                    ba,
                    h,
                    l,
                ));
                t.push(grp(
                    Attention,
                    Kept,
                    "linear_attn.conv1d",
                    add(qk, d, w)?,
                    k,
                    l,
                ));
                t.push(grp(
                    Attention,
                    Kept,
                    "linear_attn.dt_bias/A_log",
                    m.heads,
                    1,
                    l.saturating_mul(2),
                ));
                // Validated: heads divide inner.
                let dv = d.checked_div(m.heads).unwrap_or(0);
                t.push(grp(Norms, Kept, "linear_attn.norm", dv, 1, l));
                t.push(grp(Attention, AttnLinear, "linear_attn.out_proj", h, d, l));
            }
        }
        Ok(())
    }

    /// The tensors of `layers` decoder layers, `a` of them with attention, `dense`
    /// with a dense MLP and `moe` with experts; `class` overrides the classes (MTP layers).
    fn push_layers(
        &self,
        t: &mut Vec<TensorGroup>,
        class: Option<ParamClass>,
        l: u64,
        a: u64,
        dense: u64,
        moe: u64,
    ) -> Result<(), EstimateError> {
        use ParamClass::*;
        use Role::*;
        let h = self.hidden;
        let start = t.len();
        let attn = class.unwrap_or(Attention);
        let norms = class.unwrap_or(Norms);
        let q = checked_product(&[self.heads, self.head_dim], "attention width")?;
        // Qwen3-Next's q_proj also yields the output gate: twice the width.
        let q_rows = checked_product(&[q, if self.attn_gate { 2 } else { 1 }], "attention width")?;
        let kv = checked_product(&[self.kv_heads, self.head_dim], "attention width")?;
        // Gemma 4's global layers (not in MTP layers, not with MLA) and the others.
        let global = self
            .global_attn
            .filter(|_| class.is_none() && self.mla.is_none());
        let regular = a.saturating_sub(global.map_or(0, |g| g.layers));
        // KV-shared layers hold no k_proj, v_proj or k_norm (not in MTP layers): the
        // global ones are global layers' where the model has those.
        let (shared_r, shared_g) = match (class, global) {
            (None, Some(_)) => self.kv_shared(),
            (None, None) => (self.kv_share.map_or(0, |k| k.layers), 0),
            _ => (0, 0),
        };
        let kv_regular = regular.saturating_sub(shared_r);
        match self.mla {
            Some(m) => {
                let qk = add(m.qk_nope_dim, m.qk_rope_dim, "attention width")?;
                let q_out = checked_product(&[self.heads, qk], "attention width")?;
                if m.q_lora_rank > 0 {
                    t.push(grp(attn, AttnLinear, "q_a_proj", m.q_lora_rank, h, a));
                    t.push(grp(norms, Kept, "q_a_layernorm", m.q_lora_rank, 1, a));
                    t.push(grp(attn, AttnLinear, "q_b_proj", q_out, m.q_lora_rank, a));
                } else {
                    t.push(grp(attn, AttnLinear, "q_proj", q_out, h, a));
                }
                let kv_a = add(m.kv_lora_rank, m.qk_rope_dim, "attention width")?;
                let kv_b = checked_product(
                    &[
                        self.heads,
                        add(m.qk_nope_dim, m.v_head_dim, "attention width")?,
                    ],
                    "attention width",
                )?;
                let o_in = checked_product(&[self.heads, m.v_head_dim], "attention width")?;
                t.push(grp(attn, AttnLinear, "kv_a_proj_with_mqa", kv_a, h, a));
                // `attention_bias` gives the down-projections a bias, not q_proj or the
                // up-projections (transformers 5.23 DeepseekV2Attention,
                // DeepseekV3Attention).
                if self.qkv_bias {
                    if m.q_lora_rank > 0 {
                        t.push(grp(attn, Kept, "q_a_proj.bias", m.q_lora_rank, 1, a));
                    }
                    t.push(grp(attn, Kept, "kv_a_proj_with_mqa.bias", kv_a, 1, a));
                }
                t.push(grp(norms, Kept, "kv_a_layernorm", m.kv_lora_rank, 1, a));
                t.push(grp(attn, AttnLinear, "kv_b_proj", kv_b, m.kv_lora_rank, a));
                t.push(grp(attn, AttnLinear, "o_proj", h, o_in, a));
                if let Some(x) = self.indexer {
                    let q_in = if m.q_lora_rank > 0 { m.q_lora_rank } else { h };
                    let wq = checked_product(&[x.heads, x.head_dim], "indexer width")?;
                    t.push(grp(attn, AttnLinear, "indexer.wq_b", wq, q_in, a));
                    t.push(grp(attn, AttnLinear, "indexer.wk", x.head_dim, h, a));
                    t.push(grp(
                        norms,
                        Kept,
                        "indexer.k_norm",
                        x.head_dim,
                        1,
                        a.saturating_mul(2),
                    ));
                    // Unquantised in the fp8 checkpoints (vLLM: quant_config None).
                    t.push(grp(attn, Kept, "indexer.weights_proj", x.heads, h, a));
                }
            }
            None => {
                // Gemma 4's global layers: their own widths, no v_proj with k = v.
                if let Some(g) = global {
                    let gq = checked_product(&[self.heads, g.head_dim], "attention width")?;
                    let gkv = checked_product(&[g.kv_heads, g.head_dim], "attention width")?;
                    let n = g.layers;
                    let kv_n = n.saturating_sub(shared_g);
                    t.push(grp(attn, AttnLinear, "global q_proj", gq, h, n));
                    t.push(grp(attn, AttnLinear, "global k_proj", gkv, h, kv_n));
                    if !g.k_eq_v {
                        t.push(grp(attn, AttnLinear, "global v_proj", gkv, h, kv_n));
                    }
                    t.push(grp(attn, AttnLinear, "global o_proj", h, gq, n));
                    if self.qk_norm {
                        t.push(grp(
                            norms,
                            Kept,
                            "global q_norm/k_norm",
                            g.head_dim,
                            1,
                            n.saturating_add(kv_n),
                        ));
                    }
                }
                if self.attn_experts > 0 {
                    // JetMoE's JetMoeMoA: per layer a router and `attn_experts` pairs
                    // of query and output projections `kv_heads × head_dim` wide, of
                    // which heads ÷ kv_heads run per token (validated: a whole number
                    // at most attn_experts).
                    let e = self.attn_experts;
                    let all = checked_product(&[regular, e], "attention experts")?;
                    let per = self.heads.checked_div(self.kv_heads).unwrap_or(0);
                    let active = checked_product(&[regular, per], "attention experts")?;
                    t.push(grp(attn, Kept, "attn_experts.router", e, h, regular));
                    t.push(TensorGroup {
                        active,
                        ..grp(attn, AttnLinear, "attn_experts.q_proj", kv, h, all)
                    });
                    t.push(TensorGroup {
                        active,
                        ..grp(attn, AttnLinear, "attn_experts.o_proj", h, kv, all)
                    });
                } else {
                    t.push(grp(attn, AttnLinear, "q_proj", q_rows, h, regular));
                    t.push(grp(attn, AttnLinear, "o_proj", h, q, regular));
                }
                t.push(grp(attn, AttnLinear, "k_proj", kv, h, kv_regular));
                t.push(grp(attn, AttnLinear, "v_proj", kv, h, kv_regular));
                if self.qkv_bias {
                    t.push(grp(attn, Kept, "q_proj.bias", q, 1, regular));
                    t.push(grp(attn, Kept, "k_proj.bias", kv, 1, kv_regular));
                    t.push(grp(attn, Kept, "v_proj.bias", kv, 1, kv_regular));
                }
            }
        }
        if self.o_bias {
            t.push(grp(attn, Kept, "o_proj.bias", h, 1, a));
        }
        if self.attn_sinks {
            t.push(grp(attn, Kept, "sinks", self.heads, 1, a));
        }
        let per_layer = checked_product(&[l, self.layer_norms, self.norm_vectors()], "norms")?;
        t.push(grp(norms, Kept, "layer norms", h, 1, per_layer));
        if self.layer_scalars > 0 {
            t.push(grp(norms, Kept, "layer scalars", self.layer_scalars, 1, l));
        }
        if self.sub_norms {
            let v = self.norm_vectors();
            t.push(grp(norms, Kept, "attn_sub_norm", h, 1, a.saturating_mul(v)));
            let width = self.intermediate;
            t.push(grp(
                norms,
                Kept,
                "ffn_sub_norm",
                width,
                1,
                dense.saturating_mul(v),
            ));
        }
        if self.qk_norm_whole {
            t.push(grp(norms, Kept, "q_norm", q, 1, a));
            t.push(grp(norms, Kept, "k_norm", kv, 1, a));
        } else if self.qk_norm {
            t.push(grp(
                norms,
                Kept,
                "q_norm/k_norm",
                self.head_dim,
                1,
                regular.saturating_add(kv_regular),
            ));
        }
        if self.intermediate > 0 {
            // The KV-shared layers' MLP twice as wide (`use_double_wide_mlp`).
            let wide = match self.kv_share {
                Some(k) if k.double_wide_mlp && class.is_none() => k.layers.min(dense),
                _ => 0,
            };
            let narrow = dense.saturating_sub(wide);
            self.push_mlp(t, "mlp", self.intermediate, self.hidden, narrow, narrow)?;
            if wide > 0 {
                let inter = checked_product(&[self.intermediate, 2], "intermediate")?;
                self.push_mlp(t, "mlp", inter, self.hidden, wide, wide)?;
            }
        }
        if let Some(m) = self.moe.filter(|_| moe > 0) {
            t.push(grp(Mlp, Kept, "router", m.experts, h, moe));
            if m.router_bias {
                t.push(grp(Mlp, Kept, "router.bias", m.experts, 1, moe));
            }
            if m.correction_bias {
                t.push(grp(
                    Mlp,
                    Fp32,
                    "router.e_score_correction_bias",
                    m.experts,
                    1,
                    moe,
                ));
            }
            let all = checked_product(&[moe, m.experts], "experts")?;
            let active = checked_product(&[moe, m.active], "experts")?;
            let width = if m.latent > 0 {
                t.push(grp(Mlp, Linear, "fc1_latent_proj", m.latent, h, moe));
                t.push(grp(Mlp, Linear, "fc2_latent_proj", h, m.latent, moe));
                if self.mlp_bias {
                    // vLLM's NemotronHMoE: bias=config.mlp_bias on both.
                    t.push(grp(
                        Mlp,
                        Kept,
                        "latent_proj bias",
                        m.latent.saturating_add(h),
                        1,
                        moe,
                    ));
                }
                m.latent
            } else {
                h
            };
            self.push_mlp(t, "experts", m.expert_intermediate, width, all, active)?;
            if m.output_bias {
                t.push(grp(Mlp, Kept, "moe output bias", h, 1, moe));
            }
            if m.shared_experts > 0 {
                let n = checked_product(&[moe, m.shared_experts], "experts")?;
                self.push_mlp(t, "shared_experts", m.shared_intermediate.max(1), h, n, n)?;
                if m.shared_gate {
                    t.push(grp(Mlp, Kept, "shared_expert_gate", 1, h, n));
                }
            }
        }
        if let Some(c) = class {
            for tg in &mut t[start..] {
                tg.class = c;
            }
        }
        Ok(())
    }

    fn push_mlp(
        &self,
        t: &mut Vec<TensorGroup>,
        prefix: &'static str,
        inter: u64,
        h: u64,
        count: u64,
        active: u64,
    ) -> Result<(), EstimateError> {
        let names: &[(&'static str, u64, u64)] = match (prefix, self.gated_mlp) {
            ("mlp", true) => &[
                ("gate_proj", inter, h),
                ("up_proj", inter, h),
                ("down_proj", h, inter),
            ],
            ("mlp", false) => &[("up_proj", inter, h), ("down_proj", h, inter)],
            ("experts", true) => &[
                ("experts.gate_proj", inter, h),
                ("experts.up_proj", inter, h),
                ("experts.down_proj", h, inter),
            ],
            ("experts", false) => &[
                ("experts.up_proj", inter, h),
                ("experts.down_proj", h, inter),
            ],
            (_, true) => &[
                ("shared.gate_proj", inter, h),
                ("shared.up_proj", inter, h),
                ("shared.down_proj", h, inter),
            ],
            (_, false) => &[("shared.up_proj", inter, h), ("shared.down_proj", h, inter)],
        };
        for &(name, rows, cols) in names {
            t.push(TensorGroup {
                class: ParamClass::Mlp,
                role: Role::Linear,
                name,
                rows,
                cols,
                count,
                active,
            });
            if self.mlp_bias {
                t.push(TensorGroup {
                    class: ParamClass::Mlp,
                    role: Role::Kept,
                    name: "mlp bias",
                    rows,
                    cols: 1,
                    count,
                    active,
                });
            }
        }
        Ok(())
    }

    /// Parameters and stored bytes per class, each tensor in the format of its role.
    pub fn weights(&self, formats: &ModuleFormats) -> Result<WeightBreakdown, EstimateError> {
        self.validate()?;
        let mut classes: Vec<ClassTotal> = Vec::new();
        let mut notes: Vec<String> = Vec::new();
        let groups = self.tensors()?;
        let runs = self.tensor_formats(&groups, formats)?;
        for (tg, runs) in groups.into_iter().zip(runs) {
            let fmt = formats.for_group(&tg);
            let mut bytes = 0u64;
            let mut mix: Vec<(GgufType, u64)> = Vec::new();
            for &(f, n) in &runs {
                let one = if tg.cols == 1 {
                    f.vector_bytes(tg.rows)?
                } else {
                    let tb = f.matrix_bytes(tg.rows, tg.cols)?;
                    if let Some(n) = tb.note {
                        let n = format!("{}: {n}", tg.name);
                        if !notes.contains(&n) {
                            notes.push(n);
                        }
                    }
                    tb.bytes
                };
                bytes = checked_product(&[one, n], "class bytes")?
                    .checked_add(bytes)
                    .ok_or(EstimateError::Overflow { what: "weights" })?;
                if let (Some(_), StorageFormat::Gguf { ty, .. }) = (fmt.file_type(), f) {
                    add_mix(&mut mix, ty, n);
                }
            }
            let params = tg.params()?;
            let active = checked_product(&[tg.rows, tg.cols, tg.active], "active parameters")?;
            let name = if tg.cols == 1 && fmt.is_quantised() {
                "bf16".to_string()
            } else {
                fmt.name()
            };
            match classes.iter_mut().find(|c| c.class == tg.class) {
                Some(c) => {
                    c.params = c
                        .params
                        .checked_add(params)
                        .ok_or(EstimateError::Overflow { what: "parameters" })?;
                    c.active_params = c.active_params.saturating_add(active);
                    c.bytes = c
                        .bytes
                        .checked_add(bytes)
                        .ok_or(EstimateError::Overflow { what: "weights" })?;
                    if !c.formats.split(" + ").any(|f| f == name) {
                        c.formats = format!("{} + {name}", c.formats);
                    }
                    for (ty, n) in mix {
                        add_mix(&mut c.mix, ty, n);
                    }
                }
                // Inserted where its class sorts (one class at most once), so the
                // list stays in class order.
                None => classes.insert(
                    classes.partition_point(|c| c.class < tg.class),
                    ClassTotal {
                        class: tg.class,
                        params,
                        active_params: active,
                        bytes,
                        formats: name,
                        mix,
                    },
                ),
            }
        }
        let total = classes.iter().try_fold(0u64, |a, c| a.checked_add(c.bytes));
        if total.is_none() {
            return Err(EstimateError::Overflow { what: "weights" });
        }
        Ok(WeightBreakdown { classes, notes })
    }
}

/// Adds `n` tensors of `ty` to a mix's tally.
fn add_mix(mix: &mut Vec<(GgufType, u64)>, ty: GgufType, n: u64) {
    match mix.iter_mut().find(|(t, _)| *t == ty) {
        Some((_, k)) => *k = k.saturating_add(n),
        None => mix.push((ty, n)),
    }
}

/// The category llama-quant.cpp's `tensor_get_category` gives the GGUF tensor a
/// group stands for; `None` for those `tensor_allows_quantization` leaves as they
/// are (positional embeddings).
fn mix_category(tg: &TensorGroup) -> Option<TensorCategory> {
    use TensorCategory::*;
    let name = tg.name;
    let last = name.rsplit(['.', ' ']).next().unwrap_or(name);
    Some(match name {
        "embed_tokens" => TokenEmbd,
        "lm_head" => Output,
        "position embeddings" => return None,
        // DeepSeek's fused key/value up-projection: `attn_kv_b`, attn_v-like.
        "kv_b_proj" => AttnVLike,
        // q_a/q_b/kv_a (`attn_q_a`, `attn_q_b`, `attn_kv_a_mqa`), the indexer, the
        // mixers, eh_proj, the MTP vocabulary copies, the latent projections.
        _ if name.starts_with("mixer.")
            || name.starts_with("linear_attn.")
            || name.starts_with("kda.")
            || name.starts_with("indexer.")
            || name.starts_with("mtp ")
            || name.contains("latent") =>
        {
            Other
        }
        _ => match last {
            "q_proj" => AttnQ,
            "k_proj" => AttnK,
            "v_proj" => AttnVLike,
            "o_proj" => AttnOutput,
            "gate_proj" => FfnGate,
            "up_proj" => FfnUp,
            "down_proj" => FfnDown,
            _ => Other,
        },
    })
}

impl Architecture {
    /// What llama.cpp's quantiser reads of the model when a file type picks a tensor's
    /// type: `hparams.n_gqa()`, `hparams.n_expert`, `LLM_TYPE_70B` (llama-model.cpp:
    /// 80 layers and `n_head != n_head_kv`) and whether `output.weight` is absent.
    pub fn mix_model(&self) -> MixModel {
        MixModel {
            n_gqa: self.heads.checked_div(self.kv_heads).unwrap_or(1),
            n_expert: self.moe.map_or(0, |m| m.experts),
            is_70b: self.layers == 80 && self.kv_heads < self.heads,
            tied: self.tied_embeddings,
        }
    }

    /// The storage format of the tensors of each group of `groups` (this model's
    /// [`Architecture::tensors`]), as runs of (format, tensors) in the group's layer
    /// order: one run, unless a llama.cpp file type picks types by role and layer
    /// (llama-quant.cpp's `llama_tensor_get_type_impl`, format/mix.rs). A layer's
    /// experts share its type. Tensors llama.cpp does not quantise take the kept
    /// format.
    pub fn tensor_formats(
        &self,
        groups: &[TensorGroup],
        formats: &ModuleFormats,
    ) -> Result<Vec<Vec<(StorageFormat, u64)>>, EstimateError> {
        let model = self.mix_model();
        // `n_layer_all`: the GGUF's blocks, MTP (nextn) blocks included.
        let n_layer = self.layers.saturating_add(self.mtp_layers);
        let mixed = |tg: &TensorGroup| {
            tg.cols > 1
                && formats.for_group(tg).file_type().is_some()
                && !matches!(tg.role, Role::Kept | Role::Fp32)
        };
        // `n_attention_wv`: every attn_v-like tensor of the file.
        let n_wv = groups
            .iter()
            .filter(|tg| mixed(tg) && mix_category(tg) == Some(TensorCategory::AttnVLike))
            .try_fold(0u64, |a, tg| a.checked_add(tg.count))
            .ok_or(EstimateError::Overflow { what: "tensors" })?;
        // Which blocks hold experts, when every block has attention and an MLP: block
        // i when i ≥ dense_layers and (i + 1) % every == 0 (`Moe::moe_layers`).
        let mlp = self.mlp_layer_count();
        let moe_count = self.moe.map_or(0, |m| m.moe_layers(mlp));
        let is_moe = |i: u64| {
            self.moe.is_some_and(|m| {
                i >= m.dense_layers
                    && i.checked_add(1).and_then(|j| j.checked_rem(m.every.max(1))) == Some(0)
            })
        };
        let (mut i_wv, mut i_down) = (0u64, 0u64);
        let mut out = Vec::with_capacity(groups.len());
        for tg in groups {
            let fmt = formats.for_group(tg);
            let ft = match fmt.file_type() {
                Some(ft) if mixed(tg) => ft,
                _ => {
                    out.push(vec![(fmt, tg.count)]);
                    continue;
                }
            };
            let Some(category) = mix_category(tg) else {
                out.push(vec![(formats.kept, tg.count)]);
                continue;
            };
            // (index, of, tensors at that index).
            let counted = |from: u64, of: u64| -> Vec<(u64, u64, u64)> {
                (0..tg.count)
                    .map(|k| (from.saturating_add(k), of, 1))
                    .collect()
            };
            let at: Vec<(u64, u64, u64)> = match category {
                TensorCategory::AttnVLike => {
                    let v = counted(i_wv, n_wv);
                    i_wv = i_wv.saturating_add(tg.count);
                    v
                }
                // Dense models: the `i_ffn_down` counter; with experts, the block
                // named in the tensor ("blk.%d.").
                TensorCategory::FfnDown if model.n_expert <= 1 => {
                    let v = counted(i_down, n_layer);
                    i_down = i_down.saturating_add(tg.count);
                    v
                }
                TensorCategory::FfnDown => {
                    let blocks: Vec<u64> = if tg.class == ParamClass::Mtp {
                        (self.layers..n_layer).collect()
                    } else {
                        let experts = tg.name != "down_proj";
                        let want = if experts {
                            moe_count
                        } else {
                            mlp.saturating_sub(moe_count)
                        };
                        let found: Vec<u64> =
                            (0..self.layers).filter(|&i| is_moe(i) == experts).collect();
                        if found.len() as u64 == want {
                            found
                        } else if experts {
                            (self.layers.saturating_sub(want)..self.layers).collect()
                        } else {
                            (0..want).collect()
                        }
                    };
                    let nb = blocks.len() as u64;
                    match tg.count.checked_div(nb) {
                        Some(per) if per > 0 && tg.count.is_multiple_of(nb) => {
                            blocks.into_iter().map(|b| (b, n_layer, per)).collect()
                        }
                        _ => counted(0, tg.count),
                    }
                }
                _ => vec![(0, 1, tg.count)],
            };
            let mut runs: Vec<(StorageFormat, u64)> = Vec::new();
            for (index, count, n) in at {
                let ty = ft.tensor_type(
                    MixTensor {
                        category,
                        index,
                        count,
                        cols: tg.cols,
                    },
                    model,
                );
                let f = StorageFormat::Gguf { ty, mix: None };
                match runs.last_mut() {
                    Some((last, k)) if *last == f => *k = k.saturating_add(n),
                    _ => runs.push((f, n)),
                }
            }
            out.push(runs);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::FIELDS;

    /// The table is the one source: a switch's default in its field is the base's, a
    /// count's numeric placeholder is its base value, every architecture key of the
    /// field table is a fact and every fact is in the field table once.
    #[test]
    fn each_fact_is_one_row_and_its_defaults_are_the_bases() {
        let rows = || DECODER_FACTS.iter().chain(VARIANT_FACTS);
        assert_eq!(rows().count(), RULES.len());
        for (row, f) in rows().zip(facts()) {
            assert_eq!(row.field.key, f.key);
            let d = f
                .default_value()
                .expect("every part is present in WITH_PARTS");
            match (row.field.kind, d) {
                (FieldKind::Bool(b), FactValue::Flag(v)) => assert_eq!(b, v, "{}", f.key),
                (FieldKind::Count, FactValue::Count(n)) => {
                    if let Ok(p) = row.field.placeholder.parse::<u64>() {
                        assert_eq!(p, n, "{}: placeholder", f.key);
                    }
                }
                (FieldKind::Count, FactValue::Maybe(None)) | (FieldKind::Choice, _) => {}
                other => panic!("{}: kind and slot disagree: {other:?}", f.key),
            }
            assert_eq!(FIELDS.iter().filter(|g| g.key == f.key).count(), 1);
            assert!(row.field.group.is_arch(), "{}", f.key);
            // A needed key is written whenever its part is.
            assert!(f.need.is_none() || f.always, "{}", f.key);
        }
        for g in FIELDS.iter().filter(|g| g.group.is_arch()) {
            assert!(fact_of(g.key).is_some(), "{} is not a fact", g.key);
        }
    }

    /// Each count fact is bounded, by its own key.
    #[test]
    fn every_count_fact_is_bounded_by_its_key() {
        let base = Architecture {
            vocab: 100,
            hidden: 64,
            layers: 4,
            heads: 4,
            kv_heads: 4,
            head_dim: 16,
            intermediate: 128,
            mixer: Some(Mixer {
                layers: 1,
                inner: 8,
                state: 4,
                dt_rank: 2,
                ..Mixer::BASE
            }),
            mla: Some(Mla {
                kv_lora_rank: 8,
                qk_nope_dim: 4,
                qk_rope_dim: 4,
                v_head_dim: 4,
                ..Mla::BASE
            }),
            indexer: Some(Indexer {
                heads: 1,
                head_dim: 8,
            }),
            global_attn: Some(GlobalAttn {
                layers: 1,
                kv_heads: 1,
                head_dim: 16,
                k_eq_v: false,
            }),
            per_layer_input: Some(PerLayerInput {
                width: 8,
                vocab: 100,
            }),
            kv_share: Some(KvShare {
                layers: 1,
                global: 0,
                double_wide_mlp: true,
            }),
            shared_attn: Some(SharedAttn {
                blocks: 1,
                uses: 1,
                width: 128,
                mlp_adapter_rank: 4,
                attn_adapter_rank: 4,
            }),
            moe: Some(Moe {
                experts: 4,
                active: 2,
                expert_intermediate: 16,
                ..Moe::BASE
            }),
            ..Architecture::BASE
        };
        let base = Architecture {
            vision: Some(VisionTower {
                hidden: 32,
                layers: 2,
                heads: 2,
                intermediate: 64,
                patch: 14,
                ..VisionTower::BASE
            }),
            audio: Some(AudioTower {
                hidden: 32,
                layers: 2,
                heads: 2,
                intermediate: 64,
                ..AudioTower::BASE
            }),
            ..base
        };
        base.validate()
            .expect("a valid architecture with every part");
        for f in facts() {
            if !matches!(f.default_value(), Some(FactValue::Count(_))) {
                continue;
            }
            let mut a = base;
            f.set(&mut a, MAX_DIM + 1);
            let e = a.validate().expect_err(f.key).to_string();
            assert!(
                e.starts_with(f.key) || e.contains("absurdly"),
                "{}: {e}",
                f.key
            );
        }
    }

    /// GPT-J's per-layer sin/cos tables, Gemma's scales, Falcon-H1's muP vectors and a
    /// tower's rotary tables each have their entry; the rotary ones (and only they)
    /// are what an engine leaves out.
    #[test]
    fn each_buffer_has_its_entry_and_the_rotary_ones_are_set_apart() {
        // GPT-J-6B: 28 layers, rotary_dim 64, 2048 positions: 28 × 2048 × 64 × 4 B.
        let gptj = Architecture {
            layers: 28,
            hidden: 4096,
            heads: 16,
            head_dim: 256,
            sincos_positions: 2048,
            sincos_dims: 64,
            ..Architecture::BASE
        };
        let b = gptj.buffers(2).expect("buffers");
        assert_eq!(b.iter().map(|(_, n)| n).sum::<u64>(), 14_680_064);
        assert_eq!(gptj.rotary_buffer_bytes().expect("bytes"), 14_680_064);
        // A null rotary_dim: the whole hidden size, odd widths rounded up to pairs.
        let whole = Architecture {
            sincos_dims: 0,
            hidden: 5,
            layers: 1,
            ..gptj
        };
        assert_eq!(whole.rotary_buffer_bytes().expect("bytes"), 2048 * 6 * 4);
        // Falcon-H1-0.5B's mixer: 36 layers of 2 × 1536 + 2 × 1 × 128 + 24 values, bf16;
        // Gemma 4's two scales; a tower's 128 B of rotary tables.
        let falcon = Architecture {
            mixer: Some(Mixer {
                kind: MixerKind::Mamba2,
                layers: 36,
                inner: 1536,
                state: 128,
                heads: 24,
                key_heads: 1,
                ..Mixer::BASE
            }),
            mup_vectors: true,
            embed_scales: 2,
            tower_rope_bytes: 128,
            ..Architecture::BASE
        };
        let b = falcon.buffers(2).expect("buffers");
        assert_eq!(
            b.iter().map(|(_, n)| n).sum::<u64>(),
            36 * 3352 * 2 + 2 * 2 + 128
        );
        assert_eq!(falcon.rotary_buffer_bytes().expect("bytes"), 128);
        // Without a Mamba-2 mixer the switch holds nothing.
        let none = Architecture {
            mixer: None,
            ..falcon
        };
        assert_eq!(none.buffers(2).expect("buffers").len(), 2);
    }
}
