//! Byte quantities and the one place where bytes become GB (10^9) and GiB (2^30).
//!
//! Every quantity in the estimator is an integer number of bytes. Products that can
//! exceed `u64` are taken in `u128` and checked; an overflow is an error, never a wrap.
//! Display conversion happens once, here, in integer arithmetic so that the page
//! (wasm32) and the agent (native) print the same digits (method §2).

#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use crate::error::EstimateError;

/// One gigabyte: 10^9 bytes.
pub const GB: u64 = 1_000_000_000;
/// One gibibyte: 2^30 bytes.
pub const GIB: u64 = 1 << 30;
/// One mebibyte: 2^20 bytes.
pub const MIB: u64 = 1 << 20;

/// An exact count of bytes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl Bytes {
    /// Zero bytes.
    pub const ZERO: Bytes = Bytes(0);

    /// The raw count.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// `self + other`, or an overflow error naming `what`.
    pub fn checked_add(self, other: Bytes, what: &'static str) -> Result<Bytes, EstimateError> {
        self.0
            .checked_add(other.0)
            .map(Bytes)
            .ok_or(EstimateError::Overflow { what })
    }

    /// Sum of many byte counts, checked.
    pub fn sum<I: IntoIterator<Item = Bytes>>(
        items: I,
        what: &'static str,
    ) -> Result<Bytes, EstimateError> {
        items
            .into_iter()
            .try_fold(Bytes::ZERO, |acc, b| acc.checked_add(b, what))
    }

    /// Whole gibibytes given by the user (e.g. `--reserve-gib 4`), checked.
    pub fn from_gib(gib: u64) -> Result<Bytes, EstimateError> {
        gib.checked_mul(GIB)
            .map(Bytes)
            .ok_or(EstimateError::Overflow {
                what: "GiB to bytes",
            })
    }

    /// The value in GB rounded half-up to `decimals` places, as a decimal string.
    pub fn gb_string(self, decimals: u32) -> String {
        decimal(self.0, GB, decimals)
    }

    /// The value in GiB rounded half-up to `decimals` places, as a decimal string.
    pub fn gib_string(self, decimals: u32) -> String {
        decimal(self.0, GIB, decimals)
    }

    /// "14 000 000 000 B · 14.00 GB · 13.04 GiB": the three views side by side.
    pub fn describe(self) -> String {
        format!(
            "{} B · {} GB · {} GiB",
            group_digits(self.0),
            self.gb_string(2),
            self.gib_string(2)
        )
    }
}

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} B", self.0)
    }
}

/// `value / unit` rounded half-up to `decimals` places, computed in integers.
fn decimal(value: u64, unit: u64, decimals: u32) -> String {
    let decimals = decimals.min(18);
    // 10^18 × u64::MAX < 2^124: no step below can overflow u128, and `unit` and
    // `scale` are at least 1; the checked forms only make that visible to the lint.
    let scale = 10u128.checked_pow(decimals).unwrap_or(1);
    let unit = u128::from(unit.max(1));
    let scaled = u128::from(value)
        .saturating_mul(scale)
        .saturating_add(unit / 2)
        .checked_div(unit)
        .unwrap_or(0);
    // Both parts printed as u64 (so no build links u128's printer): `whole` is at most
    // `value` (unit ≥ 1, the half added rounds up by less than one unit) and `frac` is
    // below `scale` ≤ 10^18; the fallbacks cannot be taken.
    let whole = u64::try_from(scaled.checked_div(scale).unwrap_or(0)).unwrap_or(u64::MAX);
    if decimals == 0 {
        return whole.to_string();
    }
    let frac = u64::try_from(scaled.checked_rem(scale).unwrap_or(0)).unwrap_or(0);
    format!("{whole}.{frac:0width$}", width = decimals as usize)
}

/// Groups digits by thousands with a thin space-free separator: `14000000000` → `14 000 000 000`.
pub fn group_digits(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len().saturating_add(digits.len() / 3));
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && digits.len().saturating_sub(i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(ch);
    }
    out
}

