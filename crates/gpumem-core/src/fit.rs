//! Per-device fit against the catalogue (method §12).
//!
//! Fit is judged per device: with several GPUs the split (tensor-parallel degree,
//! pipeline stages) decides what each device holds, and the most loaded device must
//! fit on its own card. Several GPUs never make one pooled memory.

#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use crate::catalogue::{CATALOGUE, CapacityKind, GpuCard};
use crate::estimate::Estimate;

/// One card's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardFit {
    /// Catalogue id.
    pub id: String,
    /// Card name.
    pub name: String,
    /// Capacity compared against, bytes.
    pub capacity_bytes: u64,
    /// "reported" (what the device says) or "label" (marketing GB × 2^30).
    pub capacity_kind: String,
    /// What the most loaded device needs, bytes.
    pub need_bytes: u64,
    /// capacity − need (negative when it does not fit).
    pub headroom_bytes: i64,
    /// Whether the need fits.
    pub fits: bool,
}

/// The fit of `need_bytes` per device on one card.
pub fn fit_card(card: &GpuCard, need_bytes: u64) -> CardFit {
    let (capacity, kind) = card.capacity();
    // Two u64 in i128: the difference cannot overflow (saturating only says so).
    let headroom = i128::from(capacity).saturating_sub(i128::from(need_bytes));
    CardFit {
        id: card.id.to_string(),
        name: card.name.to_string(),
        capacity_bytes: capacity,
        capacity_kind: match kind {
            CapacityKind::Reported => "reported".into(),
            CapacityKind::Label => "label".into(),
        },
        need_bytes,
        headroom_bytes: i64::try_from(headroom).unwrap_or(if headroom < 0 {
            i64::MIN
        } else {
            i64::MAX
        }),
        fits: headroom >= 0,
    }
}

/// A card's verdict in words, shared by the CLI's table and the page's fit table so
/// the two always say the same thing for the same need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The need exceeds the capacity.
    DoesNotFit,
    /// It fits with less than a tenth of the capacity free: activations, fragmentation
    /// or a longer prompt may still not fit.
    Tight,
    /// It fits with at least a tenth of the capacity free.
    Fits,
}

impl Verdict {
    /// The verdict for one card's fit.
    pub fn of(fit: &CardFit) -> Verdict {
        if !fit.fits {
            return Verdict::DoesNotFit;
        }
        // headroom < capacity / 10, in integers (headroom ≥ 0 here, so it converts).
        let headroom = u128::try_from(fit.headroom_bytes).unwrap_or(0);
        if headroom.saturating_mul(10) < u128::from(fit.capacity_bytes) {
            Verdict::Tight
        } else {
            Verdict::Fits
        }
    }

    /// The words shown: "Does not fit", "Fits, tight (< 10 % free)", "Fits".
    pub fn text(self) -> &'static str {
        match self {
            Verdict::DoesNotFit => "Does not fit",
            Verdict::Tight => "Fits, tight (< 10 % free)",
            Verdict::Fits => "Fits",
        }
    }

    /// A stable short key (the page's CSS class): "no", "tight", "yes".
    pub fn key(self) -> &'static str {
        match self {
            Verdict::DoesNotFit => "no",
            Verdict::Tight => "tight",
            Verdict::Fits => "yes",
        }
    }
}

/// Every catalogue card against an estimate's per-device need, in catalogue order.
pub fn fit_table(estimate: &Estimate) -> Vec<CardFit> {
    CATALOGUE
        .iter()
        .map(|c| fit_card(c, estimate.per_device_bytes))
        .collect()
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    #[test]
    fn headroom_is_signed_and_exact() {
        let card = &CATALOGUE[0];
        let (cap, _) = card.capacity();
        let ok = fit_card(card, cap);
        assert!(ok.fits);
        assert_eq!(ok.headroom_bytes, 0);
        let over = fit_card(card, cap + 1);
        assert!(!over.fits);
        assert_eq!(over.headroom_bytes, -1);
        assert!(!fit_card(card, u64::MAX).fits);
    }

    #[test]
    fn verdict_is_tight_below_a_tenth_free() {
        let card = &CATALOGUE[0];
        let (cap, _) = card.capacity();
        assert_eq!(Verdict::of(&fit_card(card, cap + 1)), Verdict::DoesNotFit);
        assert_eq!(Verdict::of(&fit_card(card, cap)), Verdict::Tight);
        // Exactly a tenth free (when the capacity divides by ten) is not tight.
        let tenth = cap / 10;
        let at_tenth = fit_card(card, cap - tenth);
        let want = if tenth * 10 == cap {
            Verdict::Fits
        } else {
            Verdict::Tight
        };
        assert_eq!(Verdict::of(&at_tenth), want);
        assert_eq!(Verdict::of(&fit_card(card, cap - tenth - 1)), Verdict::Fits);
        assert_eq!(Verdict::of(&fit_card(card, 0)), Verdict::Fits);
        assert_eq!(Verdict::DoesNotFit.text(), "Does not fit");
    }
}
