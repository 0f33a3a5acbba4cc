//! Expected allocations of the agent's measurement network, so that what
//! `gpumem-agent measure` observes can be set beside what is computed, phase by phase.
//!
//! # The network, exactly
//!
//! `layers` × Linear(width, width) with bias, each followed by ReLU applied in place, on
//! a synthetic input of shape `[batch × context, width]`; every tensor has the same
//! element type. The agent allocates in this order, and nothing else from its pool:
//!
//! 1. `model_load`: for each layer `l`: `layer{l}.weight` (width × width), then
//!    `layer{l}.bias` (width).
//! 2. `inputs`: `input` (rows × width), kept to the end.
//! 3. every forward pass: for each layer `l`, allocate `act{l}` (rows × width), compute
//!    it from the previous activation (the input for `l = 0`), then free `act{l-1}`
//!    (never the input). The last activation is the pass's output and is kept until the
//!    *next* pass has produced its own, then freed — like `out = model(x)` in a loop.
//!    `cold_forward` is the first pass; `warmup` runs N passes as one phase;
//!    each `warm_forward` repeat is one pass.
//!
//! With `M` the model bytes and `A` one activation's bytes, the allocated figures per
//! phase (start / peak / end) follow: `model_load` 0 / M / M; `inputs` M / M+A / M+A;
//! `cold_forward` M+A / M+A+min(L,2)·A / M+2A; `warmup` and each `warm_forward`
//! M+2A / M+2A+min(L,2)·A / M+2A (a `warmup` of 0 passes stays at M+2A).
//!
//! These are *requested* bytes. A real pool can differ for known reasons, listed in
//! [`KNOWN_DIFFERENCES`]: allocation granularity, cuBLAS's workspace (outside the pool)
//! and the CUDA context (visible only in device-level figures).

#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use crate::error::EstimateError;
use crate::units::{Bytes, checked_product};

/// Element type of the network's tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 4 bytes per element.
    Float32,
    /// 2 bytes per element.
    Float16,
    /// 2 bytes per element.
    Bfloat16,
}

impl Dtype {
    /// Bytes per element.
    pub const fn size(self) -> u64 {
        match self {
            Dtype::Float32 => 4,
            Dtype::Float16 | Dtype::Bfloat16 => 2,
        }
    }
}

/// The measured phases, in protocol order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Weights and biases allocated and filled.
    ModelLoad,
    /// The input allocated and filled.
    Inputs,
    /// The first forward pass.
    ColdForward,
    /// N forward passes measured together.
    Warmup,
    /// One kept forward pass (the same figures for every repeat).
    WarmForward,
}

/// The network's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkSpec {
    /// Batch size (≥ 1).
    pub batch: u64,
    /// Rows per batch item (≥ 1).
    pub context: u64,
    /// Features per row (≥ 1).
    pub width: u64,
    /// Linear + ReLU layers (≥ 1).
    pub layers: u64,
    /// Element type.
    pub dtype: Dtype,
}

/// Sizes of the network's tensors, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSizes {
    /// `batch × context`.
    pub rows: u64,
    /// One `layer{l}.weight`: width × width elements.
    pub weight: Bytes,
    /// One `layer{l}.bias`: width elements.
    pub bias: Bytes,
    /// All weights and biases: `M`.
    pub model: Bytes,
    /// The input, and every activation: rows × width elements (`A`).
    pub activation: Bytes,
}

/// Predicted pool-allocated bytes for one phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhasePrediction {
    /// Which phase.
    pub phase: Phase,
    /// Allocated at the start.
    pub start: Bytes,
    /// Highest allocated level during the phase (absolute, includes the start).
    pub peak: Bytes,
    /// Allocated at the end.
    pub end: Bytes,
}

/// Why observed pool and device figures can differ from [`predict`], in words; the
/// agent prints these beside the comparison.
pub const KNOWN_DIFFERENCES: [&str; 3] = [
    "pool allocation granularity: the pool may round each request up, so observed allocated and reserved bytes can exceed the requested bytes computed here",
    "cuBLAS workspace: cuBLAS allocates its own workspace outside the measured pool; it appears only in the device-level figures",
    "CUDA context: the context, module code and driver bookkeeping use device memory outside any pool; they appear only in the device-level figures, never in allocated/reserved",
];

impl NetworkSpec {
    /// Checks that every dimension is at least 1.
    pub fn validate(&self) -> Result<(), EstimateError> {
        for (field, value) in [
            ("batch", self.batch),
            ("context", self.context),
            ("width", self.width),
            ("layers", self.layers),
        ] {
            if value == 0 {
                return Err(EstimateError::invalid(field, "must be at least 1"));
            }
        }
        Ok(())
    }

    /// The byte size of every tensor, checked for overflow.
    pub fn sizes(&self) -> Result<TensorSizes, EstimateError> {
        self.validate()?;
        let e = self.dtype.size();
        let rows = checked_product(&[self.batch, self.context], "rows (batch × context)")?;
        let weight = checked_product(&[self.width, self.width, e], "one layer's weight bytes")?;
        let bias = checked_product(&[self.width, e], "one layer's bias bytes")?;
        let per_layer = weight.checked_add(bias).ok_or(EstimateError::Overflow {
            what: "one layer's bytes",
        })?;
        let model = checked_product(&[per_layer, self.layers], "model bytes")?;
        let activation = checked_product(&[rows, self.width, e], "activation bytes")?;
        Ok(TensorSizes {
            rows,
            weight: Bytes(weight),
            bias: Bytes(bias),
            model: Bytes(model),
            activation: Bytes(activation),
        })
    }
}

