//! Typed line keys: every line of an estimate is one [`LineKey`], whose
//! [`LineKey::group`] decides the headline figure it adds to, and whose
//! [`LineKey::as_str`] is the stable key of `--json`, the sheet and the page
//! (`weights.mlp`, `kv_cache`, …). A match on the enum, not a string prefix, is how
//! the page colours a line and how a figure picks its lines.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Group;
use crate::arch::ParamClass;

/// The key of one line of the breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LineKey {
    /// Weights of the parameter-count mode, one line (`weights`).
    Weights,
    /// Embedding tables (`weights.embeddings`).
    WeightsEmbeddings,
    /// Attention projections (`weights.attention`).
    WeightsAttention,
    /// MLP / experts (`weights.mlp`).
    WeightsMlp,
    /// Norms (`weights.norms`).
    WeightsNorms,
    /// The output head (`weights.lm_head`).
    WeightsLmHead,
    /// Multi-token-prediction layers (`weights.mtp`).
    WeightsMtp,
    /// Vision/audio towers (`weights.tower`).
    WeightsTower,
    /// An encoder-decoder's stacks beyond the shared embedding (`weights.encoder_decoder`).
    WeightsEncoderDecoder,
    /// Tensors of a file header no class claims (`weights.other`).
    WeightsOther,
    /// The KV cache at its largest (`kv_cache`).
    KvCache,
    /// The KV cache after prefill, shown, not added (`kv_cache.prefill`).
    KvCachePrefill,
    /// The recurrent state of state-space / linear-attention layers (`kv_cache.state`).
    KvCacheState,
    /// MLA's cache as an engine that decompresses K/V holds it, shown (`kv_cache.decompressed`).
    KvCacheDecompressed,
    /// The sparse-attention indexer's key cache beside MLA's latent (`kv_cache.indexer`).
    KvCacheIndexer,
    /// An encoder-decoder's cross-attention cache over the encoder's length (`kv_cache.cross`).
    KvCacheCross,
    /// An encoder-decoder's encoder output, kept through generation (`kv_cache.encoder_output`).
    KvCacheEncoderOutput,
    /// LoRA adapters (`training.adapters`).
    TrainingAdapters,
    /// Gradients (`training.gradients`).
    TrainingGradients,
    /// Optimizer states (`training.optimizer`).
    TrainingOptimizer,
    /// fp32 master weights (`training.master_weights`).
    TrainingMasterWeights,
    /// DDP's gradient buckets or ZeRO's contiguous-gradients bucket (`training.grad_buckets`).
    TrainingGradBuckets,
    /// Training activations kept for backward (`activations`).
    Activations,
    /// Training logits and their gradient (`logits`).
    Logits,
    /// What the optimizer step holds beyond what the backward freed (`optimizer_step`).
    OptimizerStep,
    /// torch's cuBLAS workspaces of a training step, one per thread that runs GEMMs
    /// (`cublas.workspace`).
    CublasWorkspace,
    /// CUDA context and workspaces (`cuda_context`).
    CudaContext,
    /// The model's loading peak, shown beside the step's (`model_load`).
    ModelLoad,
    /// What the caching allocator reserves beyond the allocated peak (`allocator.cache`).
    AllocatorCache,
    /// Sharded parameters gathered at the step's peak (`collectives.all_gather`).
    CollectivesAllGather,
    /// FSDP's reduce-scatter buffers of the largest unit (`collectives.reduce_scatter`).
    CollectivesReduceScatter,
    /// Context parallelism's ring-attention buffers (`collectives.context_parallel`).
    CollectivesContextParallel,
    /// Expert parallelism's all-to-all dispatch buffers (`collectives.all_to_all`).
    CollectivesAllToAll,
    /// Prefill MLP intermediates (`prefill.mlp`).
    PrefillMlp,
    /// Eager attention's score matrix (`prefill.attention_scores`).
    PrefillAttentionScores,
    /// Prefill logits (`prefill.logits`).
    PrefillLogits,
    /// A quantised linear's kernel transient at the prefill's peak
    /// (`prefill.quantized_matmul`).
    PrefillQuantizedMatmul,
    /// What the vision tower's forward over the prompt's images adds to the prefill's
    /// peak (`prefill.vision_tower`).
    PrefillVisionTower,
    /// What the audio tower's forward over the prompt's clips adds to the prefill's
    /// peak (`prefill.audio_tower`).
    PrefillAudioTower,
    /// What compressed-tensors' decompression of one module on the first forward
    /// holds beyond the prefill's lines (`prefill.decompress`).
    PrefillDecompress,
    /// The reserve (`reserve`).
    Reserve,
    /// Host memory per node for an offloaded optimizer (`host.optimizer`).
    HostOptimizer,
    /// Host memory per node for offloaded parameters (`host.parameters`).
    HostParameters,
    /// Optimizer states in CUDA unified memory (`host.paged`).
    HostPaged,
    /// Activations offloaded to pinned host memory (`host.activations`).
    HostActivations,
}

