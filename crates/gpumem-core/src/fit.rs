//! Per-device fit against the catalogue, and the one verdict rule.
//!
//! Fit is judged per device: with several GPUs the split (tensor-parallel degree,
//! pipeline stages) decides what each device holds, and the most loaded device must
//! fit on its own card. Several GPUs never make one pooled memory.
//!
//! The verdict has three words — fits, borderline, does not fit — and one rule
//! ([`Verdict::of`]): the headroom is compared with a [`margin`], the uncertainty of
//! the figures the need and the capacity rest on. A need within that margin of the
//! capacity may land on either side once run, so it is called borderline rather than
//! given a yes or a no the figures cannot support.

#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use crate::catalogue::{CATALOGUE, CapacityKind, GpuCard};
use crate::estimate::{Estimate, Group, Kind};

/// The largest share of its label any catalogue card with a public readout loses
/// before software sees it, in millionths: NVIDIA L4 reports 23 034 MiB of its
/// 24 GiB label (62 745 ppm short, rounded up), L40S 46 068 MiB of 48 GiB (62 745),
/// A10 and A10G 23 028 MiB of 24 GiB (62 989), the most. A card known only by its
/// label may report that much less.
/// [`label_shortfall_ppm`] recomputes it from the catalogue (a test keeps them equal).
pub const LABEL_SHORTFALL_PPM: u64 = 62_989;

/// [`LABEL_SHORTFALL_PPM`] from the catalogue's figures: the largest
/// (label − reported) / label, in millionths, rounded up.
pub fn label_shortfall_ppm() -> u64 {
    CATALOGUE
        .iter()
        .filter_map(|c| {
            let r = c.reported_bytes?;
            let short = u128::from(c.label_bytes.saturating_sub(r)).saturating_mul(1_000_000);
            u64::try_from(short.div_ceil(u128::from(c.label_bytes.max(1)))).ok()
        })
        .max()
        .unwrap_or(0)
}

/// How uncertain a need against a card is, in bytes, and of what it is made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Margin {
    /// Half the assumed lines the need holds besides the reserve (activations,
    /// prefill transients, logits, CUDA context; an engine's profiled peaks): they
    /// are upper bounds or rules of thumb, and half is what the figure may be off by.
    pub assumed_bytes: u64,
    /// With a capacity known only from its label: what such a device may report
    /// less ([`LABEL_SHORTFALL_PPM`] of the capacity); 0 for a reported capacity.
    pub capacity_bytes: u64,
    /// Their sum: the verdict is borderline when the headroom lies within ± this.
    pub bytes: u64,
    /// The reserve when it is assumed (a flat `reserve-gib`, not a measured or given
    /// figure; 0 under an engine, whose own rule stands in for it). It widens the
    /// margin on the short side only: a need that fails by no more than the margin
    /// plus this reserve is borderline, never a no the reserve alone decided; a need
    /// with the reserve inside still has to clear the margin to fit.
    #[serde(default)]
    pub reserve_bytes: u64,
}

/// The rule in words, shown beside a borderline verdict and in `--verbose`.
pub const MARGIN_RULE: &str = "borderline = headroom within ± (½ of the assumed lines besides the reserve + 6.3 % of a capacity known only from its label), or short by no more than that plus an assumed reserve";

/// How the page and the CLI name the short side's widening by an assumed reserve.
pub const RESERVE_SIDE: &str = "short side: an assumed reserve alone never makes a no";

/// Half the per-device bytes of the assumed lines besides the reserve.
pub fn assumed_margin(est: &Estimate) -> u64 {
    est.lines
        .iter()
        .filter(|l| l.in_total && l.kind == Kind::Assumed && l.group != Group::Reserve)
        .fold(0u64, |acc, l| acc.saturating_add(l.device_bytes))
        .div_ceil(2)
}

/// The per-device bytes of an assumed reserve (the flat `reserve-gib`); 0 when the
/// reserve was given in bytes (measured by the agent, or typed).
pub fn assumed_reserve(est: &Estimate) -> u64 {
    est.lines
        .iter()
        .filter(|l| l.in_total && l.kind == Kind::Assumed && l.group == Group::Reserve)
        .fold(0u64, |acc, l| acc.saturating_add(l.device_bytes))
}

