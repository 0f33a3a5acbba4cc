//! The architecture mode: a decoder-only transformer's shape, split into parameter
//! classes so that each class is counted in its own storage format (R-EST-3).
//!
//! Quantisers (GPTQ, AWQ, bitsandbytes, fp8, GGUF k-quants) convert the linear
//! layers of attention and MLP blocks; embeddings, the lm_head, norms, biases and MoE
//! routers usually stay in 16 bits. Counting them as one "4-bit model" is the error
//! the seed (§2) warns against.

use serde::{Deserialize, Serialize};

use crate::error::EstimateError;
use crate::format::StorageFormat;
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
    /// Always-on shared experts per MoE layer (DeepSeek, Qwen2-MoE); 0 if none.
    pub shared_experts: u64,
    /// Intermediate size of one shared expert.
    pub shared_intermediate: u64,
    /// Leading layers that keep a dense MLP (DeepSeek's `first_k_dense_replace`).
    pub dense_layers: u64,
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
    /// Intermediate width of the dense MLP.
    pub intermediate: u64,
    /// Gated MLP (SwiGLU/GeGLU: gate, up, down) rather than up, down.
    pub gated_mlp: bool,
    /// The lm_head shares the embedding matrix.
    pub tied_embeddings: bool,
    /// Biases on the q, k, v projections (e.g. Qwen2).
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub o_bias: bool,
    /// Biases on the MLP projections.
    pub mlp_bias: bool,
    /// RMSNorm/LayerNorm on queries and keys per head (e.g. Qwen3).
    pub qk_norm: bool,
    /// LayerNorm with a bias (GPT-2 style) rather than RMSNorm.
    pub layernorm_bias: bool,
    /// Mixture-of-experts blocks, if any.
    pub moe: Option<Moe>,
}

/// The classes parameters are counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamClass {
    /// Token embeddings.
    Embeddings,
    /// Attention projections (and their biases).
    Attention,
    /// MLP / expert projections (and their biases), routers included.
    Mlp,
    /// Normalisation weights.
    Norms,
    /// The output projection to the vocabulary.
    LmHead,
}

impl ParamClass {
    /// Every class, in display order.
    pub const ALL: [ParamClass; 5] = [
        ParamClass::Embeddings,
        ParamClass::Attention,
        ParamClass::Mlp,
        ParamClass::Norms,
        ParamClass::LmHead,
    ];

    /// A short key ("embeddings", "attention", …).
    pub const fn key(self) -> &'static str {
        match self {
            ParamClass::Embeddings => "embeddings",
            ParamClass::Attention => "attention",
            ParamClass::Mlp => "mlp",
            ParamClass::Norms => "norms",
            ParamClass::LmHead => "lm_head",
        }
    }
}

/// The role of a tensor in a layer, which decides its storage format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A linear weight a quantiser converts.
    Linear,
    /// A bias, norm or router weight that stays in the "other" format.
    Kept,
    /// An embedding / lm_head matrix (its own format).
    Vocab,
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
    /// Attention and MLP linear weights.
    pub linear: StorageFormat,
    /// Embeddings and lm_head.
    pub vocab: StorageFormat,
    /// Norms, biases and routers.
    pub kept: StorageFormat,
}