/// A signed byte count with grouped digits: `-1 073 741 824`, `0`, `5 000`. The minus
/// is ASCII so a copied figure parses as a number; the CLI and the page share it.
pub fn signed_group_digits(value: i64) -> String {
    with_sign(value, group_digits(value.unsigned_abs()))
}

/// A signed byte count in GiB, rounded half-up on its magnitude: `-1.00`, `12.50`.
/// A negative count that rounds to zero keeps its sign (`-0.00`): it still does not fit.
pub fn signed_gib_string(value: i64, decimals: u32) -> String {
    with_sign(value, Bytes(value.unsigned_abs()).gib_string(decimals))
}

/// A signed byte count in GB, rounded half-up on its magnitude: `-1.07`, `12.50`.
pub fn signed_gb_string(value: i64, decimals: u32) -> String {
    with_sign(value, Bytes(value.unsigned_abs()).gb_string(decimals))
}

fn with_sign(value: i64, magnitude: String) -> String {
    if value < 0 {
        format!("-{magnitude}")
    } else {
        magnitude
    }
}

/// `bytes × num ÷ den`, rounded up (a device's share of a line: its layers of all
/// layers, its rank of the tensor-parallel ranks); `bytes` itself when `den` is 0. In
/// u128, where two u64 factors cannot overflow; saturates at `u64::MAX`.
pub fn share_ceil(bytes: u64, num: u64, den: u64) -> u64 {
    if den == 0 {
        return bytes;
    }
    let v = u128::from(bytes)
        .saturating_mul(u128::from(num))
        .div_ceil(u128::from(den));
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// `a × b × …` in `u128`, then narrowed to `u64`; any overflow is an error naming `what`.
pub fn checked_product(factors: &[u64], what: &'static str) -> Result<u64, EstimateError> {
    let mut acc: u128 = 1;
    for &f in factors {
        acc = acc
            .checked_mul(u128::from(f))
            .ok_or(EstimateError::Overflow { what })?;
    }
    u64::try_from(acc).map_err(|_| EstimateError::Overflow { what })
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    #[test]
    fn seed_section_2_figures() {
        let w = Bytes(7_000_000_000 * 2);
        assert_eq!(w.gb_string(2), "14.00");
        assert_eq!(w.gib_string(2), "13.04");
        let with_reserve = w.checked_add(Bytes::from_gib(4).unwrap(), "t").unwrap();
        assert_eq!(with_reserve.gib_string(2), "17.04");
        assert_eq!(group_digits(14_000_000_000), "14 000 000 000");
    }

    #[test]
    fn rounding_is_half_up_and_exact_at_boundaries() {
        assert_eq!(Bytes(GIB).gib_string(2), "1.00");
        assert_eq!(Bytes(GIB / 200 + 1).gib_string(2), "0.01"); // just past 0.005 rounds up
        assert_eq!(Bytes(GIB / 200).gib_string(2), "0.00"); // just below stays down
        assert_eq!(Bytes(u64::MAX).gb_string(3), "18446744073.710");
        assert_eq!(Bytes(0).gib_string(0), "0");
    }

    #[test]
    fn signed_views_keep_the_sign_and_round_the_magnitude() {
        let gib = i64::try_from(GIB).unwrap();
        assert_eq!(signed_group_digits(-gib), "-1 073 741 824");
        assert_eq!(signed_group_digits(0), "0");
        assert_eq!(signed_gib_string(-gib, 2), "-1.00");
        assert_eq!(signed_gib_string(gib / 2, 2), "0.50");
        assert_eq!(signed_gib_string(-1, 2), "-0.00");
        assert_eq!(signed_gb_string(-1_500_000_000, 2), "-1.50");
        assert_eq!(signed_group_digits(i64::MIN), "-9 223 372 036 854 775 808");
    }

    #[test]
    fn overflow_is_an_error() {
        assert!(checked_product(&[u64::MAX, 2], "x").is_err());
        assert!(Bytes(u64::MAX).checked_add(Bytes(1), "x").is_err());
        assert!(Bytes::from_gib(u64::MAX / 1024).is_err());
    }
}
