//! The most loaded device's share of a line under tensor and pipeline parallelism.

/// The most loaded device's share under tensor/pipeline parallelism.
pub(super) struct Split {
    pub(super) tp: u64,
    pub(super) pp: u64,
    pub(super) layers: Option<u64>,
}

impl Split {
    /// `bytes × num / den`, rounded up, in u128.
    pub(super) fn part(bytes: u64, num: u64, den: u64) -> u64 {
        if den == 0 {
            return bytes;
        }
        // Two u64 factors cannot overflow u128.
        let v = u128::from(bytes)
            .saturating_mul(u128::from(num))
            .div_ceil(u128::from(den));
        u64::try_from(v).unwrap_or(u64::MAX)
    }
    /// Per-layer weights (attention, MLP, norms, KV, activations): the heaviest
    /// stage holds ceil(layers / pp) layers; tensor parallelism divides by tp.
    pub(super) fn layered(&self, bytes: u64, tp_splits: bool) -> u64 {
        let tp = if tp_splits { self.tp } else { 1 };
        match self.layers {
            Some(l) => Self::part(bytes, l.div_ceil(self.pp), l.saturating_mul(tp)),
            None => Self::part(bytes, 1, self.pp.saturating_mul(tp)),
        }
    }
}
