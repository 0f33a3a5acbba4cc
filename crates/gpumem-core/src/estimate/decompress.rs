//! compressed-tensors' decompression on the first forward: a moment before the
//! prefill, beside it as the larger of two phases.

use super::*;
use crate::arch::Role;
use weights::{ct_decompress_excess, ct_decompressed, module_formats, stored_formats};

/// What the moment holds beyond the lines it tops up: the text prefill's and the
/// towers' (all before the decompression or after it, never beside it).
fn prefill_lines(lines: &[Line]) -> Result<(u64, u64), EstimateError> {
    let (text, text_device) = tower::text_prefill(lines)?;
    lines
        .iter()
        .filter(|l| {
            l.in_total
                && matches!(
                    l.key,
                    LineKey::PrefillVisionTower | LineKey::PrefillAudioTower
                )
        })
        .try_fold((text, text_device), |(s, d), l| {
            Some((s.checked_add(l.bytes)?, d.checked_add(l.device_bytes)?))
        })
        .ok_or(EstimateError::Overflow {
            what: "decompression",
        })
}

/// The moment of compressed-tensors' decompression (compressed-tensors 0.20.1
/// `compressors/model_compressors/model_compressor.py` `add_decompress_hook`: a
/// forward pre-hook, so before the first forward's activations and its KV cache;
/// `decompress_model` decompresses the quantised modules one by one in
/// `named_modules` order, each module's compressed values freed when its
/// `decompress_module` returns). At module i the earlier modules are dense, the
/// later ones still compressed: beyond the weights' lines (every module dense) it
/// holds [`ct_decompress_excess`] of module i less what the later modules' dense
/// state will add. The line takes the largest excess of any quantised linear —
/// exact where that linear is the last decompressed (a decoder's last `down_proj`,
/// `lm_head` left out by `ignore`), above the moment elsewhere — less the prefill's
/// lines it stands beside, never below zero ([`tower::top_up`]'s rule).
pub(super) fn decompress_moment(
    input: &EstimateInput,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    let Some(a) = input.arch else { return Ok(()) };
    let stored = stored_formats(input)?;
    let formats = module_formats(input)?;
    let mut widest: Option<(u64, &'static str, u64, u64)> = None;
    for t in a.tensors()? {
        if !matches!(t.role, Role::Linear | Role::AttnLinear) {
            continue;
        }
        let (was, now) = (stored.for_group(&t), formats.for_group(&t));
        if was == now || !ct_decompressed(input, was) {
            continue;
        }
        let excess = ct_decompress_excess(was, now, t.rows, t.cols)?;
        // The later of equals: the one decompressed last holds the moment.
        if widest.is_none_or(|w| excess >= w.0) {
            widest = Some((excess, t.name, t.rows, t.cols));
        }
    }
    let Some((moment, name, rows, cols)) = widest else {
        return Ok(());
    };
    if moment == 0 {
        return Ok(());
    }
    let prefill = prefill_lines(&b.lines)?;
    let (bytes, device) = tower::top_up(moment, 0, prefill);
    b.line(
        LineKey::PrefillDecompress,
        "compressed-tensors decompression beyond the prefill",
        bytes,
        device,
        Kind::Computed,
        true,
        format!(
            "max(0, {name} ({rows} × {cols}) decompressing: its compressed values and dequantisation temporaries {moment} B − the prefill's lines {} B)",
            prefill.0
        ),
        &[("moment", moment.to_string()), ("module", name.into())],
    );
    Ok(())
}

/// After traced figures replace the text prefill's lines (and the towers' are
/// topped up again), the decompression's line is topped up over them.
pub(super) fn retop(lines: &mut [Line]) -> Result<(), EstimateError> {
    let prefill = prefill_lines(lines)?;
    for l in lines
        .iter_mut()
        .filter(|l| l.key == LineKey::PrefillDecompress)
    {
        let Some(moment) = l.inputs.get("moment").and_then(|v| v.parse::<u64>().ok()) else {
            continue;
        };
        tower::retop_line(l, moment, 0, prefill);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(name: &str) -> StorageFormat {
        StorageFormat::parse("format", name).unwrap()
    }

    /// The moment against compressed-tensors 0.20.1 run on the CPU
    /// (`tests/cases/meta_check.py --compressed-tensors`). A two-layer Llama (hidden
    /// 256, intermediate 512) loaded by transformers 5.23, its first forward's
    /// decompression tracked storage by storage up to a pre-hook after
    /// compressed-tensors': the peak less what is live then is the last module's
    /// (`layers.1.mlp.down_proj`, 256 × 512) excess — 3 B a value in fp8-channel (the
    /// fp8 values and a second bf16 tensor), 3.5 B in W4A16 (the packed nibbles, the
    /// int8 values and a second bf16 tensor). One module of each other format through
    /// `decompress_module`: what it allocates and holds at its peak beside the stored
    /// tensors — the excess less the stored layout plus the state after.
    #[test]
    fn the_moment_is_compressed_tensors_own() {
        let bf16 = StorageFormat::BF16;
        let excess =
            |f: &str, rows, cols| ct_decompress_excess(format(f), bf16, rows, cols).unwrap();
        assert_eq!(excess("fp8-channel", 256, 512), 393_216);
        assert_eq!(excess("w4a16-g128", 256, 512), 458_752);
        let held = |f: &str, rows, cols| {
            let was = format(f);
            excess(f, rows, cols) - was.matrix_bytes(rows, cols).unwrap().bytes
                + bf16.matrix_bytes(rows, cols).unwrap().bytes
                + weights::ct_kept_scales(was, rows, cols).unwrap()
        };
        assert_eq!(held("fp8-channel", 512, 256), 524_288);
        assert_eq!(held("w4a16-g128", 512, 256), 655_360);
        // 200 × 300 padded to 256 × 384: the fp8 copy, then two bf16 tensors.
        assert_eq!(held("fp8-block", 200, 300), 491_520);
        // 23 B a value and the table's 32 B on the device (the CPU run copies none: + 32).
        assert_eq!(held("nvfp4", 512, 256), 3_014_656 + 32);
        assert_eq!(held("nvfp4a16", 512, 256), 3_014_656 + 32);
        // Not a compressed-tensors format, or nothing decompressed: nothing.
        assert_eq!(excess("int8", 512, 256), 0);
        assert_eq!(
            ct_decompress_excess(format("fp8-channel"), format("fp8-channel"), 512, 256).unwrap(),
            0
        );
    }
}