/// The margin of a need whose assumed part is `assumed` (already halved) on `card`,
/// without an assumed reserve.
pub fn margin(card: &GpuCard, assumed: u64) -> Margin {
    let (capacity, kind) = card.capacity();
    let capacity_bytes = match kind {
        CapacityKind::Label => {
            let v = u128::from(capacity)
                .saturating_mul(u128::from(LABEL_SHORTFALL_PPM))
                .div_ceil(1_000_000);
            u64::try_from(v).unwrap_or(u64::MAX)
        }
        CapacityKind::Reported | CapacityKind::Given | CapacityKind::WorkingSet => 0,
    };
    Margin {
        assumed_bytes: assumed,
        capacity_bytes,
        bytes: assumed.saturating_add(capacity_bytes),
        reserve_bytes: 0,
    }
}

/// One card's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CardFit {
    /// Catalogue id ("custom" for a typed capacity).
    pub id: String,
    /// Card name.
    pub name: String,
    /// Capacity compared against, bytes.
    pub capacity_bytes: u64,
    /// "reported" (what the device says), "label" (marketing GB × 2^30) or "given".
    pub capacity_kind: String,
    /// What the most loaded device needs, bytes.
    pub need_bytes: u64,
    /// capacity − need (negative when it does not fit).
    pub headroom_bytes: i64,
    /// Whether the need fits (headroom ≥ 0).
    pub fits: bool,
    /// The uncertainty the verdict allows for ([`Margin::bytes`]).
    pub margin_bytes: u64,
    /// The assumed reserve the verdict lets a short need off by ([`Margin::reserve_bytes`]).
    #[serde(default)]
    pub reserve_bytes: u64,
    /// The verdict's key: "yes", "borderline" or "no".
    pub verdict: String,
}

/// Signed `a − b` of two byte counts, saturated to `i64` (cannot overflow in i128).
pub fn signed_diff(a: u64, b: u64) -> i64 {
    let d = i128::from(a).saturating_sub(i128::from(b));
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

/// The fit of `need_bytes` per device on one card, with `assumed` (half the assumed
/// lines, [`assumed_margin`]) as the need's uncertainty.
pub fn fit_card(card: &GpuCard, need_bytes: u64, assumed: u64) -> CardFit {
    fit_card_reserve(card, need_bytes, assumed, 0)
}

/// [`fit_card`] for a need holding an assumed reserve of `reserve` bytes
/// ([`assumed_reserve`]), which may make a short need borderline but never a fit.
pub fn fit_card_reserve(card: &GpuCard, need_bytes: u64, assumed: u64, reserve: u64) -> CardFit {
    let (capacity, kind) = card.capacity();
    let headroom = signed_diff(capacity, need_bytes);
    let m = margin(card, assumed);
    CardFit {
        id: card.id.to_string(),
        name: card.name.to_string(),
        capacity_bytes: capacity,
        capacity_kind: kind.as_str().into(),
        need_bytes,
        headroom_bytes: headroom,
        fits: headroom >= 0,
        margin_bytes: m.bytes,
        reserve_bytes: reserve,
        verdict: Verdict::judged(headroom, m.bytes, reserve).key().into(),
    }
}

/// The verdict in words, shared by the CLI's headline and table and the page's, so
/// both always say the same thing for the same need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Short by more than the margin.
    DoesNotFit,
    /// Within the margin either side: running it decides.
    Borderline,
    /// Room to spare beyond the margin.
    Fits,
}

impl Verdict {
    /// The verdict for a headroom and a margin: fits when headroom ≥ margin, does not
    /// fit when headroom < −margin, borderline between.
    pub fn of(headroom: i64, margin: u64) -> Verdict {
        let h = i128::from(headroom);
        let m = i128::from(margin);
        if h >= m {
            Verdict::Fits
        } else if h < m.saturating_neg() {
            Verdict::DoesNotFit
        } else {
            Verdict::Borderline
        }
    }

    /// [`Verdict::of`] with an assumed reserve in the need: short by more than the
    /// margin but by no more than the margin plus `reserve` is borderline (the reserve
    /// is a hypothesis, so it cannot alone decide a no); fitting still needs the
    /// headroom to clear the margin with the reserve inside the need.
    pub fn judged(headroom: i64, margin: u64, reserve: u64) -> Verdict {
        match Verdict::of(headroom, margin) {
            Verdict::DoesNotFit
                if Verdict::of(headroom, margin.saturating_add(reserve)) != Verdict::DoesNotFit =>
            {
                Verdict::Borderline
            }
            v => v,
        }
    }

    /// The verdict of a card's fit.
    pub fn of_fit(fit: &CardFit) -> Verdict {
        Verdict::judged(fit.headroom_bytes, fit.margin_bytes, fit.reserve_bytes)
    }

