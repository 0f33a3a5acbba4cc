//! `quantization_config`: the storage format it names, in this crate's vocabulary
//! (GPTQ, AWQ, fp8, MXFP4, bitsandbytes, compressed-tensors, MLX), and whether the
//! quantiser left the attention projections out.
//!
//! An MLX checkpoint (mlx-lm's `convert`, ml-explore/mlx-lm d78bf58e
//! `mlx_lm/utils.py` `quantize_model`) writes `"quantization": {"group_size": 64,
//! "bits": 4, "mode": "affine"}` and the same object again as `quantization_config`,
//! with no `quant_method`; layers quantised otherwise are keys of it naming their path
//! (`"model.layers.0.mlp.gate": {"group_size": 64, "bits": 8}`, or `false`).

use serde_json::Value;

use super::decoder::Draft;

/// The formats of the linear layers and (when kept out) of the attention
/// projections, with the note that says so; an unknown quantiser is warned about.
pub(crate) fn read(q: Option<&Value>, d: &mut Draft) -> (Option<String>, Option<String>) {
    let Some((f, keep_attention)) = format(q, &mut d.warnings) else {
        return (None, None);
    };
    if f.starts_with("mlx-") || is_mlx(q) {
        d.notes.push(format!(
            "quantization: MLX {f} for every linear layer, the embeddings and lm_head (mlx-lm quantises every module it can); norms kept in 16 bits"
        ));
        return (Some(f), None);
    }
    let kept = keep_attention.then(|| match d.dtype.as_deref() {
        Some("float16") => "fp16".to_string(),
        Some("float32") => "fp32".to_string(),
        _ => "bf16".to_string(),
    });
    d.notes.push(format!(
        "quantization_config: linear layers {f}{}; embeddings, lm_head, norms, biases and routers kept in 16 bits",
        kept.as_ref()
            .map(|k| format!(", attention projections kept in {k} (not converted)"))
            .unwrap_or_default()
    ));
    (Some(f), kept)
}

/// Whether a quantisation object is compressed-tensors' (`"quant_method":
/// "compressed-tensors"`), whose formats transformers loads differently from the
/// same formats written by other quantisers (see
/// `crate::estimate::weights::ct_decompressed`).
pub(crate) fn is_compressed_tensors(q: Option<&Value>) -> bool {
    q.and_then(|q| q.get("quant_method"))
        .and_then(Value::as_str)
        .is_some_and(|m| m.eq_ignore_ascii_case("compressed-tensors"))
}

/// Whether a module-name list (`modules_to_not_convert`, `ignore`) keeps the
/// attention projections out of quantisation.
fn keeps_attention(list: Option<&Value>) -> bool {
    list.and_then(Value::as_array).is_some_and(|l| {
        l.iter()
            .filter_map(Value::as_str)
            .any(|m| m.contains("self_attn") || m.ends_with(".attn") || m.contains("attention"))
    })
}

/// Whether a quantisation object is mlx-lm's (no `quant_method`, a `group_size`
/// and `bits`).
fn is_mlx(q: Option<&Value>) -> bool {
    q.is_some_and(|q| {
        q.get("quant_method").is_none() && q.get("bits").is_some() && q.get("group_size").is_some()
    })
}

/// mlx-lm's quantisation object: its mode's format (ml-explore/mlx 846d17622
/// `mlx/ops.cpp` `quantize`: "affine" packs `bits` with a 16-bit scale and bias per
/// group; "mxfp4" is OCP MXFP4's layout, E2M1 values and an E8M0 scale per 32;
/// "nvfp4" E2M1 values and an FP8 scale per 16), and a warning for each layer
/// given its own parameters (counted at the model's).
fn mlx(q: &Value, warnings: &mut Vec<String>) -> Option<String> {
    let bits = q.get("bits").and_then(Value::as_u64)?;
    let group = q.get("group_size").and_then(Value::as_u64)?;
    let mode = q.get("mode").and_then(Value::as_str).unwrap_or("affine");
    let overrides = q
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(_, v)| v.is_object() || v.is_boolean())
                .count()
        })
        .unwrap_or(0);
    if overrides > 0 {
        warnings.push(format!(
            "quantization: {overrides} layers carry their own parameters (or none); they are counted at the model's {bits} bits, group {group}"
        ));
    }
    let name = match mode {
        "affine" => format!("mlx-{bits}-g{group}"),
        "mxfp4" if bits == 4 && group == 32 => "mxfp4".into(),
        // MLX stores no global scale: nvfp4a16 counts 4 bytes more per tensor.
        "nvfp4" if bits == 4 && group == 16 => "nvfp4a16".into(),
        _ => {
            warnings.push(format!(
                "quantization (MLX mode {mode:?}, {bits} bits, group {group}) is not modelled: weights are counted in the format you give (bf16 by default)"
            ));
            return None;
        }
    };
    if crate::format::StorageFormat::parse("quantization", &name).is_err() {
        warnings.push(format!(
            "quantization ({bits} bits, group {group}) is not one MLX accepts: weights are counted in the format you give (bf16 by default)"
        ));
        return None;
    }
    Some(name)
}

