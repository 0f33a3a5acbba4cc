//! Fractions in parts per 10^18: exact for every decimal an engine prints (vLLM takes
//! any float, e.g. `0.8938626454842437`), and the products a rule takes of them.

use crate::error::EstimateError;

/// A fraction is held in parts per 10^18: exact for every decimal an engine prints.
pub const ONE: u64 = 1_000_000_000_000_000_000;

/// Parses a decimal fraction in (0, 1] such as "0.9" or "0.8938626454842437" into
/// parts per 10^18, exactly (up to 18 decimals, as many as a float64 prints).
#[inline(never)] // one copy for every fraction flag (the page's wasm)
pub fn parse_fraction(field: &'static str, text: &str) -> Result<u64, EstimateError> {
    let t = text.trim();
    let bad = || {
        EstimateError::invalid(
            field,
            format!("{text:?} is not a fraction in (0, 1] (at most 18 decimals), e.g. 0.9"),
        )
    };
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if (int.is_empty() && frac.is_empty())
        || frac.len() > 18
        || int.len() > 1
        || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    let mut v: u64 = 0;
    for (i, c) in int
        .bytes()
        .chain(frac.bytes())
        .chain(std::iter::repeat(b'0'))
        .enumerate()
    {
        if i >= int.len().saturating_add(18) {
            break;
        }
        v = v
            .checked_mul(10)
            .and_then(|x| x.checked_add(u64::from(c.saturating_sub(b'0'))))
            .ok_or_else(bad)?;
    }
    if v == 0 || v > ONE {
        return Err(bad());
    }
    Ok(v)
}

/// A fraction in parts per 10^18 as a decimal ("0.9").
pub fn fraction_text(f: u64) -> String {
    let whole = f.checked_div(ONE).unwrap_or(0);
    let part = f.checked_rem(ONE).unwrap_or(0);
    if part == 0 {
        return whole.to_string();
    }
    format!("{whole}.{part:018}")
        .trim_end_matches('0')
        .to_string()
}

/// `bytes × f / 10^18`, rounded down (`up`: rounded up, as vLLM's `math.ceil`).
pub(super) fn times_fraction(bytes: u64, f: u64, up: bool) -> Result<u64, EstimateError> {
    let p = u128::from(bytes)
        .checked_mul(u128::from(f))
        .ok_or(EstimateError::Overflow {
            what: "engine budget",
        })?;
    let one = u128::from(ONE);
    let v = if up {
        p.div_ceil(one)
    } else {
        p.checked_div(one).unwrap_or(0)
    };
    u64::try_from(v).map_err(|_| EstimateError::Overflow {
        what: "engine budget",
    })
}