    /// The headline word: "FITS", "BORDERLINE", "DOES NOT FIT".
    pub fn word(self) -> &'static str {
        match self {
            Verdict::DoesNotFit => "DOES NOT FIT",
            Verdict::Borderline => "BORDERLINE",
            Verdict::Fits => "FITS",
        }
    }

    /// The table's words: "Fits", "Borderline", "Does not fit".
    pub fn text(self) -> &'static str {
        match self {
            Verdict::DoesNotFit => "Does not fit",
            Verdict::Borderline => "Borderline",
            Verdict::Fits => "Fits",
        }
    }

    /// A stable short key (`--json`, the page's CSS class): "no", "borderline", "yes".
    pub fn key(self) -> &'static str {
        match self {
            Verdict::DoesNotFit => "no",
            Verdict::Borderline => "borderline",
            Verdict::Fits => "yes",
        }
    }
}

/// An estimate's per-device need on `card`, its assumed lines and reserve as its
/// uncertainty.
pub fn fit_estimate(card: &GpuCard, estimate: &Estimate) -> CardFit {
    fit_card_reserve(
        card,
        estimate.per_device_bytes,
        assumed_margin(estimate),
        assumed_reserve(estimate),
    )
}

/// Every catalogue card against an estimate's per-device need, in catalogue order.
pub fn fit_table(estimate: &Estimate) -> Vec<CardFit> {
    CATALOGUE
        .iter()
        .map(|c| fit_estimate(c, estimate))
        .collect()
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::catalogue::find;

    #[test]
    fn headroom_is_signed_and_exact() {
        let card = find("h100-sxm-80gb").unwrap();
        let (cap, _) = card.capacity();
        let ok = fit_card(card, cap, 0);
        assert!(ok.fits);
        assert_eq!(ok.headroom_bytes, 0);
        let over = fit_card(card, cap + 1, 0);
        assert!(!over.fits);
        assert_eq!(over.headroom_bytes, -1);
        assert!(!fit_card(card, u64::MAX, 0).fits);
    }

    #[test]
    fn borderline_is_the_margin_either_side() {
        let card = find("h100-sxm-80gb").unwrap();
        let (cap, _) = card.capacity();
        let m = 1 << 30;
        let v = |need: u64| Verdict::of_fit(&fit_card(card, need, m));
        assert_eq!(v(cap - m), Verdict::Fits);
        assert_eq!(v(cap - m + 1), Verdict::Borderline);
        assert_eq!(v(cap), Verdict::Borderline);
        assert_eq!(v(cap + m), Verdict::Borderline);
        assert_eq!(v(cap + m + 1), Verdict::DoesNotFit);
        // Without uncertainty, exactly full still fits and one byte over does not.
        assert_eq!(Verdict::of(0, 0), Verdict::Fits);
        assert_eq!(Verdict::of(-1, 0), Verdict::DoesNotFit);
        assert_eq!(fit_card(card, cap + m + 1, m).verdict, "no");
    }

    #[test]
    fn an_assumed_reserve_cannot_alone_decide_a_no() {
        let card = find("h100-sxm-80gb").unwrap();
        let (cap, _) = card.capacity();
        let (m, r) = (1 << 30, 4 << 30);
        let v = |need: u64| Verdict::of_fit(&fit_card_reserve(card, need, m, r));
        // Fitting is unchanged: the reserve stays inside the need.
        assert_eq!(v(cap - m), Verdict::Fits);
        assert_eq!(v(cap - m + 1), Verdict::Borderline);
        // Short by the margin and the whole reserve: borderline; one byte more: no.
        assert_eq!(v(cap + m + r), Verdict::Borderline);
        assert_eq!(v(cap + m + r + 1), Verdict::DoesNotFit);
        assert_eq!(fit_card_reserve(card, cap + m + r, m, r).reserve_bytes, r);
        // Without a reserve the rule is the symmetric one.
        assert_eq!(Verdict::judged(-(m as i64) - 1, m, 0), Verdict::DoesNotFit);
    }

    #[test]
    fn a_label_capacity_is_uncertain_by_the_largest_shortfall_seen() {
        assert_eq!(label_shortfall_ppm(), LABEL_SHORTFALL_PPM);
        let mi300x = find("mi300x").unwrap();
        let m = margin(mi300x, 0);
        assert_eq!(
            m.capacity_bytes,
            ((192u64 << 30) * 62_989).div_ceil(1_000_000)
        );
        let h100 = find("h100-sxm-80gb").unwrap();
        assert_eq!(margin(h100, 5).capacity_bytes, 0);
        assert_eq!(margin(h100, 5).bytes, 5);
    }
}
