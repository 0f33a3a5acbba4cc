//! The requested size in an out-of-memory message, as PyTorch prints it: "CUDA out of
//! memory. Tried to allocate 20.00 MiB …" (also "HIP out of memory"). PyTorch formats the
//! size with two decimals (c10 `format_size`), so the value is the printed one, not the
//! exact request; integer arithmetic only.

/// Bytes of "Tried to allocate N UNIT" in `text`, or `None` when absent or malformed.
pub fn requested_bytes(text: &str) -> Option<u64> {
    const KEY: &str = "Tried to allocate ";
    let rest = &text[text.find(KEY)? + KEY.len()..];
    let mut words = rest.split_whitespace();
    let number = words.next()?;
    let unit = words.next()?.trim_end_matches(['.', ',', ';', ')']);
    let scale: u64 = match unit {
        "bytes" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || frac.len() > 6 {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let frac_value: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let denominator = 10u64.pow(u32::try_from(frac.len()).ok()?);
    whole
        .checked_mul(scale)?
        .checked_add(frac_value.checked_mul(scale)? / denominator)
}

#[cfg(test)]
mod tests {
    use super::requested_bytes;

    #[test]
    fn sizes_as_pytorch_prints_them() {
        let cases = [
            (
                "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has",
                Some(20 << 20),
            ),
            (
                "HIP out of memory. Tried to allocate 1.50 GiB (GPU 0; …)",
                Some(3 << 29),
            ),
            ("Tried to allocate 512 bytes", Some(512)),
            ("Tried to allocate 2.25 KiB.", Some(2304)),
            ("out of memory", None),
            ("Tried to allocate lots MiB", None),
            ("Tried to allocate 1.5 parsecs", None),
            ("Tried to allocate 99999999999999999999 GiB", None),
            ("Tried to allocate -3 MiB", None),
            ("Tried to allocate ", None),
        ];
        for (text, expected) in cases {
            assert_eq!(requested_bytes(text), expected, "{text}");
        }
    }
}