impl ModuleFormats {
    fn for_role(&self, role: Role) -> StorageFormat {
        match role {
            Role::Linear => self.linear,
            Role::Vocab => self.vocab,
            Role::Kept => self.kept,
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

/// Upper bound on any one dimension: far above any real model, low enough that
/// products of a few dimensions stay well inside `u128`.
pub const MAX_DIM: u64 = 1 << 40;

impl Architecture {
    /// Checks that the shape is usable: every size ≥ 1 where required, heads
    /// divisible by KV heads, MoE counts coherent.
    pub fn validate(&self) -> Result<(), EstimateError> {
        let positive: [(&'static str, u64); 7] = [
            ("vocab", self.vocab),
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("kv-heads", self.kv_heads),
            ("head-dim", self.head_dim),
            ("intermediate", self.intermediate),
        ];
        for (field, v) in positive {
            if v == 0 {
                return Err(EstimateError::invalid(field, "must be at least 1"));
            }
            if v > MAX_DIM {
                return Err(EstimateError::invalid(
                    field,
                    format!("{v} is absurdly large (max {MAX_DIM})"),
                ));
            }
        }
        if self.kv_heads > self.heads || !self.heads.is_multiple_of(self.kv_heads) {
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
            for (field, v) in [
                ("experts", m.experts),
                ("expert-intermediate", m.expert_intermediate),
                ("shared-experts", m.shared_experts),
                ("shared-intermediate", m.shared_intermediate),
            ] {
                if v > MAX_DIM {
                    return Err(EstimateError::invalid(field, "absurdly large"));
                }
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

    /// Every tensor of the model, grouped by identical shape.
    pub fn tensors(&self) -> Vec<TensorGroup> {
        use ParamClass::*;
        use Role::*;
        let l = self.layers;
        let h = self.hidden;
        let q = self.heads * self.head_dim;
        let kv = self.kv_heads * self.head_dim;
        let g = |class, role, name, rows, cols, count| TensorGroup {
            class,
            role,
            name,
            rows,
            cols,
            count,
            active: count,
        };
        let mut t = vec![
            g(Embeddings, Vocab, "embed_tokens", self.vocab, h, 1),
            g(Attention, Linear, "q_proj", q, h, l),
            g(Attention, Linear, "k_proj", kv, h, l),
            g(Attention, Linear, "v_proj", kv, h, l),
            g(Attention, Linear, "o_proj", h, q, l),
        ];
        if self.qkv_bias {
            t.push(g(Attention, Kept, "q_proj.bias", q, 1, l));
            t.push(g(Attention, Kept, "k_proj.bias", kv, 1, l));
            t.push(g(Attention, Kept, "v_proj.bias", kv, 1, l));
        }
        if self.o_bias {
            t.push(g(Attention, Kept, "o_proj.bias", h, 1, l));
        }
        let norm_count = if self.layernorm_bias { 2 } else { 1 };
        t.push(g(Norms, Kept, "layer norms", h, 1, 2 * l * norm_count));
        t.push(g(Norms, Kept, "final norm", h, 1, norm_count));
        if self.qk_norm {
            t.push(g(Norms, Kept, "q_norm/k_norm", self.head_dim, 1, 2 * l));
        }
        let (dense_layers, moe) = match self.moe {
            Some(m) => (m.dense_layers, Some((m, l - m.dense_layers))),
            None => (l, None),
        };
        self.push_mlp(&mut t, "mlp", self.intermediate, dense_layers, dense_layers);
        if let Some((m, moe_layers)) = moe {
            t.push(g(Mlp, Kept, "router", m.experts, h, moe_layers));
            self.push_mlp(
                &mut t,
                "experts",
                m.expert_intermediate,
                moe_layers * m.experts,
                moe_layers * m.active,
            );
            if m.shared_experts > 0 {
                let n = moe_layers * m.shared_experts;
                self.push_mlp(&mut t, "shared_experts", m.shared_intermediate.max(1), n, n);
            }
        }
        if !self.tied_embeddings {
            t.push(g(LmHead, Vocab, "lm_head", self.vocab, h, 1));
        }
        t.retain(|tg| tg.count > 0);
        t
    }

    fn push_mlp(
        &self,
        t: &mut Vec<TensorGroup>,
        prefix: &'static str,
        inter: u64,
        count: u64,
        active: u64,
    ) {
        let h = self.hidden;
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
    }

    /// Parameters and stored bytes per class, each tensor in the format of its role.
    pub fn weights(&self, formats: &ModuleFormats) -> Result<WeightBreakdown, EstimateError> {
        self.validate()?;
        let mut classes: Vec<ClassTotal> = Vec::new();
        let mut notes: Vec<String> = Vec::new();
        for tg in self.tensors() {
            let fmt = formats.for_role(tg.role);
            let one = if tg.cols == 1 {
                fmt.vector_bytes(tg.rows)?
            } else {
                let tb = fmt.matrix_bytes(tg.rows, tg.cols)?;
                if let Some(n) = tb.note {
                    let n = format!("{}: {n}", tg.name);
                    if !notes.contains(&n) {
                        notes.push(n);
                    }
                }
                tb.bytes
            };
            let bytes = checked_product(&[one, tg.count], "class bytes")?;
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
                }
                None => classes.push(ClassTotal {
                    class: tg.class,
                    params,
                    active_params: active,
                    bytes,
                    formats: name,
                }),
            }
        }
        classes.sort_by_key(|c| c.class);
        let total = classes.iter().try_fold(0u64, |a, c| a.checked_add(c.bytes));
        if total.is_none() {
            return Err(EstimateError::Overflow { what: "weights" });
        }
        Ok(WeightBreakdown { classes, notes })
    }
}