impl LineKey {
    /// Every key, in the order the estimate adds its lines.
    pub const ALL: [LineKey; 45] = [
        LineKey::Weights,
        LineKey::WeightsEmbeddings,
        LineKey::WeightsAttention,
        LineKey::WeightsMlp,
        LineKey::WeightsNorms,
        LineKey::WeightsLmHead,
        LineKey::WeightsMtp,
        LineKey::WeightsTower,
        LineKey::WeightsEncoderDecoder,
        LineKey::WeightsOther,
        LineKey::KvCache,
        LineKey::KvCachePrefill,
        LineKey::KvCacheState,
        LineKey::KvCacheDecompressed,
        LineKey::KvCacheIndexer,
        LineKey::KvCacheCross,
        LineKey::KvCacheEncoderOutput,
        LineKey::TrainingAdapters,
        LineKey::TrainingGradients,
        LineKey::TrainingOptimizer,
        LineKey::TrainingMasterWeights,
        LineKey::TrainingGradBuckets,
        LineKey::Activations,
        LineKey::Logits,
        LineKey::OptimizerStep,
        LineKey::CublasWorkspace,
        LineKey::CudaContext,
        LineKey::ModelLoad,
        LineKey::AllocatorCache,
        LineKey::CollectivesAllGather,
        LineKey::CollectivesReduceScatter,
        LineKey::CollectivesContextParallel,
        LineKey::CollectivesAllToAll,
        LineKey::PrefillMlp,
        LineKey::PrefillAttentionScores,
        LineKey::PrefillLogits,
        LineKey::PrefillQuantizedMatmul,
        LineKey::PrefillVisionTower,
        LineKey::PrefillAudioTower,
        LineKey::PrefillDecompress,
        LineKey::Reserve,
        LineKey::HostOptimizer,
        LineKey::HostParameters,
        LineKey::HostPaged,
        LineKey::HostActivations,
    ];