/// The storage-format name for a `quantization_config`, and whether it leaves the
/// attention projections unquantised; an unrecognised method is warned about.
pub(crate) fn format(q: Option<&Value>, warnings: &mut Vec<String>) -> Option<(String, bool)> {
    let q = q?;
    if is_mlx(Some(q)) {
        return mlx(q, warnings).map(|n| (n, false));
    }
    let method = q
        .get("quant_method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    let bits = q.get("bits").and_then(Value::as_u64).unwrap_or(4);
    let group = q.get("group_size").and_then(Value::as_i64).unwrap_or(128);
    let skip = keeps_attention(q.get("modules_to_not_convert"));
    let name = match method.as_str() {
        "gptq" if group > 0 => Some(format!("gptq-{bits}-g{group}")),
        "awq" if group > 0 => Some(format!("awq-{bits}-g{group}")),
        "fp8" => Some(
            if q.get("weight_block_size").is_some() {
                "fp8-block"
            } else {
                "fp8"
            }
            .into(),
        ),
        "mxfp4" => Some("mxfp4".into()),
        "bitsandbytes" => {
            if q.get("load_in_8bit").and_then(Value::as_bool) == Some(true) {
                Some("int8".into())
            } else {
                let ty = q
                    .get("bnb_4bit_quant_type")
                    .and_then(Value::as_str)
                    .unwrap_or("fp4");
                let dq = q.get("bnb_4bit_use_double_quant").and_then(Value::as_bool) == Some(true);
                Some(format!("{ty}{}", if dq { "-dq" } else { "" }))
            }
        }
        "compressed-tensors" => {
            let f = compressed_tensors(q);
            let ignore = keeps_attention(q.get("ignore"));
            return match f {
                Some(f) => Some((f, ignore)),
                None => {
                    warnings.push("quantization_config: this compressed-tensors scheme is not modelled; weights are counted in bf16".into());
                    None
                }
            };
        }
        _ => None,
    };
    if name.is_none() {
        warnings.push(format!(
            "quantization_config (quant_method {method:?}) is not modelled: weights are counted in the format you give (bf16 by default)"
        ));
    }
    name.map(|n| (n, skip))
}

/// compressed-tensors `config_groups`: the first group's weight scheme.
fn compressed_tensors(q: &Value) -> Option<String> {
    let groups = q.get("config_groups")?.as_object()?;
    if groups.len() != 1 {
        return None;
    }
    let group = groups.values().next()?;
    let w = group.get("weights")?;
    let activations = group.get("input_activations").is_some_and(|a| !a.is_null());
    let bits = w.get("num_bits")?.as_u64()?;
    let ty = w.get("type").and_then(Value::as_str).unwrap_or("int");
    let strategy = w
        .get("strategy")
        .and_then(Value::as_str)
        .unwrap_or("tensor");
    match (bits, ty, strategy) {
        (4, "float", "tensor_group") => Some(if activations { "nvfp4" } else { "nvfp4a16" }.into()),
        (8, "float", "channel") => Some("fp8-channel".into()),
        (8, "float", "block") => Some("fp8-block".into()),
        (4, "int", "group") if w.get("symmetric").and_then(Value::as_bool) != Some(false) => {
            let g = w.get("group_size")?.as_u64()?;
            Some(format!("w4a16-g{g}"))
        }
        _ => None,
    }
}