/// Predicted allocated bytes (start, peak, end) for each phase, in protocol order:
/// `model_load`, `inputs`, `cold_forward`, `warmup`, `warm_forward` (one entry standing
/// for every repeat). Pure and exact for the network described in the module docs.
pub fn predict(
    spec: &NetworkSpec,
    warmup_iterations: u32,
) -> Result<Vec<PhasePrediction>, EstimateError> {
    let s = spec.sizes()?;
    let m = s.model;
    let a = s.activation;
    // At most two activations of one pass are alive at once: the one being written and
    // the one it reads (with a single layer, only the one being written).
    let live_in_pass = Bytes(checked_product(
        &[a.get(), spec.layers.min(2)],
        "forward transient bytes",
    )?);
    let ma = m.checked_add(a, "model + input")?;
    let steady = ma.checked_add(a, "model + input + kept output")?;
    let cold_peak = ma.checked_add(live_in_pass, "cold forward peak")?;
    let warm_peak = steady.checked_add(live_in_pass, "warm forward peak")?;
    let warmup_peak = if warmup_iterations == 0 {
        steady
    } else {
        warm_peak
    };
    let p = |phase, start, peak, end| PhasePrediction {
        phase,
        start,
        peak,
        end,
    };
    Ok(vec![
        p(Phase::ModelLoad, Bytes::ZERO, m, m),
        p(Phase::Inputs, m, ma, ma),
        p(Phase::ColdForward, ma, cold_peak, steady),
        p(Phase::Warmup, steady, warmup_peak, steady),
        p(Phase::WarmForward, steady, warm_peak, steady),
    ])
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    fn seed_dims(layers: u64, dtype: Dtype) -> NetworkSpec {
        // Method §9: --batch 2 --context 128 --width 1024.
        NetworkSpec {
            batch: 2,
            context: 128,
            width: 1024,
            layers,
            dtype,
        }
    }

    fn triple(p: &PhasePrediction) -> (u64, u64, u64) {
        (p.start.get(), p.peak.get(), p.end.get())
    }

    #[test]
    fn seed_dimensions_float32_four_layers_by_hand() {
        // weight 1024·1024·4 = 4 194 304; bias 4 096; M = 4 × 4 198 400 = 16 793 600;
        // A = 256 · 1024 · 4 = 1 048 576.
        let s = seed_dims(4, Dtype::Float32).sizes().unwrap();
        assert_eq!(s.rows, 256);
        assert_eq!(s.weight, Bytes(4_194_304));
        assert_eq!(s.bias, Bytes(4_096));
        assert_eq!(s.model, Bytes(16_793_600));
        assert_eq!(s.activation, Bytes(1_048_576));
        let p = predict(&seed_dims(4, Dtype::Float32), 3).unwrap();
        let phases: Vec<Phase> = p.iter().map(|x| x.phase).collect();
        assert_eq!(
            phases,
            [
                Phase::ModelLoad,
                Phase::Inputs,
                Phase::ColdForward,
                Phase::Warmup,
                Phase::WarmForward
            ]
        );
        assert_eq!(triple(&p[0]), (0, 16_793_600, 16_793_600));
        assert_eq!(triple(&p[1]), (16_793_600, 17_842_176, 17_842_176));
        // M+A, M+3A, M+2A
        assert_eq!(triple(&p[2]), (17_842_176, 19_939_328, 18_890_752));
        // M+2A, M+4A, M+2A
        assert_eq!(triple(&p[3]), (18_890_752, 20_987_904, 18_890_752));
        assert_eq!(triple(&p[4]), (18_890_752, 20_987_904, 18_890_752));
    }

    #[test]
    fn half_precision_halves_every_figure_and_one_layer_keeps_one_transient() {
        // bfloat16, one layer: W = 2 097 152, b = 2 048, M = 2 099 200, A = 524 288.
        let p = predict(&seed_dims(1, Dtype::Bfloat16), 0).unwrap();
        assert_eq!(triple(&p[0]), (0, 2_099_200, 2_099_200));
        assert_eq!(triple(&p[1]), (2_099_200, 2_623_488, 2_623_488));
        // One layer: only act0 is transient: peak M+2A = end.
        assert_eq!(triple(&p[2]), (2_623_488, 3_147_776, 3_147_776));
        // No warm-up passes: the phase stays at M+2A.
        assert_eq!(triple(&p[3]), (3_147_776, 3_147_776, 3_147_776));
        // A warm pass keeps the previous output while writing act0: M+3A.
        assert_eq!(triple(&p[4]), (3_147_776, 3_672_064, 3_147_776));
    }

    #[test]
    fn zero_dimensions_and_overflow_are_errors() {
        let mut s = seed_dims(4, Dtype::Float16);
        s.width = 0;
        assert_eq!(
            predict(&s, 1).unwrap_err(),
            EstimateError::invalid("width", "must be at least 1")
        );
        let huge = NetworkSpec {
            batch: u64::MAX,
            context: 2,
            width: 1,
            layers: 1,
            dtype: Dtype::Float32,
        };
        assert!(matches!(
            predict(&huge, 1),
            Err(EstimateError::Overflow { .. })
        ));
        let wide = NetworkSpec {
            batch: 1,
            context: 1,
            width: 1 << 31,
            layers: 1 << 10,
            dtype: Dtype::Float32,
        };
        assert!(matches!(wide.sizes(), Err(EstimateError::Overflow { .. })));
    }
}
