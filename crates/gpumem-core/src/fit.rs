//! Per-device fit against the catalogue (R-EST-9, seed §12).
//!
//! Fit is judged per device: with several GPUs the split (tensor-parallel degree,
//! pipeline stages) decides what each device holds, and the most loaded device must
//! fit on its own card. Several GPUs never make one pooled memory.

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
    let headroom = i128::from(capacity) - i128::from(need_bytes);
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

/// Every catalogue card against an estimate's per-device need, in catalogue order.
pub fn fit_table(estimate: &Estimate) -> Vec<CardFit> {
    CATALOGUE
        .iter()
        .map(|c| fit_card(c, estimate.per_device_bytes))
        .collect()
}

#[cfg(test)]
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
}
