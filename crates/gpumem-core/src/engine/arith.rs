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

/// The largest `v` in `[1, hi]` with `ok(v)`, assuming monotonicity; `None` when 1 fails.
pub(super) fn search(hi: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if !ok(1) {
        return None;
    }
    let (mut lo, mut hi) = (1u64, hi.max(1));
    if ok(hi) {
        return Some(hi);
    }
    // Invariant: lo fits, hi does not.
    while hi.saturating_sub(lo) > 1 {
        let mid = lo.saturating_add(hi.saturating_sub(lo) / 2);
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}
