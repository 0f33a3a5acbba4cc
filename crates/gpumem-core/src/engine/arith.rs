//! Checked arithmetic on shapes and bytes, shared by every engine's rule: a product or a
//! sum that would overflow is an [`EstimateError::Overflow`], never a wrap.

use crate::error::EstimateError;

/// Bytes in one MiB.
pub(super) const MIB: u64 = 1 << 20;

/// Bytes in one GiB.
pub(super) const GIB: u64 = 1 << 30;

/// `n` MiB in bytes.
pub(super) fn mib(n: u64) -> u64 {
    n.saturating_mul(MIB)
}

/// Checked `a × b × …` of shape numbers.
pub(super) fn prod(xs: &[u64]) -> Result<u64, EstimateError> {
    xs.iter()
        .try_fold(1u64, |a, x| a.checked_mul(*x))
        .ok_or(EstimateError::Overflow {
            what: "engine shapes",
        })
}

/// Checked sum.
pub(super) fn sum(xs: &[u64]) -> Result<u64, EstimateError> {
    xs.iter()
        .try_fold(0u64, |a, x| a.checked_add(*x))
        .ok_or(EstimateError::Overflow {
            what: "engine lines",
        })
}

/// Bytes as "12.34 GiB" for the texts (two decimals, truncated).
pub(super) fn gib_text(b: u64) -> String {
    crate::units::Bytes(b).gib_string(2) + " GiB"
}