    /// The stable key of `--json`, the sheet and the page.
    pub const fn as_str(self) -> &'static str {
        match self {
            LineKey::Weights => "weights",
            LineKey::WeightsEmbeddings => "weights.embeddings",
            LineKey::WeightsAttention => "weights.attention",
            LineKey::WeightsMlp => "weights.mlp",
            LineKey::WeightsNorms => "weights.norms",
            LineKey::WeightsLmHead => "weights.lm_head",
            LineKey::WeightsMtp => "weights.mtp",
            LineKey::WeightsTower => "weights.tower",
            LineKey::WeightsEncoderDecoder => "weights.encoder_decoder",
            LineKey::WeightsOther => "weights.other",
            LineKey::KvCache => "kv_cache",
            LineKey::KvCachePrefill => "kv_cache.prefill",
            LineKey::KvCacheState => "kv_cache.state",
            LineKey::KvCacheDecompressed => "kv_cache.decompressed",
            LineKey::KvCacheIndexer => "kv_cache.indexer",
            LineKey::KvCacheCross => "kv_cache.cross",
            LineKey::KvCacheEncoderOutput => "kv_cache.encoder_output",
            LineKey::TrainingAdapters => "training.adapters",
            LineKey::TrainingGradients => "training.gradients",
            LineKey::TrainingOptimizer => "training.optimizer",
            LineKey::TrainingMasterWeights => "training.master_weights",
            LineKey::TrainingGradBuckets => "training.grad_buckets",
            LineKey::Activations => "activations",
            LineKey::Logits => "logits",
            LineKey::OptimizerStep => "optimizer_step",
            LineKey::CublasWorkspace => "cublas.workspace",
            LineKey::CudaContext => "cuda_context",
            LineKey::ModelLoad => "model_load",
            LineKey::AllocatorCache => "allocator.cache",
            LineKey::CollectivesAllGather => "collectives.all_gather",
            LineKey::CollectivesReduceScatter => "collectives.reduce_scatter",
            LineKey::CollectivesContextParallel => "collectives.context_parallel",
            LineKey::CollectivesAllToAll => "collectives.all_to_all",
            LineKey::PrefillMlp => "prefill.mlp",
            LineKey::PrefillAttentionScores => "prefill.attention_scores",
            LineKey::PrefillLogits => "prefill.logits",
            LineKey::PrefillQuantizedMatmul => "prefill.quantized_matmul",
            LineKey::PrefillVisionTower => "prefill.vision_tower",
            LineKey::PrefillAudioTower => "prefill.audio_tower",
            LineKey::PrefillDecompress => "prefill.decompress",
            LineKey::Reserve => "reserve",
            LineKey::HostOptimizer => "host.optimizer",
            LineKey::HostParameters => "host.parameters",
            LineKey::HostPaged => "host.paged",
            LineKey::HostActivations => "host.activations",
        }
    }

    /// The headline figure the line adds to.
    pub const fn group(self) -> Group {
        match self {
            LineKey::Weights
            | LineKey::WeightsEmbeddings
            | LineKey::WeightsAttention
            | LineKey::WeightsMlp
            | LineKey::WeightsNorms
            | LineKey::WeightsLmHead
            | LineKey::WeightsMtp
            | LineKey::WeightsTower
            | LineKey::WeightsEncoderDecoder
            | LineKey::WeightsOther => Group::Weights,
            LineKey::KvCache
            | LineKey::KvCachePrefill
            | LineKey::KvCacheState
            | LineKey::KvCacheDecompressed
            | LineKey::KvCacheIndexer
            | LineKey::KvCacheCross
            | LineKey::KvCacheEncoderOutput => Group::KvCache,
            LineKey::TrainingAdapters
            | LineKey::TrainingGradients
            | LineKey::TrainingOptimizer
            | LineKey::TrainingMasterWeights
            | LineKey::TrainingGradBuckets => Group::Training,
            LineKey::Activations
            | LineKey::Logits
            | LineKey::OptimizerStep
            | LineKey::CublasWorkspace
            | LineKey::CudaContext
            | LineKey::ModelLoad
            | LineKey::AllocatorCache
            | LineKey::CollectivesAllGather
            | LineKey::CollectivesReduceScatter
            | LineKey::CollectivesContextParallel
            | LineKey::CollectivesAllToAll
            | LineKey::PrefillMlp
            | LineKey::PrefillAttentionScores
            | LineKey::PrefillLogits
            | LineKey::PrefillQuantizedMatmul
            | LineKey::PrefillVisionTower
            | LineKey::PrefillAudioTower
            | LineKey::PrefillDecompress => Group::Transient,
            LineKey::Reserve => Group::Reserve,
            LineKey::HostOptimizer
            | LineKey::HostParameters
            | LineKey::HostPaged
            | LineKey::HostActivations => Group::Host,
        }
    }

    /// The weights line of one parameter class.
    pub const fn weights(class: ParamClass) -> LineKey {
        match class {
            ParamClass::Embeddings => LineKey::WeightsEmbeddings,
            ParamClass::Attention => LineKey::WeightsAttention,
            ParamClass::Mlp => LineKey::WeightsMlp,
            ParamClass::Norms => LineKey::WeightsNorms,
            ParamClass::LmHead => LineKey::WeightsLmHead,
            ParamClass::Mtp => LineKey::WeightsMtp,
            ParamClass::Tower => LineKey::WeightsTower,
            ParamClass::EncoderDecoder => LineKey::WeightsEncoderDecoder,
        }
    }

    /// The weights line of a class named by a file header's tally
    /// ([`crate::summary::TensorSummary::by_class`]); "other" for any other name.
    pub fn weights_named(class: &str) -> LineKey {
        LineKey::ALL
            .into_iter()
            .filter(|k| k.group() == Group::Weights && *k != LineKey::Weights)
            .find(|k| k.as_str().strip_prefix("weights.") == Some(class))
            .unwrap_or(LineKey::WeightsOther)
    }

    /// The key named by [`LineKey::as_str`], if any.
    pub fn parse(text: &str) -> Option<LineKey> {
        LineKey::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

impl fmt::Display for LineKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for LineKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for LineKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LineKey, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        LineKey::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown line key {text:?}")))
    }
}

/// The schema of a key: one of the [`LineKey::ALL`] strings.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for LineKey {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "LineKey".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let keys: Vec<&str> = LineKey::ALL.iter().map(|k| k.as_str()).collect();
        schemars::json_schema!({
            "description": "The line's stable key",
            "type": "string",
            "enum": keys,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_read_back() {
        for (i, k) in LineKey::ALL.iter().enumerate() {
            assert!(LineKey::ALL[..i].iter().all(|o| o.as_str() != k.as_str()));
            assert_eq!(LineKey::parse(k.as_str()), Some(*k));
            let json = serde_json::to_string(k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert_eq!(serde_json::from_str::<LineKey>(&json).unwrap(), *k);
        }
        assert!(serde_json::from_str::<LineKey>("\"weights.nope\"").is_err());
        assert_eq!(LineKey::weights_named("mlp"), LineKey::WeightsMlp);
        assert_eq!(LineKey::weights_named("vision"), LineKey::WeightsOther);
        assert_eq!(LineKey::weights_named(""), LineKey::WeightsOther);
    }

    /// The group follows the key's family, as the strings have always said.
    #[test]
    fn the_group_is_the_family_of_the_key() {
        for k in LineKey::ALL {
            let family = k.as_str().split('.').next().unwrap_or("");
            let want = match family {
                "weights" => Group::Weights,
                "kv_cache" => Group::KvCache,
                "training" => Group::Training,
                "reserve" => Group::Reserve,
                "host" => Group::Host,
                _ => Group::Transient,
            };
            assert_eq!(k.group(), want, "{k}");
        }
    }
}
