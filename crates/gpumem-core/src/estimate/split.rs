//! The most loaded device's share of a line under tensor and pipeline parallelism.

/// The most loaded device's share under tensor/pipeline parallelism.
pub(super) struct Split {
    pub(super) tp: u64,
    pub(super) pp: u64,
    pub(super) layers: Option<u64>,
}

impl Split {
    /// `bytes × num / den`, rounded up ([`crate::units::share_ceil`]).
    pub(super) fn part(bytes: u64, num: u64, den: u64) -> u64 {
        crate::units::share_ceil(bytes, num, den)
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
